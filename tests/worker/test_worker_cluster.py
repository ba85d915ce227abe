"""Workers on a real 3-node cluster: they keep consuming when their node dies, and keep
heartbeating a running job when their node leaves and the client moves away from it."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from support import wait_for

from disquepy.client import Disque
from disquepy.worker import Worker


@pytest.mark.timeout(90)
def test_worker_survives_its_node_dying(make_cluster):
    servers, raws = make_cluster(3)
    c = Disque([f"127.0.0.1:{servers[0].port}"], shuffle=False)
    done = []
    w = Worker(c, ["q"], 2, done.append, poll_timeout_ms=200).start()
    raws[0].execute_command("ADDJOB", "q", json.dumps("before"), 5000, "REPLICATE", 1)
    wait_for(lambda: done == ["before"], what="first job")
    servers[0].kill(signal.SIGKILL)
    # RETRY 2: federation may first push it to the dead node (see the report)
    raws[1].execute_command("ADDJOB", "q", json.dumps("after"), 5000, "REPLICATE", 2,
                            "RETRY", 2)
    wait_for(lambda: "after" in done, timeout=30, what="job after the failover")
    assert c.node != f"127.0.0.1:{servers[0].port}"
    w.stop(5)
    assert done == ["before", "after"] and w.stats["acked"] == 2


@pytest.mark.timeout(90)
def test_heartbeats_follow_the_job_when_the_client_moves(make_cluster):
    """Job on node A only (REPLICATE 1, RETRY 2); A starts leaving mid-job, the worker's
    idle thread gets -LEAVING and the client moves to another node, which does not know
    the job: WORKING must go back to A, or the job is re-queued there after 2 s."""
    servers, raws = make_cluster(3)
    a = f"127.0.0.1:{servers[0].port}"
    c = Disque([a], shuffle=False)
    release = threading.Event()
    jid = c.add_job("q", json.dumps("long"), replicate=1, retry=2)
    w = Worker(c, ["q"], 2, lambda p: release.wait(6), poll_timeout_ms=200).start()
    wait_for(lambda: (c.execute_on(a, "SHOW", jid) or [b""])[5] == b"active",
             what="job taken")
    assert raws[0].execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    wait_for(lambda: c.node != a, what="client to leave the leaving node")
    assert c.show(jid) is None  # the new node has no copy
    stolen = []
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline and not stolen:
        rep = raws[0].execute_command("GETJOB", "NOHANG", "FROM", "q")
        if rep:
            stolen.append(rep[0][1].decode())
        time.sleep(0.05)
    release.set()
    w.stop(5)
    assert stolen == []
    assert w.stats["acked"] == 1
