"""Tests for disquepy.core.aofrecords: record encoding, blob validation and the strict scanner."""

from __future__ import annotations

import zlib

import msgpack
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from disquepy.core import aofrecords as aof
from disquepy.core.aofrecords import (
    DELJOB,
    LOADJOB,
    AofFormatError,
    decode_loadjob_blob,
    encode_deljob,
    encode_loadjob,
    scan,
    validate_fields,
)
from disquepy.core.jobcodec import DISK, JobFields, parse_job

NODE_A = "0123456789abcdef0123456789abcdef01234567"
NODE_B = "fedcba9876543210fedcba9876543210fedcba98"


def jf(f: list) -> JobFields:
    """A valid field list as the scanner returns it: by name (jobcodec's DISK layout)."""
    return parse_job(f, DISK)


def jid(i: int) -> bytes:
    return b"D-%08x-%024d-%04x" % (i, i, 0x3C | 1)


def fields(i: int = 1, **changes) -> list:
    f = [
        jid(i),
        b"queue-%d" % (i % 3),
        b"body of job %d" % i,
        1_700_000_000_000_000_000 + i,  # ctime, ns
        3600,  # ttl
        0,  # delay
        300,  # retry
        2,  # repl
        0,  # nacks
        0,  # adeliv
        [NODE_A, NODE_B],  # delivered
        2,  # state
        1_700_000_000_000 + i,  # qtime, ms
        3,  # flags
    ]
    names = "id queue body ctime ttl delay retry repl nacks adeliv delivered state qtime flags"
    index = {n: k for k, n in enumerate(names.split())}
    for name, value in changes.items():
        f[index[name]] = value
    return f


def build(items: list) -> tuple[bytes, list[int], list[tuple[int, str, object]]]:
    """Encode ("L", fields) / ("D", id) items: (data, record offsets, expected records)."""
    parts, offsets, expected = [], [], []
    pos = 0
    for kind, payload in items:
        rec = encode_loadjob(payload) if kind == "L" else encode_deljob(payload)
        offsets.append(pos)
        expected.append((pos, LOADJOB, jf(payload)) if kind == "L" else (pos, DELJOB, payload))
        parts.append(rec)
        pos += len(rec)
    return b"".join(parts), offsets, expected


def sample_file(n: int = 6) -> tuple[bytes, list[int], list]:
    items = []
    for i in range(n):
        items.append(("L", fields(i)))
        if i % 2:
            items.append(("D", jid(i - 1)))
    return build(items)


def blob_record(blob: bytes, crc: bytes | None = None) -> bytes:
    """A LOADJOB record around an arbitrary blob (with its right CRC unless given)."""
    if crc is None:
        crc = b"%08x" % zlib.crc32(blob)
    return b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$8\r\n%b\r\n" % (len(blob), blob, crc)


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def test_encode_loadjob_exact_layout():
    f = fields(7)
    blob = msgpack.packb(f, use_bin_type=True)
    crc = b"%08x" % zlib.crc32(blob)
    want = b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$8\r\n%b\r\n" % (len(blob), blob, crc)
    assert encode_loadjob(f) == want
    assert crc == crc.lower() and len(crc) == 8


def test_encode_loadjob_crc_with_leading_zeros():
    # Find a blob whose CRC is below 0x10000000: it must still be 8 digits.
    for i in range(5000):
        f = fields(i)
        blob = msgpack.packb(f, use_bin_type=True)
        if zlib.crc32(blob) < 0x10000000:
            rec = encode_loadjob(f)
            assert rec.endswith(b"\r\n$8\r\n%08x\r\n" % zlib.crc32(blob))
            assert rec[-10:-2].startswith(b"0")
            assert scan(rec).status == "ok"
            return
    pytest.fail("no small CRC found")  # pragma: no cover


def test_encode_deljob_exact_layout():
    j = jid(3)
    assert encode_deljob(j) == b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + j + b"\r\n"


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        jid(1)[:39],
        jid(1) + b"x",
        b"X" + jid(1)[1:],
        jid(1)[:10] + b"x" + jid(1)[11:],
        jid(1)[:35] + b"x" + jid(1)[36:],
        jid(1).decode(),
    ],
)
def test_encode_deljob_rejects_invalid_ids(bad):
    with pytest.raises(ValueError):
        encode_deljob(bad)


def test_encode_loadjob_accepts_tuples_and_recovers_after_a_failed_pack():
    f = fields(2, delivered=(NODE_A,))
    with pytest.raises(TypeError):
        encode_loadjob([object()] * 14)
    with pytest.raises((OverflowError, ValueError, TypeError)):
        encode_loadjob(fields(2, ctime=2**70))
    rec = encode_loadjob(f)  # the shared Packer was reset after the failures
    res = scan(rec)
    assert res.status == "ok"
    assert res.records[0][2] == jf(fields(2, delivered=[NODE_A]))


# ---------------------------------------------------------------------------
# Blob decoding and validation
# ---------------------------------------------------------------------------


