"""Back-off policies: how long a failed job waits (DELAY, whole seconds) before its next try.

The default is :data:`disquepy.client.envelope.DEFAULT_POLICY`'s (exponential from 1 s,
doubling, at most 3600 s): :meth:`Backoff.from_policy` turns a retry policy into one."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..client.envelope import RetryPolicy


@dataclass(frozen=True, slots=True)
class Backoff:
    """A back-off policy. ``delay(attempt)`` is the DELAY (seconds, at least 1) of the job
    re-added after failed attempt number ``attempt`` (1 for the first failure).

    ``fixed``: always ``base``. ``exponential``: ``base * factor ** (attempt - 1)``, capped
    at ``max``. ``jitter`` spreads each delay uniformly by ±``jitter`` of itself (0.1:
    ±10 %) so failed jobs retried together do not come back together; with the default
    factor 2 and jitter up to 1/3 delays never shrink from one attempt to the next (below
    the cap). The delay is then rounded to the nearest whole second (``NACK ... DELAY``
    takes seconds), at least 1: jitter never turns a 1 s base into 2 s.
    """

    kind: str = "exponential"
    base: float = 1.0
    factor: float = 2.0
    max: float = 3600.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential"):
            raise ValueError("kind must be 'fixed' or 'exponential'")
        if not (self.base > 0 and self.factor >= 1 and self.max > 0):
            raise ValueError("back-off needs base > 0, factor >= 1 and max > 0")
        if not 0 <= self.jitter < 1:
            raise ValueError("back-off jitter must be >= 0 and < 1")

    @classmethod
    def fixed(cls, delay: float, jitter: float = 0.1) -> Backoff:
        """The same delay after every failure."""
        return cls("fixed", delay, 1.0, delay, jitter)

    @classmethod
    def exponential(cls, base: float = 1.0, factor: float = 2.0, max: float = 3600.0,
                    jitter: float = 0.1) -> Backoff:
        """``base``, ``base*factor``, ``base*factor**2``... up to ``max`` seconds."""
        return cls("exponential", base, factor, max, jitter)

    @classmethod
    def from_policy(cls, policy: RetryPolicy) -> Backoff:
        """The back-off of a retry policy (the envelope's; factor 2, default jitter)."""
        if policy.strategy == "fixed":
            return cls.fixed(policy.base)
        return cls.exponential(policy.base, 2.0, max(policy.cap, policy.base))

    @classmethod
    def parse(cls, spec: str) -> Backoff:
        """``"fixed:5"``, ``"exponential"``, ``"exponential:1:2:600"`` (base:factor:max),
        optionally ``...;jitter=0.2``. Raises ValueError saying what is wrong."""
        text, _, opt = spec.partition(";")
        kind, *parts = text.split(":")
        jitter = 0.1
        if opt:
            name, eq, value = opt.partition("=")
            if name.strip() != "jitter" or not eq:
                raise ValueError(f"unknown back-off option {opt!r} (only jitter=FRACTION)")
            jitter = _number(value, "jitter")
        if kind == "fixed":
            if len(parts) > 1:
                raise ValueError(f"fixed takes one number (seconds), got {text!r}")
            delay = _number(parts[0], "fixed delay") if parts else 1.0
        elif kind == "exponential":
            if len(parts) > 3:
                raise ValueError(f"exponential takes up to three numbers (base:factor:max), "
                                 f"got {text!r}")
            nums = {n: _number(p, n) for p, n in zip(parts, ("base", "factor", "max"),
                                                     strict=False)}
        else:
            raise ValueError(f"unknown back-off {kind!r} (fixed or exponential)")
        try:
            if kind == "fixed":
                return cls.fixed(delay, jitter=jitter)
            return cls.exponential(**nums, jitter=jitter)
        except ValueError as e:
            raise ValueError(f"{e} in {spec!r}") from None

    def raw_delay(self, attempt: int) -> float:
        """The delay before jitter, in seconds."""
        if self.kind == "fixed":
            return self.base
        return min(self.base * self.factor ** max(attempt - 1, 0), self.max)

    def delay(self, attempt: int, rng: random.Random | None = None) -> int:
        """The DELAY in whole seconds (at least 1) after failed attempt ``attempt``."""
        d = self.raw_delay(attempt)
        if self.jitter:
            d *= 1.0 + (rng or random).uniform(-self.jitter, self.jitter)
        return max(1, math.floor(d + 0.5))


def _number(text: str, what: str) -> float:
    try:
        n = float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(n):
        raise ValueError(f"{what} must be a finite number, got {text!r}")
    return n
