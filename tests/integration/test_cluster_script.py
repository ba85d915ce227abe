"""`make cluster` (scripts/cluster.py): three joined nodes, and none left behind when
the script is stopped, by Ctrl-C or by a signal, or killed outright."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from docblocks import README, marked_block, rewrite_ports
from support import ROOT, Server, end_process, port_is_free, port_range, raw, wait_for


def free_run(n: int) -> int:
    """A first port with n consecutive ports (and their bus ports) free."""
    lo, hi = port_range()
    for base in range(lo + 1, hi - 10, 97):
        if all(port_is_free(base + i) and port_is_free(base + i + 10000) for i in range(n)):
            return base
    raise RuntimeError("no free port run")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                 signal.SIGKILL], ids=lambda s: s.name)
def test_cluster_script_starts_joined_nodes_and_stops_them_all(tmp_path, sig):
    base = free_run(3)
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        p = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "cluster.py"), "--port",
                              str(base), "--dir", str(tmp_path / "nodes")],
                             stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_for(lambda: b"cluster of 3 nodes up" in out.read_bytes(), timeout=40,
                 what="the cluster to be up")
        for i in range(3):
            hello = raw(base + i, b"HELLO\r\n", until=b"\r\n")
            assert hello.startswith(b"*"), hello
        p.send_signal(sig)
        # stopped: a clean exit; killed outright: its nodes die with it all the same
        assert p.wait(30) == (-signal.SIGKILL if sig == signal.SIGKILL else 0)
        # every node is gone: its client port and bus port are free again
        wait_for(lambda: all(port_is_free(base + i) and port_is_free(base + i + 10000)
                             for i in range(3)), timeout=15, what="the nodes to exit")
    finally:  # the signal did not stop it: SIGTERM stops its nodes too
        end_process(p, timeout=15)


@pytest.mark.timeout(60)
def test_cluster_script_refuses_a_busy_port_and_leaves_its_holder_alone(tmp_path):
    """`make cluster` while `make run` holds 7711: it must stop before touching
    anything (no MEET of the standalone node, no ghost peers), and say so."""
    base = free_run(3)
    holder = Server(tmp_path / "standalone", port=base + 1).start()
    try:
        p = subprocess.run([sys.executable, str(ROOT / "scripts" / "cluster.py"), "--port",
                            str(base), "--dir", str(tmp_path / "nodes")],
                           capture_output=True, text=True, cwd=ROOT, timeout=40)
        assert p.returncode != 0
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        assert f"port {base + 1} is already in use" in lines[0]
        assert "PORT=" in lines[0]
        # the standalone node was not touched: it still knows only itself
        nodes = holder.client().execute_command("CLUSTER", "NODES").decode()
        assert len(nodes.strip().splitlines()) == 1, nodes
        assert "myself" in nodes
        # and none of the script's own nodes was started
        assert not (tmp_path / "nodes").exists()
        assert port_is_free(base) and port_is_free(base + 2)
    finally:
        holder.kill()


@pytest.mark.timeout(150)
def test_a_crashed_node_leaves_the_others_running_and_rejoins(tmp_path):
    """The README's failover block, run as pasted against `make cluster`'s script: a node
    killed -9, jobs still added (REPLICATE 2) and served by the two left, the node
    started again by the script 10 s later and back in the cluster."""
    block = marked_block(README, "against `make cluster`'s script")
    base = free_run(3)
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        p = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "cluster.py"), "--port",
                              str(base), "--dir", str(tmp_path / "nodes")],
                             stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_for(lambda: b"cluster of 3 nodes up" in out.read_bytes(), timeout=40,
                 what="the cluster to be up")
        run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c",
                              rewrite_ports(block.code, base)],
                             capture_output=True, text=True, timeout=90, cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        lines = run.stdout.split()
        job_id = lines[0]
        assert job_id.startswith("D-"), run.stdout
        assert lines[1:4] == ["q", job_id, "still-served"], run.stdout  # GETJOB's reply
        assert "cluster_reachable_nodes:2" in run.stdout
        text = out.read_text()
        assert f"node {base + 1} exited (killed by signal 9" in text
        assert f"node {base + 1} restarted" in text
        assert p.poll() is None  # the script and the other nodes went on
        for port in (base, base + 2):
            assert raw(port, b"PING\r\n", until=b"\r\n") == b"+PONG\r\n"
    finally:
        end_process(p, timeout=15)
