"""The driver: owns the Node, feeds it the clock, carries out its outputs, runs its timer.

Everything the pure core cannot do itself happens here: reading the clock, carrying
out what ``node.take_outputs()`` gives (a ``core.outputs.Shell``: AOF records, the
cluster config, bus links and frames, replies for other clients, shell requests such
as CONFIG REWRITE, SHUTDOWN, QUIT and INFO's process facts, events, log lines), and
keeping one loop timer armed at ``node.next_wake()``.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import os
import sys
import time
from functools import partial
from typing import TYPE_CHECKING, Final

from ..codec import resp
from ..codec.bus import BusMessage, encode_frame
from ..core.awake import NEVER
from ..core.client import REPLY_OFF, Client
from ..core.config import Config, ConfigError, OutputBufferLimit
from ..core.info import HostFacts
from ..core.messages import BATCH, Outgoing
from ..core.node import Node
from ..core.outputs import Event, Outputs, Shell
from .log import VERBOSE, log, set_level
from .protocol import ClientBatch, ClientProtocol
from .watchdog import stuck

if TYPE_CHECKING:
    from .aof import AofFile
    from .bus import Bus
    from .eventlog import EventLog

# MONITOR's output limit: Redis's default for its pubsub clients (C Disque has no such
# class): closed at 32 MB held, or at 8 MB held for 60 s
MONITOR_LIMIT: Final = OutputBufferLimit(32 << 20, 8 << 20, 60)


class Driver(Shell):
    def __init__(self, node: Node, config: Config, config_path: str | None,
                 loop: asyncio.AbstractEventLoop, pure_resp: bool = False) -> None:
        self.node = node
        self.config = config
        self.config_path = config_path
        self.loop = loop
        self.pure_resp = pure_resp
        self.servers: list[asyncio.Server] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float = NEVER
        self.stopping = asyncio.Event()
        self.exit_code = 0
        self.bus: Bus | None = None  # set by main once listening
        self._after_scheduled = False
        self.batch = ClientBatch(loop, self.after_commands)  # the clients' iteration work
        self.aof: AofFile | None = None  # while appendonly is on
        self.aof_path = os.path.join(config.dir, config.appendfilename)
        self.nodes_conf_path = os.path.join(config.dir, config.cluster_config_file)
        self._nodes_conf_lock: int | None = None  # fd holding the flock on nodes.conf
        self.events: EventLog | None = None  # opened at the first events
        self._events_ticking = False
        self._security_logged = -NEVER  # when the cross-protocol warning was last logged
        node.events_on = config.event_log
        node.probe_meet = True  # CLUSTER MEET: see _meet
        self._tasks: set[asyncio.Task[None]] = set()  # CLUSTER MEET probes running (a reference keeps each)
        self.obuf_limit: OutputBufferLimit | None = None  # client-output-buffer-limit when set (ClientProtocol)
        # CLIENT PAUSE: the connections waiting for its end (batch.paused_until)
        self.paused: set[ClientProtocol] = set()
        self._pause_timer: asyncio.TimerHandle | None = None
        self._idle_ticking = False  # the `timeout` check runs (while timeout > 0)
        self.config_changed(["client-output-buffer-limit", "timeout"])

    @staticmethod
    def now() -> int:
        return int(time.time() * 1000)

    def host_facts(self) -> HostFacts:
        """Process facts for INFO that only the shell can read."""
        rss = 0
        try:
            with open("/proc/self/statm", "rb") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
        t = os.times()
        u = os.uname()
        return HostFacts(
            pid=os.getpid(),
            rss=rss,
            cpu_user=t.user,
            cpu_sys=t.system,
            os=f"{u.sysname} {u.release} {u.machine}",
            arch_bits=64 if sys.maxsize > 2**32 else 32,
            multiplexing_api="uvloop" if "uvloop" in type(self.loop).__module__ else "asyncio",
            executable=os.path.abspath(sys.argv[0]),
            config_file=self.config_path or "",
            aof=tuple(self.aof.info()) if self.aof is not None else None,
        )

    # ----------------------------------------------------------- node outputs
    def count_net(self) -> None:
        """The clients' bytes counted by the batch go to the node (INFO's net fields):
        once per loop iteration, and before the timer's cron samples them."""
        batch, node = self.batch, self.node
        if batch.net_in:
            node.net_in += batch.net_in
            batch.net_in = 0
        if batch.net_out:
            node.net_out += batch.net_out
            batch.net_out = 0

    def after_event(self) -> None:
        """Carry out what the node produced (core/outputs.py, in that order) and
        re-arm the timer."""
        node = self.node
        self.count_net()
        for _ in range(1000):  # resumed pipelines may produce more; bounded
            if not node.has_outputs():
                break
            self.deliver(node.take_outputs())
        # new timers only matter if earlier than the armed one
        t_at = self._timer_at
        if node.awake.hint < t_at or node.queues.block_hint < t_at:
            node.wake_hint()
            self.arm()

    def deliver(self, out: Outputs) -> None:
        Shell.deliver(self, out)
        if out.wake < self._timer_at:
            self.arm()

    # Shell methods: what each output becomes here
    def persist(self, records: list[bytes]) -> None:
        if self.aof is not None:
            self.aof.append(records)

    def sync_links(self, links: dict[str, tuple[str, int]]) -> None:
        if self.bus is not None:
            self.bus.sync_links(links)

    def reply(self, client: Client, data: bytes) -> None:
        conn = client.conn
        if conn is None:
            return
        client.last_cmd_time = self.node.now  # a reply is an interaction (Redis's too)
        aof = self.aof
        if aof is not None and aof.holding:
            aof.hold(conn, data)  # behind replies waiting for the AOF write
        else:
            conn.write(data)
        if client.blocked is None:
            conn.resume()

    def pause_clients(self, until: int) -> None:
        """CLIENT PAUSE: no client's command runs until ``until`` (ms; 0: now). Their
        requests stay buffered (ClientProtocol.process) and run when it ends."""
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        delay = (until - self.now()) / 1000
        if delay <= 0:
            self.unpause()
            return
        self.batch.paused_until = self.loop.time() + delay
        self._pause_timer = self.loop.call_later(delay, self.unpause)

    def unpause(self) -> None:
        self._pause_timer = None
        self.batch.paused_until = 0.0
        held, self.paused = self.paused, set()
        for conn in held:
            if not conn.closing and not conn.waiting:
                self.batch.run_later(conn)

    def kill(self, client: Client, data: bytes) -> None:
        """CLIENT KILL: close the connection after ``data`` (the killer's own reply)."""
        conn = client.conn
        if conn is not None and not conn.closing:
            if data:
                conn.write(data)
            conn.close()

    def feed_monitor(self, client: Client, data: bytes) -> None:
        """The MONITOR feed, within an output limit: a monitor that does not read is
        closed (with a log line) before it can hold more than MONITOR_LIMIT's bytes."""
        conn = client.conn
        if conn is not None and not conn.closing:
            conn.write(data)
            conn.check_output_limit(MONITOR_LIMIT, len(data))

    def log(self, level: str, line: str) -> None:
        getattr(log, level)("%s", line)

    # ------------------------------------------------------------ persistence
    def flush_aof(self) -> None:
        """Before replies leave: the records they depend on go to the AOF (with the
        node's other outputs, taken in the one call that takes them all)."""
        if self.node.aof.out:
            self.deliver(self.node.take_outputs())

    def record_events(self, out: list[Event]) -> None:
        events = self.events
        if events is None:
            from .eventlog import EventLog

            cfg = self.config
            self.events = events = EventLog(os.path.join(cfg.dir, cfg.event_log_dir), self.node.myid,
                                   cfg.event_log_max_size)
            if not self._events_ticking:
                self._events_ticking = True
                self.loop.call_later(0.2, self._events_tick)
        events.write(out)

    def _events_tick(self) -> None:
        """Every 200 ms: buffered events reach the file (a quiet node too)."""
        if self.events is None:
            self._events_ticking = False
            return
        self.events.flush()
        self.loop.call_later(0.2, self._events_tick)

    def deliver_pending(self) -> None:
        """Carry out what the node produced since the last delivery, now (before a
        stop closes what those outputs need)."""
        if self.node.has_outputs():
            self.deliver(self.node.take_outputs())

    def stop_events(self) -> None:
        """Close the event log, once the events still pending are in it (they come
        with the node's other outputs, which are delivered too, not dropped)."""
        self.deliver_pending()
        if self.events is not None:
            self.events.close()
            self.events = None

    def start_aof(self, rewrite: bool) -> None:
        """Open the AOF for appending; with ``rewrite`` it is rebuilt from the live jobs
        first (turning AOF on at runtime: what was on disk is stale)."""
        from .aof import AofFile

        if rewrite:
            with open(self.aof_path, "wb"):
                pass
        self.aof = aof = AofFile(self, self.aof_path, self.config.appendfsync)
        self.node.aof.on = True
        if rewrite:
            aof.start_rewrite()
        self.loop.call_later(1.0, self._aof_tick)

    def stop_aof(self) -> None:
        if self.aof is not None:
            self.flush_aof()
            self.aof.close()
            self.aof = None
        self.node.aof.on = False

    def _idle_tick(self) -> None:
        """Once a second while ``timeout`` is set: close the clients idle for longer,
        as Redis does, but not those waiting for a reply (a blocked GETJOB, an ADDJOB
        waiting for its copies, a shell request): they are not idle, they wait."""
        timeout = self.config.timeout
        if not timeout:
            self._idle_ticking = False
            return
        now = self.now()
        oldest = now - timeout * 1000
        idle = [c for c in self.node.clients.values()
                if c.last_cmd_time < oldest and c.blocked is None and c.blocked_add is None
                and c.conn is not None and not c.conn.waiting]
        for c in idle:
            log.log(VERBOSE, "Closing idle client %s (idle for %d s)", c.addr,
                    (now - c.last_cmd_time) // 1000)
            c.conn.close()
        self.loop.call_later(1.0, self._idle_tick)

    def _aof_tick(self) -> None:
        if self.aof is not None:
            self.aof.tick()
            self.loop.call_later(1.0, self._aof_tick)


    def send_messages(self, per: dict[str, Outgoing]) -> None:
        """One frame per peer (the node grouped its messages so)."""
        bus = self.bus
        if bus is None:
            return
        aof = self.aof
        hold = aof is not None and aof.holding  # frames leave after the AOF write
        for d, msg in per.items():
            frame = encode_frame(msg)
            if len(frame) > bus.max_frame:
                frame = self.fit_frame(msg, bus)
                if not frame:
                    continue
            if aof is not None and hold:
                aof.hold_call(partial(bus.send, d), frame)
            else:
                bus.send(d, frame)
        if not hold:
            # outputs are delivered once per iteration already (after_event_soon):
            # write now rather than wait for the bus's own end-of-iteration flush
            bus.flush_now()

    def fit_frame(self, msg: Outgoing, bus: Bus) -> bytes:
        """The frames of an output past cluster-bus-max-frame, which the peer would
        refuse: each message of its BATCHes alone, and any message still too big
        dropped with a warning (the cluster protocol retries, or the client times out)."""
        msgs = msg if type(msg) is tuple else (msg,)
        out: list[bytes] = []
        for m in msgs:
            for one in (m[4] if m[0] == BATCH else (m,)):
                frame = encode_frame(one)
                if len(frame) <= bus.max_frame:
                    out.append(frame)
                else:
                    bus.refusals.warning(("too-big", one[0]), "Dropped a cluster bus message "
                                         "of %d bytes (type %d): over cluster-bus-max-frame",
                                         len(frame), one[0])
        return b"".join(out)

    def lock_nodes_conf(self) -> bool:
        """Take an exclusive flock on nodes.conf (created empty if missing), held for
        the life of the process, as Redis and Disque do: two nodes started in one
        directory would otherwise share one node ID. Each save renames a new file
        over it that is locked before the rename (see write_atomically), so the
        name always points to a locked file; a lock won on a file renamed away
        meanwhile is retried on the new one."""
        path = self.nodes_conf_path
        for _ in range(100):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                log.warning("Sorry, the cluster configuration file %s is already used by a "
                            "different Disque node (another disque-server running with this "
                            "dir?). Please make sure that different nodes use different "
                            "cluster configuration files (set 'dir' or "
                            "'cluster-config-file').", path)
                return False
            except BaseException:
                os.close(fd)
                raise
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                self._nodes_conf_lock = fd
                return True
            os.close(fd)  # the holder replaced the file while we waited: lock the new one
        log.warning("Could not lock the cluster configuration file %s: it keeps changing",
                    path)
        return False

    def save_nodes_conf(self, text: str) -> None:
        """The Shell's method: the node's membership changed (whether it saved is
        logged; CLUSTER SAVECONFIG and the start ask write_nodes_conf)."""
        self.write_nodes_conf(text)

    def write_nodes_conf(self, text: str | None = None) -> bool:
        """Write nodes.conf (the node's current text by default); False if it failed."""
        if text is None:
            text = self.node.members.nodes_conf_text()
        try:
            held = self._nodes_conf_lock
            fd = write_atomically(self.nodes_conf_path, text.encode(), lock=held is not None)
            if held is not None:  # the new file is locked: release the one it replaced
                os.close(held)
                self._nodes_conf_lock = fd
            return True
        except OSError as e:
            log.warning("Could not save the cluster config %s: %s", self.nodes_conf_path,
                        e.strerror)
            return False

    def on_bus_frame(self, msg: BusMessage, peer_ip: str) -> None:
        try:
            self.node.handle_message(msg, peer_ip, self.now())
        except Exception:  # a bug of the core: logged loudly, the node keeps serving
            log.exception("BUG: handling a cluster bus message from %s raised", peer_ip)
        self.after_event_soon()

    def after_event_soon(self) -> None:
        """after_event() once, at the end of this loop iteration. Clients' requests and
        bus frames arrive in bursts (one per ready socket): delivering the node's
        outputs once for the burst sends one frame per peer for all of it, whose
        messages carry many items (REPLJOB jobs, GOTJOB IDs). Replies to the clients
        that sent the requests do not wait for this: they were written already."""
        if not self._after_scheduled:
            self._after_scheduled = True
            self.loop.call_soon(self._after_soon)

    def _after_soon(self) -> None:
        self._after_scheduled = False
        self.after_event()

    def after_commands(self) -> None:
        """The loop iteration's client commands ran (ClientBatch, after every read of
        the iteration): their outputs go out now, before the batch writes the replies,
        with no loop round of their own. A bus frame read in the same iteration has
        scheduled after_event_soon already: that one delivers everything, once."""
        if not self._after_scheduled:
            self.after_event()
        elif self.node.aof.out:  # the bus frame's delivery comes later: the batch's
            self.flush_aof()  # replies must not leave before their records
        aof = self.aof
        if aof is not None:  # the records of the batch written before its replies go
            aof.flush_now()

    def on_bus_link(self, node_id: str, up: bool) -> None:
        self.node.members.link_state(node_id, up, self.now())
        self.after_event()

    def arm(self) -> None:
        t = self.node.next_wake()
        if t is not None and t < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = float(t)
            delay = max(0.0, (t - self.now()) / 1000.0)
            self._timer = self.loop.call_later(delay, self._on_timer)

    def start_gc_policy(self) -> None:
        """Keep the cyclic GC off the job store.

        Jobs, queues and their bytes form no reference cycles, so refcounting frees
        them; but with the default policy every full collection walks millions of
        live job objects (a stall of 100+ ms at a million jobs). Once a second the
        objects that survived so far are moved to the permanent generation
        (``gc.freeze``), so collections only look at what is new. Connection objects
        break their own cycles when they close.
        """
        gc.set_threshold(10_000, 50, 100)
        self._freeze()

    def _freeze(self) -> None:
        gc.collect(1)
        gc.freeze()
        self.loop.call_later(1.0, self._freeze)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = NEVER
        self.count_net()
        self.node.tick(self.now())
        self.after_event()
        self.arm()

    # --------------------------------------------------------- shell requests
    # (Shell.finish dispatches each request to its method here)
    def answer(self, client: Client, data: bytes) -> None:
        conn = client.conn
        if conn is not None:
            if client.noreply != REPLY_OFF:
                conn.send_replies(data)
            conn.resume()

    def info(self, section: str) -> bytes:
        self.count_net()
        return self.node.info(section, self.host_facts(), self.now())

    def quit(self, client: Client) -> None:
        conn = client.conn
        if conn is not None:
            conn.write(resp.OK)
            conn.close()

    def security_abort(self, client: Client) -> None:
        if client.conn is not None:
            client.conn.close()
        now = self.now()
        if now - self._security_logged > 60_000:  # once a minute at most
            self._security_logged = float(now)
            log.warning("Possible SECURITY ATTACK detected. It looks like somebody is "
                        "sending POST or Host: commands to Disque. This is likely due to "
                        "an attacker attempting to use Cross Protocol Scripting to "
                        "compromise your Disque instance. Connection aborted.")

    def auth_failed(self, client: Client, delay_ms: int, error: bytes) -> None:
        # answered later; this client's next commands wait
        self.loop.call_later(delay_ms / 1000, self._late_reply, client.conn, error)

    def auth_wait(self, client: Client, delay_ms: int, argv: tuple[bytes, ...]) -> None:
        # too many failed AUTHs from the address: run it later; its next commands wait
        self.loop.call_later(delay_ms / 1000, self._run_later, client.conn, list(argv))

    def cluster_meet(self, client: Client, ip: str, port: int) -> None:
        task = self.loop.create_task(self._meet(client.conn, ip, port))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def shutdown_requested(self, client: Client, how: str) -> None:
        if client.conn is not None:
            client.conn.close()
        self.shutdown(how)

    def debug_sleep(self, seconds: float) -> bytes:
        stuck(seconds)
        return resp.OK

    def bgrewriteaof(self) -> bytes:
        from .aof import write_snapshot

        if self.aof is None:
            write_snapshot(self.node, self.aof_path)
            return resp.simple("Background append only file rewriting started")
        if not self.aof.start_rewrite():
            return resp.error("ERR Background append only file rewriting already in progress")
        return resp.simple("Background append only file rewriting started")

    def cluster_saveconfig(self) -> bytes:
        if self.write_nodes_conf():
            return resp.OK
        return resp.error("ERR error saving the cluster node config")

    def bus_drop(self, node_id: str, on: bool) -> bytes:
        if self.bus is None:
            return resp.error("ERR the cluster bus is not running")
        self.bus.set_drop(node_id, on)
        return resp.OK

    async def _meet(self, conn: ClientProtocol | None, ip: str, port: int) -> None:
        """CLUSTER MEET: first one connection to the node's bus, to tell the operator
        now, in the reply, when that node and this one would refuse each other (another
        cluster-secret, none on one side, a certificate the other does not accept)
        instead of a MEET that never lands and a line in each log."""
        why = None
        if self.bus is not None:
            why = await self.bus.probe(ip, port + self.config.cluster_port_offset)
        if why is None:
            self.node.members.meet(ip, port, self.now())
            self.after_event()
            reply = resp.OK
        else:
            log.warning("CLUSTER MEET %s:%d refused: %s", ip, port, why)
            reply = resp.error(f"ERR CLUSTER MEET {ip}:{port} failed: {why}")
        self._late_reply(conn, reply)

    def _run_later(self, conn: ClientProtocol | None, argv: list[bytes]) -> None:
        """Run a command the core put off (AuthWait) for a client still there."""
        if conn is None or conn.closing or conn.client is None:
            return
        reply = self.node.execute(conn.client, argv, self.now())
        if reply is not None:
            self._late_reply(conn, reply)
        self.after_event()

    @staticmethod
    def _late_reply(conn: ClientProtocol | None, data: bytes) -> None:
        if conn is not None and not conn.closing:
            assert conn.client is not None  # (an open connection has its client)
            if conn.client.noreply != REPLY_OFF:
                conn.send_replies(data)
            conn.resume()

    def config_rewrite(self) -> bytes:
        path = self.config_path
        if not path:
            return resp.error("ERR The server is running without a config file")
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                original = f.read()
        except FileNotFoundError:
            original = None
        except OSError as e:
            return resp.error(f"ERR Rewriting config file: {e.strerror}")
        text = self.config.rewrite(original)
        try:
            write_atomically(path, text.encode())
        except OSError as e:
            log.warning("CONFIG REWRITE failed: %s", e)
            return resp.error(f"ERR Rewriting config file: {e.strerror}")
        log.info("CONFIG REWRITE executed with success.")
        return resp.OK

    def config_changed(self, names: tuple[str, ...] | list[str]) -> None:
        if "client-output-buffer-limit" in names:
            limit = self.config.client_output_buffer_limit
            self.obuf_limit = limit if limit.hard_bytes or limit.soft_bytes else None
        if "timeout" in names and self.config.timeout and not self._idle_ticking:
            self._idle_ticking = True
            self.loop.call_later(1.0, self._idle_tick)
        if "loglevel" in names:
            set_level(self.config.loglevel)
        if "appendonly" in names:
            if self.config.appendonly and self.aof is None:
                self.start_aof(rewrite=True)
            elif not self.config.appendonly:
                self.stop_aof()
        if "appendfsync" in names and self.aof is not None:
            self.flush_aof()
            self.aof.fsync = self.config.appendfsync
        if {"event-log", "event-log-dir", "event-log-max-size", "dir"} & set(names):
            self.stop_events()  # reopened with the new settings at the next events
            self.node.events_on = self.config.event_log

    def shutdown(self, how: str = "") -> None:
        log.warning("User requested shutdown...")
        # a signal may come between a batch's commands and the delivery of their
        # outputs: their replies, records and events leave before anything closes
        self.deliver_pending()
        for srv in self.servers:
            srv.close()
        if self.bus is not None:
            self.bus.close()
        self.write_nodes_conf()
        if how == "rewrite-aof":
            from .aof import write_snapshot

            self.flush_aof()
            if self.aof is not None:
                self.aof.close()
                self.aof = None
            size = write_snapshot(self.node, self.aof_path)
            log.warning("AOF rewritten for the restart (%d bytes, queues included)", size)
        else:
            self.stop_aof()
        self.stop_events()
        self.stopping.set()


def write_atomically(path: str, data: bytes, lock: bool = False) -> int | None:
    """Write to a temp file, fsync it, rename over ``path``, fsync the directory.
    With ``lock``, the new file is flocked before the rename and its open fd is
    returned (the caller holds the lock and closes it)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        raise
    if not lock:
        os.close(fd)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return fd if lock else None


__all__ = ["Driver", "write_atomically", "ConfigError"]
