"""Holders catch up after a restart or a broken link: anti-entropy between two holders.

While a node is down (or cut off) the others go on: the claims they change (leases,
acks, dead letters) are sent to every holder, and the one away misses them. So when
this node's link to a peer comes up (at start, or again after breaking), it sends the
peer, for every event they both hold, the event's ID and the claims it knows
(EVSYNC items), then EVSYNCED. The peer merges them (a join: no harm), sends back
(EVSTATE) the claims it knows better, and asks (EVNEED) for the copies it lacks (a
node restarted without AOF lost them: it gets them back, so a rolling restart keeps
every event as long as one copy survives each step).

A node that loaded events from its AOF has been away: it leases none of the events it
shares with a peer until that peer's EVSYNCED came (or the peer is known to have
failed, or ``SYNC_WAIT_MS`` passed): a group never re-receives an event it acked
while this node was down. (It still acknowledges: an ack only ends a lease.)

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .. import messages as M
from ..awake import Timer
from ..eventcodec import event_fields
from ..membership import P_FAIL
from .store import IdList

if TYPE_CHECKING:
    from ..membership import Peer
    from . import Groups

SYNC_WAIT_MS: Final = 10_000  # at least; 2 node timeouts if longer
SYNC_CHUNK: Final = 5000  # events looked at per step of an EVSYNC round (a step per awake tick)


class SyncOut(Timer):
    """An EVSYNC round to one peer under way: a step of SYNC_CHUNK events, then its
    timer brings the next, so a node holding millions of events never stalls."""

    __slots__ = ("peer", "events", "pos", "want_reply")

    def __init__(self, peer: str, events: IdList, want_reply: bool) -> None:
        super().__init__(b"", 0)
        self.peer = peer
        self.events = events
        self.pos = 0
        self.want_reply = want_reply


class Sync:
    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.waiting: set[str] = set()  # peers to hear from before leasing loaded events
        self.until = 0
        self.syncs = 0  # EVSYNC rounds sent (INFO)
        self.out: dict[str, SyncOut] = {}  # rounds under way, by peer

    def after_load(self, now: int) -> None:
        """Events came back from the AOF: wait for the peers' claims before leasing."""
        self.waiting = set(self.node.members.known_peers())
        self.until = now + max(SYNC_WAIT_MS, 2 * self.node.config.cluster_node_timeout)

    def blocks(self, holders: tuple[str, ...]) -> bool:
        """Whether this node must not lease an event held by ``holders`` yet (see the
        module doc)."""
        w = self.waiting
        if not w:
            return False
        return any(h in w for h in holders)

    def _heard(self, pid: str) -> None:
        if pid in self.waiting:
            self.waiting.discard(pid)
            self.g.store.rescan()  # events skipped meanwhile may be leased now

    def cron(self, now: int) -> None:
        if not self.waiting:
            return
        if now >= self.until:
            self.waiting.clear()
            self.g.store.rescan()
            return
        peers = self.node.members.peers
        for pid in list(self.waiting):
            p = peers.get(pid)
            if p is None or p.flags & P_FAIL:  # (it decides for nothing now)
                self._heard(pid)

    # ---------------------------------------------------------------- sending
    def link_up(self, pid: str, now: int) -> None:
        """Our link to ``pid`` (a known node) connected: tell it what we hold of its."""
        self.send(pid, True, now)

    def send(self, pid: str, want_reply: bool, now: int) -> None:
        """Start an EVSYNC round to ``pid`` (one under way to it starts over)."""
        old = self.out.pop(pid, None)
        if old is not None:
            self.node.awake.cancel(old)
        self.syncs += 1
        out = SyncOut(pid, self.g.store.snapshot(), want_reply)
        self.out[pid] = out
        self.step(out, now)

    def step(self, out: SyncOut, now: int) -> None:
        """The next SYNC_CHUNK events of a round; EVSYNCED once all are sent."""
        if self.out.get(out.peer) is not out:
            return
        node = self.node
        dsts = [out.peer]
        events = out.events
        end = min(out.pos + SYNC_CHUNK, len(events))
        store = self.g.store
        for eid in events[out.pos:end]:
            e = store.peek(eid)
            if e is not None and out.peer in e.delivered:
                node.send_item(dsts, M.EVSYNC, [e.id, [[g, c] for g, c in e.claims.items()]])
        out.pos = end
        if end < len(events):
            node.awake.schedule(out, now + 1)
            return
        del self.out[out.peer]
        node.send(dsts, M.EVSYNCED, int(out.want_reply))

    # -------------------------------------------------------------- receiving
    def on_evsync(self, p: Peer, fields: M.Fields, now: int) -> None:
        store = self.g.store
        node = self.node
        dsts = [p.id]
        need: list[bytes] = []
        for eid, claims in fields:  # checked by messages.parse
            q, pos = store.locate(eid)
            if q is None:
                if eid not in self.g.repl.adding:
                    need.append(eid)
                continue
            theirs: dict[bytes, int] = {}
            for gr, c in claims:
                gr = store.intern(gr)
                theirs[gr] = c
                store.set_claim(q, pos, gr, c, now)
            for gr, c in store.claims_at(q, pos).items():
                if theirs.get(gr) != c:
                    node.send_item(dsts, M.EVSTATE, [eid, gr, c])
        if need:
            node.send_items(dsts, M.EVNEED, need)

    def on_evsynced(self, p: Peer, fields: M.Fields, now: int) -> None:
        self._heard(p.id)
        if fields[0]:
            self.send(p.id, False, now)

    def on_evneed(self, p: Peer, fields: M.Fields, now: int) -> None:
        """The peer lacks copies of these events we hold: sent (a read repair)."""
        store = self.g.store
        for eid in fields:
            e = store.peek(eid)
            if e is not None:
                self.g.repl.repairs += 1
                self.node.send_item([p.id], M.EVADD, event_fields(e), len(e.body))
