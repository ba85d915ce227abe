"""The Celery app the tests run real ``celery worker`` processes of (broker: a real node).

Tasks leave their traces as lines in files under ``$CELERY_TEST_OUT`` (no result
backend): ``<tag>.start`` and ``<tag>.done`` with the worker's pid and the time."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

import disquepy.kombu  # noqa: F401  (registers disque://)

app = Celery("celeryapp", broker=os.environ["DISQUE_BROKER_URL"])
app.conf.update(
    broker_transport_options={
        "visibility_timeout": int(os.environ.get("DISQUE_VISIBILITY_TIMEOUT", "3600"))},
    broker_connection_retry_on_startup=True,
    task_acks_late=os.environ.get("CELERY_ACKS_LATE") == "1",
    worker_prefetch_multiplier=int(os.environ.get("CELERY_PREFETCH", "4")),
)

OUT = Path(os.environ.get("CELERY_TEST_OUT", "."))


def trace(tag: str, what: str) -> None:
    with open(OUT / f"{tag}.{what}", "a") as f:
        f.write(f"{os.getpid()} {time.time():.3f}\n")


@app.task
def record(tag: str) -> str:
    trace(tag, "done")
    return tag


@app.task(bind=True, max_retries=5)
def flaky(self, tag: str, fails: int) -> str:
    """Fails ``fails`` times, each retried after a 1-second countdown."""
    trace(tag, "start")
    if self.request.retries < fails:
        raise self.retry(countdown=1, exc=RuntimeError(f"attempt {self.request.retries}"))
    trace(tag, "done")
    return tag


@app.task
def slow(tag: str, seconds: float) -> str:
    trace(tag, "start")
    time.sleep(seconds)
    trace(tag, "done")
    return tag
