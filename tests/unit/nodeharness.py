"""Drive a pure Node in-process with a virtual clock: no sockets, no real time."""

from __future__ import annotations

import random

from disquepy.core.config import Config
from disquepy.core.node import Node


class Harness:
    def __init__(self, now: int = 1_700_000_000_000, seed: int = 1, **config) -> None:
        cfg = Config()
        for k, v in config.items():
            setattr(cfg, k, v)
        self.now = now
        self.node = Node(cfg, f"{random.Random(seed).getrandbits(160):040x}",
                         random.Random(seed), now)
        self.client = self.node.new_client(now=now)

    def new_client(self):
        return self.node.new_client(now=self.now)

    def raw(self, *args, client=None):
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        return self.node.execute(client or self.client, argv, self.now)

    def __call__(self, *args, client=None):
        """Run a command and decode its reply into Python values."""
        return decode(self.raw(*args, client=client))

    def advance(self, ms: int) -> list:
        """Move the clock, firing every timer on the way; returns outbox replies."""
        end = self.now + ms
        while True:
            t = self.node.next_wake()
            if t is None or t > end:
                break
            self.now = max(self.now, t)
            self.node.tick(self.now)
        self.now = end
        self.node.tick(end)
        return self.drain()

    def drain(self) -> list:
        out = [(c, decode(data)) for c, data in self.node.outbox]
        self.node.outbox.clear()
        return out


class Error(str):
    pass


def decode(data):
    """Parse one RESP2/3 reply (bytes) into Python values; None for nulls."""
    if data is None:
        return "BLOCKED"
    if not isinstance(data, bytes):
        return data
    value, pos = _parse(data, 0)
    assert pos == len(data), f"trailing bytes in reply: {data[pos:]!r}"
    return value


def _parse(b: bytes, i: int):
    t = b[i:i + 1]
    end = b.index(b"\r\n", i)
    line = b[i + 1:end]
    i = end + 2
    if t == b"+":
        return line, i
    if t == b"-":
        return Error(line.decode()), i
    if t == b":":
        return int(line), i
    if t == b"_":
        return None, i
    if t == b"$":
        n = int(line)
        if n < 0:
            return None, i
        return b[i:i + n], i + n + 2
    if t in (b"*", b"%"):
        n = int(line)
        if n < 0:
            return None, i
        items = []
        for _ in range(n * (2 if t == b"%" else 1)):
            v, i = _parse(b, i)
            items.append(v)
        return items, i
    raise AssertionError(f"bad reply type {t!r} in {b!r}")
