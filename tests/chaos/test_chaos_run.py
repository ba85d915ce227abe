"""The real-process fault run, short: a 5-node cluster of real disque-server processes
(appendfsync always) behind the bus proxy, a seeded nemesis for 25 s, then the
total-queue check. And the checker catching a loss made behind its back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from disquepy.chaos.nemesis import KINDS
from disquepy.chaos.run import ChaosConfig, ChaosRun

SEED = 11
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    run = ChaosRun(ChaosConfig(seed=SEED, duration=25.0,
                               workdir=str(tmp_path_factory.mktemp("chaos"))))
    result = run.run()
    return run, result


@pytest.mark.timeout(400)
def test_no_job_lost_no_at_most_once_violation_no_unexpected(short_run):
    _, r = short_run
    c = r.counts
    assert c["jobs_added"] > 200 and c["jobs_delivered"] > 200, r.text()
    assert c["retry0_added"] > 10, r.text()
    assert c["lost"] == 0, r.text()
    assert c["at_most_once"] == 0, r.text()
    assert c["unexpected"] == 0, r.text()


@pytest.mark.timeout(400)
def test_every_fault_kind_was_injected(short_run):
    run, r = short_run
    for kind in KINDS:
        assert r.faults[kind] > 0, (kind, r.faults)
    px = r.proxy
    # and the proxy really did something: frames dropped by partitions and loss,
    # held back by delay, connections cut; killed nodes were restarted
    assert px["dropped_partition"] > 0 and px["dropped_loss"] > 0, px
    assert px["delayed"] > 0 and px["cut"] > 0, px
    assert px["forwarded"] > 1000, px
    assert sum(n.incarnation - 1 for n in run.cluster.nodes) == r.faults["kill"]


@pytest.mark.timeout(400)
def test_bus_traffic_went_through_the_proxy_and_nothing_is_left_running(short_run):
    run, r = short_run
    assert not any("proxy bypassed" in p for p in r.problems), r.problems
    assert all(not n.alive() for n in run.cluster.nodes)
    assert r.phases["faults"] >= 25.0


@pytest.mark.timeout(400)
def test_nodes_healthy_cluster_reforms_queues_drain(short_run):
    _, r = short_run
    assert not r.problems, r.text()  # no node crashed or raised, re-formed, drained
    assert r.counts["unacked"] == 0 and r.counts["leftover"] == 0, r.text()


@pytest.mark.timeout(400)
def test_acked_jobs_are_collected_everywhere(short_run):
    _, r = short_run
    assert r.counts["not_collected"] == 0, r.text()


def _run_cli(*args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "disquepy.chaos", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(300)
def test_checker_reports_jobs_deleted_behind_its_back(tmp_path):
    """Sabotage: jobs that got an ID are deleted (DELJOB on every node) before any
    consumer sees them: the run must report exactly those as lost and exit 1."""
    out = tmp_path / "summary.json"
    p = _run_cli("--seed", "5", "--duration", "4", "--faults", "none", "--sabotage-lose", "3",
                 "--json", str(out), "--workdir", str(tmp_path / "nodes"))
    assert p.returncode == 1, p.stdout + p.stderr
    summary = json.loads(out.read_text())
    run = summary["runs"][0]
    assert run["counts"]["lost"] == 3 and run["violations"] == {"lost": 3}
    assert not run["ok"] and summary["totals"]["lost"] == 3
    assert b"sabotage" in run["examples"]["lost"][0].encode()
    assert "replay: python -m disquepy.chaos --seed 5" in p.stdout
    assert "VIOLATION lost: 3" in p.stdout


def test_bad_arguments_exit_2():
    p = _run_cli("--faults", "meteor", timeout=30)
    assert p.returncode == 2 and "unknown fault kind" in p.stderr


def _procs_under(path: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if str(path).encode() in cmd and b"disquepy.server.main" in cmd:
            out.append(int(d.name))
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=["ctrl-c", "sigterm", "kill-9"])
def test_no_node_outlives_the_chaos_process(tmp_path, sig):
    """Ctrl-C and SIGTERM unwind (every node stopped, replay line printed); if the
    chaos process is killed outright, its nodes die with it (parent-death signal)."""
    work = tmp_path / "nodes"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.Popen([sys.executable, "-m", "disquepy.chaos", "--seed", "3",
                          "--duration", "60", "--workdir", str(work)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_procs_under(work)) < 5:
            time.sleep(0.2)
        assert len(_procs_under(work)) == 5, "the cluster did not start"
        time.sleep(2)  # into the fault phase
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    if sig == signal.SIGKILL:
        assert p.returncode == -signal.SIGKILL
    else:
        assert p.returncode == 130, err
        assert "replay: python -m disquepy.chaos --seed 3" in err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _procs_under(work):
        time.sleep(0.1)
    assert _procs_under(work) == []
