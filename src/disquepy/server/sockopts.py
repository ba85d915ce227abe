"""Socket options shared by the client listener and the cluster bus."""

from __future__ import annotations

import socket
from typing import Any, Protocol


class _Transport(Protocol):
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


def keepalive(transport: _Transport, idle: int, nodelay: bool = False) -> None:
    """TCP keepalive on ``transport``'s socket as Redis's ``anetKeepAlive``: the first
    probe after ``idle`` seconds without traffic, then every ``idle / 3`` s, the peer
    declared dead after 3 unanswered probes. ``nodelay`` also sets TCP_NODELAY."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    try:
        if nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, idle // 3))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    except OSError:  # the socket may already be gone; nothing to tune then
        pass
