#!/usr/bin/env python3
"""Python cost of the request and replication paths, in process (no sockets, no load
generator): steadier than end-to-end rates on a shared 2-core machine, and what an
optimisation of the shell or the core changes.

    .venv/bin/python bench/inproc.py                      # all four measures
    .venv/bin/python bench/inproc.py --only reader,replicate
    .venv/bin/python bench/inproc.py --src /tmp/old/src   # A/B against another tree

- ``reader``: one ADDJOB request fed and parsed (feed + gets until False), per reader
  class available (pure Python, hiredis-backed, C).
- ``protocol``: ``ClientProtocol.data_received`` of one PING and of one ADDJOB, then the
  loop iteration's ``ClientBatch`` run, with a fake transport (parse, execute, reply;
  the core's ADDJOB included), on one connection and on 50 whose requests arrive in the
  same iteration (the job store grows over the rounds, as under load), and ADDJOB on 50
  with the AOF's records made (appendonly's CPU, the file write aside); then the
  consume pair, GETJOB NOHANG and the ACKJOB of the job it returned (each its own call),
  then each of the two alone (a run of GETJOBs, then their ACKJOBs).
- ``execute``: ``Node.execute`` alone (the core: no reader, no shell) of PING and of
  ADDJOB, with no MONITOR attached, then with one (the feed built, and taken once per 50
  commands as the driver takes outputs): what MONITOR costs, off and on.
- ``replicate``: three pure nodes wired by tests/unit/clusterharness.py; each loop turn
  every node takes 16 (``--burst``) ``ADDJOB ... REPLICATE 3`` and the bus messages are grouped per
  peer into frames, encoded, decoded and handled as the driver does. Microseconds of
  Python per replicated job, summed over the three nodes.
- ``batch``: the pipelined consume row: ``GETJOB NOHANG COUNT 100`` and the ACKJOB of
  the 100 IDs it returned, through ``data_received``; per job, the GETJOB's and the
  ACKJOB's shares, with job outcomes on (the default) and off.
- ``groups``: the consumer groups' batch row (bench/groups.py's against XREADGROUP
  COUNT 100 + XACK): ``QGET q g COUNT 100`` and the acks of the 100 events it
  leased, through ``data_received``: one ``QACK q g id1 ... id100`` (skipped on a tree
  whose QACK takes one ID), then 100 pipelined ``QACK q g id``; per event, the
  QGET's and the acks' shares; then both with the AOF's records made (appendonly's
  CPU, the file write aside); then QADD as the streams section's 16-deep row (50
  connections, 16 QADDs each per loop iteration), without and with the AOF's records,
  and into a store of 2M events (the last 400k of them timed, once).

Each figure is the best of ``--rounds`` rounds. A/B of the compiled core (setup.py) and
the same code interpreted: run once with ``DISQUEPY_INTERPRETED=1`` and once without,
alternating, with ``--cpu`` on a busy machine.
- ``bus``: the cluster bus's inbound handling (``server/bus.py``, interpreted):
  ``_InProtocol.data_received`` of one REPLJOB frame of 1 and of 8 jobs, one frame a
  read, the frame's handler a no-op; and the codec's feed and decode of the 8-job
  frame alone (what compiling the handling could not remove).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADDJOB = b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$16\r\n0123456789abcdef\r\n$1\r\n0\r\n"
PING = b"*1\r\n$4\r\nPING\r\n"
ECHO = b"*2\r\n$4\r\nECHO\r\n$25\r\n0123456789abcdef-01234567\r\n"
GETJOB_NOHANG = b"*4\r\n$6\r\nGETJOB\r\n$6\r\nNOHANG\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
clock = time.perf_counter  # --cpu: time.process_time
BURST = 16  # --burst


def best(fn, n: int, rounds: int) -> float:
    """Microseconds per call of ``fn(n)``, best round. ``fn`` makes about n calls and
    returns how many it made (None: exactly n)."""
    fn(min(n, 1000))
    out = []
    for _ in range(rounds):
        t0 = clock()
        done = fn(n) or n
        out.append((clock() - t0) / done * 1e6)
    return min(out)


def bench_reader(n: int, rounds: int) -> None:
    from disquepy.codec import resp

    classes = [resp.PyRequestReader]
    if resp.HAVE_HIREDIS:
        classes.append(resp.HiredisRequestReader)
    if getattr(resp, "HAVE_CREADER", False):
        classes.append(resp.CRequestReader)
    for cls in classes:
        r = cls()

        def run(k: int, r=r) -> None:
            feed, gets = r.feed, r.gets
            for _ in range(k):
                feed(ADDJOB)
                while gets() is not False:
                    pass

        print(f"reader    {cls.__name__:22s} {best(run, n, rounds):6.2f} us per ADDJOB request")


class Transport:
    """A transport that swallows the replies (the protocol needs write and peername)."""

    def write(self, data: bytes) -> None:
        pass

    def get_extra_info(self, key: str, default=None):
        return ("127.0.0.1", 1) if key == "peername" else default


def node_with_clients(conns: int, transport: type = Transport) -> tuple:
    """(node, event loop, [ClientProtocol]): a fresh node and ``conns`` connections on
    ``transport`` objects, as the server has them. Close the loop when done."""
    from disquepy.core.config import Config
    from disquepy.core.ids import new_node_id
    from disquepy.core.node import Node
    from disquepy.server.driver import Driver
    from disquepy.server.protocol import ClientProtocol

    cfg = Config()
    cfg.dir = tempfile.mkdtemp()
    node = Node(cfg, new_node_id(random.Random(1)), random.Random(2), Driver.now())
    loop = asyncio.new_event_loop()
    driver = Driver(node, cfg, None, loop)
    protos = []
    for _ in range(conns):
        proto = ClientProtocol(driver)
        proto.connection_made(transport())
        protos.append(proto)
    # the caller runs the iteration's batch itself (protos[0].batch.run), as the loop
    # would: the loop is never run, so a call_soon per batch would only pile up handles
    # (asyncio's pure-Python ones here, ~1 us each and all kept: uvloop's, in the
    # server, are C and run)
    protos[0].batch._call_soon = lambda fn: None
    return node, loop, protos


def turns(protos: list, data: bytes, per_read: int = 1):
    """run(k): about k requests, ``data`` (``per_read`` requests) from each connection
    in turn, then the loop iteration's batch, as the loop would; returns how many."""
    drs = [p.data_received for p in protos]
    batch = protos[0].batch.run

    def run(k: int) -> int:
        m = max(1, k // (per_read * len(drs)))
        for _ in range(m):
            for dr in drs:
                dr(data)
            batch()
        return m * per_read * len(drs)

    return run


def bench_protocol(n: int, rounds: int) -> None:
    for name, cmd, aof in (("PING", PING, False), ("ADDJOB", ADDJOB, False),
                           ("ADDJOB", ADDJOB, True)):
        for conns in ((50,) if aof else (1, 50)):
            node, loop, protos = node_with_clients(conns)
            node.aof.on = aof  # the AOF's records made (no file: none written)
            print(f"protocol  data_received {name:8s} {conns:2d} conns "
                  f"{best(turns(protos, cmd), n, rounds):6.2f} us"
                  f"{', AOF records' if aof else ''}")
            loop.close()
    # pipelines: 16 requests a read from each of 50 connections, then the batch (the
    # shell's and the dispatch's cost per command, which a 16-deep row pays 16 times a
    # read): PING as the floor, ECHO with an argument and a bulk reply
    for name, cmd in (("PING", PING), ("ECHO", ECHO)):
        node, loop, protos = node_with_clients(50)
        deep = best(turns(protos, cmd * 16, 16), n, rounds)
        print(f"protocol  data_received {name:8s} 50 conns x 16-deep {deep:6.3f} us a command")
        loop.close()
    # GETJOB NOHANG, a request from each of 50 connections, then the batch, the queue
    # filled beforehand (16-deep ADDJOBs) with enough for every round
    node, loop, protos = node_with_clients(50)
    turns(protos, ADDJOB * 16, 16)(n * (rounds + 1) + 1000)
    nohang = best(turns(protos, GETJOB_NOHANG), n, rounds)
    print(f"protocol  data_received GETJOB NOHANG 50 conns {nohang:6.2f} us")
    loop.close()
    bench_consume(n, rounds)


def bench_consume(n: int, rounds: int) -> None:
    """GETJOB NOHANG FROM q, then ACKJOB of the ID it returned: the consume workload's two
    requests, each through data_received, the queue preloaded before each round."""
    last: list = [b""]

    class Capture(Transport):
        def write(self, data: bytes) -> None:
            last[0] = data

    node, loop, (proto,) = node_with_clients(1, Capture)
    getjob = b"*4\r\n$6\r\nGETJOB\r\n$6\r\nNOHANG\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
    received, batch = proto.data_received, proto.batch.run

    def dr(data: bytes) -> None:  # a request, and the loop iteration's batch
        received(data)
        batch()

    def load(k: int) -> None:
        for _ in range(k):
            dr(ADDJOB)

    def run(k: int) -> None:
        for _ in range(k):
            dr(getjob)
            jid = last[0][20:60]  # *1 *3 $1 q $40 <id>
            dr(b"*2\r\n$6\r\nACKJOB\r\n$40\r\n" + jid + b"\r\n")

    load(min(n, 1000))
    run(min(n, 1000))
    out = []
    for _ in range(rounds):
        load(n)
        t0 = clock()
        run(n)
        out.append((clock() - t0) / n * 1e6)
    assert node.jobs.count == 0, node.jobs.count
    print(f"protocol  GETJOB + ACKJOB (consume)     {min(out):6.2f} us per job")

    # the same two requests apart: n GETJOBs (their IDs kept), then the n ACKJOBs
    gets, acks = [], []
    for _ in range(rounds):
        load(n)
        ids = []
        t0 = clock()
        for _ in range(n):
            dr(getjob)
            ids.append(last[0][20:60])
        t1 = clock()
        reqs = [b"*2\r\n$6\r\nACKJOB\r\n$40\r\n" + jid + b"\r\n" for jid in ids]
        t2 = clock()
        for a in reqs:
            dr(a)
        gets.append((t1 - t0) / n * 1e6)
        acks.append((clock() - t2) / n * 1e6)
    assert node.jobs.count == 0, node.jobs.count
    print(f"protocol  GETJOB NOHANG FROM q (1 job)  {min(gets):6.2f} us")
    print(f"protocol  ACKJOB <its id>               {min(acks):6.2f} us")
    loop.close()


def _read_and_ack(proto, last: list, n: int, rounds: int, add: bytes, read: bytes,
                  acks_of) -> tuple[float, float] | None:
    """Microseconds per item, best round, of a batch read and of its acks: each round
    ``n`` ``add`` requests, then ``read`` (COUNT 100) and ``acks_of(its reply)`` until
    they are all read, each through data_received and a batch run (``last``: what the
    transport was last given). None if the acks were refused (a tree without them)."""
    received, batch = proto.data_received, proto.batch.run

    def dr(data: bytes) -> None:
        received(data)
        batch()

    gets, acks = [], []
    for r in range(rounds + 1):
        k = min(n, 1000) if r == 0 else n
        for _ in range(k):
            dr(add)
        tg = ta = 0.0
        for _ in range(k // 100):
            t0 = clock()
            dr(read)
            t1 = clock()
            req = acks_of(last[0])
            t2 = clock()
            dr(req)
            ta += clock() - t2
            tg += t1 - t0
        if last[0].startswith(b"-"):
            return None
        if r:
            gets.append(tg / k * 1e6)
            acks.append(ta / k * 1e6)
    return min(gets), min(acks)


def bench_batch(n: int, rounds: int) -> None:
    """The pipelined consume row: GETJOB NOHANG COUNT 100 FROM q, then one ACKJOB of the
    100 IDs it returned, each through data_received and a batch run; per job, with job
    outcomes on (the default) and off (``job-outcome-retention 0``), the GETJOB's and
    the ACKJOB's shares apart."""
    import re

    idre = re.compile(rb"\$40\r\n(D-[^\r]{38})\r\n")
    last: list = [b""]

    class Capture(Transport):
        def write(self, data: bytes) -> None:
            last[0] = data

    def ackjob(reply: bytes) -> bytes:
        ids = idre.findall(reply)
        return b"*%d\r\n$6\r\nACKJOB\r\n" % (len(ids) + 1) + b"".join(
            b"$40\r\n" + i + b"\r\n" for i in ids)

    getjob = b"*6\r\n$6\r\nGETJOB\r\n$6\r\nNOHANG\r\n$5\r\nCOUNT\r\n$3\r\n100\r\n" \
        b"$4\r\nFROM\r\n$1\r\nq\r\n"
    for retention in (3600, 0):
        node, loop, (proto,) = node_with_clients(1, Capture)
        node.config.job_outcome_retention = retention
        node.config_changed(["job-outcome-retention"])
        got = _read_and_ack(proto, last, n, rounds, ADDJOB, getjob, ackjob)
        assert got is not None and node.jobs.count == 0, node.jobs.count
        g, a = got
        print(f"batch     COUNT 100 + ACKJOB, outcomes {'on ' if retention else 'off'}"
              f" {g + a:6.2f} us per job (GETJOB {g:.2f}, ACKJOB {a:.2f})")
        loop.close()


def bench_groups(n: int, rounds: int) -> None:
    """QGET q g COUNT 100, then the acks of the 100 events it leased (one multi-ID QACK,
    or 100 pipelined single ones: each set of requests in one data_received, then the
    loop iteration's batch run), the queue preloaded with QADDs before each round (the
    acked events stay until they expire, as under load)."""
    import re

    idre = re.compile(rb"\$25\r\n([0-9a-f]{16}-[0-9a-f]{8})\r\n")
    last: list = [b""]

    class Capture(Transport):
        def write(self, data: bytes) -> None:
            last[0] = data

    qadd = b"*4\r\n$4\r\nQADD\r\n$1\r\nq\r\n$4\r\n3600\r\n$16\r\n0123456789abcdef\r\n"
    qget = b"*5\r\n$4\r\nQGET\r\n$1\r\nq\r\n$1\r\ng\r\n$5\r\nCOUNT\r\n$3\r\n100\r\n"
    head = b"$4\r\nQACK\r\n$1\r\nq\r\n$1\r\ng\r\n"

    def multi(reply: bytes) -> bytes:
        ids = idre.findall(reply)
        return b"*%d\r\n" % (len(ids) + 3) + head + b"".join(b"$25\r\n" + i + b"\r\n"
                                                           for i in ids)

    def single(reply: bytes) -> bytes:
        return b"".join(b"*4\r\n" + head + b"$25\r\n" + i + b"\r\n"
                        for i in idre.findall(reply))

    for name, acks_of, aof in (("one QACK of 100 IDs", multi, False),
                               ("100 QACKs, pipelined", single, False),
                               ("one QACK, AOF records", multi, True),
                               ("100 QACKs, AOF records", single, True)):
        node, loop, (proto,) = node_with_clients(1, Capture)
        node.aof.on = aof  # the records made (the driver has no file: none written)
        got = _read_and_ack(proto, last, n, rounds, qadd, qget, acks_of)
        loop.close()
        if got is None:
            print(f"groups    QGET COUNT 100 + {name}: not supported by this tree")
            continue
        g, a = got
        print(f"groups    QGET COUNT 100 + {name:22s} {g + a:6.2f} us per event "
              f"(QGET {g:.2f}, acks {a:.2f})")
    # QADD as the 16-deep row of the streams section: 50 connections, 16 each per
    # data_received, then the iteration's batch; without and with the AOF's records
    def qadds(aof: bool):
        node, loop, protos = node_with_clients(50)
        node.aof.on = aof
        return turns(protos, qadd * 16, 16), loop

    for aof in (False, True):
        adds, loop = qadds(aof)
        print(f"groups    QADD, 50 conns x 16-deep{', AOF records' if aof else '':14s} "
              f"{best(adds, n, rounds):6.2f} us per event")
        loop.close()
    # the same at the size the streams section's rounds reach: 2M events held (the
    # ID index and the columns far bigger than the cache); the last 400k timed
    adds, loop = qadds(False)
    adds(1_600_000)
    t0 = clock()
    done = adds(400_000)
    print(f"groups    QADD, 50 conns x 16-deep, 2M held       "
          f"{(clock() - t0) / done * 1e6:6.2f} us per event")
    loop.close()


def bench_execute(n: int, rounds: int) -> None:
    from disquepy.core.config import Config
    from disquepy.core.node import Node

    node = Node(Config(), "a" * 40, random.Random(1), 1_000)
    client = node.new_client(None, "127.0.0.1:50000", 1_000)
    execute, took = node.execute, node.command_took
    for monitors in (0, 1):
        if monitors:  # what the MONITOR command does (Python has no client to send it)
            if not hasattr(node, "monitors"):
                break  # --src: a tree from before MONITOR
            watcher = node.new_client(None, "127.0.0.1:50001", 1_000)
            node.monitors[watcher.id] = watcher
        for name, argv in (("PING", [b"PING"]), ("ADDJOB", [b"ADDJOB", b"q", b"x" * 16, b"0"])):

            def run(k: int, argv=argv) -> int:
                turns = max(1, k // 50)
                for _ in range(turns):
                    for _ in range(50):
                        execute(client, argv, 1_000)
                        took(1_000)
                    node.take_outputs()
                return turns * 50

            print(f"execute   {name:6s} {monitors} monitor{'s' if monitors != 1 else ''}"
                  f"         {best(run, n, rounds) * 1000:6.0f} ns")
        node.flushall()


def bench_replicate(n: int, rounds: int) -> None:
    for mode in ("", "ASYNC"):  # sync, then ASYNC: the core's share of their difference
        _replicate(n, rounds, mode)


def _replicate(n: int, rounds: int, mode: str) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from clusterharness import Cluster

    from disquepy.codec.bus import FrameReader, encode_frame

    burst = BURST
    c = Cluster(3)
    c.meet_all()
    nodes = c.nodes
    index = {node.myid: i for i, node in enumerate(nodes)}
    clients = [[node.new_client(now=c.now) for _ in range(burst)] for node in nodes]
    argv = [b"ADDJOB", b"q", b"0123456789abcdef", b"0", b"REPLICATE", b"3"]
    if mode:
        argv.append(mode.encode())

    def flush(inbox: list) -> None:  # what the driver does once per loop iteration
        for node in nodes:
            for d, msg in node.take_outputs().messages.items():
                inbox[index[d]].append(encode_frame(msg))

    def deliver(inbox: list, now: int) -> None:
        for j, frames in enumerate(inbox):
            reader = FrameReader()
            for f in frames:
                reader.feed(f)
                nodes[j].handle_message(reader.gets(), "127.0.0.1", now)
            frames.clear()

    def run(jobs: int) -> int:
        inbox: list = [[], [], []]
        turns = max(1, jobs // (3 * burst))
        for _ in range(turns):
            c.now += 1
            for node, cls in zip(nodes, clients, strict=True):
                for cl in cls:
                    node.execute(cl, argv, c.now)
            flush(inbox)
            deliver(inbox, c.now)  # REPLJOBs
            flush(inbox)
            deliver(inbox, c.now)  # GOTJOBs
            flush(inbox)
        return turns * 3 * burst

    us = best(run, n, rounds)
    print(f"replicate REPLICATE 3{' ' + mode if mode else ''}, 3 nodes, bursts of {burst} "
          f"{us:6.2f} us per job "
          f"(all three nodes; jobs held per node: {nodes[0].jobs.count})")


def bench_bus(n: int, rounds: int) -> None:
    from disquepy.codec.bus import FrameReader, encode_frame
    from disquepy.core import messages as M
    from disquepy.core.config import Config
    from disquepy.core.node import Node
    from disquepy.server import bus as busmod

    class Bus:  # what _InProtocol.data_received uses of its Bus
        max_frame = 1 << 30
        _bytes_in = _frames_in = 0
        _drop: set = set()

        def on_frame(self, msg, ip) -> None:
            pass

    node = Node(Config(), "a" * 40, random.Random(1), 1_000)
    client = node.new_client(None, "127.0.0.1:50000", 1_000)
    node.execute(client, [b"ADDJOB", b"q", b"0123456789abcdef", b"0"], 1_000)
    job = next(iter(node.jobs.values()))
    wire = M.job_to_wire(job)
    frames = {k: encode_frame([M.REPLJOB, node.myid, node.port, 0, *[wire] * k])
              for k in (1, 8)}
    for k, frame in frames.items():
        proto = busmod._InProtocol(Bus())
        proto.first = False
        received = proto.data_received

        def reads(m: int, received=received, frame=frame) -> None:
            for _ in range(m):
                received(frame)

        print(f"bus       data_received, a {k}-job REPLJOB frame   "
              f"{best(reads, n, rounds):6.2f} us a read")
    reader = FrameReader()

    def decode(m: int, frame: bytes = frames[8]) -> None:
        for _ in range(m):
            reader.feed(frame)
            reader.gets()

    print(f"bus       the codec alone: feed + decode, 8 jobs {best(decode, n, rounds):6.2f} us")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="reader,protocol,execute,replicate,batch")
    ap.add_argument("--requests", type=int, default=100_000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--burst", type=int, default=16, help="replicate: ADDJOBs per node and "
                    "loop turn (what a loop iteration of a loaded node serves)")
    ap.add_argument("--src", help="measure the package in this source tree (A/B)")
    ap.add_argument("--cpu", action="store_true", help="time this process's CPU, not the "
                    "wall clock: steadier when other processes share the cores")
    args = ap.parse_args(argv)
    global clock, BURST
    if args.cpu:
        clock = time.process_time
    BURST = args.burst
    sys.path.insert(0, os.path.abspath(args.src or str(ROOT / "src")))
    gc.set_threshold(10_000, 50, 100)  # the server's policy (driver.start_gc_policy)
    import disquepy

    print(f"disquepy from {Path(disquepy.__file__).parent}")
    todo = {"reader": bench_reader, "protocol": bench_protocol, "execute": bench_execute,
            "replicate": bench_replicate, "batch": bench_batch, "groups": bench_groups,
            "bus": bench_bus}
    for name in args.only.split(","):
        if name not in todo:
            ap.error(f"--only: unknown measure {name!r} (one of {', '.join(todo)})")
        todo[name](args.requests if name != "replicate" else args.requests // 2, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
