"""Login sessions of ``disque-web``: a random ID in an ``HttpOnly; SameSite=Strict``
cookie, the session itself on the server.

A session holds who logged in (a node user and its password, for the connections
the requests then make as that user, :mod:`disquepy.web.acting`; or the name of a
bearer token) and when it ends (``ttl`` after the login).
It is stored under the SHA-256 of its ID, so what the server keeps cannot be
replayed as a cookie. One process keeps its sessions in memory; the processes of
``disque-web --workers N`` share them as files in a private directory their parent
made (mode 0700, removed when it stops), as they share the charts' history.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

COOKIE = "disque_web_session"
MAX_SESSIONS = 10_000  # in memory; the oldest goes first past it


@dataclass(frozen=True)
class Session:
    user: str
    kind: str  # "nodes": a node user (password kept for its connections); "token"
    password: str
    expires: float  # unix seconds


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode("ascii", "replace")).hexdigest()


class Sessions:
    def __init__(self, ttl: float, directory: str | None = None) -> None:
        self.ttl = ttl
        self.directory = Path(directory) if directory else None
        self.mem: dict[str, Session] = {}

    def create(self, user: str, kind: str, password: str = "") -> str:
        """A new session; returns its ID (the cookie's value)."""
        sid = secrets.token_urlsafe(32)
        s = Session(user, kind, password, time.time() + self.ttl)
        key = _digest(sid)
        if self.directory is not None:
            path = self.directory / key
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(asdict(s), f)
        else:
            if len(self.mem) >= MAX_SESSIONS:
                self._expire()
                while len(self.mem) >= MAX_SESSIONS:
                    del self.mem[next(iter(self.mem))]
            self.mem[key] = s
        return sid

    def get(self, sid: str) -> Session | None:
        if not sid or len(sid) > 100:
            return None
        key = _digest(sid)
        s = self.mem.get(key)
        if s is None and self.directory is not None:
            try:
                s = Session(**json.loads((self.directory / key).read_text()))
            except (OSError, ValueError, TypeError):
                return None
        if s is None:
            return None
        if s.expires < time.time():
            self.delete(sid)
            return None
        return s

    def delete(self, sid: str) -> Session | None:
        key = _digest(sid)
        s = self.mem.pop(key, None)
        if self.directory is not None:
            with contextlib.suppress(OSError):
                (self.directory / key).unlink()
        return s

    def _expire(self) -> None:
        now = time.time()
        for k in [k for k, s in self.mem.items() if s.expires < now]:
            del self.mem[k]
