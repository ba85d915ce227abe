"""A consumer group's event as data: the one field layout the bus and the AOF share,
and its validation (as jobcodec.py is for jobs).

An event travels as a flat list (msgpack packs it), its fields in this order::

    id, queue, body, ctime, etime, holders, claims (, key)

``ctime`` is the event's creation time in ns (its ID's clock), ``etime`` when it
expires (ms), ``holders`` the node IDs holding a copy (the creator first) and
``claims`` ``[[group, claim], ...]``, each group's packed claim (groups/model.py), and
``key`` (an 8th field, only when there is one) the producer's ``QADD ... IDEMPOTENT``
key.
EVADD carries events this way (a new copy, a read repair); so does the AOF's EVENT
record, and its EVENTS record a list of them (the events one batch of commands held).
The smaller records of an event's life share their checks too: a group's claim
changed (the bus's EVSTATE item, the AOF's EVCLAIM; several, EVSTATE's and
EVCLAIMS's list), an event dropped (EVDEL) and a
queue flushed (EVFLUSH). :func:`event_fields` writes an event and :func:`parse_event` reads one back as
an :class:`EventFields`, after one set of checks for both: types, ranges, the event
and node IDs. A field list that fails raises :class:`BadEvent` saying which field
and why (the bus counts it as Malformed; the AOF scanner reports it as corruption).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, NamedTuple

from .ids import is_valid_event_id, node_ids_from_wire
from .jobcodec import MAX_IDEM_KEY

if TYPE_CHECKING:
    from .groups.model import Event

NFIELDS: Final = 7  # (8 with an IDEMPOTENT key)
MAX_KEY: Final = MAX_IDEM_KEY  # an IDEMPOTENT key's bytes (as ADDJOB's)
MAX_CLAIM: Final = (1 << 62) - 1  # a packed claim (groups/model.py: state, deliveries, deadline)
MAX_TIME: Final = (1 << 63) - 1  # ctime (ns), etime (ms)
MAX_NODES: Final = 4096  # holders of one event
MAX_NAME: Final = 1 << 16  # queue and group name bytes
MAX_CLAIMS: Final = 1000  # groups with a claim on one event, in one list
MAX_CLAIM_CHANGES: Final = 10_000  # claim changes in one list (QGET ... COUNT's most)
MAX_EVENTS: Final = 1000  # events in one list (the AOF's EVENTS record)


class BadEvent(ValueError):
    """An event's field list that breaks the layout; ``str()`` says which field and why."""


class EventFields(NamedTuple):
    """An event read from the bus or the AOF. ``holders`` is a shared tuple of shared
    node-ID strings; ``claims`` the groups' claims as (group, claim) pairs."""

    id: bytes
    queue: bytes
    body: bytes
    ctime: int
    etime: int
    holders: tuple[str, ...]
    claims: tuple[tuple[bytes, int], ...]
    key: bytes | None


_new = tuple.__new__  # EventFields(...) without its Python-level __new__


def event_fields(e: Event) -> list[object]:
    """``e`` as a field list (the bus's EVADD, the AOF's EVENT record)."""
    f = fields_of(e.id, e.queue, e.body, e.ctime, e.etime, list(e.delivered),
                  [[g, c] for g, c in e.claims.items()])
    if e.key is not None:
        f.append(e.key)
    return f


def fields_of(eid: bytes, queue: bytes, body: bytes, ctime: int, etime: int,
              holders: Sequence[str], claims: Sequence[object]) -> list[object]:
    """An event's field list from its parts (:func:`event_fields` without the object;
    no key). ``holders`` and ``claims`` as they are: a list, or for fields only ever
    encoded (msgpack packs a tuple as an array) a shared tuple."""
    return [eid, queue, body, ctime, etime, holders, claims]


def parse_claims(v: object) -> tuple[tuple[bytes, int], ...] | None:
    """``[[group, claim], ...]`` checked, as pairs; None if anything is wrong."""
    if type(v) is not list or len(v) > MAX_CLAIMS:
        return None
    out: list[tuple[bytes, int]] = []
    for c in v:
        if type(c) is not list or len(c) != 2:
            return None
        g, claim = c[0], c[1]
        if type(g) is not bytes or len(g) > MAX_NAME or type(claim) is not int \
                or not 0 <= claim <= MAX_CLAIM:
            return None
        out.append((g, claim))
    return tuple(out)


