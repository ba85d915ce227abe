#!/usr/bin/env python3
"""Consumer groups against jobs (issue #16) and against Redis Streams (issue #25).

Section ``cluster`` (#16), on a 3-node cluster of ours, in one run:

* QADD vs ADDJOB REPLICATE 3 (both synchronous, 3 copies): 50 connections spread over
  the 3 nodes, one request in flight each, alternating rounds. Target: >= 0.9x.
* Consume: 10 groups of 2 consumers each (20 connections over the 3 nodes) loop
  QGET q g EX 30 + QACK over a preloaded queue: every group gets every event, so the
  rate counted is deliveries; against one group of 20 consumers looping GETJOB NOHANG
  + ACKJOB over as many preloaded jobs. Target: >= 0.5x.
* QNOTIFY on node B woken by a QADD on node A: time from the QADD sent to the QNOTIFY
  reply, 200 samples. Target: median < 5 ms.
* Memory per event held by 10 groups (every group done with it) vs per queued job, in
  process (tracemalloc: what Python allocated and still holds; 16-byte bodies).
  Target: <= 2x.

Section ``streams`` (#25): one node of ours against one Debian ``redis-server``, in
alternating rounds of the same run, the load from bench/loadgen (modes qadd/xadd,
qget/xread), each side with AOF off, then both with ``appendonly yes`` + ``appendfsync
everysec``:

* QADD vs XADD, 16-byte bodies, 50 connections unpipelined and 16 deep. Target: >= 1.0x.
* Batch consume by two groups (one connection each) of a preloaded queue: ``QGET q g
  COUNT 100`` with one ``QACK q g id ...`` of the reply's IDs sent with the next QGET, vs
  ``XREADGROUP GROUP g c COUNT 100 STREAMS q >`` with one XACK of the reply's IDs sent
  with the next read; rate = deliveries. Target: >= 0.8x.
* One at a time, two groups of two connections: QGET + QACK vs XREADGROUP COUNT 1 + XACK
  (each ack travels with the next read). No target (shown for reference).
* Memory per held event: ``used_memory`` and RSS growth over 100k QADDs vs XADDs,
  fresh servers each round. Target: used_memory <= 3x XADD's (RSS shown beside it).

    .venv/bin/python bench/groups.py            # both sections, a few minutes
    .venv/bin/python bench/groups.py --only streams --rounds 3
    .venv/bin/python bench/groups.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import hiredis  # noqa: E402
from run import cpu_us, problems, rate, ratio  # noqa: E402  (bench/run.py: table cells)
from servers import (  # noqa: E402  (bench/servers.py)
    Fleet,
    HarnessError,
    Server,
    alternate,
    build_loadgen,
    loadgen,
    median_rate,
    median_ratio,
)

from disquepy.chaos.resp import encode  # noqa: E402

BODY = "0123456789abcdef"
GROUPS = 10


def cmd(*args) -> bytes:
    """A request's RESP bytes (the chaos client's encoder), built once per loop."""
    return encode(args)


class Conn:
    """One connection, one request in flight (request/response)."""

    def __init__(self, reader, writer) -> None:
        self.r, self.w = reader, writer
        self.parser = hiredis.Reader()

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def call(self, data: bytes):
        self.w.write(data)
        while True:
            v = self.parser.gets()
            if v is not False:
                return v
            chunk = await self.r.read(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.parser.feed(chunk)

    def close(self) -> None:
        self.w.close()


async def _conns(ports: list[int], n: int) -> list[Conn]:
    return await asyncio.gather(*(Conn.open(ports[i % len(ports)]) for i in range(n)))


async def _timed(links: list[Conn], runs, expected: int, what: str) -> float:
    """Run one coroutine per connection (each returns how many it did) and close them:
    the total per second; a shortfall is said."""
    t = time.perf_counter()
    done = sum(await asyncio.gather(*runs))
    dt = time.perf_counter() - t
    for c in links:
        c.close()
    if done != expected:
        print(f"problem: {done} {what}, expected {expected}")
    return done / dt


async def _produce(ports: list[int], conns: int, total: int, request: bytes) -> float:
    links = await _conns(ports, conns)
    per = total // conns

    async def one(c: Conn) -> int:
        ok = 0
        for _ in range(per):
            r = await c.call(request)
            ok += not isinstance(r, hiredis.ReplyError)
        return ok

    return await _timed(links, [one(c) for c in links], per * conns, "requests succeeded")


async def _consume_groups(ports: list[int], n: int) -> float:
    links = await _conns(ports, GROUPS * 2)

    async def one(c: Conn, group: str) -> int:
        got = 0
        get = cmd("QGET", "cq", group, "EX", 30)
        while True:
            e = await c.call(get)
            if e is None:
                return got
            await c.call(cmd("QACK", "cq", group, e[0]))
            got += 1

    return await _timed(links, [one(c, f"g{i // 2}") for i, c in enumerate(links)],
                        n * GROUPS, "deliveries")


async def _consume_jobs(ports: list[int], n: int) -> float:
    links = await _conns(ports, GROUPS * 2)

    async def one(c: Conn) -> int:
        got = 0
        get = cmd("GETJOB", "NOHANG", "FROM", "cj")
        misses = 0
        while misses < 3:  # a node may still import jobs from the others
            jobs = await c.call(get)
            if not jobs:
                misses += 1
                await asyncio.sleep(0.01)
                continue
            misses = 0
            await c.call(cmd("ACKJOB", jobs[0][1]))
            got += 1
        return got

    return await _timed(links, [one(c) for c in links], n, "jobs consumed")


async def _notify_latency(a: int, b: int, samples: int) -> list[float]:
    prod, cons = await Conn.open(a), await Conn.open(b)
    out = []
    for i in range(samples):
        waiter = asyncio.ensure_future(cons.call(cmd("QNOTIFY", f"n{i}", 5, "nq")))
        await asyncio.sleep(0.005)  # the QNOTIFY is blocked by now
        t = time.perf_counter()
        await prod.call(cmd("QADD", "nq", 60, BODY))
        r = await waiter
        out.append((time.perf_counter() - t) * 1000)
        if r != b"nq":
            print(f"problem: QNOTIFY replied {r!r}")
    prod.close()
    cons.close()
    return sorted(out)


def run(coro):
    import uvloop

    return uvloop.run(coro)


def memory_per_item(n: int) -> tuple[float, float]:
    """tracemalloc bytes per queued job and per event every one of 10 groups is done
    with, on a single in-process node."""
    from disquepy.core.config import Config
    from disquepy.core.node import Node

    def measure(fill) -> float:
        node = Node(Config(), "1".zfill(40), random.Random(1), 1_000_000)
        c = node.new_client(now=1_000_000)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        fill(node, c)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return (after - before) / n

    def jobs(node, c) -> None:
        for i in range(n):
            node.execute(c, [b"ADDJOB", b"q", b"%016d" % i, b"0"], 1_000_000 + i)

    def events(node, c) -> None:
        for i in range(n):
            node.execute(c, [b"QADD", b"q", b"3600", b"%016d" % i], 1_000_000 + i)
        for g in range(GROUPS):
            name = b"group%d" % g
            while node.execute(c, [b"QGET", b"q", name, b"EX", b"0"], 2_000_000) != b"*-1\r\n":
                pass

    return measure(jobs), measure(events)


# ------------------------------------------------------------ against Redis Streams (#25)

STREAM_AOF = {"off": [], "everysec": ["--appendonly", "yes", "--appendfsync", "everysec"]}
STREAM_GROUPS = "g1,g2"


def _preload(s: Server, n: int, max_s: float) -> str:
    """``n`` events on queue ``sq`` of an empty node, the groups ready (Redis: XGROUP
    CREATE from the start); a problem, or ''."""
    s.flush()
    redis = s.kind == "redis"
    fill = loadgen([s], "xadd" if redis else "qadd", 50, 16, n, queue="sq", max_seconds=max_s)
    if redis:
        for g in STREAM_GROUPS.split(","):
            s.call("XGROUP", "CREATE", "sq", g, "0")
    return fill["problem"]


def _stream_row(s: Server, row: str, n: int, max_s: float) -> dict:
    """One run of ``row`` on ``s`` (ours or Redis), from an empty node."""
    redis = s.kind == "redis"
    if row in ("add", "add16"):
        s.flush()
        return loadgen([s], "xadd" if redis else "qadd", 50, 16 if row == "add16" else 1, n,
                       queue="pq", max_seconds=max_s)
    batch = row == "batch"
    problem = _preload(s, n, max_s)
    if problem:
        return {"ops": 0, "ops_per_sec": 0.0, "problem": "preload: " + problem}
    args = ("COUNT", "100") if batch else ("COUNT", "1") if redis else ()
    return loadgen([s], "xread" if redis else "qget", 2 if batch else 4, 1, 2 * n,
                   queue="sq", args=args, group=STREAM_GROUPS, max_seconds=max_s)


def _held_memory(fleet: Fleet, kind: str, extra: list[str], n: int, max_s: float) -> dict:
    """used_memory and RSS growth per event over ``n`` QADDs / XADDs on a fresh server."""
    s = fleet.start(kind, extra)
    try:
        used0, rss0 = s.info_int("memory", "used_memory"), s.rss()
        r = loadgen([s], "xadd" if kind == "redis" else "qadd", 50, 16, n, queue="mq",
                    max_seconds=max_s)
        time.sleep(1)
        held = r["ops"]
        return {"used": (s.info_int("memory", "used_memory") - used0) / max(held, 1),
                "rss": (s.rss() - rss0) / max(held, 1), "problem": r["problem"]}
    finally:
        s.stop()  # kept in fleet.servers: the next one gets a new name, so a new directory
        # (a node started in this one would load these events from its AOF)


def streams(a, target) -> None:
    """Section ``streams``: the #25 rows, one node of ours against one redis-server."""
    q = a.quick
    sizes = {"add": 10_000 if q else 100_000, "add16": 10_000 if q else 100_000,
             "batch": 10_000 if q else 100_000, "one": 1_000 if q else 10_000}
    held = 20_000 if q else 100_000
    rows = [("add", "QADD / XADD, 50 conns", "QADD vs XADD, 50 conns", 1.0),
            ("add16", "QADD / XADD, 50 conns, 16-deep", "QADD vs XADD, 16-deep", 1.0),
            ("batch", "2 groups x 1 conn: QGET COUNT 100 + QACK / XREADGROUP COUNT 100 + XACK",
             "batch consume by 2 groups vs XREADGROUP COUNT 100 + XACK", 0.8),
            ("one", "2 groups x 2 conns, one at a time: QGET + QACK / XREADGROUP COUNT 1 + XACK",
             "", None)]
    build_loadgen()
    for aof in a.aof:
        extra = STREAM_AOF[aof]
        print(f"\n### against Redis Streams, AOF {aof}: one node each, median of {a.rounds} "
              "alternating rounds\n")
        ab = " against/s | against µs/op |" if a.against else ""
        print("| workload | disquepy/s | Redis/s | ours/Redis | target | CPU µs/op ours "
              f"| Redis |{ab} loadgen busy |\n|---|---:|---:|---:|---|---:|---:|"
              + ("---:|---:|" if a.against else "") + "---:|")
        verdicts: list[tuple[bool, str]] = []  # said after the table
        with Fleet() as fleet:
            sides = {"ours": fleet.start("ours", extra), "redis": fleet.start("redis", extra)}
            if a.against:  # our node from another built tree: an A/B in the same turns
                sides["against"] = fleet.start("ours", extra, src=Path(a.against))
            for key, name, short, tgt in rows:
                res = alternate(a.rounds, {k: (lambda s=s, key=key: _stream_row(
                    s, key, sizes[key], a.max_seconds)) for k, s in sides.items()})
                ours, red = res["ours"], res["redis"]
                r = median_ratio(ours, red)
                shown = "—"
                if tgt is not None:
                    good = r is not None and r >= tgt and not problems(ours) + problems(red)
                    shown = f">= {tgt}x " + ("PASS" if good else "FAIL")
                    verdicts.append((good, f"AOF {aof}: {short}: ours/Redis = {ratio(r)} "
                                           f"(target >= {tgt}x)"))
                busy = max(x.get("gen_busy", 0) for reps in res.values() for x in reps)
                other = res.get("against")
                ab = f" {rate(median_rate(other))} | {cpu_us(other)} |" if other else ""
                print(f"| {name} | {rate(median_rate(ours))} | {rate(median_rate(red))} "
                      f"| {ratio(r)} | {shown} | {cpu_us(ours)} | {cpu_us(red)} |{ab}"
                      f" {busy:.0%} |")
                for side, reps in res.items():
                    for p in dict.fromkeys(problems(reps)):
                        print(f"|  ! {side}: {p} |")
            mem = alternate(a.rounds, {k: (lambda k=k, extra=extra: _held_memory(
                fleet, k, extra, held, a.max_seconds)) for k in ("ours", "redis")})
        pairs = list(zip(mem["ours"], mem["redis"], strict=True))
        used = statistics.median(o["used"] / r["used"] for o, r in pairs)
        rss = statistics.median(o["rss"] / r["rss"] for o, r in pairs)
        med = {k: {f: statistics.median(x[f] for x in v) for f in ("used", "rss")}
               for k, v in mem.items()}
        used_rounds = "; ".join(f"{o['used']:,.0f}/{r['used']:,.0f}" for o, r in pairs)
        print(f"| memory per held event ({held:,} events, fresh servers): used_memory "
              f"(rounds, ours/Redis: {used_rounds}) | {med['ours']['used']:,.0f} B | {med['redis']['used']:,.0f} B | {used:.2f}x "
              f"| <= 3x {'PASS' if used <= 3 else 'FAIL'} | | | |")
        rounds = "; ".join(f"{o['rss']:,.0f}/{r['rss']:,.0f}" for o, r in pairs)
        print(f"| memory per held event: RSS (rounds, ours/Redis: {rounds}) "
              f"| {med['ours']['rss']:,.0f} B | {med['redis']['rss']:,.0f} B | {rss:.2f}x "
              f"| (<= 3x {'met' if rss <= 3 else 'not met'}) | | | |")
        for side, reps in mem.items():
            for p in dict.fromkeys(x["problem"] for x in reps if x["problem"]):
                print(f"|  ! {side}: {p} |")
        print()
        for good, text in verdicts:
            target(good, text)
        target(used <= 3 and not any(x["problem"] for v in mem.values() for x in v),
               f"AOF {aof}: memory per held event (used_memory) ours/Redis = {used:.2f}x "
               "(target <= 3x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="cluster,streams",
                    help="sections, comma-separated: cluster (#16), streams (#25)")
    ap.add_argument("--aof", default="off,everysec",
                    help="streams: AOF settings, comma-separated, of off,everysec")
    ap.add_argument("--against", metavar="SRC", help="streams: also run our node from SRC "
                    "(another built tree's src/) as the side 'against', in the same rounds")
    ap.add_argument("--max-seconds", type=float, default=60.0,
                    help="streams: bound of each loadgen run")
    a = ap.parse_args()
    a.only = [x.strip() for x in a.only.split(",") if x.strip()]
    a.aof = [x.strip() for x in a.aof.split(",") if x.strip()]
    if set(a.only) - {"cluster", "streams"} or not a.only:
        ap.error("--only: sections are cluster and streams")
    if set(a.aof) - set(STREAM_AOF) or not a.aof:
        ap.error("--aof: settings are off and everysec")
    if a.rounds <= 0:
        ap.error("--rounds must be positive")
    adds = 3000 if a.quick else 15000
    consume = 1000 if a.quick else 4000
    rounds = a.rounds = 1 if a.quick else a.rounds
    ok = True

    def target(good: bool, text: str) -> None:
        nonlocal ok
        ok = ok and good
        print(f"{'PASS' if good else 'FAIL'}: {text}")

    if "streams" in a.only:
        try:
            streams(a, target)
        except HarnessError as e:  # e.g. no redis-server: not a slow result
            print(f"streams: could not run: {e}")
            return 2
    if "cluster" not in a.only:
        return 0 if ok else 1
    with Fleet() as fleet:
        nodes = fleet.cluster("ours", 3)
        ports = [s.port for s in nodes]
        qadd = cmd("QADD", "pq", 3600, BODY)
        addjob = cmd("ADDJOB", "pj", BODY, 5000, "REPLICATE", 3)
        rq, rj = [], []
        for _ in range(rounds):
            for side, req in ((rj, addjob), (rq, qadd)):
                for s in nodes:
                    s.flush()
                side.append(run(_produce(ports, 50, adds, req)))
        ratio = statistics.median(q / j for q, j in zip(rq, rj, strict=True))
        print("| workload (3 nodes, 50 conns) | ops/s |\n|---|---|")
        print(f"| ADDJOB REPLICATE 3 | {statistics.median(rj):,.0f} |")
        print(f"| QADD (3 copies) | {statistics.median(rq):,.0f} |")
        target(ratio >= 0.9, f"QADD / ADDJOB REPLICATE 3 = {ratio:.2f}x (target >= 0.9x)")

        cg, cj = [], []
        for _ in range(rounds):
            for s in nodes:
                s.flush()
            c = nodes[0].client()
            for _ in range(consume):
                c.execute_command("QADD", "cq", 3600, BODY, "NOBLOCK")
                c.execute_command("ADDJOB", "cj", BODY, 0, "REPLICATE", 3, "ASYNC")
            c.close()
            time.sleep(0.5)
            cj.append(run(_consume_jobs(ports, consume)))
            cg.append(run(_consume_groups(ports, consume)))
        ratio = statistics.median(g / j for g, j in zip(cg, cj, strict=True))
        print(f"| GETJOB+ACKJOB, one group of 20 consumers | {statistics.median(cj):,.0f} "
              "jobs/s |")
        print(f"| QGET+QACK, {GROUPS} groups x 2 consumers | {statistics.median(cg):,.0f} "
              "deliveries/s |")
        target(ratio >= 0.5, f"10 groups' deliveries / one group's GETJOB+ACKJOB = "
                             f"{ratio:.2f}x (target >= 0.5x)")

        for s in nodes:
            s.flush()
        lat = run(_notify_latency(ports[0], ports[1], 50 if a.quick else 200))
        med = statistics.median(lat)
        print(f"| QNOTIFY on B woken by QADD on A | median {med:.2f} ms, p99 "
              f"{lat[min(len(lat) - 1, int(len(lat) * 0.99))]:.2f} ms |")
        target(med < 5, f"QNOTIFY woken by a QADD on another node: median {med:.2f} ms "
                        "(target < 5 ms)")

    per_job, per_event = memory_per_item(5000 if a.quick else 20000)
    print(f"| memory (tracemalloc) | job {per_job:,.0f} B, event held by {GROUPS} groups "
          f"{per_event:,.0f} B |")
    target(per_event <= 2 * per_job, f"memory per event held by {GROUPS} groups / per job = "
                                     f"{per_event / per_job:.2f}x (target <= 2x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
