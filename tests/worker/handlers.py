"""Handlers run by worker subprocesses in the tests (imported as ``handlers:<name>``)."""

from __future__ import annotations

import time
from pathlib import Path

from disquepy.worker import Tasks


def slow(payload: dict) -> None:
    """Mark ``started-<n>`` in ``payload["dir"]``, sleep ``payload["sleep"]`` seconds,
    mark ``done-<n>``."""
    d = Path(payload["dir"])
    (d / f"started-{payload['n']}").write_text("1")
    deadline = time.monotonic() + payload["sleep"]
    while time.monotonic() < deadline:
        time.sleep(0.02)
    (d / f"done-{payload['n']}").write_text("1")


def noop(payload) -> None:
    """Do nothing (benchmarks)."""


def fail(payload) -> None:
    """Always fail (the log must show this traceback)."""
    raise ValueError(f"handler failed on purpose: {payload!r}")


app = Tasks()  # a Tasks app with one queue (its worker gets --nodes)


@app.task("tq")
def tq(payload) -> None:
    """A task that does nothing."""


def fail_odd(payload: dict) -> None:
    """Fail for an odd ``payload["n"]``, succeed for an even one."""
    if payload["n"] % 2:
        raise RuntimeError(f"odd {payload['n']}")


def stall_once(payload: dict) -> None:
    """Nothing, except for a payload with ``"stall": true``: the first time (no marker
    ``stalled`` in ``payload["dir"]`` yet) wait ``payload["sleep"]`` seconds."""
    if payload.get("stall"):
        marker = Path(payload["dir"]) / "stalled"
        if not marker.exists():
            marker.write_text("1")
            time.sleep(payload["sleep"])
