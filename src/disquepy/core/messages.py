"""Cluster bus messages: type codes and the job wire form.

Every message is a list ``[type, sender_id, sender_port, sender_flags, *fields]``
(encoded by ``codec.bus``). Node IDs are 40-hex strings, job IDs bytes. The same
lists travel through the real bus and the simulator.

Fields after the header, by type:

    BATCH         [[message, ...]]  messages for one peer sent in one frame

    PING / PONG   [gossip, your_ip] gossip: [[id, ip, port, flags], ...]
    MEET          [gossip, your_ip] the address the sender used to reach us
    FAIL          [node_id]
    REPLJOB       [job, ...]        job: jobcodec's BUS fields; one or more
    GOTJOB        [id, ...]         one or more: job IDs, or event IDs (EVADD's copies)
    ENQUEUE       [job_id]
    WILLQUEUE     [job_id]
    QUEUED        [job_id, incr]    incr: QUEUED_INCR_* for the counters
    SETACK        [job_id, may_have]
    GOTACK        [job_id, known]
    DELJOB        [job_id, (covered)]  covered: FASTACK, nodes already told (forwarded)
    WORKING       [job_id]
    NEEDJOBS      [queue, count]    count 0: "no longer needed"
    YOURJOBS      [[job, ...]]
    PAUSE         [queue, flags]
    OUTCOME       [job_id, state, detail]  a job completed with a result (ACKJOB RESULT),
                                           failed (FAILJOB) or was cancelled

  consumer groups (core/groups/, docs/GROUPS.md):
    EVADD         [event, ...]      event: eventcodec's fields, [id, queue, body,
                                    ctime ns, etime ms, [holder, ...], [[group, claim],
                                    ...]]; answered by GOTJOB with the IDs held
    EVSTATE       [[event_id, group, claim], ...]  a group's claim on events changed
    EVPULL        [req, queue, group, lease ms, max deliveries]  lease me an event of yours
    EVGRANT       [req, [event_id, body, deliveries] | nil]
    EVACK         [req, queue, group, event_id, ms]  acknowledge (ms 0) or extend the
                                    lease by ms, if you decide for it
    EVACKED       [req, verdict]    1 acked, 0 refused, 2 not mine to decide
    EVACKS        [req, queue, group, ms, first, [event_id, ...]]  EVACK of several
                                    events (a QACK of several IDs: one per peer, the
                                    IDs from index ``first`` of those asked of it)
    EVACKEDS      [req, first, [verdict, ...]]  EVACKS's answer, a verdict per ID
    EVFLUSH       [queue, ctime ns] QFLUSH: drop the queue's events (and later
                                    arrivals created before ctime)
    EVWATCH       [queue, group, ms] tell me when events are available (0: stop)
    EVAVAIL       [queue, group]    events are available here for the group
    EVDEL         [event_id]        a QADD gave up: drop the copy
    EVSYNC        [[event_id, [[group, claim], ...]], ...]  after a link came up: the
                                    claims the sender knows of events both hold
    EVSYNCED      [reply]           the EVSYNC items are all sent; reply 1: send yours
    EVNEED        [event_id, ...]   copies the sender lacks (answered by EVADD)

Everything a peer sends is checked here, before any handler runs: ``parse`` returns
the message's header and its fields (jobs and events decoded to tuples, every
integer in range) or raises :class:`Malformed`, which the node counts and logs. Handlers trust
what they get; an exception inside one is a bug, never swallowed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .eventcodec import (
    MAX_TIME,
    BadEvent,
    EventFields,
    parse_claim_changes,
    parse_claims,
    parse_event,
)
from .ids import is_valid_event_id, is_valid_job_id, valid_node_id
from .jobcodec import BUS, MAX_NODES, BadJob, JobFields, job_fields, parse_job
from .outcomes import CANCELLED, COMPLETED, MAX_DETAIL_LIMIT

if TYPE_CHECKING:
    from .job import Job

# A message and its fields are lists of msgpack values whose layout depends on the
# message type (the table above): no one static type describes them all, hence Any.
# What a peer sent is checked by ``parse`` before a handler reads it.
Message = list[Any]
Fields = list[Any]
# what goes to one peer at once: a message, or BATCHes to send in order (Node._batches)
Outgoing = Message | tuple[Message, ...]

BATCH: Final = 0  # [BATCH, sender, port, flags, [message, ...]]: several messages, one frame
PING: Final = 1
PONG: Final = 2
MEET: Final = 3
FAIL: Final = 4
REPLJOB: Final = 10
GOTJOB: Final = 11
ENQUEUE: Final = 12
WILLQUEUE: Final = 13
QUEUED: Final = 14
SETACK: Final = 15
GOTACK: Final = 16
DELJOB: Final = 17
WORKING: Final = 18
NEEDJOBS: Final = 19
YOURJOBS: Final = 20
PAUSE: Final = 21
OUTCOME: Final = 22
EVADD: Final = 30
# 31: EVGOT, retired (GOTJOB confirms events' copies too)
EVSTATE: Final = 32
EVPULL: Final = 33
EVGRANT: Final = 34
EVACK: Final = 35
EVACKED: Final = 36
EVFLUSH: Final = 37
EVWATCH: Final = 38
EVAVAIL: Final = 39
EVDEL: Final = 40
EVSYNC: Final = 41
EVSYNCED: Final = 42
EVNEED: Final = 43
EVACKS: Final = 44  # (a node from before it refuses it as unknown: counted, logged, dropped)
EVACKEDS: Final = 45

NAMES: Final = {v: k for k, v in dict(globals()).items() if isinstance(v, int) and k.isupper()}

# most items (REPLJOB jobs, GOTJOB IDs) one message carries (see Node.send_item)
MAX_ITEMS: Final = 1000
# job body bytes past which a REPLJOB / YOURJOBS message takes no more jobs (one job
# alone may be bigger): frames stay far below cluster-bus-max-frame
SOFT_BYTES: Final = 4 << 20

# sender flags
SF_LEAVING: Final = 1

# node flags in gossip
NF_PFAIL: Final = 1
NF_FAIL: Final = 2
NF_LEAVING: Final = 4

QUEUED_INCR_DELIV: Final = 1
QUEUED_INCR_NACKS: Final = 2


# ranges of what a peer may send: past these a value is a forgery or corruption
MAX_GOSSIP: Final = 512  # gossip entries in one PING/PONG/MEET
MAX_NAME: Final = 1 << 16  # queue name bytes; an IP address string


class Malformed(ValueError):
    """A message from a peer that breaks the format: dropped, counted and logged."""


def job_to_wire(job: Job, idem: bytes | None = None) -> list[object]:
    """A job as REPLJOB / YOURJOBS carry it (jobcodec's BUS mode)."""
    return job_fields(job, BUS, idem)


def job_from_wire(w: object) -> JobFields:
    """A job from REPLJOB / YOURJOBS, checked (jobcodec's BUS mode); Malformed if bad."""
    try:
        return parse_job(w, BUS)
    except BadJob as e:
        raise Malformed(f"bad job on the wire: {e}") from None


# ------------------------------------------------------------------ validation
def _int(v: object, lo: int, hi: int, what: str) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise Malformed(f"bad {what}")
    return v


def _job_id(v: object) -> bytes:
    if type(v) is not bytes or not is_valid_job_id(v):
        raise Malformed("bad job ID")
    return v


def _node_id(v: object) -> str:
    if not valid_node_id(v):
        raise Malformed("bad node ID")
    return v


def _name(v: object) -> bytes:
    if type(v) is not bytes or len(v) > MAX_NAME:
        raise Malformed("bad queue name")
    return v


def _gossip(f: Fields) -> Fields:
    """[gossip, your_ip]; gossip: [[id, ip, port, flags], ...]."""
    if len(f) != 2 or type(f[0]) is not list or len(f[0]) > MAX_GOSSIP \
            or type(f[1]) is not str or len(f[1]) > MAX_NAME:
        raise Malformed("bad gossip")
    for e in f[0]:
        if (type(e) is not list or len(e) != 4 or not valid_node_id(e[0])
                or type(e[1]) is not str or len(e[1]) > MAX_NAME):
            raise Malformed("bad gossip entry")
        _int(e[2], 0, 65535, "gossip port")
        _int(e[3], 0, NF_PFAIL | NF_FAIL | NF_LEAVING, "gossip flags")
    return f


def _jobs(items: Fields) -> list[JobFields]:
    if not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad item count")
    return [job_from_wire(w) for w in items]


def _record_ids(items: Fields) -> Fields:
    """GOTJOB's IDs: jobs' or events' (replication.py confirms both)."""
    if not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad item count")
    for rid in items:
        if not (type(rid) is bytes and is_valid_job_id(rid)) and not is_valid_event_id(rid):
            raise Malformed("bad job or event ID")
    return items


def _gotack(f: Fields) -> Fields:
    if len(f) != 2 or type(f[1]) is not bool:
        raise Malformed("bad GOTACK")
    _job_id(f[0])
    return f


def _deljob(f: Fields) -> Fields:
    if not 1 <= len(f) <= 2:
        raise Malformed("bad field count")
    _job_id(f[0])
    if len(f) == 2:
        covered = f[1]
        if type(covered) is not list or len(covered) > MAX_NODES:
            raise Malformed("bad DELJOB node list")
        for n in covered:
            _node_id(n)
    return f


def _yourjobs(f: Fields) -> Fields:
    if len(f) != 1 or type(f[0]) is not list:
        raise Malformed("bad YOURJOBS")
    return [_jobs(f[0])]


def _one(check: Callable[[object], object]) -> Callable[[Fields], Fields]:
    """A message of one field, checked by ``check``."""
    def fields(f: Fields) -> Fields:
        if len(f) != 1:
            raise Malformed("bad field count")
        check(f[0])
        return f
    return fields


def _pair(check: Callable[[object], object], lo: int, hi: int,
          what: str) -> Callable[[Fields], Fields]:
    """A message of two fields: one checked by ``check``, then an integer in [lo, hi]."""
    def fields(f: Fields) -> Fields:
        if len(f) != 2:
            raise Malformed("bad field count")
        check(f[0])
        _int(f[1], lo, hi, what)
        return f
    return fields


_one_id = _one(_job_id)
_fail = _one(_node_id)
_queued = _pair(_job_id, 0, QUEUED_INCR_NACKS, "QUEUED increment")
_setack = _pair(_job_id, 0, MAX_NODES, "SETACK count")
_needjobs = _pair(_name, 0, MAX_ITEMS, "NEEDJOBS count")
_pause = _pair(_name, 0, 3, "PAUSE flags")


def _outcome(f: Fields) -> Fields:
    if len(f) != 3 or type(f[2]) is not bytes or len(f[2]) > MAX_DETAIL_LIMIT:
        raise Malformed("bad OUTCOME")
    _job_id(f[0])
    _int(f[1], COMPLETED, CANCELLED, "OUTCOME state")
    return f


# ------------------------------------------------------------ consumer groups
MAX_LEASE_MS: Final = 1 << 40
MAX_REQ: Final = (1 << 62) - 1


def _event_id(v: object) -> bytes:
    if not is_valid_event_id(v):
        raise Malformed("bad event ID")
    assert type(v) is bytes
    return v


def _events(items: Fields) -> list[EventFields]:
    if not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad item count")
    try:
        return [parse_event(e) for e in items]
    except BadEvent as e:
        raise Malformed(f"bad event on the wire: {e}") from None


def _evsync(items: Fields) -> list[tuple[bytes, tuple[tuple[bytes, int], ...]]]:
    if not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad item count")
    out = []
    for it in items:
        if type(it) is not list or len(it) != 2:
            raise Malformed("bad EVSYNC item")
        claims = parse_claims(it[1])
        if claims is None:
            raise Malformed("bad EVSYNC claims")
        out.append((_event_id(it[0]), claims))
    return out


def _event_ids(items: Fields) -> Fields:
    if not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad item count")
    for eid in items:
        _event_id(eid)
    return items


def _evstate(items: Fields) -> list[tuple[bytes, bytes, int]]:
    if not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad item count")
    try:
        return list(parse_claim_changes(items))
    except BadEvent:
        raise Malformed("bad EVSTATE item") from None


def _fields(*checks: Callable[[object], object]) -> Callable[[Fields], Fields]:
    """A message of len(checks) fields, each checked by its own."""
    def fields(f: Fields) -> Fields:
        if len(f) != len(checks):
            raise Malformed("bad field count")
        for check, v in zip(checks, f, strict=True):
            check(v)
        return f
    return fields


def _req(v: object) -> int:
    return _int(v, 0, MAX_REQ, "request")


def _ms(v: object) -> int:
    return _int(v, 0, MAX_LEASE_MS, "duration")


def _grant(g: object) -> None:
    if g is not None:
        if type(g) is not list or len(g) != 3 or type(g[1]) is not bytes:
            raise Malformed("bad EVGRANT")
        _event_id(g[0])
        _int(g[2], 0, 0xFFFF, "deliveries")


_evpull = _fields(_req, _name, _name, _ms, lambda v: _int(v, 0, 0xFFFF, "MAXDELIVERIES"))
_evgrant = _fields(_req, _grant)
_evack = _fields(_req, _name, _name, _event_id, _ms)
_evacked = _fields(_req, lambda v: _int(v, 0, 2, "EVACK verdict"))


def _verdicts(items: object) -> None:
    if type(items) is not list or not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad EVACKEDS verdicts")
    for v in items:
        _int(v, 0, 2, "EVACK verdict")


def _first(v: object) -> int:
    return _int(v, 0, MAX_REQ, "first index")


def _id_list(v: object) -> None:
    if type(v) is not list:
        raise Malformed("bad event ID list")
    _event_ids(v)


_evacks = _fields(_req, _name, _name, _ms, _first, _id_list)
_evackeds = _fields(_req, _first, _verdicts)
_evflush = _fields(_name, lambda v: _int(v, 0, MAX_TIME, "flush time"))
_evwatch = _fields(_name, _name, _ms)
_evavail = _fields(_name, _name)


# the fields of each message type: checked, and decoded where they carry jobs
_FIELDS: Final[dict[int, Callable[[Fields], Fields]]] = {
    PING: _gossip, PONG: _gossip, MEET: _gossip, FAIL: _fail,
    REPLJOB: _jobs, GOTJOB: _record_ids, ENQUEUE: _one_id, WILLQUEUE: _one_id,
    QUEUED: _queued, SETACK: _setack, GOTACK: _gotack, DELJOB: _deljob,
    WORKING: _one_id, NEEDJOBS: _needjobs, YOURJOBS: _yourjobs, PAUSE: _pause,
    OUTCOME: _outcome,
    EVADD: _events, EVSTATE: _evstate, EVPULL: _evpull,
    EVGRANT: _evgrant, EVACK: _evack, EVACKED: _evacked, EVACKS: _evacks,
    EVACKEDS: _evackeds, EVFLUSH: _evflush,
    EVWATCH: _evwatch, EVAVAIL: _evavail, EVDEL: _one(_event_id),
    EVSYNC: _evsync, EVSYNCED: _fields(lambda v: _int(v, 0, 1, "reply")), EVNEED: _event_ids,
}


def parse(msg: object) -> tuple[int, str, int, int, Fields]:
    """``(type, sender id, sender port, sender flags, fields)`` of a message that is
    not a BATCH, its fields checked (and decoded: jobs as job_from_wire tuples); raises
    Malformed. A BATCH's messages are parsed one by one (see ``batch``)."""
    if type(msg) is not list or len(msg) < 4:
        raise Malformed("not a message")
    mtype, sid, sport, sflags = msg[0], msg[1], msg[2], msg[3]
    check = _FIELDS.get(mtype) if type(mtype) is int else None
    if check is None:
        raise Malformed(f"unknown message type {mtype!r}")
    _node_id(sid)
    _int(sport, 0, 65535, "sender port")
    _int(sflags, 0, SF_LEAVING, "sender flags")
    return mtype, sid, sport, sflags, check(msg[4:])


def batch(msg: object) -> Fields | None:
    """The messages of a BATCH (not parsed yet), or None if ``msg`` is not one."""
    if type(msg) is not list or not msg or msg[0] != BATCH:
        return None
    if len(msg) != 5 or type(msg[4]) is not list or len(msg[4]) > MAX_ITEMS:
        raise Malformed("bad BATCH")
    return msg[4]
