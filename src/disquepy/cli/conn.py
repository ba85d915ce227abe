"""Where the command line connects, and the raw command path (redis-cli's layer)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..codec.nodes import parse_address
from .reply import ReplyParser, ServerError

if TYPE_CHECKING:
    from disquepy.client import Disque

CONNECT_TIMEOUT = 5.0


class CliError(click.ClickException):
    """A failure reported as one line on stderr with exit code 1, never a traceback."""

    def show(self, file: Any = None) -> None:
        click.echo(self.format_message(), err=True)


def connection_reason(exc: BaseException) -> str:
    """The useful part of a redis-py connection error (``Connection refused``)."""
    text = str(exc.args[0]) if exc.args else str(exc) or type(exc).__name__
    m = re.match(r"Error (?:-?\d+ )?connecting to \S+?:\d+\.\s*(.*)", text)
    if m and m.group(1):
        text = m.group(1)
    return text.rstrip(".") or type(exc).__name__


def connection_message(exc: BaseException, default_addr: str) -> str:
    """"Could not connect to Disque at H:P: reason", with the address redis-py names in
    the error when there is one (the failing node may not be the one given with -h/-p)."""
    text = str(exc.args[0]) if exc.args else ""
    m = re.search(r"(?:connecting to|reading from|writing to) (\S+?:\d+)", text)
    return f"Could not connect to Disque at {m.group(1) if m else default_addr}: " \
           f"{connection_reason(exc)}"


def parse_addr(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``host:port``, ``:port`` or ``port`` (codec.nodes's parser) to ``(host, port)``;
    raises CliError if bad."""
    try:
        return parse_address(text, default_host)
    except ValueError as e:
        raise CliError(str(e)) from None


@dataclass
class Target:
    """The node the command line talks to (from ``-h``, ``-p``, ``-a``, ``--user``)."""

    host: str = "127.0.0.1"
    port: int = 7711
    password: str | None = None
    user: str | None = None  # an ACL user: AUTH user password
    raw: bool = False
    tls: bool = False  # --tls, with --cacert, --cert, --key as redis-cli
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    _clients: list[redis.Redis | Disque] = field(default_factory=list, repr=False)

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def tls_options(self) -> dict[str, Any]:  # keyword arguments of several types
        """redis-py's TLS keyword arguments for --tls (empty without it)."""
        from disquepy.client.nodes import tls_options

        return tls_options(self.tls, self.cacert, self.cert, self.key, True)

    def redis(self, host: str | None = None, port: int | None = None,
              socket_timeout: float | None = 10.0,
              connect_timeout: float = CONNECT_TIMEOUT) -> redis.Redis:
        """A redis-py client (RESP2) on this node or on ``host:port``; closed at exit."""
        c = redis.Redis(host=host or self.host, port=port or self.port,
                        username=self.user, password=self.password, protocol=2,
                        socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout,
                        retry=Retry(NoBackoff(), 0),  # report failures at once, no retries
                        **self.tls_options)
        self._clients.append(c)
        return c

    def client(self, host: str | None = None, port: int | None = None) -> Disque:
        """A :class:`disquepy.client.Disque` seeded with this node only; closed at exit.

        Its node is checked with a PING first, so an unreachable node is reported as
        such (the client would say "no node reachable")."""
        from disquepy.client import Disque

        self.redis(host, port, socket_timeout=CONNECT_TIMEOUT).ping()
        c = Disque([f"{host or self.host}:{port or self.port}"], password=self.password,
                   username=self.user, socket_timeout=10.0, socket_connect_timeout=CONNECT_TIMEOUT,
                   **self.tls_options)
        self._clients.append(c)
        return c

    def close(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()


class RawSession:
    """One connection sending commands as typed and returning replies unconverted.

    Replies keep status and error text apart (see :mod:`disquepy.cli.reply`); error replies
    are returned, not raised. A connection the server closed meanwhile (a restart) is
    noticed before the next command and opened again, so a command is never sent twice.
    """

    def __init__(self, host: str, port: int, password: str | None = None,
                 tls: dict[str, Any] | None = None, username: str | None = None) -> None:
        self.host, self.port = host, port
        tls = dict(tls or {})
        cls = redis.SSLConnection if tls.pop("ssl", False) else redis.Connection
        self.conn = cls(host=host, port=port, username=username, password=password,
                        protocol=2,
                        parser_class=ReplyParser, socket_connect_timeout=CONNECT_TIMEOUT,
                        **tls)

    @property
    def connected(self) -> bool:
        return getattr(self.conn, "_sock", None) is not None

    def connect(self) -> None:
        """Open the connection now (raises ``redis.ConnectionError``)."""
        if not self.connected:
            self.conn.connect()

    def call(self, *args: bytes) -> Any:
        """Send one command and return its reply (a :class:`ServerError` for ``-ERR``;
        None when SHUTDOWN closed the connection)."""
        if self.connected:
            try:
                stale = self.conn.can_read(timeout=0)  # data or EOF before we asked: stale
            except redis.ConnectionError:
                stale = True
            if stale:
                self.conn.disconnect()
        self.conn.send_command(*args)
        try:
            return self.conn.read_response()
        except ServerError as e:
            return e
        except redis.ConnectionError:
            # SHUTDOWN's only answer is the connection closing: that is success
            if args and bytes(args[0]).lower() == b"shutdown":
                self.conn.disconnect()
                return None
            raise

    def close(self) -> None:
        self.conn.disconnect()
