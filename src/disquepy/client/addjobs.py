"""ADDJOBs in batches: what ``add_jobs`` (and the asyncio client's ``add_job``) send and
how their replies are handled, written once for the sync and the asyncio client as a
*plan* (a generator that yields batches to send and sleeps, and is sent the replies; no
I/O here), as :mod:`disquepy.client.jobstatus` does for its lookups. The batches go
out through :mod:`disquepy.client.batch`.

The jobs' arguments are built by the same :func:`~disquepy.client.args.addjob_args` as
:meth:`~disquepy.client.Disque.add_job`'s, so every option and the ``idempotent`` key
mean the same; each job is encoded once (:func:`commands`), the parts its jobs share
(the options) once per batch. A reply per job: its ID, or the error the node answered
for it (an instance, not raised). Jobs answered ``-TRYAGAIN`` (their idempotency key's
first job is still being replicated) are sent again 50 ms later, as ``add_job`` does;
jobs answered ``-LEAVING`` are sent again once the client moved to another node
(unless the batch is bound to one node: then that is their answer).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..codec.resp import array, bulk
from .args import addjob_args
from .batch import CHUNK, text
from .batch import encode as encode_args
from .errors import LeavingError, ResponseError, TryAgainError

TRYAGAIN_LIMIT = 100  # -TRYAGAIN rounds (50 ms apart) before the error stands
TRYAGAIN_SLEEP = 0.05
OPTIONS = ("timeout_ms", "replicate", "delay", "retry", "ttl", "maxlen", "async_",
           "idempotent")
_DEFAULTS: dict[str, Any] = {"timeout_ms": 0, "replicate": None, "delay": None,
                             "retry": None, "ttl": None, "maxlen": None, "async_": False,
                             "idempotent": None}
_ADDJOB = bulk("ADDJOB")
_IDEMPOTENT = bulk("IDEMPOTENT")

Result = str | ResponseError  # a job's ID, or the error the node answered for it


@dataclass(frozen=True, slots=True)
class Send:
    """What a plan yields: send these encoded commands in one round trip (``sticky``:
    after a connection error retry on the same node first, as for an idempotent
    ``add_job``); the plan is sent the replies, in order."""

    commands: list[bytes]
    sticky: bool


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


class _Encoder:
    """ADDJOBs sharing their options: the options' bulk strings encoded once."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        o = options
        tail = addjob_args("", b"", o["timeout_ms"], o["replicate"], o["delay"], o["retry"],
                           o["ttl"], o["maxlen"], o["async_"], None)[3:]
        self.tail = [bulk(text(a)) for a in tail]

    def command(self, queue: str | bytes, body: bytes | str, key: str | bytes | None) -> bytes:
        return self.encoded(bulk(queue), body, key)

    def encoded(self, queue: bytes, body: bytes | str, key: str | bytes | None) -> bytes:
        """:meth:`command` with the queue's bulk string already encoded."""
        if key is None:
            return array([_ADDJOB, queue, bulk(body), *self.tail])
        return array([_ADDJOB, queue, bulk(body), *self.tail, _IDEMPOTENT, bulk(key)])


def encode(queue: str, body: bytes | str, timeout_ms: int, replicate: int | None,
           delay: int | None, retry: int | None, ttl: int | None, maxlen: int | None,
           async_: bool, idempotent: str | bytes | None) -> bytes:
    """One ADDJOB, encoded (``add_job``'s arguments)."""
    return encode_args(addjob_args(queue, body, timeout_ms, replicate, delay, retry, ttl,
                                   maxlen, async_, idempotent))


