"""The dashboard's charts: throughput and latency history kept by disque-web, so a page
reload shows the last hour instead of starting empty.

Every ``interval`` seconds a sample is taken from the cluster snapshot (the nodes'
JOBMETRICS, :mod:`disquepy.web.cluster`): jobs added, delivered, completed (acked) and
failed (dead-lettered) per second over the interval, summed over the nodes (each event
is counted by one node), and the 50th and 95th percentiles of the time jobs waited in
their queue and of their processing time, from the growth of the nodes' histograms in
the interval. A node whose counters went back (it restarted), or that did not answer
the interval before, counts nothing for that interval.

``disque-web --workers N`` runs N processes: the samples are then kept in a file of a
directory they share, written by the one process holding its lock (another takes over
if that one ends), and read by all, so every process answers the same history.
"""

from __future__ import annotations

import collections
import fcntl
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from .cluster import ClusterView, Snapshot

log = logging.getLogger("disquepy.web")

RATES = (("added", "added"), ("delivered", "delivered"), ("completed", "acked"))


def percentile(bounds_ms: list[int], buckets: list[int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of a histogram (per-bucket counts, the last one above
    every bound), interpolated inside its bucket; None without observations. Above the
    last bound: that bound (a lower bound of the true value)."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank = q * total
    acc = 0
    for i, n in enumerate(buckets):
        if n and acc + n >= rank:
            if i >= len(bounds_ms):
                return float(bounds_ms[-1])
            lo = bounds_ms[i - 1] if i else 0
            return round(lo + (bounds_ms[i] - lo) * (rank - acc) / n, 1)
        acc += n
    return float(bounds_ms[-1]) if bounds_ms else None


class History:
    """Samples of the cluster's throughput and latency, ``keep`` of them at most."""

    def __init__(self, view: ClusterView, interval: float = 2.0, keep: int = 1800,
                 directory: str | None = None) -> None:
        self.view = view
        self.interval = interval
        self.keep = keep
        self.path = Path(directory) / "history.jsonl" if directory else None
        self._mem: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self._prev: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = None
        self._lines = 0

    # ------------------------------------------------------------------ the sampler

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="disque-web-history",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval + 5)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval if self._prev is not None else 0.1):
            if not self._leader():
                continue
            try:
                snap, _ = self.view.snapshot()
                sample = self.sample(self._prev, snap)
                self._prev = snap
                if sample is not None:
                    self._append(sample)
            except Exception:  # the next tick tries again; the page shows a gap
                log.warning("history: no sample this time", exc_info=True)

    def _leader(self) -> bool:
        """Whether this process samples (always, without a shared directory)."""
        if self.path is None or self._lock_fd is not None:
            return True
        fd = os.open(str(self.path.with_suffix(".lock")), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd  # held until this process ends: then another one takes over
        if self.path.exists():
            self._lines = len(self.path.read_bytes().splitlines())
        return True

    @staticmethod
    def sample(prev: Snapshot | None, snap: Snapshot) -> dict[str, Any] | None:
        """The interval between two snapshots as a sample (None for the first)."""
        if prev is None or snap.at <= prev.at:
            return None
        dt = snap.at - prev.at
        counts = dict.fromkeys([k for k, _ in RATES] + ["failed"], 0)
        nb = len(snap.bounds_ms) + 1
        hist = {"wait": [0] * nb, "processing": [0] * nb}
        was_up = {n["address"] for n in prev.nodes if n["up"]}
        zero: dict[str, Any] = {"counts": {}, "dead": {}, "wait": (0, 0, [0] * nb),
                "processing": (0, 0, [0] * nb)}
        for key, m in snap.jobmetrics.items():
            old = prev.jobmetrics.get(key)
            if old is None:
                if key[0] not in was_up:
                    continue  # a node back: its counts since it started are no interval's
                old = zero  # a queue new on that node: all its counts are this interval's
            grown = {k: m["counts"].get(src, 0) - old["counts"].get(src, 0)
                     for k, src in RATES}
            grown["failed"] = sum(m["dead"].values()) - sum(old["dead"].values())
            if any(v < 0 for v in grown.values()):
                continue  # the node restarted: its counters began again
            for k, v in grown.items():
                counts[k] += v
            for h in hist:
                new_b, old_b = m[h][2], old[h][2]
                if len(new_b) == len(old_b) == nb:
                    hist[h] = [a + max(0, b - c) for a, b, c in zip(hist[h], new_b, old_b,
                                                                   strict=True)]
        up = [n for n in snap.nodes if n["up"]]
        queued = sum(int(st["len"]) for (_, q), st in snap.queues.items()
                     if not q.endswith(":dead"))
        out: dict[str, Any] = {"t": round(snap.at, 3), "nodes_up": len(up),
                               "nodes": len(snap.nodes), "queued": queued}
        for k, v in counts.items():
            out[k + "_per_sec"] = round(v / dt, 2)
        for h, buckets in hist.items():
            out[h + "_p50_ms"] = percentile(snap.bounds_ms, buckets, 0.5)
            out[h + "_p95_ms"] = percentile(snap.bounds_ms, buckets, 0.95)
        return out

    # ------------------------------------------------------------------ storage

    def _append(self, sample: dict[str, Any]) -> None:
        if self.path is None:
            self._mem.append(sample)
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(sample, separators=(",", ":")) + "\n")
        self._lines += 1
        if self._lines > 2 * self.keep:  # compact: the last ``keep`` samples
            lines = self.path.read_text().splitlines()[-self.keep:]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("\n".join(lines) + "\n")
            os.replace(tmp, self.path)
            self._lines = len(lines)

    def samples(self, since: float | None = None) -> list[dict[str, Any]]:
        """The samples kept, oldest first (those after ``since`` only, if given)."""
        if self.path is None:
            got = list(self._mem)
        else:
            try:
                text = self.path.read_text()
            except FileNotFoundError:
                return []
            got = []
            for line in text.splitlines()[-self.keep:]:
                try:
                    got.append(json.loads(line))
                except ValueError:  # a line being written: the next read has it
                    continue
        if since is not None:
            got = [s for s in got if s["t"] > since]
        return got

