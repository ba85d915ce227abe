"""One fault run, start to verdict: form, faults, heal, drain, check.

    cluster of N real nodes (fsync always) behind the bus proxy, joined by alias
    -> workload + nemesis for ``duration`` seconds
    -> heal: faults off, paused nodes woken, killed nodes restarted, cluster converged
    -> drain: consumers acknowledge everything until every job known to the clients
       is acked and every queue on every node is empty (bounded)
    -> collection: acked jobs must disappear from every node (bounded)
    -> the total-queue check (checker.py) on the history and a JSCAN of every node

Every process started is killed on every way out (``finally``, also on Ctrl-C and
on the overall timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from .checker import ADD_OK, Example, JobsHeld, Report, check
from .cluster import Cluster
from .groups import SABOTAGE_QUEUE, GroupWorkload, check_groups
from .nemesis import KINDS, Nemesis, schedule
from .proxy import BusProxy, alias
from .resp import ConnLost, ReplyError
from .workload import MAX_RETRY_S, QUEUES, Workload

log = logging.getLogger("disquepy.chaos")

CONVERGE_S = 40.0  # the cluster must form / re-form within this
DRAIN_S = 90.0  # the drain must finish within this
COLLECT_S = 30.0  # acked jobs must be gone from every node within this
STABLE_S = MAX_RETRY_S + 2.0  # clean this long = drained (a dropped job is back by then)


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    seed: int = 1
    nodes: int = 5
    duration: float = 25.0  # seconds of faults
    faults: tuple[str, ...] = KINDS
    node_timeout: int = 1500  # cluster-node-timeout, ms
    producers: int = 3
    consumers: int = 4
    max_down: int = 2  # nodes killed or paused at the same time, at most
    timeout: float = 0.0  # overall limit, seconds (0: duration + 240)
    lose_jobs: int = 0  # sabotage: add this many jobs and delete them behind our back
    groups: int = 0  # consumer groups (2 consumers each) beside the jobs; 0: none
    lose_events: int = 0  # sabotage: QADD this many events and QFLUSH them behind our back
    workdir: str | None = None
    keep: bool = False  # keep the node directories even after a clean run

    def replay_command(self) -> str:
        cmd = (f"python -m disquepy.chaos --seed {self.seed} --nodes {self.nodes} "
               f"--duration {self.duration:g}")
        if self.faults != KINDS:
            cmd += f" --faults {','.join(self.faults) or 'none'}"
        if self.lose_jobs:
            cmd += f" --sabotage-lose {self.lose_jobs}"
        if self.groups:
            cmd += f" --groups {self.groups}"
        if self.lose_events:
            cmd += f" --sabotage-lose-events {self.lose_events}"
        return cmd

    @property
    def limit(self) -> float:
        return self.timeout or self.duration + 240.0


class Evidence(TypedDict):
    """SHOW, on every node, of a job a violation is about."""

    kind: str  # the violation
    job: bytes
    # node index -> the job's fields by name (values as SHOW has them: Any), None if
    # the node does not know it, or the error the call got
    show: dict[int, dict[str, Any] | str | None]


@dataclass(slots=True)
class ChaosResult:
    config: ChaosConfig
    counts: dict[str, int | float] = field(default_factory=dict)  # the checker's
    faults: dict[str, int] = field(default_factory=dict)
    proxy: dict[str, int] = field(default_factory=dict)
    client_errors: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int | float] = field(default_factory=dict)
    examples: dict[str, list[Example]] = field(default_factory=dict)
    # node crashes, no convergence, timeouts
    problems: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    # SHOW of a few jobs in violations
    evidence: list[Evidence] = field(default_factory=list)
    # the groups checker's (--groups)
    group_counts: dict[str, int] = field(default_factory=dict)
    group_examples: dict[str, list[Example]] = field(default_factory=dict)
    workdir: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations and not self.problems

    def to_json(self) -> dict[str, Any]:  # a JSON object: values of every JSON type
        d = asdict(self)
        cfg = d.pop("config")
        cfg["faults"] = list(cfg["faults"])
        d["config"] = cfg
        d["replay"] = self.config.replay_command()
        d["ok"] = self.ok
        d["examples"] = {k: [repr(x) for x in v] for k, v in self.examples.items()}
        d["group_examples"] = {k: [repr(x) for x in v] for k, v in self.group_examples.items()}
        return d

    def text(self) -> str:
        c = self.counts
        f = " ".join(f"{k}={v}" for k, v in self.faults.items() if v) or "none"
        lines = [
            f"seed {self.config.seed}: {'ok' if self.ok else 'FAIL'} | "
            f"{self.config.nodes} nodes, {self.config.duration:g} s of faults, "
            f"{self.wall_s:.0f} s in all",
            f"  faults: {f}",
            f"  jobs: {c.get('adds_sent', 0)} ADDJOB sent, {c.get('jobs_added', 0)} got an ID "
            f"({c.get('retry0_added', 0)} RETRY 0), {c.get('add_errors', 0)} errors, "
            f"{c.get('add_unknown', 0)} without a reply; delivered "
            f"{c.get('jobs_delivered', 0)} ({c.get('deliveries', 0)} deliveries), "
            f"acked {c.get('acked', 0)}",
            f"  lost {c.get('lost', 0)}, unexpected {c.get('unexpected', 0)}, RETRY 0 "
            f"delivered twice {c.get('at_most_once', 0)}, unacked {c.get('unacked', 0)}, "
            f"acked but not collected {c.get('not_collected', 0)}, left queued "
            f"{c.get('leftover', 0)}",
            f"  duplicates {c.get('duplicates', 0)} (rate "
            f"{100 * c.get('duplicate_rate', 0):.2f}%), of which not requested by a "
            f"NACK or a dropped job {c.get('duplicates_unrequested', 0)} "
            f"({100 * c.get('duplicate_rate_unrequested', 0):.2f}%)",
        ]
        g = self.group_counts
        if g:
            lines.append(
                f"  groups: {g['groups']} groups, {g['events_sent']} QADD sent, "
                f"{g['events_added']} got an ID, {g['qadd_errors']} errors, "
                f"{g['qadd_unknown']} without a reply; {g['deliveries']} deliveries "
                f"({g['redeliveries']} again to the same group), QACK 1: {g['acks_one']}, "
                f"0: {g['acks_zero']}")
            lines.append(
                f"  groups: lost {g['lost']} (excused by R kills {g['lost_excused']} of "
                f"{g['events_after_r_kills']} exposed), "
                f"group missed {g['group_missed']} (excused {g['group_missed_excused']}), "
                f"unexpected {g['unexpected']}, double leases healthy "
                f"{g['double_lease_healthy']} / under faults {g['double_leases_faults']}, "
                f"delivered after the group's ack {g['after_ack']}")
        for k, v in self.violations.items():
            if k.startswith("groups_"):
                e = self.group_examples.get(k.removeprefix("groups_"), [])
            else:
                e = self.examples.get(k, [])
            lines.append(f"  VIOLATION {k}: {v}; e.g. {e[:3]}")
        for p in self.problems:
            lines.append(f"  PROBLEM {p}")
        for ev in self.evidence:
            lines.append(f"  evidence {ev['kind']} {ev['job']!r}: {ev['show']}")
        lines.append("  phases (s): " + " ".join(f"{k}={v}" for k, v in self.phases.items()))
        if not self.ok:
            lines.append(f"  node logs: {self.workdir}")
        lines.append(f"  replay: {self.config.replay_command()}")
        return "\n".join(lines)


class ChaosRun:
    """One run; ``run()`` is the synchronous entry point."""

    def __init__(self, cfg: ChaosConfig) -> None:
        self.cfg = cfg
        self.root = Path(cfg.workdir or tempfile.mkdtemp(prefix=f"disquepy-chaos-{cfg.seed}-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(self.root, cfg.nodes, cfg.node_timeout)
        self.proxy = BusProxy(self.cluster.ports, random.Random(f"{cfg.seed}:proxy"))
        self.faults = schedule(cfg.seed, cfg.nodes, cfg.duration, cfg.faults, cfg.max_down)
        self.nemesis = Nemesis(self.cluster, self.proxy, self.faults)
        self.workload = Workload(cfg.seed, self.cluster.ports, cfg.producers, cfg.consumers)
        self.groups = GroupWorkload(cfg.seed, self.cluster.ports, cfg.groups)
        if cfg.lose_events:
            self.groups.queues += (SABOTAGE_QUEUE,)
        self.healthy_from = float("-inf") if not self.faults else float("inf")
        self.result = ChaosResult(cfg, workdir=str(self.root))
        self.t_start = time.monotonic()
        self.interrupted = False

    # ------------------------------------------------------------- entry
    def run(self) -> ChaosResult:
        """The run's result; KeyboardInterrupt on Ctrl-C or SIGTERM, nodes stopped."""
        try:
            asyncio.run(self._bounded())
        finally:
            self.cluster.stop_all()
        if self.interrupted:
            raise KeyboardInterrupt
        r = self.result
        r.wall_s = time.monotonic() - self.t_start
        if r.ok and not self.cfg.keep and not self.cfg.workdir:
            shutil.rmtree(self.root, ignore_errors=True)
        return r

    async def _bounded(self) -> None:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        assert me is not None  # asyncio.run runs this as a task

        def terminate() -> None:  # SIGTERM unwinds like Ctrl-C
            self.interrupted = True
            me.cancel()

        with contextlib.suppress(NotImplementedError, RuntimeError):  # not main thread
            loop.add_signal_handler(signal.SIGTERM, terminate)
        try:
            await asyncio.wait_for(self._main(), self.cfg.limit)
        except TimeoutError:
            self.result.problems.append(f"timeout: the run took over {self.cfg.limit:.0f} s")
        except asyncio.CancelledError:
            if not self.interrupted:
                raise  # Ctrl-C: asyncio.run turns it into KeyboardInterrupt
        finally:
            # the workload's loops end on their flags: on Python 3.11 a cancellation can
            # be lost inside asyncio.wait_for, and asyncio.run would then wait forever for
            # a client task retrying against nodes that are gone
            self.workload.producing = self.workload.consuming = False
            self.groups.producing = self.groups.consuming = False
            self.proxy.close()
            self.cluster.stop_all()

    def _phase(self, name: str, t: float) -> None:
        self.result.phases[name] = round(time.monotonic() - t, 2)

    # ------------------------------------------------------------- phases
    async def _main(self) -> None:
        cfg, c, r = self.cfg, self.cluster, self.result
        for f in self.faults:
            log.debug("scheduled: %s", f.describe())
        t = time.monotonic()
        await self.proxy.start()
        await c.start_all()
        await c.join()
        if not await c.wait_converged(CONVERGE_S):
            r.problems.append(f"the cluster did not form in {CONVERGE_S:.0f} s")
            return
        await self._check_addresses("after the join")
        self._phase("form", t)

        t = time.monotonic()
        loop = asyncio.get_running_loop()
        self.workload.start()
        if cfg.groups:
            self.groups.start()
        nem = asyncio.create_task(self.nemesis.run(loop.time()))
        watch = asyncio.create_task(self._watch_exits())
        await asyncio.sleep(cfg.duration)  # the schedule ends by then
        nem.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await nem  # a nemesis that raised raises here
        self.workload.producing = self.groups.producing = False
        self._phase("faults", t)

        t = time.monotonic()
        self._note_exits()
        await self.nemesis.stop()
        watch.cancel()
        for e in self.nemesis.restart_errors:
            r.problems.append(f"restart failed: {e}")
        if not await c.wait_converged(CONVERGE_S):
            r.problems.append(f"the cluster did not re-form in {CONVERGE_S:.0f} s after the heal")
        elif self.faults:
            self.healthy_from = loop.time()
        await self._check_addresses("after the heal")
        self._phase("heal", t)
        if cfg.lose_jobs:
            await self._sabotage_lose(cfg.lose_jobs)
        if cfg.lose_events:
            await self._sabotage_lose_events(cfg.lose_events)

        t = time.monotonic()
        self.workload.draining = True
        drained = await self._drain()
        await self.workload.stop()
        if not drained:
            r.problems.append(f"the drain did not finish in {DRAIN_S:.0f} s")
        self._phase("drain", t)
        if cfg.groups:
            t = time.monotonic()
            await self.groups.drain(DRAIN_S)  # a group missing events: the checker says so
            await self.groups.stop()
            self._phase("group_drain", t)

        t = time.monotonic()
        final = await self._collect()
        self._phase("collect", t)
        self._note_exits()
        for node in c.nodes:
            for line in node.log_problems():
                r.problems.append(f"node {node.index} log: {line.strip()[:200]}")

        report = check(self.workload.history, final)
        r.counts = report.counts
        r.violations = report.violations
        r.examples = report.examples
        r.faults = dict(self.nemesis.counts)
        r.faults.update({f"partition_{k}": v for k, v in self.nemesis.partitions.items()})
        r.proxy = self.proxy.stats.as_dict()
        r.client_errors = dict(self.workload.errors)
        await self._gather_evidence(report)
        if cfg.groups:
            g = check_groups(self.groups.history, self.groups.groups, min(3, cfg.nodes),
                             self.nemesis.kills, self.healthy_from, durable=True)
            r.group_counts, r.group_examples = g.counts, g.examples
            r.violations.update({f"groups_{k}": v for k, v in g.violations.items()})
            r.client_errors.update({f"groups {k}": v for k, v in self.groups.errors.items()})

    async def _gather_evidence(self, report: Report) -> None:
        """SHOW, on every node, a few of the jobs a violation is about."""
        hist = self.workload.history
        jids: list[tuple[str, bytes]] = []
        for kind in ("lost", "not_collected", "leftover", "unacked", "at_most_once"):
            for ex in report.examples.get(kind, [])[:2]:
                jid = ex[0] if kind in ("not_collected", "leftover") else None
                if jid is None and kind != "at_most_once":
                    jid = ex[1]
                if jid is None and ex[0] in hist.adds:
                    jid = hist.adds[ex[0]].jid
                if jid:
                    jids.append((kind, jid))
        for kind, jid in jids:
            shows: dict[int, dict[str, Any] | str | None] = {}
            for i, p in enumerate(self.cluster.ports):
                try:
                    s = await self.cluster.admin.call(p, "SHOW", jid, timeout=3.0)
                except (ConnLost, ReplyError) as e:
                    s = repr(e)
                if isinstance(s, list):
                    s = {k.decode(): v for k, v in zip(s[::2], s[1::2], strict=True)
                         if k != b"body"}
                shows[i] = s
            self.result.evidence.append({"kind": kind, "job": jid, "show": shows})

    async def _watch_exits(self) -> None:
        while True:
            self._note_exits()
            await asyncio.sleep(0.5)

    def _note_exits(self) -> None:
        for node in self.cluster.nodes:
            rc = node.check_exit()
            if rc is not None:
                self.result.problems.append(
                    f"node {node.index} (port {node.port}) exited by itself with {rc}")

    async def _check_addresses(self, when: str) -> None:
        """Every node must know every node (itself too) by its alias: else some bus
        traffic would bypass the proxy."""
        addrs = await self.cluster.addresses()
        want = {alias(i) for i in range(self.cluster.n)}
        for i, got in addrs.items():
            if got and set(got) != want:
                self.result.problems.append(
                    f"{when}: node {i} lists {sorted(got)}, not the aliases (proxy bypassed)")

    async def _sabotage_lose(self, n: int) -> None:
        """Add n jobs the clients record as added, then delete every copy (DELJOB on
        every node) before any consumer can see them (they are delayed): the checker
        must report them lost."""
        c = self.cluster
        hist = self.workload.history
        for k in range(n):
            body = f"{self.cfg.seed}:sabotage:{k}".encode()
            rec = hist.add_sent(body, QUEUES[0], 3, 3, 0)
            jid = await c.admin.call(c.ports[0], "ADDJOB", QUEUES[0], body, 5000,
                                     "REPLICATE", 3, "RETRY", 3, "DELAY", 3000)
            rec.outcome, rec.jid = ADD_OK, jid
            for p in c.ports:
                await c.admin.call(p, "DELJOB", jid)
        log.warning("sabotage: %d jobs deleted behind the checker's back", n)

    async def _sabotage_lose_events(self, n: int) -> None:
        """QADD n events the clients record as added, then QFLUSH their queue (only
        the consumers' drain reads it): the groups checker must report them lost."""
        c, hist = self.cluster, self.groups.history
        t = asyncio.get_running_loop().time()
        for k in range(n):
            contents = f"{self.cfg.seed}:sabotage-event:{k}".encode()
            rec = hist.add_sent(contents, SABOTAGE_QUEUE, 0, t)
            rec.eid = await c.admin.call(c.ports[0], "QADD", SABOTAGE_QUEUE, 3600, contents)
            rec.outcome = ADD_OK
        await c.admin.call(c.ports[0], "QFLUSH", SABOTAGE_QUEUE)
        log.warning("sabotage: %d events flushed behind the checker's back", n)

    async def _drain(self) -> bool:
        """Consumers ack everything until no node holds a job still to deliver (queued,
        waiting for copies, or active with a retry) for STABLE_S in a row."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        clean_since = None
        while loop.time() < deadline:
            jobs = await self._scan()
            clean = jobs is not None and not any(
                st in ("queued", "wait-repl") or (st == "active" and retry > 0)
                for held in jobs.values() for st, _q, retry in held.values()
            )
            if not clean:
                clean_since = None
            elif clean_since is None:
                clean_since = loop.time()
            elif loop.time() - clean_since >= STABLE_S:
                return True
            await asyncio.sleep(0.5)
        return False

    async def _scan(self) -> JobsHeld | None:
        """node index -> {jid: (state, queue, retry)} of every (non-dummy) job it
        holds; None if a node does not answer."""
        out: JobsHeld = {}
        for i, p in enumerate(self.cluster.ports):
            jobs = {}
            cursor = b"0"
            for _ in range(10_000):
                try:
                    reply = await self.cluster.admin.call(
                        p, "JSCAN", cursor, "COUNT", 1000, "REPLY", "all", timeout=10.0)
                except (ConnLost, ReplyError) as e:
                    log.warning("JSCAN on node %d: %s", i, e)
                    return None
                cursor, items = reply[0], reply[1]
                for item in items:
                    d = dict(zip(item[::2], item[1::2], strict=True))
                    jobs[d[b"id"]] = (d[b"state"].decode(), d[b"queue"], d[b"retry"])
                if cursor == b"0":
                    break
            out[i] = jobs
        return out

    async def _collect(self) -> JobsHeld | None:
        """Wait (bounded) until no node holds a job some client acked; the last scan."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + COLLECT_S
        acked = self.workload.history.acked
        while True:
            final = await self._scan()
            if final is not None and not any(
                jid in acked for jobs in final.values() for jid in jobs
            ):
                return final
            if loop.time() >= deadline:
                if final is None:
                    self.result.problems.append("a node did not answer the final JSCAN")
                return final
            await asyncio.sleep(0.5)


def run(cfg: ChaosConfig) -> ChaosResult:
    """Run one seed; never leaves a process behind."""
    return ChaosRun(cfg).run()
