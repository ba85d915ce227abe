"""A live node under malformed input (issue #18, item 5): on its client port, truncated
arrays, negative, huge and non-numeric lengths, a 1M-element array, an endless inline
line, a pipeline whose replies are never read, a client sending one byte per second,
too many clients, and seeded random mutations of valid requests; on its bus port,
garbage, truncated and oversized frames, and forged messages with fields out of range.
After every case the node must answer, and every job added before must be intact
(and still be after a restart from its AOF).

Budget: ``DISQUEPY_FUZZ_CASES`` random cases of each kind (default 40: about half a
minute); ``make fuzz`` runs many more and prints the counts (with
``DISQUEPY_FUZZ_REPORT``, they are written there as JSON).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import struct
import threading
import time
from collections import Counter

import pytest
from support import wait_for

from disquepy.codec.bus import encode_frame
from disquepy.core import messages as M

CASES = int(os.environ.get("DISQUEPY_FUZZ_CASES", "40"))
SLOW_BYTES = int(os.environ.get("DISQUEPY_FUZZ_SLOW_BYTES", "3"))  # at one a second
FAKE = "e" * 40
LIMITS = ["--client-query-buffer-limit", "1mb", "--proto-max-bulk-len", "1mb",
          "--proto-max-multibulk-len", "100000", "--maxclients", "64",
          "--client-output-buffer-limit", "normal", "1mb", "256kb", "1",
          "--maxmemory", "64mb", "--appendonly", "yes", "--cluster-bus-max-frame", "1mb"]


def request(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def send(port: int, data: bytes, read_for: float = 0.3, chunk: int = 1 << 16) -> bytes:
    """Send ``data`` on a fresh connection (stopping if the node closes it), read
    what comes back for ``read_for`` seconds, close."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sk:
        try:
            for i in range(0, len(data), chunk):
                sk.sendall(data[i:i + chunk])
        except OSError:
            return out
        sk.settimeout(read_for)
        deadline = time.monotonic() + read_for
        try:
            while time.monotonic() < deadline:
                got = sk.recv(1 << 16)
                if not got:
                    break
                out += got
        except OSError:
            pass
    return out


class Live:
    """The node under test, its jobs, and the check run after each case."""

    def __init__(self, server) -> None:
        self.s = server
        self.port = server.port
        self.bus = server.port + 10000
        self.c = server.client(socket_timeout=5)
        self.jobs = {}
        for i in range(20):
            body = f"body-{i}-" + "x" * i
            jid = self.c.execute_command("ADDJOB", "keep", body, 0, "RETRY", 3600)
            self.jobs[jid] = body.encode()
        self.counts: Counter = Counter()

    def check(self, case: str, states=(b"queued",)) -> None:
        t = time.monotonic()
        assert self.c.ping(), case
        assert time.monotonic() - t < 2, f"slow to answer after {case}"
        pipe = self.c.pipeline(transaction=False)
        for jid in self.jobs:
            pipe.execute_command("SHOW", jid)
        for (jid, body), show in zip(self.jobs.items(), pipe.execute(), strict=True):
            assert show is not None, f"job {jid} lost after {case}"
            fields = dict(zip(show[::2], show[1::2], strict=True))
            assert fields[b"body"] == body and fields[b"state"] in states, case
        if states == (b"queued",):
            assert self.c.execute_command("QLEN", "keep") == len(self.jobs), case
        self.counts[case.split(":")[0]] += 1

    def bus_send(self, data: bytes, read_for: float = 0.2) -> None:
        with socket.create_connection(("127.0.0.1", self.bus), timeout=5) as sk:
            try:
                sk.sendall(data)
                sk.settimeout(read_for)
                while sk.recv(1 << 16):
                    pass
            except OSError:
                pass


# ------------------------------------------------------------------ the cases
FIXED = {
    "truncated array": b"*3\r\n$6\r\nADDJOB\r\n$4\r\nkee",
    "truncated bulk": b"*2\r\n$4\r\nECHO\r\n$100\r\nshort",
    "negative count": b"*-5\r\n",
    "negative bulk": b"*2\r\n$4\r\nECHO\r\n$-3\r\nabc\r\n",
    "huge count": b"*99999999999999\r\n",
    "huge bulk": b"*2\r\n$4\r\nECHO\r\n$99999999999999\r\n",
    "count past 64 bits": b"*99999999999999999999999\r\n",
    "non-numeric count": b"*abc\r\n",
    "non-numeric bulk": b"*1\r\n$x\r\n",
    "count with sign": b"*+1\r\n$4\r\nPING\r\n",
    "no dollar": b"*1\r\n:4\r\nPING\r\n",
    "nul bytes": b"\x00" * 100 + b"\r\n",
    "endless inline line": b"A" * (300 * 1024),
    "endless bulk header": b"*1\r\n$" + b"1" * (100 * 1024),
    "1M-element array": b"*1000000\r\n" + b"$1\r\nx\r\n" * 200_000,
    "array at the limit": request(b"GETJOB", b"NOHANG", b"FROM",
                                  *[b"fz%d" % i for i in range(99_997)]),
    "over the query buffer": request(b"ECHO", b"y" * (1024 * 1024)) + b"z" * (600 * 1024),
    "http post": b"POST / HTTP/1.1\r\nHost: x\r\n\r\nDEBUG FLUSHALL\r\n",
}

