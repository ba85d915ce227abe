"""What the node writes to its AOF and how it reads it back.

The node keeps no file: it appends records to ``out`` (the consumer groups' events
too, core/groups/persist.py; LOADJOB with a job's fields
in ``jobcodec``'s DISK layout, DELJOB with an ID, OUTCOME with how a job ended, for
JOBSTATUS after a restart) and the shell writes them (see
server/aof.py). A running log records a job as ACTIVE, never QUEUED: a reload must
not re-queue a job that may have been delivered since (RETRY 0 jobs stay at most
once); only a rewrite's snapshot records the queued state. Loading rebuilds the jobs
and the idempotency keys that outlive their jobs.

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final

from . import aofrecords as records
from .eventcodec import MAX_EVENTS
from .job import (
    ACKED,
    ACTIVE,
    F_BCAST_WILLQUEUE,
    F_DELIVERED,
    F_DUMMY,
    F_ENQUEUED_ONCE,
    F_OUTCOME,
    QUEUED,
    WAIT_REPL,
    Job,
    move,
)
from .jobcodec import DISK, JobFields, job_fields
from .outcomes import EXPIRED, Outcome

if TYPE_CHECKING:
    from .node import Node

def _encode_event(fields: list[object]) -> bytes:
    return records.encode_event_record(records.EVENT, fields)


def _encode_events(events: list[list[object]]) -> bytes:
    return records.encode_event_record(records.EVENTS, events)


_GATHERED_BYTES: Final = 1 << 20  # a LOADJOBS or EVENTS record's bodies, about: sealed past this


class _Gathered:
    """The fields of records gathered into one (Persistence.created, gather_event):
    ``items`` (None: none), their record's place in ``out``, their bodies' bytes; one
    item is encoded by ``one``, several by ``many``."""

    def __init__(self, most: int, one: Callable[[list[object]], bytes],
                 many: Callable[[list[list[object]]], bytes]) -> None:
        self.most = most  # items in one record
        self.one = one
        self.many = many
        self.items: list[list[object]] | None = None
        self.at = 0
        self.size = 0


class Persistence:
    """The node's AOF records: ``on`` once the shell has the file open."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.on = False
        self.out: list[bytes] = []  # records for the shell to append
        # LOADJOB(S): see created(); EVENT(S): see gather_event()
        self._jobs = _Gathered(records.MAX_JOBS, records.encode_loadjob,
                               records.encode_loadjobs)
        self._events = _Gathered(MAX_EVENTS, _encode_event, _encode_events)

    def take(self) -> list[bytes]:
        self._seal(self._jobs)
        self._seal(self._events)
        out, self.out = self.out, []
        return out

    def _seal(self, g: _Gathered) -> None:
        """Write what ``g`` gathered (if anything) in its record's place."""
        items, g.items = g.items, None
        if items is not None:
            self.out[g.at] = g.one(items[0]) if len(items) == 1 else g.many(items)

    def _gather(self, g: _Gathered, fields: list[object], size: int) -> bool:
        """Gather a record's fields in ``g``; True when ``g`` is full (seal it)."""
        items = g.items
        if items is None:
            g.items = [fields]
            g.at = len(self.out)
            g.size = size
            self.out.append(b"")  # the record's place (and ``out`` is not empty)
            return False
        items.append(fields)
        g.size += size
        return len(items) >= g.most or g.size >= _GATHERED_BYTES

    def gather_event(self, fields: list[object], size: int) -> None:
        """An event held (its fields: eventcodec's layout; ``size``: its body's bytes).
        The events held until the records are taken go in one EVENTS record (one
        encoding and CRC: 0.3 us an event in a batch of 16, where one EVENT record each
        costs 0.8), at the place the first one's EVENT record would have had: before
        every record about them (their claims, a drop). At most MAX_EVENTS events, or
        about 1 MiB of bodies, per record."""
        if self._gather(self._events, fields, size):
            self._seal(self._events)

    def seal_events(self) -> None:
        """Write the events gathered so far in their record's place. Before a record
        that must follow them and does not merge with them (an event dropped, a
        queue flushed), and when the records are taken."""
        self._seal(self._events)

    # --- the running log ------------------------------------------------------------
    def created(self, job: Job) -> None:
        """(Re)write a job's record: new, or its counters or queue time moved. Gathered
        with the others until the records are taken, as the events are (gather_event):
        one LOADJOBS record at the first one's place."""
        if self._gather(self._jobs, self._fields(job, ACTIVE), len(job.body)):
            self._seal(self._jobs)

    def deleted(self, job: Job) -> None:
        """A job left the node (acked, expired, evicted, moved away). The jobs gathered
        so far are written first: a reload must not see a job deleted and then created
        again."""
        if job.state != WAIT_REPL and not job.flags & F_DUMMY:
            self._seal(self._jobs)
            self.out.append(records.encode_deljob(job.id))

    def outcome(self, jid: bytes, state: int, queue: bytes, attempts: int, created: int,
                finished: int, detail: bytes) -> None:
        """How a job ended (the outcome store's record), so JOBSTATUS answers after a
        restart too."""
        self.out.append(records.encode_outcome(jid, state, queue, attempts, created,
                                               finished, detail))

    def _fields(self, job: Job, state: int) -> list[object]:
        return job_fields(job, DISK, self.node.keys.of.get(job.id), state,
                          job.flags & F_DELIVERED)

    def _record(self, job: Job, state: int) -> bytes:
        return records.encode_loadjob(self._fields(job, state))

    # --- a rewrite ------------------------------------------------------------------
    def snapshot(self, job: Job) -> bytes | None:
        """The record a rewrite writes for a job, or None for what is not persisted
        (jobs still being replicated, acked jobs and dummy acks)."""
        if job.state == WAIT_REPL or job.state == ACKED:
            return None
        return self._record(job, job.state)

    def retained_keys(self, now: int) -> list[bytes]:
        """Rewrite records for idempotency keys whose job is gone but whose window is
        open: a key-only stub (LOADJOB, empty body, expiring with the window) followed
        by its DELJOB, so a reload keeps the key and no job."""
        out = []
        for key, jid, etime in self.node.keys.retained(now):
            stub = [jid, b"", b"", (etime - 1000) * 1_000_000, 1, 0, 0, 1, 0, 0, [], ACTIVE,
                    0, 0, key]
            out.append(records.encode_loadjob(stub))
            out.append(records.encode_deljob(jid))
        return out

    def outcome_snapshots(self, now: int) -> Iterator[list[bytes]]:
        """A rewrite's OUTCOME records for the outcomes kept and not expired, a chunk of
        the store at a time (so a rewrite can write them between events: outcomes
        recorded meanwhile reach the new file through the rewrite buffer)."""
        store = self.node.outcomes
        cutoff = now - store.retention_ms
        for chunk in store.chunks():
            out = []
            for o in store.live_in(chunk):
                if o.finished_ms > cutoff:
                    out.append(records.encode_outcome(
                        o.job_id.encode("latin-1"), o.state, o.queue.encode("latin-1"),
                        o.attempts, o.created_ms, o.finished_ms, o.detail))
            if out:
                yield out

    # --- loading --------------------------------------------------------------------
    def load(self, recs: Iterable[tuple[int, str, JobFields | bytes]], now: int,
             enqueue: bool) -> int:
        """Rebuild the jobs from AOF records (scan order). Jobs come back active and
        re-queue when their retry time comes; with ``enqueue`` (aof-enqueue-jobs-once,
        after SHUTDOWN REWRITE-AOF) jobs recorded as queued are queued again. At-most-
        once jobs are never queued by a reload otherwise. The events' records go to
        the groups (``node.groups.log.loaded`` counts them). Returns the jobs loaded."""
        node = self.node
        loaded: dict[bytes, JobFields] = {}
        gone_keys: dict[bytes, tuple[bytes, int]] = {}  # idempotency keys of deleted jobs
        store = node.outcomes
        keep = node.store.outcomes_on
        cutoff = now - store.retention_ms
        events: list[tuple[str, object]] = []  # the consumer groups' (groups/persist.py)
        for _, kind, payload in recs:
            if kind in records.EVENT_KINDS:
                events.append((kind, payload))
            elif kind == records.LOADJOB:
                assert isinstance(payload, JobFields)
                loaded[payload.id] = payload
            elif kind == records.LOADJOBS:
                assert isinstance(payload, tuple)
                for jf in payload:
                    assert isinstance(jf, JobFields)
                    loaded[jf.id] = jf
            elif kind == records.OUTCOME:
                assert isinstance(payload, Outcome)
                if keep and payload.finished_ms > cutoff:
                    store.record(payload)
            else:
                assert isinstance(payload, bytes)
                f = loaded.pop(payload, None)
                if f is not None and f.idem is not None:
                    gone_keys[f.idem] = (payload, f.ctime // 1_000_000 + f.ttl * 1000)
        for key, (jid, etime) in gone_keys.items():
            if etime > now:
                node.keys.restore(key, jid, etime)
        count = 0
        for f in loaded.values():
            old = node.jobs.get(f.id)
            if old is not None:
                node.store.unregister(old)
            job = Job(f.id, f.queue, f.body, f.ctime, f.ttl, f.repl, f.delay, f.retry)
            if job.etime <= now:  # its TTL ended while the node was down: expired
                if keep and job.etime > cutoff and store.get(f.id.decode("latin-1")) is None:
                    store.record_raw(f.id, EXPIRED, f.queue,
                                     f.nacks + f.adeliv + (f.flags & F_DELIVERED),
                                     f.ctime // 1_000_000, job.etime, b"")
                continue
            job.nacks, job.adeliv = f.nacks, f.adeliv
            job.delivered = f.delivered
            job.flags = f.flags & F_DELIVERED
            if store.get(f.id.decode("latin-1")) is not None:
                job.flags |= F_OUTCOME  # it ended: an ack or a delete is on its way
            move(job, ACTIVE)
            if not node.store.register(job):
                continue
            if f.idem is not None:
                node.keys.bind(f.idem, job)
            count += 1
            if enqueue and f.state == QUEUED:
                job.qtime = now  # allowed once more, even for RETRY 0: queues were saved
                node.store.enqueue(job, now)
                continue
            if f.retry:
                job.flags |= F_ENQUEUED_ONCE | F_BCAST_WILLQUEUE
                job.qtime = f.qtime if f.qtime > now else node.store.retry_at(now, f.retry)
            else:
                job.qtime = 0  # at most once: a reload never queues it
            node.store.schedule(job)
        if events:
            node.groups.log.load(events, now)
        return count
