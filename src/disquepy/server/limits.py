"""Connections not authenticated yet (in their TLS handshake, their cluster-secret
handshake, or before AUTH), counted per node and per source address.

``Pending.add`` admits a new connection and names the ones to close to make room: when
its address already holds ``per_ip`` of them, that address's oldest; when the node holds
``cap``, the oldest of all. A peer or client doing its handshake completes it within a
round trip or two, so the connections that stay, and get closed, are the ones that
never finish: an outsider holding idle connections cannot keep a restarting node or a
new client out, it can only make them race its own new connections. Each owner also
closes its connections that take longer than its timeout.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """Connections (any hashable handle) in arrival order, with their address."""

    __slots__ = ("cap", "per_ip", "_all", "_by_ip")

    def __init__(self, cap: int, per_ip: int) -> None:
        self.cap = cap
        self.per_ip = per_ip
        self._all: dict[T, str] = {}  # insertion order: oldest first
        self._by_ip: dict[str, dict[T, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, conn: object) -> bool:
        return conn in self._all

    def count(self, ip: str) -> int:
        mine = self._by_ip.get(ip)
        return len(mine) if mine else 0

    def add(self, conn: T, ip: str) -> list[T]:
        """Admit ``conn`` from ``ip``; returns the connections to close for it (already
        forgotten here), oldest first."""
        evict: list[T] = []
        mine = self._by_ip.get(ip)
        if mine is not None and len(mine) >= self.per_ip:
            evict.append(self._drop(next(iter(mine))))
        elif len(self._all) >= self.cap:
            evict.append(self._drop(next(iter(self._all))))
        self._all[conn] = ip
        if mine is None:
            mine = self._by_ip[ip] = {}
        mine[conn] = None
        return evict

    def remove(self, conn: T) -> bool:
        """Forget ``conn`` (authenticated or closed); False if it was not here."""
        if conn not in self._all:
            return False
        self._drop(conn)
        return True

    def _drop(self, conn: T) -> T:
        ip = self._all.pop(conn)
        mine = self._by_ip[ip]
        del mine[conn]
        if not mine:
            del self._by_ip[ip]
        return conn


__all__ = ["Pending"]
