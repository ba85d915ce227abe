"""Fuzzing of the three decoders that face the network and the disk, and of what the
core does with what they let through (issue #18, item 5):

- client requests: every RESP reader (C ``_creader``, hiredis, pure Python) through
  ``resp.make_reader``'s API, with and without tight limits;
- bus frames: ``codec.bus`` then ``core.messages`` then the node's handlers, from
  garbage to valid messages with one field replaced (a job counter at 2**64-1 ...);
- AOF records: ``core.aofrecords.scan`` then ``Node.aof.load``;
- the cluster-secret handshake and the MAC'd records after it (``server.busauth``):
  changed anywhere, garbage, any chunking.

The properties: no decoder raises anything but its own error; readers agree; nothing
a peer or a file sends makes the node raise, and every job it then holds can be
written to the AOF and read back (what a counter at 2**64-1 once broke).

Budget: ``DISQUEPY_FUZZ_EXAMPLES`` examples per test (default 150: seconds in
``make test``); ``make fuzz`` runs them with far more and prints the case counts.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodeharness import Harness
from test_resp import READERS, _split_points, parse_chunks

from disquepy.codec.bus import BusProtocolError, FrameReader, encode_frame
from disquepy.codec.resp import ProtocolError, QueryBufferLimitError, make_reader
from disquepy.core import aofrecords as aof
from disquepy.core import messages as M
from disquepy.core.jobcodec import BUS, DISK, job_fields
from disquepy.server.busauth import Handshake, HandshakeError, RecordError, Sealer, Unsealer

EXAMPLES = int(os.environ.get("DISQUEPY_FUZZ_EXAMPLES", "150"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
CASES: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report():
    """With DISQUEPY_FUZZ_REPORT=path, the cases run per target go there (make fuzz)."""
    yield
    path = os.environ.get("DISQUEPY_FUZZ_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(dict(CASES), f)


# ------------------------------------------------------------ client requests
_lengths = [b"-1", b"-5", b"0", b"1", b"3", b"99999999999999999999", b"9223372036854775808",
            b"1048577", b"abc", b"+3", b" 3", b"3 ", b"0x10", b""]
_resp_fragment = st.one_of(
    st.binary(max_size=8),
    st.sampled_from([b"*", b"$", b"\r\n", b"\r", b"\n", b"PING", b"ADDJOB", b"GETJOB",
                     b"FROM", b"q", b" ", b'"', b"\x00", b"x" * 70]),
    st.sampled_from(_lengths).map(lambda n: b"*" + n + b"\r\n"),
    st.sampled_from(_lengths).map(lambda n: b"$" + n + b"\r\n"),
)
_limits = st.sampled_from([
    {},
    {"max_bulk_len": 5, "max_multibulk": 3},
    {"max_inline": 8, "max_bulk_len": 5, "max_multibulk": 3},
    {"max_multibulk": 1, "max_bulk_len": 0},
])


@fuzz
@given(st.lists(_resp_fragment, max_size=60).map(b"".join), _limits, st.data())
def test_fuzz_resp_readers_agree_and_keep_their_limits(stream, limits, data):
    CASES["resp"] += 1
    chunks = data.draw(_split_points(stream))
    outcomes = [parse_chunks(cls, chunks, **limits) for cls in READERS]
    assert all(o == outcomes[0] for o in outcomes), outcomes
    cmds, err, _ = outcomes[0]
    longest = max(limits.get("max_bulk_len", 1 << 29), limits.get("max_inline", 1 << 16))
    for argv in cmds:
        # (an inline command is bounded by its line: at most half of max_inline words)
        assert len(argv) <= max(limits.get("max_multibulk", 1 << 20),
                                limits.get("max_inline", 1 << 16) // 2 + 1)
        assert all(type(a) is bytes and len(a) <= longest for a in argv)
    if err is not None:  # an error is for good: gets() raises it again
        r = make_reader(**limits)
        with pytest.raises(ProtocolError):
            for c in chunks:
                r.feed(c)
                while r.gets() is not False:
                    pass
        with pytest.raises(ProtocolError):
            r.gets()


@fuzz
@given(st.lists(_resp_fragment, max_size=40).map(b"".join), st.booleans(),
       st.integers(1, 64), st.data())
def test_fuzz_resp_query_buffer_limit_holds(stream, pure, limit, data):
    """Whatever arrives, a reader never holds more than its query buffer limit."""
    CASES["resp-qbuf"] += 1
    r = make_reader(pure=pure, query_buffer_limit=limit)
    for chunk in data.draw(_split_points(stream)):
        try:
            r.feed(chunk)
            while r.gets() is not False:
                pass
        except QueryBufferLimitError:
            break
        except ProtocolError:
            break
        assert len(r) <= limit


# ------------------------------------------------------------------ bus
_PEER = "c" * 40
_ints = st.one_of(
    st.sampled_from([0, 1, -1, 2, 3, 255, 65535, 65536, 2**31, 2**32 - 1, 2**32, 2**48 - 1,
                     2**48, 2**53, 2**62, 2**63 - 1, 2**64 - 1, -(2**63)]),
    st.integers(-(2**63), 2**64 - 1),  # what msgpack can carry
)
_scalars = st.one_of(st.none(), st.booleans(), _ints, st.binary(max_size=48),
                     st.text(max_size=48), st.just(_PEER), st.floats(allow_nan=False))
_values = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=5), max_leaves=20)


def _job_wire(seed: int) -> list:
    h = Harness(seed=seed + 11)
    r = h.node.store.create_job(b"q", b"body", 3600, 1, 0, 1, 0, True, 0, h.client, h.now)
    return job_fields(h.node.jobs.get(r[1:-2]), BUS)


_WIRE = _job_wire(1)
_JID = _WIRE[0]
# valid messages of every type from _PEER (fields after the header)
_TEMPLATES = {
    M.PING: [[], "127.0.0.1"], M.PONG: [[], "127.0.0.1"], M.MEET: [[], "127.0.0.1"],
    M.FAIL: ["d" * 40], M.REPLJOB: [_WIRE], M.GOTJOB: [_JID], M.ENQUEUE: [_JID],
    M.WILLQUEUE: [_JID], M.QUEUED: [_JID, 2], M.SETACK: [_JID, 1], M.GOTACK: [_JID, True],
    M.DELJOB: [_JID], M.WORKING: [_JID], M.NEEDJOBS: [b"q", 3], M.YOURJOBS: [[_WIRE]],
    M.PAUSE: [b"q", 1], M.OUTCOME: [_JID, 1, b"why"],
}


@st.composite
def _message(draw):
    """A valid message, one with a field (or a job field) replaced, or noise."""
    kind = draw(st.integers(0, 9))
    mtype = draw(st.sampled_from(sorted(_TEMPLATES)))
    fields = [list(f) if type(f) is list else f for f in _TEMPLATES[mtype]]
    if mtype in (M.REPLJOB, M.YOURJOBS) and kind < 5:  # a job with one bad field
        job = list(_WIRE)
        job[draw(st.integers(0, len(job) - 1))] = draw(_values)
        fields = [job] if mtype == M.REPLJOB else [[job]]
    elif kind < 7 and fields:
        fields[draw(st.integers(0, len(fields) - 1))] = draw(_values)
    elif kind == 7:
        fields = draw(st.lists(_values, max_size=4))
    header = [mtype, _PEER, 7000, 0]
    if kind == 8:
        header[draw(st.integers(0, 3))] = draw(_values)
    if kind == 9:
        return draw(_values)
    return header + fields


def _fresh_node():
    h = Harness()
    h.node.aof.on = True
    h.node.handle_message([M.MEET, _PEER, 7000, 0, [], "127.0.0.1"], "127.0.0.1", h.now)
    return h


def _all_jobs_storable(h) -> None:
    """Every job the node holds writes to the AOF and loads back as it was."""
    h.drain()
    data = b"".join(h.shell.records) + b"".join(
        r for r in (h.node.aof.snapshot(j) for j in h.node.jobs.values()) if r)
    res = aof.scan(data)
    assert res.status == "ok", res.reason
    fresh = Harness()
    fresh.node.aof.load(res.records, h.now, enqueue=False)
    for job in h.node.jobs.values():  # (the AOF's fields are for msgpack: packed first)
        assert aof.decode_loadjob_blob(msgpack.packb(job_fields(job, DISK))).id == job.id


@fuzz
@given(st.lists(_message(), min_size=1, max_size=8), st.booleans())
def test_fuzz_bus_messages_never_break_the_node(msgs, batched):
    CASES["bus-messages"] += 1
    h = _fresh_node()
    frame = encode_frame([M.BATCH, _PEER, 7000, 0, msgs] if batched else msgs[0])
    r = FrameReader()
    r.feed(frame)
    try:
        msg = r.gets()
    except BusProtocolError:
        return  # refused whole at the codec: fine
    h.node.handle_message(msg, "127.0.0.1", h.now)
    h.advance(5_000)  # retries due, timers: what a bad counter once broke
    _all_jobs_storable(h)


@fuzz
@given(st.lists(st.one_of(st.binary(max_size=12),
                          st.sampled_from([b"\x00\x00\x00\x05", b"\xff\xff\xff\xff",
                                           b"\x00\x00\x00\x00", b"DQBA\x01", b"\x94",
                                           encode_frame(_TEMPLATES[M.PING])])),
                max_size=12).map(b"".join), st.data())
def test_fuzz_bus_frame_reader(stream, data):
    """Bytes in any chunks: messages (lists) or BusProtocolError, never anything else,
    and never more buffered than one frame's limit."""
    CASES["bus-frames"] += 1
    r = FrameReader(max_frame=64)
    h = _fresh_node()
    for chunk in data.draw(_split_points(stream)):
        r.feed(chunk)
        try:
            while (msg := r.gets()) is not False:
                assert type(msg) is list
                h.node.handle_message(msg, "127.0.0.1", h.now)
        except BusProtocolError:
            return
        assert len(r) <= 64 + 4 or r.pending_frame() <= 68


