"""A job's envelope and its retry policy: the one definition of both.

The envelope is JSON around the user's body::

    {"_disquepy": {"attempt": 1, "first_id": null,
                   "policy": {"max_attempts": 4, "strategy": "exponential",
                              "base": 1.0, "cap": 3600.0}},
     "body": "<the body as text if UTF-8, else {\"base64\": ...}>"}

``attempt`` and ``first_id`` were written by older workers re-adding a job for a later
attempt (today a retry is ``NACK ... DELAY``, the same job); ``policy`` (optional) is the
job's own :class:`RetryPolicy`, which a worker applies instead of its queue's settings.
The HTTP API wraps a ``POST /jobs`` with a ``retry`` object this way (:func:`stamp`).
A body that does not start with ``{"_disquepy":`` is a plain body, attempt 1.

A job without a policy gets its queue's or its worker's settings, and where none is set
:data:`DEFAULT_POLICY`, Disqueue's: at most 3 retries (4 attempts in all: the first run
and 3 retries), 1, 2 then 4 s apart (exponential back-off), then the dead letters.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import Any

PREFIX = b'{"_disquepy":'


def body_to_json(body: bytes) -> str | dict[str, str]:
    """A body as JSON: the text if it is UTF-8, else ``{"base64": ...}``."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(body).decode("ascii")}


def body_from_json(v: str | dict[str, str]) -> bytes:
    if isinstance(v, dict):
        return base64.b64decode(v["base64"])
    return v.encode("utf-8")


STRATEGIES = ("fixed", "exponential")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failing job is retried, then given up (dead-lettered).

    ``max_attempts``: runs in all before the dead letters (the first and
    ``max_attempts - 1`` retries; :attr:`max_retries` is that second number, Disqueue's
    ``max_retries``). The delay before retry ``n`` (``n`` = 1 after the first failure) is
    ``base`` seconds (``fixed``) or ``base * 2 ** (n - 1)`` (``exponential``), at most
    ``cap`` seconds; a worker spreads it by its jitter (10 %) and rounds it to whole
    seconds, at least 1 (``NACK ... DELAY`` takes seconds).

    As JSON (:meth:`to_dict`, the envelope's ``policy``): ``{"max_attempts": 4,
    "strategy": "exponential", "base": 1.0, "cap": 3600.0}``; :meth:`from_dict` also
    takes ``max_retries`` instead of ``max_attempts``.
    """

    max_attempts: int = 4
    strategy: str = "exponential"
    base: float = 1.0
    cap: float = 3600.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be a whole number >= 1, got "
                             f"{self.max_attempts!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be fixed or exponential, got {self.strategy!r}")
        for name in ("base", "cap"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
                raise ValueError(f"{name} must be a number of seconds > 0, got {v!r}")

    @property
    def max_retries(self) -> int:
        """Retries after the first attempt (``max_attempts - 1``)."""
        return self.max_attempts - 1

    def to_dict(self) -> dict[str, Any]:
        """The policy as the envelope carries it."""
        return {"max_attempts": self.max_attempts, "strategy": self.strategy,
                "base": float(self.base), "cap": float(self.cap)}

    @classmethod
    def from_dict(cls, d: Any) -> RetryPolicy:
        """A policy from its JSON form (missing keys: the defaults'); ``ValueError``
        saying what is wrong for anything else."""
        if not isinstance(d, dict):
            raise ValueError(f"a retry policy is a JSON object, got {type(d).__name__}")
        unknown = set(d) - {"max_attempts", "max_retries", "strategy", "base", "cap"}
        if unknown:
            raise ValueError(f"unknown retry policy field {sorted(unknown)[0]!r}")
        kw = {k: d[k] for k in ("max_attempts", "strategy", "base", "cap") if k in d}
        if "max_retries" in d:
            if "max_attempts" in d:
                raise ValueError("give max_attempts or max_retries, not both")
            r = d["max_retries"]
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise ValueError(f"max_retries must be a whole number >= 0, got {r!r}")
            kw["max_attempts"] = r + 1
        return cls(**kw)


#: Disqueue's default: 3 retries (4 attempts), exponential back-off from 1 s
DEFAULT_POLICY = RetryPolicy()


@dataclass(slots=True)
class Envelope:
    """What the worker reads from a job: the user's body and which attempt this is."""

    body: bytes
    attempt: int = 1
    first_id: str | None = None
    policy: dict[str, Any] | None = None


def wrap(body: bytes, attempt: int = 1, first_id: str | None = None,
         policy: RetryPolicy | dict[str, Any] | None = None) -> bytes:
    """``body`` in an envelope (``policy``: the job's own retry policy)."""
    meta: dict[str, Any] = {"attempt": attempt, "first_id": first_id}
    if policy is not None:
        meta["policy"] = policy.to_dict() if isinstance(policy, RetryPolicy) else policy
    return json.dumps({"_disquepy": meta, "body": body_to_json(body)},
                      separators=(",", ":")).encode()


def stamp(body: bytes, policy: RetryPolicy = DEFAULT_POLICY) -> bytes:
    """``body`` carrying ``policy`` unless it carries a policy already (the body of a
    job submitted without one, e.g. by ``disque-web``'s default policy option); an
    envelope without a policy keeps its attempt and first ID."""
    env = unwrap(body)
    if env.policy is not None:
        return body
    return wrap(env.body, env.attempt, env.first_id, policy)


def job_policy(env: Envelope) -> RetryPolicy | None:
    """The retry policy an envelope carries, ``None`` when it has none or a malformed one
    (such a job gets its queue's settings)."""
    if env.policy is None:
        return None
    try:
        return RetryPolicy.from_dict(env.policy)
    except (ValueError, TypeError):
        return None


def unwrap(raw: bytes) -> Envelope:
    """The envelope of ``raw`` (a plain body is attempt 1 of itself)."""
    if raw.startswith(PREFIX):
        try:
            d = json.loads(raw)
            meta = d["_disquepy"]
            policy = meta.get("policy")
            return Envelope(body_from_json(d["body"]), int(meta["attempt"]),
                            meta.get("first_id"), policy if isinstance(policy, dict) else None)
        except (ValueError, KeyError, TypeError):
            pass
    return Envelope(raw)
