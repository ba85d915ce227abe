"""AOF codec: the append-only file of job creations and deletions, as bytes.

Pure: no I/O, no clocks.  The server appends what the encoders return; the loader
and ``disque-check-aof`` hand the file's bytes to ``scan``.

Format
======

The file is a sequence of RESP multibulk commands, so standard tools can read it,
and nothing else::

    *3\\r\\n$7\\r\\nLOADJOB\\r\\n$<n>\\r\\n<blob>\\r\\n$8\\r\\n<crc>\\r\\n
    *2\\r\\n$6\\r\\nDELJOB\\r\\n$40\\r\\n<id>\\r\\n
    *3\\r\\n$7\\r\\nOUTCOME\\r\\n$<n>\\r\\n<blob>\\r\\n$8\\r\\n<crc>\\r\\n

``blob`` is ``msgpack.packb(fields, use_bin_type=True)`` and ``crc`` its CRC32
(``zlib.crc32``) as 8 lowercase hex digits.  ``fields`` is a job in
``core.jobcodec``'s DISK layout (14 items, a 15th for an idempotency key)::

    [id, queue, body, ctime, ttl, delay, retry, repl, nacks, adeliv,
     delivered, state, qtime, flags (, idem)]

checked by ``jobcodec.parse_job``, the one validation the bus shares (types,
ranges, job and node IDs); a LOADJOB record's payload is the resulting
``JobFields``.

A ``LOADJOBS`` record is several LOADJOB records in one (the jobs one batch of
commands created or changed: one encoding and one CRC where one each cost 0.5 us a
job), framed the same, its blob a list of 1 to MAX_JOBS job field lists; its payload
the tuple of their ``JobFields``, in order (a later one of the same job wins, as a
later LOADJOB does).

An OUTCOME record is how a job ended (``core.outcomes``, kept for JOBSTATUS after
the job is gone), framed as LOADJOB with a 7-item blob::

    [id, state, queue, attempts, created_ms, finished_ms, detail]

and its payload is the ``core.outcomes.Outcome``.

A consumer group's events (``core.groups``, docs/GROUPS.md) are in the same file, framed
the same way (``*3``, the name, a blob, its CRC), one record per step of an event's
life; the blobs are checked by ``core.eventcodec``, the one validation the bus shares:

* ``EVENT``: an event held, ``[id, queue, body, ctime, etime, holders, claims]``, and
  its IDEMPOTENT key when it has one (payload: its ``EventFields``);
* ``EVENTS``: several events held, ``[[id, queue, ...], ...]``, each as EVENT's (payload:
  the tuple of their ``EventFields``): what one batch of commands held, one record and
  one CRC where one each cost 0.5 us per event (groups/persist.py);
* ``EVCLAIM``: a group's claim on it changed, ``[id, group, claim]`` (payload: the
  tuple);
* ``EVCLAIMS``: the claims one command changed (a QGET ... COUNT, a QACK of several
  IDs, an EVSTATE received), ``[[id, group, claim], ...]`` (payload: the list of
  tuples): one record, one CRC, where one each cost 0.5 us per event;
* ``EVDEL``: an event dropped before its expiry, ``[id]`` (payload: the ID);
* ``EVFLUSH``: a QFLUSH, ``[queue, ctime]``: the events of the queue created up to
  ``ctime`` (ns) are gone (payload: the tuple).

An expiry needs no record: a reload skips what expired meanwhile.

Scanning
========

``scan`` is strict: RESP framing must be canonical (no leading zeros, CRLF
everywhere, exact lengths), command names are upper case, and each record is
checked completely (CRC, blob contents, job ID).  Its verdict:

* ``"ok"``: every byte belongs to a valid record;
* ``"truncated"``: the only problem is that the bytes after the last valid
  record are a proper prefix of a valid record, what a crash in the middle of
  a write leaves behind.  Everything that can be checked on such a torn tail
  is checked: framing, command name, job ID bytes, the blob being the start of
  one msgpack 14-item list, the CRC digits written so far;
* ``"corrupt"``: a record (anywhere, the last one included) is invalid, or the
  tail cannot be the start of a valid record (garbage, NUL padding, ...).

The common case is a tight loop over well-formed records that only falls back
to the careful record parser to explain a problem; it never copies the buffer
(the blob is CRC-checked and unpacked through a memoryview).
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from zlib import crc32

import msgpack

from .eventcodec import (
    BadEvent,
    parse_claim_change,
    parse_claim_changes,
    parse_event,
    parse_event_ref,
    parse_events,
    parse_flush,
)
from .ids import is_valid_job_id
from .jobcodec import DISK, NDISK, BadJob, JobFields, parse_job
from .outcomes import MAX_DETAIL_LIMIT, STATE_NAMES, Outcome

__all__ = [
    "DELJOB",
    "EVCLAIM",
    "EVCLAIMS",
    "EVDEL",
    "EVENT",
    "EVENTS",
    "EVENT_KINDS",
    "EVFLUSH",
    "HEADS",
    "LOADJOB",
    "LOADJOBS",
    "MAX_JOBS",
    "NFIELDS",
    "OUTCOME",
    "AofFormatError",
    "ScanResult",
    "decode_loadjob_blob",
    "encode_deljob",
    "encode_event_record",
    "encode_loadjob",
    "encode_outcome",
    "scan",
    "validate_fields",
]

LOADJOB = "LOADJOB"
LOADJOBS = "LOADJOBS"
MAX_JOBS = 1000  # jobs in one LOADJOBS record
DELJOB = "DELJOB"
OUTCOME = "OUTCOME"
NFIELDS = NDISK
EVENT = "EVENT"
EVENTS = "EVENTS"
EVCLAIM = "EVCLAIM"
EVCLAIMS = "EVCLAIMS"
EVDEL = "EVDEL"
EVFLUSH = "EVFLUSH"
EVENT_KINDS = (EVENT, EVENTS, EVCLAIM, EVCLAIMS, EVDEL, EVFLUSH)

# Blob lengths have at most this many digits (a blob is under 1 GB).
_MAX_LEN_DIGITS = 9

_LOAD_HEAD = b"*3\r\n$7\r\nLOADJOB\r\n"  # 17 bytes
_DEL_HEAD = b"*2\r\n$6\r\nDELJOB\r\n"  # 16 bytes
_OUT_HEAD = b"*3\r\n$7\r\nOUTCOME\r\n"  # 17 bytes, framed as LOADJOB
_OUT_HEAD_D = _OUT_HEAD + b"$"
_OUT_FMT = _OUT_HEAD + b"$%d\r\n%b\r\n$8\r\n%08x\r\n"
_LOAD_HEAD_D = _LOAD_HEAD + b"$"  # fast path: header up to the blob length digits
_DEL_HEAD_ID = _DEL_HEAD + b"$40\r\nD-"  # fast path: header up to the ID's third byte
_LOAD_FMT = _LOAD_HEAD + b"$%d\r\n%b\r\n$8\r\n%08x\r\n"
_CRC_HEAD = b"\r\n$8\r\n"
_TAIL_FMT = _CRC_HEAD + b"%08x\r\n"  # what follows a blob: 16 bytes
_DEL_REC_LEN = len(_DEL_HEAD_ID) + 38 + 2  # 63

_JOB_ID_LEN = 40
_LENS = {b"%d" % n: n for n in range(1, 4096)}  # parsed blob lengths, in canonical form
_LOWER_HEX = frozenset(b"0123456789abcdef")
_DIGITS = frozenset(b"0123456789")
_FIXARRAY_14 = 0x90 | NFIELDS  # first byte of a valid blob
_FIXARRAY_15 = _FIXARRAY_14 + 1  # ... of one with a 15th field, the idempotency key
_OUT_NFIELDS = 7
_FIXARRAY_OUT = 0x90 | _OUT_NFIELDS  # first byte of a valid OUTCOME blob
_U32 = 0xFFFFFFFF
_I64 = 1 << 63


def _head(kind: str) -> bytes:
    """A blob record's head: ``*3``, then the kind as a bulk string."""
    return b"*3\r\n$%d\r\n%s\r\n" % (len(kind), kind.encode())


