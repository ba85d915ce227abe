#!/usr/bin/env python3
"""Benchmark disquepy's append-only file (AOF): its cost and its rewrite pause.

Three parts (each printed as it comes; PASS/FAIL lines for the targets):

  1. fsync    raw disk latency for context: write 4 KiB (O_APPEND) + os.fdatasync
              in a loop for about 1 s in the scratch directory; median/p99/max us.
  2. policies ADDJOB aof:q <16-byte body> 0, 50 connections, unpipelined, against
              four fresh single-node servers started together, each in its own
              scratch directory:
                  --appendonly no                          (AOF off: the denominator)
                  --appendonly yes --appendfsync no
                  --appendonly yes --appendfsync everysec
                  --appendonly yes --appendfsync always    (group commit)
              They take turns, `repeat` rounds (default 3), median jobs/s kept;
              `sync` is called before every run so each starts with a clean page
              cache.  Then, for context, 1 connection against AOF off and against
              `always` (no group commit possible there: one fdatasync per job).
              Targets: everysec >= 0.9x AOF off; always (50 conns) >= 0.5x AOF off.
  3. rewrite  a fresh server (--appendonly yes --appendfsync everysec
              --auto-aof-rewrite-percentage 0): 200k jobs added (pipelined) and
              left alone, 100k more added and acked (so the rewrite has something
              to drop); then a probe process PINGs every 1 ms on its own
              connection while BGREWRITEAOF runs; the harness polls INFO
              persistence until aof_rewrite_in_progress:0 (bounded).  Reports the
              rewrite duration, aof_rewrite_longest_slice_ms, the probe's latency
              before and during the rewrite, and the AOF size before/after.

    .venv/bin/python bench/aof.py --quick
    .venv/bin/python bench/aof.py --markdown --json bench/results/aof.json
    .venv/bin/python bench/run.py --only aof

Stdlib only; the load comes from bench/loadgen.  Every server is stopped at the
end, also on Ctrl-C/SIGTERM; every wait is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # one module object whether run or imported
    sys.modules.setdefault("aof", sys.modules["__main__"])

import cluster as C  # noqa: E402  (bench/cluster.py: RESP client, port picking)
import run as R  # noqa: E402  (bench/run.py: loadgen, Server, reporting helpers)

CONNS = 50
BODY = R.BODY_SIZE
QUEUE = "aof:q"
# (key, label, server arguments)
POLICIES = [
    ("off", "AOF off", ["--appendonly", "no"]),
    ("no", "appendfsync no", ["--appendonly", "yes", "--appendfsync", "no"]),
    ("everysec", "appendfsync everysec", ["--appendonly", "yes", "--appendfsync", "everysec"]),
    ("always", "appendfsync always", ["--appendonly", "yes", "--appendfsync", "always"]),
]
LABEL = {k: label for k, label, _ in POLICIES}
REWRITE_ARGS = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "everysec",
    "--auto-aof-rewrite-percentage",
    "0",  # only our BGREWRITEAOF rewrites
]
DEFAULT_REPEAT = 3  # rounds of the policy rows when --repeat is not given
FSYNC_BLOCK = 4096
ONE_CONN_TARGET_S = 1.5  # the 1-connection rows are sized to take about this long
PROBE_INTERVAL_S = 0.001
INFO_POLL_S = 0.01
REWRITE_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 15.0

# Targets.
TARGET_EVERYSEC = 0.9
TARGET_ALWAYS = 0.5


class AofBenchError(R.HarnessError):
    pass


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------


def server_argv(args, port: int, extra: list[str]) -> list[str]:
    return [*R.absolutize(args.ours_cmd), "--port", str(port), *extra]


def start_server(args, parent: Path, tag: str, extra: list[str], used: set[int]) -> R.Server:
    """A fresh single-node server in its own scratch directory under parent.

    Ports come from bench/cluster.py's range (P and the bus port P+10000 free)."""
    for attempt in range(3):  # a port may be taken between the check and the bind
        port = C.pick_ports(1, used)[0]
        used.add(port)
        d = parent / f"{tag}-{attempt}"
        d.mkdir()
        srv = R.Server(f"aof-{tag}", server_argv(args, port, extra), port, d)
        try:
            srv.start(args.startup_timeout)
            return srv
        except R.HarnessError as e:
            srv.stop()
            if attempt == 2 or "in use" not in str(e).lower():
                raise
            R.log(f"aof-{tag}: port {port} was taken; retrying on another port")
    raise AssertionError("unreachable")


def argv_str(srv: R.Server) -> str:
    return shlex.join([R.display_path(a) if a.startswith("/") else a for a in srv.argv])


def cmd_str(cmd: list[str]) -> str:
    return shlex.join([R.display_path(cmd[0]), *cmd[1:]])


def info(port: int, section: str) -> dict[str, str]:
    c = C.Resp(port, timeout=10)
    try:
        return C.info(c, section)
    finally:
        c.close()


