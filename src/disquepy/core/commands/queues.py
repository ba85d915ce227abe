"""Queue commands: GETJOB, QLEN, QSTAT, QPEEK, QSCAN, PAUSE."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ...codec import resp
from .. import errors
from ..client import BlockedGet
from ..errors import ReplyError
from ..job import ACKED
from ..queue import PAUSE_NAMES, PAUSED_ALL, PAUSED_IN, PAUSED_OUT, Queue
from ..queues import QUEUE_OVERHEAD, job_reply, jobs_reply
from .args import parse_int, parse_scan, parse_timeout

if TYPE_CHECKING:
    from ..client import Client
    from ..job import Job
    from ..node import Node

def getjob(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | None:
    """GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] [TOKEN t] FROM q1 ... qN

    TOKEN (disquepy): the first GETJOB with a token remembers the jobs it delivers;
    a later one with the same token takes nothing new and returns those of them
    that still exist here, so a consumer replaying a read gets the same jobs."""
    nohang = False
    token = None
    withcounters = False
    timeout = 0
    count = 1
    n = len(argv)
    j = 1
    while j < n:
        opt = argv[j].lower()
        last = j == n - 1
        if opt == b"nohang":
            nohang = True
        elif opt == b"withcounters":
            withcounters = True
        elif opt == b"timeout" and not last:
            timeout = parse_timeout(argv[j + 1])
            j += 1
        elif opt == b"count" and not last:
            count = parse_int(argv[j + 1], errors.COUNT_RANGE)
            if count <= 0:
                raise ReplyError(errors.COUNT_RANGE)
            j += 1
        elif opt == b"token" and not last:
            token = argv[j + 1]
            if not 0 < len(token) <= 256:
                raise ReplyError(errors.TOKEN_RANGE)
            j += 1
        elif opt == b"from":
            j += 1
            break
        else:
            raise ReplyError(errors.SYNTAX)
        j += 1
    else:
        raise ReplyError(errors.SYNTAX)  # no FROM
    names = argv[j:]
    if not names:
        raise ReplyError(errors.SYNTAX)
    if token is not None:
        ids = node.keys.token_get(token, now)
        if ids is not None:
            return _token_replay(node, ids, withcounters, client.proto)

    queues = node.queues.by_name
    new = [name for name in names if name not in queues]
    if new:  # as in Disque, asking for a queue creates it: within maxmemory
        oom = node.mem.refuse_oom(len(new) * QUEUE_OVERHEAD + sum(map(len, new)))
        if oom is not None:
            return oom
        for name in new:
            node.queues.create(name, now)
    out: list[Job] = []
    while True:
        got = 0
        for name in names:
            q = queues[name]
            if q.jobs and not q.flags & PAUSED_OUT:
                out.append(node.store.fetch(q, now))
                got += 1
                if len(out) == count:
                    break
        if got == 0 or len(out) == count:
            break
    if token is not None:  # the IDs the token will remember
        node.keys.token_record(token, tuple([job.id for job in out]), now)
    if out:
        if node.clustered:
            node.fed.queues_drained(names, now, took=True)
        return jobs_reply(out, withcounters)  # the batch's reply, written once
    if nohang:
        node.fed.queues_drained(names, now)
        return resp.null_array(client.proto)
    if node.leaving:
        return resp.error(errors.LEAVING)
    node.queues.block(client, BlockedGet(names, count, withcounters,
                                         now + timeout if timeout else 0, token), now)
    node.fed.queues_drained(names, now)
    return None


def _token_replay(node: Node, ids: tuple[bytes, ...], withcounters: bool, proto: int) -> bytes:
    """What a replayed GETJOB TOKEN returns: its jobs still known here, any state."""
    out: list[bytes] = []
    for jid in ids:
        job = node.jobs.get(jid)
        if job is not None and job.state != ACKED:
            out.append(job_reply(job, withcounters))
    if not out:
        return resp.null_array(proto)
    return b"*%d\r\n" % len(out) + b"".join(out)


def qlen(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    q = node.queues.get(argv[1])
    return resp.integer(len(q.jobs) if q is not None else 0)


def qstat(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    q = node.queues.get(argv[1])
    if q is None:
        return resp.null_array(client.proto)
    b, i = resp.bulk, resp.integer
    return resp.array([
        b(b"name"), b(q.name),
        b(b"len"), i(len(q.jobs)),
        b(b"age"), i((now - q.ctime) // 1000),
        b(b"idle"), i((now - q.atime) // 1000),
        b(b"blocked"), i(len(q.waiters)),
        b(b"import-from"), resp.bulk_array(node.fed.import_sources(q, now)),
        b(b"import-rate"), i(q.import_rate(now)),
        b(b"jobs-in"), i(q.jobs_in),
        b(b"jobs-out"), i(q.jobs_out),
        b(b"pause"), b(q.pause_name),
    ])


def qpeek(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    count = parse_int(argv[2])
    q = node.queues.get(argv[1])
    if q is None or count == 0:
        return resp.EMPTY_ARRAY
    return resp.array([job_reply(job, False) for job in q.peek(count)])


def qscan(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE r]"""
    lim = {b"minlen": -1, b"maxlen": -1, b"importrate": -1}

    def setter(name: bytes) -> Callable[[bytes], None]:
        return lambda v: lim.__setitem__(name, parse_int(v))

    cursor, count, busyloop = parse_scan(argv, {name: setter(name) for name in lim})
    minlen, maxlen, importrate = lim[b"minlen"], lim[b"maxlen"], lim[b"importrate"]

    access = client.queues  # a user limited to some queues sees only their names

    def keep(q: Queue) -> bool:
        ln = len(q.jobs)
        return ((minlen < 0 or ln >= minlen) and (maxlen < 0 or ln <= maxlen)
                and (importrate < 0 or q.import_rate(now) >= importrate)
                and (access is None or access.allows(q.name)))

    cursor, found = node.queues.scan(cursor, count, busyloop, keep)
    return resp.array([resp.bulk(b"%d" % cursor), resp.bulk_array([q.name for q in found])])


_PAUSE_OPTS: Final = {b"none": 0, b"in": PAUSED_IN, b"out": PAUSED_OUT, b"all": PAUSED_IN | PAUSED_OUT}
_PAUSE_REPLIES: Final = [resp.simple(name) for name in PAUSE_NAMES]


def pause(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """PAUSE queue option...: in, out, all, none (left to right), state, bcast."""
    flags = 0
    update = False
    bcast = False
    for opt in argv[2:]:
        o = opt.lower()
        f = _PAUSE_OPTS.get(o)
        if f is not None:
            update = True
            flags = 0 if f == 0 else flags | f
        elif o == b"bcast":
            bcast = True
        elif o != b"state":
            raise ReplyError(errors.SYNTAX)
    name = argv[1]
    q = node.queues.get(name)
    if update and (q is not None or flags):
        if q is None:
            q = node.queues.create(name, now)
        node.queues.set_pause(q, flags)
    if bcast:
        node.fed.broadcast_pause(name, flags if update else (q.flags if q is not None else 0))
    return _PAUSE_REPLIES[q.flags & PAUSED_ALL if q is not None else 0]
