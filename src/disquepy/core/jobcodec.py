"""A job as data: the one field layout the bus and the AOF share, and its validation.

A job travels as a flat list (msgpack packs it), its fields in this order::

    id, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, delivered
    [, state, qtime, flags]       on disk only (DISK): what a reload needs
    [, idem]                      the ADDJOB IDEMPOTENT key, when the job has one

The bus (REPLJOB, YOURJOBS) carries the 11 shared fields; an AOF record (LOADJOB)
adds the job's state, its next queue time and its flags, so a reload knows whether
the job was queued or delivered. :func:`job_fields` writes a job in either mode and
:func:`parse_job` reads one back as a :class:`JobFields`, by name, after one set of
checks for both: types, the ranges a peer or a file may give (past them a value is a
forgery or corruption), job and node IDs. A field list that fails raises
:class:`BadJob` saying which field and why (the bus counts it as Malformed; the AOF
scanner reports it as corruption).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NamedTuple

from .ids import is_valid_job_id, node_ids_from_wire
from .job import ACKED, WAIT_REPL

if TYPE_CHECKING:
    from .job import Job

BUS: Final = False  # mode: the 11 shared fields
DISK: Final = True  # mode: plus state, qtime, flags

NBUS: Final = 11
NDISK: Final = 14

# what a peer or a file may give: past these a value is a forgery or corruption (and a
# counter at 2**64-1 could not even be written to the AOF once incremented)
MAX_COUNTER: Final = 1 << 48  # nacks, additional deliveries
COUNTER_TOP: Final = MAX_COUNTER - 1  # where the node's counters stop (saturate)
MAX_SECONDS: Final = 1 << 32  # ttl, delay, retry (ADDJOB refuses more: one limit everywhere)
MAX_CTIME: Final = 1 << 62  # ns: the year 2116
MAX_MS: Final = 1 << 53  # qtime, absolute ms
MAX_FLAGS: Final = 1 << 16
MAX_NODES: Final = 4096  # node IDs in one list (a job's copies, a FASTACK's covered nodes)
MAX_NAME: Final = 1 << 16  # queue name bytes
MAX_IDEM_KEY: Final = 256  # longest ADDJOB IDEMPOTENT key


class BadJob(ValueError):
    """A job's field list that breaks the layout; ``str()`` says which field and why."""


class JobFields(NamedTuple):
    """A job read from the bus or the AOF. ``state``, ``qtime`` and ``flags`` are 0 for
    a job from the bus; ``idem`` is None when the job has no idempotency key;
    ``delivered`` is a shared tuple of shared node-ID strings."""

    id: bytes
    queue: bytes
    body: bytes
    ctime: int
    ttl: int
    delay: int
    retry: int
    repl: int
    nacks: int
    adeliv: int
    delivered: tuple[str, ...]
    state: int
    qtime: int
    flags: int
    idem: bytes | None


_new = tuple.__new__  # JobFields(...) without its Python-level __new__


def job_fields(job: Job, disk: bool, idem: bytes | None = None, state: int = 0,
               flags: int = 0) -> list[object]:
    """``job`` as a field list: for the bus (``disk`` False), or for an AOF record with
    the ``state`` and ``flags`` to store (a running log stores ACTIVE: see
    persistence.py). ``idem``: its idempotency key, if any."""
    f: list[object]
    if disk:  # (packed at once: the holders' tuple is written as msgpack's array)
        f = [job.id, job.queue, job.body, job.ctime, job.ttl, job.delay, job.retry,
             job.repl, job.nacks, job.adeliv, job.delivered, state, job.qtime, flags]
    else:
        f = [job.id, job.queue, job.body, job.ctime, job.ttl, job.delay, job.retry,
             job.repl, job.nacks, job.adeliv, list(job.delivered)]
    if idem is not None:
        f.append(idem)
    return f