def cpu_seconds(srv: R.Server) -> float:
    """User + system CPU time used so far by a server (and its children)."""
    if srv.proc is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in [srv.proc.pid, *R.descendants(srv.proc.pid)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


# A log line: "pid:role dd Mon yyyy hh:mm:ss.mmm <level> message"; level '#' = warning.
LOG_LINE = re.compile(r"^\d+:\w \d+ \w+ \d+ [\d:.]+ (.) (.*)$")
LOG_SUSPECT = re.compile(r"traceback|exception|error|fail|automatic rewriting", re.I)


def log_anomalies(srv: R.Server, limit: int = 8) -> list[str]:
    """Warning lines (level '#'), and anything that looks like an error, from a server log."""
    try:
        lines = srv.logpath.read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for ln in lines:
        m = LOG_LINE.match(ln)
        if (m and m.group(1) == "#") or LOG_SUSPECT.search(ln):
            out.append(ln.strip())
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out


def mount_of(path: Path) -> dict:
    """The filesystem holding path (from /proc/mounts: longest matching mount point)."""
    real = os.path.realpath(path)
    best = {"device": "?", "fstype": "?", "mountpoint": "?", "options": ""}
    best_len = -1
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 4:
                continue
            mp = parts[1].replace("\\040", " ")
            if (real == mp or real.startswith(mp.rstrip("/") + "/")) and len(mp) > best_len:
                best_len = len(mp)
                best = {
                    "device": parts[0],
                    "fstype": parts[2],
                    "mountpoint": mp,
                    "options": parts[3],
                }
    return best


def sync_disk() -> None:
    """Flush dirty pages so that each run starts from a clean page cache."""
    with contextlib.suppress(OSError):
        os.sync()


# --------------------------------------------------------------------------
# 1. raw fdatasync latency
# --------------------------------------------------------------------------


def fsync_latency(directory: Path, seconds: float) -> dict:
    path = directory / "fsync-test.dat"
    buf = b"\0" * FSYNC_BLOCK
    lat_us: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            t = time.perf_counter_ns()
            view = memoryview(buf)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
            lat_us.append((time.perf_counter_ns() - t) / 1000)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
    med = statistics.median(lat_us)
    return {
        "what": f"os.write({FSYNC_BLOCK} bytes, O_APPEND) + os.fdatasync(fd) in a loop for "
        f"{seconds:g} s, in {R.display_path(str(directory))} (Python {sys.version.split()[0]})",
        "n": len(lat_us),
        "seconds": elapsed,
        "median_us": med,
        "p99_us": C.pct(lat_us, 99),
        "max_us": max(lat_us),
        "mean_us": statistics.fmean(lat_us),
        "per_sec": len(lat_us) / elapsed,
    }


# --------------------------------------------------------------------------
# 2. ADDJOB throughput per fsync policy
# --------------------------------------------------------------------------


def one_run(args, srv: R.Server, conns: int, n: int) -> dict:
    sync_disk()
    cpu0 = cpu_seconds(srv)
    rep = R.run_loadgen(srv.port, "addjob", conns, 1, n, QUEUE, args.max_seconds)
    cpu = cpu_seconds(srv) - cpu0
    rep["cpu_us_per_job"] = cpu * 1e6 / rep["ops"] if rep["ops"] else None
    if not srv.alive():
        rep["errors"] = rep.get("errors", 0) + 1
        rep["first_error"] = rep.get("first_error") or (
            f"{srv.name} died (exit {srv.proc.returncode if srv.proc else '?'}); "
            f"log tail:\n{srv.log_tail()}"
        )
    return rep


def median_row(key: str, conns: int, n: int, runs: list[dict], command: str) -> dict:
    ordered = sorted(runs, key=lambda r: r["ops_per_sec"])
    rep = dict(ordered[len(ordered) // 2])
    rep["runs_ops_per_sec"] = [r["ops_per_sec"] for r in runs]
    bad = next((r for r in runs if r.get("errors")), None)
    if bad and not rep.get("errors"):  # errors anywhere count, not only in the median run
        rep["errors"], rep["first_error"] = bad["errors"], bad["first_error"]
    return {
        "key": key,
        "name": LABEL[key],
        "conns": conns,
        "requests": n,
        "report": rep,
        "command": command,
    }


def one_conn_requests(args, fs: dict | None) -> int:
    """Size the 1-connection rows to take about ONE_CONN_TARGET_S on `always`."""
    per_job = 250e-6 + (fs["median_us"] * 1e-6 if fs else 1e-3)  # round trip + one fsync
    target = ONE_CONN_TARGET_S / (5 if args.quick else 1)
    return max(200, min(args.requests, int(target / per_job)))


def server_state(srv: R.Server) -> dict:
    """INFO persistence of a server, plus the AOF's size on disk."""
    st: dict = {"alive": srv.alive()}
    try:
        p = info(srv.port, "persistence")
    except (OSError, C.RespError) as e:
        st["error"] = f"INFO persistence: {e}"
        return st
    st["info"] = p
    aof = srv.workdir / "disque.aof"
    st["file_size"] = aof.stat().st_size if aof.exists() else None
    return st


def check_state(key: str, srv: R.Server, st: dict, notes: list[str]) -> None:
    """Notes for anything unexpected in a policy server's state."""
    name = f"{LABEL[key]} server"
    if not st["alive"]:
        notes.append(f"{name} died; log tail:\n{srv.log_tail()}")
        return
    if "error" in st:
        notes.append(f"{name}: {st['error']}")
        return
    p = st["info"]
    want = "0" if key == "off" else "1"
    if p.get("aof_enabled") != want:
        notes.append(
            f"{name}: INFO persistence aof_enabled:{p.get('aof_enabled')} (expected {want})"
        )
    if key != "off":
        if p.get("aof_last_write_status", "ok") != "ok":
            notes.append(f"{name}: aof_last_write_status:{p.get('aof_last_write_status')}")
        if p.get("aof_base_size", "0") != "0" or p.get("aof_rewrite_in_progress") == "1":
            notes.append(
                f"{name}: an AOF rewrite ran during the runs (aof_base_size "
                f"{p.get('aof_base_size')}, in progress {p.get('aof_rewrite_in_progress')})"
            )
        cur = p.get("aof_current_size")
        if st["file_size"] is None:
            notes.append(f"{name}: no disque.aof in its directory {srv.workdir}")
        elif cur is not None and int(cur) != st["file_size"]:
            notes.append(
                f"{name}: aof_current_size {cur} but disque.aof is {st['file_size']} bytes on disk"
            )
        elif cur in (None, "0"):
            notes.append(f"{name}: the AOF is empty after the runs")


def bench_policies(args, parent: Path, res: dict) -> None:
    n, repeat = args.requests, args.aof_repeat
    used: set[int] = set()
    with contextlib.ExitStack() as stack:
        servers: dict[str, R.Server] = {}
        for key, _label, extra in POLICIES:
            srv = start_server(args, parent, key, extra, used)
            stack.callback(srv.stop)
            servers[key] = srv
        res["servers"] = {k: argv_str(s) for k, s in servers.items()}
        for key, srv in servers.items():
            try:
                en = info(srv.port, "persistence").get("aof_enabled")
            except (OSError, C.RespError) as e:
                en = f"? ({e})"
            if en != ("0" if key == "off" else "1"):
                res["notes"].append(f"{LABEL[key]} server: aof_enabled:{en} right after start")

        n1 = one_conn_requests(args, res.get("fsync"))
        shapes = [(key, CONNS, n) for key, *_ in POLICIES] + [
            ("off", 1, n1),
            ("always", 1, n1),
        ]
        runs: dict[tuple, list[dict]] = {(k, c): [] for k, c, _ in shapes}
        for rnd in range(repeat):
            R.log(f"aof: round {rnd + 1}/{repeat}")
            for key, conns, nn in shapes:
                runs[(key, conns)].append(one_run(args, servers[key], conns, nn))
        rows = []
        for key, conns, nn in shapes:
            cmd = R.loadgen_cmd(servers[key].port, "addjob", conns, 1, nn, QUEUE, args.max_seconds)
            rows.append(median_row(key, conns, nn, runs[(key, conns)], cmd_str(cmd)))
        for row in rows:
            base = next(r for r in rows if r["key"] == "off" and r["conns"] == row["conns"])
            row["ratio"] = R.ratio(row["report"]["ops_per_sec"], base["report"]["ops_per_sec"])
            print_policy_row(row)
        res["rows"] = rows
        res["one_conn_requests"] = n1

        res["server_state"] = {}
        for key, srv in servers.items():
            st = server_state(srv)
            res["server_state"][key] = st
            check_state(key, srv, st, res["notes"])
            for ln in log_anomalies(srv):
                res["notes"].append(f"{LABEL[key]} server log: {ln}")


# --------------------------------------------------------------------------
# 3. rewrite pause
# --------------------------------------------------------------------------


def probe(port: int, interval: float, stop, out, hard_s: float) -> None:
    """Child process: PING every `interval` on one connection until `stop` is set.

    Sends back [(send monotonic_ns, latency ns)], errors, first error."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    samples: list[tuple[int, int]] = []
    errors, first = 0, ""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.monotonic() + hard_s
        nxt = time.monotonic()
        while not stop.is_set() and time.monotonic() < deadline:
            d = nxt - time.monotonic()
            if d > 0:
                time.sleep(d)
            t0 = time.monotonic_ns()
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            buf = b""
            while not buf.endswith(b"\r\n"):
                chunk = s.recv(64)
                if not chunk:
                    raise ConnectionError("connection closed by the server")
                buf += chunk
            t1 = time.monotonic_ns()
            if buf != b"+PONG\r\n":
                errors += 1
                first = first or f"PING replied {buf[:80]!r}"
            samples.append((t0, t1 - t0))
            nxt = max(nxt + interval, time.monotonic())  # late: no catch-up burst
        s.close()
    except Exception as e:  # noqa: BLE001 - reported to the parent
        errors += 1
        first = first or f"probe: {type(e).__name__}: {e}"
    out.put({"samples": samples, "errors": errors, "first_error": first})


def lat_summary(lats_ms: list[float]) -> dict:
    return {
        "n": len(lats_ms),
        "p50_ms": statistics.median(lats_ms) if lats_ms else None,
        "p99_ms": C.pct(lats_ms, 99),
        "max_ms": max(lats_ms) if lats_ms else None,
        "over_10ms": sum(x > 10 for x in lats_ms),
    }


def log_rewrite_secs(srv: R.Server) -> float | None:
    """The duration in the server's 'Background AOF rewrite terminated' log line, if any."""
    try:
        text = srv.logpath.read_text(errors="replace")
    except OSError:
        return None
    m = re.findall(r"rewrite terminated with success \(\d+ bytes, ([\d.]+) s\)", text)
    return float(m[-1]) if m else None


def wait_registered(port: int, want: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    n = None
    while True:
        with contextlib.suppress(OSError, C.RespError, KeyError, ValueError):
            n = int(info(port, "jobs")["registered_jobs"])
        if n == want or time.monotonic() >= deadline:
            return n
        time.sleep(0.1)


def bench_rewrite(args, parent: Path, res: dict) -> None:
    keep, extra = args.aof_jobs, args.aof_jobs // 2
    ms = max(args.max_seconds, 120)
    rw: dict = {"jobs_kept": keep, "jobs_acked": extra, "notes": []}
    res["rewrite"] = rw
    notes = rw["notes"]
    srv = start_server(args, parent, "rewrite", REWRITE_ARGS, set())
    probe_proc = None
    try:
        rw["server"] = argv_str(srv)
        port = srv.port
        cmds = [
            R.loadgen_cmd(port, "addjob", 50, 16, keep, "aof:keep", ms),
            R.loadgen_cmd(port, "addjob", 50, 16, extra, "aof:acked", ms),
            R.loadgen_cmd(port, "getack", 50, 16, extra, "aof:acked", ms),
        ]
        rw["load_commands"] = [cmd_str(c) for c in cmds]
        sizes = {}
        reps = []
        for cmd, what in zip(cmds, ("keep", "extra", "acked"), strict=True):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=ms + 30)
            rep = R.parse_loadgen_output(
                r.returncode, r.stdout, r.stderr, cmd[cmd.index("--mode") + 1], 50, 16, 0
            )
            reps.append(rep)
            if R.problems(rep):
                notes.append(f"load ({what}): {R.problems(rep)}")
            if not srv.alive():
                raise AofBenchError(
                    f"rewrite server died while loading; log tail:\n{srv.log_tail()}"
                )
            sizes[what] = int(info(port, "persistence")["aof_current_size"])
        rw["load_reports"] = reps
        rw["load_jobs_per_sec"] = reps[0]["ops_per_sec"]
        acked = reps[2].get("acked", 0)
        rw["acked"] = acked
        if acked != extra:
            notes.append(f"{acked} of {extra} extra jobs acked")
        reg = wait_registered(port, keep, SETTLE_TIMEOUT_S)
        rw["registered_before"] = reg
        if reg != keep:
            notes.append(f"registered_jobs {reg} before the rewrite (expected {keep})")
        rw["size_after_keep"], rw["size_after_extra"] = sizes["keep"], sizes["extra"]
        sync_disk()
        before = info(port, "persistence")
        rw["size_before"] = int(before["aof_current_size"])

        # The probe: a baseline before the rewrite, then during it.
        ctx = multiprocessing.get_context("fork")
        stop, out = ctx.Event(), ctx.Queue()
        hard = args.probe_before + REWRITE_TIMEOUT_S + 30
        probe_proc = ctx.Process(
            target=probe, args=(port, PROBE_INTERVAL_S, stop, out, hard), daemon=True
        )
        probe_proc.start()
        time.sleep(args.probe_before)
        mon = C.Resp(port, timeout=30)
        try:
            t0 = time.monotonic_ns()
            reply = mon.call("BGREWRITEAOF")
            rw["bgrewriteaof_reply"] = reply.decode(errors="replace") if reply else repr(reply)
            done, polls, p = False, 0, {}
            deadline = time.monotonic() + REWRITE_TIMEOUT_S
            while time.monotonic() < deadline:
                p = C.info(mon, "persistence")
                polls += 1
                if p.get("aof_rewrite_in_progress") == "0":
                    done = True
                    break
                time.sleep(INFO_POLL_S)
            t1 = time.monotonic_ns()
        finally:
            mon.close()
        time.sleep(0.3)  # a little after, for the record
        stop.set()
        try:
            pr = out.get(timeout=30)
        except Exception:  # noqa: BLE001
            pr = {"samples": [], "errors": 1, "first_error": "probe sent no result"}
        probe_proc.join(10)

        rw["done"] = done
        rw["duration_s"] = (t1 - t0) / 1e9
        rw["poll_interval_s"] = INFO_POLL_S
        rw["log_duration_s"] = log_rewrite_secs(srv)
        rw["longest_slice_ms"] = float(p.get("aof_rewrite_longest_slice_ms", "nan"))
        rw["last_bgrewrite_status"] = p.get("aof_last_bgrewrite_status")
        rw["last_rewrite_time_sec"] = p.get("aof_last_rewrite_time_sec")
        rw["size_after"] = int(p.get("aof_current_size", 0))
        rw["base_size_after"] = int(p.get("aof_base_size", 0))
        aof = srv.workdir / "disque.aof"
        rw["file_size_after"] = aof.stat().st_size if aof.exists() else None
        if not done:
            notes.append(
                f"rewrite still in progress after {REWRITE_TIMEOUT_S:.0f} s "
                f"(aof_rewrite_longest_slice_ms {rw['longest_slice_ms']})"
            )
        if rw["last_bgrewrite_status"] != "ok":
            notes.append(f"aof_last_bgrewrite_status:{rw['last_bgrewrite_status']}")
        if done and rw["file_size_after"] != rw["size_after"]:
            notes.append(
                f"aof_current_size {rw['size_after']} but disque.aof is "
                f"{rw['file_size_after']} bytes on disk"
            )
        reg = wait_registered(port, keep, 5)
        rw["registered_after"] = reg
        if reg != keep:
            notes.append(f"registered_jobs {reg} after the rewrite (expected {keep})")

        samples = pr["samples"]
        pre = [lat / 1e6 for ts, lat in samples if ts + lat < t0]
        in_rw = [(ts, lat) for ts, lat in samples if ts < t1 and ts + lat > t0]
        during = [lat / 1e6 for _ts, lat in in_rw]
        worst = max(in_rw, key=lambda x: x[1], default=None)
        rw["probe"] = {
            "interval_ms": PROBE_INTERVAL_S * 1000,
            "before": lat_summary(pre),
            "during": lat_summary(during),
            # when the slowest PING during the rewrite got its reply, from BGREWRITEAOF
            "worst_reply_after_ms": (worst[0] + worst[1] - t0) / 1e6 if worst else None,
            "errors": pr["errors"],
            "first_error": pr["first_error"],
        }
        if pr["errors"]:
            notes.append(f"probe: {pr['errors']} errors, first: {pr['first_error']}")
        if not srv.alive():
            notes.append(f"rewrite server died; log tail:\n{srv.log_tail()}")
        for ln in log_anomalies(srv):
            notes.append(f"rewrite server log: {ln}")
    except (OSError, C.RespError, KeyError, ValueError, subprocess.TimeoutExpired) as e:
        raise AofBenchError(f"rewrite benchmark stopped: {type(e).__name__}: {e}") from e
    finally:
        if probe_proc is not None and probe_proc.is_alive():
            probe_proc.terminate()
            probe_proc.join(5)
            if probe_proc.is_alive():
                probe_proc.kill()
                probe_proc.join(5)
        srv.stop()
    print_rewrite(rw)


# --------------------------------------------------------------------------
# The whole benchmark
# --------------------------------------------------------------------------


def bench_aof(args, scratch: Path) -> dict:
    """Parts 1-3, printing as it goes; returns the results dict.

    Raises R.HarnessError when the benchmark cannot go on."""
    if args.aof_dir:
        Path(args.aof_dir).mkdir(parents=True, exist_ok=True)
        parent = Path(tempfile.mkdtemp(prefix="disquepy-aof-bench-", dir=args.aof_dir))
    else:
        parent = scratch / "aof"
        parent.mkdir()
    res: dict = {
        "requests": args.requests,
        "repeat": args.aof_repeat,
        "conns": CONNS,
        "body_size": BODY,
        "scratch": R.display_path(str(parent)),
        "filesystem": mount_of(parent),
        "notes": [],
    }
    fs = res["filesystem"]
    try:
        print(
            f"\naof: ADDJOB {QUEUE} <{BODY}-byte body> 0, {CONNS} connections unpipelined, "
            f"{args.requests:,} jobs per run, median of {args.aof_repeat} alternating rounds; "
            f"scratch {res['scratch']} on {fs['fstype']} {fs['device']}",
            flush=True,
        )
        if fs["fstype"] in ("tmpfs", "ramfs"):
            res["notes"].append(
                f"the scratch directory is on {fs['fstype']}: fdatasync costs nothing there "
                "(use --aof-dir on a real disk)"
            )
        sync_disk()
        res["fsync"] = fsync_latency(parent, args.fsync_seconds)
        print_fsync(res["fsync"])
        print(POLICY_HEADER)
        print("-" * len(POLICY_HEADER), flush=True)
        bench_policies(args, parent, res)
        try:
            bench_rewrite(args, parent, res)
        except R.HarnessError as e:  # keep the policy rows; the run still exits 2
            res["rewrite"]["error"] = str(e)
            res["failed"] = f"rewrite: {e}"
            res["rewrite"]["notes"].append(f"rewrite benchmark failed: {e}")
        res["notes"] += res["rewrite"]["notes"]
        for n in res["notes"]:
            print("    ! " + n.replace("\n", "\n      "), flush=True)
        res["targets"] = targets(res)
    except (OSError, C.RespError, ValueError) as e:
        raise AofBenchError(f"aof benchmark stopped: {type(e).__name__}: {e}") from e
    finally:
        if args.aof_dir:
            import shutil

            shutil.rmtree(parent, ignore_errors=True)
    return res


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

POLICY_HEADER = (
    f"{'policy':<22} {'conns':>5} {'jobs':>7} | {'jobs/s':>9} {'p50us':>6} {'p99us':>6} | "
    f"{'vs off':>6} | {'cpu us/job':>10} | runs jobs/s"
)


def fmt(x, spec: str = ".0f", none: str = "n/a") -> str:
    return none if x is None else format(x, spec)


def print_fsync(fs: dict) -> None:
    print(
        f"fdatasync: {FSYNC_BLOCK}-byte append + fdatasync, {fs['n']:,} in {fs['seconds']:.1f} s: "
        f"median {fs['median_us']:.0f} us, p99 {fs['p99_us']:.0f} us, max {fs['max_us']:.0f} us "
        f"({fs['per_sec']:,.0f}/s)\n",
        flush=True,
    )


def print_policy_row(row: dict) -> None:
    rep = row["report"]
    runs = ", ".join(f"{x:,.0f}" for x in rep["runs_ops_per_sec"])
    print(
        f"{row['name']:<22} {row['conns']:>5} {row['requests']:>7} | {R.fmt_side(rep)} | "
        f"{R.fmt_ratio(row['ratio']):>6} | {fmt(rep.get('cpu_us_per_job')):>10} | {runs}",
        flush=True,
    )
    p = R.problems(rep)
    if p:
        print(f"    ! {p}", flush=True)


def mb(x) -> str:
    return "n/a" if x is None else f"{x / 1e6:.1f} MB"


def shrink(rw: dict) -> str:
    b, a = rw.get("size_before"), rw.get("size_after")
    if not b or a is None:
        return "n/a"
    return f"{a / b:.2f}x, -{(1 - a / b) * 100:.0f}%"


def print_rewrite(rw: dict) -> None:
    print(
        f"\nrewrite: {rw['jobs_kept']:,} jobs kept (queued, not acked) + {rw['jobs_acked']:,} "
        f"added and acked, then BGREWRITEAOF with a PING probe every "
        f"{PROBE_INTERVAL_S * 1000:g} ms",
        flush=True,
    )
    print(
        f"  AOF: {mb(rw.get('size_after_keep'))} after the kept jobs, "
        f"{mb(rw.get('size_before'))} after the acked ones; after the rewrite "
        f"{mb(rw.get('size_after'))} ({shrink(rw)}); registered_jobs "
        f"{rw.get('registered_before')} before, {rw.get('registered_after')} after"
    )
    logd = rw.get("log_duration_s")
    print(
        f"  rewrite took {rw['duration_s']:.2f} s (BGREWRITEAOF to aof_rewrite_in_progress:0, "
        f"polled every {INFO_POLL_S * 1000:g} ms"
        + (f"; server log: {logd:.2f} s" if logd is not None else "")
        + f"); aof_rewrite_longest_slice_ms {rw['longest_slice_ms']:.1f}; "
        f"status {rw.get('last_bgrewrite_status')}"
    )
    pb = rw["probe"]
    for key, name in (("before", "before the rewrite"), ("during", "during the rewrite")):
        s = pb[key]
        print(
            f"  probe {name:<19} n {s['n']:>5}  p50 {fmt(s['p50_ms'], '.2f')} ms  "
            f"p99 {fmt(s['p99_ms'], '.2f')} ms  max {fmt(s['max_ms'], '.2f')} ms  "
            f"(>10 ms: {s['over_10ms']})"
        )
    if pb.get("worst_reply_after_ms") is not None:
        print(
            f"  the slowest PING during the rewrite got its reply "
            f"{pb['worst_reply_after_ms']:.0f} ms after BGREWRITEAOF was sent "
            f"(the harness saw the rewrite finished at {rw['duration_s'] * 1000:.0f} ms)"
        )
    print(flush=True)


def targets(res: dict) -> list[dict]:
    def ok(rep: dict) -> bool:
        return rep["ops"] > 0 and not rep.get("errors") and not rep.get("failed")

    rows = {(r["key"], r["conns"]): r for r in res.get("rows", [])}
    base = rows.get(("off", CONNS))
    out = []
    for key, want in (("everysec", TARGET_EVERYSEC), ("always", TARGET_ALWAYS)):
        row = rows.get((key, CONNS))
        if not row or not base:
            continue
        r = row["ratio"]
        out.append(
            {
                "name": f"aof ADDJOB appendfsync {key}, {CONNS} conns >= {want}x AOF off",
                "value": r,
                "pass": ok(row["report"]) and ok(base["report"]) and r is not None and r >= want,
                "shown": f"{R.fmt_ratio(r)} ({row['report']['ops_per_sec']:,.0f} vs "
                f"{base['report']['ops_per_sec']:,.0f} jobs/s)",
                "note": R.problems(row["report"]) or R.problems(base["report"]),
            }
        )
    return out


def markdown(res: dict) -> list[str]:
    """The AOF section of the markdown report (lines)."""
    fs, fsd = res["filesystem"], res.get("fsync")
    out = [
        "#### AOF: cost of the fsync policies, and the rewrite pause",
        "",
        f"Scratch directories under `{res['scratch']}` ({fs['fstype']} on {fs['device']}, "
        f"mounted at {fs['mountpoint']}).",
        "",
    ]
    if fsd:
        out += [
            f"Raw disk: {fsd['what']}: {fsd['n']:,} calls, median {fsd['median_us']:.0f} µs, "
            f"p99 {fsd['p99_us']:.0f} µs, max {fsd['max_us']:.0f} µs ({fsd['per_sec']:,.0f}/s).",
            "",
        ]
    if res.get("rows"):
        out += ["Servers (fresh, single node, each in its own scratch directory):", ""]
        out += [f"- {LABEL[k]}: `{c}`" for k, c in res["servers"].items()]
        out += [
            "",
            f"ADDJOB throughput, {BODY}-byte bodies, unpipelined, median of {res['repeat']} "
            "alternating rounds (`sync` before every run):",
            "",
            "| Policy | Conns | Jobs per run | jobs/s | p50 µs | p99 µs | vs AOF off "
            "| server CPU µs/job | runs (jobs/s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in res["rows"]:
            rep = row["report"]
            flag = " ⚠" if R.problems(rep) else ""
            runs = ", ".join(f"{x:,.0f}" for x in rep["runs_ops_per_sec"])
            out.append(
                f"| {row['name']} | {row['conns']} | {row['requests']:,} "
                f"| {rep['ops_per_sec']:,.0f}{flag} | {rep['lat_us']['p50']:.0f} "
                f"| {rep['lat_us']['p99']:.0f} | {R.fmt_ratio(row['ratio'])} "
                f"| {fmt(rep.get('cpu_us_per_job'))} | {runs} |"
            )
        out += ["", "Commands (ports differ per server):", ""]
        seen = set()
        for row in res["rows"]:
            c = re.sub(r"--port \d+", "--port P", row["command"])
            if c not in seen:
                seen.add(c)
                out.append(f"- `{c}`")
    rw = res.get("rewrite")
    if rw and "probe" in rw:
        pb = rw["probe"]
        logd = rw.get("log_duration_s")
        out += [
            "",
            f"Rewrite: `{rw['server']}`; {rw['jobs_kept']:,} jobs added and kept, "
            f"{rw['jobs_acked']:,} more added and acked:",
            "",
            *[f"- `{c}`" for c in rw["load_commands"]],
            "",
            f"then `BGREWRITEAOF`, with a probe PINGing every {pb['interval_ms']:g} ms on its own "
            "connection (a Python process), until `INFO persistence` shows "
            f"`aof_rewrite_in_progress:0` (polled every {INFO_POLL_S * 1000:g} ms).",
            "",
            f"- AOF size: {mb(rw['size_after_keep'])} after the kept jobs, "
            f"{mb(rw['size_before'])} before the rewrite, {mb(rw['size_after'])} after "
            f"({shrink(rw)}); registered_jobs {rw['registered_before']} before, "
            f"{rw['registered_after']} after",
            f"- rewrite duration {rw['duration_s']:.2f} s"
            + (f" (server log: {logd:.2f} s)" if logd is not None else "")
            + f"; `aof_rewrite_longest_slice_ms` {rw['longest_slice_ms']:.1f}; "
            f"`aof_last_bgrewrite_status:{rw['last_bgrewrite_status']}`",
            "",
            "| Probe PING latency | n | p50 ms | p99 ms | max ms | > 10 ms |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for key, name in (("before", "before the rewrite"), ("during", "during the rewrite")):
            s = pb[key]
            out.append(
                f"| {name} | {s['n']} | {fmt(s['p50_ms'], '.2f')} | {fmt(s['p99_ms'], '.2f')} "
                f"| {fmt(s['max_ms'], '.2f')} | {s['over_10ms']} |"
            )
        if pb.get("worst_reply_after_ms") is not None:
            out += [
                "",
                f"The slowest PING during the rewrite got its reply {pb['worst_reply_after_ms']:.0f} "
                f"ms after `BGREWRITEAOF` was sent (the rewrite took {rw['duration_s'] * 1000:.0f} ms).",
            ]
    if res.get("notes"):
        out += ["", "⚠ notes:", *[f"- {n.splitlines()[0]}" for n in res["notes"]]]
    out.append("")
    return out


# --------------------------------------------------------------------------
# Options (shared with run.py)
# --------------------------------------------------------------------------


def add_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("aof benchmark")
    g.add_argument(
        "--aof-jobs",
        type=int,
        help="jobs kept in the AOF before the rewrite (default 200000, 20000 with --quick); "
        "half as many more are added and acked",
    )
    g.add_argument(
        "--aof-dir",
        help="parent directory for the AOF servers' scratch directories "
        "(default: the run's scratch directory, under $TMPDIR)",
    )
    g.add_argument(
        "--fsync-seconds",
        type=float,
        help="length of the raw fdatasync loop (default 1, 0.3 with --quick)",
    )
    g.add_argument(
        "--probe-before",
        type=float,
        help="seconds of probe before BGREWRITEAOF, the baseline (default 1, 0.5 with --quick)",
    )


def finish_args(ap: argparse.ArgumentParser, args) -> None:
    """Defaults for the options above; args.repeat may be None (not given)."""
    q = args.quick
    for name, full, quick in (
        ("aof_jobs", 200_000, 20_000),
        ("fsync_seconds", 1.0, 0.3),
        ("probe_before", 1.0, 0.5),
    ):
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    args.aof_repeat = args.repeat if args.repeat is not None else DEFAULT_REPEAT
    if args.aof_repeat <= 0:
        ap.error("--repeat must be positive")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Benchmark disquepy's AOF: fsync policies and the rewrite pause.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--ours-cmd",
        default=R.DEFAULT_OURS,
        help="command that starts a server; '--port N' and the AOF options are appended "
        "(default: %(default)s)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run")
    ap.add_argument(
        "--requests",
        type=int,
        help="ADDJOBs per 50-connection run (default 100000, 10000 with --quick)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        help=f"alternating rounds of the policy runs, median kept (default {DEFAULT_REPEAT})",
    )
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=60.0,
        help="time bound of each loadgen run (partial results after it)",
    )
    ap.add_argument("--startup-timeout", type=float, default=20.0)
    ap.add_argument("--json", metavar="PATH", help="write all results as JSON to PATH")
    ap.add_argument("--markdown", action="store_true", help="also print a markdown section")
    ap.add_argument("--strict", action="store_true", help="exit 1 if any target FAILs")
    add_args(ap)
    args = ap.parse_args(argv)
    if args.requests is None:
        args.requests = 10_000 if args.quick else 100_000
    if args.requests <= 0:
        ap.error("--requests must be positive")
    finish_args(ap, args)
    return args


def meta(args) -> dict:
    m = C.meta(args)
    m["requests"] = args.requests
    m["repeat"] = args.aof_repeat
    return m


def main(argv=None) -> int:
    import json
    import shutil

    args = parse_args(argv)
    signal.signal(signal.SIGTERM, R.on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    results: dict = {"meta": meta(args), "aof": None, "targets": []}
    scratch = Path(tempfile.mkdtemp(prefix="disquepy-aof-bench-"))
    rc = 0
    try:
        R.build_loadgen()
        results["aof"] = bench_aof(args, scratch)
        results["targets"] = results["aof"]["targets"]
        R.print_targets(results["targets"])
        if results["aof"].get("failed"):
            R.log(f"\naof bench: {results['aof']['failed']}")
            rc = 2
        if args.markdown:
            m = results["meta"]
            print(
                "\n"
                + "\n".join(
                    [
                        f"### AOF benchmark run {m['date']}",
                        "",
                        f"- Machine: {m['nproc']} CPUs (`nproc`), {m['cpu']}, {m['os']}",
                        f"- Python {m['python']}",
                        f"- Command: `{m['command']}`",
                        "- Load from bench/loadgen (C, epoll) and bench/aof.py on the same machine",
                        "",
                        *markdown(results["aof"]),
                        *C.target_table(results["targets"]),
                    ]
                )
            )
    except R.HarnessError as e:
        R.log(f"\naof bench: error: {e}")
        results["aof"] = results["aof"] or {"error": str(e)}
        rc = 2
    except KeyboardInterrupt:
        R.log("\naof bench: interrupted; servers stopped")
        rc = 130
    finally:
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
            R.log(f"results written to {args.json}")
        shutil.rmtree(scratch, ignore_errors=True)
    if rc == 0 and args.strict and not all(t["pass"] for t in results["targets"]):
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
