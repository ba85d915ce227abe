"""Cluster bus framing: length-prefixed msgpack frames, one codec for bus and simulator.

A frame is a 4-byte big-endian payload length followed by the payload, a msgpack
array ``[type, sender_id, sender_port, sender_flags, *fields]`` (see
``core.messages``). Pure: no I/O. Never pickle: a peer can only ever make us build
lists, ints, bytes and strings.
"""

from __future__ import annotations

import struct
from typing import Any, Literal

import msgpack

MAX_FRAME = 1 << 30  # a YOURJOBS batch of big jobs can be large, but not unbounded
_LEN = struct.Struct(">I")


# A bus message: a msgpack array whose fields' types depend on the message type
# (``core.messages`` checks them, and names the same type ``Message``): no one static
# type describes them all, hence Any.
BusMessage = list[Any]


class BusProtocolError(Exception):
    """The peer sent something that is not a valid frame: drop the link."""


# One Packer for every frame: packb() builds a new one per call, which costs more than
# packing a small message. Safe to share: packing lists of bytes/int/str/bool runs no
# Python code, and a failed pack resets the packer.
_pack = msgpack.Packer(use_bin_type=True).pack
_pack_len = _LEN.pack


def encode_frame(msg: BusMessage | tuple[BusMessage, ...]) -> bytes:
    """One frame for a message; for a tuple of messages (a node's output to one peer
    past one BATCH, see Node.take_messages) their frames one after the other."""
    if type(msg) is tuple:
        return b"".join(map(encode_frame, msg))
    payload: bytes = _pack(msg)  # msgpack is untyped (Any): a Packer returns bytes
    return _pack_len(len(payload)) + payload


def decode_payload(payload: bytes) -> BusMessage:
    try:
        msg = msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=True)
    except Exception as e:  # msgpack raises several types for bad input
        raise BusProtocolError(f"undecodable frame: {e}") from None
    if type(msg) is not list or len(msg) < 4 or type(msg[0]) is not int:
        raise BusProtocolError("frame is not a bus message")
    return msg


class FrameReader:
    """Incremental frame parser with the feed/gets shape of the RESP readers."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def __len__(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        self._buf += data

    def pending_frame(self) -> int:
        """Bytes the frame being received will take whole (0 before its length)."""
        buf = self._buf
        return 4 + _LEN.unpack_from(buf, 0)[0] if len(buf) >= 4 else 0

    def gets(self) -> BusMessage | Literal[False]:
        """The next message (a list), or False if more bytes are needed."""
        buf = self._buf
        if len(buf) < 4:
            return False
        (n,) = _LEN.unpack_from(buf, 0)
        if n > self._max:
            raise BusProtocolError(f"frame of {n} bytes exceeds the limit")
        if len(buf) < 4 + n:
            return False
        payload = bytes(buf[4:4 + n])
        del buf[:4 + n]
        return decode_payload(payload)
