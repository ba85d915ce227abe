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

import asyncio
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from .log import RateLimited, log

if TYPE_CHECKING:
    from ..core.config import Config
    from ..core.node import Node

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


class Slot(Protocol):
    """A client connection the gate can close: its address and how to close it."""

    ip: str

    def expire(self, seconds: int | None) -> None:
        """Close the connection: not authenticated within ``seconds`` (logged at the
        verbose level, as the slot knows what it was waiting for), or (None) closed to
        make room, which the gate logged."""


class ClientGate:
    """Admission of client connections: ``maxclients`` counting the TLS connections
    still in their handshake (Redis counts them as clients too), the connections not
    authenticated yet (``Pending``: ``client-max-unauthenticated`` and
    ``-per-ip``; one more closes the oldest) and their ``client-auth-timeout``.
    A refusal or an eviction is logged, at most one line per kind every 10 s."""

    __slots__ = ("config", "node", "loop", "pending", "handshakes", "timers", "refusals")

    def __init__(self, config: Config, node: Node, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.node = node
        self.loop = loop
        self.pending: Pending[Slot] = Pending(config.client_max_unauthenticated,
                                              config.client_max_unauthenticated_per_ip)
        self.handshakes = 0  # TLS connections in their handshake (not in node.clients)
        self.timers: dict[Slot, asyncio.TimerHandle] = {}
        self.refusals = RateLimited(log)

    def full(self, ip: str) -> bool:
        """maxclients reached: refuse the new connection from ``ip`` (counted, logged)."""
        cfg = self.config
        if len(self.node.clients) + self.handshakes < cfg.maxclients:
            return False
        self.node.stats.rejected_connections += 1
        self.refusals.warning("maxclients", "Refused a client connection from %s: max "
                              "number of clients reached (maxclients %d)", ip, cfg.maxclients)
        return True

    def admit(self, slot: Slot) -> None:
        """``slot`` is not authenticated yet: count it, close the oldest if over a cap,
        and close it too if it is still not authenticated after client-auth-timeout."""
        cfg = self.config
        pending = self.pending
        pending.cap = cfg.client_max_unauthenticated  # CONFIG SET: from now on
        pending.per_ip = cfg.client_max_unauthenticated_per_ip
        for old in pending.add(slot, slot.ip):
            self._cancel(old)
            one_ip = old.ip == slot.ip and pending.count(slot.ip) >= pending.per_ip
            self.refusals.warning(
                ("evicted", one_ip), "Closing a client connection from %s not authenticated "
                "yet to make room for a newer one (%s)", old.ip,
                f"{pending.per_ip} from that address: client-max-unauthenticated-per-ip"
                if one_ip else f"{pending.cap} in all: client-max-unauthenticated")
            old.expire(None)
        seconds = cfg.client_auth_timeout
        self.timers[slot] = self.loop.call_later(seconds, self._expired, slot, seconds)

    def release(self, slot: Slot) -> None:
        """``slot`` authenticated, or closed."""
        if self.pending.remove(slot):
            self._cancel(slot)

    def _cancel(self, slot: Slot) -> None:
        timer = self.timers.pop(slot, None)
        if timer is not None:
            timer.cancel()

    def _expired(self, slot: Slot, seconds: int) -> None:
        self.timers.pop(slot, None)
        if self.pending.remove(slot):
            slot.expire(seconds)


__all__ = ["ClientGate", "Pending", "Slot"]