def test_decode_round_trip():
    f = fields(5)
    assert decode_loadjob_blob(msgpack.packb(f, use_bin_type=True)) == jf(f)
    assert decode_loadjob_blob(memoryview(msgpack.packb(f, use_bin_type=True))) == jf(f)
    got = decode_loadjob_blob(msgpack.packb(f, use_bin_type=True))
    assert (got.queue, got.ttl, got.delivered, got.state, got.idem) == (
        b"queue-2", 3600, (NODE_A, NODE_B), 2, None)


def test_decode_accepts_boundaries():
    f = fields(
        1,
        body=b"",
        queue=b"",
        ctime=0,
        ttl=1,
        repl=65535,
        state=3,
        qtime=0,
        flags=2**16 - 1,
        delivered=[],
        delay=2**32 - 1,
        retry=2**32 - 1,
        nacks=2**48 - 1,
    )
    assert decode_loadjob_blob(msgpack.packb(f, use_bin_type=True)) == jf(f)
    f = fields(1, qtime=2**53 - 1, ctime=2**62 - 1, ttl=2**32 - 1)
    assert decode_loadjob_blob(msgpack.packb(f, use_bin_type=True)) == jf(f)


BAD_FIELDS = [
    ("id", jid(1).decode(), "id"),
    ("id", jid(1)[:39], "invalid job id"),
    ("id", b"X" + jid(1)[1:], "invalid job id"),
    ("id", jid(1)[:10] + b"_" + jid(1)[11:], "invalid job id"),
    ("id", jid(1)[:35] + b"_" + jid(1)[36:], "invalid job id"),
    ("queue", "q", "queue"),
    ("queue", None, "queue"),
    ("body", 5, "body"),
    ("ctime", -1, "ctime"),
    ("ctime", 1.5, "ctime"),
    ("ttl", 0, "ttl"),
    ("ttl", -5, "ttl"),
    ("ttl", True, "ttl"),
    ("delay", -1, "delay"),
    ("delay", b"1", "delay"),
    ("retry", -1, "retry"),
    ("retry", None, "retry"),
    ("repl", 0, "repl"),
    ("repl", 65536, "repl"),
    ("nacks", -1, "nacks"),
    ("adeliv", -1, "adeliv"),
    ("adeliv", "0", "adeliv"),
    ("delivered", NODE_A, "delivered"),
    ("delivered", {"a": 1}, "delivered"),
    ("delivered", [NODE_A.encode()], "delivered"),
    ("delivered", [NODE_A[:39]], "delivered"),
    ("delivered", [NODE_A[:39] + "g"], "delivered"),
    ("delivered", [NODE_A[:19] + " " + NODE_A[20:]], "delivered"),
    ("delivered", [NODE_A[:38] + "\u00e9"], "delivered"),
    ("delivered", [None], "delivered"),
    ("state", 4, "state"),
    ("state", -1, "state"),
    ("state", False, "state"),
    ("qtime", -1, "qtime"),
    ("flags", -1, "flags"),
    ("flags", [1], "flags"),
    # the bus's ranges (one validation for both): past them a value is corruption
    ("ttl", 2**32, "ttl"),
    ("delay", 2**32, "delay"),
    ("retry", 2**63, "retry"),
    ("nacks", 2**48, "nacks"),
    ("ctime", 2**62, "ctime"),
    ("qtime", 2**53, "qtime"),
    ("flags", 2**16, "flags"),
    ("delivered", [NODE_A.upper()], "delivered"),
    ("queue", b"q" * 65537, "queue"),
]


@pytest.mark.parametrize(("name", "value", "word"), BAD_FIELDS)
def test_decode_rejects_invalid_fields(name, value, word):
    blob = msgpack.packb(fields(1, **{name: value}), use_bin_type=True)
    with pytest.raises(AofFormatError) as ei:
        decode_loadjob_blob(blob)
    assert word in ei.value.reason
    # ... and the scanner reports it as a corrupt record.
    res = scan(blob_record(blob))
    assert (res.status, res.error_offset, res.valid_end) == ("corrupt", 0, 0)
    assert word in res.reason


@pytest.mark.parametrize(
    "obj",
    [fields(1)[:13], fields(1) + [b"k", 0], {"id": 1}, 5, None, b"x" * 14, []],
)
def test_decode_rejects_wrong_shapes(obj):
    with pytest.raises(AofFormatError, match="14 items"):
        decode_loadjob_blob(msgpack.packb(obj, use_bin_type=True))


