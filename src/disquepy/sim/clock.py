"""Per-node virtual clocks: global simulated time plus a fixed offset and a drift.

``node_time(t) = origin + offset + x + floor(x * ppm / 1e6)`` with ``x = t - origin``:
monotonic (never backwards) for any drift above -1e6 ppm, as a node's wall clock
must be for the core. ``global_time`` inverts it to schedule a node's next timer.
"""

from __future__ import annotations

_MILLION = 1_000_000
_FIX_STEPS = 16
T0 = 1_700_000_000_000  # global simulated time at the start of every run, ms


class NodeClock:
    __slots__ = ("origin", "offset", "ppm")

    def __init__(self, origin: int, offset: int = 0, ppm: int = 0) -> None:
        if ppm <= -_MILLION:
            raise ValueError("drift must be above -1e6 ppm")
        self.origin = origin
        self.offset = offset
        self.ppm = ppm

    def node_time(self, t: int) -> int:
        x = t - self.origin
        if self.ppm:
            return self.origin + self.offset + x + (x * self.ppm) // _MILLION
        return t + self.offset

    def global_time(self, w: float) -> float:
        """The earliest global time ``t >= origin`` at which ``node_time(t) >= w``."""
        if w == float("inf"):
            return w
        d = int(w) - self.origin - self.offset
        if d <= 0:
            return self.origin
        ppm = self.ppm
        if not ppm:
            return self.origin + d
        x = (d * _MILLION) // (_MILLION + ppm)  # within a step or two of the answer
        for _ in range(_FIX_STEPS):
            if x + (x * ppm) // _MILLION < d:
                x += 1
            elif x > 0 and (x - 1) + ((x - 1) * ppm) // _MILLION >= d:
                x -= 1
            else:
                return self.origin + x
        raise AssertionError(f"global_time({w}) did not converge")
