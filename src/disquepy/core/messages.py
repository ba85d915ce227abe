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
"""

from __future__ import annotations

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


def job_from_wire(w: list):
    """(id, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered, idem)."""
    if type(w) is not list:
        raise ValueError("bad job on the wire")
    if len(w) == 11:
        jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered = w
        idem = None
    elif len(w) == 12:
        jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered, idem = w
    else:
        raise ValueError("bad job on the wire")
    if not (type(jid) is bytes and is_valid_job_id(jid) and type(queue) is bytes
            and type(body) is bytes and type(ctime) is int and type(ttl) is int
            and type(delay) is int and type(retry) is int and type(repl) is int
            and type(nacks) is int and type(adeliv) is int and type(delivered) is list
            and ttl > 0 and delay >= 0 and retry >= 0 and 0 < repl < 65536
            and nacks >= 0 and adeliv >= 0 and ctime >= 0
            and (delivered := node_ids_from_wire(delivered)) is not None
            and (idem is None or (type(idem) is bytes and 0 < len(idem) <= MAX_IDEM_KEY))):
        raise ValueError("bad job on the wire")
    return (jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered, idem)