# the events' records: kind -> (head, the blob's checker, its possible first bytes:
# msgpack's fixarray of the field count; EVENTS's and EVCLAIMS's lists may be longer
# than 15)
_FIXARRAY = 0x90
_LISTS = (*range(_FIXARRAY + 1, _FIXARRAY + 16), 0xDC, 0xDD)
_EV_CHECK: dict[str, tuple[bytes, Any, tuple[int, ...]]] = {
    k: (_head(k), check, firsts)
    for k, check, firsts in (
        (EVENT, parse_event, (_FIXARRAY | 7, _FIXARRAY | 8)),
        (EVENTS, parse_events, _LISTS),
        (EVCLAIM, parse_claim_change, (_FIXARRAY | 3,)),
        (EVCLAIMS, parse_claim_changes, _LISTS),
        (EVDEL, parse_event_ref, (_FIXARRAY | 1,)), (EVFLUSH, parse_flush, (_FIXARRAY | 2,)))}
_LOADJOBS_HEAD = _head(LOADJOBS)
# the records framed as LOADJOB whose blob is a list: head -> kind (the events',
# LOADJOBS), and each kind's possible first blob bytes
_LIST_HEADS = {head: kind for kind, (head, _, _) in _EV_CHECK.items()}
_LIST_HEADS[_LOADJOBS_HEAD] = LOADJOBS
_FIRSTS = {kind: firsts for kind, (_, _, firsts) in _EV_CHECK.items()}
_FIRSTS[LOADJOBS] = _LISTS
# how every kind of record starts (disque-check-aof looks for them past a bad one)
HEADS = (_LOAD_HEAD, _DEL_HEAD, _OUT_HEAD, *_LIST_HEADS)

