"""The latency monitor (``LATENCY LATEST|HISTORY|RESET``, directive
``latency-monitor-threshold``), as Disque and Redis keep it: for each event (here
``command``: a command that took at least the threshold, in milliseconds) the last 160
samples, one per second (the largest of that second), and the largest ever. Off when the
threshold is 0. Durations come from the shell through ``Node.command_took``."""

from __future__ import annotations

HISTORY_LEN = 160


class LatencyEvent:
    __slots__ = ("samples", "max")

    def __init__(self) -> None:
        self.samples: list[tuple[int, int]] = []  # (unix time, ms), oldest first
        self.max = 0


class LatencyMonitor:
    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: dict[str, LatencyEvent] = {}

    def add(self, event: str, ms: int, now_ms: int) -> None:
        ev = self.events.get(event)
        if ev is None:
            ev = self.events[event] = LatencyEvent()
        ts = now_ms // 1000
        if ev.samples and ev.samples[-1][0] == ts:  # one sample a second: its largest
            ms = max(ms, ev.samples[-1][1])
            ev.samples[-1] = (ts, ms)
        else:
            ev.samples.append((ts, ms))
            if len(ev.samples) > HISTORY_LEN:
                del ev.samples[0]
        ev.max = max(ev.max, ms)

    def latest(self) -> list[tuple[str, int, int, int]]:
        """(event, time of its last sample, that sample, the largest ever) per event."""
        return [(name, ev.samples[-1][0], ev.samples[-1][1], ev.max)
                for name, ev in self.events.items() if ev.samples]

    def history(self, event: str) -> list[tuple[int, int]]:
        ev = self.events.get(event)
        return list(ev.samples) if ev is not None else []

    def reset(self, events: list[str]) -> int:
        """Forget the named events (all without names); how many there were."""
        names = list(self.events) if not events else [e for e in events if e in self.events]
        for n in names:
            del self.events[n]
        return len(names)
