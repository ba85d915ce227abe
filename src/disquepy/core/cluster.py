"""The cluster half of the node state machine (pure, like the rest of the core).

Membership: CLUSTER MEET starts a handshake; PING/PONG carry gossip about a few other
nodes so a node met by one learns of all; a peer that does not answer within
``cluster-node-timeout`` is PFAIL, and FAIL once a majority reports it (FAIL is
broadcast, and cleared when the node answers again).

Jobs: REPLJOB/GOTJOB synchronous replication with one more node every 50 ms while
short, WILLQUEUE/QUEUED to avoid double re-queues, SETACK/GOTACK/DELJOB garbage
collection of acknowledged jobs, NEEDJOBS/YOURJOBS federation, PAUSE and WORKING
propagation — the state machine of Disque's README.

Outputs: ``bus_out`` holds ``(destination ids, message)`` pairs for the shell to
send; ``links_dirty`` asks it to re-read ``peer_links()``; ``cluster_dirty`` asks it
to save ``nodes_conf_text()``.
"""

from __future__ import annotations

from ..codec import aof, resp
from . import messages as M
from .ids import new_node_id
from .job import ACKED, ACTIVE, F_BCAST_WILLQUEUE, F_DELIVERED, F_DUMMY, QUEUED, WAIT_REPL, Job

# peer flags
P_HANDSHAKE = 1
P_PFAIL = 2
P_FAIL = 4
P_LEAVING = 8

REPL_RETRY_MS = 50  # add one more node this often while replication is short
_NOT_WAITING = (None, 0, False)  # repl_waiting's entry for a job nobody waits for
WILLQUEUE_ADVANCE_MS = 500
GC_MIN_MS = 1000  # first ack GC retry, doubling up to GC_MAX_MS
GC_MAX_MS = 180_000
NEEDJOBS_BCAST_MIN_MS = 2000  # discovery broadcast back-off (Disque: 2 s .. 30 s)
NEEDJOBS_BCAST_MAX_MS = 30_000
NEEDJOBS_ADHOC_MIN_MS = 25  # requests to recent sources (Disque: 25 ms .. 2 s)
NEEDJOBS_ADHOC_MAX_MS = 2000
SOURCE_MEMORY_MS = 5000  # a node that sent us jobs is a "recent source" this long
ASKER_MEMORY_MS = 60_000  # we push new jobs to a node that asked, this long after
GOSSIP_ENTRIES = 3
PRIORITY_OK, PRIORITY_NOLINK, PRIORITY_PFAIL, PRIORITY_BAD = 1, 5, 10, 100


class Peer:
    __slots__ = ("id", "ip", "port", "flags", "link", "ping_sent", "pong_received",
                 "fail_reports", "ctime", "link_down_since")

    def __init__(self, nid: str, ip: str, port: int, flags: int, now: int) -> None:
        self.id = nid
        self.ip = ip
        self.port = port
        self.flags = flags
        self.link = False
        self.ping_sent = 0
        self.pong_received = 0
        self.fail_reports: dict[str, int] = {}
        self.ctime = now
        self.link_down_since = now

    def __repr__(self) -> str:
        return f"<Peer {self.id[:8]} {self.ip}:{self.port} flags={self.flags}>"


def _xor_rank(node_id: str, jid: bytes) -> bytes:
    """Disque's QUEUED tie-break: node IDs XORed with the job's random bytes, so
    which copy wins differs from job to job."""
    rnd = jid[11:35]
    nb = node_id.encode()[:24]
    return bytes(a ^ b for a, b in zip(nb, rnd, strict=False))


