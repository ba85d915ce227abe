"""A node's files: nodes.conf is locked for the life of the process (two nodes in one
directory would share one node ID), and a relative logfile lives inside ``dir``."""

from __future__ import annotations

import socket

import pytest
from support import Server, wait_for


def _refused(s: Server) -> int:
    s.start(wait=False)
    return s.proc.wait(15)


@pytest.mark.timeout(60)
def test_second_node_in_the_same_dir_refuses_to_start(tmp_path):
    first = Server(tmp_path).start()
    try:
        c = first.client()
        second = Server(tmp_path)  # same directory, so the same nodes.conf
        assert _refused(second) != 0
        assert "nodes.conf is already used by a different Disque node" in second.log()
        # the lock survives the node rewriting nodes.conf (a new file renamed over it)
        assert c.execute_command("CLUSTER", "SAVECONFIG") == b"OK"
        third = Server(tmp_path)
        assert _refused(third) != 0
        assert "already used by a different Disque node" in third.log()
        # the first node keeps working, with its own identity
        assert c.ping()
        jid = c.execute_command("ADDJOB", "q", "body", 0)
        assert c.execute_command("QLEN", "q") == 1
        myid = c.execute_command("CLUSTER", "MYID").decode()
        assert jid.decode().split("-")[1] == myid[:8]
        assert (tmp_path / "nodes.conf").read_text().startswith(myid)
    finally:
        first.kill()
    # once the first is gone the directory is free again, with the same node ID
    again = Server(tmp_path).start()
    try:
        assert again.client().execute_command("CLUSTER", "MYID").decode() == myid
    finally:
        again.kill()


@pytest.mark.timeout(60)
def test_relative_logfile_is_inside_dir(tmp_path):
    """Two nodes started from one directory, each with its own dir and `logfile log.txt`,
    write one log each inside their dir, not one shared file where they started."""
    start = tmp_path / "start"
    servers = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            s = Server(start, "--dir", str(tmp_path / name), "--logfile", "log.txt")
            s.log_path = tmp_path / name / "log.txt"  # where the node logs
            servers.append(s.start())
        for s, name in zip(servers, ("a", "b"), strict=True):
            pid = str(s.proc.pid)
            wait_for(lambda s=s: "ready to accept connections" in s.log(), what="its log")
            text = (tmp_path / name / "log.txt").read_text()
            assert all(line.startswith(pid + ":") for line in text.splitlines()), text
        assert not (start / "log.txt").exists()
    finally:
        for s in servers:
            s.kill()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("taken", ["bus", "client"])
def test_a_node_whose_port_is_taken_writes_no_file(tmp_path, taken):
    """issue #24: a node whose bus port (port + 10000) was taken wrote nodes.conf, with a
    new node ID, before it found out; now every port is held first, and the one line in
    the log says which port and why."""
    for attempt in range(20):  # port + 10000 may be another test's: pick again
        s = Server(tmp_path / f"node{attempt}")
        blocker = socket.socket()
        try:
            blocker.bind(("127.0.0.1", s.port + (10000 if taken == "bus" else 0)))
            break
        except OSError:
            blocker.close()
    else:
        pytest.fail("no free port pair in 20 tries")
    try:
        blocker.listen(1)
        assert _refused(s) == 1
    finally:
        blocker.close()
    assert not (s.workdir / "nodes.conf").exists()
    assert sorted(p.name for p in s.workdir.iterdir()) == [s.log_path.name]
    [line] = [ln for ln in s.log().splitlines() if "listening socket" in ln]
    assert "address already in use" in line.lower() and "nothing written" in line
    if taken == "bus":
        assert f"cluster bus listening socket on port {s.port + 10000}" in line
    # the port free again, the same directory starts a node
    again = Server(s.workdir, port=s.port).start()
    try:
        assert again.client().ping() and (s.workdir / "nodes.conf").exists()
    finally:
        again.kill()
