"""Waiting consumers: QNOTIFY blocks on local arrivals and redo, and asks peers to tell
it when events become available there (EVWATCH/EVAVAIL): a QADD on any node wakes it.

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...codec import resp
from .. import errors
from .. import messages as M
from .model import EQueue, Event, Waiter

if TYPE_CHECKING:
    from ..client import Client
    from ..membership import Peer
    from . import Groups


class Notify:
    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.waiters: dict[int, Waiter] = {}  # QNOTIFY clients, by client id

    def qnotify(self, client: Client, group: bytes, timeout_ms: int, names: list[bytes],
                now: int) -> bytes | None:
        store = self.g.store
        group = store.intern(group)
        for name in names:
            q = store.queues.get(name)
            if q is not None and store.available(q, group, now):
                return resp.bulk(name)
        if self.node.leaving:
            return resp.error(errors.LEAVING)
        deadline = now + timeout_ms if timeout_ms else 0
        w = Waiter(self.g.next_seq(), client, group, names, deadline)
        self.waiters[client.id] = w
        reach = self.node.members.reach_ids
        for name in names:
            q = store.queue_for(name, now)
            q.waiters.append(w)
            if reach:
                self.node.send(reach, M.EVWATCH, name, group,
                               timeout_ms + 1000 if timeout_ms else M.MAX_LEASE_MS)
        if deadline:
            self.node.awake.schedule(w, deadline)
        return None

    def timed_out(self, w: Waiter) -> None:
        """A QNOTIFY's timeout: nil."""
        if self.waiters.get(w.client.id) is not w:
            return
        self._unblock(w)
        if not w.client.closed:
            self.node.outbox.append((w.client, resp.null_bulk(w.client.proto)))

    def _unblock(self, w: Waiter) -> None:
        self.waiters.pop(w.client.id, None)
        self.node.awake.cancel(w)
        reach = self.node.members.reach_ids
        queues = self.g.store.queues
        for name in w.queues:
            q = queues.get(name)
            if q is None:
                continue
            if w in q.waiters:
                q.waiters.remove(w)
            if reach and not any(o.group == w.group for o in q.waiters):
                self.node.send(reach, M.EVWATCH, name, w.group, 0)

    def wake(self, q: EQueue, group: bytes | None, now: int) -> None:
        """Serve the QNOTIFY clients of ``q`` (of ``group`` only, unless None) that
        have an event available."""
        if not q.waiters:
            return
        ok: dict[bytes, bool] = {}
        store = self.g.store
        for w in list(q.waiters):
            if group is not None and w.group != group:
                continue
            a = ok.get(w.group)
            if a is None:
                a = ok[w.group] = store.available(q, w.group, now)
            if a:
                self._unblock(w)
                if not w.client.closed:
                    self.node.outbox.append((w.client, resp.bulk(q.name)))

    def _wake_remote(self, q: EQueue, group: bytes) -> None:
        """A peer says events of ``q`` are available to ``group`` there."""
        for w in list(q.waiters):
            if w.group == group:
                self._unblock(w)
                if not w.client.closed:
                    self.node.outbox.append((w.client, resp.bulk(q.name)))

    def arrived(self, e: Event, now: int) -> None:
        q = self.g.store.queues.get(e.queue)
        if q is not None:
            self.arrived_in(q, now)

    def arrived_in(self, q: EQueue, now: int) -> None:
        """An event arrived in ``q``: its waiting consumers and watching peers told."""
        if q.waiters:
            self.wake(q, None, now)
        self.tell_watchers(q, None)

    def tell_watchers(self, q: EQueue, group: bytes | None) -> None:
        if not q.watchers:
            return
        for pid, (g, _) in q.watchers.items():
            if group is None or g == group:
                self.node.send([pid], M.EVAVAIL, q.name, g)

    def on_evwatch(self, p: Peer, fields: M.Fields, now: int) -> None:
        qname, group, ms = fields
        store = self.g.store
        g = store.intern(group)
        if not ms:
            q = store.queues.get(qname)
            if q is not None:
                w = q.watchers.get(p.id)
                if w is not None and w[0] == g:
                    del q.watchers[p.id]
            return
        q = store.queue_for(qname, now)
        q.watchers[p.id] = (g, now + ms)
        # only an event this node decides for: another holder's view of a lease may lag
        # (its EVSTATE on another link), and the peer could not lease it here anyway
        if store.find(q, g, now, True) >= 0:
            self.node.send([p.id], M.EVAVAIL, qname, g)

    def on_evavail(self, p: Peer, fields: M.Fields, now: int) -> None:
        qname, group = fields
        q = self.g.store.queues.get(qname)
        if q is not None and q.waiters:
            self._wake_remote(q, group)

    def client_closed(self, client: Client) -> None:
        w = self.waiters.get(client.id)
        if w is not None:
            self._unblock(w)

    def cron(self, now: int) -> None:
        """Forget the watches that ran out or whose peer was forgotten (a forgotten
        node never cancels); drop the queues nothing holds or waits on."""
        peers = self.node.members.peers
        queues = self.g.store.queues
        for q in list(queues.values()):
            for pid, (_, wuntil) in list(q.watchers.items()):
                if wuntil <= now or pid not in peers:
                    del q.watchers[pid]
            if not q.live and not q.waiters and not q.watchers:
                self.g.store.drop_queue(q)

    def reply_all(self) -> None:
        """Every waiting client gets nil (DEBUG FLUSHALL)."""
        for w in list(self.waiters.values()):
            self._unblock(w)
            if not w.client.closed:
                self.node.outbox.append((w.client, resp.null_bulk(w.client.proto)))