def test_fifteenth_field_is_the_idempotency_key():
    f = fields(1) + [b"batch-7/part-3/row-12"]
    rec = encode_loadjob(f)
    res = scan(rec)
    assert res.status == "ok" and res.records[0][2] == jf(f)
    assert res.records[0][2].idem == b"batch-7/part-3/row-12"
    for bad in (0, b"", b"k" * 257, "text"):
        with pytest.raises(AofFormatError, match="idempotency key"):
            decode_loadjob_blob(msgpack.packb(fields(1) + [bad], use_bin_type=True))


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\xc1",  # never used in msgpack
        msgpack.packb(fields(1), use_bin_type=True) + b"\x00",  # extra data
        msgpack.packb(fields(1), use_bin_type=True)[:-1],  # cut short
        msgpack.packb(
            fields(1, queue="\udcff".encode("utf-8", "surrogatepass")), use_bin_type=True
        ).replace(b"\xc4\x03", b"\xa3", 1),  # bad UTF-8 str
    ],
)
def test_decode_rejects_undecodable_blobs(blob):
    with pytest.raises(AofFormatError):
        decode_loadjob_blob(blob)


def test_validate_fields_direct():
    validate_fields(fields(1))
    with pytest.raises(AofFormatError):
        validate_fields(tuple(fields(1)))


# ---------------------------------------------------------------------------
# Scanning valid files
# ---------------------------------------------------------------------------


def test_scan_empty():
    res = scan(b"")
    assert (res.records, res.valid_end, res.status, res.error_offset, res.reason) == (
        [],
        0,
        "ok",
        None,
        None,
    )


def test_scan_round_trip_with_offsets():
    data, offsets, expected = sample_file()
    res = scan(data)
    assert res.status == "ok" and res.error_offset is None and res.reason is None
    assert res.valid_end == len(data)
    assert res.records == expected
    assert [r[0] for r in res.records] == offsets
    assert res.loadjobs == 6 and res.deljobs == 3
    assert all(type(r[2]) is bytes for r in res.records if r[1] == DELJOB)


def test_scan_from_a_start_offset():
    data, offsets, expected = sample_file()
    res = scan(data, offsets[3])
    assert res.status == "ok" and res.records == expected[3:]
    assert scan(data, len(data)).records == []
    assert scan(data, len(data)).valid_end == len(data)
    with pytest.raises(ValueError):
        scan(data, len(data) + 1)
    with pytest.raises(ValueError):
        scan(data, -1)


def test_scan_without_collecting_counts_the_same():
    data, _, expected = sample_file()
    res = scan(data, collect=False)
    assert res.records == [] and res.status == "ok" and res.valid_end == len(data)
    assert res.loadjobs + res.deljobs == len(expected)


def test_scan_accepts_other_buffers():
    data, _, expected = sample_file(3)
    assert scan(bytearray(data)).records == expected
    assert scan(memoryview(data)).records == expected


def test_scan_restores_the_gc_state():
    import gc

    data, _, _ = sample_file(3)
    assert gc.isenabled()
    scan(data)
    assert gc.isenabled()
    gc.disable()
    try:
        scan(data)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_scan_handles_crlf_and_record_bytes_inside_payloads():
    evil = encode_deljob(jid(9)) + b"\r\n*3\r\n$7\r\nLOADJOB\r\n"
    f = fields(1, body=evil, queue=b"\r\n")
    j = b"D-\r\n\r\n\r\n\r\n-" + b"\r\n" * 12 + b"-\r\n*2"
    assert len(j) == 40
    data, _, expected = build([("L", f), ("D", j), ("L", fields(2, body=b"x" * 70000))])
    assert scan(data).records == expected


def test_slow_parser_agrees_with_the_fast_path():
    data, offsets, expected = sample_file()
    big = encode_loadjob(fields(1, body=b"y" * 5000))  # length outside the small-length table
    data += big
    res = scan(data)
    assert res.status == "ok"
    with memoryview(data) as mv:
        for off, kind, payload in res.records:
            nxt, kind2, payload2 = aof._parse_record(data, mv, off, len(data))
            assert (kind2, payload2) == (kind, payload)
            assert nxt in [r[0] for r in res.records] + [len(data)]


# ---------------------------------------------------------------------------
# Corruption
# ---------------------------------------------------------------------------

GOOD_BLOB = msgpack.packb(fields(42), use_bin_type=True)
GOOD_REC = encode_loadjob(fields(42))
GOOD_CRC = b"%08x" % zlib.crc32(GOOD_BLOB)
BAD_CRC = b"%08x" % (zlib.crc32(GOOD_BLOB) ^ 1)
LB = len(GOOD_BLOB)