# ------------------------------------------------- bus handshake and records
_SECRET = b"fuzz-secret-0123456789"
_IDS = ("a" * 40, "b" * 40)


def _exchange(connector: Handshake, acceptor: Handshake, mutate) -> tuple[bool, bool]:
    """Run a handshake whose bytes pass through ``mutate(direction, step, data)``;
    (connector done, acceptor done). HandshakeError ends it."""
    try:
        proof_c = connector.feed(mutate(0, 0, acceptor.hello()))
        acceptor.feed(mutate(1, 0, connector.hello()))
        proof_a = acceptor.feed(mutate(1, 1, proof_c)) if proof_c else b""
        if proof_a:
            connector.feed(mutate(0, 1, proof_a))
    except HandshakeError:
        pass
    return connector.done, acceptor.done


@fuzz
@given(st.integers(0, 1), st.integers(0, 1), st.integers(0, 200), st.integers(0, 255),
       st.booleans())
def test_fuzz_bus_handshake_changed_anywhere_fails(direction, step, at, value,
                                                   other_binding):
    """A handshake with one byte changed anywhere, in either direction, or run over
    another TLS channel on one side, never authenticates a side that checks it;
    untouched, both sides are proven."""
    CASES["bus-handshake"] += 1

    def flip(d: int, n: int, data: bytes) -> bytes:
        if (d, n) != (direction, step) or not data:
            return data
        i = at % len(data)
        return data[:i] + bytes([value if value != data[i] else value ^ 1]) + data[i + 1:]

    c = Handshake(_SECRET, True, _IDS[0], _IDS[1])
    a = Handshake(_SECRET, False, _IDS[1], binding=b"other" if other_binding else b"")
    c_done, a_done = _exchange(c, a, flip)
    assert not c_done  # no change gets past the connector: it checks the last proof
    # the acceptor checked everything but its own proof, the last step
    assert not a_done or ((direction, step) == (0, 1) and not other_binding)
    ok_c, ok_a = _exchange(Handshake(_SECRET, True, _IDS[0], _IDS[1]),
                           Handshake(_SECRET, False, _IDS[1]), lambda d, n, x: x)
    assert ok_c and ok_a


