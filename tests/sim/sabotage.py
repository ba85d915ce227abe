"""Deliberately broken cores, to prove the checkers notice. Test code only: each
function monkeypatches the core inside a simulator worker process (run_many's
initializer), never in the test process itself."""

from __future__ import annotations

from contextlib import contextmanager

import pytest


@contextmanager
def interpreted():
    """Workers started inside this block import the core's .py sources: compiled (mypyc)
    classes refuse monkeypatching, and the simulator spawns its workers fresh, with this
    environment (DISQUEPY_INTERPRETED: disquepy/__init__.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DISQUEPY_INTERPRETED", "1")
        yield


def gotjob_without_copy() -> None:
    """Replicas confirm REPLJOB with GOTJOB but keep no copy."""
    from disquepy.core import messages, replication

    def on_repljob(self, p, fields, now):
        for w in fields:  # one or more jobs per message
            self.node.send([p.id], messages.GOTJOB, w[0])

    replication.Replication.on_repljob = on_repljob


def handler_raises() -> None:
    """A bus handler with a bug that raises (a KeyError, as a bad dict lookup would):
    handle_message used to swallow such errors as "malformed input"; the simulator must
    now see it."""
    from disquepy.core import replication

    def on_gotjob(self, p, fields, now):
        raise KeyError(fields[0])

    replication.Replication.on_gotjob = on_gotjob


def reload_requeues_at_most_once() -> None:
    """A restart queues RETRY 0 jobs again (they may have been delivered already)."""
    from disquepy.core import jobstore, persistence

    orig = persistence.Persistence.load

    def load(self, records, now, enqueue):
        n = orig(self, records, now, enqueue)
        for job in list(self.node.jobs.values()):
            if job.retry == 0 and job.state == jobstore.ACTIVE:
                job.qtime = now
                self.node.store.enqueue(job, now)
        return n

    persistence.Persistence.load = load


def delivery_cancels_retry() -> None:
    """Delivering a job cancels its re-queue: if the consumer never acks, only other
    copies (if any) can bring it back."""
    from disquepy.core import jobstore

    orig = jobstore.JobStore.fetch

    def fetch(self, q, now):
        job = orig(self, q, now)
        job.qtime = 0
        job.flags &= ~jobstore.F_BCAST_WILLQUEUE
        return job

    jobstore.JobStore.fetch = fetch


def requeue_refused() -> None:
    """enqueue() refuses delivered jobs, though their retry timer is due: the node
    spins on a timer that never moves."""
    from disquepy.core import jobstore

    orig = jobstore.JobStore.enqueue

    def enqueue(self, job, now, nack=False):
        if job.flags & jobstore.F_DELIVERED and not nack:
            return False
        return orig(self, job, now, nack)

    jobstore.JobStore.enqueue = enqueue


def gc_keeps_acked_jobs() -> None:
    """Garbage collection of acked jobs tells the others but never frees the job here."""
    from disquepy.core import acks

    def _gc_done(self, job):
        node = self.node
        node.send([n for n in job.delivered if n != node.myid], acks.M.DELJOB, job.id)

    acks.Acks._gc_done = _gc_done


def fetch_resets_counters() -> None:
    """Delivering a job zeroes its nacks / additional-deliveries counters."""
    from disquepy.core import jobstore

    orig = jobstore.JobStore.fetch

    def fetch(self, q, now):
        job = orig(self, q, now)
        job.nacks = job.adeliv = 0
        return job

    jobstore.JobStore.fetch = fetch


def unregister_leaks_memory() -> None:
    """Deleted jobs are not subtracted from used_memory."""
    from disquepy.core import jobstore

    orig = jobstore.JobStore.unregister

    def unregister(self, job):
        before = self.node.mem.used
        orig(self, job)
        self.node.mem.used = before

    jobstore.JobStore.unregister = unregister


def apply(name: str) -> None:
    globals()[name]()


def groups_every_holder_leases() -> None:
    """Every holder of an event thinks it decides for it (no single authority): two
    consumers of one group can hold the same event at once."""
    from disquepy.core.groups import store

    store.EventStore.authority_of = lambda self, holders: self.node.myid


def groups_ids_by_wall_clock() -> None:
    """A node's ID clock is not raised by the event IDs it sees (each node's own wall
    clock alone): IDs go down across nodes whose clocks disagree."""
    from disquepy.core import groups

    groups.Groups.seen = lambda self, ctime, now: None


def groups_leases_never_end() -> None:
    """A lease that runs out is never given back to the group: an event whose consumer
    died unacknowledged is lost for that group."""
    from disquepy.core import groups
    from disquepy.core.groups import acks, leases, model, store

    def effective(c, now):
        return model.AVAILABLE if c is None else c & 3

    for m in (groups, acks, model, store):
        m.effective = effective
    leases.Leases.ended = lambda self, t, now: None


def groups_qack_counts_duplicates() -> None:
    """A QACK of several IDs counts an ID given twice twice (XACK counts it once)."""
    from disquepy.codec import resp
    from disquepy.core.groups import acks

    qack = acks.EventAcks.qack

    def counted(self, client, qname, group, eids, extend_ms, now):
        r = qack(self, client, qname, group, eids, extend_ms, now)
        extra = len(eids) - len(set(eids))
        if r is not None and extra and r != resp.ZERO:
            return resp.integer(int(r[1:-2]) + extra)
        return r

    acks.EventAcks.qack = counted
