"""Where nodes are, for both sides: the one ``host:port`` parser (the client's node
lists, the command line, the Spark options, nodes.conf) and HELLO's reply (the client,
the command line and the Spark connector read it with :func:`parse_hello`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7711

Address = tuple[str, int]


def parse_address(spec: str | Address, default_host: str = DEFAULT_HOST,
                  default_port: int = DEFAULT_PORT) -> Address:
    """``host:port``, ``[v6]:port``, ``v6:port`` (the last colon ends the host),
    ``:port``, ``port``, ``host`` or a ``(host, port)`` tuple as ``(host, port)``; a
    missing host is ``default_host``, a missing port ``default_port``. Raises
    ValueError, naming the text, when the port is no number in 1..65535."""
    if isinstance(spec, tuple):
        host, port = spec[0], str(spec[1])
        text = f"{host}:{port}"
    else:
        text = spec.strip()
        if text.startswith("["):  # [v6]:port
            host, sep, port = text[1:].partition("]:")
            if not sep:
                host, port = text[1:].rstrip("]"), str(default_port)
        else:
            host, sep, port = text.rpartition(":")
            if not sep:
                host, port = ("", text) if text.isdigit() else (text, str(default_port))
    if not port.isdigit():
        raise ValueError(f"Bad address {text!r}: expected HOST:PORT")
    p = int(port)
    if not 0 < p < 65536:
        raise ValueError(f"Bad address {text!r}: port out of range")
    return (host or default_host, p)


@dataclass(slots=True, frozen=True)
class NodeInfo:
    """One node of HELLO's reply (``priority``: lower is better; 1 is reachable,
    leaving and failing nodes are higher)."""

    id: str
    host: str
    port: int
    priority: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(slots=True)
class Hello:
    """HELLO's reply: format version, the answering node's ID and every node it knows."""

    version: int
    my_id: str
    nodes: list[NodeInfo] = field(default_factory=list)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def parse_hello(reply: Sequence[object], reached: Address | None = None) -> Hello:
    """HELLO's reply (bytes or str fields, as redis-py hands them) as a :class:`Hello`.
    A node with no host yet (the answering node before it learned its own address) is
    given the host the reply came from (``reached``), and the answering node its port
    too."""
    my_id = _text(reply[1])
    nodes = []
    for entry in reply[2:]:
        fields = cast("Sequence[object]", entry)
        nid, host, port = _text(fields[0]), _text(fields[1]), int(_text(fields[2]))
        if not host and reached is not None:
            host = reached[0]
            if nid == my_id:
                port = reached[1]
        nodes.append(NodeInfo(nid, host, port, int(_text(fields[3]))))
    return Hello(int(_text(reply[0])), my_id, nodes)
