#!/usr/bin/env python3
"""TLS vs plain TCP ADDJOB throughput, and the cost of the authenticated bus.

Starts one node with a plain port and a ``tls-port`` (mutual TLS: tls-auth-clients
yes, a CA and certificates made for the run) and times request/response ADDJOBs (one
in flight per connection) over plain TCP and over TLS in alternating rounds on that
node, TLS handshakes excluded (clients of a job queue keep their connections):

- from a C client, Redis's ``redis-benchmark`` (built with TLS, as Debian's 7.x is),
  50 connections, counted on the node in 20 pairs of 0.5 s turns, plain and TLS
  taking turns with all connections open (``c_clients``). This is the target row: on 2 cores the client shares the machine with the node, and a C client
  leaves the node the bound, as the ``single`` section's loadgen does.
- from a uvloop client on 1 and 50 connections, for reference: its own TLS (asyncio's
  SSL transport) costs it about as much CPU as the node's, so these ratios are the
  pair's, not the node's.

With ``--bus`` it also starts three 3-node clusters (no secret,
``cluster-secret``, the bus over mutual TLS) and times ADDJOB REPLICATE 3 on each (the
secret's handshake is once per link, so the first two should match).

Target (issue #18): TLS ADDJOB throughput >= 0.7x plain in the same run.

    .venv/bin/python bench/tls.py                 # about 35 s
    .venv/bin/python bench/tls.py --bus           # + the bus: secret, tls-cluster
    .venv/bin/python bench/tls.py --rounds 0 --against /tmp/old/src [--pipeline 16]
                                  # the C-client row A/B against another tree, same turns
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # tlscerts.py: the tests' throw-away CA

from servers import Fleet, free_port  # noqa: E402  (bench/servers.py)
from tlscerts import CA  # noqa: E402

CMD = b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$16\r\n0123456789abcdef\r\n$1\r\n0\r\n"
CMD_R3 = (b"*6\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$16\r\n0123456789abcdef\r\n$4\r\n5000\r\n"
          b"$9\r\nREPLICATE\r\n$1\r\n3\r\n")


async def _conn(port: int, ctx: ssl.SSLContext | None):
    return await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                         server_hostname="127.0.0.1" if ctx else None)


async def _requests(reader, writer, n: int, cmd: bytes) -> int:
    ok = 0
    for _ in range(n):
        writer.write(cmd)
        line = await reader.readline()
        ok += line.startswith(b"+D-")
    return ok


async def _run(port: int, ctx, conns: int, total: int, cmd: bytes, server_cpu) -> dict:
    """Connect (TLS handshakes included), then time the requests only: clients of a
    job queue keep their connections."""
    per = total // conns
    links = await asyncio.gather(*(_conn(port, ctx) for _ in range(conns)))
    cpu0, proc0, t = server_cpu(), time.process_time(), time.perf_counter()
    oks = await asyncio.gather(*(_requests(r, w, per, cmd) for r, w in links))
    dt = time.perf_counter() - t
    cpu1, proc1 = server_cpu(), time.process_time()
    for _, w in links:
        w.close()
    n = max(1, sum(oks))
    return {"ops": sum(oks), "expected": per * conns, "ops_per_sec": sum(oks) / dt,
            "server_us": (cpu1 - cpu0) / n * 1e6, "client_us": (proc1 - proc0) / n * 1e6}


def run(port: int, ctx, conns: int, total: int, cmd: bytes = CMD,
        server_cpu=lambda: 0.0) -> dict:
    import uvloop

    return uvloop.run(_run(port, ctx, conns, total, cmd, server_cpu))


def redis_benchmark_tls() -> bool:
    """Whether this machine's redis-benchmark can speak TLS."""
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return False
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    return "--tls" in out.stdout + out.stderr


