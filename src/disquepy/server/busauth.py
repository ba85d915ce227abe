"""The cluster bus's authentication: the cluster-secret handshake (version 2) and the
MAC on the frames after it. Pure: bytes in, bytes out (nonces from ``os.urandom``
unless given). The wire format is documented in docs/SECURITY.md.

Handshake
    Both ends send ``HELLO`` at once: ``b"DQBA"``, the version byte (2), a role byte
    (``C`` for the connecting node, ``A`` for the accepting one), a 32-byte random
    nonce and the sender's 40-character node ID. The *transcript* is::

        b"disquepy bus v2" | Ic | Ia | Nc | Na | len(B) (2 bytes) | B

    (``I`` node IDs, ``N`` nonces, ``c`` connector, ``a`` acceptor, ``B`` the TLS
    channel binding, ``tls-unique``, or nothing on plain TCP). The connector sends
    ``HMAC-SHA256(K, b"connector proof" | transcript)``; the acceptor checks it, then
    answers with ``HMAC-SHA256(K, b"acceptor proof" | transcript)``. Each side thus
    proves the secret ``K`` over both nonces, both node IDs and the direction: a
    handshake relayed to another node names the wrong node (the connector checks the
    acceptor's ID is the node it meant to reach), one reflected to its sender names
    that node twice or the wrong role, and one relayed between two TLS connections
    has two different channel bindings.

Frames after it (plain TCP only; TLS protects its own)
    The connector's byte stream is cut in *records* of at most ``RECORD_MAX`` bytes:
    a 4-byte big-endian length, the bytes, and a 16-byte tag, keyed BLAKE2b over the
    record's sequence number (8 bytes, from 0) and its bytes, with the key
    ``HMAC-SHA256(K, b"frame key" | transcript)``. A record that fails its tag, comes
    out of order or twice, closes the connection: nobody without the secret can add,
    change, replay or reorder a frame on a link, even one whose bytes it relays.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

MAGIC = b"DQBA"  # as a frame length it is > 1 GiB: a node without a secret refuses it
VERSION = 2
NONCE = 32
ID_LEN = 40
MAC = 32
ROLE_CONNECTOR = 0x43  # "C"
ROLE_ACCEPTOR = 0x41  # "A"
HELLO_LEN = len(MAGIC) + 2 + NONCE + ID_LEN  # 78
TAG = 16
RECORD_MAX = 1 << 16
_CONTEXT = b"disquepy bus v2"
_HEX = frozenset(b"0123456789abcdef")
_LEN = struct.Struct(">I")
_SEQ = struct.Struct(">Q")

NO_HANDSHAKE = "no cluster-secret handshake (is cluster-secret set on that node?)"
OLD_VERSION = ("the peer speaks cluster bus handshake version 1 (an older disquepy); this "
               "node speaks version 2: upgrade every node of the cluster")
WRONG_SECRET = "wrong cluster-secret"
_FORGED = "a record failed its MAC (forged, altered, replayed or out of order)"


class HandshakeError(Exception):
    """The peer failed the cluster-secret handshake; ``str()`` says how."""


class RecordError(Exception):
    """A record after the handshake is malformed or failed its tag."""


class Handshake:
    """The cluster-secret challenge-response of one connection. ``hello()`` is sent
    first by both sides; ``feed(data)`` returns the bytes to send next and, once the
    peer is proven, sets ``done``, ``peer_id`` and ``frame_key`` and keeps the bytes
    that followed the handshake in ``data`` as ``rest``. Raises ``HandshakeError``.

    ``myid`` is this node's ID; a connector's ``expect`` is the ID of the node it
    means to reach (None when it does not know it yet: CLUSTER MEET by address);
    ``binding`` is the TLS channel's ``tls-unique`` (empty on plain TCP)."""

    __slots__ = ("secret", "connector", "myid", "expect", "binding", "nonce", "peer_nonce",
                 "peer_id", "buf", "done", "rest", "frame_key", "_transcript")

    def __init__(self, secret: bytes, connector: bool, myid: str, expect: str | None = None,
                 binding: bytes = b"", nonce: bytes | None = None) -> None:
        self.secret = secret
        self.connector = connector
        self.myid = myid
        self.expect = expect
        self.binding = binding
        self.nonce = nonce or os.urandom(NONCE)
        self.peer_nonce: bytes | None = None
        self.peer_id: str | None = None
        self.buf = bytearray()
        self.done = False
        self.rest = b""
        self.frame_key = b""
        self._transcript = b""

    def hello(self) -> bytes:
        role = ROLE_CONNECTOR if self.connector else ROLE_ACCEPTOR
        return MAGIC + bytes((VERSION, role)) + self.nonce + self.myid.encode("ascii")

    def _mac(self, label: bytes) -> bytes:
        return hmac.new(self.secret, label + self._transcript, hashlib.sha256).digest()

    def _read_hello(self, buf: bytearray) -> bool:
        """Check the peer's HELLO as far as it arrived; True once it is whole."""
        head = bytes(buf[:len(MAGIC)])
        if not MAGIC.startswith(head):
            raise HandshakeError(NO_HANDSHAKE)
        if len(buf) < len(MAGIC) + 2:
            if len(buf) > len(MAGIC) and buf[4] == 1:
                raise HandshakeError(OLD_VERSION)
            return False
        version, role = buf[4], buf[5]
        if version == 1:
            raise HandshakeError(OLD_VERSION)
        if version != VERSION:
            raise HandshakeError(f"unsupported cluster bus handshake version {version} "
                                 f"(this node speaks {VERSION})")
        want = ROLE_ACCEPTOR if self.connector else ROLE_CONNECTOR
        if role != want:
            raise HandshakeError("the peer has the same role as this node (a relayed or "
                                 "reflected handshake)" if role in (ROLE_ACCEPTOR,
                                                                   ROLE_CONNECTOR)
                                 else "malformed handshake (unknown role)")
        if len(buf) < HELLO_LEN:
            return False
        nonce = bytes(buf[6:6 + NONCE])
        raw_id = bytes(buf[6 + NONCE:HELLO_LEN])
        if not _HEX.issuperset(raw_id):
            raise HandshakeError("malformed handshake (node ID)")
        peer_id = raw_id.decode("ascii")
        if nonce == self.nonce:
            raise HandshakeError("the peer echoed this node's nonce (a reflected handshake)")
        if peer_id == self.myid:
            raise HandshakeError("the peer has this node's own ID (a reflected handshake)")
        if self.connector and self.expect is not None and peer_id != self.expect:
            raise HandshakeError(f"the node there is {peer_id[:8]}, not {self.expect[:8]} "
                                 "(a relayed handshake, or another node at that address)")
        self.peer_nonce, self.peer_id = nonce, peer_id
        ic, ia = (self.myid, peer_id) if self.connector else (peer_id, self.myid)
        nc, na = (self.nonce, nonce) if self.connector else (nonce, self.nonce)
        self._transcript = (_CONTEXT + ic.encode("ascii") + ia.encode("ascii") + nc + na
                            + len(self.binding).to_bytes(2, "big") + self.binding)
        del buf[:HELLO_LEN]
        return True

    def feed(self, data: bytes) -> bytes:
        buf = self.buf
        buf += data
        out = b""
        if self.peer_nonce is None:
            if not self._read_hello(buf):
                return out
            if self.connector:
                out = self._mac(b"connector proof")
        if len(buf) < MAC:
            return out
        mine = b"acceptor proof" if self.connector else b"connector proof"
        if not hmac.compare_digest(bytes(buf[:MAC]), self._mac(mine)):
            raise HandshakeError(WRONG_SECRET)
        if not self.connector:
            out += self._mac(b"acceptor proof")
        self.rest = bytes(buf[MAC:])
        buf.clear()
        self.frame_key = self._mac(b"frame key")
        self.done = True
        return out