@fuzz
@given(st.binary(max_size=300), st.data())
def test_fuzz_bus_handshake_garbage(stream, data):
    """Bytes in any chunks to either side: HandshakeError or waiting, never done."""
    CASES["bus-handshake-garbage"] += 1
    for connector in (True, False):
        hs = Handshake(_SECRET, connector, _IDS[0], _IDS[1] if connector else None)
        try:
            for chunk in data.draw(_split_points(stream)):
                hs.feed(chunk)
        except HandshakeError:
            continue
        assert not hs.done


@fuzz
@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=5),
       st.integers(0, 10_000), st.integers(0, 255), st.data())
def test_fuzz_bus_records(payloads, at, value, data):
    """Sealed records in any chunking come out whole and in order; one byte changed
    anywhere is a RecordError, never other bytes; garbage is a RecordError or waits."""
    CASES["bus-records"] += 1
    key = b"k" * 32
    s = Sealer(key)
    wire = b"".join(bytes(part) for p in payloads for part in s.seal(p))
    u = Unsealer(key)
    assert b"".join(u.feed(c) for c in data.draw(_split_points(wire))) == b"".join(payloads)
    i = at % len(wire)
    if wire[i] != value:
        bad = wire[:i] + bytes([value]) + wire[i + 1:]
        u = Unsealer(key)
        out = b""
        try:
            for c in data.draw(_split_points(bad)):
                out += u.feed(c)
        except RecordError:
            pass
        assert b"".join(payloads).startswith(out)  # a prefix of what was sent, no more
        assert out != b"".join(payloads) or len(u)  # and never all of it as if intact


