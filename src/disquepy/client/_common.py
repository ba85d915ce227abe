"""Shared by the sync and asyncio clients: types, errors, argument builders, reply parsers.

Nothing here does I/O. The two clients differ only in how they run a command; every
command's arguments are built and its reply parsed by the functions below.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.exceptions as rexc

Address = tuple[str, int]
NodeSpec = str | tuple[str, int]

# errors the server answers that mean "this node cannot serve you, use another one"
FAILOVER_CODES = frozenset({"LEAVING"})


# ---------------------------------------------------------------------------- errors


class DisqueError(rexc.RedisError):
    """Base of every error the client raises; ``code`` is the server's error code
    (``"NOJOB"``, ``"LEAVING"``, ``"ERR"``...) or ``None`` for connection problems."""

    code: str | None = None

    def __init__(self, message: str = "", code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class ResponseError(DisqueError, rexc.ResponseError):
    """An error reply from the server (also a ``redis.ResponseError``)."""


class NoJobError(ResponseError):
    """``-NOJOB``: the node does not know the job (WORKING, ENQUEUE... of an unknown ID)."""

    code = "NOJOB"


class LeavingError(ResponseError):
    """``-LEAVING``: the node is leaving the cluster; the client moves to another node."""

    code = "LEAVING"


class PausedError(ResponseError):
    """``-PAUSED``: the queue is paused in input."""

    code = "PAUSED"


class NoReplError(ResponseError):
    """``-NOREPL``: not enough reachable nodes for the requested replication level."""

    code = "NOREPL"


class TryAgainError(ResponseError):
    """``-TRYAGAIN``: a job with the same IDEMPOTENT key is still being replicated."""

    code = "TRYAGAIN"


class NoPermissionError(ResponseError, rexc.NoPermissionError):
    """``-NOPERM``: the client's ACL user may not run that command (its role)."""

    code = "NOPERM"


class NoNodesError(DisqueError, rexc.ConnectionError):
    """No node of the seed list (or learned through HELLO) accepts connections."""


# the error codes Disque (and disquepy's Redis compatibility) answer besides ERR
ERROR_CODES = frozenset({
    "NOJOB", "LEAVING", "PAUSED", "NOREPL", "TRYAGAIN", "BADID", "MAXLEN", "OOM", "NOAUTH",
    "WRONGPASS", "TOOLATE", "NOPROTO", "NOPERM", "LOADING", "READONLY", "EXECABORT",
})

_CODE_CLASSES: dict[str, type[ResponseError]] = {
    "NOJOB": NoJobError,
    "LEAVING": LeavingError,
    "PAUSED": PausedError,
    "NOREPL": NoReplError,
    "TRYAGAIN": TryAgainError,
    "NOPERM": NoPermissionError,
}


def convert_error(e: rexc.ResponseError) -> ResponseError:
    """A redis-py ``ResponseError`` as the matching :class:`ResponseError` subclass."""
    if isinstance(e, ResponseError):
        return e
    msg = str(e)
    word = msg.split(" ", 1)[0]
    code = word if word in ERROR_CODES else "ERR"  # redis-py strips a leading "ERR "
    if isinstance(e, rexc.NoPermissionError):  # ... and "NOPERM "
        code = "NOPERM"
    cls = _CODE_CLASSES.get(code, ResponseError)
    err = cls(msg, code)
    err.__cause__ = e
    return err


# ---------------------------------------------------------------------------- types


@dataclass(slots=True)
class Job:
    """A job as GETJOB or QPEEK return it.

    ``nacks`` and ``additional_deliveries`` are set when asked for
    (``get_jobs(..., with_counters=True)``), ``None`` otherwise. ``body`` is ``bytes``
    (``str`` when the client was made with ``decode_bodies=True``).
    """

    id: str
    queue: str
    body: bytes
    nacks: int | None = None
    additional_deliveries: int | None = None

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)

    @property
    def node_prefix(self) -> str:
        """The first 8 hex digits of the ID of the node that created the job."""
        return job_node_prefix(self.id)


@dataclass(slots=True, frozen=True)
class NodeInfo:
    """One node of HELLO's reply (``priority``: lower is better; leaving nodes are high)."""

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


# ---------------------------------------------------------------------------- helpers


def tls_options(ssl: bool, ssl_ca_certs: str | None, ssl_certfile: str | None,
                ssl_keyfile: str | None, ssl_check_hostname: bool) -> dict:
    """redis-py's keyword arguments for a TLS connection (empty without ``ssl``): the
    server's certificate is verified against ``ssl_ca_certs`` (the system's CAs when
    None), and ``ssl_certfile``/``ssl_keyfile`` are shown to a server that asks for a
    client certificate (``tls-auth-clients yes``)."""
    if not ssl:
        return {}
    return {"ssl": True, "ssl_ca_certs": ssl_ca_certs, "ssl_certfile": ssl_certfile,
            "ssl_keyfile": ssl_keyfile, "ssl_check_hostname": ssl_check_hostname}