def _keyed(key: bytes) -> hashlib.blake2b:
    """The keyed BLAKE2b state every tag of a link starts from (copied: cheaper than
    keying each time)."""
    return hashlib.blake2b(key=key, digest_size=TAG)


def _tag(base: hashlib.blake2b, seq: int, data: bytes | memoryview) -> bytes:
    h = base.copy()
    h.update(_SEQ.pack(seq))
    h.update(data)
    return h.digest()


class Sealer:
    """The connector's side of the records: ``seal(data)`` returns the chunks to
    write for ``data`` (frames, in order), each record's tag over its sequence."""

    __slots__ = ("base", "seq")

    def __init__(self, key: bytes) -> None:
        self.base = _keyed(key)
        self.seq = 0

    def seal(self, data: bytes) -> list[bytes | memoryview]:
        n = len(data)
        if n <= RECORD_MAX:
            seq = self.seq
            self.seq = seq + 1
            return [_LEN.pack(n), data, _tag(self.base, seq, data)]
        out: list[bytes | memoryview] = []
        view = memoryview(data)
        for i in range(0, n, RECORD_MAX):
            part = view[i:i + RECORD_MAX]
            out += (_LEN.pack(len(part)), part, _tag(self.base, self.seq, part))
            self.seq += 1
        return out


class Unsealer:
    """The acceptor's side: ``feed(data)`` returns the bytes of the records completed
    and verified so far (empty while a record is still arriving); raises RecordError.
    At most one record (``RECORD_MAX`` + 20 bytes) is held."""

    __slots__ = ("base", "seq", "buf")

    def __init__(self, key: bytes) -> None:
        self.base = _keyed(key)
        self.seq = 0
        self.buf = bytearray()

    def __len__(self) -> int:
        return len(self.buf)

    def feed(self, data: bytes) -> bytes:
        buf = self.buf
        if not buf and len(data) > 4 + TAG:  # the usual read: exactly one record
            (n,) = _LEN.unpack_from(data)
            if len(data) == 4 + n + TAG and n <= RECORD_MAX:
                payload = data[4:4 + n]
                if not hmac.compare_digest(_tag(self.base, self.seq, payload), data[4 + n:]):
                    raise RecordError(_FORGED)
                self.seq += 1
                return payload
        if buf:
            buf += data
            src: bytes | bytearray = buf
        else:
            src = data
        view = memoryview(src)
        out: list[bytes] = []
        pos, end = 0, len(src)
        base, seq = self.base, self.seq
        try:
            while end - pos >= 4:
                (n,) = _LEN.unpack_from(src, pos)
                if n == 0 or n > RECORD_MAX:
                    raise RecordError(f"bad record length {n}")
                stop = pos + 4 + n
                if end < stop + TAG:
                    break
                with view[pos + 4:stop] as body, view[stop:stop + TAG] as tag:
                    if not hmac.compare_digest(_tag(base, seq, body), tag):
                        raise RecordError(_FORGED)
                    out.append(bytes(body))
                seq += 1
                pos = stop + TAG
        finally:
            view.release()
        self.seq = seq
        if src is buf:
            del buf[:pos]
        elif pos < end:
            buf += data[pos:]
        return out[0] if len(out) == 1 else b"".join(out)


__all__ = ["HELLO_LEN", "MAC", "MAGIC", "RECORD_MAX", "TAG", "VERSION", "Handshake",
           "HandshakeError", "RecordError", "Sealer", "Unsealer"]
