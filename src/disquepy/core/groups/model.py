"""Consumer groups' data (as job.py is the jobs'): an event, the claim each group holds
on it, the queues of events and what waits on them.

A *claim* is one packed int: (state, deliveries, lease deadline). No claim at all:
never delivered to the group. Copies of an event merge claims by a join (:func:`merge`),
so copies that saw the same changes in any order agree.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

from librt.vecs import vec
from mypy_extensions import i64, u8

from ..awake import Timer
from ..record import Record

if TYPE_CHECKING:
    from ..client import Client

# claim states (the low 2 bits of a claim); no claim at all: never delivered
DEAD: Final = 0  # delivered the group's MAXDELIVERIES times without an ack: its dead letters
LEASED: Final = 1
REDO: Final = 2
DONE: Final = 3
AVAILABLE: Final = 4  # (effective() of no claim)
_RANK: Final = (3, 0, 1, 2)  # merge order at equal deadlines: LEASED < REDO < DEAD
_STATE_BITS: Final = 2
_DELIV_BITS: Final = 16
_DELIV_MAX: Final = (1 << _DELIV_BITS) - 1
STATE_MASK: Final = (1 << _STATE_BITS) - 1  # a claim's state: DEAD, LEASED, REDO or DONE
DEADLINE_SHIFT: Final = _STATE_BITS + _DELIV_BITS

# memory accounting (store.py), measured (bench/events_memory.py: RSS and tracemalloc
# per event, compiled core, 16-byte bodies): a held event packed in its queue's columns
# costs PACKED_OVERHEAD + its body + CLAIM_PACKED per group claim (a byte per group and
# position), CLAIM_SIDE more for a claim in the side table (leased, redone, dead); one
# kept as an Event object (an IDEMPOTENT key...) costs THAWED_OVERHEAD + its body (a
# second copy) + its key + (CLAIM_OVERHEAD - CLAIM_PACKED) per claim more
PACKED_OVERHEAD: Final = 64
CLAIM_PACKED: Final = 1
CLAIM_SIDE: Final = 270  # more for a claim a byte cannot say (LEASED: its lease timer too)
THAWED_OVERHEAD: Final = 480
CLAIM_OVERHEAD: Final = 200  # a group's claim on a thawed event in all (its lease timer too)
DEFAULT_LEASE_MS: Final = 30_000
MAX_EXPIRE_MS: Final = 10 * 365 * 86_400_000  # ten years
MAX_DELIVERIES: Final = _DELIV_MAX

# an event's stage on this node
ADDING: Final = 0  # created here, waiting for its copies (replication.py): not leased yet
HELD: Final = 1  # held (its expiry timer runs)
GONE: Final = 2  # expired, flushed, or dropped


def pack(state: int, deliveries: int, deadline: int) -> int:
    if deliveries > _DELIV_MAX:
        deliveries = _DELIV_MAX
    return state | (deliveries << _STATE_BITS) | (deadline << DEADLINE_SHIFT)


def claim_state(c: int) -> int:
    return c & STATE_MASK


def claim_deliveries(c: int) -> int:
    return (c >> _STATE_BITS) & _DELIV_MAX


def claim_deadline(c: int) -> int:
    return c >> DEADLINE_SHIFT


def effective(c: int | None, now: int) -> int:
    """What a claim means now: a lease whose deadline passed is a redo."""
    if c is None:
        return AVAILABLE
    s = c & STATE_MASK
    if s == LEASED and c >> DEADLINE_SHIFT <= now:
        return REDO
    return s


def merge(old: int | None, new: int) -> int:
    """The join of two claims on one event for one group: copies that saw the same
    changes in any order agree. DONE is final; otherwise the later deadline wins (a
    lease is granted only once the previous one ended, an extension moves it on, a
    dead-lettering or a requeue is stamped with its time), then the state that ends
    the other (REDO over the LEASED it ends, DEAD over the REDO it ends)."""
    if old is None:
        return new
    if old & STATE_MASK == DONE:
        return old
    if new & STATE_MASK == DONE:
        return new
    ko = (old >> DEADLINE_SHIFT, _RANK[old & STATE_MASK])
    kn = (new >> DEADLINE_SHIFT, _RANK[new & STATE_MASK])
    return new if kn > ko else old


class Event(Record):
    """One event on this node. Its Record fields: ``delivered``, the nodes holding a
    copy (its *holders*, the creator first: the order decides who leases it, see
    store.authority), and while it is ADDING the replication's ``repl`` and
    ``confirmed``. Its timer (``awake``): the replication's retry while ADDING, then
    its expiry (by its queue once held: store.py).

    Once held, an event lives *packed* in its queue's columns (store.py); an Event
    object exists only while it is ADDING, or for good for the few events a column
    cannot say (``pos``: its position in its queue), see store.py."""

    __slots__ = ("queue", "body", "etime", "claims", "stage", "key", "pos")

    def __init__(self, eid: bytes, queue: bytes, body: bytes, ctime: int, etime: int,
                 holders: tuple[str, ...]) -> None:
        self.id = eid
        self.ctime = ctime  # ns, the creating node's clock
        self.awake = 0
        self.repl = 1
        self.delivered = holders
        self.confirmed = holders[:1]
        self.queue = queue
        self.body = body
        self.etime = etime  # ms: discarded then
        self.claims: dict[bytes, int] = {}  # group -> packed claim
        self.stage = ADDING
        self.key: bytes | None = None  # its QADD's IDEMPOTENT key
        self.pos = -1  # held: its position in its queue (store.py)

    def expiry(self) -> int:
        return self.etime

    def __repr__(self) -> str:
        return f"<Event {self.id.decode()} q={self.queue!r}>"


class Lease(Timer):
    """The timer of a group's leases that end at one time (``deadline``, ms): the
    events of one QGET COUNT, or of one EVCLAIMS heard, share it (Leases.timer). When
    it fires each lease may have ended (acked, extended or redone since: then the
    claim's deadline no longer matches and nothing happens for that event)."""

    __slots__ = ("eids", "group", "deadline")

    def __init__(self, seq: int, eid: bytes, group: bytes, deadline: int) -> None:
        super().__init__(b"", seq)
        self.eids: list[bytes] = [eid]
        self.group = group
        self.deadline = deadline


class Rescan(Timer):
    """A time when what this node decides for may change without the set of
    reachable nodes changing (a link down for long enough: store.authority)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(b"", 0)


class Cursor:
    """Where a group's scan of a queue stands on this node: every event before
    ``pos`` is done, leased, gone, or listed in ``redo`` once its lease ran out; every
    event before ``mine_pos`` (>= pos) is that or decided by another node, so a node that
    creates none of a long queue's events does not rescan them on every QGET. Which
    node decides changes only with who is reachable (an event's holders grow at the
    end, after this node), and then both go back to the start (``reach``)."""

    __slots__ = ("pos", "mine_pos", "redo", "reach")

    def __init__(self, pos: int) -> None:
        self.pos = pos
        self.mine_pos = pos
        self.redo: deque[bytes] = deque()
        self.reach: object = None  # membership.reach_ids when the scan was last valid


class Waiter(Timer):
    """A client blocked in QNOTIFY; its timer: the timeout (none for 0, forever)."""

    __slots__ = ("client", "group", "queues", "deadline")

    def __init__(self, seq: int, client: Client, group: bytes, queues: list[bytes],
                 deadline: int) -> None:
        super().__init__(b"", seq)
        self.client = client
        self.group = group
        self.queues = queues
        self.deadline = deadline  # 0: forever


class Expiry(Timer):
    """A queue's one expiry timer: due at the earliest expiry of its events."""

    __slots__ = ("queue",)

    def __init__(self, queue: bytes) -> None:
        super().__init__(queue, 0)
        self.queue = queue


class EQueue:
    """A queue's events on this node, in arrival order, packed in columns (one entry per
    *position*; positions only grow, but for a compaction: store.py). Column index k is
    position ``cbase + k``; ``base`` is the first position that may be live."""

    __slots__ = ("name", "qid", "base", "cbase", "live", "ctimes", "etimes", "meta",
                 "bodies", "arena", "abase", "claims", "side", "thawed", "expmin", "expiry",
                 "cursors", "waiters", "watchers", "atime", "ack_hint")

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.qid = -1  # its number in the store's ID index (-1: not registered)
        self.base: i64 = 0
        self.cbase: i64 = 0  # a multiple of store.CHUNK
        self.live = 0
        self.ctimes: vec[i64] = vec[i64]()  # the ID's time part (ns)
        self.etimes: vec[i64] = vec[i64]()  # expiry (ms)
        self.meta: vec[i64] = vec[i64]()  # creator << 26 | holders' index << 2 | flags
        self.bodies: vec[i64] = vec[i64]()  # arena offset << 24 | length
        self.arena = bytearray()  # the bodies, in arrival order
        self.abase = 0  # arena offset of arena[0]
        self.claims: dict[bytes, vec[u8]] = {}  # group -> claim byte per position
        self.side: dict[bytes, dict[int, int]] = {}  # group -> position -> claim (byte SIDE)
        self.thawed: dict[int, Event] = {}  # position -> the Event kept as an object
        self.expmin: vec[i64] = vec[i64]()  # per chunk of positions: <= its live expiries
        self.expiry = Expiry(name)
        self.cursors: dict[bytes, Cursor] = {}
        self.waiters: list[Waiter] = []
        self.watchers: dict[str, tuple[bytes, int]] = {}  # peer -> (group, until ms)
        self.atime = now
        self.ack_hint: i64 = 0  # the position after the last one an ack found (locate_near)

    def end(self) -> int:
        return self.cbase + len(self.meta)


class Request(Timer):
    """A request to peers (a lease asked for, an ack to decide) waiting for answers,
    by number (``req``); its timer: when it gives up (on that peer)."""

    __slots__ = ("req", "client", "deadline")

    def __init__(self, client: Client) -> None:
        super().__init__(b"", 0)
        self.req = 0
        self.client = client
        self.deadline = 0


class PullWait(Request):
    """A QGET asking peers, one at a time, to lease one of their events."""

    __slots__ = ("queue", "group", "lease", "maxdeliv", "targets", "counters", "hint",
                 "autoack", "batch")

    def __init__(self, client: Client, queue: bytes, group: bytes, lease: int, maxdeliv: int,
                 targets: list[str], counters: bool) -> None:
        super().__init__(client)
        self.queue = queue
        self.group = group
        self.lease = lease
        self.maxdeliv = maxdeliv
        self.targets = targets  # still to ask, the one asked now first
        self.counters = counters
        self.hint: bytes | None = None  # an event we hold that targets[0] decides for
        self.autoack = False  # QGET EX 0: ack what the grant brings
        self.batch = False  # QGET ... COUNT n: the reply is an array of entries


class AckWait(Request):
    """A QACK or QWORKING waiting for the authorities of some of its events to decide:
    ``asked`` the IDs asked of each peer (in the order sent), ``parts`` the (peer,
    first index) of the messages not answered yet, ``open`` per ID still undecided the
    peers yet to answer, ``count`` the leases ended (or extended) so far."""

    __slots__ = ("asked", "parts", "open", "count", "extend")

    def __init__(self, client: Client, asked: dict[str, list[bytes]], count: int,
                 extend: int) -> None:
        super().__init__(client)
        self.asked = asked
        self.parts: set[tuple[str, int]] = set()
        self.open: dict[bytes, int] = {}
        self.count = count
        self.extend = extend


class GroupStats:
    """QSTATUS for one queue and group: bananaq's fields, then ours (dead letters and
    ``oldest``, the creation time in ms of the oldest event the group has not done)."""

    __slots__ = ("total", "inprogress", "redo", "done", "available", "consumers", "dead",
                 "oldest")

    def __init__(self) -> None:
        self.total = 0
        self.inprogress = 0
        self.redo = 0
        self.done = 0
        self.available = 0
        self.consumers = 0
        self.dead = 0
        self.oldest = 0

    def fields(self, now: int) -> list[tuple[bytes, int]]:
        """Every field in QSTATUS order: bananaq's, then dead, lag (events waiting to
        be delivered: available + redo), pending (delivered, not acknowledged yet) and
        oldest-pending-ms (the age of the oldest event not done, 0 if none)."""
        return [(b"total", self.total), (b"inprogress", self.inprogress),
                (b"redo", self.redo), (b"done", self.done), (b"available", self.available),
                (b"consumers", self.consumers), (b"dead", self.dead),
                (b"lag", self.available + self.redo), (b"pending", self.inprogress),
                (b"oldest-pending-ms", max(0, now - self.oldest) if self.oldest else 0)]


def event_reply(eid: bytes, body: bytes, deliveries: int, counters: bool) -> bytes:
    """QGET's reply: [id, contents], and the delivery count WITHCOUNTERS."""
    if counters:
        return b"*3\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n:%d\r\n" % (
            len(eid), eid, len(body), body, deliveries)
    return b"*2\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(eid), eid, len(body), body)