CORRUPTIONS = [
    # (name, bad record bytes, substring of the reason)
    ("inline command", b"DELJOB " + jid(1) + b"\r\n", "not a multibulk record"),
    ("stray CRLF", b"\r\n", "not a multibulk record"),
    ("NUL padding", b"\0" * 64, "not a multibulk record"),
    ("other RESP type", b"+OK\r\n", "not a multibulk record"),
    ("bad count", b"*x\r\n$6\r\nDELJOB\r\n", "invalid multibulk length"),
    ("zero count", b"*0\r\n", "invalid multibulk length"),
    ("negative count", b"*-1\r\n", "invalid multibulk length"),
    (
        "leading zero count",
        b"*02\r\n$6\r\nDELJOB\r\n$40\r\n" + jid(1) + b"\r\n",
        "invalid multibulk length",
    ),
    (
        "count without LF",
        b"*2\r$6\r\nDELJOB\r\n$40\r\n" + jid(1) + b"\r\n",
        "invalid multibulk length",
    ),
    ("not a bulk", b"*2\r\n+DELJOB\r\n", "expected '$'"),
    ("bad name length", b"*2\r\n$x\r\nDELJOB\r\n", "invalid bulk length"),
    (
        "leading zero name length",
        b"*2\r\n$06\r\nDELJOB\r\n$40\r\n" + jid(1) + b"\r\n",
        "invalid bulk length",
    ),
    (
        "name length mismatch",
        b"*2\r\n$5\r\nDELJOB\r\n$40\r\n" + jid(1) + b"\r\n",
        "bulk length mismatch",
    ),
    ("unknown command", b"*2\r\n$3\r\nFOO\r\n$3\r\nbar\r\n", "unknown command 'FOO'"),
    ("lower case", b"*2\r\n$6\r\ndeljob\r\n$40\r\n" + jid(1) + b"\r\n", "unknown command 'deljob'"),
    (
        "DELJOB arity",
        b"*3\r\n$6\r\nDELJOB\r\n$40\r\n" + jid(1) + b"\r\n$1\r\nx\r\n",
        "wrong number of arguments for 'DELJOB'",
    ),
    ("DELJOB no args", b"*1\r\n$6\r\nDELJOB\r\n", "wrong number of arguments for 'DELJOB'"),
    (
        "LOADJOB arity",
        b"*2\r\n$7\r\nLOADJOB\r\n$1\r\nx\r\n",
        "wrong number of arguments for 'LOADJOB'",
    ),
    (
        "LOADJOB extra arg",
        GOOD_REC.replace(b"*3", b"*4", 1) + b"$1\r\nx\r\n",
        "wrong number of arguments for 'LOADJOB'",
    ),
    (
        "DELJOB short id",
        b"*2\r\n$6\r\nDELJOB\r\n$39\r\n" + jid(1)[:39] + b"\r\n",
        "invalid job id length",
    ),
    (
        "DELJOB id length lies",
        b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + jid(1)[:39] + b"\r\n",
        "invalid job id length",
    ),
    (
        "DELJOB bad id",
        b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + b"X" + jid(1)[1:] + b"\r\n",
        "invalid job id",
    ),
    (
        "DELJOB bad id dash",
        b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + jid(1)[:35] + b"+" + jid(1)[36:] + b"\r\n",
        "invalid job id",
    ),
    ("DELJOB id not bulk", b"*2\r\n$6\r\nDELJOB\r\n:40\r\n", "expected '$'"),
    (
        "DELJOB no CRLF",
        b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + jid(1) + b"\n\n",
        "invalid job id length",
    ),
    ("blob not bulk", b"*3\r\n$7\r\nLOADJOB\r\n:5\r\n", "expected '$'"),
    ("blob length not digits", b"*3\r\n$7\r\nLOADJOB\r\n$1x\r\n", "invalid blob length"),
    ("blob length empty", b"*3\r\n$7\r\nLOADJOB\r\n$\r\n", "invalid blob length"),
    (
        "blob length zero",
        b"*3\r\n$7\r\nLOADJOB\r\n$0\r\n\r\n$8\r\n00000000\r\n",
        "invalid blob length",
    ),
    (
        "blob length leading zero",
        GOOD_REC.replace(b"$%d\r\n" % LB, b"$0%d\r\n" % LB, 1),
        "invalid blob length",
    ),
    ("blob length negative", b"*3\r\n$7\r\nLOADJOB\r\n$-1\r\n", "invalid blob length"),
    ("blob length too long", b"*3\r\n$7\r\nLOADJOB\r\n$1234567890\r\n", "invalid blob length"),
    (
        "blob length bare CR",
        GOOD_REC.replace(b"$%d\r\n" % LB, b"$%d\r\r" % LB, 1),
        "invalid blob length",
    ),
    (
        "blob shorter than said",
        GOOD_REC.replace(b"$%d\r\n" % LB, b"$%d\r\n" % (LB - 1), 1),
        "blob length mismatch",
    ),
    (
        "blob longer than said",
        GOOD_REC.replace(b"$%d\r\n" % LB, b"$%d\r\n" % (LB + 1), 1),
        "blob length mismatch",
    ),
    ("CRC header", GOOD_REC.replace(b"\r\n$8\r\n", b"\r\n:8\r\n"), "expected '$'"),
    (
        "CRC length",
        GOOD_REC.replace(b"\r\n$8\r\n" + GOOD_CRC, b"\r\n$9\r\n0" + GOOD_CRC),
        "invalid CRC length",
    ),
    ("CRC mismatch", GOOD_REC.replace(GOOD_CRC, BAD_CRC), "CRC mismatch"),
    (
        "CRC upper case",
        blob_record(GOOD_BLOB, GOOD_CRC.upper() if GOOD_CRC.upper() != GOOD_CRC else b"ABCDEF12"),
        "invalid CRC field",
    ),
    ("CRC not hex", blob_record(GOOD_BLOB, b"0000000g"), "invalid CRC field"),
    ("CRC decimal", blob_record(GOOD_BLOB, b"%08d" % (zlib.crc32(GOOD_BLOB) % 10**8)), "CRC"),
    ("CRC no CRLF", GOOD_REC[:-2] + b"\n\r", "invalid CRC length"),
    ("CRC too long", GOOD_REC[:-2] + b"0\r\n", "invalid CRC length"),
    ("blob not msgpack", blob_record(b"\xc1" * 10), "undecodable blob"),
    ("blob trailing data", blob_record(GOOD_BLOB + b"\x00"), "undecodable blob"),
    ("blob not a job", blob_record(msgpack.packb([1, 2, 3])), "14 items"),
    (
        "blob invalid field",
        blob_record(msgpack.packb(fields(1, repl=0), use_bin_type=True)),
        "repl",
    ),
]


