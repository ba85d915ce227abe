"""Consumer group commands, bananaq's syntax and replies: QADD, QGET, QACK, QNOTIFY,
QFLUSH, QSTATUS, QINFO (the state and the cluster side live in core/groups/, by
topic)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ...codec import resp
from .. import errors
from ..errors import ReplyError
from ..eventcodec import MAX_KEY
from ..groups.leases import MAX_COUNT
from ..groups.model import DEFAULT_LEASE_MS, MAX_DELIVERIES, MAX_EXPIRE_MS, event_reply
from ..ids import all_valid_event_ids
from .args import parse_int

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node

_NUM: Final = frozenset(b"0123456789.")


def parse_seconds(b: bytes, err: str, limit_ms: int = MAX_EXPIRE_MS) -> int:
    """Seconds as an integer or a decimal ("1", "0.25"), in ms; no sign, no exponent."""
    if 0 < len(b) < 19:  # whole seconds (ASCII digits), QADD's usual form
        ms = 0
        for c in b:  # (compiled: cheaper than isdigit() and int(), two calls by name)
            if c < 48 or c > 57:
                ms = -1
                break
            ms = ms * 10 + c - 48
        if ms >= 0:
            ms *= 1000
            if ms > limit_ms:
                raise ReplyError(err)
            return ms
    if not b or set(b) - _NUM or b.count(b".") > 1 or b == b".":
        raise ReplyError(err)
    ms = round(float(b) * 1000)
    if ms > limit_ms:
        raise ReplyError(err)
    return ms


def qadd(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | None:
    """QADD queue expireSeconds contents [NOBLOCK] [IDEMPOTENT key] (disquepy: the
    event already added with ``key`` answers instead, see docs/GROUPS.md)"""
    noblock = False
    key: bytes | None = None
    j = 4
    while j < len(argv):
        opt = argv[j].lower()
        if opt == b"noblock":
            noblock = True
        elif opt == b"idempotent" and j + 1 < len(argv):
            key = argv[j + 1]
            if not 0 < len(key) <= MAX_KEY:
                raise ReplyError(errors.IDEM_RANGE)
            j += 1
        else:
            raise ReplyError(errors.SYNTAX)
        j += 1
    expire = parse_seconds(argv[2], errors.EXPIRE_RANGE)
    if expire <= 0:
        raise ReplyError(errors.EXPIRE_RANGE)
    return node.groups.repl.qadd(client, argv[1], expire, argv[3], noblock, now, key)


def qget(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | None:
    """QGET queue group [EX seconds] [WITHCOUNTERS] [MAXDELIVERIES n] [COUNT n]
    (COUNT, disquepy's: up to n events, as an array of entries)"""
    lease = DEFAULT_LEASE_MS
    counters = False
    maxdeliv = 0
    count = 0
    j = 3
    n = len(argv)
    while j < n:
        opt = argv[j].lower()
        if opt == b"ex" and j + 1 < n:
            lease = parse_seconds(argv[j + 1], errors.EX_RANGE)
            j += 2
        elif opt == b"maxdeliveries" and j + 1 < n:
            maxdeliv = parse_int(argv[j + 1], errors.MAXDELIVERIES_RANGE)
            if not 0 < maxdeliv <= MAX_DELIVERIES:
                raise ReplyError(errors.MAXDELIVERIES_RANGE)
            j += 2
        elif opt == b"withcounters":
            counters = True
            j += 1
        elif opt == b"count" and j + 1 < n:
            count = parse_int(argv[j + 1], errors.QGET_COUNT_RANGE)
            if not 0 < count <= MAX_COUNT:
                raise ReplyError(errors.QGET_COUNT_RANGE)
            j += 2
        else:
            raise ReplyError(errors.SYNTAX)
    return node.groups.leases.qget(client, argv[1], argv[2], lease, maxdeliv, counters, now,
                                   count)


def _event_ids(ids: list[bytes]) -> list[bytes]:
    if not all_valid_event_ids(ids):
        raise ReplyError(errors.BAD_EVENT_ID)
    return ids


def qack(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | None:
    """QACK queue group eventID [eventID ...]: how many live leases ended (one ID: 1
    or 0, bananaq's reply; several, as XACK: an ID given twice counts once)"""
    g = node.groups
    return g.acks.qack(client, argv[1], g.store.intern(argv[2]), _event_ids(argv[3:]), 0, now)


def qworking(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | None:
    """QWORKING queue group eventID [eventID ...] [EX seconds]: still working, extend
    the leases to EX seconds from now (default 30; never shortened): how many were
    live (one ID: 1, or 0 if the lease ran out)."""
    ext = DEFAULT_LEASE_MS
    ids = argv[3:]
    if len(ids) > 2 and ids[-2].lower() == b"ex":
        ext = parse_seconds(ids[-1], errors.EX_RANGE)
        if ext <= 0:
            raise ReplyError(errors.EX_RANGE)
        ids = ids[:-2]
    if any(i.lower() == b"ex" for i in ids[1:]):
        raise ReplyError(errors.SYNTAX)  # EX without its seconds, or not last
    g = node.groups
    return g.acks.qack(client, argv[1], g.store.intern(argv[2]), _event_ids(ids), ext, now)


def qdead(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """QDEAD queue group [REQUEUE id ...]: the group's dead letters held here as
    [id, contents, deliveries] (oldest first), or requeue them: how many were."""
    group = node.groups.store.intern(argv[2])
    if len(argv) > 3:
        if argv[3].lower() != b"requeue" or len(argv) == 4:
            raise ReplyError(errors.SYNTAX)
        return resp.integer(node.groups.dead.requeue(argv[1], group, _event_ids(argv[4:]),
                                                      now))
    dead = node.groups.dead.letters(argv[1], group)
    return b"*%d\r\n" % len(dead) + b"".join(
        event_reply(e.id, e.body, n, True) for e, n in dead)


def qnotify(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | None:
    """QNOTIFY group timeout queue [queue ...] (timeout in seconds, 0: forever)"""
    timeout = parse_seconds(argv[2], errors.NOTIFY_TIMEOUT)
    return node.groups.notify.qnotify(client, argv[1], timeout, list(dict.fromkeys(argv[3:])), now)


def qflush(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """QFLUSH queue"""
    return node.groups.repl.qflush(argv[1], now)


def _status_args(argv: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """[queue ...] [GROUPS group ...]"""
    queues: list[bytes] = []
    groups: list[bytes] = []
    seen = False
    for a in argv[1:]:
        if not seen and a.lower() == b"groups":
            seen = True
        elif seen:
            groups.append(a)
        else:
            queues.append(a)
    if seen and not groups:
        raise ReplyError(errors.SYNTAX)
    return list(dict.fromkeys(queues)), list(dict.fromkeys(groups))


def qstatus(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """QSTATUS [queue ...] [GROUPS group ...]: per queue [name, [group, stats, ...]],
    stats a flat map of bananaq's fields, then ours (GroupStats.fields)."""
    queues, groups = _status_args(argv)
    rows = node.groups.status(queues, groups, now)
    out = [b"*%d\r\n" % len(rows)]
    for name, per in rows:
        out.append(b"*2\r\n" + resp.bulk(name) + b"*%d\r\n" % (2 * len(per)))
        for g, st in per:
            fields = st.fields(now)
            out.append(resp.bulk(g) + b"*%d\r\n" % (2 * len(fields)))
            for k, v in fields:
                out.append(resp.bulk(k) + resp.integer(v))
    return b"".join(out)


def qinfo(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """QINFO [queue ...] [GROUPS group ...]: one human line per queue and group."""
    queues, groups = _status_args(argv)
    lines: list[bytes] = []
    for name, per in node.groups.status(queues, groups, now):
        for g, st in per:
            lines.append(b"%b %b " % (name, g) + b" ".join(
                b"%b:%d" % (k, v) for k, v in st.fields(now)))
    return b"*%d\r\n" % len(lines) + b"".join(resp.bulk(x) for x in lines)
