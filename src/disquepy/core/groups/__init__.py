"""Consumer groups across the cluster: bananaq's event queues (docs/GROUPS.md).

An *event* is pushed on a queue (QADD) and lives until it expires; every consumer
group gets each event, independently of the other groups, leased to one consumer of
the group at a time and given back to the group (redo) when the lease runs out
unacknowledged.

Split by topic as the job side is (the reasoning and the partition cases are in
docs/GROUPS.md):

- ``model.py``: the event, the claim each group holds on it (state, deliveries,
  lease deadline, packed in one int, merged by a join), queues, waiting clients;
- ``store.py``: the events held, by queue in arrival order, their expiry, QFLUSH, the
  scan for a group's next event, and the *authority* (the one holder that decides for
  an event: the first of its holders, the creator first, not known to have failed);
- ``replication.py``: QADD through the node's replication (the jobs' mechanism,
  core/replication.py), copies held, read repair, claim changes sent to every holder
  (EVSTATE, merged there), EVFLUSH;
- ``leases.py``: QGET, here or asked of peers (EVPULL/EVGRANT), leases running out;
- ``acks.py``: QACK and QWORKING, decided by the authority (EVACK/EVACKED);
- ``notify.py``: QNOTIFY, woken by arrivals here and by peers (EVWATCH/EVAVAIL);
- ``dead.py``: MAXDELIVERIES' dead letters, QDEAD;
- ``persist.py``: the events' records in the node's AOF, the rewrite's, the reload;
- ``sync.py``: holders catching up when a link comes up (after a restart, a cut).

Their timers (expiry, lease ends, requests to peers, QNOTIFY timeouts) are in the
node's one awake index; :meth:`Groups.fire` dispatches them. Their bus messages are
checked and decoded at the boundary (core/messages.py, core/eventcodec.py).

Pure (sans-IO) like the rest of the core: time comes in as ``now`` (ms), effects go
out through the node (bus messages, replies in its outbox).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .acks import EventAcks
from .dead import DeadLetters
from .leases import Leases
from .model import (
    ADDING,
    DEAD,
    DONE,
    LEASED,
    REDO,
    AckWait,
    EQueue,
    Event,
    Expiry,
    GroupStats,
    Lease,
    PullWait,
    Request,
    Rescan,
    Waiter,
    effective,
)
from .notify import Notify
from .persist import EventLog
from .replication import EventReplication
from .store import EventStore
from .sync import Sync, SyncOut

if TYPE_CHECKING:
    from ..awake import Timer
    from ..client import Client
    from ..node import Node

CRON_MS: Final = 1000
MAX_AHEAD_MS: Final = 60_000  # a peer's event time further ahead of our clock raises nothing


class Groups:
    """The node's events, their groups' claims, and the clients waiting on them: the
    parts by topic (``store``, ``repl``, ``leases``, ``acks``, ``notify``, ``dead``),
    the requests to peers they share, their timers, QSTATUS and INFO."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._seq = 0  # orders timers due at the same ms (determinism)
        self._next_req = 0
        self.pending: dict[int, Request] = {}  # requests to peers, by number
        self.next_cron = 0
        self.store = EventStore(self)
        self.repl = EventReplication(self)
        self.leases = Leases(self)
        self.acks = EventAcks(self)
        self.notify = Notify(self)
        self.dead = DeadLetters(self)
        self.log = EventLog(self)
        self.sync = Sync(self)
        self._rescan = Rescan()

    def link_changed(self, up: bool, now: int) -> None:
        """Our link to a peer went up or down: the events it decides for may change
        hands (store.authority), now or once it stayed down long enough."""
        if up:
            self.store.rescan()
        elif self.store.count:
            self.node.awake.schedule(self._rescan, now + self.store.takeover_ms() + 1)

    def seen(self, ctime: int, now: int) -> None:
        """An event time (ns) from a peer or the AOF: the node's clock for new IDs
        (Node.next_ctime) is raised past it, a hybrid logical clock, so an event added
        after another was acknowledged (its copy on this node) gets a larger ID. A time
        more than MAX_AHEAD_MS ahead of ours (a clock gone wrong) is not followed."""
        node = self.node
        if node.last_ctime < ctime <= (now + MAX_AHEAD_MS) * 1_000_000:
            node.last_ctime = ctime

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # --------------------------------------------------------- requests to peers
    def ask(self, w: Request, deadline: int) -> None:
        """Number ``w`` (a new request to a peer), keep it until answered or
        ``deadline``."""
        self._next_req += 1
        w.req = self._next_req
        w.ctime = self.next_seq()
        w.deadline = deadline
        self.pending[w.req] = w
        self.node.awake.schedule(w, deadline)

    def answered(self, req: int) -> Request | None:
        return self.pending.get(req)

    def done(self, w: Request) -> None:
        self.pending.pop(w.req, None)
        self.node.awake.cancel(w)

    # ------------------------------------------------------------------ timers
    def fire(self, t: Timer, now: int) -> None:
        """One of the groups' timers is due (Node.tick)."""
        if isinstance(t, Lease):
            self.leases.ended(t, now)
        elif isinstance(t, Expiry):
            self.store.expire_queue(t.queue, now)
        elif isinstance(t, Event):
            if t.stage == ADDING or t.id in self.repl.adding:
                self.node.repl.tick(t, now)  # waiting for its copies
            else:
                self.store.expire(t, now)
        elif isinstance(t, Request):
            if self.pending.get(t.req) is not t:
                return
            del self.pending[t.req]
            if isinstance(t, PullWait):
                self.leases.pull_timed_out(t, now)
            elif isinstance(t, AckWait):
                self.acks.timed_out(t)
        elif isinstance(t, Waiter):
            self.notify.timed_out(t)
        elif isinstance(t, Rescan):
            self.store.rescan()
        elif isinstance(t, SyncOut):
            self.sync.step(t, now)

    def cron(self, now: int) -> None:
        """Once a second (from the node's cron): flush tombstones and watches that ran
        out, queues nothing uses."""
        if now < self.next_cron:
            return
        self.next_cron = now + CRON_MS
        if self.store.tombs:
            self.store.cron(now)
        if self.store.queues:
            self.notify.cron(now)
        self.sync.cron(now)

    # ------------------------------------------------------------------ node
    def client_closed(self, client: Client) -> None:
        if self.notify.waiters:
            self.notify.client_closed(client)

    def flushall(self) -> None:
        self.notify.reply_all()
        self.store.clear()
        self.leases.granted_by.clear()
        self.leases.forget_timers()
        self.repl.adding.clear()
        self.pending.clear()
        self._rescan.awake = 0  # (the node starts a new awake index)
        self.sync.out.clear()

    # ------------------------------------------------------------------ status
    def group_names(self, q: EQueue) -> list[bytes]:
        names: dict[bytes, None] = dict.fromkeys(q.cursors)
        for w in q.waiters:
            names[w.group] = None
        for e in q.thawed.values():
            for g in e.claims:
                names[g] = None
        for g in q.claims:
            if g not in names and self.store.claimed(q, g):
                names[g] = None
        return sorted(names)

    def stats(self, q: EQueue, groups: list[bytes], now: int) -> dict[bytes, GroupStats]:
        out = {g: GroupStats() for g in groups}
        store = self.store
        for pos in store.positions(q):
            ctime = store.ctime_at(q, pos)
            for g, st in out.items():
                st.total += 1
                s = effective(store.claim_at(q, pos, g), now)
                if s == DONE:
                    st.done += 1
                    continue
                if s == LEASED:
                    st.inprogress += 1
                elif s == REDO:
                    st.redo += 1
                elif s == DEAD:
                    st.dead += 1
                    continue
                else:
                    st.available += 1
                ms = ctime // 1_000_000
                if not st.oldest or ms < st.oldest:
                    st.oldest = ms
        for w in q.waiters:
            st2 = out.get(w.group)
            if st2 is not None:
                st2.consumers += 1
        return out

    def status(self, names: list[bytes], groups: list[bytes],
               now: int) -> list[tuple[bytes, list[tuple[bytes, GroupStats]]]]:
        queues = self.store.queues
        if not names:
            names = sorted(n for n, q in queues.items() if q.live or q.waiters)
        out: list[tuple[bytes, list[tuple[bytes, GroupStats]]]] = []
        for name in names:
            q = queues.get(name)
            if q is None:
                q = EQueue(name, now)  # not kept: a queue nobody uses does not exist
            gs = groups if groups else self.group_names(q)
            st = self.stats(q, gs, now)
            out.append((name, [(g, st[g]) for g in gs]))
        return out

    def info(self) -> list[tuple[str, object]]:
        store = self.store
        return [
            ("events", store.count),
            ("event_queues", len(store.queues)),
            ("events_added", self.repl.added),
            ("events_delivered", self.leases.delivered),
            ("events_acked", self.acks.acked),
            ("events_redone", self.leases.redone),
            ("events_dead_lettered", self.dead.dead),
            ("events_expired", store.expired),
            ("events_repaired", self.repl.repairs),
            ("event_leases", store.leased_count()),
            ("qnotify_clients", len(self.notify.waiters)),
            ("event_syncs", self.sync.syncs),
            ("event_sync_waiting", len(self.sync.waiting)),
        ]


__all__ = ["Groups"]
