"""Stream read of a queue's events as a consumer group (``readStream`` with ``group``).

``spark.readStream.format("disque").option("queue", "clicks").option("group", "billing")``
reads the events QADDed on the queues as consumer group ``billing`` (docs/GROUPS.md):
every group gets every event, independently of the other groups, so two queries with
two groups each see every event. Columns: ``id``, ``queue``, ``group``, ``body``,
``deliveries`` (1 on the first delivery; more when an event came back unacknowledged).

Design, and why:

Leases are taken on the driver, when a micro-batch is planned
    ``latestOffset`` leases at most ``maxEventsPerTrigger`` events (default 10000) with
    pipelined ``QGET queue group EX lease WITHCOUNTERS`` on every node (each node serves
    its own events first, then pulls from its peers), and keeps them in memory under
    the batch number; the offset says only ``{"stream", "group", "batch", "events"}``.
    ``partitions`` hands the events to read tasks (at most 1000 a task), which turn
    them into Arrow batches. Why not QGET in the read tasks: QGET has no delivery token
    (GETJOB's TOKEN), so a task retry or a second action on the batch in
    ``foreachBatch`` would lease *other* events, and the driver could not know which
    attempt's events reached the sink: acking the wrong ones would lose events. Leased
    on the driver, a batch's content is fixed, re-reading it gives the same rows, and
    the driver knows exactly what to acknowledge.

Acknowledged only after Spark commits the batch
    As the job stream read: Spark calls ``latestOffset(start)`` only once the batch
    ending at ``start`` is committed (also after the last batch of ``availableNow``),
    and ``commit(end)`` when it plans the next; both ``QACK`` the events of the batches
    up to the one they name (pipelined, on the node that leased them). A failed batch
    is never acknowledged: its events come back to the group when their lease runs out
    (``deliveries`` then counts up). At-least-once, never a loss.

Leases kept while a batch is in flight
    A driver thread sends ``QWORKING queue group id EX lease`` for every event of a
    batch not yet acknowledged once half its lease has gone by, and again every half
    lease: a batch slower than ``lease`` keeps its events.

Restart from the checkpoint
    The events of a batch planned before the restart and not committed are not in the
    new driver's memory: the replayed batch is empty, and those events come back by
    their lease (``lease`` seconds at most after the old driver stopped extending it).

Options (besides ``nodes``, auth/TLS and ``queue``/``queues``): ``group`` (required),
``lease`` (seconds, default 60, decimals allowed, > 0: ``EX 0`` would acknowledge at
delivery), ``maxEventsPerTrigger``, ``maxDeliveries`` (QGET's MAXDELIVERIES: dead
letters after that many deliveries), ``bodyFormat``. The job read's options
(``states``, ``copies``, ``maxJobsPerTrigger``, ``fetchSize``, ``readersPerNode``,
``workingInterval``) make no sense here and are refused, naming the one to use.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, cast

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyarrow import RecordBatch  # no type hints (pyproject.toml): Any

from ..codec.nodes import NodeInfo
from ._nodes import (
    GROUP_STREAM_OPTIONS,
    Command,
    Offset,
    auth_options,
    check_options,
    connect,
    discover,
    opt_int,
    opt_list,
    pipeline,
)
from .rows import arrow_batch, body_type

log = logging.getLogger("disquepy.spark")

GROUP_COLUMNS = ("id", "queue", "group", "body", "deliveries")
#: job-read options a group read refuses, with what to use instead
GROUP_REFUSED = {
    "states": "a group read takes what is available to the group",
    "copies": "a group read delivers each event once per group",
    "maxjobspertrigger": "use maxEventsPerTrigger",
    "fetchsize": "a group read leases its events on the driver",
    "readerspernode": "a group read leases its events on the driver",
    "workinginterval": "leases are extended (QWORKING) every lease/2 seconds: set lease",
}
#: QGETs pipelined per round trip
WINDOW = 200
#: events per read task
TASK_EVENTS = 1000
#: an event: (node id that leased it, queue, id, body, deliveries)
Event = tuple[str, str, bytes, bytes, int]


@dataclass
class EventsPartition(InputPartition):
    """Events of one micro-batch, already leased by the driver, for one read task."""

    events: list[Event]

    def __init__(self, events: list[Event], name: str) -> None:
        self.events = events
        self.value = name


class _Leased(TypedDict):
    """The events leased for one batch (DisqueGroupStreamReader._batches)."""

    events: list[Event]
    extended: float  # monotonic time the leases were taken or last extended


class DisqueGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``readStream.format("disque").option("group", g)``: a queue's events as group g."""

    def __init__(self, opts: dict[str, str], schema: StructType) -> None:
        for k, why in GROUP_REFUSED.items():
            if k in opts:
                raise ValueError(f"option {k!r} does not apply to a stream read as a "
                                 f"consumer group (option group): {why}")
        if "group" not in opts:
            bad = "lease" if "lease" in opts else "maxDeliveries"
            raise ValueError(f"option {bad} needs option group (a stream read as a "
                             f"consumer group)")
        check_options(opts, "the disque group stream source", GROUP_STREAM_OPTIONS)
        self.opts = opts
        self.schema = schema
        self.group = opts["group"]
        if not self.group:
            raise ValueError("option group: a consumer group name, not empty")
        self.queues = opt_list(opts, "queue", "queues")
        if not self.queues:
            raise ValueError("the disque group stream source needs option queue (or queues)")
        self.fmt = body_type(opts)
        self.auth = auth_options(opts)
        try:
            self.lease = float(opts.get("lease", "60"))
        except ValueError:
            raise ValueError(f"option lease: seconds, not {opts['lease']!r}") from None
        if not 0 < self.lease <= 86400 or math.isnan(self.lease):
            raise ValueError("option lease: seconds, more than 0 (EX 0 would acknowledge "
                             "each event at delivery) and at most 86400")
        self.max_events = opt_int(opts, "maxeventspertrigger", 10000)
        if self.max_events is None or self.max_events < 1:
            raise ValueError("option maxEventsPerTrigger: at least 1")
        self.max_deliveries = opt_int(opts, "maxdeliveries", None)
        if self.max_deliveries is not None and self.max_deliveries < 1:
            raise ValueError("option maxDeliveries: at least 1")
        self.stream_id: str | None = None
        self.nodes: dict[str, NodeInfo] = {}
        self.available_budget: int | None = None
        self._init_driver_state()

    def _init_driver_state(self) -> None:
        self._lock = threading.Lock()
        # batch number -> {"events": [Event], "extended": monotonic time of the lease}
        self._batches: dict[int, _Leased] = {}
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:  # the reader's attributes
        # the reader is pickled into every read task: the leased events stay behind
        state = dict(self.__dict__)
        for k in ("_lock", "_batches", "_stop", "_heart"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_driver_state()

    # -- offsets
    def initialOffset(self) -> Offset:
        """A new stream: a fresh identity, batch 0, nothing leased."""
        if self.stream_id is None:
            self.stream_id = uuid.uuid4().hex
        return {"stream": self.stream_id, "group": self.group, "batch": 0, "events": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxEventsPerTrigger as Spark's ReadMaxRows."""
        return ReadMaxRows(self.max_events)

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: read at most the events waiting for the group now (the largest
        count any node reports: each node counts the events it holds)."""
        self.available_budget = self._lag()
        log.info("disque group stream: availableNow, %d events for group %s",
                 self.available_budget, self.group)

    def _check_group(self, offset: Offset) -> None:
        if offset.get("group", self.group) != self.group:
            raise ValueError(f"this checkpoint reads as group {offset['group']!r}, not "
                             f"{self.group!r}: use a new checkpointLocation per group")

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """The batch ending at ``start`` is committed: acknowledge it, then lease the
        next batch's events (none: ``start``, no batch)."""
        self._check_group(start)
        self._ack_upto(int(start["batch"]))
        nxt = int(start["batch"]) + 1
        with self._lock:
            planned = self._batches.get(nxt)
        if planned is not None:  # asked again before that batch ran: the same batch
            return self._offset(start, nxt, len(planned["events"]))
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else self.max_events
        if self.available_budget is not None:
            cap = min(cap, self.available_budget)
        events = self._lease_events(cap) if cap > 0 else []
        if not events:
            return start
        if self.available_budget is not None:
            self.available_budget -= len(events)
        with self._lock:
            self._batches[nxt] = {"events": events, "extended": time.monotonic()}
        self._start_heartbeat()
        return self._offset(start, nxt, len(events))

    def _offset(self, start: Offset, batch: int, n: int) -> Offset:
        return {"stream": start["stream"], "group": self.group, "batch": batch, "events": n}

    def partitions(self, start: Offset, end: Offset) -> list[EventsPartition]:
        """The events leased for the batch ending at ``end``, TASK_EVENTS per task."""
        self._check_group(end)
        if end == start or not int(end.get("events", 0)):
            return []
        b = int(end["batch"])
        with self._lock:
            planned = self._batches.get(b)
        if planned is None:
            log.warning("disque group stream: batch %d was leased before a restart: its "
                        "%s events come back to group %s when their lease runs out",
                        b, end.get("events"), self.group)
            return []
        ev = planned["events"]
        return [EventsPartition(ev[lo:lo + TASK_EVENTS], f"{b}:{lo}")
                for lo in range(0, len(ev), TASK_EVENTS)]

    def read(self, partition: InputPartition) -> Iterator[RecordBatch]:
        """Executor side: the partition's events as one Arrow batch."""
        ev = cast(EventsPartition, partition).events  # one of partitions()'s
        if not ev:
            return
        bodies = ([e[3] for e in ev] if self.fmt == "binary"
                  else [e[3].decode("utf-8", "replace") for e in ev])
        cols = [[e[2].decode() for e in ev], [e[1] for e in ev], [self.group] * len(ev),
                bodies, [e[4] for e in ev]]
        yield arrow_batch(self.schema, cols, GROUP_COLUMNS)

    def commit(self, end: Offset) -> None:
        """Spark committed every batch up to ``end``: acknowledge their events."""
        self._ack_upto(int(end["batch"]))

    def stop(self) -> None:
        """The query ended: stop extending leases (uncommitted events come back to the
        group when their lease runs out)."""
        self._stop.set()

    # -- the server
    def _refresh_nodes(self) -> dict[str, NodeInfo]:
        self.nodes = {n.id: n for n in discover(self.opts)}
        return self.nodes

    def _lag(self) -> int:
        """The group's events waiting to be delivered (available + redo) on the queues,
        the largest count a node reports."""
        best = 0
        for nid, node in self._refresh_nodes().items():
            try:
                c = connect(node.host, node.port, self.auth, timeout=10)
                try:
                    reply = c.execute_command("QSTATUS", *self.queues, "GROUPS", self.group)
                finally:
                    c.close()
            except Exception as e:  # an unreachable node has nothing for us right now
                log.warning("disque group stream: QSTATUS on %s failed: %s", nid[:8], e)
                continue
            n = 0
            for _queue, groups in reply or ():
                for i in range(0, len(groups), 2):
                    f = dict(zip(groups[i + 1][::2], groups[i + 1][1::2], strict=False))
                    n += int(f.get(b"available", 0)) + int(f.get(b"redo", 0))
            best = max(best, n)
        return best

    def _qget(self, queue: str) -> Command:
        cmd: Command = ("QGET", queue, self.group, "EX", repr(self.lease), "WITHCOUNTERS")
        if self.max_deliveries is not None:
            cmd += ("MAXDELIVERIES", self.max_deliveries)
        return cmd

    def _lease_events(self, cap: int) -> list[Event]:
        """Lease at most ``cap`` events, pipelined QGETs on every node, a node dropped
        for a queue once it answers nil (nothing available there or at its peers).
        Bounded: every round leases a full window or drops a node."""
        out: list[Event] = []
        nodes = self._refresh_nodes()
        for queue in self.queues:
            active = sorted(nodes)
            while active and len(out) < cap:
                for nid in list(active):
                    k = min(WINDOW, max(1, -(-(cap - len(out)) // len(active))))
                    if len(out) >= cap:
                        break
                    got = self._qget_on(nodes[nid], queue, k)
                    out += [(nid, queue, e[0], e[1], int(e[2])) for e in got]
                    if len(got) < k:
                        active.remove(nid)
        log.info("disque group stream %s: leased %d events for group %s",
                 (self.stream_id or "")[:8], len(out), self.group)
        return out

    def _qget_on(self, node: NodeInfo, queue: str, k: int) -> list[list[Any]]:
        """QGET ``k`` times on ``node``: the replies of those that leased an event."""
        try:
            c = connect(node.host, node.port, self.auth)
        except Exception as e:  # unreachable: its events are served by peers' QGETs
            log.warning("disque group stream: QGET on %s failed: %s", node.id[:8], e)
            return []
        try:
            replies = pipeline(c, [self._qget(queue)] * k)
        except Exception as e:  # events leased by lost replies come back by their lease
            log.warning("disque group stream: QGET on %s failed: %s", node.id[:8], e)
            return []
        finally:
            c.close()
        got = []
        for r in replies:
            if isinstance(r, Exception):
                log.warning("disque group stream: QGET on %s: %s", node.id[:8], r)
                break
            if r is None:
                break
            got.append(r)
        return got

    def _by_node(self, events: list[Event]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = {}
        for e in events:
            out.setdefault(e[0], []).append(e)
        return out

    def _each_node(self, what: str, events: list[Event],
                   cmd: Callable[[Event], Command]) -> int:
        """Run ``cmd(event)`` for every event, pipelined on the node that leased it (any
        node would do: the event's authority decides); how many answered 1."""
        ok = 0
        for nid, evs in self._by_node(events).items():
            node = self.nodes.get(nid) or self._refresh_nodes().get(nid)
            if node is None:
                node = next(iter(self.nodes.values()), None)
            if node is None:
                continue
            try:
                c = connect(node.host, node.port, self.auth)
                try:
                    for lo in range(0, len(evs), 1000):
                        for r in pipeline(c, [cmd(e) for e in evs[lo:lo + 1000]]):
                            ok += 1 if r == 1 else 0
                finally:
                    c.close()
            except Exception as e:  # not done: the events come back by their lease
                log.warning("disque group stream: %s on %s failed: %s", what, nid[:8], e)
        return ok

    def _ack_upto(self, batch: int) -> None:
        """QACK the events of every batch up to ``batch`` (Spark committed them)."""
        with self._lock:
            done = sorted(b for b in self._batches if b <= batch)
            todo = [(b, self._batches.pop(b)) for b in done]
        for b, st in todo:
            t = time.monotonic()
            n = self._each_node("QACK", st["events"],
                                lambda e: ("QACK", e[1], self.group, e[2]))
            log.info("disque group stream %s: batch %d committed, %d/%d events acked for "
                     "group %s in %.3f s", (self.stream_id or "")[:8], b, n,
                     len(st["events"]), self.group, time.monotonic() - t)

    def _start_heartbeat(self) -> None:
        if self._heart is not None and self._heart.is_alive():
            return
        self._heart = threading.Thread(target=self._heartbeat, name="disque-qworking",
                                       daemon=True)
        self._heart.start()

    def _heartbeat(self) -> None:
        """Every batch not yet acknowledged: QWORKING its events once half the lease
        has gone by since it was leased or last extended."""
        half = self.lease / 2
        while not self._stop.wait(min(half / 2, 1.0)):
            now = time.monotonic()
            with self._lock:
                due = [(b, st) for b, st in self._batches.items()
                       if now - st["extended"] >= half]
            for b, st in due:
                st["extended"] = now
                n = self._each_node("QWORKING", st["events"],
                                    lambda e: ("QWORKING", e[1], self.group, e[2],
                                               "EX", repr(self.lease)))
                log.info("disque group stream: batch %d still running, %d/%d leases "
                         "extended", b, n, len(st["events"]))

