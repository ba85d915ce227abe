#!/usr/bin/env python3
"""disque-web against the client library, and the dashboard with 100k queued jobs.

Starts its own node (bench/servers.py) and a ``disque-web`` in front of it, then:

  post     POST /jobs (JSON body, 202) against ``Disque.add_job`` of the same job, both
           from CONC threads with one keep-alive connection each, unpipelined, in
           alternating rounds of SECONDS (web, client, web, client...); the rate is the
           median over the rounds. Target (issue #15): POST /jobs >= 0.5x add_job.
           The load generator shares the machine's cores with what it measures, so its
           HTTP side is as cheap as the client library's side (``--http raw``, the
           default: one keep-alive socket per thread, the request prebuilt, the reply
           read by its status line and Content-Length, about 40 us of CPU a request
           like redis-py with hiredis); ``--http http.client`` uses the standard
           library's client (about 130 us a request). CPU per request of disque-web,
           the node and the load generator is printed for both sides (from /proc).
  render   100k jobs queued (three priority levels), then a headless Chromium (Debian's
           chromium + chromium-driver) opens the dashboard's jobs view and overview; the
           time is from navigation start to the first table row drawn, read in the page
           (performance.now()), median of 5 loads, each in a fresh browser (after one
           load not counted: the first start of Chromium reads its files from disk). Target: under 1 s.
  status   the node's CPU per JOBSTATUS against SHOW, on live jobs and on finished ones
           (outcomes), pipelined by 1000, from /proc, best of 5. Target (issue #15): the
           status command costs no more than SHOW.

    .venv/bin/python bench/web.py                        # about 2 minutes (make bench: "web")
    .venv/bin/python bench/web.py --quick                # smoke run
    .venv/bin/python bench/web.py --only post --conc 8 --seconds 5
    .venv/bin/python bench/web.py --only post --web-workers 1 --http http.client
    .venv/bin/python bench/web.py --only post --against /tmp/old/src   # A/B, same turns

``--against SRC`` starts a second disque-web from another tree's package (``git archive``
of a commit, its ``src``) in front of the same node and takes turns with it (this tree,
that one, add_job, ...): the rows ``post_jobs_per_s``, ``ratio`` and ``cpu_us_per_job``
of both, measured in the same minutes.

disque-web runs with ``--workers 2`` (one per core of this 2-core machine) unless
``--web-workers`` says otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servers import Server, free_port  # noqa: E402  (bench/servers.py)

from disquepy.client import Disque  # noqa: E402

JOB = {"payload": {"to": "ann@example.net", "template": "welcome"}, "queue": "bench",
       "priority": "high"}


def start_web(node_port: int, workdir: Path, workers: int = 1,
              src: Path = ROOT / "src") -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = open(workdir / "web.log", "ab")  # noqa: SIM115 - lives as long as the process
    p = subprocess.Popen([sys.executable, "-m", "disquepy.web", "--nodes",
                          f"127.0.0.1:{node_port}", "--port", str(port),
                          "--workers", str(workers),
                          "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT,
                         env=dict(os.environ, PYTHONPATH=str(src)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"disque-web exited: {(workdir / 'web.log').read_text()}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=2)
            return p, port
        except OSError:
            time.sleep(0.1)
    p.kill()
    raise RuntimeError("disque-web did not start")


def run_threads(conc: int, seconds: float, make_op) -> float:
    """conc threads each calling its own op() for ``seconds``: calls per second."""
    counts = [0] * conc
    go = threading.Event()
    end = [0.0]

    def loop(i: int) -> None:
        op = make_op()
        go.wait()
        n = 0
        while time.monotonic() < end[0]:
            op()
            n += 1
        counts[i] = n

    ts = [threading.Thread(target=loop, args=(i,)) for i in range(conc)]
    for t in ts:
        t.start()
    time.sleep(0.5)  # connections made
    t0 = time.monotonic()
    end[0] = t0 + seconds
    go.set()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def http_op(port: int):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps(JOB).encode()
    headers = {"Content-Type": "application/json"}

    def op() -> None:
        conn.request("POST", "/jobs", body, headers)
        r = conn.getresponse()
        r.read()
        if r.status != 202:
            raise RuntimeError(f"POST /jobs: {r.status}")
    return op


def raw_http_op(port: int):
    """POST /jobs on a keep-alive socket: what http.client does, without its layers."""
    import socket

    body = json.dumps(JOB).encode()
    request = (b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
               b"\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()

    def op() -> None:
        sock.sendall(request)
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(buf[:end]).lower()
                i = head.find(b"content-length:")
                if i < 0:
                    raise RuntimeError("POST /jobs: no Content-Length")
                n = int(head[i + 15:head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0
                             else len(head)])
                if len(buf) >= end + 4 + n:
                    if not buf.startswith(b"HTTP/1.1 202"):
                        raise RuntimeError(f"POST /jobs: {bytes(buf[:40])!r}")
                    del buf[:end + 4 + n]
                    return
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("POST /jobs: connection closed")
            buf.extend(chunk)
    return op


def client_op(node_port: int):
    c = Disque(f"127.0.0.1:{node_port}")
    body = json.dumps(JOB["payload"])

    def op() -> None:
        c.add_job("bench:high", body)
    return op


def proc_cpu(pid: int) -> float:
    """CPU seconds of a process and its children (disque-web --workers' processes)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def bench_post(node: Server, webs: list[tuple[int, int]], conc: int, seconds: float,
               rounds: int, http: str) -> list[dict]:
    """POST /jobs on each disque-web of ``webs`` (pid, port), then add_job, in turns:
    one result per disque-web (its rate against add_job's of the same rounds)."""
    make = raw_http_op if http == "raw" else http_op
    ops = [(pid, (lambda p=port: make(p))) for pid, port in webs]
    for _, op in ops:
        run_threads(conc, 1.0, op)  # warm-up: first requests, pools
    rates: list[list[float]] = [[] for _ in webs]
    cli: list[float] = []
    cpu = [{"web": 0.0, "node_post": 0.0, "loadgen_post": 0.0} for _ in webs]
    add = {"node_add": 0.0, "loadgen_add": 0.0}
    for _ in range(rounds):
        for k, (pid, op) in enumerate(ops):
            node.flush()
            w0, n0, g0 = proc_cpu(pid), node.cpu(), time.process_time()
            rates[k].append(run_threads(conc, seconds, op))
            cpu[k]["web"] += proc_cpu(pid) - w0
            cpu[k]["node_post"] += node.cpu() - n0
            cpu[k]["loadgen_post"] += time.process_time() - g0
        node.flush()
        n1, g1 = node.cpu(), time.process_time()
        cli.append(run_threads(conc, seconds, lambda: client_op(node.port)))
        add["node_add"] += node.cpu() - n1
        add["loadgen_add"] += time.process_time() - g1
    c = statistics.median(cli)
    n_add = sum(cli) * seconds
    out = []
    for k in range(len(webs)):
        w = statistics.median(rates[k])
        n_post = sum(rates[k]) * seconds
        per = {key: round(v / n_post * 1e6) for key, v in cpu[k].items()}
        per.update({key: round(v / n_add * 1e6) for key, v in add.items()})
        out.append({"post_jobs_per_s": round(w), "add_job_per_s": round(c),
                    "ratio": round(w / c, 2), "http": http, "cpu_us_per_job": per,
                    "rounds": {"post": [round(x) for x in rates[k]],
                               "add_job": [round(x) for x in cli]}})
    return out


