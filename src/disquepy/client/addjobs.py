"""``add_jobs``: many ADDJOBs in one round trip, written once for the sync and the asyncio
client as a *plan* (a generator that yields batches to send and sleeps, and is sent the
replies; no I/O here), as :mod:`disquepy.client.jobstatus` does for its lookups.

The jobs' arguments are built by the same :func:`~disquepy.client.args.addjob_args` as
:meth:`~disquepy.client.Disque.add_job`'s, so every option and the ``idempotent`` key
mean the same. A reply per job: its ID, or the error the node answered for it (an
instance, not raised). Jobs answered ``-TRYAGAIN`` (their idempotency key's first job is
still being replicated) are sent again 50 ms later, as ``add_job`` does; jobs answered
``-LEAVING`` are sent again once the client moved to another node.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .args import addjob_args
from .batch import CHUNK
from .errors import LeavingError, TryAgainError

TRYAGAIN_LIMIT = 100  # -TRYAGAIN rounds (50 ms apart) before the error stands
TRYAGAIN_SLEEP = 0.05
OPTIONS = ("timeout_ms", "replicate", "delay", "retry", "ttl", "maxlen", "async_",
           "idempotent")


@dataclass(frozen=True, slots=True)
class Send:
    """What a plan yields: send these commands in one round trip (``sticky``: after a
    connection error retry on the same node first, as for an idempotent ``add_job``);
    the plan is sent the replies, in order."""

    commands: list[list[Any]]
    sticky: bool


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


def commands(jobs: Iterable[Any], queue: str | None, idempotent: Sequence[Any] | None,
             options: Mapping[str, Any]) -> tuple[list[list[Any]], bool]:
    """The ADDJOB of each job, and whether every one carries an idempotency key.

    ``jobs`` are bodies when ``queue`` is given, else ``(queue, body)`` or ``(queue,
    body, {option: value})`` tuples; ``options`` (add_job's keywords) apply to every
    job, a job's own options override them."""
    bad = set(options) - set(OPTIONS)
    if bad:
        raise TypeError(f"add_jobs() got an unexpected option {sorted(bad)[0]!r}")
    base: dict[str, Any] = {"timeout_ms": 0, "replicate": None, "delay": None,
                            "retry": None, "ttl": None, "maxlen": None, "async_": False,
                            "idempotent": None}
    base.update(options)
    out: list[list[Any]] = []
    keyed = True
    keys = iter(idempotent) if idempotent is not None else None
    for job in jobs:
        if queue is not None:
            q, body, own = queue, job, None
        elif isinstance(job, tuple | list) and len(job) in (2, 3):
            q, body, own = job[0], job[1], (job[2] if len(job) == 3 else None)
        else:
            raise TypeError("add_jobs(jobs): each job is (queue, body) or (queue, body, "
                            f"options), got {type(job).__name__}; or call "
                            "add_jobs(queue, bodies)")
        o = base
        if own:
            unknown = set(own) - set(OPTIONS)
            if unknown:
                raise TypeError(f"add_jobs(): unknown job option {sorted(unknown)[0]!r}")
            o = {**base, **own}
        key = o["idempotent"]
        if keys is not None:
            try:
                key = next(keys)
            except StopIteration:
                raise ValueError("add_jobs(): fewer idempotency keys than jobs") from None
        keyed = keyed and key is not None
        out.append(addjob_args(q, body, o["timeout_ms"], o["replicate"], o["delay"],
                               o["retry"], o["ttl"], o["maxlen"], o["async_"], key))
    if keys is not None and next(keys, None) is not None:
        raise ValueError("add_jobs(): more idempotency keys than jobs")
    return out, keyed and bool(out)


def plan(cmds: list[list[Any]], sticky: bool) -> Generator[Send | Sleep, Any, list[Any]]:
    """Send ``cmds`` in chunks of :data:`~disquepy.client.batch.CHUNK`; each job's reply
    (ID as ``str``, or an error instance); TRYAGAIN and LEAVING answers sent again."""
    results: list[Any] = [None] * len(cmds)
    pending = list(range(len(cmds)))
    for rounds in range(TRYAGAIN_LIMIT + 1):
        again: list[int] = []
        waits = False
        for lo in range(0, len(pending), CHUNK):
            idx = pending[lo:lo + CHUNK]
            replies = yield Send([cmds[i] for i in idx], sticky)
            for i, r in zip(idx, replies, strict=True):
                if isinstance(r, bytes):
                    results[i] = r.decode("ascii", "replace")
                    continue
                results[i] = r
                if isinstance(r, TryAgainError | LeavingError):
                    again.append(i)
                    waits = waits or isinstance(r, TryAgainError)
        if not again or rounds == TRYAGAIN_LIMIT:
            break
        pending = again
        if waits:
            yield Sleep(TRYAGAIN_SLEEP)
    return results
