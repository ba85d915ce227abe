"""`make cluster` (scripts/cluster.py): three joined nodes, and none left behind when
the script is stopped, by Ctrl-C or by a signal, or killed outright."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from support import ROOT, port_is_free, raw, wait_for


def free_run(n: int) -> int:
    """A first port with n consecutive ports (and their bus ports) free."""
    for base in range(21000, 29000, 97):
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
    finally:
        if p.poll() is None:  # the signal did not stop it: SIGTERM stops its nodes too
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
