"""``disque top``: a live table of queues and nodes across the cluster."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import click
import redis
from rich.console import Group, JustifyMethod
from rich.live import Live
from rich.table import Table

from ..codec.nodes import NodeInfo
from .cluster import discover
from .conn import Target
from .ui import console, human_bytes, pairs, text

MAX_SCAN_CALLS = 1000  # bound on QSCAN round trips per node and refresh


@dataclass
class NodeSample:
    """What one node reported in one refresh (``info`` is None when it did not answer)."""

    addr: str
    id: str
    info: dict[str, Any] | None  # INFO's fields: ints, floats, strings, as each one is
    error: str = ""


@dataclass
class Sample:
    """One refresh: every node's INFO and every queue's QSTAT, per node."""

    t: float
    nodes: list[NodeSample] = field(default_factory=list)
    # (queue, addr) -> QSTAT's fields
    qstats: dict[tuple[str, str], dict[str, object]] = field(default_factory=dict)


def _scan_queues(c: redis.Redis) -> list[str]:
    names: set[str] = set()
    cursor = b"0"
    for _ in range(MAX_SCAN_CALLS):
        cursor, batch = c.execute_command("QSCAN", cursor, "COUNT", 1000)
        names.update(text(q) for q in batch)
        if cursor in (b"0", 0, "0"):
            break
    return sorted(names)


def _nodes(target: Target, known: list[NodeInfo]) -> list[NodeInfo]:
    """The nodes HELLO shows, asking the target first, then any node seen before."""
    try:
        return discover(target)
    except redis.RedisError:
        pass
    for n in known:
        if (n.host, n.port) == (target.host, target.port):
            continue
        try:
            seed = replace(target, host=n.host, port=n.port, _clients=[])
            try:
                return discover(seed)
            finally:
                seed.close()
        except redis.RedisError:
            continue
    return []


def take_sample(target: Target, clients: dict[str, redis.Redis],
                known: list[NodeInfo] | None = None) -> Sample:
    """Ask every node known by HELLO for INFO, QSCAN and QSTAT.

    ``known`` (updated) are the nodes seen so far: when the target stops answering, the
    others are asked for HELLO, and nodes no longer listed are shown as down.
    """
    s = Sample(t=time.monotonic())
    known = known if known is not None else []
    nodes = _nodes(target, known)
    listed = {n.address for n in nodes}
    gone = [n for n in known if n.address not in listed]
    if nodes:
        known[:] = nodes
    for n in gone:
        s.nodes.append(NodeSample(n.address, n.id, None, "not answering"))
    if not nodes and not gone:  # the seed is down and nothing else is known
        s.nodes.append(NodeSample(target.addr, "?", None, "unreachable"))
    for n in nodes:
        c = clients.get(n.address)
        if c is None:
            c = clients[n.address] = target.redis(n.host, n.port, socket_timeout=3,
                                               connect_timeout=1)
        try:
            info = c.info()
            for q in _scan_queues(c):
                st = pairs(c.execute_command("QSTAT", q))
                if st:
                    s.qstats[(q, n.address)] = st
        except redis.RedisError as e:
            s.nodes.append(NodeSample(n.address, n.id, None, type(e).__name__))
            continue
        s.nodes.append(NodeSample(n.address, n.id, info))
    return s


def _num(v: Any) -> int:  # any reply value: what int() refuses counts as 0
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _rate(cur: float, prev: float | None, dt: float) -> str:
    if prev is None or dt <= 0:
        return "-"
    return f"{max(0.0, cur - prev) / dt:.1f}"


# one queue's counters summed over the nodes, and where it is paused
_QueueTotals = TypedDict("_QueueTotals", {
    "len": int, "blocked": int, "import": int, "nodes": int, "in": int, "out": int,
    "pin": int, "pout": int, "pause": set[str]})


def queue_table(cur: Sample, prev: Sample | None, limit: int) -> Table:
    """Per queue, summed over nodes: length, in/out rates, blocked, paused, import rate."""
    dt = cur.t - prev.t if prev else 0.0
    agg: dict[str, _QueueTotals] = {}
    for (q, addr), st in cur.qstats.items():
        a = agg.setdefault(q, {"len": 0, "blocked": 0, "import": 0, "nodes": 0,
                               "in": 0, "out": 0, "pin": 0, "pout": 0, "pause": set()})
        a["len"] += _num(st.get("len"))
        a["blocked"] += _num(st.get("blocked"))
        a["import"] += _num(st.get("import-rate"))
        a["nodes"] += 1
        a["in"] += _num(st.get("jobs-in"))
        a["out"] += _num(st.get("jobs-out"))
        p = text(st.get("pause")) or "none"
        if p != "none":
            a["pause"].add(f"{p}@{addr}" if len(cur.nodes) > 1 else p)
        # a queue new since the last refresh got all its counts meanwhile
        old = (prev.qstats.get((q, addr)) if prev else None) or {}
        a["pin"] += _num(old.get("jobs-in"))
        a["pout"] += _num(old.get("jobs-out"))
    table = Table(title=f"Queues ({len(agg)})", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("Queue", "left"), ("Length", "right"), ("In/s", "right"), ("Out/s", "right"),
        ("Blocked", "right"), ("Paused", "left"), ("Import/s", "right"), ("Nodes", "right"))
    for col, just in columns:
        table.add_column(col, justify=just, no_wrap=(col == "Queue"))
    rows = sorted(agg.items(), key=lambda kv: (-kv[1]["len"], kv[0]))
    for q, a in rows[:limit]:
        has_prev = prev is not None
        table.add_row(q, str(a["len"]),
                      _rate(a["in"], a["pin"] if has_prev else None, dt),
                      _rate(a["out"], a["pout"] if has_prev else None, dt),
                      str(a["blocked"]), ",".join(sorted(a["pause"])) or "-",
                      str(a["import"]), str(a["nodes"]))
    if len(rows) > limit:
        table.caption = f"{len(rows) - limit} more queues not shown (--limit)"
    return table


def node_table(cur: Sample, prev: Sample | None) -> Table:
    """Per node: address, ID, jobs, queues, clients, memory and ops/s."""
    dt = cur.t - prev.t if prev else 0.0
    before = {n.addr: n.info for n in prev.nodes} if prev else {}
    table = Table(title=f"Nodes ({len(cur.nodes)})", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("Address", "left"), ("ID", "left"), ("Jobs", "right"), ("Queues", "right"),
        ("Clients", "right"), ("Blocked", "right"), ("Memory", "right"), ("Ops/s", "right"))
    for col, just in columns:
        table.add_column(col, justify=just, no_wrap=True)
    for n in cur.nodes:
        if n.info is None:
            table.add_row(n.addr, n.id[:8], f"down ({n.error})", "-", "-", "-", "-", "-")
            continue
        i = n.info
        old = before.get(n.addr)
        ops = _rate(_num(i.get("total_commands_processed")),
                    _num(old.get("total_commands_processed")) if old else None, dt)
        table.add_row(n.addr, n.id[:8], str(_num(i.get("registered_jobs"))),
                      str(_num(i.get("registered_queues"))),
                      str(_num(i.get("connected_clients"))),
                      str(_num(i.get("blocked_clients"))),
                      str(i.get("used_memory_human") or human_bytes(i.get("used_memory"))),
                      ops)
    return table


def render(cur: Sample, prev: Sample | None, limit: int) -> Group:
    """The two tables of one refresh."""
    return Group(queue_table(cur, prev, limit), node_table(cur, prev))


@click.command("top")
@click.option("-i", "--interval", default=1.0, show_default=True,
              type=click.FloatRange(0.05), help="Seconds between refreshes.")
@click.option("--once", is_flag=True,
              help="Print one table (two samples INTERVAL apart, for the rates) and exit.")
@click.option("-n", "--iterations", type=click.IntRange(1), default=None,
              help="Print N tables INTERVAL apart and exit (for scripts).")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1),
              help="Show at most this many queues (longest first).")
@click.pass_obj
def command(target: Target, interval: float, once: bool, iterations: int | None,
            limit: int) -> None:
    """Live per-queue and per-node table for every node HELLO knows.

    Rates (jobs in and out per second, ops per second) are the change in the servers'
    counters (QSTAT jobs-in/jobs-out, INFO total_commands_processed) between refreshes.
    """
    clients: dict[str, redis.Redis] = {}
    known: list[NodeInfo] = []
    out = console()
    # the seed must answer once, or there is nothing to show: a clear error instead
    target.redis(socket_timeout=5).ping()
    if once or iterations:
        count = 1 if once or not iterations else iterations
        prev: Sample | None = take_sample(target, clients, known)
        for i in range(count):
            time.sleep(interval)
            cur = take_sample(target, clients, known)
            if i:
                out.print()
            out.print(render(cur, prev, limit))
            prev = cur
        return
    prev = None
    cur = take_sample(target, clients, known)
    try:
        with Live(render(cur, prev, limit), console=out, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                prev, cur = cur, take_sample(target, clients, known)
                live.update(render(cur, prev, limit), refresh=True)
    except KeyboardInterrupt:
        pass
