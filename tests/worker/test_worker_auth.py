"""``disque-worker --user --password --tls --cacert --cert --key``: a worker as an ACL user
over mutual TLS (a real node with users per role)."""

from __future__ import annotations

import json
import signal

import pytest
from support import ROLE_USERS, wait_for

from disquepy.client import Disque


def worker_args(s, user: str, password: str | None = None) -> list[str]:
    return ["--user", user, "--password", password or ROLE_USERS[user][0], "--tls",
            "--cacert", s.tls["cacert"], "--cert", s.tls["cert"], "--key", s.tls["key"],
            "--poll-timeout-ms", "200"]


def test_worker_as_a_consumer_over_tls(secure_server, spawn_worker, tmp_path):
    s = secure_server
    with Disque([f"127.0.0.1:{s.port}"], username="producer", password="prodpw") as prod:
        ids = [prod.add_job("q", json.dumps({"dir": str(tmp_path), "n": n, "sleep": 0}))
               for n in range(3)]
        p = spawn_worker(s.tls_port, "handlers:slow", "--queues", "q",
                         *worker_args(s, "consumer"))
        wait_for(lambda: all((tmp_path / f"done-{n}").exists() for n in range(3)),
                 what="the worker to run the jobs")
        wait_for(lambda: all(prod.show(j) is None for j in ids), what="the acks")
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.log_path.read_text()


@pytest.mark.parametrize(("user", "password", "said"), [
    ("consumer", "wrong", "invalid username-password pair"),
    ("producer", None, "User producer has no permissions to run the 'getjob' command"),
])
def test_worker_that_cannot_take_jobs_stops_saying_why(secure_server, spawn_worker, user,
                                                       password, said):
    s = secure_server
    p = spawn_worker(s.tls_port, "handlers:slow", "--queues", "q",
                     *worker_args(s, user, password))
    assert p.wait(30) == 1
    log = p.log_path.read_text()
    assert said in log and "event=fatal" in log and "Traceback" not in log, log