SAFE = [
    [b"PING"], [b"ADDJOB", b"fq", b"body", b"0"], [b"ADDJOB", b"fq", b"b", b"0", b"TTL", b"10",
                                                  b"RETRY", b"1", b"DELAY", b"1"],
    [b"GETJOB", b"NOHANG", b"COUNT", b"3", b"FROM", b"fq", b"fq2"],
    [b"QLEN", b"fq"], [b"QPEEK", b"fq", b"-3"], [b"QSTAT", b"fq"], [b"QSCAN", b"COUNT", b"5"],
    [b"JSCAN", b"QUEUE", b"fq", b"REPLY", b"all"], [b"INFO"], [b"HELLO"],
    [b"ACKJOB", b"D-00000000-000000000000000000000000-0000"], [b"NACK", b"x"],
    [b"SHOW", b"x"], [b"PAUSE", b"fq", b"state"], [b"WORKING", b"x"],
    [b"JOBSTATUS", b"x"], [b"ECHO", b"x" * 40], [b"GETJOB", b"TIMEOUT", b"10", b"FROM", b"fq3"],
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op == 1:
            b[i:i] = rng.choice([b"\r\n", b"*", b"$", b"-1", b"99999999", b"\x00", b"abc"])
        elif op == 2:
            del b[i:]
        elif op == 3 and b:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 20)]
        elif op == 4:
            b[i:i] = b"1" * rng.randint(1, 12)
        else:
            b = bytearray(b.replace(b"\r\n", b"\n", 1))
    return bytes(b)


def bus_frames(rng: random.Random) -> bytes:
    kind = rng.randrange(7)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
    if kind == 1:  # a length header promising more than comes
        return struct.pack(">I", rng.randint(1, 1 << 20)) + b"\x94" * rng.randint(0, 50)
    if kind == 2:  # over cluster-bus-max-frame, or past 1 GiB
        return struct.pack(">I", rng.choice([(1 << 20) + 1, 1 << 30, 0xFFFFFFFF])) + b"x" * 64
    meet = [M.MEET, FAKE, 7000, 0, [], "127.0.0.1"]
    wild = rng.choice([2**64 - 1, 2**63, -1, 2**32, "str", b"\xff" * 50, None, [1, [2]], 1.5])
    if kind == 3:  # a forged job with one field out of range
        job = [b"D-eeeeeeee-" + b"A" * 24 + b"-0001", b"fq", b"b", 1, 100, 0, 1, 1, 0, 0, []]
        job[rng.randrange(len(job))] = wild
        msg = [M.REPLJOB, FAKE, 7000, 0, job]
    elif kind == 4:
        t = rng.choice(sorted(M.NAMES))
        msg = [t, FAKE, 7000, 0, *[wild] * rng.randint(0, 3)]
    elif kind == 5:
        msg = [M.BATCH, FAKE, 7000, 0, [[M.BATCH, FAKE, 7000, 0, []]] * rng.randint(1, 3)]
    else:
        msg = [rng.randrange(-5, 40), wild, wild, wild]
    return encode_frame([M.BATCH, FAKE, 7000, 0, [meet, msg]])


def slow_client(live: Live, nbytes: int) -> None:
    """One byte a second: the node serves others meanwhile, and answers at the end."""
    with socket.create_connection(("127.0.0.1", live.port), timeout=5) as sk:
        data = b"*1\r\n$4\r\nPING\r\n"
        for i in range(min(nbytes, len(data) - 1)):
            sk.sendall(data[i:i + 1])
            t = time.monotonic()
            assert live.c.execute_command("QLEN", "keep") == len(live.jobs)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
        sk.sendall(data[min(nbytes, len(data) - 1):])
        sk.settimeout(5)
        assert sk.recv(100) == b"+PONG\r\n"


def never_read(live: Live) -> None:
    """A pipeline whose replies are never read: closed at the output buffer limit,
    while the node serves the others."""
    sk = socket.create_connection(("127.0.0.1", live.port), timeout=5)
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        chunk = request(b"QPEEK", b"keep", b"20") * 1000
        with pytest.raises(OSError):
            for _ in range(200):
                sk.sendall(chunk)
                live.check("pipeline never read")
    finally:
        sk.close()
    assert "closed for overcoming of output buffer limits" in live.s.log()


