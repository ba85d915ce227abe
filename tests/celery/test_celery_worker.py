"""Real ``celery worker`` processes on a real node, through the kombu transport: tasks,
retries with countdown, countdown as DELAY, acks_late surviving a kill -9 of the whole
worker, revoke and ``celery inspect ping`` (the fanout exchanges on consumer groups),
and the task's job found by its Celery task ID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT, wait_for

APP_DIR = Path(__file__).resolve().parent / "app"


@pytest.fixture
def celery_env(server, tmp_path):
    """Environment of the app's processes: broker URL, trace directory, paths."""
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, DISQUE_BROKER_URL=f"disque://127.0.0.1:{server.port}",
               CELERY_TEST_OUT=str(out),
               # the jobs' RETRY: a job a killed worker held comes back after 5 s
               DISQUE_VISIBILITY_TIMEOUT="5",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(APP_DIR)]))
    env.pop("CELERY_ACKS_LATE", None)
    return env


@pytest.fixture
def app(celery_env, monkeypatch):
    """The app module, imported here against the test's node (the producer side)."""
    for k in ("DISQUE_BROKER_URL", "CELERY_TEST_OUT", "DISQUE_VISIBILITY_TIMEOUT"):
        monkeypatch.setenv(k, celery_env[k])
    monkeypatch.syspath_prepend(str(APP_DIR))
    sys.modules.pop("celeryapp", None)
    import celeryapp

    yield celeryapp
    celeryapp.app.close()
    sys.modules.pop("celeryapp", None)


@pytest.fixture
def start_worker(celery_env, tmp_path):
    """start(name, *args, **env) -> a running ``celery worker`` (2 prefork processes),
    in its own process group; every one is killed at the end."""
    procs: list[subprocess.Popen] = []

    def start(name: str = "w1", *args: str, **extra: str) -> subprocess.Popen:
        log_path = tmp_path / f"{name}-{len(procs)}.log"
        env = dict(celery_env, **extra)
        p = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celeryapp", "worker", "-c", "2",
             "-n", f"{name}@%h", "-l", "info", *args],
            cwd=APP_DIR, env=env, stdout=open(log_path, "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT, start_new_session=True)
        p.log_path = log_path
        procs.append(p)
        wait_for(lambda: b" ready." in log_path.read_bytes() or p.poll() is not None,
                 timeout=60, what=f"worker {name} ready")
        assert p.poll() is None, log_path.read_text(errors="replace")
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def traces(env: dict, tag: str, what: str = "done") -> list[str]:
    path = Path(env["CELERY_TEST_OUT"]) / f"{tag}.{what}"
    return path.read_text().splitlines() if path.exists() else []


def test_tasks_run(app, celery_env, start_worker):
    start_worker()
    tags = [f"t{i}" for i in range(50)]
    for t in tags:
        app.record.delay(t)
    wait_for(lambda: all(traces(celery_env, t) for t in tags), timeout=60,
             what="50 tasks done")
    assert all(len(traces(celery_env, t)) == 1 for t in tags)  # each once


def test_retry_with_countdown(app, celery_env, start_worker):
    start_worker()
    app.flaky.delay("f", 2)
    wait_for(lambda: traces(celery_env, "f"), timeout=30, what="the third attempt")
    starts = [float(line.split()[1]) for line in traces(celery_env, "f", "start")]
    assert len(starts) == 3
    # each retry came back after its 1 s countdown (the job's DELAY), not before
    assert all(b - a >= 0.9 for a, b in zip(starts, starts[1:], strict=False))


def test_countdown_is_a_disque_delay_and_the_task_id_finds_the_job(app, celery_env,
                                                                   start_worker, dq):
    from disquepy.kombu.cli import find_task_jobs

    start_worker()
    sent = time.time()
    r = app.record.apply_async(("later",), countdown=8)
    ids = wait_for(lambda: find_task_jobs(dq, r.id), timeout=10, what="the task's job")
    assert len(ids) == 1
    st = dq.status(ids[0])
    assert st.status == "scheduled" and st.delay >= 7, st  # held by Disque, not the worker
    assert st.queue == "celery"
    out = subprocess.run([sys.executable, "-m", "celery", "-A", "celeryapp", "disquepy",
                          "find", r.id], cwd=APP_DIR, env=celery_env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ids[0] in out.stdout and "scheduled" in out.stdout
    wait_for(lambda: traces(celery_env, "later"), timeout=30, what="the delayed task")
    ran_at = float(traces(celery_env, "later")[0].split()[1])
    assert ran_at - sent >= 7.9


def test_acks_late_survives_kill_9(app, celery_env, start_worker, server):
    """kill -9 of the worker and its pool mid-task: every task runs to completion
    afterwards (on a new worker, once the job's RETRY passes); none is lost."""
    env = {"CELERY_ACKS_LATE": "1", "CELERY_PREFETCH": "1"}
    w = start_worker("doomed", **env)
    tags = [f"s{i}" for i in range(12)]
    for t in tags:
        app.slow.delay(t, 0.5)
    # kill while tasks are running: some done, some started and not done
    wait_for(lambda: sum(bool(traces(celery_env, t)) for t in tags) >= 2
             and any(traces(celery_env, t, "start") and not traces(celery_env, t)
                     for t in tags), timeout=30, what="tasks in progress")
    os.killpg(w.pid, signal.SIGKILL)
    w.wait(10)
    interrupted = [t for t in tags if traces(celery_env, t, "start") and not traces(celery_env, t)]
    assert interrupted
    start_worker("heir", **env)
    wait_for(lambda: all(traces(celery_env, t) for t in tags), timeout=90,
             what="every task done after the kill")
    for t in interrupted:  # ran again, to the end
        assert len(traces(celery_env, t, "start")) >= 2


def test_revoke_and_inspect_ping(app, celery_env, start_worker):
    w = start_worker("w1")
    out = subprocess.run([sys.executable, "-m", "celery", "-A", "celeryapp", "inspect", "ping",
                          "-t", "5"], cwd=APP_DIR, env=celery_env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "w1@" in out.stdout and "pong" in out.stdout
    r = app.record.apply_async(("revoked",), countdown=2)
    app.record.delay("kept")
    app.app.control.revoke(r.id)
    wait_for(lambda: traces(celery_env, "kept"), timeout=30, what="the kept task")
    wait_for(lambda: f"Discarding revoked task: celeryapp.record[{r.id}]".encode()
             in w.log_path.read_bytes(), timeout=30, what="the revoked task discarded")
    assert not traces(celery_env, "revoked")