_unpackb = msgpack.unpackb
# One Packer for the write path: packb() builds a new one per call, which costs
# more than the packing.  Safe to share: packing lists of bytes/int/str never
# runs Python code (so never releases the GIL), and a failed pack resets it.
_pack = msgpack.Packer(use_bin_type=True).pack


class AofFormatError(ValueError):
    """Invalid AOF content; ``reason`` says what is wrong, for humans."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Incomplete(Exception):
    """The data ends inside what is so far a valid record."""


_INCOMPLETE = _Incomplete()


@dataclass(slots=True)
class ScanResult:
    """What ``scan`` found.

    ``records``: ``(offset, kind, payload)`` for each valid record in order; kind
    ``"LOADJOB"`` (payload: its JobFields), ``"DELJOB"`` (payload: the ID) or
    ``"OUTCOME"`` (payload: the ``Outcome``), or one of ``EVENT_KINDS`` (see the
    module doc).
    Empty when scanning with ``collect=False``; the counts are always set.
    ``valid_end``: offset just after the last valid record (``start`` if none).
    ``status``: ``"ok"``, ``"truncated"`` or ``"corrupt"`` (see the module doc).
    ``error_offset``: offset of the first bad or incomplete record, else None.
    ``reason``: what is wrong with it, else None.
    """

    records: list[tuple[int, str, Any]]
    valid_end: int
    status: Literal["ok", "truncated", "corrupt"]
    error_offset: int | None = None
    reason: str | None = None
    loadjobs: int = 0
    deljobs: int = 0
    outcomes: int = 0
    events: int = 0  # EVENT, EVCLAIM(S), EVDEL and EVFLUSH records


# ---------------------------------------------------------------------------
# Encoding (the write path)
# ---------------------------------------------------------------------------


def encode_loadjob(fields: list[object]) -> bytes:
    """The LOADJOB record for a job's fields (not validated: see ``validate_fields``)."""
    blob = _pack(fields)
    return _LOAD_FMT % (len(blob), blob, crc32(blob))


def encode_loadjobs(jobs: list[list[object]]) -> bytes:
    """The LOADJOBS record for several jobs' fields (1 to MAX_JOBS, in order)."""
    blob = _pack(jobs)
    return _LOADJOBS_HEAD + b"$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(blob), blob, crc32(blob))


def encode_outcome(jid: bytes, state: int, queue: bytes, attempts: int, created: int,
                   finished: int, detail: bytes) -> bytes:
    """The OUTCOME record of a finished job (not validated: see ``decode_outcome_blob``)."""
    blob = _pack([jid, state, queue, attempts, created, finished, detail])
    return _OUT_FMT % (len(blob), blob, crc32(blob))


