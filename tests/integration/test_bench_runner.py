"""bench/: the one place that starts servers, and a tiny alternating-rounds run.

Real processes; the load comes from bench/loadgen (built with gcc on first use). C Disque
is used only where its binary is present (bench/servers.find_disque_c): those tests are
optional on it, as the benchmark itself is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import port_is_free, wait_for

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import run as bench_run  # noqa: E402  (bench/run.py)
import servers  # noqa: E402  (bench/servers.py)

needs_c = pytest.mark.skipif(servers.find_disque_c() is None,
                             reason="C Disque binary not present (optional anchor)")


def test_fleet_starts_our_node_and_stops_it_even_on_error(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), servers.Fleet(tmp_path) as fleet:
        s = fleet.start("ours")
        assert s.call("PING") is True
        assert s.call("ADDJOB", "q", "body", 0).startswith(b"D-")
        proc = s.proc
        raise RuntimeError("boom")
    assert proc.poll() is not None
    assert port_is_free(s.port)


@needs_c
def test_fleet_starts_a_c_disque_cluster_and_stops_it(tmp_path):
    with servers.Fleet(tmp_path) as fleet:
        nodes = fleet.cluster("c", 3)
        assert all(len(n.call("HELLO")) == 5 for n in nodes)
        procs = [n.proc for n in nodes]
    assert all(p.poll() is not None for p in procs)
    assert all(port_is_free(n.port) for n in nodes)


def test_fleet_meets_again_a_node_whose_meet_was_lost(tmp_path, monkeypatch):
    """A handshake that times out on a loaded host is dropped, not retried (C Disque
    as Redis Cluster): the fleet meets a node node 0 does not list again."""
    real = servers.Server.call
    meets: list = []

    def call(self, *args):
        if args[:2] == ("CLUSTER", "MEET"):
            meets.append(args[3])
            if len(meets) == 1:
                return b"OK"  # the first MEET never happened
        return real(self, *args)

    monkeypatch.setattr(servers.Server, "call", call)
    with servers.Fleet(tmp_path) as fleet:
        nodes = fleet.cluster("ours", 3, timeout=20)
        # node 1's MEET lost, node 2's made; then node 1 met again, and only it
        assert meets[:2] == [nodes[1].port, nodes[2].port]
        assert meets[2:] and set(meets[2:]) == {nodes[1].port}
        assert all(len(n.call("HELLO")) == 5 for n in nodes)


def tiny_run(tmp_path, monkeypatch, env_c: str | None) -> tuple[dict, str]:
    if env_c is not None:
        monkeypatch.setenv("DISQUE_C", env_c)
    old = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run.json"
    try:
        rc = bench_run.main(["--only", "single,memory", "--rounds", "2", "--requests", "300",
                             "--memory-jobs", "20000", "--no-redis", "--json", str(out)])
    finally:
        signal.signal(signal.SIGTERM, old)
    assert rc == 0
    res = json.loads(out.read_text())
    return res["data"], "\n".join(res["report"])


def test_tiny_alternating_run_without_c_disque_says_so(tmp_path, monkeypatch):
    data, report = tiny_run(tmp_path, monkeypatch, str(tmp_path / "no-such-disque"))
    rows = data["single node"]
    assert [r["workload"] for r in rows] == [w.name for w in bench_run.SINGLE]
    for r in rows:
        assert set(r["runs"]) == {"ours", "floor"}  # (bench/floor.py: the shell's floor)
        for side in ("ours", "floor"):
            assert len(r["runs"][side]) == 2  # two rounds
            assert all(x["ops"] >= 300 and not x["problem"] for x in r["runs"][side])
            # the server's CPU per op, and its user part (the work, the syscalls aside)
            assert all(0 <= x["server_user_us"] <= x["server_cpu_us"] for x in r["runs"][side])
        assert r["ratio"] is None
    assert "C Disque: not found" in report
    assert data["memory"]["ours"] > 0
    assert "- PASS" not in report and "- FAIL" not in report  # no target without C


def test_against_runs_another_built_tree_as_a_side_of_the_same_turns(tmp_path, monkeypatch):
    """--against SRC (an A/B of two trees): our node (a cluster's three in the cluster
    section) started from SRC, in the rounds."""
    monkeypatch.setenv("DISQUE_C", str(tmp_path / "no-such-disque"))
    old = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run.json"
    try:
        rc = bench_run.main(["--only", "single,cluster,aof", "--rounds", "1",
                             "--requests", "300", "--cluster-requests", "300",
                             "--fed-seconds", "1.5", "--aof-jobs", "2000",
                             "--no-redis", "--no-floor", "--against", str(BENCH.parent / "src"),
                             "--json", str(out)])
    finally:
        signal.signal(signal.SIGTERM, old)
    assert rc == 0
    res = json.loads(out.read_text())
    for section in ("single node", "cluster"):
        for r in res["data"][section]:
            assert set(r["runs"]) == {"ours", "against"}
            assert all(x["ops"] >= 300 and not x["problem"] for x in r["runs"]["against"])
    assert res["data"]["federation against"]
    aof = [ln for ln in res["report"] if ln.startswith(("| off |", "| everysec |", "| always |"))]
    assert len(aof) == 3 and all(ln.count("|") == 10 for ln in aof), aof  # against's 2 cells
    assert any(line.startswith("| workload") and "against/s" in line for line in res["report"])


@needs_c
def test_tiny_alternating_run_against_c_disque(tmp_path, monkeypatch):
    data, report = tiny_run(tmp_path, monkeypatch, None)
    for r in data["single node"]:
        assert len(r["runs"]["ours"]) == len(r["runs"]["c"]) == 2
        assert r["ratio"] > 0
    assert data["memory"]["c"] > 0
    assert "memory per queued job <= C Disque's" in report


def test_streams_section_measures_both_sides(tmp_path):
    """bench/groups.py --only streams (issue #25), one small round with AOF off: every row
    has a rate on both sides (and on --against's, our node from another tree), no run
    reported a problem, and each target is judged."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = subprocess.run([sys.executable, str(BENCH / "groups.py"), "--only", "streams",
                        "--quick", "--aof", "off", "--against", str(BENCH.parent / "src")],
                       capture_output=True, text=True, timeout=300, cwd=BENCH, env=env)
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: a target failed, not broken
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| ") and "/s" not in ln]
    assert not [ln for ln in rows if "!" in ln], r.stdout
    table = {ln.split(" | ")[0][2:]: ln.split(" | ")[1:3] for ln in rows}
    against = {ln.split(" | ")[0][2:]: ln.split(" | ")[7] for ln in rows
               if not ln.startswith("| memory")}
    for name in ("QADD / XADD, 50 conns", "QADD / XADD, 50 conns, 16-deep"):
        cells = [*table[name], against[name]]
        assert all(float(x.rstrip("k").replace(",", "")) > 0 for x in cells), r.stdout
    assert sum(1 for n in table if n.startswith("2 groups")) == 2
    assert any(n.startswith("memory per held event") for n in table)
    verdicts = [ln for ln in r.stdout.splitlines() if ln.startswith(("PASS: AOF off", "FAIL: AOF off"))]
    assert len(verdicts) == 4, r.stdout  # QADD x2, batch consume, memory


def bench_processes(root: Path) -> list[int]:
    """Processes whose working directory lies under ``root`` (the runner's servers)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(root)):
                out.append(int(pid))
        except OSError:
            continue
    return out


def test_sigterm_stops_every_server_the_runner_started(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), DISQUE_C=str(tmp_path / "none"))
    p = subprocess.Popen([sys.executable, str(BENCH / "run.py"), "--only", "single",
                          "--requests", "5000000", "--max-seconds", "60"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                         cwd=BENCH)  # not under tmp_path: only its servers are
    try:
        wait_for(lambda: len(bench_processes(tmp_path)) >= 2, timeout=30,
                 what="the runner's node and Redis up")
        time.sleep(1)  # the load is running
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 130
        wait_for(lambda: not bench_processes(tmp_path), timeout=10, what="no server left")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
