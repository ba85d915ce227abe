"""Where the nodes are: node lists (``host:port`` as ``codec.nodes`` parses it), the
client's view of the cluster (:class:`Topology`) and consumer affinity. HELLO's reply
and its entries are ``codec.nodes``'s (re-exported here)."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from ..codec.nodes import Address, Hello, NodeInfo, parse_address, parse_hello
from .replies import Job

__all__ = ["Address", "Hello", "NodeInfo", "NodeSpec", "parse_address", "parse_hello",
           "parse_nodes", "fmt_addr", "tls_options", "Topology", "Affinity"]

NodeSpec = str | Address


def tls_options(ssl: bool, ssl_ca_certs: str | None, ssl_certfile: str | None,
                ssl_keyfile: str | None, ssl_check_hostname: bool) -> dict[str, Any]:
    """redis-py's keyword arguments for a TLS connection (empty without ``ssl``): the
    server's certificate is verified against ``ssl_ca_certs`` (the system's CAs when
    None), and ``ssl_certfile``/``ssl_keyfile`` are shown to a server that asks for a
    client certificate (``tls-auth-clients yes``)."""
    if not ssl:
        return {}
    return {"ssl": True, "ssl_ca_certs": ssl_ca_certs, "ssl_certfile": ssl_certfile,
            "ssl_keyfile": ssl_keyfile, "ssl_check_hostname": ssl_check_hostname}


def parse_nodes(nodes: NodeSpec | Sequence[NodeSpec] | None) -> list[Address]:
    if nodes is None:
        return [("127.0.0.1", 7711)]
    if isinstance(nodes, (str, tuple)):
        nodes = [nodes]
    out: list[Address] = []
    for n in nodes:
        a = parse_address(n)
        if a not in out:
            out.append(a)
    if not out:
        raise ValueError("empty node list")
    return out


def fmt_addr(a: Address) -> str:
    return f"{a[0]}:{a[1]}"


class Topology:
    """What the client knows of the cluster: seeds, HELLO's nodes, failed/leaving marks.

    ``candidates()`` orders the addresses to try: the best HELLO priority first, nodes
    that failed recently last (they are retried when nothing else answers).
    """

    FAIL_COOLDOWN = 5.0  # seconds a failed node is tried only as a last resort

    def __init__(self, seeds: list[Address]) -> None:
        self.seeds = list(seeds)
        self.nodes: dict[str, NodeInfo] = {}  # id -> info (from the last HELLO)
        self.failed: dict[Address, float] = {}  # address -> monotonic time of failure
        self.penalty: dict[Address, int] = {}  # extra priority (e.g. answered -LEAVING)

    def update(self, hello: Hello) -> None:
        self.nodes = {n.id: n for n in hello.nodes if n.host}

    def mark_failed(self, addr: Address) -> None:
        self.failed[addr] = time.monotonic()

    def mark_ok(self, addr: Address) -> None:
        self.failed.pop(addr, None)

    def mark_leaving(self, addr: Address) -> None:
        self.penalty[addr] = 1000

    def priority_of(self, addr: Address) -> int:
        for n in self.nodes.values():
            if (n.host, n.port) == addr:
                return n.priority + self.penalty.get(addr, 0)
        return 1 + self.penalty.get(addr, 0)

    def address_of(self, prefix: str) -> Address | None:
        for nid, n in self.nodes.items():
            if nid.startswith(prefix):
                return (n.host, n.port)
        return None

    def candidates(self, shuffle: bool = True) -> list[Address]:
        addrs: list[Address] = []
        known = [(n.host, n.port) for n in self.nodes.values()]
        seeds = list(self.seeds)
        if shuffle:
            random.shuffle(seeds)
            random.shuffle(known)
        for a in known + seeds:
            if a not in addrs:
                addrs.append(a)
        now = time.monotonic()

        def key(a: Address) -> tuple[bool, int]:
            failed_at = self.failed.get(a)
            recent = failed_at is not None and now - failed_at < self.FAIL_COOLDOWN
            return (recent, self.priority_of(a))

        addrs.sort(key=key)  # stable: random order among equals
        return addrs


class Affinity:
    """Counts received jobs by creating node and says when to move, with hysteresis.

    Every ``window`` received jobs the counts are looked at: if one node produced at
    least ``ratio`` times the jobs the current node produced, and at least half of all
    the jobs counted, move there. Counts then halve, so old history fades; a consumer
    fed evenly by several nodes stays where it is.
    """

    def __init__(self, window: int = 32, ratio: float = 2.0) -> None:
        self.window = window
        self.ratio = ratio
        self.counts: dict[str, int] = {}
        self.seen = 0

    def observe(self, jobs: list[Job], current_prefix: str | None) -> str | None:
        """Count ``jobs``; return the node prefix to move to, or ``None``."""
        counts = self.counts
        for j in jobs:
            p = j.id[2:10]
            counts[p] = counts.get(p, 0) + 1
        self.seen += len(jobs)
        if self.seen < self.window:
            return None
        self.seen = 0
        best = max(counts, key=counts.__getitem__)
        best_n = counts[best]
        here = counts.get(current_prefix, 0) if current_prefix else 0
        total = sum(counts.values())
        for k in list(counts):
            counts[k] //= 2
            if not counts[k]:
                del counts[k]
        if best != current_prefix and best_n * 2 >= total and best_n >= self.ratio * max(here, 1):
            return best
        return None