def encode_event_record(kind: str, fields: Sequence[object]) -> bytes:
    """An event's record (``kind``, one of EVENT_KINDS) for its field list (not
    validated: written by the node from what it holds)."""
    blob = _pack(fields)
    return _EV_CHECK[kind][0] + b"$%d\r\n%b\r\n$8\r\n%08x\r\n" % (
        len(blob), blob, crc32(blob))


def encode_deljob(jid: bytes) -> bytes:
    """The DELJOB record for a job ID; raises AofFormatError for an invalid ID."""
    if len(jid) != _JOB_ID_LEN or jid[:2] != b"D-" or jid[10] != 45 or jid[35] != 45:
        raise AofFormatError(f"invalid job id {jid!r}")
    return _DEL_HEAD_ID + jid[2:] + b"\r\n"


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


def validate_fields(f: Any) -> JobFields:
    """The job of a LOADJOB blob by name (``core.jobcodec``'s DISK layout, checked
    there: one validation for the bus and the AOF); AofFormatError saying what is
    wrong otherwise."""
    try:
        return parse_job(f, DISK)
    except BadJob as e:
        raise AofFormatError(str(e)) from None


def validate_outcome(f: Any) -> Outcome:
    """The outcome of an OUTCOME blob, checked (types, ranges, the job ID, a known
    state); AofFormatError saying what is wrong otherwise."""
    if type(f) is not list or len(f) != _OUT_NFIELDS:
        raise AofFormatError(f"invalid outcome (a list of {_OUT_NFIELDS} fields expected)")
    jid, state, queue, attempts, created, finished, detail = f
    if type(jid) is not bytes or not is_valid_job_id(jid):
        raise AofFormatError("invalid outcome job id")
    if type(state) is not int or state not in STATE_NAMES:
        raise AofFormatError(f"invalid outcome state {state!r}")
    if type(queue) is not bytes:
        raise AofFormatError("invalid outcome queue")
    if type(attempts) is not int or not 0 <= attempts <= _U32:
        raise AofFormatError("invalid outcome attempts")
    for t in (created, finished):
        if type(t) is not int or not -_I64 <= t < _I64:
            raise AofFormatError("invalid outcome time")
    if type(detail) is not bytes or len(detail) > MAX_DETAIL_LIMIT:
        raise AofFormatError("invalid outcome detail")
    return Outcome(jid.decode("latin-1"), state, queue.decode("latin-1"), attempts,
                   created, finished, detail)


def decode_outcome_blob(blob: bytes | memoryview) -> Outcome:
    """Unpack and validate an OUTCOME blob; raise AofFormatError if it is invalid."""
    try:
        f = _unpackb(blob, raw=True)
    except Exception as e:  # msgpack raises several types
        raise AofFormatError(f"undecodable blob ({type(e).__name__}: {e})") from None
    return validate_outcome(f)


def _event_decoder(kind: str) -> Any:
    check = _EV_CHECK[kind][1]

    def decode(blob: bytes | memoryview) -> object:
        """Unpack and check one of the events' blobs; AofFormatError if invalid."""
        try:
            f = _unpackb(blob, raw=False)
        except Exception as e:  # msgpack raises several types
            raise AofFormatError(f"undecodable blob ({type(e).__name__}: {e})") from None
        try:
            return check(f)
        except BadEvent as e:
            raise AofFormatError(f"invalid {kind} record: {e}") from None

    return decode


def decode_loadjobs_blob(blob: bytes | memoryview) -> tuple[JobFields, ...]:
    """Unpack and validate a LOADJOBS blob; raise AofFormatError if it is invalid."""
    try:
        f = _unpackb(blob, raw=False)
    except Exception as e:  # msgpack raises several types (and UnicodeDecodeError)
        raise AofFormatError(f"undecodable blob ({type(e).__name__}: {e})") from None
    if type(f) is not list or not 0 < len(f) <= MAX_JOBS:
        raise AofFormatError(f"invalid LOADJOBS record: expected a list of 1 to {MAX_JOBS} jobs")
    try:
        return tuple([validate_fields(j) for j in f])
    except AofFormatError as e:
        raise AofFormatError(f"invalid LOADJOBS record: {e.reason}") from None


# the decoder of each kind framed as LOADJOB with a list blob
_LIST_DECODE = {k: _event_decoder(k) for k in EVENT_KINDS}
_LIST_DECODE[LOADJOBS] = decode_loadjobs_blob


