"""TLS contexts from the ``tls-*`` directives, as Redis reads them.

``tls-port`` adds a TLS listener beside the plain ``port`` (``port 0`` leaves TLS
only); its context shows ``tls-cert-file``/``tls-key-file`` and, following
``tls-auth-clients``, requires (``yes``, Redis's default: mutual TLS), accepts
(``optional``: verified when shown) or ignores (``no``) client certificates signed by
``tls-ca-cert-file``. ``tls-cluster yes`` puts the cluster bus over mutual TLS: the
listener requires a peer certificate from the CA and outbound links show the same
certificate and verify the peer's. Peers are reached by IP address, so, as in Redis,
the chain is verified but no host name is checked. ``tls-protocols`` bounds the
versions, ``tls-ciphers`` sets the TLSv1.2 cipher list.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core.config import Config
from .log import VERBOSE

if TYPE_CHECKING:
    from .limits import ClientGate
    from .log import RateLimited
    from .protocol import ClientBatch, ClientProtocol

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


class TlsConfigError(Exception):
    """The TLS directives do not make a usable configuration (one line, ready to log)."""


def enabled(cfg: Config) -> bool:
    return bool(cfg.tls_port or cfg.tls_cluster)


def announced_port(cfg: Config) -> int:
    """The port this node gives in gossip and HELLO (its bus is that + the offset):
    ``tls-port`` when the bus is over TLS or there is no plain port, as in Redis."""
    if cfg.tls_port and (cfg.tls_cluster or not cfg.port):
        return cfg.tls_port
    return cfg.port


def describe(e: BaseException) -> str:
    """An SSL or OS error in one short line (``CERTIFICATE_VERIFY_FAILED: unable to get
    local issuer certificate``)."""
    why = getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e)
    detail = getattr(e, "verify_message", None)
    return f"{why}: {detail}" if detail else why


def _context(cfg: Config, side: ssl._SSLMethod) -> ssl.SSLContext:
    ctx = ssl.SSLContext(side)
    versions = cfg.tls_protocols.split()
    ctx.minimum_version = _VERSIONS[versions[0]]
    ctx.maximum_version = _VERSIONS[versions[-1]]
    if cfg.tls_ciphers:
        try:
            ctx.set_ciphers(cfg.tls_ciphers)
        except ssl.SSLError as e:
            raise TlsConfigError(f"Invalid tls-ciphers '{cfg.tls_ciphers}': {describe(e)}") from None
    try:
        ctx.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(
            f"Failed to load tls-cert-file {cfg.tls_cert_file} / tls-key-file "
            f"{cfg.tls_key_file}: {describe(e)}"
        ) from None
    if cfg.tls_ca_cert_file:
        try:
            ctx.load_verify_locations(cfg.tls_ca_cert_file)
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(
                f"Failed to load tls-ca-cert-file {cfg.tls_ca_cert_file}: "
                f"{describe(e)}"
            ) from None
    return ctx


def check(cfg: Config) -> None:
    """Raise ``TlsConfigError`` if the directives contradict each other."""
    if not enabled(cfg):
        return
    what = "tls-port" if cfg.tls_port else "tls-cluster yes"
    if not cfg.tls_cert_file or not cfg.tls_key_file:
        raise TlsConfigError(f"{what} needs tls-cert-file and tls-key-file")
    if cfg.tls_cluster and not cfg.tls_ca_cert_file:
        raise TlsConfigError("tls-cluster yes needs tls-ca-cert-file (peers are verified "
                             "against it)")
    if cfg.tls_port and cfg.tls_auth_clients != "no" and not cfg.tls_ca_cert_file:
        raise TlsConfigError(f"tls-auth-clients {cfg.tls_auth_clients} needs "
                             "tls-ca-cert-file (or tls-auth-clients no)")
    if cfg.tls_port and cfg.tls_port == cfg.port:
        raise TlsConfigError("tls-port and port must differ")


def client_context(cfg: Config) -> ssl.SSLContext | None:
    """The context of the ``tls-port`` listener, or None without one."""
    if not cfg.tls_port:
        return None
    ctx = _context(cfg, ssl.PROTOCOL_TLS_SERVER)
    ctx.verify_mode = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                       "no": ssl.CERT_NONE}[cfg.tls_auth_clients]
    return ctx


def bus_contexts(cfg: Config) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """(listener, outbound) contexts of the cluster bus; (None, None) without
    ``tls-cluster``."""
    if not cfg.tls_cluster:
        return None, None
    server = _context(cfg, ssl.PROTOCOL_TLS_SERVER)
    server.verify_mode = ssl.CERT_REQUIRED
    client = _context(cfg, ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False  # peers are addressed by IP; the CA is the trust
    client.verify_mode = ssl.CERT_REQUIRED
    return server, client


# ---------------------------------------------------------------- client-port transport
# how long a client has to complete its TLS handshake
HANDSHAKE_TIMEOUT = 10.0
# one TLS record holds at most 16 KiB of plaintext and SSL_read returns one record's
READ_SIZE = 16384


class TlsServerProtocol(asyncio.Protocol):
    """TLS for one client connection, as a transport to the connection's own protocol.

    asyncio's and uvloop's TLS transports cost about 85 us of server CPU per small
    request and reply (bench/tls.py: ``SSLObject.read`` of 256 KiB per read, an mmap,
    mremap and munmap each, then reads until ``SSLWantReadError``); this one drives the
    ``SSLObject``'s C object over memory BIOs directly, one read per record. The loop
    iteration's ``ClientBatch`` (server/protocol.py) decrypts what arrived, and hands
    the records of the replies written to the socket after all the commands ran.
    It offers the transport calls ``ClientProtocol`` uses (write, close, abort,
    pause/resume_reading, get_write_buffer_size, get_extra_info) and forwards
    pause/resume_writing. A failed handshake is logged (rate-limited) and the connection
    closed; the protocol sees a connection only once it is authenticated.
    """

    __slots__ = ("ctx", "make_app", "loop", "refusals", "batch", "raw", "app", "sslobj",
                 "tls", "incoming", "outgoing", "timer", "paused", "closed", "read_queued",
                 "flush_queued", "gate", "ip", "handshaking")
    raw: asyncio.Transport  # the TCP connection (set by connection_made, the first call)

    def __init__(self, ctx: ssl.SSLContext, make_app: Callable[[], ClientProtocol],
                 loop: asyncio.AbstractEventLoop, refusals: RateLimited,
                 batch: ClientBatch, gate: ClientGate | None = None) -> None:
        self.gate = gate  # counts it as a client, not authenticated yet, from the start
        self.ip = "?"
        self.handshaking = False  # counted in gate.handshakes
        self.ctx = ctx
        self.make_app = make_app
        self.loop = loop
        self.refusals = refusals
        self.batch = batch
        self.app: ClientProtocol | None = None
        self.sslobj: ssl.SSLObject | None = None  # (handshake, certificates, unwrap)
        # its C object (private to ssl): read, write and pending without a Python frame
        self.tls: Any = None
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.timer: asyncio.TimerHandle | None = None
        self.paused = False  # the app paused reading
        self.closed = False
        self.read_queued = False  # in the batch's reads / flushes
        self.flush_queued = False

    # -- the raw TCP side ------------------------------------------------
    # (a stream server's transport: asyncio says BaseTransport)
    def connection_made(self, raw: asyncio.Transport) -> None:  # type: ignore[override]
        self.raw = raw
        peer = raw.get_extra_info("peername")
        self.ip = peer[0] if peer else "?"
        gate = self.gate
        if gate is not None:
            if gate.full(self.ip):
                self.closed = True
                raw.abort()
                return
            gate.handshakes += 1
            self.handshaking = True
            gate.admit(self)  # its client-auth-timeout covers the handshake
        else:
            self.timer = self.loop.call_later(
                HANDSHAKE_TIMEOUT, self._fail, f"no TLS handshake within {HANDSHAKE_TIMEOUT:g}s")
        self.sslobj = self.ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.tls = getattr(self.sslobj, "_sslobj", self.sslobj)

    def _handshake_over(self) -> None:
        if self.handshaking:
            self.handshaking = False
            assert self.gate is not None  # (counted in it)
            self.gate.handshakes -= 1

    def expire(self, seconds: int | None) -> None:
        """The gate closes this connection: no handshake, or no AUTH, within
        ``seconds`` (client-auth-timeout), or (None) to make room for a newer one."""
        if seconds is None:
            self.abort()
        elif self.app is None:
            self._fail(f"no TLS handshake within {seconds}s")
        else:
            self.refusals.log(VERBOSE, ("timeout", self.ip), "Closing a client connection "
                              "from %s: not authenticated within %d s (client-auth-timeout)",
                              self.ip, seconds)
            self.abort()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.incoming.write(data)
        if self.app is None:
            self._handshake()
        elif not self.paused:
            self.batch.read_later(self)

    def eof_received(self) -> bool:
        return False  # close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._handshake_over()
        if self.gate is not None:
            self.gate.release(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.app is not None:
            app, self.app = self.app, None
            app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.app is not None:
            self.app.pause_writing()

    def resume_writing(self) -> None:
        if self.app is not None:
            self.app.resume_writing()

    def _flush(self) -> None:
        if self.outgoing.pending:
            self.raw.write(self.outgoing.read())

    def _fail(self, reason: str, what: str = "Error accepting a TLS client connection") -> None:
        if self.closed:
            return
        peer = self.raw.get_extra_info("peername") or ("?",)
        self.refusals.log(VERBOSE, ("tls-client", peer[0], reason),
                          "%s from %s: %s", what, peer[0], reason)
        self.closed = True
        self.raw.abort()

    def _broken(self, e: Exception) -> None:
        """A TLS error on an established connection (a bad record, a forged alert)."""
        self._fail(describe(e), "TLS error on a client connection")

    def _handshake(self) -> None:
        assert self.sslobj is not None  # (made with the connection)
        try:
            self.sslobj.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except (ssl.SSLError, OSError) as e:
            self._flush()  # the alert, when there is one
            self._fail(describe(e))
            return
        self._flush()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self._handshake_over()
        self.app = self.make_app()
        self.app.connection_made(self)
        if not self.closed:
            self._read()  # what came with the end of the handshake

    def _read(self) -> None:
        tls, incoming = self.tls, self.incoming
        while not self.paused and not self.closed:
            try:
                data = tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # close_notify
                self.close()
                return
            except (ssl.SSLError, OSError) as e:
                self._broken(e)
                return
            if not data:  # close_notify: CPython's SSLObject.read returns b"" for it
                self.close()  # (answered, so a client waiting for ours closes at once)
                return
            if self.app is not None:
                self.app.data_received(data)
            if not incoming.pending and not tls.pending():
                break
        if not self.closed:
            self._flush()  # post-handshake messages, key updates

    # -- the transport the app sees ----------------------------------------
    def write(self, data: bytes) -> None:
        if self.closed or not data:
            return
        try:
            self.tls.write(data)
        except (ssl.SSLError, OSError) as e:  # after a close_notify, a fatal alert
            self._broken(e)
            return
        self.batch.flush_later(self)

    def writelines(self, chunks: Iterable[bytes]) -> None:
        self.write(b"".join(chunks))

    def get_write_buffer_size(self) -> int:
        size: int = self.raw.get_write_buffer_size() + self.outgoing.pending
        return size

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.raw.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        self.paused = True
        self.raw.pause_reading()

    def resume_reading(self) -> None:
        self.paused = False
        self.raw.resume_reading()
        if self.app is not None and (self.incoming.pending or self.tls.pending()):
            self.batch.read_later(self)  # records that arrived before the pause

    def is_reading(self) -> bool:
        return not self.paused and self.raw.is_reading()

    def is_closing(self) -> bool:
        return self.closed or self.raw.is_closing()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        assert self.sslobj is not None  # (not closed: made with the connection)
        with contextlib.suppress(ssl.SSLError, OSError):
            self.sslobj.unwrap()  # close_notify; the peer's answer is not awaited
        with contextlib.suppress(RuntimeError):
            self._flush()
        self.raw.close()

    def abort(self) -> None:
        self.closed = True
        self.raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self.sslobj
        if name == "peercert":
            return self.sslobj.getpeercert() if self.sslobj else default
        return self.raw.get_extra_info(name, default)