def commands(jobs: Iterable[Any], queue: str | None, idempotent: Sequence[Any] | None,
             options: Mapping[str, Any]) -> tuple[list[bytes], bool]:
    """The encoded ADDJOB of each job, and whether every one carries an idempotency key.

    ``jobs`` are bodies when ``queue`` is given, else ``(queue, body)`` or ``(queue,
    body, {option: value})`` tuples; ``options`` (add_job's keywords) apply to every
    job, a job's own options override them."""
    bad = set(options) - set(OPTIONS)
    if bad:
        raise TypeError(f"add_jobs() got an unexpected option {sorted(bad)[0]!r}")
    base = {**_DEFAULTS, **options}
    shared = _Encoder(base)
    if queue is not None:  # one queue, the same options: the common batch, kept lean
        bodies = list(jobs)
        if idempotent is None:
            keys: list[Any] = [base["idempotent"]] * len(bodies)
        else:
            keys = list(idempotent)
            if len(keys) != len(bodies):
                raise ValueError(f"add_jobs(): {'fewer' if len(keys) < len(bodies) else 'more'}"
                                 " idempotency keys than jobs")
        qbulk = bulk(queue)
        one = shared.encoded
        return ([one(qbulk, body, key) for body, key in zip(bodies, keys, strict=True)],
                bool(bodies) and None not in keys)
    out: list[bytes] = []
    keyed = True
    keyiter = iter(idempotent) if idempotent is not None else None
    for job in jobs:
        if isinstance(job, tuple | list) and len(job) in (2, 3):
            q, body, own = job[0], job[1], (job[2] if len(job) == 3 else None)
        else:
            raise TypeError("add_jobs(jobs): each job is (queue, body) or (queue, body, "
                            f"options), got {type(job).__name__}; or call "
                            "add_jobs(queue, bodies)")
        enc = shared
        key = base["idempotent"]
        if own:
            unknown = set(own) - set(OPTIONS)
            if unknown:
                raise TypeError(f"add_jobs(): unknown job option {sorted(unknown)[0]!r}")
            mine = {**base, **own}
            enc = _Encoder(mine)
            key = mine["idempotent"]
        if keyiter is not None:
            try:
                key = next(keyiter)
            except StopIteration:
                raise ValueError("add_jobs(): fewer idempotency keys than jobs") from None
        keyed = keyed and key is not None
        out.append(enc.command(q, body, key))
    if keyiter is not None and next(keyiter, None) is not None:
        raise ValueError("add_jobs(): more idempotency keys than jobs")
    return out, keyed and bool(out)


def plan(cmds: list[bytes], sticky: bool, follow: bool = True,
         answered: list[Any] | None = None) -> Generator[Send | Sleep, Any, list[Result]]:
    """Send ``cmds`` in chunks of :data:`~disquepy.client.batch.CHUNK`; each job's reply
    (ID as ``str``, or an error instance); TRYAGAIN answers sent again, and LEAVING ones
    too when ``follow`` (the client follows the cluster: not bound to one node).
    ``answered``: the replies to a first send of ``cmds`` (at most one chunk) made
    before the plan was needed (``add_job``'s own first try)."""
    results: list[Result] = [""] * len(cmds)
    pending = list(range(len(cmds)))
    for rounds in range(TRYAGAIN_LIMIT + 1):
        again: list[int] = []
        waits = False
        for lo in range(0, len(pending), CHUNK):
            idx = pending[lo:lo + CHUNK] if lo or len(pending) > CHUNK else pending
            if answered is not None:
                replies, answered = answered, None
            else:
                replies = yield Send(cmds if len(idx) == len(cmds) else [cmds[i] for i in idx],
                                     sticky)
            for i, r in zip(idx, replies, strict=True):
                if type(r) is bytes:
                    results[i] = r.decode("ascii", "replace")
                    continue
                results[i] = r
                if isinstance(r, TryAgainError) or (follow and isinstance(r, LeavingError)):
                    again.append(i)
                    waits = waits or isinstance(r, TryAgainError)
        if not again or rounds == TRYAGAIN_LIMIT:
            break
        pending = again
        if waits:
            yield Sleep(TRYAGAIN_SLEEP)
    return results