def decode_loadjob_blob(blob: bytes | memoryview) -> JobFields:
    """Unpack and validate a LOADJOB blob; raise AofFormatError if it is invalid."""
    try:
        f = _unpackb(blob, raw=False)
    except Exception as e:  # msgpack raises several types (and UnicodeDecodeError)
        raise AofFormatError(f"undecodable blob ({type(e).__name__}: {e})") from None
    return validate_fields(f)


# ---------------------------------------------------------------------------
# Scanning
# ---------------------------------------------------------------------------


def scan(data: bytes, start: int = 0, *, collect: bool = True) -> ScanResult:
    """Check and decode the records of ``data[start:]`` (an AOF's contents).

    Stops at the first bad or incomplete record.  With ``collect=False`` the
    records are checked and counted but not kept (for checkers of huge files).
    Other bytes-like objects (bytearray, memoryview, mmap) are copied to bytes.

    The cyclic GC is paused while records are collected (they hold no cycles,
    and a million fresh lists would trigger many full collections, a third of
    the scan time); its previous state is restored before returning.
    """
    if type(data) is not bytes:
        data = bytes(data)
    end = len(data)
    if not 0 <= start <= end:
        raise ValueError(f"start {start} outside the data (0..{end})")
    if not (collect and gc.isenabled()):
        return _scan(data, start, end, collect)
    gc.disable()
    try:
        return _scan(data, start, end, collect)
    finally:
        gc.enable()


def _scan(data: bytes, start: int, end: int, collect: bool) -> ScanResult:
    records: list[tuple[int, str, Any]] = []
    append = records.append
    nload = ndel = nout = nev = 0
    pos = start
    status: Literal["ok", "truncated", "corrupt"] = "ok"
    error_offset = reason = None
    startswith = data.startswith
    find = data.find
    unpackb = _unpackb
    validate = validate_fields
    lens = _LENS
    with memoryview(data) as mv:
        while pos < end:
            # Fast paths: a well-formed record; anything else (including every
            # error) is left to the careful parser below.
            if startswith(_LOAD_HEAD_D, pos):
                p = pos + 18
                nl = find(b"\r\n", p, p + _MAX_LEN_DIGITS + 2)
                if nl > p:
                    n = lens.get(data[p:nl])  # canonical lengths only
                    if n is None and data[p:nl].isdigit() and data[p] != 48:
                        n = int(data[p:nl])
                    if n is not None:
                        b0 = nl + 2
                        b1 = b0 + n
                        blob = mv[b0:b1]
                        if startswith(_TAIL_FMT % crc32(blob), b1):
                            try:
                                fields = validate(unpackb(blob, raw=False))
                            except Exception:
                                pass
                            else:
                                if collect:
                                    append((pos, LOADJOB, fields))
                                nload += 1
                                pos = b1 + 16
                                continue
            elif startswith(_OUT_HEAD_D, pos):
                try:
                    nxt, kind, payload = _parse_blob_record(data, mv, pos + 17, end,
                                                            OUTCOME, decode_outcome_blob)
                except (_Incomplete, AofFormatError):
                    pass  # the careful parser below says what is wrong
                else:
                    if collect:
                        append((pos, OUTCOME, payload))
                    nout += 1
                    pos = nxt
                    continue
            elif startswith(_DEL_HEAD_ID, pos):
                q = pos + _DEL_REC_LEN
                if (
                    q <= end
                    and data[pos + 31] == 45
                    and data[pos + 56] == 45
                    and data[q - 2 : q] == b"\r\n"
                ):
                    if collect:
                        append((pos, DELJOB, data[pos + 21 : pos + 61]))
                    ndel += 1
                    pos = q
                    continue
            try:
                nxt, kind, payload = _parse_record(data, mv, pos, end)
            except _Incomplete:
                status, error_offset, reason = "truncated", pos, "incomplete record"
                break
            except AofFormatError as e:
                status, error_offset, reason = "corrupt", pos, e.reason
                break
            # The fast paths take every valid record; this keeps the result
            # right should they ever be stricter than the parser.
            if collect:
                append((pos, kind, payload))
            if kind in (LOADJOB, LOADJOBS):
                nload += 1
            elif kind == OUTCOME:
                nout += 1
            elif kind == DELJOB:
                ndel += 1
            else:
                nev += 1
            pos = nxt
    return ScanResult(records, pos, status, error_offset, reason, nload, ndel, nout, nev)