def parse_event(f: object) -> EventFields:
    """Check a field list (see the module doc) and return it by name; BadEvent if not."""
    if type(f) is not list or not NFIELDS <= len(f) <= NFIELDS + 1:
        raise BadEvent(f"event fields: expected a list of {NFIELDS} or {NFIELDS + 1} items")
    eid, queue, body, ctime, etime, holders, claims = f[:NFIELDS]
    key = f[NFIELDS] if len(f) > NFIELDS else None
    if key is not None and (type(key) is not bytes or not 0 < len(key) <= MAX_KEY):
        raise BadEvent("key: expected 1 to 256 bytes")
    if (is_valid_event_id(eid) and type(queue) is bytes and len(queue) <= MAX_NAME
            and type(body) is bytes and type(ctime) is int and 0 <= ctime <= MAX_TIME
            and type(etime) is int and 0 <= etime <= MAX_TIME and type(holders) is list
            and 0 < len(holders) <= MAX_NODES):
        nodes = node_ids_from_wire(holders)
        cl = parse_claims(claims)
        if nodes is not None and cl is not None:
            assert type(eid) is bytes
            return _new(EventFields, (eid, queue, body, ctime, etime, nodes, cl, key))
    raise BadEvent(_explain(f))


def parse_events(f: object) -> tuple[EventFields, ...]:
    """``[fields, ...]``, 1 to MAX_EVENTS events (the AOF's EVENTS record), each
    checked by :func:`parse_event`."""
    if type(f) is not list or not 0 < len(f) <= MAX_EVENTS:
        raise BadEvent(f"events: expected a list of 1 to {MAX_EVENTS}")
    return tuple([parse_event(it) for it in f])


def parse_claim_change(f: object) -> tuple[bytes, bytes, int]:
    """``[event_id, group, claim]`` (EVSTATE's item, the AOF's EVCLAIM), checked."""
    if type(f) is list and len(f) == 3 and is_valid_event_id(f[0]):
        cl = parse_claims([f[1:]])
        if cl is not None:
            eid = f[0]
            assert type(eid) is bytes
            return eid, cl[0][0], cl[0][1]
    raise BadEvent("claim change: expected [event id, group, claim]")


def parse_claim_changes(f: object) -> tuple[tuple[bytes, bytes, int], ...]:
    """``[[event_id, group, claim], ...]``, 1 to MAX_CLAIM_CHANGES of them (the bus's
    EVSTATE, the AOF's EVCLAIMS: the claims one command changed), checked."""
    if type(f) is not list or not 0 < len(f) <= MAX_CLAIM_CHANGES:
        raise BadEvent(f"claim changes: expected a list of 1 to {MAX_CLAIM_CHANGES}")
    return tuple([parse_claim_change(it) for it in f])


def parse_event_ref(f: object) -> bytes:
    """``[event_id]`` (the AOF's EVDEL), checked."""
    if type(f) is list and len(f) == 1 and is_valid_event_id(f[0]):
        eid = f[0]
        assert type(eid) is bytes
        return eid
    raise BadEvent("event drop: expected [event id]")


def parse_flush(f: object) -> tuple[bytes, int]:
    """``[queue, ctime ns]`` (the AOF's EVFLUSH: a QFLUSH of the events up to ctime),
    checked."""
    if type(f) is list and len(f) == 2:
        q, ctime = f
        if type(q) is bytes and len(q) <= MAX_NAME and type(ctime) is int \
                and 0 <= ctime <= MAX_TIME:
            return q, ctime
    raise BadEvent("queue flush: expected [queue, ctime]")


def _explain(f: list[object]) -> str:
    """What is wrong with a field list parse_event refused (for logs and check-aof)."""
    eid, queue, body, ctime, etime, holders, claims = f[:NFIELDS]
    if not is_valid_event_id(eid):
        return f"id: invalid event id {eid!r}"
    if type(queue) is not bytes or len(queue) > MAX_NAME:
        return "queue: expected bytes, at most 64 KB"
    if type(body) is not bytes:
        return f"body: expected bytes, got {type(body).__name__}"
    for name, v in (("ctime", ctime), ("etime", etime)):
        if type(v) is not int or not 0 <= v <= MAX_TIME:
            return f"{name}: expected an int in 0..{MAX_TIME}"
    if type(holders) is not list or not 0 < len(holders) <= MAX_NODES \
            or node_ids_from_wire(holders) is None:
        return "holders: expected 1 to 4096 node IDs"
    return "claims: expected [[group, claim], ...]"