def parse_node(spec: NodeSpec) -> Address:
    """``"host:port"``, ``"port"``, ``":port"`` or ``(host, port)`` as ``(host, port)``."""
    if isinstance(spec, tuple):
        host, port = spec
        return (host or "127.0.0.1", int(port))
    s = str(spec).strip()
    if s.startswith("["):  # [v6]:port
        host, _, port = s[1:].partition("]:")
        return (host, int(port))
    host, sep, port = s.rpartition(":")
    if not sep:
        return ("127.0.0.1", int(s)) if s.isdigit() else (s, 7711)
    return (host or "127.0.0.1", int(port))


def parse_nodes(nodes: NodeSpec | Sequence[NodeSpec] | None) -> list[Address]:
    if nodes is None:
        return [("127.0.0.1", 7711)]
    if isinstance(nodes, (str, tuple)):
        nodes = [nodes]
    out: list[Address] = []
    for n in nodes:
        a = parse_node(n)
        if a not in out:
            out.append(a)
    if not out:
        raise ValueError("empty node list")
    return out


def fmt_addr(a: Address) -> str:
    return f"{a[0]}:{a[1]}"


def job_node_prefix(job_id: str | bytes) -> str:
    """``D-dcb833cf-...`` -> ``dcb833cf``: who created the job."""
    if isinstance(job_id, bytes):
        job_id = job_id.decode("ascii", "replace")
    return job_id[2:10]


