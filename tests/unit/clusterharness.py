"""Several pure Nodes in one process: a virtual clock and a message router.

Messages go through the real bus codec (encode then decode), are delivered in
order after ``latency`` ms, and are dropped between partitioned nodes.
"""

from __future__ import annotations

import random

from nodeharness import HarnessShell, decode

from disquepy.codec.bus import FrameReader, encode_frame
from disquepy.core import messages as M
from disquepy.core.config import Config
from disquepy.core.node import Node

IP = "127.0.0.1"


class Cluster:
    def __init__(self, n: int, seed: int = 1, node_timeout: int = 2000, latency: int = 1,
                 now: int = 1_700_000_000_000, **config) -> None:
        self.now = now
        self.latency = latency
        self.rng = random.Random(seed)
        self.nodes: list[Node] = []
        self.clients = []
        self.down: set[int] = set()
        self.cut: set[frozenset] = set()
        self.wire: list = []  # (deliver_at, seq, src index, dst index, frame)
        self.seq = 0
        self.links: list[dict] = []
        # node index -> message types it refuses as unknown (messages.parse), as a node
        # from before they existed does: a cluster in the middle of a rolling upgrade
        self.unknown: dict[int, frozenset[int]] = {}
        for i in range(n):
            cfg = Config()
            cfg.cluster_node_timeout = node_timeout
            for k, v in config.items():
                setattr(cfg, k, v)
            node = Node(cfg, f"{self.rng.getrandbits(160):040x}", random.Random(seed * 100 + i),
                        now, port=7711 + i)
            self.nodes.append(node)
            self.clients.append(node.new_client(now=now))
            self.links.append({})
        self.shells = [_ClusterShell(self, i) for i in range(n)]

    # ------------------------------------------------------------ topology
    def index_of_addr(self, ip: str, bus_port: int) -> int | None:
        for i, n in enumerate(self.nodes):
            if n.port + n.config.cluster_port_offset == bus_port:
                return i
        return None

    def connected(self, a: int, b: int) -> bool:
        return a not in self.down and b not in self.down and frozenset((a, b)) not in self.cut

    def partition(self, *groups) -> None:
        """Cut every pair of nodes in different groups."""
        self.cut = set()
        for gi, g in enumerate(groups):
            for h in groups[gi + 1:]:
                for a in g:
                    for b in h:
                        self.cut.add(frozenset((a, b)))

    def heal(self) -> None:
        self.cut = set()

    def meet_all(self) -> None:
        for i in range(1, len(self.nodes)):
            assert self.cmd(0, "CLUSTER", "MEET", IP, 7711 + i) == b"OK"
        self.run(3000)

    # ------------------------------------------------------------ commands
    def cmd(self, i: int, *args, client=None):
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        client = client or self.clients[i]
        r = self.nodes[i].execute(client, argv, self.now)
        self.pump()
        finished = self.shells[i].finished.pop(client.id, None)
        return decode(r if r is not None or finished is None else finished)

    def new_client(self, i: int):
        return self.nodes[i].new_client(now=self.now)

    def outbox(self, i: int) -> list:
        """Replies node i sent to clients other than the caller, since the last call."""
        self.pump()
        sh = self.shells[i]
        out = [(c, decode(d)) for c, d in sh.replies]
        sh.replies.clear()
        return out

    # ---------------------------------------------------------------- time
    def _sync_links(self, i: int, wanted: dict | None = None) -> None:
        node = self.nodes[i]
        if i in self.down:
            return
        if wanted is None:
            wanted = node.members.peer_links()
        links = self.links[i]
        for nid in list(links):
            if nid not in wanted:
                del links[nid]
        for nid, (ip, port) in wanted.items():
            j = self.index_of_addr(ip, port)
            up = j is not None and self.connected(i, j)
            if links.get(nid) != up:
                links[nid] = up
                node.members.link_state(nid, up, self.now)

    def pump(self) -> None:
        """Carry out every node's outputs: messages onto the wire (link-level routing)."""
        for i, node in enumerate(self.nodes):
            for _ in range(100):
                if not node.has_outputs():
                    break
                self.shells[i].deliver(node.take_outputs())

    def route(self, i: int, per: dict) -> None:
        if i in self.down:
            return
        links = self.nodes[i].members.peer_links()
        for nid, msg in per.items():
            addr = links.get(nid)
            j = self.index_of_addr(*addr) if addr else None
            if j is None or not self.connected(i, j):
                continue
            self.seq += 1
            self.wire.append((self.now + self.latency, self.seq, i, j, encode_frame(msg)))

    def deliver_due(self) -> bool:
        self.wire.sort()
        due = [w for w in self.wire if w[0] <= self.now]
        self.wire = [w for w in self.wire if w[0] > self.now]
        for _, _, i, j, frame in due:
            if not self.connected(i, j):
                continue
            r = FrameReader()
            r.feed(frame)
            hidden = {t: M._FIELDS.pop(t) for t in self.unknown.get(j, ())}
            try:
                while (msg := r.gets()) is not False:  # one, or a few BATCHes
                    self.nodes[j].handle_message(msg, IP, self.now)
            finally:
                M._FIELDS.update(hidden)
        self.pump()
        return bool(due)

    def run(self, ms: int, step: int = 5) -> None:
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + step)
            for i, node in enumerate(self.nodes):
                if i not in self.down:
                    node.tick(self.now)
            self.pump()
            for _ in range(100):
                if not self.deliver_due():
                    break
            for i in range(len(self.nodes)):  # partitions may have changed: links follow
                self._sync_links(i)

    def jobs_everywhere(self, jid: bytes) -> list:
        return [n.jobs.get(jid) for n in self.nodes]


class _ClusterShell(HarnessShell):
    def __init__(self, cluster: Cluster, i: int) -> None:
        super().__init__(cluster.nodes[i])
        self.cluster = cluster
        self.i = i

    def sync_links(self, links: dict) -> None:
        self.cluster._sync_links(self.i, links)

    def send_messages(self, messages: dict) -> None:
        self.cluster.route(self.i, messages)