@pytest.mark.parametrize(("name", "bad", "why"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
@pytest.mark.parametrize("where", ["middle", "end"])
def test_corruption_is_detected(name, bad, why, where):
    good, _, expected = build([("L", fields(1)), ("D", jid(1))])
    after = encode_loadjob(fields(2)) + encode_deljob(jid(2)) if where == "middle" else b""
    data = good + bad + after
    res = scan(data)
    assert res.status == "corrupt", res
    assert res.error_offset == len(good)
    assert res.valid_end == len(good)
    assert res.records == expected
    assert why in res.reason, res.reason
    # The corrupt record alone, at offset 0.
    res0 = scan(bad + after)
    assert (res0.status, res0.error_offset, res0.valid_end) == ("corrupt", 0, 0)


def test_flipped_body_byte_is_caught_by_the_crc():
    f = fields(3, body=b"the quick brown fox")
    data, offsets, expected = build([("L", fields(1)), ("L", f), ("D", jid(1))])
    at = data.index(b"quick")
    for flip in (0x01, 0x20, 0x80):
        bad = bytearray(data)
        bad[at] ^= flip
        res = scan(bytes(bad))
        assert res.status == "corrupt"
        assert res.error_offset == offsets[1] == res.valid_end
        assert res.reason.startswith("CRC mismatch")
        assert res.records == expected[:1]


def test_every_single_byte_change_in_a_loadjob_record_is_detected():
    data, offsets, expected = build([("L", fields(1)), ("L", fields(2)), ("D", jid(2))])
    start, stop = offsets[1], offsets[2]
    for at in range(start, stop):
        for flip in (0x01, 0x42, 0xFF):
            bad = bytearray(data)
            bad[at] ^= flip
            res = scan(bytes(bad))
            assert res.status == "corrupt", (at - start, flip)
            assert res.error_offset == start and res.records == expected[:1]


def test_every_structural_byte_change_in_a_deljob_record_is_detected():
    data, offsets, expected = build([("L", fields(1)), ("D", jid(1)), ("L", fields(2))])
    start = offsets[1]
    id_at = start + 21
    # The free characters of an ID can change into another valid ID (no CRC on DELJOB).
    structural = [
        i
        for i in range(start, offsets[2])
        if not (id_at + 2 <= i < id_at + 40) or i - id_at in (10, 35)
    ]
    for at in structural:
        bad = bytearray(data)
        bad[at] ^= 0x01
        res = scan(bytes(bad))
        assert res.status == "corrupt", at - start
        assert res.error_offset == start and res.records == expected[:1]


def test_a_corrupt_record_hides_everything_after_it():
    data, offsets, expected = sample_file()
    bad = bytearray(data)
    bad[offsets[2]] = ord("#")
    res = scan(bytes(bad))
    assert res.status == "corrupt" and res.error_offset == offsets[2]
    assert res.records == expected[:2]


# ---------------------------------------------------------------------------
# Torn tails
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "last",
    [encode_loadjob(fields(9)), encode_deljob(jid(9)), encode_loadjob(fields(9, body=b"z" * 5000))],
    ids=["loadjob", "deljob", "big-loadjob"],
)
def test_torn_tail_at_every_offset(last):
    good, _, expected = sample_file(3)
    for k in range(1, len(last)):
        res = scan(good + last[:k])
        assert res.status == "truncated", (k, res)
        assert res.valid_end == len(good) == res.error_offset
        assert res.reason == "incomplete record"
        assert res.records == expected
    assert scan(good + last).status == "ok"


def test_torn_first_record():
    rec = encode_loadjob(fields(1))
    for k in range(1, len(rec)):
        res = scan(rec[:k])
        assert (res.status, res.valid_end, res.error_offset, res.records) == (
            "truncated",
            0,
            0,
            [],
        )


TAILS_THAT_ARE_NOT_TORN_RECORDS = [
    ("newline", b"\n"),
    ("NUL bytes", b"\0\0\0\0"),
    ("count 4", b"*4"),
    ("count 1 cut", b"*1\r\n$6"),
    ("bad name prefix", b"*3\r\n$7\r\nLOADJOX"),
    ("lowercase name prefix", b"*2\r\n$6\r\ndel"),
    ("name length no command has", b"*3\r\n$4\r\n"),
    ("DELJOB arity prefix", b"*3\r\n$6\r\nDELJOB\r\n$40\r\n"),
    ("DELJOB id length prefix", b"*2\r\n$6\r\nDELJOB\r\n$41"),
    ("DELJOB id prefix", b"*2\r\n$6\r\nDELJOB\r\n$40\r\nX-"),
    ("DELJOB id dash prefix", b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + jid(1)[:10] + b"+"),
    ("blob length leading zero", b"*3\r\n$7\r\nLOADJOB\r\n$0"),
    ("blob length bare CR", b"*3\r\n$7\r\nLOADJOB\r\n$12\rx"),
    ("blob not a 14-list", b"*3\r\n$7\r\nLOADJOB\r\n$100\r\n\x93\x01"),
    ("blob invalid msgpack", b"*3\r\n$7\r\nLOADJOB\r\n$100\r\n\x9e\xc1"),
    ("blob complete object too soon", b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b" % (LB + 10, GOOD_BLOB)),
    (
        "complete blob, bad partial CRC",
        GOOD_REC[:-10] + (b"1" if GOOD_CRC[:1] != b"1" else b"2") + GOOD_CRC[1:3],
    ),
    (
        "complete blob, invalid fields",
        blob_record(msgpack.packb(fields(1, ttl=0), use_bin_type=True))[:-4],
    ),
]


@pytest.mark.parametrize(
    ("name", "tail"),
    TAILS_THAT_ARE_NOT_TORN_RECORDS,
    ids=[t[0] for t in TAILS_THAT_ARE_NOT_TORN_RECORDS],
)
def test_tail_that_cannot_be_a_torn_record_is_corrupt(name, tail):
    good, _, expected = sample_file(2)
    res = scan(good + tail)
    assert res.status == "corrupt", res
    assert res.error_offset == len(good) == res.valid_end
    assert res.records == expected


def test_complete_but_invalid_last_record_is_corrupt_not_truncated():
    good, _, _ = sample_file(2)
    res = scan(good + GOOD_REC.replace(GOOD_CRC, BAD_CRC))
    assert res.status == "corrupt" and res.reason.startswith("CRC mismatch")


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

hexid = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)
job_ids = st.builds(
    lambda node, mid, ttl: b"D-" + node + b"-" + mid + b"-" + ttl,
    st.binary(min_size=8, max_size=8),
    st.binary(min_size=24, max_size=24),
    st.binary(min_size=4, max_size=4),
)
u32 = st.integers(0, 2**32 - 1)
u48 = st.integers(0, 2**48 - 1)
job_fields = st.builds(
    lambda *f: list(f),
    job_ids,
    st.binary(max_size=64),
    st.binary(max_size=600),
    st.integers(0, 2**62 - 1),
    st.integers(1, 2**32 - 1),
    u32,
    u32,
    st.integers(1, 65535),
    u48,
    u48,
    st.lists(hexid, max_size=5),
    st.integers(0, 3),
    st.integers(0, 2**53 - 1),
    st.integers(0, 2**16 - 1),
)
items = st.lists(
    st.one_of(st.tuples(st.just("L"), job_fields), st.tuples(st.just("D"), job_ids)),
    min_size=1,
    max_size=12,
)


@given(job_fields)
def test_property_fields_round_trip(f):
    rec = encode_loadjob(f)
    res = scan(rec)
    assert res.status == "ok" and res.valid_end == len(rec)
    assert res.records == [(0, LOADJOB, jf(f))]
    assert decode_loadjob_blob(msgpack.packb(f, use_bin_type=True)) == jf(f)


@given(items)
def test_property_file_round_trip(its):
    data, offsets, expected = build(its)
    res = scan(data)
    assert res.status == "ok" and res.valid_end == len(data)
    assert res.records == expected
    for k, off in enumerate(offsets):
        assert scan(data, off).records == [(o, kind, p) for o, kind, p in expected[k:]]


@given(items, st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_property_random_truncation(its, draw):
    data, offsets, expected = build(its)
    cut = draw.draw(st.integers(0, len(data)))
    res = scan(data[:cut])
    boundaries = offsets + [len(data)]
    assert res.valid_end in boundaries
    assert res.valid_end <= cut
    if cut in boundaries:
        assert res.status == "ok" and res.valid_end == cut
    else:
        assert res.status == "truncated" and res.error_offset == res.valid_end
        assert res.valid_end == max(b for b in boundaries if b <= cut)
    assert res.records == [r for r in expected if r[0] < res.valid_end]


@given(items, st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_property_single_byte_damage(its, draw):
    data, offsets, expected = build(its)
    at = draw.draw(st.integers(0, len(data) - 1))
    value = draw.draw(st.integers(0, 255))
    assume(data[at] != value)
    bad = data[:at] + bytes((value,)) + data[at + 1 :]
    res = scan(bad)  # never raises
    k = max(i for i, o in enumerate(offsets) if o <= at)  # the damaged record
    assert res.records[:k] == expected[:k]
    if res.status == "ok":
        # Only a DELJOB id's free characters can change into another valid record
        # (DELJOB has no CRC); all the other records are untouched.
        assert its[k][0] == "D"
        assert len(res.records) == len(expected) and res.valid_end == len(bad)
        assert res.records[k + 1 :] == expected[k + 1 :]
    else:
        assert res.status == "corrupt" and res.error_offset == offsets[k] == res.valid_end


@given(st.binary(max_size=200))
def test_property_scan_never_raises_on_garbage(blob):
    for data in (
        blob,
        GOOD_REC + blob,
        b"*3\r\n$7\r\nLOADJOB\r\n" + blob,
        b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + blob,
    ):
        res = scan(data)
        assert res.status in ("ok", "truncated", "corrupt")
        assert (res.error_offset is None) == (res.status == "ok")
        assert res.valid_end == (len(data) if res.status == "ok" else res.error_offset)


# ---------------------------------------------------------------------------
# OUTCOME records (how a finished job ended, for JOBSTATUS after a restart)
# ---------------------------------------------------------------------------


def outcome_rec(i: int = 1, state: int = 1, detail: bytes = b"result") -> bytes:
    return aof.encode_outcome(jid(i), state, b"q", 2, 1_700_000_000_000, 1_700_000_001_000,
                              detail)


def test_outcome_round_trip_between_jobs():
    from disquepy.core.outcomes import Outcome

    data = encode_loadjob(fields(1)) + outcome_rec(1) + encode_deljob(jid(1)) + outcome_rec(
        2, 2, b"")
    res = scan(data)
    assert res.status == "ok" and (res.loadjobs, res.deljobs, res.outcomes) == (1, 1, 2)
    kinds = [k for _, k, _ in res.records]
    assert kinds == ["LOADJOB", "OUTCOME", "DELJOB", "OUTCOME"]
    assert res.records[1][2] == Outcome(jid(1).decode(), 1, "q", 2, 1_700_000_000_000,
                                        1_700_000_001_000, b"result")
    with memoryview(data) as mv:  # the careful parser agrees with the fast path
        for off, kind, payload in res.records:
            assert aof._parse_record(data, mv, off, len(data))[1:] == (kind, payload)


def test_outcome_torn_tail_and_corruption():
    good = encode_loadjob(fields(1))
    last = outcome_rec(3)
    for k in range(1, len(last)):
        res = scan(good + last[:k])
        assert (res.status, res.valid_end) == ("truncated", len(good)), k
    bad_state = aof._OUT_FMT % (lambda b: (len(b), b, zlib.crc32(b)))(
        msgpack.packb([jid(1), 9, b"q", 1, 0, 0, b""]))
    res = scan(good + bad_state)
    assert res.status == "corrupt" and "state" in res.reason
    flipped = bytearray(last)
    flipped[30] ^= 1
    assert scan(good + bytes(flipped)).status == "corrupt"


# ------------------------------------------------------------ consumer groups' events
EVENT_FIELDS = [b"18ec3471e00ecb40-18300b3e", b"q", b"body", 1_700_000_000_000_000_000,
                1_700_000_060_000, [NODE_A, NODE_B], [[b"g", 7]]]


def event_records() -> bytes:
    return b"".join([
        aof.encode_event_record(aof.EVENT, EVENT_FIELDS),
        aof.encode_event_record(aof.EVCLAIM, [EVENT_FIELDS[0], b"g", 1 << 20]),
        aof.encode_event_record(aof.EVCLAIMS, [[EVENT_FIELDS[0], b"g", 3 << 20],
                                               [EVENT_FIELDS[0], b"h", 1]]),
        aof.encode_event_record(aof.EVDEL, [EVENT_FIELDS[0]]),
        aof.encode_event_record(aof.EVFLUSH, [b"q", 5]),
    ])


def test_event_records_scan_back_with_the_jobs():
    data = encode_loadjob(fields(1)) + event_records() + encode_deljob(jid(1))
    res = scan(data)
    assert res.status == "ok" and (res.loadjobs, res.deljobs, res.events) == (1, 1, 5)
    kinds = [k for _, k, _ in res.records]
    assert kinds == [LOADJOB, aof.EVENT, aof.EVCLAIM, aof.EVCLAIMS, aof.EVDEL, aof.EVFLUSH,
                     DELJOB]
    ev = res.records[1][2]
    assert ev.id == EVENT_FIELDS[0] and ev.holders == (NODE_A, NODE_B)
    assert ev.claims == ((b"g", 7),)
    assert res.records[2][2] == (EVENT_FIELDS[0], b"g", 1 << 20)
    assert res.records[3][2] == ((EVENT_FIELDS[0], b"g", 3 << 20), (EVENT_FIELDS[0], b"h", 1))
    assert res.records[4][2] == EVENT_FIELDS[0] and res.records[5][2] == (b"q", 5)


def test_event_records_torn_and_corrupt():
    data = event_records()
    for cut in range(1, len(data)):
        res = scan(data[:cut])
        assert res.status in ("ok", "truncated"), (cut, res.reason)
    bad = bytearray(data)
    bad[40] ^= 0x01  # inside the EVENT record's blob: its CRC no longer matches
    res = scan(bytes(bad))
    assert res.status == "corrupt" and res.error_offset == 0
    # a record whose blob breaks the event layout is named, CRC or not
    wrong = aof.encode_event_record(aof.EVENT, [b"not-an-id", *EVENT_FIELDS[1:]])
    res = scan(wrong)
    assert res.status == "corrupt" and "invalid EVENT record" in res.reason


def test_evclaims_records_long_lists_and_bad_items():
    """EVCLAIMS (the claims of one QGET ... COUNT or QACK of several IDs): lists past
    msgpack's fixarray scan back, torn anywhere they read as a torn tail, and a bad
    item is named."""
    many = [[EVENT_FIELDS[0], b"g", n] for n in range(300)]  # array16
    data = aof.encode_event_record(aof.EVCLAIMS, many)
    res = scan(data)
    assert res.status == "ok" and len(res.records[0][2]) == 300
    for cut in range(1, len(data), 37):
        assert scan(data[:cut]).status == "truncated", cut
    wrong = aof.encode_event_record(aof.EVCLAIMS, [many[0], [b"not-an-id", b"g", 1]])
    res = scan(wrong)
    assert res.status == "corrupt" and "invalid EVCLAIMS record" in res.reason
    assert scan(aof.encode_event_record(aof.EVCLAIMS, [])).status == "corrupt"


def test_events_records_of_a_batch():
    """EVENTS (the events one batch of commands held): scans back as their fields in
    order, past msgpack's fixarray too; torn anywhere it reads as a torn tail; a bad
    event, an empty list or one past MAX_EVENTS is corruption, named."""
    from disquepy.core.eventcodec import MAX_EVENTS

    def ev(n: int) -> list[object]:
        return [b"18ec3471e00ecb40-%08x" % n, *EVENT_FIELDS[1:]]

    for n in (2, 20):  # fixarray, array16
        data = aof.encode_event_record(aof.EVENTS, [ev(i) for i in range(n)])
        res = scan(data)
        assert res.status == "ok" and res.events == 1 and res.records[0][1] == aof.EVENTS
        got = res.records[0][2]
        assert [f.id for f in got] == [ev(i)[0] for i in range(n)]
        assert got[1].holders == (NODE_A, NODE_B) and got[1].claims == ((b"g", 7),)
        with memoryview(data) as mv:  # the careful parser agrees with the fast path
            assert aof._parse_record(data, mv, 0, len(data))[1:] == (aof.EVENTS, got)
        for cut in range(1, len(data), 29):
            assert scan(data[:cut]).status == "truncated", (n, cut)
    wrong = aof.encode_event_record(aof.EVENTS, [ev(0), [b"not-an-id", *EVENT_FIELDS[1:]]])
    res = scan(wrong)
    assert res.status == "corrupt" and "invalid EVENTS record" in res.reason
    for bad in ([], [ev(0)] * (MAX_EVENTS + 1)):
        res = scan(aof.encode_event_record(aof.EVENTS, bad))
        assert res.status == "corrupt" and "invalid EVENTS record" in res.reason


def test_loadjobs_records_of_a_batch():
    """LOADJOBS (the jobs one batch of commands created or changed): scans back as
    their fields in order, counted with the LOADJOBs; torn anywhere it reads as a torn
    tail; a bad job, an empty list or one past MAX_JOBS is corruption, named."""
    for n in (2, 20):  # fixarray, array16
        data = aof.encode_loadjobs([fields(i) for i in range(n)]) + encode_deljob(jid(0))
        res = scan(data)
        assert res.status == "ok" and (res.loadjobs, res.deljobs) == (1, 1)
        assert [k for _, k, _ in res.records] == [aof.LOADJOBS, DELJOB]
        got = res.records[0][2]
        assert [f.id for f in got] == [jid(i) for i in range(n)]
        with memoryview(data) as mv:  # the careful parser agrees with the fast path
            assert aof._parse_record(data, mv, 0, len(data))[1:] == (aof.LOADJOBS, got)
        rec = aof.encode_loadjobs([fields(i) for i in range(n)])
        for cut in range(1, len(rec), 31):
            assert scan(rec[:cut]).status == "truncated", (n, cut)
    bad = fields(1)
    bad[0] = b"not-a-job-id"
    res = scan(aof.encode_loadjobs([fields(0), bad]))
    assert res.status == "corrupt" and "invalid LOADJOBS record" in res.reason
    for wrong in ([], [fields(0)] * (aof.MAX_JOBS + 1)):
        res = scan(aof.encode_loadjobs(wrong))
        assert res.status == "corrupt" and "invalid LOADJOBS record" in res.reason