def too_many_clients(live: Live) -> None:
    held = []
    try:
        for _ in range(80):
            held.append(socket.create_connection(("127.0.0.1", live.port), timeout=5))
        live.c.execute_command("PING")  # the test's own client is one of the 64
        refused = 0
        for sk in held[-10:]:
            sk.settimeout(1)
            with contextlib.suppress(OSError):
                refused += sk.recv(100).startswith(b"-ERR max number of clients")
        assert refused == 10
    finally:
        for sk in held:
            sk.close()


def test_a_live_node_survives_malformed_input(server_factory):
    s = server_factory(*LIMITS)
    live = Live(s)
    rng = random.Random(int(os.environ.get("DISQUEPY_FUZZ_SEED", "18")))
    for name, data in FIXED.items():
        send(live.port, data)
        live.check(f"resp:{name}")
    never_read(live)
    too_many_clients(live)
    wait_for(lambda: live.c.info("clients")["connected_clients"] < 5)
    live.check("resp:too many clients")
    t = threading.Thread(target=slow_client, args=(live, SLOW_BYTES))
    t.start()
    t.join(SLOW_BYTES + 10)
    assert not t.is_alive()
    live.check("resp:one byte per second")
    for i in range(CASES):
        cmds = [request(*rng.choice(SAFE)) for _ in range(rng.randint(1, 4))]
        send(live.port, mutate(rng, b"".join(cmds)), read_for=0.05)
        live.check(f"resp-random:{i}")
    for i in range(CASES):
        live.bus_send(bus_frames(rng), read_for=0.05)
        live.check(f"bus-random:{i}")
    assert "Traceback" not in s.log()
    # and the jobs come back from the AOF
    s.kill(signal.SIGTERM)
    s.start()
    live.c = s.client(socket_timeout=5)
    live.check("restart", states=(b"active", b"queued"))  # reloaded: active, as in Disque
    report = os.environ.get("DISQUEPY_FUZZ_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump(dict(live.counts), f)
    print("live fuzz cases:", dict(live.counts))


# ----------------------------------------------------- the cluster-secret handshake
SECRET = "fuzz-live-secret-0123456789"


def handshake_case(rng: random.Random, hello: bytes) -> bytes:
    """What a peer sends after the node's ``hello``: a forged or mutated connector
    handshake, or (knowing the secret) a real one followed by records forged,
    mutated, or sealed right around garbage frames."""
    from disquepy.server.busauth import Handshake, Sealer

    me = f"{rng.getrandbits(160):040x}"
    kind = rng.randrange(6)
    secret = SECRET.encode() if kind >= 3 else b"a wrong secret, 16+ chars"
    hs = Handshake(secret, True, me)
    proof = hs.feed(hello)
    out = hs.hello() + proof
    if kind == 0:  # mutated anywhere
        return mutate(rng, out)
    if kind == 1:  # the node's own hello back, or an old version's
        return rng.choice([hello, hello[:5] + b"C" + hello[6:], b"DQBA\x01" + b"n" * 32])
    if kind == 2:  # a wrong secret, then frames as if it had worked
        return out + bus_frames(rng)
    sealer = Sealer(hs.frame_key)
    frames = bus_frames(rng)
    if kind == 3:  # the right secret, frames without their MAC
        return out + frames
    records = b"".join(bytes(p) for p in sealer.seal(frames))
    if kind == 4:  # sealed records, then mutated
        return out + mutate(rng, records)
    return out + records  # sealed right: the frames reach the decoder


def test_a_live_node_survives_forged_bus_handshakes(server_factory):
    """The bus of a node with a cluster-secret under forged, mutated, reflected and
    old-version handshakes, and, from a peer knowing the secret, records forged or
    carrying garbage frames: the node answers and keeps its jobs after every case."""
    s = server_factory(*LIMITS, "--cluster-secret", SECRET)
    live = Live(s)
    rng = random.Random(int(os.environ.get("DISQUEPY_FUZZ_SEED", "26")))
    for i in range(CASES):
        with socket.create_connection(("127.0.0.1", live.bus), timeout=5) as sk:
            hello = b""
            while len(hello) < 78:
                chunk = sk.recv(78 - len(hello))
                assert chunk, "the node closed before its hello"
                hello += chunk
            with contextlib.suppress(OSError):
                sk.sendall(handshake_case(rng, hello))
                sk.settimeout(0.05)
                while sk.recv(1 << 16):
                    pass
        live.check(f"bus-handshake-random:{i}")
    assert "Traceback" not in s.log()
    report = os.environ.get("DISQUEPY_FUZZ_REPORT")
    if report:  # beside the cases of the test above
        counts = {}
        with contextlib.suppress(OSError, ValueError), open(report) as f:
            counts = json.load(f)
        counts.update(live.counts)
        with open(report, "w") as f:
            json.dump(counts, f)
    print("live fuzz cases:", dict(live.counts))
