"""What the HTTP API, the dashboard and ``/metrics`` show of the cluster, gathered from
the nodes through the client library and cached for a short time (``ttl``).

One snapshot = per node: INFO (or "down"); per node and Disque queue: QSTAT, and the
age of its oldest queued job (QPEEK 1 + SHOW). Queues are grouped into logical queues
with their priority levels (:mod:`disquepy.client.priority`); dead-letter queues
(``q:dead``) are shown as their logical queue's ``dead`` count. Rates (jobs in/out per
second) come from the difference between two snapshots.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis.exceptions as rexc

from ..client import Disque
from ..client.jobstatus import dead_letters_of, node_addresses, node_queues
from ..client.priority import PRIORITIES, queue_for, split
from ..client.replies import parse_info, parse_kv, parse_qstatus, parse_show

# QSTATUS' fields for a group: its events by state, then lag (available + redo) and
# pending (leased, not acknowledged)
GROUP_STATES = ("total", "available", "inprogress", "redo", "done", "dead")
GROUP_COUNTS = (*GROUP_STATES, "lag", "pending")


class NodesDown(Exception):
    """No node answered: the API's views answer 503 with ``nodes`` (each one's address
    and error) instead of an empty cluster."""

    def __init__(self, message: str, nodes: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.nodes = nodes

    @classmethod
    def of(cls, nodes: list[dict[str, Any]]) -> NodesDown:
        down = [{"address": n["address"], "state": "down", "error": n.get("error")}
                for n in nodes]
        return cls("no Disque node reachable (tried "
                   + ", ".join(n["address"] for n in nodes) + ")", down)


@dataclass
class Snapshot:
    at: float  # unix seconds
    nodes: list[dict[str, Any]] = field(default_factory=list)
    # (node address, Disque queue) -> QSTAT fields plus "oldest_age"
    queues: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # (node address, Disque queue) -> JOBMETRICS of the queue (see parse_jobmetrics)
    jobmetrics: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    bounds_ms: list[int] = field(default_factory=list)  # JOBMETRICS' histogram buckets
    # (node address, event queue) -> {group: QSTATUS fields}: the node's view of its
    # consumer groups (core/groups.py)
    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def parse_jobmetrics(reply: list[Any]) -> tuple[list[int], dict[str, dict[str, Any]]]:
    """JOBMETRICS' reply: (bucket bounds in ms, {queue: {"counts": {name: n}, "dead":
    {reason: n}, "wait" and "processing": (count, sum ms, [per-bucket counts])}})."""
    bounds = [int(b) for b in reply[1]]
    out: dict[str, dict[str, Any]] = {}
    for name, counts, dead, wait, proc in reply[3]:
        out[name.decode("utf-8", "surrogateescape")] = {
            "counts": {k.decode(): int(v) for k, v in zip(counts[::2], counts[1::2],
                                                         strict=True)},
            "dead": {k.decode(): int(v) for k, v in zip(dead[::2], dead[1::2], strict=True)},
            "wait": (int(wait[0]), int(wait[1]), [int(x) for x in wait[2:]]),
            "processing": (int(proc[0]), int(proc[1]), [int(x) for x in proc[2:]]),
        }
    return bounds, out


def take_snapshot(client: Disque) -> Snapshot:
    """Ask every node (three round trips each, however many queues)."""
    # INFO, HELLO, JOBMETRICS, QSTATUS, then QSTAT and QPEEK per queue
    snap = Snapshot(time.time())
    for addr in node_addresses(client):
        node: dict[str, Any] = {"address": addr, "up": False}
        snap.nodes.append(node)
        try:
            names = node_queues(client, addr)
            replies = client.execute_many_on(
                addr, [["INFO"], ["HELLO"], ["JOBMETRICS"], ["QSTATUS"]]
                + [["QSTAT", q] for q in names]
                + [["QPEEK", q, 1] for q in names])
        except rexc.RedisError as e:
            node["error"] = str(e) or type(e).__name__
            continue
        info = parse_info(replies[0])
        node.update(up=True, id=replies[1][1].decode(), info=info)
        if not isinstance(replies[2], Exception):  # a node without JOBMETRICS: none
            snap.bounds_ms, per_queue = parse_jobmetrics(replies[2])
            for q, m in per_queue.items():
                snap.jobmetrics[(addr, q)] = m
        if not isinstance(replies[3], Exception):  # a node without groups: none
            for q, per_group in parse_qstatus(replies[3]).items():
                snap.groups[(addr, q)] = per_group
        n = len(names)
        oldest: dict[str, bytes] = {}
        for q, stat, peek in zip(names, replies[4:4 + n], replies[4 + n:], strict=True):
            if isinstance(stat, Exception) or stat is None:
                continue
            snap.queues[(addr, q)] = dict(parse_kv(stat) or {}, oldest_age=None)
            if peek and not isinstance(peek, Exception):
                oldest[q] = peek[0][1]
        if oldest:
            shows = client.execute_many_on(addr, [["SHOW", jid] for jid in oldest.values()])
            for q, show in zip(oldest, shows, strict=True):
                s = parse_show(show) if show and not isinstance(show, Exception) else None
                if s and s.get("ctime"):
                    age = snap.at - int(s["ctime"]) / 1e9
                    snap.queues[(addr, q)]["oldest_age"] = max(0.0, round(age, 3))
    return snap


def _rate(new: float, old: float | None, dt: float) -> float | None:
    if old is None or dt <= 0 or new < old:
        return None
    return round((new - old) / dt, 2)


class ClusterView:
    """A cached :func:`take_snapshot` with rates against the previous one. Thread-safe."""

    def __init__(self, client: Disque, ttl: float = 1.0) -> None:
        self.client = client
        self.ttl = ttl
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        self._prev: Snapshot | None = None
        self._stale = False

    def snapshot(self) -> tuple[Snapshot, Snapshot | None]:
        """The current snapshot (at most ``ttl`` seconds old) and the one before it."""
        with self._lock:
            if (self._snap is None or self._stale
                    or time.time() - self._snap.at >= self.ttl):
                self._stale = False
                snap = take_snapshot(self.client)
                self._prev, self._snap = self._snap, snap
            return self._snap, self._prev

    def invalidate(self) -> None:
        """Forget the cached snapshot (after a change made through the API)."""
        self._stale = True

    def answered(self) -> tuple[Snapshot, Snapshot | None]:
        """:meth:`snapshot`, or :class:`NodesDown` when no node answered it."""
        snap, prev = self.snapshot()
        if not any(n["up"] for n in snap.nodes):
            raise NodesDown.of(snap.nodes)
        return snap, prev

    # ------------------------------------------------------------------ views

    def nodes(self) -> list[dict[str, Any]]:
        snap, prev = self.answered()
        before = {n["address"]: n for n in prev.nodes} if prev else {}
        out = []
        for n in snap.nodes:
            d: dict[str, Any] = {"address": n["address"], "state": "up" if n["up"] else "down"}
            if n["up"]:
                info = n["info"]
                old = before.get(n["address"], {}).get("info")
                dt = snap.at - prev.at if prev else 0
                d.update(
                    id=n["id"], version=info.get("disque_version"),
                    uptime_seconds=info.get("uptime_in_seconds"),
                    used_memory=info.get("used_memory"), used_memory_rss=info.get("used_memory_rss"),
                    maxmemory=info.get("maxmemory"),
                    connected_clients=info.get("connected_clients"),
                    blocked_clients=info.get("blocked_clients"),
                    ops_per_sec=info.get("instantaneous_ops_per_sec"),
                    registered_jobs=info.get("registered_jobs"),
                    registered_queues=info.get("registered_queues"),
                    jobs_added=info.get("jobs_added"), jobs_delivered=info.get("jobs_delivered"),
                    jobs_acked=info.get("jobs_acked"), jobs_expired=info.get("jobs_expired"),
                    added_per_sec=_rate(info.get("jobs_added", 0),
                                        old.get("jobs_added") if old else None, dt),
                    acked_per_sec=_rate(info.get("jobs_acked", 0),
                                        old.get("jobs_acked") if old else None, dt),
                )
            else:
                d["error"] = n.get("error")
            out.append(d)
        return out

    def queues(self) -> list[dict[str, Any]]:
        """Logical queues, each with its levels summed over the nodes."""
        snap, prev = self.answered()
        dt = snap.at - prev.at if prev else 0
        logical: dict[str, dict[str, Any]] = {}

        def entry(name: str) -> dict[str, Any]:
            e = logical.get(name)
            if e is None:
                e = logical[name] = {
                    "name": name, "depth": 0, "blocked": 0, "dead": 0, "jobs_in": 0,
                    "jobs_out": 0, "in_per_sec": None, "out_per_sec": None,
                    "oldest_age": None, "paused": "none",
                    "levels": {p: {"queue": None, "depth": 0, "blocked": 0, "jobs_in": 0,
                                   "jobs_out": 0, "oldest_age": None, "paused": "none"}
                               for p in PRIORITIES}}
            return e

        old_by = prev.queues if prev else {}
        rates: dict[str, list[Any]] = {}
        blocked: dict[str, dict[str, int]] = {}
        for (addr, q), st in sorted(snap.queues.items()):
            of = dead_letters_of(q)
            if of is not None:
                entry(of)["dead"] += int(st["len"])
                continue
            name, prio = split(q)
            e = entry(name)
            lv = e["levels"][prio]
            lv["queue"] = q
            for k, src in (("depth", "len"), ("blocked", "blocked"), ("jobs_in", "jobs-in"),
                           ("jobs_out", "jobs-out")):
                lv[k] += int(st[src])
                if k != "blocked":
                    e[k] += int(st[src])
            # a consumer of a prioritised queue blocks on its three levels at once: count
            # it once (the most blocked on one level, per node)
            per_node = blocked.setdefault(name, {})
            per_node[addr] = max(per_node.get(addr, 0), int(st["blocked"]))
            if st.get("pause", "none") != "none":
                lv["paused"] = e["paused"] = st["pause"]
            age = st.get("oldest_age")
            if age is not None:
                lv["oldest_age"] = max(lv["oldest_age"] or 0, age)
                e["oldest_age"] = max(e["oldest_age"] or 0, age)
            old = old_by.get((addr, q))
            r = rates.setdefault(name, [0.0, 0.0, False])
            if old is not None and dt > 0:
                r[0] += max(0, int(st["jobs-in"]) - int(old["jobs-in"])) / dt
                r[1] += max(0, int(st["jobs-out"]) - int(old["jobs-out"])) / dt
                r[2] = True
        for name, per_node in blocked.items():
            logical[name]["blocked"] = sum(per_node.values())
        for name, (rin, rout, known) in rates.items():
            if known:
                logical[name]["in_per_sec"] = round(rin, 2)
                logical[name]["out_per_sec"] = round(rout, 2)
        for e in logical.values():
            for p in PRIORITIES:
                lv = e["levels"][p]
                if lv["queue"] is None:
                    lv["queue"] = queue_for(e["name"], p)
        return sorted(logical.values(), key=lambda e: e["name"])

    def queue(self, name: str) -> dict[str, Any] | None:
        return next((q for q in self.queues() if q["name"] == name), None)

    def groups(self) -> list[dict[str, Any]]:
        """Consumer groups by event queue and group. Each node's QSTATUS counts the events
        it holds a copy of (all of them up to 3 nodes: an event has 3 copies), so the
        event counts are those of the node holding the most, a lower bound on a bigger
        cluster; consumers waiting are summed over the nodes."""
        snap, _ = self.answered()
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for (_addr, q), per_group in snap.groups.items():
            for g, st in per_group.items():
                e = out.get((q, g))
                if e is None:
                    e = out[(q, g)] = {"queue": q, "group": g, "nodes": 0, "consumers": 0,
                                       "oldest_not_done_age": None,
                                       **dict.fromkeys(GROUP_COUNTS, 0)}
                e["nodes"] += 1
                e["consumers"] += st.get("consumers", 0)
                if st.get("total", 0) >= e["total"]:  # the fullest view of the queue
                    e.update((k, st.get(k, 0)) for k in GROUP_COUNTS)
                if (st.get("lag") or st.get("pending")) and "oldest-pending-ms" in st:
                    age = st["oldest-pending-ms"] / 1000  # waiting or in progress
                    e["oldest_not_done_age"] = max(e["oldest_not_done_age"] or 0.0, age)
        return [out[k] for k in sorted(out)]

    def overview(self) -> dict[str, Any]:
        nodes = self.nodes()
        queues = self.queues()
        snap, _ = self.answered()
        up = [n for n in nodes if n["state"] == "up"]
        rin = [q["in_per_sec"] for q in queues if q["in_per_sec"] is not None]
        rout = [q["out_per_sec"] for q in queues if q["out_per_sec"] is not None]
        return {
            "at": snap.at,
            "nodes": nodes,
            "queues": queues,
            "groups": self.groups(),
            "totals": {
                "nodes": len(nodes), "nodes_up": len(up),
                "queued": sum(q["depth"] for q in queues),
                "dead": sum(q["dead"] for q in queues),
                # the nodes' own count: a consumer blocked on several queues counts once
                "blocked": sum(n.get("blocked_clients") or 0 for n in up),
                # copies: a job held by R nodes is R of them (see "counts")
                "jobs": sum(n.get("registered_jobs") or 0 for n in up),
                "memory": sum(n.get("used_memory") or 0 for n in up),
                "ops_per_sec": sum(n.get("ops_per_sec") or 0 for n in up),
                "in_per_sec": round(sum(rin), 2) if rin else None,
                "out_per_sec": round(sum(rout), 2) if rout else None,
            },
            # what each count counts, where copies could count twice
            "counts": {
                "queued": "jobs waiting in a queue: a job is queued on one node at a time",
                "jobs": "job copies held by the nodes that answered: a job replicated on "
                        "R nodes counts R times",
                "dead": "dead letters, each queued once",
                "groups": "events of the node holding the most of them (every node "
                          "holding a copy counts the same events)",
            },
            "unreachable": [n["address"] for n in nodes if n["state"] != "up"],
        }

