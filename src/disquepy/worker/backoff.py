"""Back-off policies: how long a failed job waits (DELAY, whole seconds) before its next try."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """A back-off policy. ``delay(attempt)`` is the DELAY (seconds, at least 1) of the job
    re-added after failed attempt number ``attempt`` (1 for the first failure).

    ``fixed``: always ``base``. ``exponential``: ``base * factor ** (attempt - 1)``, capped
    at ``max``. ``jitter`` spreads each delay uniformly by ±``jitter`` of itself (0.1:
    ±10 %) so failed jobs retried together do not come back together; with the default
    factor 2 and jitter up to 1/3 delays never shrink from one attempt to the next (below
    the cap).
    """

    kind: str = "exponential"
    base: float = 1.0
    factor: float = 2.0
    max: float = 3600.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential"):
            raise ValueError("kind must be 'fixed' or 'exponential'")
        if self.base <= 0 or self.factor < 1 or self.max <= 0 or not 0 <= self.jitter < 1:
            raise ValueError("bad back-off parameters")

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
    def parse(cls, spec: str) -> Backoff:
        """``"fixed:5"``, ``"exponential"``, ``"exponential:1:2:600"`` (base:factor:max),
        optionally ``...;jitter=0.2``."""
        spec, _, opt = spec.partition(";")
        parts = spec.split(":")
        jitter = 0.1
        if opt.startswith("jitter="):
            jitter = float(opt[7:])
        if parts[0] == "fixed":
            return cls.fixed(float(parts[1]) if len(parts) > 1 else 1.0, jitter)
        if parts[0] == "exponential":
            nums = [float(p) for p in parts[1:]]
            return cls.exponential(*nums, jitter=jitter)
        raise ValueError(f"unknown back-off {spec!r}")

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
        return max(1, math.ceil(d - 1e-9))
