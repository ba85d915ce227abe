"""The simulated world: N unmodified Node cores, their clocks, disks and network.

One thread, no asyncio, no real time. A single event loop picks the earliest of:
a fault episode, a frame delivery, a node timer (``node.next_wake()``, converted from
the node's skewed clock), a client action, or a state sweep; ties go in that order,
so a run is a pure function of its :class:`~disquepy.sim.config.SimConfig`.

After every call into a node the world does what the server's driver does: AOF
records to the disk (synced first with ``appendfsync always``), ``nodes.conf`` saved
when dirty, links re-synced when dirty (``link_state``), bus messages batched per peer
into real frames, replies for other clients delivered; then the node's next timer.

A run goes: cluster formation (no faults), the faulty phase (workload + faults), heal
(faults off, crashed nodes restarted, consumers only fetch and ack), quiescence (until
nothing is left to do, or a time limit), final checks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..codec.bus import FrameReader, encode_frame
from ..core.client import Client
from ..core.config import Config
from ..core.job import ACTIVE
from ..core.node import Node
from ..core.outputs import Shell
from .checkers import Checker, SimAbort
from .clock import T0
from .config import SimConfig, split_rng
from .disk import CorruptAof, Disk
from .faults import FaultInjector
from .groups import GroupSim
from .network import Network, Partition
from .result import RunResult
from .trace import Trace
from .workload import Agent, Workload

if TYPE_CHECKING:
    from ..core.messages import Outgoing
    from ..core.outputs import ShellRequest

T = TypeVar("T")


class SimClient(Protocol):
    """A simulated client (a workload's agent): its connections, and where replies go."""

    idx: int
    conns: dict[int, tuple[int, Client]]  # node -> (incarnation, core Client)

    def on_reply(self, world: World, node: int, data: bytes) -> None: ...

IP = "127.0.0.1"
BASE_PORT = 7711
INF = float("inf")
SWEEP_MS = 500  # state sweeps (counters, memory) this often
FORM_MAX_MS = 30_000
HEAL_SETTLE_MS = 6000  # after the heal, before the operator lifts every PAUSE
SETTLE_CHECK_MS = 1000
SETTLE_STABLE_MS = 5000  # clean for this long = quiescent
SAME_TIME_TICKS_MAX = 1000  # ticks at one node time in a row: a timer that never advances
OUTPUT_ROUNDS_MAX = 1000

FORM, ACTIVE_PHASE, HEAL, QUIESCE, DONE = "form", "faulty", "heal", "quiesce", "done"


class World:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        n = cfg.nodes
        self.now = T0
        self.net = Network(split_rng(cfg.seed, "net"))
        self.faults = FaultInjector(cfg.faults, split_rng(cfg.seed, "faults"), n, cfg.skip_faults)
        self.clocks = self.faults.make_clocks(T0)
        self.disks = [Disk(cfg.fsync, c.node_time(T0)) for c in self.clocks]
        self.nodes: list[Node | None] = [None] * n
        self.incarnation = [0] * n
        self.links: list[dict[str, bool]] = [{} for _ in range(n)]  # node -> {peer id: link up?}
        self.wake: list[float] = [INF] * n  # global time of each node's next timer
        self.down_live: list[set[bytes]] = [set() for _ in range(n)]  # durable jobs while down
        self.reloaded: list[set[bytes]] = [set() for _ in range(n)]  # jobs the last restart loaded
        self.last_tick = [(-1, 0)] * n
        self.operator: list[tuple[int, Client] | None] = [None] * n  # (incarnation, admin client)
        self.port_index: dict[int, int] = {}  # bus port -> node index
        self.trace = Trace()
        self.checker = Checker(self)
        self.workload = Workload(self, cfg, split_rng(cfg.seed, "workload"))
        self.history = self.workload.history
        self.groups = GroupSim(self, cfg) if cfg.groups else None
        self.events = 0
        self.phase = FORM
        self.stop_flag = False
        self.next_sweep: float = INF
        self.restarts = 0
        self.settled_after_ms: int | None = None
        self.active_start = self.active_end = T0
        self.wall_start = time.monotonic()
        for i in range(n):
            node = self._boot(i)
            self.port_index[BASE_PORT + i + node.config.cluster_port_offset] = i
            node.aof.on = True
            self.nodes[i] = node
            self._after(i)

    # ----------------------------------------------------------------- time
    def node_now(self, i: int) -> int:
        return self.clocks[i].node_time(self.now)

    def elapsed(self, t: int | None = None) -> int:
        return (self.now if t is None else t) - T0

    def skew_tolerance(self) -> int:
        return self.faults.skew_tolerance(self.clocks, self.now - T0)

    # ---------------------------------------------------------- node calls
    def _call(self, i: int, fn: Callable[..., T], *args: object) -> T:
        try:
            return fn(*args)
        except SimAbort:
            raise
        except Exception as e:  # any exception in the core is a failure (f)
            self.checker.exception(i, e)
            raise SimAbort from e

    def _boot(self, i: int) -> Node:
        cfg = Config()
        cfg.cluster_node_timeout = self.cfg.node_timeout
        rng = split_rng(self.cfg.seed, "node", i, self.incarnation[i])
        return Node(cfg, f"{rng.getrandbits(160):040x}", rng, self.node_now(i), port=BASE_PORT + i)

    def _after(self, i: int) -> None:
        """Carry out what node i produced, through the same Shell path as the server."""
        node = self.nodes[i]
        if node is None:
            return
        shell = _NodeShell(self, i)
        nt = self.node_now(i)
        for _ in range(OUTPUT_ROUNDS_MAX):
            out = node.take_outputs()
            if not out.records:
                self.disks[i].advance(nt)
            if not out:
                break
            shell.deliver(out)
        else:
            self.checker.fail("output-loop", f"node {i} keeps producing output")
            raise SimAbort
        due = node.next_wake()
        self.wake[i] = INF if due is None else self.clocks[i].global_time(due)

    def _send(self, i: int, per: dict[str, Outgoing]) -> None:
        """One frame per peer for everything this step sent it (BATCH if several)."""
        node = self.nodes[i]
        assert node is not None  # (node i's own outputs)
        addrs = node.members.peer_links()
        net = self.net
        links = self.links[i]
        for d, msg in per.items():
            addr = addrs.get(d)
            j = self.port_index.get(addr[1]) if addr else None
            if j is None:
                net.stats.no_route += 1
                continue
            frame = encode_frame(msg)
            if links.get(d):
                net.transmit(self.now, i, j, self.incarnation[j], frame)
            elif net.drops_when_cut(i, j):
                net.stats.dropped_partition += 1
            else:
                net.hold(i, j, frame)  # the bus queues frames while the link is down

    def _sync_links(self, i: int, wanted: dict[str, tuple[str, int]] | None = None) -> None:
        node = self.nodes[i]
        assert node is not None  # (a live node's links)
        if wanted is None:
            wanted = node.members.peer_links()
        links = self.links[i]
        for nid in [nid for nid in links if nid not in wanted]:
            del links[nid]
        nt = self.node_now(i)
        for nid, (_, port) in wanted.items():
            j = self.port_index.get(port)
            up = j is not None and self.nodes[j] is not None and self.net.link_possible(i, j)
            if links.get(nid) != up:
                links[nid] = up
                if up and j is not None:
                    for frame in self.net.take_backlog(i, j):
                        self.net.transmit(self.now, i, j, self.incarnation[j], frame)
                self._call(i, node.members.link_state, nid, up, nt)

    def _topology_changed(self) -> None:
        for i, node in enumerate(self.nodes):
            if node is not None:
                self._sync_links(i)
                self._after(i)

    # ------------------------------------------------------------- clients
    def execute(self, agent: SimClient, i: int, argv: list[bytes]) -> bool:
        """Send a command for ``agent`` to node i; False if the node is down. The reply
        reaches ``agent.on_reply`` now, or later if the command blocked."""
        node = self.nodes[i]
        if node is None:
            return False
        inc = self.incarnation[i]
        conn = agent.conns.get(i)
        if conn is None or conn[0] != inc:
            client = node.new_client(now=self.node_now(i))
            client.conn = agent
            agent.conns[i] = (inc, client)
        else:
            client = conn[1]
        r = self._call(i, node.execute, client, argv, self.node_now(i))
        self._after(i)  # AOF first: the client sees the reply after the sync
        if r is not None:
            self.trace.reply(self.now, i, agent.idx, r)
            agent.on_reply(self, i, r)
        return True

    def abandon(self, agent: Agent) -> None:
        """The client gives up waiting: it closes the connection, as a client whose own
        timeout fired does, and goes on."""
        p = agent.pending
        if p is None:
            return
        conn = agent.conns.pop(p.node, None)
        node = self.nodes[p.node]
        if conn is not None and node is not None and conn[0] == self.incarnation[p.node]:
            self._call(p.node, node.client_closed, conn[1])
            self._after(p.node)
        self.workload.connection_lost(agent)

    def admin(self, i: int, *argv: bytes) -> bytes | None:
        """A command from the operator (not a workload client)."""
        node = self.nodes[i]
        assert node is not None, f"the operator's node {i} is down"
        op = self.operator[i]
        if op is None or op[0] != self.incarnation[i]:
            op = self.operator[i] = (self.incarnation[i], node.new_client(now=self.node_now(i)))
        r = self._call(i, node.execute, op[1], list(argv), self.node_now(i))
        self._after(i)
        return r

    # -------------------------------------------------------------- faults
    def set_partition(self, p: Partition | None) -> None:
        self.net.partition = p
        self.trace.note(b"P", self.now, 0, 0, repr(p).encode())
        self._topology_changed()

    def crash(self, i: int, power: bool) -> None:
        node = self.nodes[i]
        assert node is not None, f"node {i} crashes twice"
        disk = self.disks[i]
        disk.crash(power, self.node_now(i), self.faults.rng)
        live = disk.live_ids()
        self.checker.on_crash(i, node, live)
        if self.groups is not None:
            self.groups.on_crash(i, node)
        self.down_live[i] = live
        self.nodes[i] = None
        self.incarnation[i] += 1
        self.wake[i] = INF
        self.links[i] = {}
        self.net.forget_sender(i)
        self.trace.note(b"C", self.now, i, int(power))
        for a in self.workload.agents:
            if a.pending is not None and a.pending.node == i:
                self.workload.connection_lost(a)
        self._topology_changed()

    def restart(self, i: int) -> None:
        node = self._boot(i)
        nt = self.node_now(i)
        disk = self.disks[i]
        myid = self._call(i, node.members.load_nodes_conf, disk.nodes_conf, nt)
        if myid is not None:
            node.set_identity(myid)
        try:
            records = disk.load()
        except CorruptAof as e:
            self.checker.fail("aof", f"node {i}: {e}")
            raise SimAbort from e
        self._call(i, node.aof.load, records, nt, False)
        node.aof.on = True
        self.nodes[i] = node
        self.reloaded[i] = {job.id for job in node.jobs.values()}
        self.down_live[i] = set()
        self.checker.seen[i] = {}
        self.last_tick[i] = (-1, 0)
        self.restarts += 1
        self.trace.note(b"S", self.now, i, len(records))
        self._after(i)
        self._topology_changed()

    # ------------------------------------------------------------ the loop
    def _loop(self, t_end: int) -> None:
        """Process events in time order up to ``t_end`` (inclusive)."""
        net, faults, wl, wake = self.net, self.faults, self.workload, self.wake
        n = len(wake)
        cfg = self.cfg
        groups = self.groups
        agent: Agent | None = None
        gagent = None
        while True:
            if self.stop_flag:
                return
            self.events += 1
            if self.events > cfg.max_events:
                self.checker.fail("limit", f"more than {cfg.max_events} events")
                raise SimAbort
            if not self.events & 1023 and time.monotonic() - self.wall_start > cfg.wall_limit_s:
                self.checker.fail("limit", f"over {cfg.wall_limit_s}s of real time")
                raise SimAbort
            best = faults.next_time()
            kind = 0
            t = net.next_time()
            if t < best:
                best, kind = t, 1
            ni = -1
            for i in range(n):
                if wake[i] < best:
                    best, kind, ni = wake[i], 2, i
            ta, agent = wl.next_agent()
            if ta < best:
                best, kind = ta, 3
            if groups is not None:
                tg, gagent = groups.next_agent()
                if tg < best:
                    best, kind = tg, 5
            if self.next_sweep < best:
                best, kind = self.next_sweep, 4
            if best > t_end:
                if t_end > self.now:
                    self.now = t_end
                return
            if best > self.now:
                self.now = int(best)
            if kind == 1:
                self._deliver()
            elif kind == 2:
                self._tick(ni)
            elif kind == 3:
                assert agent is not None  # (an agent was due)
                wl.act(agent)
            elif kind == 5:
                assert groups is not None and gagent is not None  # (a group agent was due)
                groups.act(gagent)
            elif kind == 0:
                faults.fire(self)
            else:
                self.next_sweep = self.now + SWEEP_MS
                self.checker.sweep()
                if self.groups is not None:
                    self.groups.sweep()

    def _deliver(self) -> None:
        net = self.net
        _, _, src, dst, inc, frame = net.pop()
        node = self.nodes[dst]
        if node is None or self.incarnation[dst] != inc:
            net.stats.dropped_reset += 1
            return
        if net.cut(src, dst):
            net.stats.dropped_partition += 1
            return
        net.stats.delivered += 1
        self.trace.frame(self.now, src, dst, frame)
        reader = FrameReader()
        reader.feed(frame)
        while (msg := self._call(dst, reader.gets)) is not False:  # one, or a few BATCHes
            self._call(dst, node.handle_message, msg, IP, self.node_now(dst))
        self._after(dst)

    def _tick(self, i: int) -> None:
        node = self.nodes[i]
        assert node is not None  # (a down node's timer is INF)
        nt = self.node_now(i)
        last, rep = self.last_tick[i]
        rep = rep + 1 if nt == last else 0
        if rep > SAME_TIME_TICKS_MAX:
            self.checker.fail(
                "timer-loop", f"node {i}: next_wake() stays at {nt} after {rep} ticks"
            )
            raise SimAbort
        self.last_tick[i] = (nt, rep)
        self._call(i, node.tick, nt)
        self._after(i)

    # -------------------------------------------------------------- phases
    def _form(self) -> None:
        for j in range(1, self.cfg.nodes):
            r = self.admin(0, b"CLUSTER", b"MEET", IP.encode(), b"%d" % (BASE_PORT + j))
            if r != b"+OK\r\n":
                self.checker.fail("cluster", f"CLUSTER MEET failed: {r!r}")
                raise SimAbort
        n = self.cfg.nodes
        deadline = self.now + FORM_MAX_MS
        while self.now < deadline:
            self._loop(self.now + 100)
            if all(
                node is not None and node.size == n and node.reachable == n - 1
                for node in self.nodes
            ):
                return
        self.checker.fail("cluster", f"the cluster did not form in {FORM_MAX_MS} ms")
        raise SimAbort

    def _clean(self) -> bool:
        """Nothing left to do: no consumer holds a job, no node holds anything but
        at-most-once jobs that wait for their TTL."""
        if not self.workload.idle():
            return False
        if self.groups is not None and not self.groups.idle():
            return False
        for node in self.nodes:
            if node is None:
                return False
            for job in node.jobs.values():
                if job.retry or job.state != ACTIVE:
                    return False
        return True

    def _faulty_phase(self) -> None:
        self.phase = ACTIVE_PHASE
        self.trace.note(b"A", self.now, 0, 0)
        self.active_start = self.now
        self.faults.start(self, self.now)
        self.workload.start(self.now)
        if self.groups is not None:
            self.groups.start(self.now)
        self.next_sweep = self.now + SWEEP_MS
        self._loop(self.now + self.cfg.duration_s * 1000)  # or until the steps run out
        self.stop_flag = False
        self.active_end = self.now

    def _heal(self) -> None:
        """Faults off, crashed nodes back, producers stop; then the operator lifts every
        PAUSE (after in-flight PAUSE broadcasts had time to land)."""
        self.phase = HEAL
        self.faults.stop(self)
        self.workload.quiesce()
        if self.groups is not None:
            self.groups.quiesce()
        self._loop(self.now + HEAL_SETTLE_MS)
        for i in range(self.cfg.nodes):
            for q in self.workload.queues:
                self.admin(i, b"PAUSE", q, b"none")

    def _quiesce(self) -> None:
        """Consumers keep fetching and acking until nothing is left to do (clean for
        SETTLE_STABLE_MS), at most quiesce_max_s."""
        self.phase = QUIESCE
        start = self.now
        limit = start + self.cfg.quiesce_max_s * 1000
        clean_since = None
        while self.now < limit:
            self._loop(self.now + SETTLE_CHECK_MS)
            if not self._clean():
                clean_since = None
            elif clean_since is None:
                clean_since = self.now
            elif self.now - clean_since >= SETTLE_STABLE_MS:
                self.settled_after_ms = self.now - start
                return

    def run(self) -> RunResult:
        try:
            self._form()
            self._faulty_phase()
            self._heal()
            self._quiesce()
            self.phase = DONE
            self.checker.final()
            if self.groups is not None:
                self.groups.final()
        except SimAbort:
            pass
        return RunResult.of(self, time.monotonic() - self.wall_start)


def run(cfg: SimConfig) -> RunResult:
    return World(cfg).run()


class _NodeShell(Shell):
    """Node i's outputs in the simulated world: a simulated disk, the faulty network,
    the workload's agents."""

    __slots__ = ("world", "i")

    def __init__(self, world: World, i: int) -> None:
        self.world = world
        self.i = i

    def persist(self, records: list[bytes]) -> None:
        # first: with always, synced before anything leaves
        w = self.world
        w.disks[self.i].append(records, w.node_now(self.i))

    def save_nodes_conf(self, text: str) -> None:
        self.world.disks[self.i].nodes_conf = text

    def sync_links(self, links: dict[str, tuple[str, int]]) -> None:
        self.world._sync_links(self.i, links)

    def send_messages(self, messages: dict[str, Outgoing]) -> None:
        self.world._send(self.i, messages)

    def reply(self, client: Client, data: bytes) -> None:
        agent = client.conn
        if agent is not None:
            w = self.world
            w.trace.reply(w.now, self.i, agent.idx, data)
            agent.on_reply(w, self.i, data)

    def answer(self, client: Client, data: bytes) -> None:
        self.reply(client, data)

    def unsupported(self, req: ShellRequest) -> bytes:
        # the workloads send nothing only a shell can finish (CONFIG SET's part aside)
        self.world.checker.fail("protocol", f"node {self.i} asked the shell for {req!r}")
        raise SimAbort
