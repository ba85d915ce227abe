"""Cluster bus messages: type codes and the job wire form.

Every message is a list ``[type, sender_id, sender_port, sender_flags, *fields]``
(encoded by ``codec.bus``). Node IDs are 40-hex strings, job IDs bytes. The same
lists travel through the real bus and the simulator.

Fields after the header, by type:

    BATCH         [[message, ...]]  messages for one peer sent in one frame

    PING / PONG   [gossip, your_ip] gossip: [[id, ip, port, flags], ...]
    MEET          [gossip, your_ip] the address the sender used to reach us
    FAIL          [node_id]
    REPLJOB       [job, ...]        job: see job_to_wire; one or more
    GOTJOB        [job_id, ...]     one or more
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

Everything a peer sends is checked here, before any handler runs: ``parse`` returns
the message's header and its fields (jobs decoded to tuples, every integer in
range) or raises :class:`Malformed`, which the node counts and logs. Handlers trust
what they get; an exception inside one is a bug, never swallowed.
"""

from __future__ import annotations

from collections.abc import Callable

from .ids import is_valid_job_id

BATCH = 0  # [BATCH, sender, port, flags, [message, ...]]: several messages, one frame
PING = 1
PONG = 2
MEET = 3
FAIL = 4
REPLJOB = 10
GOTJOB = 11
ENQUEUE = 12
WILLQUEUE = 13
QUEUED = 14
SETACK = 15
GOTACK = 16
DELJOB = 17
WORKING = 18
NEEDJOBS = 19
YOURJOBS = 20
PAUSE = 21

NAMES = {v: k for k, v in dict(globals()).items() if isinstance(v, int) and k.isupper()}

# most items (REPLJOB jobs, GOTJOB IDs) one message carries (see Node.send_item)
MAX_ITEMS = 1000

# sender flags
SF_LEAVING = 1

# node flags in gossip
NF_PFAIL = 1
NF_FAIL = 2
NF_LEAVING = 4

QUEUED_INCR_DELIV = 1
QUEUED_INCR_NACKS = 2


_HEX = frozenset("0123456789abcdef")


# Node IDs found valid so far; and lists of them, each kept as one tuple of shared str
# objects (a cluster has a handful of nodes, so of lists too). Jobs keep the node IDs of
# their copies: the strings a message decodes to are new objects (89 bytes each), so a
# replica would otherwise hold three of them and a tuple for every job.
_VALID_IDS: dict[str, str] = {}  # each valid ID seen, mapped to its shared object
_NODE_LISTS: dict[tuple, tuple] = {}
_CACHE_MAX = 4096


def valid_node_id(nid) -> bool:
    """40 lowercase hex characters. Every bus message carries a few node IDs, so the
    answer for IDs seen before comes from a small cache (it only saves time)."""
    if type(nid) is not str:
        return False
    if nid in _VALID_IDS:
        return True
    if len(nid) != 40 or set(nid) - _HEX:
        return False
    if len(_VALID_IDS) < _CACHE_MAX:
        _VALID_IDS[nid] = nid
    return True


def node_ids_from_wire(ids: list) -> tuple | None:
    """The node IDs of a message as a shared tuple of shared str objects, or None if
    any is not a valid_node_id(). A list seen before costs one lookup (msgpack yields
    exact ``str``, ``bytes`` or containers: a non-str item never equals a cached list,
    and an unhashable one raises TypeError)."""
    try:
        t = tuple(ids)
        known = _NODE_LISTS.get(t)
    except TypeError:
        return None
    if known is not None:
        return known
    if not all(map(valid_node_id, ids)):
        return None
    if len(_NODE_LISTS) < _CACHE_MAX:
        get = _VALID_IDS.get
        t = tuple([get(nid, nid) for nid in t])
        _NODE_LISTS[t] = t
    return t


MAX_IDEM_KEY = 256  # longest ADDJOB IDEMPOTENT key


def job_to_wire(job, idem: bytes | None = None) -> list:
    """A job as REPLJOB / YOURJOBS carry it; a 12th item is its idempotency key."""
    w = [job.id, job.queue, job.body, job.ctime, job.ttl, job.delay, job.retry, job.repl,
         job.nacks, job.adeliv, list(job.delivered)]
    if idem is not None:
        w.append(idem)
    return w