def _s(v: Any) -> Any:
    """bytes -> str (round-trippable for non-UTF-8), lists recursively, others as is."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    if isinstance(v, list):
        return [_s(x) for x in v]
    return v


# ---------------------------------------------------------------------------- builders


def addjob_args(queue: str, body: bytes | str, timeout_ms: int, replicate: int | None,
                delay: int | None, retry: int | None, ttl: int | None, maxlen: int | None,
                async_: bool, idempotent: str | bytes | None) -> list:
    args: list = ["ADDJOB", queue, body, timeout_ms]
    if replicate is not None:
        args += ("REPLICATE", replicate)
    if delay is not None:
        args += ("DELAY", delay)
    if retry is not None:
        args += ("RETRY", retry)
    if ttl is not None:
        args += ("TTL", ttl)
    if maxlen is not None:
        args += ("MAXLEN", maxlen)
    if async_:
        args.append("ASYNC")
    if idempotent is not None:
        args += ("IDEMPOTENT", idempotent)
    return args


def getjob_args(queues: str | Sequence[str], count: int, timeout_ms: int | None, nohang: bool,
                with_counters: bool, token: str | bytes | None) -> list:
    args: list = ["GETJOB"]
    if nohang:
        args.append("NOHANG")
    if timeout_ms is not None:
        args += ("TIMEOUT", timeout_ms)
    if count != 1:
        args += ("COUNT", count)
    if with_counters:
        args.append("WITHCOUNTERS")
    if token is not None:
        args += ("TOKEN", token)
    args.append("FROM")
    if isinstance(queues, (str, bytes)):
        args.append(queues)
    else:
        args.extend(queues)
    return args


def qscan_args(cursor: int, count: int | None, busyloop: bool, minlen: int | None,
               maxlen: int | None, importrate: int | None) -> list:
    args: list = ["QSCAN", cursor]
    if count is not None:
        args += ("COUNT", count)
    if busyloop:
        args.append("BUSYLOOP")
    if minlen is not None:
        args += ("MINLEN", minlen)
    if maxlen is not None:
        args += ("MAXLEN", maxlen)
    if importrate is not None:
        args += ("IMPORTRATE", importrate)
    return args


def jscan_args(cursor: int, count: int | None, busyloop: bool, queue: str | None,
               state: str | Iterable[str] | None, reply: str = "id") -> list:
    args: list = ["JSCAN", cursor]
    if count is not None:
        args += ("COUNT", count)
    if busyloop:
        args.append("BUSYLOOP")
    if queue is not None:
        args += ("QUEUE", queue)
    if state is not None:
        for s in [state] if isinstance(state, str) else state:
            args += ("STATE", s)
    if reply != "id":
        args += ("REPLY", reply)
    return args


# ---------------------------------------------------------------------------- parsers


def parse_jobs(reply: Any, decode_bodies: bool = False) -> list[Job]:
    """GETJOB / QPEEK replies: nil or a list of [queue, id, body, (counters)]."""
    if not reply:
        return []
    out = []
    for item in reply:
        body = item[2]
        if decode_bodies:
            body = body.decode("utf-8", "surrogateescape")
        if len(item) >= 7:
            out.append(Job(item[1].decode("ascii", "replace"),
                           item[0].decode("utf-8", "surrogateescape"), body,
                           int(item[4]), int(item[6])))
        else:
            out.append(Job(item[1].decode("ascii", "replace"),
                           item[0].decode("utf-8", "surrogateescape"), body))
    return out


@dataclass(slots=True)
class Event:
    """An event of a consumer group's queue, as ``qget`` and ``qdead`` return it.

    ``deliveries`` (1 on the first delivery to the group) is set when asked for
    (``qget(..., with_counters=True)``) and by ``qdead``; ``None`` otherwise."""

    id: str
    queue: str
    body: bytes
    deliveries: int | None = None

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


def parse_event(reply: Any, queue: str, decode_bodies: bool = False) -> Event | None:
    """QGET / QDEAD entries: nil or [id, contents(, deliveries)]."""
    if not reply:
        return None
    body = reply[1].decode("utf-8", "surrogateescape") if decode_bodies else reply[1]
    return Event(reply[0].decode("ascii", "replace"), queue, body,
                 int(reply[2]) if len(reply) > 2 else None)


def qget_args(queue: str, group: str, lease: float | None, with_counters: bool,
              max_deliveries: int | None) -> list:
    args: list = ["QGET", queue, group]
    if lease is not None:
        args += ["EX", seconds_arg(lease)]
    if with_counters:
        args.append("WITHCOUNTERS")
    if max_deliveries is not None:
        args += ["MAXDELIVERIES", max_deliveries]
    return args


def seconds_arg(v: float) -> str:
    """Seconds as the group commands take them: an integer or a plain decimal."""
    if v < 0:
        raise ValueError("seconds must be >= 0")
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}"


def status_args(cmd: str, queues: Sequence[str], groups: Sequence[str] | None) -> list:
    return [cmd, *queues, *(["GROUPS", *groups] if groups else [])]


def parse_qstatus(reply: Any) -> dict:
    """QSTATUS: {queue: {group: {field: int}}} (bananaq's fields, then disquepy's)."""
    out: dict = {}
    for name, per in reply or []:
        groups = {}
        for g, stats in zip(per[::2], per[1::2], strict=True):
            groups[g.decode("utf-8", "surrogateescape")] = {
                k.decode(): int(v) for k, v in zip(stats[::2], stats[1::2], strict=True)}
        out[name.decode("utf-8", "surrogateescape")] = groups
    return out


def parse_show(reply: Any) -> dict | None:
    """SHOW / JSCAN REPLY all: flat key-value list -> dict (``body`` stays bytes)."""
    if reply is None:
        return None
    out: dict[str, Any] = {}
    it = iter(reply)
    for k, v in zip(it, it, strict=True):
        key = k.decode("utf-8", "replace")
        out[key] = v if key == "body" else _s(v)
    return out


def parse_kv(reply: Any) -> dict | None:
    """QSTAT and similar flat key-value replies, keys and values as str."""
    if reply is None:
        return None
    it = iter(reply)
    return {k.decode("utf-8", "replace"): _s(v) for k, v in zip(it, it, strict=True)}


def parse_hello(reply: Any, connected: Address | None = None) -> Hello:
    """HELLO -> :class:`Hello`; a node with an empty address (the answering node, before
    it learned its own address) gets the address the client reached it on."""
    version = int(reply[0])
    my_id = reply[1].decode()
    nodes = []
    for n in reply[2:]:
        nid = n[0].decode()
        host = n[1].decode()
        port = int(n[2])
        if not host and connected is not None and nid == my_id:
            host = connected[0]
            port = connected[1]
        nodes.append(NodeInfo(nid, host, port, int(n[3])))
    return Hello(version, my_id, nodes)


def _num(v: str) -> Any:
    try:
        n = int(v)
    except ValueError:
        pass
    else:
        return n if str(n) == v else v
    try:
        return float(v)
    except ValueError:
        return v


def parse_info(reply: Any) -> dict:
    """INFO text -> flat dict (numbers converted); redis-py may have parsed it already."""
    if isinstance(reply, dict):
        return reply
    if isinstance(reply, bytes):
        reply = reply.decode("utf-8", "replace")
    out: dict[str, Any] = {}
    for line in reply.splitlines():
        if not line or line.startswith("#"):
            continue
        k, sep, v = line.partition(":")
        if sep:
            out[k] = _num(v)
    return out


def parse_int(reply: Any) -> int:
    return int(reply)


def parse_str(reply: Any) -> Any:
    return reply.decode("utf-8", "surrogateescape") if isinstance(reply, bytes) else reply


def parse_id(reply: Any) -> str:
    return reply.decode("ascii") if isinstance(reply, bytes) else reply


def parse_ping(reply: Any) -> bool:
    return reply is True or reply in (b"PONG", "PONG")


# ---------------------------------------------------------------------------- node choice


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

        def key(a: Address) -> tuple:
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


def result_args(result: Any) -> list:
    """``["RESULT", data]`` for ACKJOB/FASTACK (none for ``None``): bytes and str as they
    are, anything else as JSON (``default=str`` for what JSON cannot say)."""
    if result is None:
        return []
    if isinstance(result, bytes | str):
        return ["RESULT", result]
    return ["RESULT", json.dumps(result, default=str, separators=(",", ":"))]


# ---------------------------------------------------------------------------- wait_for_ack


def wait_backoff(attempt: int) -> float:
    """Poll interval of wait_for_ack: 5 ms doubling up to 250 ms."""
    return min(0.005 * (2 ** min(attempt, 10)), 0.25)
