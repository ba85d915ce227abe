"""Commands about single jobs: ADDJOB, SHOW, DELJOB, ENQUEUE, DEQUEUE, NACK, WORKING, JSCAN."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ...codec import resp
from .. import errors
from ..errors import ReplyError
from ..job import ACKED, ACTIVE, F_BCAST_WILLQUEUE, F_DUMMY, QUEUED, STATE_BY_NAME, Job
from ..jobcodec import MAX_IDEM_KEY, MAX_SECONDS
from .args import job_ids, parse_int, parse_scan, parse_timeout

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node

DEFAULT_TTL: Final = 24 * 3600  # seconds
DEFAULT_RETRY: Final = 300  # seconds, unless TTL/10 is smaller
MAX_REPLICATE: Final = 65535


def default_retry(ttl: int) -> int:
    """Five minutes, or TTL/10 (at least one second) for short-lived jobs."""
    r = ttl // 10
    if r >= DEFAULT_RETRY:
        return DEFAULT_RETRY
    return r if r > 0 else 1


def addjob(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | None:
    """ADDJOB queue job ms-timeout [REPLICATE n] [DELAY s] [RETRY s] [TTL s] [MAXLEN n] [ASYNC]
    [IDEMPOTENT key] (disquepy: the job already added with ``key`` answers instead)"""
    replicate = 0
    delay = 0
    retry = -1
    ttl = DEFAULT_TTL
    maxlen = 0
    is_async = False
    idem = None
    n = len(argv)
    if n == 4:  # the common case: no options, all defaults
        t = argv[3]
        timeout = 0 if t == b"0" else parse_timeout(t)
        reply: bytes | None = node.store.create_job(
            argv[1], argv[2], DEFAULT_TTL, DEFAULT_RETRY, 0, node.default_replicate, timeout,
            False, 0, client, now)
        return reply
    j = 4
    while j < n:
        opt = argv[j].lower()
        last = j == n - 1
        if opt == b"replicate" and not last:
            replicate = parse_int(argv[j + 1], errors.REPLICATE_RANGE)
            if replicate <= 0 or replicate > MAX_REPLICATE:
                raise ReplyError(errors.REPLICATE_RANGE)
            j += 1
        elif opt == b"ttl" and not last:
            ttl = parse_int(argv[j + 1], errors.TTL_RANGE)
            if ttl <= 0:
                raise ReplyError(errors.TTL_RANGE)
            j += 1
        elif opt == b"retry" and not last:
            retry = parse_int(argv[j + 1], errors.RETRY_RANGE)
            if retry < 0:
                raise ReplyError(errors.RETRY_RANGE)
            j += 1
        elif opt == b"delay" and not last:
            delay = parse_int(argv[j + 1], errors.DELAY_RANGE)
            if delay < 0:
                raise ReplyError(errors.DELAY_RANGE)
            j += 1
        elif opt == b"maxlen" and not last:
            maxlen = parse_int(argv[j + 1], errors.MAXLEN_RANGE)
            if maxlen <= 0:
                raise ReplyError(errors.MAXLEN_RANGE)
            j += 1
        elif opt == b"async":
            is_async = True
        elif opt == b"idempotent" and not last:
            idem = argv[j + 1]
            if not 0 < len(idem) <= MAX_IDEM_KEY:
                raise ReplyError(errors.IDEM_RANGE)
            j += 1
        else:
            raise ReplyError(errors.SYNTAX)
        j += 1
    timeout = parse_timeout(argv[3])
    if replicate == 0:
        replicate = node.default_replicate
    if replicate > 1 and retry == 0:
        raise ReplyError(errors.RETRY0_REPLICATE)
    if delay >= ttl:
        raise ReplyError(errors.DELAY_GE_TTL)
    # C Disque keeps these in 32 bits and wraps larger values silently (TTL 2^32 + 1
    # lives one second); our bus and AOF codecs refuse them: refused here, and said why
    for name, v in ((b"TTL", ttl), (b"RETRY", retry)):
        if v >= MAX_SECONDS:
            raise ReplyError(errors.too_large(name.decode(), MAX_SECONDS))
    if retry == -1:
        retry = default_retry(ttl)
    if idem is not None:
        jid = node.keys.lookup(idem, now)
        if jid is not None:
            return b"+" + jid + b"\r\n"
    reply = node.store.create_job(argv[1], argv[2], ttl, retry, delay, replicate, timeout,
                                  is_async, maxlen, client, now, idem)
    return reply


def show(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    jid = job_ids(argv)[0]
    job = node.jobs.get(jid)
    if job is None:
        return resp.null_bulk(client.proto)
    return show_reply(node, job, now, client.proto)


def show_reply(node: Node, job: Job, now: int, proto: int) -> bytes:
    """The SHOW array (also JSCAN REPLY all): 15 fields in Disque's order."""
    b, i = resp.bulk, resp.integer
    null = resp.null_bulk(proto)
    dummy = job.flags & F_DUMMY
    return resp.array([
        b(b"id"), b(job.id),
        b(b"queue"), null if dummy else b(job.queue),
        b(b"state"), b(job.state_name),
        b(b"repl"), i(job.repl),
        b(b"ttl"), i(max(0, (job.etime - now) // 1000)),
        b(b"ctime"), i(job.ctime),
        b(b"delay"), i(job.delay),
        b(b"retry"), i(job.retry),
        b(b"nacks"), i(job.nacks),
        b(b"additional-deliveries"), i(job.adeliv),
        b(b"nodes-delivered"), resp.bulk_array(node.delivered_ids(job)),
        b(b"nodes-confirmed"), resp.bulk_array(node.confirmed_ids(job)),
        b(b"next-requeue-within"),
        i(max(0, job.qtime - now)) if job.qtime and job.state != ACKED else null,
        b(b"next-awake-within"), i(max(0, job.awake - now)) if job.awake else null,
        b(b"body"), null if dummy else b(job.body),
    ])


def deljob(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    deleted = 0
    for jid in job_ids(argv):
        job = node.jobs.get(jid)
        if job is not None:
            if node.events_on and not job.flags & F_DUMMY:
                node.events_out.append((now, "deleted", jid, job.queue, None))
            node.store.unregister(job)
            deleted += 1
    return resp.integer(deleted)


def _requeue(node: Node, argv: list[bytes], now: int, nack: bool) -> bytes:
    n = 0
    for jid in job_ids(argv):
        job = node.jobs.get(jid)
        if job is not None and job.state == ACTIVE and node.store.enqueue(job, now, nack=nack):
            n += 1
    return resp.integer(n)


def enqueue(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    return _requeue(node, argv, now, nack=False)


def nack(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """NACK id ... [DELAY seconds]: back to the queue now, or (disquepy) after the
    delay, under the same ID with its nack count up by one (a retry with back-off)."""
    delay = None
    if len(argv) >= 2 and argv[-2].upper() == b"DELAY":
        delay = parse_int(argv[-1], errors.NACK_DELAY)
        if delay < 0:
            raise ReplyError(errors.NACK_DELAY)
        if delay >= MAX_SECONDS:  # the ADDJOB range: qtime stays storable
            raise ReplyError(errors.too_large("DELAY", MAX_SECONDS))
        argv = argv[:-2]
    elif argv[-1].upper() == b"DELAY":
        raise ReplyError(errors.SYNTAX)
    if not delay:
        return _requeue(node, argv, now, nack=True)
    n = 0
    for jid in job_ids(argv):
        job = node.jobs.get(jid)
        if job is not None and node.store.defer(job, now, delay):
            n += 1
    return resp.integer(n)


def dequeue(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    n = 0
    for jid in job_ids(argv):
        job = node.jobs.get(jid)
        if job is not None and node.store.dequeue(job):
            n += 1
    return resp.integer(n)


def working(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """WORKING id: postpone the next re-queue by one retry period; returns the retry."""
    job = node.jobs.get(job_ids(argv)[0])
    if job is None:
        raise ReplyError(errors.NOJOB)
    born = job.ctime // 1_000_000
    lifetime = job.etime - born
    if lifetime > 0 and now - born > lifetime // 2:
        raise ReplyError(errors.TOOLATE)
    if job.state == ACKED:
        return resp.integer(job.retry)  # as Disque: no error, and nothing to postpone
    if job.state == QUEUED:
        node.store.dequeue(job)
    job.flags |= F_BCAST_WILLQUEUE
    if job.retry and job.qtime:
        job.qtime = node.store.retry_at(now, job.retry)
    node.store.schedule(job)
    node.repl.broadcast_working(job)
    return resp.integer(job.retry)


def jscan(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s ...] [REPLY all|id]"""
    queue: bytes | None = None
    states = 0  # a bit per job state asked for; 0: all
    reply_all = False

    def queue_opt(v: bytes) -> None:
        nonlocal queue
        queue = v

    def state(v: bytes) -> None:
        nonlocal states
        st = STATE_BY_NAME.get(v.lower())
        if st is None:
            raise ReplyError(errors.BAD_STATE)
        states |= 1 << st

    def reply(v: bytes) -> None:
        nonlocal reply_all
        kind = v.lower()
        if kind not in (b"all", b"id"):
            raise ReplyError(errors.BAD_REPLY_TYPE)
        reply_all = kind == b"all"

    cursor, count, busyloop = parse_scan(argv, {
        b"queue": queue_opt, b"state": state, b"reply": reply})

    access = client.queues  # a user limited to some queues sees only their jobs

    def keep(job: Job) -> bool:
        if job.flags & F_DUMMY:
            return False
        if queue is not None and job.queue != queue:
            return False
        if access is not None and not access.allows(job.queue):
            return False
        return not states or bool(states & (1 << job.state))

    cursor, found = node.store.scan(cursor, count, busyloop, keep)
    if reply_all:
        items = [show_reply(node, job, now, client.proto) for job in found]
    else:
        items = [b"+" + job.id + b"\r\n" for job in found]
    return resp.array([resp.bulk(b"%d" % cursor), resp.array(items)])