def bench_render(node: Server, web_port: int, jobs: int, loads: int) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "web"))
    from conftest import make_driver  # the tests' headless Chromium

    node.flush()
    r = node.client()
    p = r.pipeline(transaction=False)
    for i in range(jobs):
        q = ("bulk:high", "bulk", "bulk:low")[i % 3]
        p.execute_command("ADDJOB", q, json.dumps({"n": i}), 0, "ASYNC")
        if i % 2000 == 1999:
            p.execute()
    p.execute()
    queued = sum(r.execute_command("QLEN", q) for q in ("bulk:high", "bulk", "bulk:low"))
    r.close()
    out: dict = {"queued": queued}
    probe = """const done = arguments[arguments.length - 1], sel = arguments[0];
      (function poll() {
        const row = document.querySelector(sel);
        if (row && row.offsetHeight) requestAnimationFrame(() => done(performance.now()));
        else setTimeout(poll, 2);
      })();"""
    for view, sel in (("jobs", "#jobs-table tbody tr[data-id]"),
                      ("overview", '#queues-table tr[data-queue="bulk"]')):
        times = []
        for k in range(loads + 1):  # the first load warms the disk cache: not counted
            profile = tempfile.mkdtemp(prefix="disquepy-bench-chromium-")
            d = make_driver(profile)
            try:
                d.set_script_timeout(30)
                d.get("about:blank")
                d.get(f"http://127.0.0.1:{web_port}/#{view}")
                t = d.execute_async_script(probe, sel)
                if k:
                    times.append(t)
            finally:
                d.quit()
                shutil.rmtree(profile, ignore_errors=True)
        out[f"{view}_ms"] = round(statistics.median(times))
        out[f"{view}_ms_all"] = [round(t) for t in times]
    return out