def _show(b: bytes) -> str:
    """A short printable rendering of some bytes for an error message."""
    s = b[:32].decode("ascii", "backslashreplace")
    s = s.replace("\r", "\\r").replace("\n", "\\n").replace("\0", "\\x00")
    return s + ("..." if len(b) > 32 else "")


def _got(data: bytes, p: int) -> str:
    return f"'{_show(data[p : p + 1])}'"


def _parse_record(data: bytes, mv: memoryview, pos: int, end: int) -> tuple[int, str, Any]:
    """Parse the record at ``pos`` strictly.

    Returns ``(next offset, kind, payload)``; raises ``_Incomplete`` if the data
    ends and what is there is a proper prefix of a valid record, AofFormatError
    (with the reason) otherwise.
    """
    avail = end - pos
    for head in HEADS:
        if avail < len(head):
            if head.startswith(data[pos:end]):
                raise _INCOMPLETE
        elif data.startswith(head, pos):
            break
    else:
        raise _diagnose_head(data, pos, end)
    if head is _DEL_HEAD:
        return _parse_deljob(data, pos + len(_DEL_HEAD), end)
    if head is _OUT_HEAD:
        return _parse_blob_record(data, mv, pos + len(_OUT_HEAD), end, OUTCOME,
                                  decode_outcome_blob)
    kind = _LIST_HEADS.get(head)
    if kind is not None:
        return _parse_blob_record(data, mv, pos + len(head), end, kind, _LIST_DECODE[kind])
    return _parse_blob_record(data, mv, pos + len(_LOAD_HEAD), end, LOADJOB,
                              decode_loadjob_blob)


def _parse_deljob(data: bytes, p: int, end: int) -> tuple[int, str, bytes]:
    hdr = b"$40\r\n"
    got = data[p : p + len(hdr)]
    if got != hdr:
        if hdr.startswith(got):
            raise _INCOMPLETE
        if got[:1] != b"$":
            raise AofFormatError(f"expected '$', got {_got(data, p)}")
        raise AofFormatError("invalid job id length (DELJOB ids are 40 bytes)")
    p += len(hdr)
    jid = data[p : p + _JOB_ID_LEN]
    if (
        jid[:2] != b"D-"[: len(jid)]
        or (len(jid) > 10 and jid[10] != 45)
        or (len(jid) > 35 and jid[35] != 45)
    ):
        raise AofFormatError(f"invalid job id '{_show(jid)}'")
    p += _JOB_ID_LEN
    crlf = data[p : p + 2]
    if crlf != b"\r\n":
        if p + 2 > end and b"\r\n".startswith(crlf):
            raise _INCOMPLETE
        raise AofFormatError("invalid job id length (no CRLF after 40 bytes)")
    return p + 2, DELJOB, jid


def _parse_blob_record(data: bytes, mv: memoryview, p: int, end: int, kind: str,
                       decode: Any) -> tuple[int, str, Any]:
    """The rest of a LOADJOB or OUTCOME record after its head: blob, CRC."""
    # "$<n>\r\n"
    if p >= end:
        raise _INCOMPLETE
    if data[p] != 36:
        raise AofFormatError(f"expected '$', got {_got(data, p)}")
    q = p + 1
    while q < end and data[q] in _DIGITS and q - p <= _MAX_LEN_DIGITS:
        q += 1
    digits = data[p + 1 : q]
    if len(digits) > _MAX_LEN_DIGITS or digits[:1] == b"0":
        raise AofFormatError("invalid blob length")
    if q == end:
        raise _INCOMPLETE
    if data[q] != 13 or not digits:
        raise AofFormatError("invalid blob length")
    if q + 1 == end:
        raise _INCOMPLETE
    if data[q + 1] != 10:
        raise AofFormatError("invalid blob length (no CRLF)")
    b0 = q + 2
    b1 = b0 + int(digits)
    if b1 > end:
        if _blob_prefix_ok(mv[b0:end], kind):
            raise _INCOMPLETE
        raise AofFormatError("invalid job blob (torn record with a bad blob)")
    blob = mv[b0:b1]
    crc = b"%08x" % crc32(blob)
    tail = data[b1 : b1 + 16]
    expected = _CRC_HEAD + crc + b"\r\n"
    if tail == expected:
        return b1 + 16, kind, decode(blob)
    if len(tail) < 16 and expected.startswith(tail):
        decode(blob)  # a torn record still needs a valid blob
        raise _INCOMPLETE
    # Explain the mismatch.
    n = min(len(tail), 6)
    if tail[:n] != _CRC_HEAD[:n]:
        if tail[:2] != b"\r\n"[: min(len(tail), 2)]:
            raise AofFormatError("blob length mismatch (no CRLF after the blob)")
        if tail[2:3] != b"$":
            raise AofFormatError(f"expected '$', got {_got(data, b1 + 2)}")
        raise AofFormatError("invalid CRC length (must be 8)")
    stored = tail[6:14]
    if not _LOWER_HEX.issuperset(stored):
        raise AofFormatError(f"invalid CRC field '{_show(stored)}' (8 lowercase hex digits)")
    if stored != crc[: len(stored)]:
        raise AofFormatError(f"CRC mismatch (stored {_show(stored)}, computed {crc.decode()})")
    raise AofFormatError("invalid CRC length (no CRLF after 8 digits)")


