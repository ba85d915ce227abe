"""One Disque node: the composition of its parts (the job store, queues, timers,
clients, the cluster's modules) and its entry points.

Pure: every entry point takes ``now`` (wall clock, ms) and nothing here reads a clock,
draws randomness (the RNG is injected) or touches a socket or file. Inputs are client
commands (:meth:`Node.execute`), timer ticks (:meth:`Node.tick`) and, with the
cluster, bus messages. Outputs are the reply returned by ``execute``, replies for
other clients in :attr:`Node.outbox` (e.g. a blocked GETJOB served by a new job), and
:meth:`Node.next_wake`, the time the shell must call ``tick`` again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from mypy_extensions import i64

from ..codec import resp
from . import errors
from . import messages as M
from .acks import Acks
from .acl import Acl, AclError, queue_denied
from .awake import NEVER, AwakeIndex
from .client import REPLY_OFF, REPLY_ON, REPLY_SKIP, REPLY_SKIP_NEXT, Client
from .config import ConfigError
from .errors import ReplyError
from .federation import Federation
from .groups import Groups
from .ids import JOB_ID_LEN, JobIdGenerator, Rng, event_id_suffix, new_node_id
from .info import HostFacts, info_reply
from .job import (
    F_DUMMY,
    WAIT_REPL,
    Job,
)
from .jobmetrics import JobMetrics
from .jobstore import JobStore
from .jobtable import JobTable
from .keys import Keys
from .latency import LatencyMonitor
from .membership import Membership
from .memory import CLIENT_OVERHEAD, CRITICAL, Memory
from .outcomes import Outcomes
from .outputs import Event, Outputs, ShellRequest
from .persistence import Persistence
from .queues import Queues
from .replication import Replication
from .slowlog import SlowLog

if TYPE_CHECKING:
    from .commands import Command
    from .config import Config
    from .membership import Peer

T = TypeVar("T")
BusHandler = Callable[["Peer", M.Fields, int], None]

# empty, unblocked, unpaused queues are dropped after this idle time; sooner when
# memory is short (over 75% / over 95% of maxmemory)
QUEUE_MAX_IDLE_MS: Final = (300_000, 10_000, 2_000)
RETRY_JITTER_MS: Final = 250  # re-queue times are spread by +-250 ms, as in Disque
EVICT_CRON_MS: Final = 100  # how often the housekeeping cron runs


class Stats:
    __slots__ = (
        "connections",
        "rejected_connections",
        "jobs_added",
        "jobs_acked",
        "jobs_expired",
        "jobs_evicted",
        "queues_evicted",
        "oom_refusals",
        "jobs_delivered",
        "bus_malformed",
    )

    def __init__(self) -> None:  # each named (not a setattr loop): mypyc needs them seen
        self.connections = 0
        self.rejected_connections = 0
        self.jobs_added = 0
        self.jobs_acked = 0
        self.jobs_expired = 0
        self.jobs_evicted = 0
        self.queues_evicted = 0
        self.oom_refusals = 0
        self.jobs_delivered = 0
        self.bus_malformed = 0


class CmdStat:
    """INFO commandstats' counters of one command: its calls and the ns they took
    (native ints: a list's boxed ones cost an allocation an update)."""

    def __init__(self) -> None:
        self.calls: i64 = 0
        self.ns: i64 = 0


class Node:
    def __init__(self, config: Config, node_id: str, rng: Rng, now: int, ip: str = "",
                 port: int | None = None) -> None:
        self.config = config
        self.myid = node_id
        self.myid_b = node_id.encode()
        self.event_suffix = event_id_suffix(node_id)  # the node part of its event IDs
        self.rng = rng
        self.random = rng.random
        self.size = 1  # known nodes, this one included (Disque's cluster->size)
        self.reachable = 0  # other nodes reachable now
        self.default_replicate = 1  # REPLICATE when ADDJOB gives none: min(3, size)
        self.clustered = False  # True once the node has other cluster members
        self.ip = ip
        self.port = port if port is not None else config.port
        self.idgen = JobIdGenerator(node_id, rng.getrandbits(160).to_bytes(20, "little"))
        self.jobs = JobTable()
        self.store = JobStore(self)  # what happens to jobs (jobstore.py)
        self.queues = Queues(self)  # by name, and the consumers blocked on them
        self.awake = AwakeIndex()
        self.clients: dict[int, Client] = {}
        self.outbox: list[tuple[Client, bytes]] = []  # (client, reply bytes) for clients other than the caller
        self._next_client_id = 0
        self.last_ctime = 0
        self.start_time = now
        self.now = now
        self.mem = Memory(self)  # used memory, maxmemory, eviction
        self.leaving = False
        self.loading = False
        self.stats = Stats()
        self.ncommands = 0
        # INFO commandstats: command name -> its counters (ns from command_took)
        self.cmdstats: dict[str, CmdStat] = {}
        self.last_stat: CmdStat | None = None
        self.slowlog = SlowLog()  # SLOWLOG: fed by command_took with the command below
        self.latency = LatencyMonitor()  # LATENCY: fed by command_took too
        self.last_argv: list[bytes] | None = None
        self.max_body = 0  # job-max-body-size (no limit: 2**62), kept here by config_changed
        self.slow_us = -1  # slowlog-log-slower-than and latency-monitor-threshold, kept
        self.latency_ms = 0  # here by config_changed: read on every command
        self.aof = Persistence(self)  # AOF records; the shell turns .on once the file is open
        self.requests: list[tuple[Client, ShellRequest]] = []  # (client, ShellRequest) for the shell to finish
        self.logs_out: list[tuple[str, str]] = []  # (level, line) for the server log
        # MONITOR: the clients that watch every command, and the feed since the last take
        self.monitors: dict[int, Client] = {}
        self.monitor_out: list[bytes] = []
        # monitors added since the last take: their feed starts at this line of it
        self.monitor_from: dict[int, int] = {}
        self.kills: list[tuple[Client, bytes]] = []  # CLIENT KILL: (client, last bytes)
        self.pause_until = 0  # CLIENT PAUSE: no client's command runs before (ms)
        self.pause_out: int | None = None  # pause_until for the shell, when changed
        self.noreply_clients = 0  # clients with CLIENT REPLY OFF or SKIP
        # CLUSTER MEET asks the shell to check the peer's bus first (the server does;
        # the simulator and the test harnesses meet at once)
        self.probe_meet = False
        # here, not at import: the commands import this module
        from .commands import COMMANDS, renamed_table

        try:
            self._cmds = renamed_table(config.rename_command)
            # _execute's cache: the last name looked up, its command, their counters
            self._last_name = b""
            self._last_cmd: Command | None = None
            self._last_st: CmdStat | None = None
            # users and what each may run (acl.py)
            self.acl = Acl(frozenset(c.name for c in COMMANDS.values()),
                           frozenset(c.name for c in COMMANDS.values() if c.noauth))
            self.acl.configure(config.user, config.requirepass)
        except (ValueError, AclError) as e:
            raise ConfigError(f"*** FATAL CONFIG ERROR ***\n{e}", kind="invalid",
                              reason=str(e)) from None
        # how jobs ended, for JOBSTATUS after they are gone (see outcomes.py)
        self.outcomes = Outcomes(config.job_outcome_retention * 1000,
                                 config.job_outcome_max_memory)
        self.metrics = JobMetrics()  # per-queue counters and histograms (JOBMETRICS)
        self.config_changed([])
        # the cluster, by topic (each owns its state; see their modules)
        self.members = Membership(self, now)
        self.repl = Replication(self)
        self.acks = Acks(self)
        self.fed = Federation(self)
        self.groups = Groups(self)  # consumer groups: events, claims, QNOTIFY clients
        self.cluster_dirty = False  # nodes.conf must be saved (peers, identity, leaving)
        self.bus_out: list[tuple[list[str], M.Message]] = []  # (destination ids, message) for take_messages()
        self._item_bytes = 0  # job body bytes in the last message of bus_out
        self.msgs_sent = 0
        self.msgs_received = 0
        self._shared: dict[Any, Any] = {}  # see shared(): values of any hashable kind
        self._malformed_logged = -1000  # when a refused bus message was last logged
        self._malformed_logged_count = 0
        m, r, a, f = self.members, self.repl, self.acks, self.fed
        # bus message type -> handler(peer, fields, now); MEET is handled before a peer exists
        self._handlers: dict[int, BusHandler] = {
            M.PING: m.on_ping, M.PONG: m.on_pong, M.FAIL: m.on_fail,
            M.REPLJOB: r.on_repljob, M.GOTJOB: r.on_gotjob, M.ENQUEUE: r.on_enqueue,
            M.WILLQUEUE: r.on_willqueue, M.QUEUED: r.on_queued, M.WORKING: r.on_working,
            M.SETACK: a.on_setack, M.GOTACK: a.on_gotack, M.DELJOB: a.on_deljob,
            M.NEEDJOBS: f.on_needjobs, M.YOURJOBS: f.on_yourjobs, M.PAUSE: f.on_pause,
            M.OUTCOME: a.on_outcome,
        }
        g = self.groups
        self._handlers.update({
            M.EVADD: g.repl.on_evadd, M.EVSTATE: g.repl.on_evstate,
            M.EVPULL: g.leases.on_evpull, M.EVGRANT: g.leases.on_evgrant,
            M.EVACK: g.acks.on_evack, M.EVACKED: g.acks.on_evacked,
            M.EVACKS: g.acks.on_evacks, M.EVACKEDS: g.acks.on_evackeds,
            M.EVFLUSH: g.repl.on_evflush, M.EVWATCH: g.notify.on_evwatch,
            M.EVAVAIL: g.notify.on_evavail, M.EVDEL: g.repl.on_evdel,
            M.EVSYNC: g.sync.on_evsync, M.EVSYNCED: g.sync.on_evsynced,
            M.EVNEED: g.sync.on_evneed,
        })
        self.run_id = f"{rng.getrandbits(160):040x}"
        self._next_cron = now
        # bytes read from and written to clients: the shell counts them here (INFO)
        self.net_in = 0
        self.net_out = 0
        # (ms, ncommands, net_in, net_out) every cron, for INFO's instantaneous rates
        self._ops_samples: list[tuple[int, int, int, int]] = [(now, 0, 0, 0)]
        self.keys = Keys(self)  # ADDJOB IDEMPOTENT keys, GETJOB TOKEN tokens
        # job-lifecycle events for the shell's event log: (ms, kind, id, queue, extra)
        self.events_on = False
        self.events_out: list[Event] = []

    # ------------------------------------------------------------ cluster bus
    def shared(self, value: T) -> T:
        """One object per distinct value, for what many jobs hold alike: the lists of
        node IDs (delivered, confirmed) of the jobs replicated to the same nodes, and the
        name of a queue a replica holds copies for (it has no Queue object to share the
        name of). Each would otherwise be a new object per job as decoded from the bus
        (64 bytes for a list of three, 33 plus the name for a name). Cleared at 4096."""
        v: T | None = self._shared.get(value)
        if v is None:
            if len(self._shared) >= 4096:
                self._shared.clear()
            self._shared[value] = value
            return value
        return v

    def send(self, dsts: Sequence[str], mtype: int, *fields: object) -> None:
        if not dsts:
            return
        msg = [mtype, self.myid, self.port, M.SF_LEAVING if self.leaving else 0, *fields]
        self.bus_out.append((list(dsts), msg))
        self.msgs_sent += len(dsts)

    def send_to_copies(self, job: Job, mtype: int, *fields: object) -> None:
        """send() to every other node that may hold a copy of ``job``."""
        myid = self.myid
        self.send([n for n in job.delivered if n != myid], mtype, *fields)

    def take_messages(self) -> dict[str, M.Outgoing]:
        """Take what was sent since the last call, per destination node: one message
        each, a BATCH of them when several (so one frame per peer), in sending order."""
        out, self.bus_out = self.bus_out, []
        self._item_bytes = 0
        per: dict[str, list[M.Message]] = {}
        for dsts, msg in out:
            for d in dsts:
                lst = per.get(d)
                if lst is None:
                    per[d] = [msg]
                else:
                    lst.append(msg)
        return {d: msgs[0] if len(msgs) == 1 else self._batches(msgs)
                for d, msgs in per.items()}

    def _batches(self, msgs: list[M.Message]) -> M.Outgoing:
        """A BATCH of ``msgs``; a tuple of BATCHes (frames in order) past the
        MAX_ITEMS messages a peer accepts in one."""
        head: M.Message = [M.BATCH, self.myid, self.port, 0]
        step = M.MAX_ITEMS
        if len(msgs) <= step:
            return [*head, msgs]
        return tuple([*head, msgs[i:i + step]] for i in range(0, len(msgs), step))

    def send_item(self, dsts: list[str], mtype: int, item: object, size: int = 0) -> None:
        """Send one item of a message that carries many (REPLJOB jobs, GOTJOB IDs):
        it joins the previous message when that one is of the same type to the same
        nodes, so a burst of replications costs one message per peer, not one per job.
        Only the last message grows, so the order of messages is kept. ``dsts`` must
        be sorted (equal sets compare equal). ``size``: the bytes the item carries (a
        job's body): a message takes no more items past SOFT_BYTES of them."""
        out = self.bus_out
        if out:
            last_dsts, last = out[-1]
            if (last[0] == mtype and last_dsts == dsts and len(last) < M.MAX_ITEMS
                    and self._item_bytes + size <= M.SOFT_BYTES):
                last.append(item)
                self._item_bytes += size
                return
        out.append((dsts, [mtype, self.myid, self.port, M.SF_LEAVING if self.leaving else 0,
                           item]))
        self._item_bytes = size
        self.msgs_sent += len(dsts)

    def send_items(self, dsts: list[str], mtype: int, items: list[Any]) -> None:
        """send_item() of each of ``items``, in one step."""
        out = self.bus_out
        if out:
            last_dsts, last = out[-1]
            if last[0] == mtype and last_dsts == dsts and len(last) + len(items) <= M.MAX_ITEMS:
                last.extend(items)
                return
        out.append((dsts, [mtype, self.myid, self.port, M.SF_LEAVING if self.leaving else 0,
                           *items]))
        self._item_bytes = 0  # IDs: no bodies
        self.msgs_sent += len(dsts)

    def set_identity(self, node_id: str) -> None:
        """Take this node ID (e.g. restored from nodes.conf); job IDs follow it."""
        self.myid = node_id
        self.myid_b = node_id.encode()
        self.event_suffix = event_id_suffix(node_id)
        self.idgen = JobIdGenerator(node_id, self.rng.getrandbits(160).to_bytes(20, "little"))
        self.cluster_dirty = True

    def cluster_reset(self, hard: bool, now: int) -> None:
        self.members.forget_all()
        self.flushall()
        if hard:
            self.set_identity(new_node_id(self.rng))
        self.leaving = False
        self.members.peers_changed()

    def set_leaving(self, on: bool, now: int) -> None:
        if on == self.leaving:
            return
        self.leaving = on
        self.cluster_dirty = True
        if on:  # GETJOB clients waiting here must go elsewhere
            self.queues.reply_blocked(resp.error(errors.LEAVING))
        self.members.announce()

    def handle_message(self, msg: object, peer_ip: str, now: int) -> None:
        """One message from the bus (a BATCH: each of its messages in turn). What
        breaks the format is refused by ``messages.parse``, counted and logged; an
        exception raised past that is a bug of the core and propagates. ``msg`` is
        whatever the frame decoded to (object: compiled, a narrower annotation would
        raise TypeError on garbage instead of refusing it)."""
        self.now = now
        try:
            inner = M.batch(msg)
        except M.Malformed as e:
            self._malformed(peer_ip, e, now)
            return
        if inner is None:
            self._handle_one(msg, peer_ip, now)
        else:
            for m in inner:
                if type(m) is list and m and m[0] == M.BATCH:  # no nesting
                    self._malformed(peer_ip, M.Malformed("nested BATCH"), now)
                    continue
                self._handle_one(m, peer_ip, now)
        if self.queues.ready:
            self.queues.serve_ready(now)

    def _handle_one(self, msg: object, peer_ip: str, now: int) -> None:
        self.msgs_received += 1
        try:
            mtype, sid, sport, sflags, fields = M.parse(msg)
        except M.Malformed as e:
            self._malformed(peer_ip, e, now)
            return
        if mtype == M.MEET:
            self.members.on_meet(sid, peer_ip, sport, sflags, fields, now)
            return
        p = self.members.peers.get(sid)
        if p is None:
            if mtype == M.PONG:
                self.members.on_handshake_pong(sid, peer_ip, sport, sflags, fields, now)
            return  # unknown nodes must MEET us first
        self.members.heard_from(p, sflags, now)
        self._handlers[mtype](p, fields, now)

    def _malformed(self, peer_ip: str, e: Exception, now: int) -> None:
        """Count a refused message; log it, at most once a second (a flood of garbage
        must not flood the log too)."""
        self.stats.bus_malformed += 1
        if now - self._malformed_logged >= 1000:
            n = self.stats.bus_malformed - self._malformed_logged_count
            self._malformed_logged = now
            self._malformed_logged_count = self.stats.bus_malformed
            more = f" ({n - 1} more since the last report)" if n > 1 else ""
            self.logs_out.append(("warning", f"Malformed cluster bus message from {peer_ip} "
                                             f"refused: {e}{more}"))

    def delivered_ids(self, job: Job) -> list[bytes]:
        if job.flags & F_DUMMY:
            return []
        return [n.encode() for n in job.delivered] if job.delivered else [self.myid_b]

    def confirmed_ids(self, job: Job) -> list[bytes]:
        return [n.encode() for n in job.confirmed]

    # ------------------------------------------------------------------ clients
    def new_client(self, conn: Any = None, addr: str = "", now: int = 0) -> Client:
        self._next_client_id += 1
        c = Client(self._next_client_id, conn, addr, now)
        c.authed, c.allowed = self.acl.default_state
        c.queues = self.acl.queue_access("default") if c.authed else None
        self.clients[c.id] = c
        self.stats.connections += 1
        self.mem.used += CLIENT_OVERHEAD
        return c

    def client_closed(self, client: Client) -> None:
        client.closed = True
        if client.noreply:
            client.noreply = REPLY_ON
            self.noreply_clients -= 1
        if self.monitors:
            self.monitors.pop(client.id, None)
        if client.blocked is not None:
            self.queues.unblock(client)
        if client.blocked_add is not None:
            # a producer gone before its synchronous ADDJOB got the job's ID: it was never
            # told the job exists and may add it again, so the job goes, from every node
            # it was sent to (as Disque). (A QADD's event stays: its copies complete.)
            rid = client.blocked_add
            client.blocked_add = None
            job = self.jobs.get(rid) if len(rid) == JOB_ID_LEN else None
            if job is not None and job.state == WAIT_REPL:
                self.repl.failed(job, "")
        self.groups.client_closed(client)
        if self.clients.pop(client.id, None) is not None:
            self.mem.used -= CLIENT_OVERHEAD + client.qbuf
            client.qbuf = 0

    def set_client_buffer(self, client: Client, nbytes: int) -> None:
        """The shell reports how many request bytes it holds for a client (counted
        in used_memory, as client buffers are in Disque)."""
        self.mem.used += nbytes - client.qbuf
        client.qbuf = nbytes

    def set_bus_buffer(self, nbytes: int) -> None:
        """The shell reports the bytes of big bus frames still arriving (counted in
        used_memory until they are whole: a peer's frame competes with the jobs)."""
        mem = self.mem
        mem.used += nbytes - mem.bus_buffer
        mem.bus_buffer = nbytes

    # ---------------------------------------------------------------- dispatch
    def execute(self, client: Client, argv: list[bytes], now: int) -> bytes | None:
        """Run one command. Returns its reply, or None when the reply comes later
        through take_outputs(): a blocked GETJOB, an ADDJOB waiting for its copies, a
        command the shell finishes (its ``requests``). Under CLIENT REPLY OFF or SKIP
        the reply is empty."""
        reply = self._execute(client, argv, now)
        if client.noreply:
            return self._quiet(client, reply)
        return reply

    def _quiet(self, client: Client, reply: bytes | None) -> bytes | None:
        """CLIENT REPLY OFF / SKIP: the reply is not sent (errors neither)."""
        mode = client.noreply
        if mode == REPLY_SKIP_NEXT:  # CLIENT REPLY SKIP ran: the next reply goes
            client.noreply = REPLY_SKIP
        elif mode == REPLY_SKIP:
            client.noreply = REPLY_ON
            self.noreply_clients -= 1
        return None if reply is None else b""

    def _execute(self, client: Client, argv: list[bytes], now: int) -> bytes | None:
        self.now = now
        self.ncommands += 1
        name = argv[0]
        # the last command's entry when the name is the same bytes (a pipeline of one
        # command: a compare instead of hashing a new name object and a dict lookup)
        cmd = self._last_cmd
        if cmd is None or name != self._last_name:
            cmd = self._cmds.get(name)
            if cmd is None:
                cmd = self._cmds.get(name.lower())
                if cmd is None:
                    return resp.error(errors.unknown_command(name))
            self._last_name = name
            self._last_cmd = cmd
            self._last_st = None
        n = len(argv)
        arity = cmd.arity
        if (n != arity) if arity > 0 else (n < -arity):
            return resp.error(errors.wrong_arity(cmd.name))
        # what the client's user may run, None for everything (set at AUTH, acl.py)
        if client.allowed is not None and cmd.name not in client.allowed:
            return self._refused(client, cmd.name)
        # the queues the user may touch (``~pattern`` rules), None for all (acl.py)
        if client.queues is not None:
            denied = queue_denied(client.queues, cmd.name, argv, self.queue_of)
            if denied is not None:
                self.acl.denied += 1
                return resp.error(errors.noperm_queue(client.user, denied))
        if cmd.denyoom and self.mem.used >= self.mem.limit:
            oom = self.mem.refuse_oom()
            if oom is not None:
                return oom
        st = self._last_st
        if st is None:
            st = self.cmdstats.get(cmd.name)
            if st is None:
                st = self.cmdstats[cmd.name] = CmdStat()
            self._last_st = st
        st.calls += 1
        self.last_stat = st
        self.last_argv = argv
        client.last_cmd = cmd.name
        if self.monitors and cmd.monitored:
            self._feed_monitors(client, cmd.name, argv, now)
        try:
            reply = cmd.handler(self, client, argv, now)
        except ReplyError as e:
            reply = resp.error(e.msg)
        if self.queues.ready:
            self.queues.serve_ready(now)
        if isinstance(reply, ShellRequest):
            self.requests.append((client, reply))  # the shell replies (outputs.py)
            return None
        return reply

    def _feed_monitors(self, client: Client, name: str, argv: list[bytes], now: int) -> None:
        """One MONITOR line, in Disque's format: ``+<unix s>.<us> [<addr>] "arg" ...``,
        the arguments as sent, quoted like redis-cli (passwords redacted, as Redis 6)."""
        if name == "auth":
            argv = [argv[0], *[b"(redacted)"] * (len(argv) - 1)]
        elif name == "hello":
            argv = list(argv)
            for k in range(2, len(argv) - 2):
                if argv[k].lower() == b"auth":
                    argv[k + 1] = argv[k + 2] = b"(redacted)"
        self.monitor_out.append(b"+%d.%06d [%s] %s\r\n" % (
            now // 1000, now % 1000 * 1000, client.addr.encode(),
            b" ".join([resp.quoted(a) for a in argv])))

    def kill_client(self, client: Client, last: bytes = b"") -> None:
        """CLIENT KILL: the shell closes ``client`` after sending ``last``."""
        self.kills.append((client, last))

    def pause_clients(self, until: int) -> None:
        """CLIENT PAUSE / UNPAUSE: no client's command runs before ``until`` (ms)."""
        self.pause_until = until
        self.pause_out = until

    # ----------------------------------------------------------------- outputs
    def take_outputs(self) -> Outputs:
        """Everything the node asks of the world since the last call (see outputs.py)."""
        if self.noreply_clients:  # CLIENT REPLY OFF: later replies are not sent either
            self.outbox = [(c, b"" if c.noreply == REPLY_OFF else d) for c, d in self.outbox]
        out = Outputs(
            self.aof.take(),
            self.members.nodes_conf_text() if self.cluster_dirty else None,
            self.members.peer_links() if self.members.links_dirty else None,
            self.take_messages() if self.bus_out else {},
            self.outbox,
            self.requests,
            self.events_out,
            self.logs_out,
            self.wake_hint(),
        )
        self.cluster_dirty = self.members.links_dirty = False
        self.outbox = []
        self.requests = []
        self.events_out = []
        self.logs_out = []
        if self.pause_out is not None or self.kills or self.monitor_out:
            out.pause = self.pause_out
            out.kills = self.kills
            lines = self.monitor_out
            if lines:
                feed = b"".join(lines)
                start = self.monitor_from
                out.monitor = [(c, feed if c.id not in start else b"".join(lines[start[c.id]:]))
                               for c in self.monitors.values()]
                self.monitor_from = {}
            self.pause_out = None
            self.kills = []
            self.monitor_out = []
        return out

    def has_outputs(self) -> bool:
        """Anything for take_outputs() to carry out, the wake hint aside (cheap)."""
        return bool(self.aof.out or self.outbox or self.bus_out or self.requests
                    or self.events_out or self.logs_out or self.cluster_dirty
                    or self.members.links_dirty or self.monitor_out or self.kills
                    or self.pause_out is not None)

    def config_changed(self, names: list[str]) -> None:
        """Refresh values derived from the configuration (after CONFIG SET)."""
        self.mem.set_limit(self.config.maxmemory)
        self.slow_us = self.config.slowlog_log_slower_than
        self.max_body = self.config.job_max_body_size or 1 << 62
        self.latency_ms = self.config.latency_monitor_threshold
        self.outcomes.retention_ms = self.config.job_outcome_retention * 1000
        if self.outcomes.max_bytes != self.config.job_outcome_max_memory:
            self.outcomes.max_bytes = self.config.job_outcome_max_memory
        if "requirepass" in names:
            self.acl.set_requirepass(self.config.requirepass)
            if not self.config.requirepass:  # the default user has nopass again
                authed, allowed = self.acl.default_state
                for c in self.clients.values():
                    if not c.authed:
                        c.authed, c.allowed, c.user = authed, allowed, "default"
                        c.queues = self.acl.queue_access("default")

    def queue_of(self, jid: bytes) -> bytes | None:
        """The queue of a job this node knows (None: unknown here, or a dummy ack)."""
        job = self.jobs.get(jid)
        return None if job is None or job.flags & F_DUMMY else job.queue

    def _refused(self, client: Client, name: str) -> bytes:
        if not client.authed:
            return resp.error(errors.NOAUTH)
        self.acl.denied += 1
        return resp.error(errors.noperm(client.user, name))

    def jitter(self) -> int:
        """+-RETRY_JITTER_MS, so that copies on several nodes do not act at once."""
        return int(self.random() * (2 * RETRY_JITTER_MS)) - RETRY_JITTER_MS

    def next_ctime(self, now: int) -> int:
        """Creation time in ns: wall clock ms * 1e6, bumped to stay unique and rising."""
        t = i64(now) * 1_000_000  # (i64: an int product this large takes a slow path)
        if t <= self.last_ctime:
            t = self.last_ctime + 1
        self.last_ctime = t
        return t

    def info(self, section: str, host: HostFacts, now: int) -> bytes:
        """INFO's reply (the ``Info`` shell request), with the process's facts the shell
        read for it."""
        return info_reply(self, section, host, now)

    def persistence_info(self, aof_fields: tuple[tuple[str, object], ...] | None
                         ) -> list[tuple[str, object]]:
        return [
            ("loading", int(self.loading)),
            ("aof_enabled", int(self.aof.on)),
            ("aof_state", "on" if self.aof.on else "off"),
            *(aof_fields or [
                ("aof_rewrite_in_progress", 0),
                ("aof_rewrite_scheduled", 0),
                ("aof_last_rewrite_time_sec", -1),
                ("aof_current_rewrite_time_sec", -1),
                ("aof_last_bgrewrite_status", "ok"),
                ("aof_last_write_status", "ok"),
            ]),
        ]

    def command_took(self, ns: int) -> None:
        """The shell's measure of the command execute() just ran (INFO commandstats):
        time comes in, as everything else; the core reads no clock."""
        st = self.last_stat
        if st is not None:
            st.ns += ns
            self.last_stat = None
            argv = self.last_argv
            if 0 <= self.slow_us <= ns // 1000 and argv is not None:
                self.slowlog.record(argv, ns // 1000, self.now, self.config.slowlog_max_len)
            self.last_argv = None  # not kept alive until the next command (a big body)
            ms = ns // 1_000_000
            if 0 < self.latency_ms <= ms:
                self.latency.add("command", ms, self.now)

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT: the counters INFO stats and commandstats show, as Disque."""
        self.stats = Stats()
        self.cmdstats.clear()
        self._last_st = None  # (_execute's cached counters were the old ones)
        self.ncommands = self.net_in = self.net_out = 0
        self._ops_samples = [(self.now, 0, 0, 0)]

    def flushall(self) -> None:
        """DEBUG FLUSHALL: forget every job and queue; blocked consumers get null."""
        self.queues.reply_blocked(None)
        for job in self.jobs.values():
            if job.state == WAIT_REPL:
                self.store.unregister(job)
            self.awake.cancel(job)
        self.jobs.clear()
        self.queues.clear()
        self.keys.clear()
        self.store.amo_done.clear()
        self.groups.flushall()
        self.awake = AwakeIndex()
        self.mem.clear()

    # ------------------------------------------------------------------ timers
    def wake_hint(self) -> float:
        """A lower bound for timers added since the last call (NEVER if none): the
        shell re-arms its timer from next_wake() only when this is earlier."""
        h = self.awake.hint
        qs = self.queues
        if qs.block_hint < h:
            h = qs.block_hint
        if h != NEVER:
            self.awake.hint = qs.block_hint = NEVER
        return h

    def next_wake(self) -> int | None:
        t = self.awake.next_due()
        b = self.queues.next_deadline()
        if b is not None and (t is None or b < t):
            t = b
        if t is None or self._next_cron < t:
            t = self._next_cron
        return t

    def tick(self, now: int) -> None:
        """Fire every timer that is due at ``now``."""
        self.now = now
        for t in self.awake.pop_due(now):
            if isinstance(t, Job):
                if self.jobs.get(t.id) is t:
                    self.store.process_job(t, now)
            else:
                self.groups.fire(t, now)  # consumer groups' timers (core/groups/)
        self.queues.expire_blocked(now)
        if now >= self._next_cron:
            self._next_cron = now + EVICT_CRON_MS
            self._cron(now)
        if self.queues.ready:
            self.queues.serve_ready(now)

    def ops_per_sec(self) -> int:
        """Commands per second over the last ~1.6 s (INFO instantaneous_ops_per_sec)."""
        t0, n0, _, _ = self._ops_samples[0]
        t1, n1, _, _ = self._ops_samples[-1]
        return (n1 - n0) * 1000 // (t1 - t0) if t1 > t0 else 0

    def net_kbps(self) -> tuple[float, float]:
        """KB/s read from and written to clients over the last ~1.6 s (INFO
        instantaneous_input_kbps, instantaneous_output_kbps)."""
        t0, _, i0, o0 = self._ops_samples[0]
        t1, _, i1, o1 = self._ops_samples[-1]
        if t1 <= t0:
            return 0.0, 0.0
        return (i1 - i0) / 1.024 / (t1 - t0), (o1 - o0) / 1.024 / (t1 - t0)

    def _cron(self, now: int) -> None:
        if self.members.peers:
            self.members.cron(now)
            self.fed.cron(now)
        samples = self._ops_samples
        samples.append((now, self.ncommands, self.net_in, self.net_out))
        if len(samples) > 16:
            del samples[0]
        if self.keys.pending():
            self.keys.expire(now)
        if len(self.outcomes):
            self.outcomes.expire(now)
        self.groups.cron(now)
        level = self.mem.level()
        if level >= CRITICAL:
            self.mem.evict(self.config.maxmemory * 95 // 100)
        self.queues.evict_idle(now, QUEUE_MAX_IDLE_MS[min(level, 2)])


__all__ = ["Node", "Stats"]