# ranges of what a peer may send: past these a value is a forgery or corruption (and a
# counter at 2**64-1 could not even be written to the AOF once incremented)
MAX_COUNTER = 1 << 48  # nacks, additional deliveries
MAX_SECONDS = 1 << 32  # ttl, delay, retry
MAX_CTIME = 1 << 62  # ns: the year 2116
MAX_NODES = 4096  # node IDs in one list (a job's copies, a FASTACK's covered nodes)
MAX_GOSSIP = 512  # gossip entries in one PING/PONG/MEET
MAX_NAME = 1 << 16  # queue name bytes; an IP address string


class Malformed(ValueError):
    """A message from a peer that breaks the format: dropped, counted and logged."""


def job_from_wire(w: list):
    """(id, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered, idem)."""
    if type(w) is not list:
        raise Malformed("bad job on the wire")
    if len(w) == 11:
        jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered = w
        idem = None
    elif len(w) == 12:
        jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered, idem = w
    else:
        raise Malformed("bad job on the wire")
    if not (type(jid) is bytes and is_valid_job_id(jid) and type(queue) is bytes
            and type(body) is bytes and type(ctime) is int and type(ttl) is int
            and type(delay) is int and type(retry) is int and type(repl) is int
            and type(nacks) is int and type(adeliv) is int and type(delivered) is list
            and 0 < ttl < MAX_SECONDS and 0 <= delay < MAX_SECONDS
            and 0 <= retry < MAX_SECONDS and 0 < repl < 65536
            and 0 <= nacks < MAX_COUNTER and 0 <= adeliv < MAX_COUNTER
            and 0 <= ctime < MAX_CTIME and len(queue) <= MAX_NAME
            and len(delivered) <= MAX_NODES
            and (delivered := node_ids_from_wire(delivered)) is not None
            and (idem is None or (type(idem) is bytes and 0 < len(idem) <= MAX_IDEM_KEY))):
        raise Malformed("bad job on the wire")
    return (jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered, idem)


# ------------------------------------------------------------------ validation
def _int(v, lo: int, hi: int, what: str) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise Malformed(f"bad {what}")
    return v


def _job_id(v) -> bytes:
    if type(v) is not bytes or not is_valid_job_id(v):
        raise Malformed("bad job ID")
    return v


def _node_id(v) -> str:
    if not valid_node_id(v):
        raise Malformed("bad node ID")
    return v


def _name(v) -> bytes:
    if type(v) is not bytes or len(v) > MAX_NAME:
        raise Malformed("bad queue name")
    return v


def _gossip(f: list) -> list:
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


def _jobs(items: list) -> list:
    if not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad item count")
    return [job_from_wire(w) for w in items]


def _job_ids(items: list) -> list:
    if not 0 < len(items) <= MAX_ITEMS:
        raise Malformed("bad item count")
    for jid in items:
        _job_id(jid)
    return items


def _gotack(f: list) -> list:
    if len(f) != 2 or type(f[1]) is not bool:
        raise Malformed("bad GOTACK")
    _job_id(f[0])
    return f


def _deljob(f: list) -> list:
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


def _yourjobs(f: list) -> list:
    if len(f) != 1 or type(f[0]) is not list:
        raise Malformed("bad YOURJOBS")
    return [_jobs(f[0])]


def _one(check) -> Callable[[list], list]:
    """A message of one field, checked by ``check``."""
    def fields(f: list) -> list:
        if len(f) != 1:
            raise Malformed("bad field count")
        check(f[0])
        return f
    return fields


def _pair(check, lo: int, hi: int, what: str) -> Callable[[list], list]:
    """A message of two fields: one checked by ``check``, then an integer in [lo, hi]."""
    def fields(f: list) -> list:
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


# the fields of each message type: checked, and decoded where they carry jobs
_FIELDS = {
    PING: _gossip, PONG: _gossip, MEET: _gossip, FAIL: _fail,
    REPLJOB: _jobs, GOTJOB: _job_ids, ENQUEUE: _one_id, WILLQUEUE: _one_id,
    QUEUED: _queued, SETACK: _setack, GOTACK: _gotack, DELJOB: _deljob,
    WORKING: _one_id, NEEDJOBS: _needjobs, YOURJOBS: _yourjobs, PAUSE: _pause,
}


def parse(msg) -> tuple:
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


def batch(msg) -> list | None:
    """The messages of a BATCH (not parsed yet), or None if ``msg`` is not one."""
    if type(msg) is not list or not msg or msg[0] != BATCH:
        return None
    if len(msg) != 5 or type(msg[4]) is not list or len(msg[4]) > MAX_ITEMS:
        raise Malformed("bad BATCH")
    return msg[4]
