"""A node's simulated disk: the AOF with fsync semantics, and nodes.conf.

Records the node emits are *written* at once (the OS has them) and become *durable*
when synced. Policies: ``always`` syncs before any output of the step leaves the node
(the client sees an ADDJOB reply only after its record is durable); ``everysec``
syncs whenever a second of the node's clock has passed since the last sync; ``no``
leaves it to the OS, modelled as a sync every 30 s.

Crashes: a *kill* (the process dies, the OS survives) keeps every written record; a
*power* loss keeps only the synced bytes, and may leave a torn prefix of the first
unsynced record on disk. A restart loads what is on disk the way the server does
(``core.aofrecords.scan``; a torn tail is truncated, anything else is corrupt).

``nodes.conf`` is written atomically (temp file, fsync, rename) by the shell, so it
is durable as soon as it is saved.
"""

from __future__ import annotations

import random
from typing import Any

from ..core import aofrecords as aof

SYNC_PERIOD_MS = {"always": 0, "everysec": 1000, "no": 30_000}


class CorruptAof(Exception):
    pass


class Disk:
    __slots__ = (
        "policy",
        "period",
        "durable",
        "pending",
        "next_sync",
        "nodes_conf",
        "syncs",
        "torn_tails",
        "records_lost",
        "records_written",
    )

    def __init__(self, policy: str, now: int) -> None:
        self.policy = policy
        self.period = SYNC_PERIOD_MS[policy]
        self.durable = bytearray()
        self.pending: list[bytes] = []  # written, not synced
        self.next_sync = now + self.period
        self.nodes_conf = ""
        self.syncs = 0
        self.torn_tails = 0
        self.records_lost = 0
        self.records_written = 0

    def _sync(self) -> None:
        if self.pending:
            self.durable += b"".join(self.pending)
            self.pending.clear()
            self.syncs += 1

    def advance(self, now: int) -> None:
        """The node's clock reached ``now``: a periodic sync may have happened since
        (everything pending was written before the sync point)."""
        if self.period and now >= self.next_sync:
            self._sync()
            self.next_sync = now + self.period

    def append(self, records: list[bytes], now: int) -> None:
        self.advance(now)
        self.pending.extend(records)
        self.records_written += len(records)
        if not self.period:
            self._sync()

    def crash(self, power: bool, now: int, rng: random.Random) -> None:
        self.advance(now)
        if not power:
            self._sync()  # the OS has the written bytes: a process crash loses nothing
            return
        if self.pending:
            self.records_lost += len(self.pending)
            first = self.pending[0]
            if len(first) > 1 and rng.random() < 0.5:
                self.durable += first[: rng.randrange(1, len(first))]
                self.torn_tails += 1
            self.pending.clear()

    def load(self) -> list[tuple[int, str, Any]]:
        """Records for ``Persistence.load``; a torn tail is cut off as the server does."""
        self._sync()
        res = aof.scan(bytes(self.durable))
        if res.status == "truncated":
            del self.durable[res.valid_end :]
        elif res.status == "corrupt":
            raise CorruptAof(f"AOF corrupt at offset {res.error_offset}: {res.reason}")
        return res.records

    def live_ids(self) -> set[bytes]:
        """Job IDs a restart from this disk would reload (LOADJOB not followed by
        DELJOB), ignoring TTLs. Reads only the durable bytes."""
        res = aof.scan(bytes(self.durable))
        live: dict[bytes, bool] = {}
        for _, kind, payload in res.records:
            if kind == aof.LOADJOB:
                live[payload.id] = True
            elif kind == aof.LOADJOBS:
                for f in payload:
                    live[f.id] = True
            elif kind == aof.DELJOB:
                live.pop(payload, None)
        return set(live)
