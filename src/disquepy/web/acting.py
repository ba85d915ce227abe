"""Whom a request acts as: the logged-in user's own connections to the nodes.

With ``disque-web --auth nodes`` a person logs in with a user of the nodes (its name and
password, checked by an ``AUTH`` on a node: :mod:`disquepy.web.guard`), and every command
a request runs goes out on connections authenticated as that user, so the nodes' own
ACL (roles, queue patterns: docs/SECURITY.md) decides what the request may do: one
place for who may do what, never a second copy of it here. The guard sets
:data:`ACTING` for the request; the routes' client (:class:`ActingClient`) and the
``POST /jobs`` submitter (:func:`acting_aio`) use that user's clients, or the web's own
connection (``--user``/``--password``) when the request acts as nobody in particular
(no login configured, a bearer token, the dashboard's cluster overview).

The clients of each user are kept in a small pool (:class:`UserClients`), keyed by the
user and a hash of the password, the least recently used closed past ``MAX_USERS``.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..client import AsyncDisque, Disque

MAX_USERS = 64  # users whose connections are kept open at once


@dataclass
class Clients:
    """One user's connections: a sync client for the routes (FastAPI's threads) and an
    async one for ``POST /jobs``, made on first use."""

    seeds: list[str]
    options: dict[str, Any]
    sync: Disque | None = None
    aio: AsyncDisque | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self) -> Disque:
        with self.lock:
            if self.sync is None:
                self.sync = Disque(self.seeds, **self.options)
            return self.sync

    def async_client(self) -> AsyncDisque:
        if self.aio is None:
            self.aio = AsyncDisque(self.seeds, **self.options)
        return self.aio

    async def close(self) -> None:
        with self.lock:
            sync, self.sync = self.sync, None
        if sync is not None:
            await asyncio.to_thread(sync.close)
        if self.aio is not None:
            aio, self.aio = self.aio, None
            await aio.close()


# the clients the current request acts with; None: the web's own connection
ACTING: ContextVar[Clients | None] = ContextVar("disquepy_web_acting", default=None)


def key_of(user: str, password: str) -> str:
    return hashlib.sha256(f"{user}\0{password}".encode("utf-8", "surrogateescape")).hexdigest()


class UserClients:
    """The pool: ``get(user, password)`` the clients of a user whose password was
    checked (``verify``), made once; at most ``MAX_USERS`` kept."""

    def __init__(self, seeds: list[str], connection: dict[str, Any],
                 socket_timeout: float) -> None:
        self.seeds = seeds
        # the web's own TLS settings, with each user's name and password
        self.base = {k: v for k, v in connection.items() if k not in ("username", "password")}
        self.base["socket_timeout"] = socket_timeout
        self.pool: OrderedDict[str, Clients] = OrderedDict()

    def known(self, user: str, password: str) -> Clients | None:
        """The clients of a user already verified with this password, else None."""
        k = key_of(user, password)
        c = self.pool.get(k)
        if c is not None:
            self.pool.move_to_end(k)
        return c

    async def verify(self, user: str, password: str) -> Clients | None:
        """AUTH as ``user`` on a node (HELLO after AUTH, through the async client):
        its clients when the node accepts the password, None when it refuses it.
        Raises the client's error when no node answers."""
        c = self.known(user, password)
        if c is not None:
            return c
        c = Clients(self.seeds, {**self.base, "username": user, "password": password})
        try:
            await c.async_client().connect()
        except Exception as e:
            await c.close()
            if _refused(e):
                return None
            raise
        self.pool[key_of(user, password)] = c
        while len(self.pool) > MAX_USERS:
            _, old = self.pool.popitem(last=False)
            await old.close()
        return c

    async def forget(self, user: str, password: str) -> None:
        c = self.pool.pop(key_of(user, password), None)
        if c is not None:
            await c.close()

    async def close(self) -> None:
        while self.pool:
            await self.pool.popitem()[1].close()


def _refused(e: Exception) -> bool:
    """The node refused the credentials (rather than not answering)."""
    import redis.exceptions as rexc

    if isinstance(e, rexc.AuthenticationError):
        return True
    code = getattr(e, "code", None)
    return code in ("WRONGPASS", "NOAUTH", "NOPERM") or "WRONGPASS" in str(e)


class ActingClient:
    """The routes' client: every attribute is the current request's user's
    :class:`~disquepy.client.Disque` (:data:`ACTING`), or the web's own."""

    __slots__ = ("_own",)

    def __init__(self, own: Disque) -> None:
        self._own = own

    def __getattr__(self, name: str) -> Any:
        acting = ACTING.get()
        return getattr(self._own if acting is None else acting.client(), name)


def acting_aio(own: AsyncDisque) -> AsyncDisque:
    """The async client ``POST /jobs`` submits with: the request's user's, or ``own``."""
    acting = ACTING.get()
    return own if acting is None else acting.async_client()
