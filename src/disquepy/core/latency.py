"""The latency monitor (``LATENCY LATEST|HISTORY|RESET``, directive
``latency-monitor-threshold``), as Disque and Redis keep it: for each event (here
``command``: a command that took at least the threshold, in milliseconds) the last 160
samples, one per second (the largest of that second), and the largest ever. Off when the
threshold is 0. Durations come from the shell through ``Node.command_took``."""

from __future__ import annotations

from typing import Final

HISTORY_LEN: Final = 160


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


# ------------------------------------------------------- LATENCY DOCTOR / GRAPH
_DISABLED: Final = (
    "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Disque "
    'instance. You may use "CONFIG SET latency-monitor-threshold <milliseconds>." in order '
    "to enable it. If we weren't in a deep space mission I'd suggest to take a look at "
    "http://disque.io/topics/latency-monitor.\n")
_NO_SPIKES: Final = (
    "Dave, no latency spike was observed during the lifetime of this Disque instance, not "
    "in the slightest bit. I honestly think you ought to sit down calmly, take a stress "
    "pill, and think things over.\n")
_SPIKES: Final = ("Dave, I have observed latency spikes in this Disque instance. You don't mind "
                  "talking about it, do you Dave?\n\n")
_ADVICE_SLOWLOG_TUNING: Final = (
    "- Your current Slow Log configuration only logs events that are slower than your "
    "configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than "
    "{}'.\n")
_ADVICE_SLOWLOG_INSPECT: Final = (
    "- Check your Slow Log to understand what are the commands you are running which are "
    "too slow to execute. Please check http://disque.io/commands/slowlog for more "
    "information.\n")
_ADVICE_LARGE_OBJECTS: Final = (
    "- Deleting, expiring or evicting (because of maxmemory policy) large objects is a "
    "blocking operation. If you have very large objects that are often deleted, expired, "
    "or evicted, try to fragment those objects into multiple smaller objects.\n")


def doctor(mon: LatencyMonitor, threshold_ms: int, slowlog_us: int, now_ms: int) -> str:
    """LATENCY DOCTOR's report, in Disque's words: per event its spikes, their average
    and mean deviation (ms), the period between them (seconds since the first, per
    spike) and the worst ever; then advice."""
    events = [(name, ev) for name, ev in mon.events.items() if ev.samples]
    if not events:
        return _DISABLED if threshold_ms == 0 else _NO_SPIKES
    out = [_SPIKES]
    now = now_ms // 1000
    for i, (name, ev) in enumerate(events, 1):
        values = [ms for _, ms in ev.samples]
        n = len(values)
        avg = sum(values) // n
        mad = sum(abs(v - avg) for v in values) // n
        period = (now - ev.samples[0][0]) or 1
        out.append(f"{i}. {name}: {n} latency spikes (average {avg}ms, mean deviation "
                   f"{mad}ms, period {period / n:.2f} sec). Worst all time event "
                   f"{ev.max}ms.\n")
    out.append("\nI have a few advices for you:\n\n")
    if slowlog_us // 1000 > threshold_ms:
        out.append(_ADVICE_SLOWLOG_TUNING.format(threshold_ms * 1000))
    out.append(_ADVICE_SLOWLOG_INSPECT)
    out.append(_ADVICE_LARGE_OBJECTS)
    return "".join(out)


GRAPH_ROWS: Final = 4  # the bars' height in lines (each line three steps: '_', 'o' and '#')
GRAPH_COLUMNS: Final = 80  # samples per band; more samples continue below


def _age(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def graph(mon: LatencyMonitor, event: str, now_ms: int) -> str | None:
    """LATENCY GRAPH event: a title, then the samples as ASCII bars (one column each,
    scaled between the lowest and highest sample) with each sample's age written
    downwards under it, 80 columns to a band. None for an event without samples."""
    ev = mon.events.get(event)
    if ev is None or not ev.samples:
        return None
    values = [ms for _, ms in ev.samples]
    low, high = min(values), max(values)
    out = [f"{event} - high {high} ms, low {low} ms (all time high {ev.max} ms)\n",
           "-" * GRAPH_COLUMNS + "\n"]
    steps = GRAPH_ROWS * 3
    span = (high - low) or 1
    now = now_ms // 1000
    for start in range(0, len(values), GRAPH_COLUMNS):
        if start:
            out.append("\n")
        band = ev.samples[start:start + GRAPH_COLUMNS]
        levels = [min(steps - 1, steps * (ms - low) // span) for _, ms in band]
        for row in range(GRAPH_ROWS - 1, -1, -1):  # the top line first
            line = []
            base = row * 3
            for lv in levels:
                if lv > base + 2:
                    line.append("|")  # the bar goes on above this line
                elif lv >= base:
                    line.append("_o#"[lv - base])
                else:
                    line.append(" ")
            out.append("".join(line) + "\n")
        out.append(" " * len(band) + "\n")
        labels = [_age(max(0, now - ts)) for ts, _ in band]
        for k in range(max(len(s) for s in labels)):
            out.append("".join(s[k] if k < len(s) else " " for s in labels) + "\n")
    return "".join(out)