# ------------------------------------------------------------------ AOF
def _record(fields: list) -> bytes:
    return aof.encode_loadjob(fields)


@fuzz
@given(st.lists(st.one_of(
    st.tuples(st.just("L"), st.integers(0, 13), _values),
    st.tuples(st.just("D"), st.just(_JID)),
    st.tuples(st.just("G"), st.binary(max_size=40)),
), max_size=6), st.integers(0, 10_000))
def test_fuzz_aof_records_load_or_are_refused(items, cut):
    """Records with any field replaced, DELJOBs, garbage, cut anywhere: scan never
    raises, what it accepts loads into a node, and the node's jobs store again."""
    CASES["aof"] += 1
    base = Harness(seed=4)
    r = base.node.store.create_job(b"q", b"b", 3600, 1, 0, 1, 0, True, 0, base.client, base.now)
    disk = job_fields(base.node.jobs.get(r[1:-2]), DISK, state=2)
    parts = []
    for kind, a, *b in items:
        if kind == "L":
            f = list(disk)
            f[a] = b[0]
            try:
                parts.append(_record(f))
            except (TypeError, ValueError, OverflowError):  # not even msgpack-able
                continue
        elif kind == "D":
            parts.append(aof.encode_deljob(a))
        else:
            parts.append(a)
    data = b"".join(parts)
    data = data[:cut] if cut < len(data) else data
    res = aof.scan(data)
    assert res.status in ("ok", "truncated", "corrupt")
    h = Harness()
    h.node.aof.on = True
    h.node.aof.load(res.records, h.now, enqueue=False)
    h.advance(3_000)
    _all_jobs_storable(h)