def bench_status(node: Server, n: int = 20_000) -> dict:
    node.flush()
    r = node.client()
    p = r.pipeline(transaction=False)
    for i in range(n):
        p.execute_command("ADDJOB", "status", f"body-{i:08d}", 0)
    ids = p.execute()
    finished, live = ids[: n // 2], ids[n // 2:]
    p = r.pipeline(transaction=False)
    for jid in finished:
        p.execute_command("ACKJOB", jid)
    p.execute()

    def cost(cmd: str, jids: list) -> float:
        best = float("inf")
        for _ in range(5):
            c0 = node.cpu()
            for k in range(0, len(jids), 1000):
                p = r.pipeline(transaction=False)
                for jid in jids[k:k + 1000]:
                    p.execute_command(cmd, jid)
                p.execute()
            best = min(best, (node.cpu() - c0) / len(jids) * 1e6)
        return round(best, 1)

    out = {"show_live_us": cost("SHOW", live), "jobstatus_live_us": cost("JOBSTATUS", live),
           "jobstatus_finished_us": cost("JOBSTATUS", finished)}
    r.close()
    return out


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def verdict(what: str, passed: bool) -> bool:
    """One target line, as bench/run.py reads them (PASS or FAIL in it)."""
    print(f"{'PASS' if passed else 'FAIL'} {what}", flush=True)
    return passed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="post,render,status")
    ap.add_argument("--conc", type=int, default=8, help="threads on each side (post)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--http", choices=("raw", "http.client"), default="raw",
                    help="the load generator's HTTP client (raw: as cheap as add_job's)")
    ap.add_argument("--web-workers", type=int, default=2,
                    help="disque-web --workers (uvicorn worker processes; one per core)")
    ap.add_argument("--against", type=Path, metavar="SRC",
                    help="post: also a disque-web from this package tree (another "
                         "commit's src), in the same turns")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 s, 1 round, 20k jobs")
    a = ap.parse_args()
    if a.quick:
        a.seconds, a.rounds, a.jobs, a.loads = 1.0, 1, 20_000, 1
    ok = True
    work = Path(tempfile.mkdtemp(prefix="disquepy-bench-web-"))
    node = Server("ours", "disquepy", work / "node", []).start()
    web = other = None
    try:
        web, web_port = start_web(node.port, work, a.web_workers)
        webs = [(web.pid, web_port)]
        if a.against and "post" in a.only:
            other, other_port = start_web(node.port, work, a.web_workers,
                                          a.against.resolve())
            webs.append((other.pid, other_port))
        result: dict = {}
        # the figures depend on what else the machine runs: printed with them
        print("load average at start:", loadavg(), flush=True)
        if "post" in a.only:
            posts = bench_post(node, webs, a.conc, a.seconds, a.rounds, a.http)
            result["post"] = posts[0]
            print("post  ", json.dumps(result["post"]), flush=True)
            if a.against:
                print(f"post   {a.against}:", json.dumps(posts[1]), flush=True)
            ok &= verdict(f"POST /jobs at {result['post']['ratio']}x add_job with {a.conc} "
                          "threads each (target >= 0.5x)", result["post"]["ratio"] >= 0.5)
        if "render" in a.only:
            result["render"] = bench_render(node, web_port, a.jobs, a.loads)
            print("render", json.dumps(result["render"]), flush=True)
            for view in ("jobs", "overview"):
                ms = result["render"][f"{view}_ms"]
                ok &= verdict(f"dashboard {view} view with {result['render']['queued']} "
                              f"queued jobs drawn in {ms} ms (target < 1000 ms)", ms < 1000)
        if "status" in a.only:
            result["status"] = bench_status(node)
            st = result["status"]
            print("status", json.dumps(st), flush=True)
            ok &= verdict(f"JOBSTATUS {st['jobstatus_live_us']} us (live), "
                          f"{st['jobstatus_finished_us']} us (finished) of node CPU against "
                          f"SHOW {st['show_live_us']} us (target: no more than SHOW)",
                          max(st["jobstatus_live_us"], st["jobstatus_finished_us"])
                          <= st["show_live_us"])
        print("load average at end:", loadavg(), flush=True)
        return 0 if ok else 1
    finally:
        for p in (web, other):
            if p is not None:
                p.terminate()
                p.wait(10)
        node.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