def c_clients(sides: list[tuple], pairs: int, seconds: float, pipeline: int = 1,
              settle: float = 0.15) -> list[list[tuple[float, float]]]:
    """Per side (node, port, redis-benchmark's TLS arguments), per pair: (ADDJOB/s,
    server CPU µs per ADDJOB) from redis-benchmark, 50 connections, ``pipeline``
    requests in flight each.

    One redis-benchmark per side is started once and all its connections opened (TLS
    handshakes, about 1 ms of node CPU each, stay out of the figures); then the sides
    take turns, the others stopped (SIGSTOP): in each pair every side runs alone for
    ``settle`` + ``seconds``, counted on its node (QLEN) over the last ``seconds``,
    in an order that alternates from pair to pair. Short turns taken in quick
    succession see the same machine: on a shared host the rate drifts by tens of per
    cent within a minute, which 2 s rounds started afresh did not cancel out."""
    gens = []
    res: list[list[tuple[float, float]]] = [[] for _ in sides]
    try:
        for node, port, extra in sides:
            opened = node.info_int("clients", "connected_clients") + 50
            gens.append(subprocess.Popen(
                ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), *extra, "-c", "50",
                 "-P", str(pipeline), "-n", "1000000000", "-q",
                 "ADDJOB", "q", "0123456789abcdef", "0"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            deadline = time.monotonic() + 15
            while node.info_int("clients", "connected_clients") < opened:
                if gens[-1].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-benchmark did not open its 50 connections")
                time.sleep(0.05)
            gens[-1].send_signal(signal.SIGSTOP)
        nodes = list({id(node): node for node, _, _ in sides}.values())
        for i in range(pairs):
            for node in nodes:
                node.flush()  # every pair on an empty queue, as the first
            order = list(range(len(sides)))
            if i % 2:
                order.reverse()
            for k in order:
                node = sides[k][0]
                gens[k].send_signal(signal.SIGCONT)
                time.sleep(settle)
                q0, cpu0, t0 = node.call("QLEN", "q"), node.cpu(), time.perf_counter()
                time.sleep(seconds)
                q1, cpu1, t1 = node.call("QLEN", "q"), node.cpu(), time.perf_counter()
                gens[k].send_signal(signal.SIGSTOP)
                n = max(1, q1 - q0)
                res[k].append((n / (t1 - t0), (cpu1 - cpu0) / n * 1e6))
    finally:
        for g in gens:
            g.kill()
            g.send_signal(signal.SIGCONT)
            g.wait(10)
    return res


def client_context(ca: CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.cert_path))
    ctx.load_cert_chain(*ca.issue("bench-client"))
    return ctx


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="Python-client rounds")
    ap.add_argument("--requests", type=int, default=20000, help="per run (50 conns)")
    ap.add_argument("--c-rounds", type=int, default=20, help="C-client pairs of turns")
    ap.add_argument("--seconds", type=float, default=0.5, help="C-client window per turn")
    ap.add_argument("--bus", action="store_true",
                    help="also compare clusters: no secret, cluster-secret, tls-cluster")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round of each")
    ap.add_argument("--pipeline", type=int, default=1,
                    help="C client: requests in flight per connection (the target: 1)")
    ap.add_argument("--against", type=Path, metavar="SRC",
                    help="C client: also a node run from this package tree (another "
                         "commit's src/, its compiled core built), in the same turns")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.requests, a.c_rounds, a.seconds = 1, 5000, 2, 0.3
    ok = True
    with Fleet() as fleet, tempfile.TemporaryDirectory() as tmp:
        ca = CA(Path(tmp))
        crt, key = ca.issue("node")
        tls_port = free_port()
        tls_conf = ["--tls-cert-file", crt, "--tls-key-file", key,
                    "--tls-ca-cert-file", str(ca.cert_path)]
        node = fleet.start("ours", ["--tls-port", str(tls_port), *tls_conf])
        ctx = client_context(ca)
        ccrt, ckey = ca.issue("bench-c-client")
        print("| connections | plain ADDJOB/s | TLS ADDJOB/s | TLS / plain | server CPU "
              "µs/ADDJOB plain / TLS | client CPU µs/ADDJOB plain / TLS |")
        print("|---|---|---|---|---|---|")
        for conns, total in ((1, a.requests // 4), (50, a.requests)) if a.rounds else ():
            plain, tls = [], []
            for _ in range(a.rounds):  # alternating, so both see the same machine noise
                for side, port, c in ((plain, node.port, None), (tls, tls_port, ctx)):
                    node.flush()
                    side.append(run(port, c, conns, total, server_cpu=node.cpu))
            for r in plain + tls:
                if r["ops"] != r["expected"]:
                    print(f"problem: {r['ops']} of {r['expected']} ADDJOBs answered")
                    ok = False
            ratio = statistics.median(t["ops_per_sec"] / p["ops_per_sec"]
                                      for p, t in zip(plain, tls, strict=True))
            print(f"| {conns}, uvloop client | "
                  f"{statistics.median(r['ops_per_sec'] for r in plain):,.0f} | "
                  f"{statistics.median(r['ops_per_sec'] for r in tls):,.0f} | {ratio:.2f}x | "
                  f"{statistics.median(r['server_us'] for r in plain):.0f} / "
                  f"{statistics.median(r['server_us'] for r in tls):.0f} | "
                  f"{statistics.median(r['client_us'] for r in plain):.0f} / "
                  f"{statistics.median(r['client_us'] for r in tls):.0f} |")
        if redis_benchmark_tls():
            tls_args = ["--tls", "--cacert", str(ca.cert_path), "--cert", ccrt, "--key", ckey]
            sides = [("", node, tls_port)]
            if a.against:
                other_tls = free_port()
                sides.append((f", {a.against}", fleet.start(
                    "ours", ["--tls-port", str(other_tls), *tls_conf], src=a.against),
                    other_tls))
            res = c_clients([t for _, n, tp in sides for t in ((n, n.port, []),
                                                                (n, tp, tls_args))],
                            a.c_rounds, a.seconds, a.pipeline)
            for k, (label, _, _) in enumerate(sides):
                plain, tls = res[2 * k], res[2 * k + 1]
                rounds = [t[0] / p[0] for p, t in zip(plain, tls, strict=True)]
                ratio = statistics.median(rounds)
                print(f"| 50{f' x {a.pipeline} deep' if a.pipeline > 1 else ''}, C client "
                      f"(redis-benchmark){label} | "
                      f"{statistics.median(r for r, _ in plain):,.0f} | "
                      f"{statistics.median(r for r, _ in tls):,.0f} | {ratio:.2f}x | "
                      f"{statistics.median(c for _, c in plain):.1f} / "
                      f"{statistics.median(c for _, c in tls):.1f} | - |")
                print(f"pairs (TLS / plain){label}: "
                      f"{', '.join(f'{r:.2f}' for r in rounds)}")
                if k == 0 and a.pipeline == 1:  # the target
                    print(f"{'PASS' if ratio >= 0.7 else 'FAIL'}: TLS/plain from a C "
                          f"client {ratio:.2f}x (target >= 0.7x)")
                    ok = ok and ratio >= 0.7
        else:
            print("| 50, C client | redis-benchmark without --tls here | | | | |")
            print("FAIL: TLS/plain from a C client not measured (redis-benchmark has no "
                  "--tls here; Debian's redis-tools has)")
            ok = False
        if a.bus:
            secret = ["--cluster-secret", "bench-secret-0123456789abcdef"]
            tls_ports = [free_port() for _ in range(3)]
            sides = {"no secret": fleet.cluster("ours"),
                     "cluster-secret": fleet.cluster("ours", extra=secret),
                     "tls-cluster (mutual TLS)": fleet.cluster(
                         "ours", extra=["--tls-cert-file", crt, "--tls-key-file", key,
                                        "--tls-ca-cert-file", str(ca.cert_path),
                                        "--tls-cluster", "yes"],
                         per_node=[["--tls-port", str(p)] for p in tls_ports],
                         meet_ports=tls_ports)}
            print("\n| bus | ADDJOB REPLICATE 3/s, 50 conns | CPU µs/job, 3 nodes |\n|---|---|---|")
            reps: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
            for _ in range(a.rounds):
                for k, nodes in sides.items():
                    for s in nodes:
                        s.flush()
                    r = run(nodes[0].port, None, 50, a.requests // 4, CMD_R3,
                            server_cpu=lambda ns=nodes: sum(s.cpu() for s in ns))
                    reps[k].append((r["ops_per_sec"], r["server_us"]))
            for k, v in reps.items():
                print(f"| {k} | {statistics.median(x for x, _ in v):,.0f} | "
                      f"{statistics.median(c for _, c in v):.0f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