class ClusterMixin:
    """Mixed into Node; see node.py for the single-node state it extends."""

    # ----------------------------------------------------------- bookkeeping
    def cluster_init(self, now: int) -> None:
        self.peers: dict[str, Peer] = {}
        self.bus_out: list = []
        self.links_dirty = False
        self.cluster_dirty = False
        self.repl_waiting: dict[bytes, tuple] = {}  # job id -> (client, deadline ms)
        self.askers: dict[bytes, dict] = {}  # queue -> {node id: [until ms, jobs wanted]}
        # queues the federation cron must look at; a dict, not a set: iteration order
        # must not depend on the hash seed (runs replay exactly in the simulator)
        self.fed_watch: dict = {}
        self.msgs_sent = 0
        self.msgs_received = 0
        self._next_ping = now
        self._reach_ids: list = []  # reachable_peers(), sorted; rebuilt, never mutated
        self._shared: dict = {}  # see shared()
        self._malformed_logged = -1000  # when a refused bus message was last logged
        self._malformed_logged_count = 0

    def membership_changed(self) -> None:
        peers = self.peers.values()
        self.size = 1 + sum(1 for p in peers if not p.flags & P_HANDSHAKE)
        self._reach_ids = sorted(p.id for p in peers if self._reachable(p))
        self.reachable = len(self._reach_ids)
        self.default_replicate = min(3, self.size)
        self._peers = self.size > 1

    @staticmethod
    def _reachable(p: Peer) -> bool:
        return not p.flags & (P_HANDSHAKE | P_PFAIL | P_FAIL | P_LEAVING)

    def reachable_peers(self) -> list:
        """IDs of the peers reachable now, sorted (a new list: the caller may keep it)."""
        return list(self._reach_ids)

    def known_peers(self) -> list:
        return [p.id for p in self.peers.values() if not p.flags & P_HANDSHAKE]

    def peer_links(self) -> dict:
        """node id -> (ip, bus port) of every peer we keep a link to."""
        off = self.config.cluster_port_offset
        return {p.id: (p.ip, p.port + off) for p in self.peers.values() if p.ip}

    def _ping(self, p: Peer, mtype: int = M.PING) -> None:
        """PING or PONG to one peer: gossip, plus the address we reach it at (so a
        node that only ever MEETs others still learns its own address)."""
        self.send([p.id], mtype, self._gossip(), p.ip)

    def shared(self, value):
        """One object per distinct value, for what many jobs hold alike: the lists of
        node IDs (delivered, confirmed) of the jobs replicated to the same nodes, and the
        name of a queue a replica holds copies for (it has no Queue object to share the
        name of). Each would otherwise be a new object per job as decoded from the bus
        (64 bytes for a list of three, 33 plus the name for a name). Cleared at 4096."""
        v = self._shared.get(value)
        if v is None:
            if len(self._shared) >= 4096:
                self._shared.clear()
            self._shared[value] = v = value
        return v

    def send(self, dsts, mtype: int, *fields) -> None:
        if not dsts:
            return
        msg = [mtype, self.myid, self.port, M.SF_LEAVING if self.leaving else 0, *fields]
        self.bus_out.append((list(dsts), msg))
        self.msgs_sent += len(dsts)

    def take_messages(self) -> dict:
        """Take what was sent since the last call, per destination node: one message
        each, a BATCH of them when several (so one frame per peer), in sending order."""
        out, self.bus_out = self.bus_out, []
        per: dict = {}
        for dsts, msg in out:
            for d in dsts:
                lst = per.get(d)
                if lst is None:
                    per[d] = [msg]
                else:
                    lst.append(msg)
        return {d: msgs[0] if len(msgs) == 1 else [M.BATCH, self.myid, self.port, 0, msgs]
                for d, msgs in per.items()}

    def send_item(self, dsts: list, mtype: int, item) -> None:
        """Send one item of a message that carries many (REPLJOB jobs, GOTJOB IDs):
        it joins the previous message when that one is of the same type to the same
        nodes, so a burst of replications costs one message per peer, not one per job.
        Only the last message grows, so the order of messages is kept. ``dsts`` must
        be sorted (equal sets compare equal)."""
        out = self.bus_out
        if out:
            last_dsts, last = out[-1]
            if last[0] == mtype and last_dsts == dsts and len(last) < M.MAX_ITEMS:
                last.append(item)
                return
        out.append((dsts, [mtype, self.myid, self.port, M.SF_LEAVING if self.leaving else 0,
                           item]))
        self.msgs_sent += len(dsts)

    def send_items(self, dsts: list, mtype: int, items: list) -> None:
        """send_item() of each of ``items``, in one step."""
        out = self.bus_out
        if out:
            last_dsts, last = out[-1]
            if last[0] == mtype and last_dsts == dsts and len(last) + len(items) <= M.MAX_ITEMS:
                last.extend(items)
                return
        out.append((dsts, [mtype, self.myid, self.port, M.SF_LEAVING if self.leaving else 0,
                           *items]))
        self.msgs_sent += len(dsts)

    def _peers_changed(self) -> None:
        self.links_dirty = True
        self.cluster_dirty = True
        self.membership_changed()

    # -------------------------------------------------------------- commands
    def cluster_meet(self, ip: str, port: int, now: int) -> None:
        for p in self.peers.values():
            if p.ip == ip and p.port == port:
                if p.flags & P_HANDSHAKE:
                    self.send([p.id], M.MEET, self._gossip(), ip)
                return
        p = Peer(new_node_id(self.rng), ip, port, P_HANDSHAKE, now)
        self.peers[p.id] = p
        self._peers_changed()
        self.send([p.id], M.MEET, self._gossip(), ip)

    def cluster_forget(self, nid: str) -> None:
        self.peers.pop(nid, None)
        self._peers_changed()

    def set_identity(self, node_id: str) -> None:
        """Take this node ID (e.g. restored from nodes.conf); job IDs follow it."""
        from .ids import JobIdGenerator

        self.myid = node_id
        self.myid_b = node_id.encode()
        self.idgen = JobIdGenerator(node_id, self.rng.getrandbits(160).to_bytes(20, "little"))
        self.cluster_dirty = True

    def cluster_reset(self, hard: bool, now: int) -> None:
        self.peers.clear()
        self.flushall()
        if hard:
            self.set_identity(new_node_id(self.rng))
        self.leaving = False
        self._peers_changed()

    def set_leaving(self, on: bool, now: int) -> None:
        if on == self.leaving:
            return
        self.leaving = on
        self.cluster_dirty = True
        if on:  # GETJOB clients waiting here must go elsewhere
            from . import errors

            self.reply_blocked_clients(resp.error(errors.LEAVING))
        for p in self.peers.values():  # tell everybody now, not at the next ping
            if not p.flags & P_HANDSHAKE:
                self._ping(p)

    # ---------------------------------------------------------------- gossip
    def _gossip(self) -> list:
        cand = [p for p in self.peers.values() if not p.flags & P_HANDSHAKE]
        chosen = cand if len(cand) <= GOSSIP_ENTRIES else self.rng.sample(cand, GOSSIP_ENTRIES)
        for p in cand:  # failing nodes always travel, so reports reach a majority
            if p.flags & (P_PFAIL | P_FAIL) and p not in chosen:
                chosen.append(p)
        return [[p.id, p.ip, p.port, self._gossip_flags(p)] for p in chosen]

    @staticmethod
    def _gossip_flags(p: Peer) -> int:
        f = 0
        if p.flags & P_PFAIL:
            f |= M.NF_PFAIL
        if p.flags & P_FAIL:
            f |= M.NF_FAIL
        if p.flags & P_LEAVING:
            f |= M.NF_LEAVING
        return f

    def _process_gossip(self, sender: Peer, gossip: list, now: int) -> None:
        timeout = self.config.cluster_node_timeout
        for nid, ip, port, flags in gossip:  # checked by messages.parse
            if nid == self.myid:
                continue
            p = self.peers.get(nid)
            if p is None:
                if ip and not flags & M.NF_FAIL:
                    # a node we did not know: meet it (it will learn of us too)
                    p = Peer(nid, ip, port, P_HANDSHAKE, now)
                    self.peers[nid] = p
                    self._peers_changed()
                    self.send([nid], M.MEET, self._gossip(), ip)
                continue
            if flags & (M.NF_PFAIL | M.NF_FAIL):
                p.fail_reports[sender.id] = now
                self._maybe_fail(p, now)
            else:
                p.fail_reports.pop(sender.id, None)
            leaving = bool(flags & M.NF_LEAVING)
            if leaving != bool(p.flags & P_LEAVING) and not p.flags & P_HANDSHAKE:
                # leaving state spreads by gossip; its owner is authoritative when heard
                if p.pong_received and now - p.pong_received < timeout:
                    continue
                p.flags ^= P_LEAVING
                self.membership_changed()

    def _maybe_fail(self, p: Peer, now: int) -> None:
        if not p.flags & P_PFAIL or p.flags & P_FAIL:
            return
        window = self.config.cluster_node_timeout * 2
        for rid, t in list(p.fail_reports.items()):
            if now - t > window or rid not in self.peers:
                del p.fail_reports[rid]
        if len(p.fail_reports) + 1 >= self.size // 2 + 1:
            p.flags = (p.flags & ~P_PFAIL) | P_FAIL
            self.membership_changed()
            self.cluster_dirty = True
            self.send(self.known_peers(), M.FAIL, p.id)

    # ------------------------------------------------------------------ cron
    def cluster_cron(self, now: int) -> None:
        if not self.peers:
            return
        timeout = self.config.cluster_node_timeout
        changed = False
        for p in list(self.peers.values()):
            if p.flags & P_HANDSHAKE:
                if now - p.ctime > max(timeout, 1000) * 2:
                    del self.peers[p.id]  # nobody answered the MEET
                    changed = True
                elif now >= self._next_ping:
                    self.send([p.id], M.MEET, self._gossip(), p.ip)
                continue
            if p.link and not p.ping_sent and now - p.pong_received > timeout // 2:
                p.ping_sent = now
                self._ping(p)
            elif p.link and p.ping_sent and now >= self._next_ping:
                # unanswered: ask again each second (ping_sent keeps the first try,
                # which is what failure detection measures)
                self._ping(p)
            late = (p.ping_sent and now - p.ping_sent > timeout) or (
                not p.link and now - p.link_down_since > timeout)
            if late and not p.flags & (P_PFAIL | P_FAIL):
                p.flags |= P_PFAIL
                changed = True
            if p.flags & P_PFAIL:
                self._maybe_fail(p, now)
        if now >= self._next_ping:
            # once a second, one random peer more: keeps gossip flowing
            self._next_ping = now + 1000
            live = [p for p in self.peers.values() if p.link and not p.flags & P_HANDSHAKE]
            if live:
                p = self.rng.choice(live)
                if not p.ping_sent:
                    p.ping_sent = now
                self._ping(p)
        if changed:
            self._peers_changed()
        self._federation_cron(now)

    def link_state(self, nid: str, up: bool, now: int) -> None:
        """The shell's outbound link to ``nid`` connected or broke."""
        p = self.peers.get(nid)
        if p is None:
            return
        p.link = up
        if up:
            if p.flags & P_HANDSHAKE:
                self.send([nid], M.MEET, self._gossip(), p.ip)
            else:
                if not p.ping_sent:
                    p.ping_sent = now
                self._ping(p)
        else:
            p.link_down_since = now

    # ------------------------------------------------------------- messages
    def handle_message(self, msg: list, peer_ip: str, now: int) -> None:
        """One message from the bus (a BATCH: each of its messages in turn). What
        breaks the format is refused by ``messages.parse``, counted and logged; an
        exception raised past that is a bug of the core and propagates."""
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
        if self.ready:
            self._serve_ready(now)

    def _handle_one(self, msg, peer_ip: str, now: int) -> None:
        self.msgs_received += 1
        try:
            mtype, sid, sport, sflags, fields = M.parse(msg)
        except M.Malformed as e:
            self._malformed(peer_ip, e, now)
            return
        if mtype == M.MEET:
            self._on_meet(sid, peer_ip, sport, sflags, fields, now)
            return
        p = self.peers.get(sid)
        if p is None:
            if mtype == M.PONG:
                self._on_handshake_pong(sid, peer_ip, sport, sflags, fields, now)
            return  # unknown nodes must MEET us first
        self._heard_from(p, sflags, now)
        _HANDLERS[mtype](self, p, fields, now)

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

    def _heard_from(self, p: Peer, sflags: int, now: int) -> None:
        leaving = bool(sflags & M.SF_LEAVING)
        if leaving != bool(p.flags & P_LEAVING):
            p.flags ^= P_LEAVING
            self.membership_changed()
            self.cluster_dirty = True

    def _on_meet(self, sid, peer_ip, sport, sflags, fields, now) -> None:
        if sid == self.myid:
            return
        gossip, your_ip = fields[0], fields[1]
        if not self.ip and your_ip:
            self.ip = your_ip  # we learn our own address from whoever reached us
            self.cluster_dirty = True
        p = self.peers.get(sid)
        if p is None:
            # a node that met us by address: forget any handshake entry for it
            for hp in list(self.peers.values()):
                if hp.flags & P_HANDSHAKE and hp.ip == peer_ip and hp.port == sport:
                    del self.peers[hp.id]
            p = Peer(sid, peer_ip, sport, 0, now)
            self.peers[sid] = p
            self._peers_changed()
        elif p.flags & P_HANDSHAKE:
            p.flags &= ~P_HANDSHAKE
            self._peers_changed()
        self._heard_from(p, sflags, now)
        self._process_gossip(p, gossip, now)
        self._ping(p, M.PONG)

    def _on_handshake_pong(self, sid, peer_ip, sport, sflags, fields, now) -> None:
        for hp in list(self.peers.values()):
            if hp.flags & P_HANDSHAKE and hp.port == sport and hp.ip in (peer_ip, "localhost"):
                del self.peers[hp.id]
                p = Peer(sid, hp.ip, sport, 0, now)
                p.pong_received = now
                self.peers[sid] = p
                self._peers_changed()
                self._learn_my_ip(fields)
                self._process_gossip(p, fields[0], now)
                return

    def _learn_my_ip(self, fields) -> None:
        if not self.ip and fields[1]:
            self.ip = fields[1]
            self.cluster_dirty = True

    def _on_ping(self, p: Peer, fields, now) -> None:
        self._learn_my_ip(fields)
        self._process_gossip(p, fields[0], now)
        self._ping(p, M.PONG)

    def _on_pong(self, p: Peer, fields, now) -> None:
        self._learn_my_ip(fields)
        p.ping_sent = 0
        p.pong_received = now
        if p.flags & (P_HANDSHAKE | P_PFAIL | P_FAIL):
            p.flags &= ~(P_HANDSHAKE | P_PFAIL | P_FAIL)
            p.fail_reports.clear()
            self._peers_changed()
            self._peer_recovered(p.id, now)
        self._process_gossip(p, fields[0], now)

    def _on_fail(self, p: Peer, fields, now) -> None:
        f = self.peers.get(fields[0])
        if f is not None and not f.flags & P_FAIL:
            f.flags = (f.flags & ~P_PFAIL) | P_FAIL
            self.membership_changed()
            self.cluster_dirty = True

    # ----------------------------------------------------------- replication
    def replicate_new_job(self, job: Job, client, now: int, timeout: int, is_async: bool,
                          extrepl: bool):
        """ADDJOB with copies on other nodes (REPLJOB to repl-1 nodes, or repl nodes
        when this node keeps no copy). Returns the reply, or None while waiting."""
        others = self._reach_ids
        need = job.repl if extrepl else job.repl - 1
        # every reachable peer, or a random choice of them; sorted either way, so the
        # REPLJOBs of a burst of jobs for the same nodes share one message
        targets = others if need >= len(others) else sorted(self.rng.sample(others, need))
        job.delivered = self.shared(tuple(targets) if extrepl else (self.myid, *targets))
        job.confirmed = () if extrepl else (self.myid,)
        if targets:
            self.send_item(targets, M.REPLJOB, M.job_to_wire(job, self.idem_of.get(job.id)))
        if is_async or not targets:
            job.state = ACTIVE
            self._job_replicated(job, now, extrepl)
            return b"+" + job.id + b"\r\n"
        job.state = WAIT_REPL
        deadline = now + timeout if timeout else 0
        self.repl_waiting[job.id] = (client, deadline, extrepl)
        client.blocked_add = job.id
        self.awake.schedule(job, now + REPL_RETRY_MS)
        return None

    def _job_replicated(self, job: Job, now: int, extrepl: bool) -> None:
        """Enough copies exist: queue the job here, or on a copy when we keep none."""
        if extrepl:
            if job.confirmed:
                self.send([self.rng.choice(job.confirmed)], M.ENQUEUE, job.id)
            elif job.delivered:
                self.send([self.rng.choice(job.delivered)], M.ENQUEUE, job.id)
            self.unregister(job)
            return
        # the record goes out with the job's queue time set, and before enqueueing,
        # which may move the job away at once (federation) and log its deletion
        if job.delay:
            job.qtime = now + job.delay * 1000
            if self.aof_on:
                self.aof_created(job)
            self.schedule(job)
        else:
            job.qtime = now + job.retry * 1000
            if self.aof_on:
                self.aof_created(job)
            self.enqueue(job, now)

    def _repl_tick(self, job: Job, now: int) -> None:
        """A job still short of copies: give up at the deadline, else one more node."""
        client, deadline, extrepl = self.repl_waiting.get(job.id, _NOT_WAITING)
        if client is None:
            return
        if deadline and now >= deadline:
            self._repl_failed(job, "NOREPL Timeout reached before replicating to the "
                                   "requested number of nodes")
            return
        spare = [n for n in self.reachable_peers() if n not in job.delivered]
        if spare:
            job.delivered = (*job.delivered, self.rng.choice(spare))
        dsts = sorted(n for n in job.delivered if n != self.myid and n not in job.confirmed)
        if dsts:
            self.send_item(dsts, M.REPLJOB, M.job_to_wire(job, self.idem_of.get(job.id)))
        at = now + REPL_RETRY_MS
        if deadline and deadline < at:
            at = deadline
        self.awake.schedule(job, min(at, job.etime))

    def _repl_failed(self, job: Job, error: str) -> None:
        client, _, _ = self.repl_waiting.pop(job.id, _NOT_WAITING)
        self.send([n for n in job.delivered if n != self.myid], M.DELJOB, job.id)
        self.unregister(job)
        if client is not None and not client.closed:
            client.blocked_add = None
            self.outbox.append((client, resp.error(error)))

    def _on_repljob(self, p: Peer, fields, now) -> None:
        """Copies of jobs to hold (one or more per message): GOTJOB for each we hold,
        all in one message."""
        full = self.memory_level() >= 1  # near the limit: let other nodes hold new copies
        parts = self.jobs.parts
        got = []
        for (jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered,
             idem) in fields:  # decoded and checked by messages.parse
            job = parts[((jid[11] & 0x7F) << 7) | (jid[12] & 0x7F)].get(jid)  # jobs.get
            if job is not None:
                job.delivered = self.shared(tuple(dict.fromkeys((*job.delivered, *delivered))))
                if job.state != WAIT_REPL:
                    got.append(jid)
                continue
            if full:
                continue
            q = self.queues.get(queue)
            if q is None:
                queue = self._shared.get(queue) or self.shared(queue)
            elif q.flags & 1:  # paused in input: refuse new copies
                continue
            else:
                queue = q.name
            if self._job_from_wire(jid, queue, body, ctime, ttl, delay, retry, repl,
                                   nacks, adeliv, delivered, now, idem) is not None:
                got.append(jid)
        if got:
            self.send_items([p.id], M.GOTJOB, got)

    def _job_from_wire(self, jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv,
                       delivered, now, idem=None):
        if retry == 0 and jid in self.amo_done:
            return None  # an at-most-once job delivered here before: a stale copy
        if ctime // 1_000_000 + ttl * 1000 <= now:  # Job.etime
            return None
        job = Job(jid, queue, body, ctime, ttl, repl, delay, retry)
        if not self.register(job):
            return None
        job.nacks = nacks
        job.adeliv = adeliv
        if self.myid not in delivered:  # (a list from the bus is shared already)
            delivered = self.shared((*delivered, self.myid))
        job.delivered = delivered
        job.state = ACTIVE
        if retry:
            job.flags = F_BCAST_WILLQUEUE
            job.qtime = now + (delay + retry) * 1000 + self.jitter()
        if idem is not None:
            self.idem_bind(idem, job)
        self.schedule(job)
        if self.aof_on:
            self.aof_created(job)
        return job

    def _on_gotjob(self, p: Peer, fields, now) -> None:
        """The sender holds copies of these jobs (one or more IDs per message)."""
        parts = self.jobs.parts
        for jid in fields:
            job = parts[((jid[11] & 0x7F) << 7) | (jid[12] & 0x7F)].get(jid)  # jobs.get
            if job is not None and job.state == WAIT_REPL:
                self._got_copy(p, job, now)

    def _got_copy(self, p: Peer, job: Job, now: int) -> None:
        pid = p.id
        confirmed = job.confirmed
        if pid not in confirmed:
            job.confirmed = confirmed = (*confirmed, pid)
        if pid not in job.delivered:
            job.delivered = (*job.delivered, pid)
        if len(confirmed) >= job.repl:
            job.confirmed = self.shared(confirmed)
            client, _, extrepl = self.repl_waiting.pop(job.id, _NOT_WAITING)
            job.state = ACTIVE
            self.awake.cancel_near(job)  # its replication retry, due within REPL_RETRY_MS
            if client is not None and not client.closed:
                client.blocked_add = None
                self.outbox.append((client, b"+" + job.id + b"\r\n"))
            self._job_replicated(job, now, extrepl)

    def _on_enqueue(self, p: Peer, fields, now) -> None:
        job = self.jobs.get(fields[0])
        if job is None or job.state != ACTIVE:
            return
        q = self.queues.get(job.queue)
        if q is not None and q.flags & 1:
            return
        if job.qtime == 0 and job.retry == 0:
            job.qtime = now  # an at-most-once job's one and only enqueue
        self.enqueue(job, now)

    # -------------------------------------------------------------- requeue
    def has_peers(self, job: Job) -> bool:
        d = job.delivered  # distinct node IDs
        n = len(d)
        return n > 1 or (n == 1 and d[0] != self.myid)

    def send_willqueue(self, job: Job) -> None:
        self.send([n for n in job.delivered if n != self.myid], M.WILLQUEUE, job.id)

    def broadcast_queued(self, job: Job, incr: int) -> None:
        self.send([n for n in job.delivered if n != self.myid], M.QUEUED, job.id, incr)

    def broadcast_working(self, job: Job) -> None:
        self.send([n for n in job.delivered if n != self.myid], M.WORKING, job.id)

    def _on_willqueue(self, p: Peer, fields, now) -> None:
        job = self.jobs.get(fields[0])
        if job is None:
            return
        if job.state == QUEUED:
            self.broadcast_queued(job, 0)
        elif job.state == ACKED:
            self.send([p.id], M.SETACK, job.id, len(job.delivered))

    def _on_queued(self, p: Peer, fields, now) -> None:
        job = self.jobs.get(fields[0])
        incr = fields[1]
        if job is None or job.state == ACKED:
            return
        if incr == M.QUEUED_INCR_NACKS:
            job.nacks += 1
        elif incr == M.QUEUED_INCR_DELIV:
            job.adeliv += 1
        if incr and self.aof_on and job.state != WAIT_REPL:
            self.aof_created(job)  # keep the counters across a reload
        if job.state == QUEUED and _xor_rank(p.id, job.id) > _xor_rank(self.myid, job.id):
            self.dequeue(job)
        if job.retry:
            job.qtime = now + job.retry * 1000 + self.jitter()
            job.flags |= F_BCAST_WILLQUEUE
        self.schedule(job)

    def _on_working(self, p: Peer, fields, now) -> None:
        job = self.jobs.get(fields[0])
        if job is None or job.state == ACKED:
            return
        if job.state == QUEUED:
            self.dequeue(job)
        if job.retry and job.qtime:
            job.qtime = now + job.retry * 1000 + self.jitter()
            job.flags |= F_BCAST_WILLQUEUE
        self.schedule(job)

    # ------------------------------------------------------------------ acks
    def cluster_ack(self, job: Job, now: int) -> None:
        """ACK-JOB with peers: mark acked; GC runs now and then with back-off."""
        if job.state == WAIT_REPL:
            # a copy was delivered and acked before all copies confirmed: the job
            # exists and is done, so the producer still waiting gets its ID
            waiting = self.repl_waiting.pop(job.id, None)
            if waiting is not None and not waiting[0].closed:
                waiting[0].blocked_add = None
                self.outbox.append((waiting[0], b"+" + job.id + b"\r\n"))
            job.state = ACTIVE
        if job.state == QUEUED:
            self.dequeue(job)
        if not job.delivered and not job.flags & F_DUMMY:
            job.delivered = (self.myid,)  # () means "only here" for single-copy jobs
        job.state = ACKED
        job.confirmed = (self.myid,)
        job.qtime = 0  # for acked jobs: the number of GC attempts so far
        if self.aof_on:  # an acked job must not come back after a restart
            self.aof_out.append(aof.encode_deljob(job.id))
        self.evictable[job.id] = job
        self._schedule_gc(job, now)

    def _peer_recovered(self, nid: str, now: int) -> None:
        """A node is reachable again: acked jobs it may hold get a GC attempt now,
        instead of after their back-off (which may have grown to minutes)."""
        for job in self.evictable.values():
            if job.state == ACKED and (nid in job.delivered or not job.delivered):
                job.qtime = 0
                self.awake.schedule(job, now + 10 + int(self._random() * 100))

    def _schedule_gc(self, job: Job, now: int) -> None:
        delay = min(GC_MAX_MS, GC_MIN_MS << min(job.qtime, 10))
        job.qtime += 1
        self.awake.schedule(job, now + delay + self.jitter())

    def cluster_start_gc(self, job: Job, now: int) -> None:
        """START-GC(job)."""
        delivered = job.delivered
        if delivered and all(n in job.confirmed for n in delivered):
            self._gc_done(job)
            return
        if not delivered:  # a dummy ack: ask everybody
            self.send(self.known_peers(), M.SETACK, job.id, 0)
        else:
            self.send([n for n in delivered if n not in job.confirmed and n != self.myid],
                      M.SETACK, job.id, len(delivered))

    def _gc_done(self, job: Job) -> None:
        self.send([n for n in job.delivered if n != self.myid], M.DELJOB, job.id)
        self.unregister(job)

    def _on_setack(self, p: Peer, fields, now) -> None:
        jid, may_have = fields[0], fields[1]
        job = self.jobs.get(jid)
        if job is not None and job.state != ACKED:
            self.stats.jobs_acked += 1
            self.cluster_ack(job, now)
        if job is None or len(job.delivered) <= may_have:
            self.send([p.id], M.GOTACK, jid, job is not None)
        if job is not None and may_have == 0:  # a dummy ack asked: we know the job
            self.send([p.id], M.GOTACK, jid, True)
        if job is not None and (len(job.delivered) > may_have or may_have == 0):
            self.cluster_start_gc(job, now)

    def _on_gotack(self, p: Peer, fields, now) -> None:
        job = self.jobs.get(fields[0])
        known = bool(fields[1])
        if job is None:
            return
        if job.state != ACKED:
            self.stats.jobs_acked += 1
            self.cluster_ack(job, now)
        if known and job.delivered and p.id not in job.delivered:
            job.delivered = (*job.delivered, p.id)
        # The README's rule would never confirm a node that does not know a dummy ack's
        # job, so "nobody knows it" could never be reached; as Disque's code does, every
        # answer confirms its sender (a node without the job has nothing to re-queue).
        if p.id not in job.confirmed:
            job.confirmed = (*job.confirmed, p.id)
        if job.delivered and all(n in job.confirmed for n in job.delivered):
            self._gc_done(job)
        elif not job.delivered and (known or len(job.confirmed) >= self.size):
            self.unregister(job)

    def _on_deljob(self, p: Peer, fields, now) -> None:
        job = self.jobs.get(fields[0])
        if job is None:
            return
        if job.state == WAIT_REPL and job.id in self.repl_waiting:
            return  # our own job being replicated: a stale DELJOB
        if len(fields) > 1:
            # a FASTACK's DELJOB lists the nodes it was sent to; copies the acking
            # node did not know of (federation moved them) are told by us
            covered = fields[1]
            rest = [n for n in job.delivered if n != self.myid and n not in covered]
            if rest:
                self.send(rest, M.DELJOB, job.id, [*covered, *rest])
        self.unregister(job)

    def fast_ack(self, job: Job) -> None:
        others = [n for n in job.delivered if n != self.myid]
        self.send(others, M.DELJOB, job.id, [self.myid, *others])
        self.unregister(job)

    def fast_ack_unknown(self, jid: bytes) -> None:
        self.send(self.known_peers(), M.DELJOB, jid)

    # ----------------------------------------------------------- federation
    def queues_drained(self, names, now: int, took: bool = False) -> None:
        """GETJOB found these queues empty (or, ``took``, emptied them): ask other
        nodes for jobs. After taking the last job we ask only recent sources, so a
        steady stream keeps flowing without waking the whole cluster."""
        if not self._peers or self.leaving:
            return
        for name in names:
            q = self.queues.get(name)
            if q is None or q.jobs:
                continue
            if took and not self._recent_sources(q, now):
                continue
            self.fed_watch[name] = None
            self._need_jobs(q, now, urgent=True)

    def _recent_sources(self, q, now: int) -> list:
        return [n for n, t in q.needjobs_responders.items()
                if now - t < SOURCE_MEMORY_MS and n in self.peers]

    def _need_jobs(self, q, now: int, urgent: bool = False) -> None:
        """NEEDJOBS: ad hoc to recent sources (fast back-off), broadcast for discovery.
        We ask for as many jobs as consumers wait here (one for a NOHANG probe)."""
        wanted = max(1, min(100, len(q.waiters)))
        sources = self._recent_sources(q, now)
        if sources and (urgent or now >= q.needjobs_adhoc_time):
            self.send(sources, M.NEEDJOBS, q.name, wanted)
            q.needjobs_adhoc_attempt += 1
            q.needjobs_adhoc_time = now + min(
                NEEDJOBS_ADHOC_MAX_MS, NEEDJOBS_ADHOC_MIN_MS << min(q.needjobs_adhoc_attempt, 10))
        if now >= q.needjobs_bcast_time:
            self.send(self.reachable_peers(), M.NEEDJOBS, q.name, wanted)
            q.needjobs_bcast_attempt += 1
            q.needjobs_bcast_time = now + min(
                NEEDJOBS_BCAST_MAX_MS, NEEDJOBS_BCAST_MIN_MS << min(q.needjobs_bcast_attempt, 4))

    def _federation_cron(self, now: int) -> None:
        """Only queues in ``fed_watch`` need attention: consumers blocked, requests in
        flight, or an import rate to measure. The rest cost nothing here."""
        if self.leaving:
            return
        for name in list(self.fed_watch):
            q = self.queues.get(name)
            if q is None:
                self.fed_watch.pop(name, None)
                continue
            if q.waiters and not q.jobs:
                self._need_jobs(q, now)
            elif not q.waiters and (q.needjobs_bcast_attempt or q.needjobs_adhoc_attempt):
                # our consumers are gone: nodes that remember our request must not push
                # jobs here any more (they would sit in a queue nobody reads)
                self.send(self.reachable_peers(), M.NEEDJOBS, q.name, 0)
                q.needjobs_bcast_attempt = q.needjobs_adhoc_attempt = 0
                q.needjobs_bcast_time = q.needjobs_adhoc_time = 0
            if q.import_window_start and now - q.import_window_start >= 1000:
                q.import_rate = q.import_window_count * 1000 // (now - q.import_window_start)
                q.import_window_start = now if q.import_window_count else 0
                q.import_window_count = 0
            if not q.waiters and not q.import_window_start and not q.needjobs_bcast_attempt:
                self.fed_watch.pop(name, None)
        for name, askers in list(self.askers.items()):
            for n, (until, _) in list(askers.items()):
                if until < now:
                    del askers[n]
            if not askers:
                del self.askers[name]

    def _on_needjobs(self, p: Peer, fields, now) -> None:
        qname, count = fields[0], fields[1]
        askers = self.askers.setdefault(qname, {})
        if count <= 0:
            askers.pop(p.id, None)
            return
        sent = self._send_jobs(p.id, qname, count, now)
        if sent < count:  # remembered: we push the rest as soon as jobs arrive
            askers[p.id] = [now + ASKER_MEMORY_MS, count - sent]
        else:
            askers.pop(p.id, None)

    def _send_jobs(self, nid: str, qname: bytes, count: int, now: int,
                   exact: bool = False) -> int:
        """YOURJOBS: hand up to ``count`` queued jobs to ``nid``. Answering a request we
        keep half when short (Disque's rule); ``exact`` pushes to a remembered asker."""
        q = self.queues.get(qname)
        if q is None or not q.jobs or q.flags & 2 or q.waiters:
            return 0  # nothing, paused in output, or our own consumers come first
        if self._recent_sources(q, now):
            return 0  # we import this queue ourselves: exporting would ping-pong jobs
        n = len(q.jobs)
        give = min(count, n) if exact else (count if n >= count * 2 else max(1, n // 2))
        out = []
        for _ in range(give):
            job = q.jobs.pop()
            q.jobs_out += 1
            job.state = ACTIVE
            delivered = job.delivered or (self.myid,)  # () means "only here"
            if nid not in delivered:
                delivered = (*delivered, nid)
            job.delivered = delivered
            out.append(M.job_to_wire(job, self.idem_of.get(job.id)))
            if job.retry == 0:
                self.unregister(job)  # at most once: the copy moves, none stays
            else:
                job.qtime = now + job.retry * 1000 + self.jitter()
                job.flags |= F_BCAST_WILLQUEUE
                self.schedule(job)
        if out:
            self.send([nid], M.YOURJOBS, out)
        return len(out)

    def pushed_to_askers(self, q, now: int) -> None:
        """Jobs arrived in a queue nobody here waits on: serve nodes that asked."""
        askers = self.askers.get(q.name)
        if not askers or q.waiters:
            return
        for nid, entry in list(askers.items()):
            if not q.jobs:
                break
            p = self.peers.get(nid)
            if p is None or not self._reachable(p):
                continue
            entry[1] -= self._send_jobs(nid, q.name, min(entry[1], len(q.jobs)), now,
                                        exact=True)
            if entry[1] <= 0:
                del askers[nid]

    def _on_yourjobs(self, p: Peer, fields, now) -> None:
        for (jid, queue, body, ctime, ttl, _delay, retry, repl, nacks, adeliv, delivered,
             idem) in fields[0]:  # decoded and checked by messages.parse
            q = self.queue_for(queue, now)
            q.needjobs_responders[p.id] = now
            if not q.import_window_start:
                q.import_window_start = now
                self.fed_watch[q.name] = None
            q.import_window_count += 1
            job = self.jobs.get(jid)
            if job is None:
                job = self._job_from_wire(jid, q.name, body, ctime, ttl, 0, retry, repl,
                                          nacks, adeliv, delivered, now, idem)
                if job is None:
                    continue
            elif job.state == ACKED or job.state == WAIT_REPL:
                continue  # done, or ours and still waiting for copies
            if job.state != QUEUED:
                if job.retry == 0 and job.flags & F_DELIVERED:
                    continue
                if job.qtime == 0:
                    job.qtime = now
                self.enqueue(job, now)

    def import_sources(self, q, now: int) -> list:
        return [n.encode() for n, t in q.needjobs_responders.items()
                if now - t < SOURCE_MEMORY_MS]

    # ----------------------------------------------------------------- pause
    def broadcast_pause(self, qname: bytes, flags: int) -> None:
        self.send(self.known_peers(), M.PAUSE, qname, flags)

    def _on_pause(self, p: Peer, fields, now) -> None:
        qname, flags = fields[0], fields[1]
        q = self.queues.get(qname)
        if q is None and not flags:
            return
        self.set_pause(q if q is not None else self.queue_for(qname, now), flags, now)

    # ----------------------------------------------------------- reporting
    def hello_nodes(self) -> list:
        me = (self.myid_b, self.ip.encode(), self.port,
              PRIORITY_BAD if self.leaving else PRIORITY_OK)
        out = [me]
        for p in self.peers.values():
            if p.flags & (P_FAIL | P_LEAVING):
                prio = PRIORITY_BAD
            elif p.flags & P_PFAIL:
                prio = PRIORITY_PFAIL
            elif not p.link:
                prio = PRIORITY_NOLINK
            else:
                prio = PRIORITY_OK
            out.append((p.id.encode(), p.ip.encode(), p.port, prio))
        return out

    def delivered_ids(self, job: Job) -> list:
        if job.flags & F_DUMMY:
            return []
        return [n.encode() for n in job.delivered] if job.delivered else [self.myid_b]

    def confirmed_ids(self, job: Job) -> list:
        return [n.encode() for n in job.confirmed]

    def nodes_text(self, now: int) -> str:
        """CLUSTER NODES, also the nodes.conf format."""
        lines = [f"{self.myid} {self.ip}:{self.port} myself{',leaving' if self.leaving else ''}"
                 f" 0 0 connected"]
        for p in self.peers.values():
            flags = [name for bit, name in ((P_HANDSHAKE, "handshake"), (P_PFAIL, "fail?"),
                                            (P_FAIL, "fail"), (P_LEAVING, "leaving"))
                     if p.flags & bit] or ["noflags"]
            lines.append(f"{p.id} {p.ip}:{p.port} {','.join(flags)} {p.ping_sent} "
                         f"{p.pong_received} {'connected' if p.link else 'disconnected'}")
        return "\n".join(lines) + "\n"

    def nodes_conf_text(self) -> str:
        return self.nodes_text(0)

    def load_nodes_conf(self, text: str, now: int) -> str | None:
        """Restore identity and peers from nodes.conf; returns our node ID or None."""
        myid = None
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 3 or len(parts[0]) != 40:
                continue
            nid, addr, flags = parts[0], parts[1], parts[2].split(",")
            ip, _, port = addr.rpartition(":")
            if not port.isdigit():
                continue
            if "myself" in flags:
                myid = nid
                self.ip = ip
                self.leaving = "leaving" in flags
            elif "handshake" not in flags:
                p = Peer(nid, ip, int(port), P_LEAVING if "leaving" in flags else 0, now)
                self.peers[nid] = p
        if myid is not None:
            self.peers.pop(myid, None)
        self._peers_changed()
        self.cluster_dirty = False
        return myid

    def cluster_info(self) -> str:
        state = "ok"
        return (f"cluster_state:{state}\r\ncluster_known_nodes:{self.size}\r\n"
                f"cluster_reachable_nodes:{self.reachable}\r\ncluster_size:{self.size}\r\n"
                f"cluster_stats_messages_sent:{self.msgs_sent}\r\n"
                f"cluster_stats_messages_received:{self.msgs_received}\r\n")


_HANDLERS = {
    M.PING: ClusterMixin._on_ping,
    M.PONG: ClusterMixin._on_pong,
    M.FAIL: ClusterMixin._on_fail,
    M.REPLJOB: ClusterMixin._on_repljob,
    M.GOTJOB: ClusterMixin._on_gotjob,
    M.ENQUEUE: ClusterMixin._on_enqueue,
    M.WILLQUEUE: ClusterMixin._on_willqueue,
    M.QUEUED: ClusterMixin._on_queued,
    M.SETACK: ClusterMixin._on_setack,
    M.GOTACK: ClusterMixin._on_gotack,
    M.DELJOB: ClusterMixin._on_deljob,
    M.WORKING: ClusterMixin._on_working,
    M.NEEDJOBS: ClusterMixin._on_needjobs,
    M.YOURJOBS: ClusterMixin._on_yourjobs,
    M.PAUSE: ClusterMixin._on_pause,
}