def parse_job(f: object, disk: bool) -> JobFields:
    """Check a field list (see the module doc) and return it by name; BadJob if not."""
    n = NDISK if disk else NBUS
    if type(f) is not list or not n <= len(f) <= n + 1:
        raise BadJob(f"job fields: expected a list of {n} items ({n + 1} with an "
                     "idempotency key)")
    jid, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv, deliv = f[:NBUS]
    # object, not int: compiled, an int local would coerce (False -> 0) or raise
    # TypeError on a wrong type instead of refusing it below
    state: object = 0
    qtime: object = 0
    flags: object = 0
    if disk:
        state, qtime, flags = f[NBUS:NDISK]
    idem = f[n] if len(f) > n else None
    # one expression for the common, valid case; the details only on failure
    if (type(jid) is bytes and is_valid_job_id(jid) and type(queue) is bytes
            and type(body) is bytes and type(ctime) is int and type(ttl) is int
            and type(delay) is int and type(retry) is int and type(repl) is int
            and type(nacks) is int and type(adeliv) is int and type(deliv) is list
            and type(state) is int and type(qtime) is int and type(flags) is int
            and 0 < ttl < MAX_SECONDS and 0 <= delay < MAX_SECONDS
            and 0 <= retry < MAX_SECONDS and 0 < repl < 65536
            and 0 <= nacks < MAX_COUNTER and 0 <= adeliv < MAX_COUNTER
            and 0 <= ctime < MAX_CTIME and len(queue) <= MAX_NAME
            and WAIT_REPL <= state <= ACKED and 0 <= qtime < MAX_MS
            and 0 <= flags < MAX_FLAGS and len(deliv) <= MAX_NODES
            and (idem is None or (type(idem) is bytes and 0 < len(idem) <= MAX_IDEM_KEY))):
        nodes = node_ids_from_wire(deliv)
        if nodes is not None:
            return _new(JobFields, (jid, queue, body, ctime, ttl, delay, retry, repl, nacks,
                                    adeliv, nodes, state, qtime, flags, idem))
    raise BadJob(_explain(f, disk))


_RULES: Final[tuple[tuple[int, str, int, int], ...]] = (
    (3, "ctime", 0, MAX_CTIME - 1),
    (4, "ttl", 1, MAX_SECONDS - 1),
    (5, "delay", 0, MAX_SECONDS - 1),
    (6, "retry", 0, MAX_SECONDS - 1),
    (7, "repl", 1, 65535),
    (8, "nacks", 0, MAX_COUNTER - 1),
    (9, "adeliv", 0, MAX_COUNTER - 1),
)
_DISK_RULES: Final[tuple[tuple[int, str, int, int], ...]] = (
    (11, "state", WAIT_REPL, ACKED),
    (12, "qtime", 0, MAX_MS - 1),
    (13, "flags", 0, MAX_FLAGS - 1),
)


def _explain(f: list[object], disk: bool) -> str:
    """What is wrong with a field list parse_job refused (for logs and check-aof)."""
    jid = f[0]
    if type(jid) is not bytes or not is_valid_job_id(jid):
        return f"id: invalid job id {jid!r}"
    for i, name in ((1, "queue"), (2, "body")):
        if type(f[i]) is not bytes:
            return f"{name}: expected bytes, got {type(f[i]).__name__}"
    if len(f[1]) > MAX_NAME:  # type: ignore[arg-type]
        return f"queue: longer than {MAX_NAME} bytes"
    for i, name, lo, hi in _RULES + (_DISK_RULES if disk else ()):
        v = f[i]
        if type(v) is not int:
            return f"{name}: expected int, got {type(v).__name__}"
        if not lo <= v <= hi:
            return f"{name}: {v} out of range (must be in {lo}..{hi})"
    deliv = f[10]
    if type(deliv) is not list:
        return f"delivered: expected list, got {type(deliv).__name__}"
    if len(deliv) > MAX_NODES:
        return f"delivered: more than {MAX_NODES} node IDs"
    if node_ids_from_wire(deliv) is None:
        return "delivered: invalid node ID"
    return f"idempotency key: expected 1..{MAX_IDEM_KEY} bytes"