def _blob_prefix_ok(part: memoryview, kind: str = LOADJOB) -> bool:
    """Whether ``part`` can be the start of a msgpack-encoded 14- or 15-item list (an
    OUTCOME's: a 7-item list)."""
    if not len(part):
        return True
    firsts = _FIRSTS.get(kind)
    if firsts is not None:
        if part[0] not in firsts:
            return False
    elif kind == OUTCOME:
        if part[0] != _FIXARRAY_OUT:
            return False
    elif part[0] != _FIXARRAY_14 and part[0] != _FIXARRAY_15:
        return False
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(part), 1 << 16))
    unpacker.feed(part)
    try:
        unpacker.unpack()
    except msgpack.OutOfData:
        return True
    except Exception:
        return False
    return False  # a whole object before the declared end: trailing bytes in the blob


def _diagnose_head(data: bytes, pos: int, end: int) -> AofFormatError:
    """Why the bytes at ``pos`` do not start a LOADJOB, DELJOB or OUTCOME record."""
    if data[pos] != 42:
        return AofFormatError(
            f"not a multibulk record (starts with {_got(data, pos)}; "
            "inline commands and other data are not allowed)"
        )
    count, p = _int_line(data, pos + 1, end)
    if count is None or count < 1:
        return AofFormatError("invalid multibulk length")
    # The command name: "$<len>\r\n<name>\r\n".
    name = None
    if p < end:
        if data[p] != 36:
            return AofFormatError(f"expected '$', got {_got(data, p)}")
        n, p = _int_line(data, p + 1, end)
        if n is None or n < 0:
            return AofFormatError("invalid bulk length")
        if p + n + 2 <= end:
            if data[p + n : p + n + 2] != b"\r\n":
                return AofFormatError("bulk length mismatch (no CRLF after the command name)")
            name = bytes(data[p : p + n])
    blob_names = (b"LOADJOB", b"OUTCOME", *(k.encode() for k in EVENT_KINDS))
    if name is not None and name not in (*blob_names, b"DELJOB"):
        return AofFormatError(f"unknown command '{_show(name)}'")
    want = 3 if name in blob_names else 2 if name == b"DELJOB" else None
    if name is not None and want is not None and count != want:
        return AofFormatError(
            f"wrong number of arguments for '{name.decode()}' (got {count - 1}, expected {want - 1})"
        )
    if count not in (2, 3):
        return AofFormatError(f"wrong number of arguments ({count - 1})")
    return AofFormatError("unknown command (incomplete record with a bad name)")


def _int_line(data: bytes, p: int, end: int) -> tuple[int | None, int]:
    """Parse ``<digits>\\r\\n`` at ``p`` (``-`` allowed): ``(value, next)``, or
    ``(None, p)`` if it is not there (malformed or cut short)."""
    nl = data.find(b"\r\n", p, p + 22)
    if nl < 0:
        return None, p
    s = bytes(data[p:nl])
    body = s[1:] if s[:1] == b"-" else s
    if not body.isdigit() or (body[:1] == b"0" and len(s) > 1):
        return None, p
    return int(s), nl + 2
