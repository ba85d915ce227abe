#!/usr/bin/env python3
"""TLS vs plain TCP ADDJOB throughput, and the cost of the authenticated bus.

Starts one node with a plain port and a ``tls-port`` (mutual TLS: tls-auth-clients
yes, a CA and certificates made for the run), then, in alternating rounds on the same
node, a uvloop client doing request/response ADDJOBs (one in flight per connection)
over plain TCP and over TLS, on 1 connection and on 50, timed once the connections
are open (TLS handshakes excluded: clients keep their connections). With ``--bus`` it also starts
two 3-node clusters, one with ``cluster-secret`` and one without, and times ADDJOB
REPLICATE 3 on each (the handshake is once per link, so they should match).
Then the same ADDJOB from a C client, Redis's ``redis-benchmark`` (built with TLS, as
Debian's 7.x is), 50 connections, plain and TLS in alternating rounds: the Python load
generator's own TLS costs it about as much as the server's, so this row is the
server's ratio. Skipped, and said, where redis-benchmark has no ``--tls``.

Target (issue #18): TLS ADDJOB throughput >= 0.7x plain in the same run.

    .venv/bin/python bench/tls.py                 # about 30 s
    .venv/bin/python bench/tls.py --bus           # + the cluster-secret comparison
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
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


def c_client(port: int, tls_args: list[str], total: int) -> float:
    """ADDJOB/s from redis-benchmark, 50 connections, one request in flight each."""
    out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), *tls_args,
                          "-c", "50", "-n", str(total), "--csv",
                          "ADDJOB", "q", "0123456789abcdef", "0"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    row = [line for line in out.splitlines() if line.startswith('"ADDJOB')][-1]
    return float(row.split(",")[1].strip('"'))


def client_context(ca: CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.cert_path))
    ctx.load_cert_chain(*ca.issue("bench-client"))
    return ctx


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20000, help="per run (50 conns)")
    ap.add_argument("--bus", action="store_true", help="also compare cluster-secret on/off")
    a = ap.parse_args()
    ok = True
    with Fleet() as fleet, tempfile.TemporaryDirectory() as tmp:
        ca = CA(Path(tmp))
        crt, key = ca.issue("node")
        tls_port = free_port()
        node = fleet.start("ours", ["--tls-port", str(tls_port), "--tls-cert-file", crt,
                                    "--tls-key-file", key, "--tls-ca-cert-file",
                                    str(ca.cert_path)])
        ctx = client_context(ca)
        ccrt, ckey = ca.issue("bench-c-client")
        print("| connections | plain ADDJOB/s | TLS ADDJOB/s | TLS / plain | server CPU "
              "µs/ADDJOB plain / TLS | client CPU µs/ADDJOB plain / TLS |")
        print("|---|---|---|---|---|---|")
        for conns, total in ((1, a.requests // 4), (50, a.requests)):
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
            print(f"| {conns} | {statistics.median(r['ops_per_sec'] for r in plain):,.0f} | "
                  f"{statistics.median(r['ops_per_sec'] for r in tls):,.0f} | {ratio:.2f}x | "
                  f"{statistics.median(r['server_us'] for r in plain):.0f} / "
                  f"{statistics.median(r['server_us'] for r in tls):.0f} | "
                  f"{statistics.median(r['client_us'] for r in plain):.0f} / "
                  f"{statistics.median(r['client_us'] for r in tls):.0f} |")
            print(f"{'PASS' if ratio >= 0.7 else 'FAIL'}: TLS/plain on {conns} connection(s) "
                  f"{ratio:.2f}x (target >= 0.7x)", file=sys.stderr)
            ok = ok and ratio >= 0.7
        if redis_benchmark_tls():
            tls_args = ["--tls", "--cacert", str(ca.cert_path), "--cert", ccrt, "--key", ckey]
            plain_r, tls_r, cpu_p, cpu_t = [], [], [], []
            for _ in range(a.rounds):
                for rates, cpus, port, extra in ((plain_r, cpu_p, node.port, []),
                                                 (tls_r, cpu_t, tls_port, tls_args)):
                    node.flush()
                    c0 = node.cpu()
                    rates.append(c_client(port, extra, a.requests))
                    cpus.append((node.cpu() - c0) / a.requests * 1e6)
            ratio = statistics.median(t / p for p, t in zip(plain_r, tls_r, strict=True))
            print(f"| 50, C client (redis-benchmark) | {statistics.median(plain_r):,.0f} | "
                  f"{statistics.median(tls_r):,.0f} | {ratio:.2f}x | "
                  f"{statistics.median(cpu_p):.0f} / {statistics.median(cpu_t):.0f} | - |")
            print(f"{'PASS' if ratio >= 0.7 else 'FAIL'}: TLS/plain from a C client "
                  f"{ratio:.2f}x (target >= 0.7x)", file=sys.stderr)
            ok = ok and ratio >= 0.7
        else:
            print("| 50, C client | redis-benchmark without --tls here: skipped | | | | |")
        if a.bus:
            secret = ["--cluster-secret", "bench-secret-0123456789abcdef"]
            sides = {"no secret": fleet.cluster("ours"),
                     "cluster-secret": fleet.cluster("ours", extra=secret)}
            print("\n| bus | ADDJOB REPLICATE 3/s, 50 conns |\n|---|---|")
            reps: dict[str, list[float]] = {k: [] for k in sides}
            for _ in range(a.rounds):
                for k, nodes in sides.items():
                    for s in nodes:
                        s.flush()
                    reps[k].append(run(nodes[0].port, None, 50, a.requests // 4,
                                       CMD_R3)["ops_per_sec"])
            for k, v in reps.items():
                print(f"| {k} | {statistics.median(v):,.0f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
