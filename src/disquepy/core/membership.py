"""Membership and failure detection: who the other nodes are and whether they answer.

CLUSTER MEET starts a handshake; PING/PONG carry gossip about a few other nodes, so a
node met by one learns of all. A node we did not know, named by gossip or met us by
its own MEET, is a *handshake* entry until it answers us (a PONG on the link we open
to it), as in Redis Cluster: at most MAX_HANDSHAKES at once, started at most
HANDSHAKES_PER_SECOND on average, and forgotten when they never answer, so forged
MEETs from addresses nobody listens at cannot grow the cluster (4,000 made 4,004
members, and PINGs took 4.6 s). a peer that does not answer within
``cluster-node-timeout`` is PFAIL, and FAIL once a majority reports it (FAIL is
broadcast, and cleared when the node answers again). The node's view of the cluster
(``size``, ``reachable``, ``default_replicate``, ``clustered``) is refreshed here by
``changed()``; ``links_dirty`` asks the shell to re-read ``peer_links()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..codec.nodes import parse_address
from . import messages as M
from .ids import new_node_id

if TYPE_CHECKING:
    from .node import Node

# peer flags
P_HANDSHAKE: Final = 1
P_PFAIL: Final = 2
P_FAIL: Final = 4
P_LEAVING: Final = 8

GOSSIP_ENTRIES: Final = 3
# bounds on what gossip makes a node do (see process_gossip): a forged or corrupt
# message naming thousands of unknown nodes meets a few, not all of them at once
MEETS_PER_MESSAGE: Final = 8
MAX_HANDSHAKES: Final = 64
HANDSHAKES_PER_SECOND: Final = 16  # refill of a bucket of MAX_HANDSHAKES
MAX_PEERS: Final = 4096  # jobcodec.MAX_NODES: a job's copies are listed within it
# HELLO's priority of each node, as Disque's (lower: a client should rather connect to it)
PRIORITY_OK: Final = 1
PRIORITY_NOLINK: Final = 5
PRIORITY_PFAIL: Final = 10
PRIORITY_BAD: Final = 100


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


class Membership:
    def __init__(self, node: Node, now: int) -> None:
        self.node = node
        self.peers: dict[str, Peer] = {}
        self.links_dirty = False
        self._next_ping = now
        self.reach_ids: list[str] = []  # reachable_peers(), sorted; rebuilt, never mutated
        self._budget = float(MAX_HANDSHAKES)  # handshakes we may start unasked (a bucket)
        self._budget_at = now
        self._refused = 0  # unknown nodes not met for the limits, since the last log line
        self._refused_logged = now - 1000

    def changed(self) -> None:
        peers = self.peers.values()
        self.node.size = 1 + sum(1 for p in peers if not p.flags & P_HANDSHAKE)
        self.reach_ids = sorted(p.id for p in peers if self.is_reachable(p))
        self.node.reachable = len(self.reach_ids)
        self.node.default_replicate = min(3, self.node.size)
        self.node.clustered = self.node.size > 1

    @staticmethod
    def is_reachable(p: Peer) -> bool:
        return not p.flags & (P_HANDSHAKE | P_PFAIL | P_FAIL | P_LEAVING)

    def reachable_peers(self) -> list[str]:
        """IDs of the peers reachable now, sorted (a new list: the caller may keep it)."""
        return list(self.reach_ids)

    def known_peers(self) -> list[str]:
        return [p.id for p in self.peers.values() if not p.flags & P_HANDSHAKE]

    def peer_links(self) -> dict[str, tuple[str, int]]:
        """node id -> (ip, bus port) of every peer we keep a link to."""
        off = self.node.config.cluster_port_offset
        return {p.id: (p.ip, p.port + off) for p in self.peers.values() if p.ip}

    def expected_id(self, nid: str) -> str | None:
        """The node ID the peer at the end of our link to ``nid`` must prove it has
        (the bus's handshake checks it): ``nid`` itself, or None for a node still
        being met (its entry may hold a placeholder ID, as CLUSTER MEET by address)."""
        p = self.peers.get(nid)
        return None if p is None or p.flags & P_HANDSHAKE else nid

    def ping(self, p: Peer, mtype: int = M.PING) -> None:
        """PING or PONG to one peer: gossip, plus the address we reach it at (so a
        node that only ever MEETs others still learns its own address)."""
        self.node.send([p.id], mtype, self.gossip(), p.ip)

    def peers_changed(self) -> None:
        self.links_dirty = True
        self.node.cluster_dirty = True
        self.changed()

    def meet(self, ip: str, port: int, now: int) -> None:
        for p in self.peers.values():
            if p.ip == ip and p.port == port:
                if p.flags & P_HANDSHAKE:
                    self.node.send([p.id], M.MEET, self.gossip(), ip)
                return
        p = Peer(new_node_id(self.node.rng), ip, port, P_HANDSHAKE, now)
        self.peers[p.id] = p
        self.peers_changed()
        self.node.send([p.id], M.MEET, self.gossip(), ip)

    def forget(self, nid: str) -> None:
        self.peers.pop(nid, None)
        self.peers_changed()

    def forget_all(self) -> None:
        self.peers.clear()
        self.peers_changed()

    def announce(self) -> None:
        """PING every known peer now, not at its next ping: our flags changed."""
        for p in self.peers.values():
            if not p.flags & P_HANDSHAKE:
                self.ping(p)

    def handshakes(self) -> int:
        """Nodes being met (counted when gossip would add one: rare, and bounded)."""
        return sum(1 for p in self.peers.values() if p.flags & P_HANDSHAKE)

    def may_start_handshake(self, now: int) -> bool:
        """Whether to start a handshake with an unknown node that gossip names or that
        met us (not one an operator asked for): within MAX_PEERS, MAX_HANDSHAKES at
        once and the HANDSHAKES_PER_SECOND bucket. Refusals are counted and logged,
        at most one line a second."""
        budget = min(float(MAX_HANDSHAKES),
                     self._budget + (now - self._budget_at) * HANDSHAKES_PER_SECOND / 1000)
        self._budget_at = now
        if budget >= 1 and len(self.peers) < MAX_PEERS and self.handshakes() < MAX_HANDSHAKES:
            self._budget = budget - 1
            return True
        self._budget = budget
        self._refused += 1
        if now - self._refused_logged >= 1000:
            self._refused_logged = now
            self.node.logs_out.append((
                "warning", f"Not meeting {self._refused} unknown node(s) in the last second: "
                f"{self.handshakes()} handshakes in progress (at most {MAX_HANDSHAKES}, "
                f"{HANDSHAKES_PER_SECOND} new a second), {len(self.peers)} nodes known"))
            self._refused = 0
        return False

    def gossip(self) -> list[list[str | int]]:
        cand = [p for p in self.peers.values() if not p.flags & P_HANDSHAKE]
        chosen = cand if len(cand) <= GOSSIP_ENTRIES else self.node.rng.sample(cand, GOSSIP_ENTRIES)
        if len(chosen) < len(cand):
            seen = {p.id for p in chosen}
            for p in cand:  # failing nodes always travel, so reports reach a majority
                if p.flags & (P_PFAIL | P_FAIL) and p.id not in seen:
                    chosen.append(p)
            chosen = chosen[:M.MAX_GOSSIP]  # what a peer accepts in one message
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

    def process_gossip(self, sender: Peer, gossip: M.Fields, now: int) -> None:
        """What a peer says of other nodes. Bounded work per message: at most
        MEETS_PER_MESSAGE unknown nodes are met from one message (the rest are met
        when gossip names them again) and none past MAX_PEERS known nodes or
        MAX_HANDSHAKES nodes being met; our gossip for those MEETs is built once."""
        timeout = self.node.config.cluster_node_timeout
        meets = 0
        mine = None
        for nid, ip, port, flags in gossip:  # checked by messages.parse
            if nid == self.node.myid:
                continue
            p = self.peers.get(nid)
            if p is None:
                if ip and not flags & M.NF_FAIL and meets < MEETS_PER_MESSAGE \
                        and self.may_start_handshake(now):
                    # a node we did not know: meet it (it will learn of us too)
                    meets += 1
                    p = Peer(nid, ip, port, P_HANDSHAKE, now)
                    self.peers[nid] = p
                    self.peers_changed()
                    if mine is None:
                        mine = self.gossip()
                    self.node.send([nid], M.MEET, mine, ip)
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
                self.changed()

    def _maybe_fail(self, p: Peer, now: int) -> None:
        if not p.flags & P_PFAIL or p.flags & P_FAIL:
            return
        window = self.node.config.cluster_node_timeout * 2
        for rid, t in list(p.fail_reports.items()):
            if now - t > window or rid not in self.peers:
                del p.fail_reports[rid]
        if len(p.fail_reports) + 1 >= self.node.size // 2 + 1:
            p.flags = (p.flags & ~P_PFAIL) | P_FAIL
            self.changed()
            self.node.cluster_dirty = True
            self.node.send(self.known_peers(), M.FAIL, p.id)

    def cron(self, now: int) -> None:
        if not self.peers:
            return
        timeout = self.node.config.cluster_node_timeout
        changed = False
        for p in list(self.peers.values()):
            if p.flags & P_HANDSHAKE:
                if now - p.ctime > max(timeout, 1000) * 2:
                    del self.peers[p.id]  # nobody answered the MEET
                    changed = True
                elif now >= self._next_ping:
                    self.node.send([p.id], M.MEET, self.gossip(), p.ip)
                continue
            if p.link and not p.ping_sent and now - p.pong_received > timeout // 2:
                p.ping_sent = now
                self.ping(p)
            elif p.link and p.ping_sent and now >= self._next_ping:
                # unanswered: ask again each second (ping_sent keeps the first try,
                # which is what failure detection measures)
                self.ping(p)
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
                p = self.node.rng.choice(live)
                if not p.ping_sent:
                    p.ping_sent = now
                self.ping(p)
        if changed:
            self.peers_changed()

    def link_state(self, nid: str, up: bool, now: int) -> None:
        """The shell's outbound link to ``nid`` connected or broke."""
        p = self.peers.get(nid)
        if p is None:
            return
        p.link = up
        if up:
            if p.flags & P_HANDSHAKE:
                self.node.send([nid], M.MEET, self.gossip(), p.ip)
            else:
                if not p.ping_sent:
                    p.ping_sent = now
                self.ping(p)
                self.node.groups.sync.link_up(nid, now)  # events' holders catch up
        else:
            p.link_down_since = now
        self.node.groups.link_changed(up, now)

    def heard_from(self, p: Peer, sflags: int, now: int) -> None:
        leaving = bool(sflags & M.SF_LEAVING)
        if leaving != bool(p.flags & P_LEAVING):
            p.flags ^= P_LEAVING
            self.changed()
            self.node.cluster_dirty = True

    def on_meet(self, sid: str, peer_ip: str, sport: int, sflags: int, fields: M.Fields,
                now: int) -> None:
        if sid == self.node.myid:
            return
        gossip, your_ip = fields[0], fields[1]
        if not self.node.ip and your_ip:
            self.node.ip = your_ip  # we learn our own address from whoever reached us
            self.node.cluster_dirty = True
        p = self.peers.get(sid)
        if p is None:
            # a node that met us by address: a handshake entry until it answers our
            # MEET (on_pong), replacing any we had for its address
            if not self.may_start_handshake(now):
                return
            for hp in list(self.peers.values()):
                if hp.flags & P_HANDSHAKE and hp.ip == peer_ip and hp.port == sport:
                    del self.peers[hp.id]
            p = Peer(sid, peer_ip, sport, P_HANDSHAKE, now)
            self.peers[sid] = p
            self.peers_changed()
        self.heard_from(p, sflags, now)
        self.process_gossip(p, gossip, now)
        self.ping(p, M.PONG)

    def on_handshake_pong(self, sid: str, peer_ip: str, sport: int, sflags: int,
                          fields: M.Fields, now: int) -> None:
        for hp in list(self.peers.values()):
            if hp.flags & P_HANDSHAKE and hp.port == sport and hp.ip in (peer_ip, "localhost"):
                del self.peers[hp.id]
                p = Peer(sid, hp.ip, sport, 0, now)
                p.pong_received = now
                self.peers[sid] = p
                self.peers_changed()
                self._learn_my_ip(fields)
                self.process_gossip(p, fields[0], now)
                return

    def _learn_my_ip(self, fields: M.Fields) -> None:
        if not self.node.ip and fields[1]:
            self.node.ip = fields[1]
            self.node.cluster_dirty = True

    def on_ping(self, p: Peer, fields: M.Fields, now: int) -> None:
        self._learn_my_ip(fields)
        self.process_gossip(p, fields[0], now)
        self.ping(p, M.PONG)

    def on_pong(self, p: Peer, fields: M.Fields, now: int) -> None:
        self._learn_my_ip(fields)
        p.ping_sent = 0
        p.pong_received = now
        if p.flags & (P_HANDSHAKE | P_PFAIL | P_FAIL):
            p.flags &= ~(P_HANDSHAKE | P_PFAIL | P_FAIL)
            p.fail_reports.clear()
            self.peers_changed()
            self.node.acks.peer_recovered(p.id, now)
        self.process_gossip(p, fields[0], now)

    def on_fail(self, p: Peer, fields: M.Fields, now: int) -> None:
        f = self.peers.get(fields[0])
        if f is not None and not f.flags & P_FAIL:
            f.flags = (f.flags & ~P_PFAIL) | P_FAIL
            self.changed()
            self.node.cluster_dirty = True

    def hello_nodes(self) -> list[tuple[bytes, bytes, int, int]]:
        me = (self.node.myid_b, self.node.ip.encode(), self.node.port,
              PRIORITY_BAD if self.node.leaving else PRIORITY_OK)
        out = [me]
        for p in self.peers.values():
            if p.flags & P_HANDSHAKE:
                continue  # its ID is a placeholder until the handshake ends (as C Disque)
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

    def nodes_text(self, now: int) -> str:
        """CLUSTER NODES, also the nodes.conf format."""
        lines = [f"{self.node.myid} {self.node.ip}:{self.node.port} myself{',leaving' if self.node.leaving else ''}"
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
            nid, flags = parts[0], parts[2].split(",")
            try:  # (no port: a damaged line, skipped)
                ip, port = parse_address(parts[1], default_host="", default_port=0)
            except ValueError:
                continue
            if "myself" in flags:
                myid = nid
                self.node.ip = ip
                self.node.leaving = "leaving" in flags
            elif "handshake" not in flags:
                p = Peer(nid, ip, port, P_LEAVING if "leaving" in flags else 0, now)
                self.peers[nid] = p
        if myid is not None:
            self.peers.pop(myid, None)
        self.peers_changed()
        self.node.cluster_dirty = False
        return myid

    def info(self) -> str:
        state = "ok"
        return (f"cluster_state:{state}\r\ncluster_known_nodes:{self.node.size}\r\n"
                f"cluster_reachable_nodes:{self.node.reachable}\r\ncluster_size:{self.node.size}\r\n"
                f"cluster_stats_messages_sent:{self.node.msgs_sent}\r\n"
                f"cluster_stats_messages_received:{self.node.msgs_received}\r\n")
