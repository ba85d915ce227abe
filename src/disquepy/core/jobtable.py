"""The job registry: job ID -> Job, split in fixed partitions for stateless scans.

JSCAN needs a cursor that survives inserts and deletes between calls and still
visits every job that exists throughout the scan. IDs carry 144 random bits, so two
characters of the random part pick one of ``PARTS`` dicts; a cursor is simply the next
partition to visit. The split costs no memory per job and one index per lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .job import Job

PARTS = 1 << 14


def part_of(jid: bytes) -> int:
    """The partition of a job ID: 7 bits of each of two characters of its random part
    (the one formula; hot paths index ``JobTable.parts`` with it inline of get/add)."""
    return ((jid[11] & 0x7F) << 7) | (jid[12] & 0x7F)


class JobTable:
    """``parts`` and ``count`` are public so the node's ADDJOB path can insert inline."""

    __slots__ = ("parts", "count")

    def __init__(self) -> None:
        self.parts: list[dict[bytes, Job]] = [{} for _ in range(PARTS)]
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __contains__(self, jid: bytes) -> bool:
        return jid in self.parts[part_of(jid)]

    def get(self, jid: bytes) -> Job | None:
        return self.parts[part_of(jid)].get(jid)

    def add(self, job: Job) -> bool:
        """Insert; False (and nothing changed) if the ID is already registered."""
        jid = job.id
        part = self.parts[part_of(jid)]
        if jid in part:
            return False
        part[jid] = job
        self.count += 1
        return True

    def remove(self, job: Job) -> bool:
        part = self.parts[part_of(job.id)]
        if part.get(job.id) is job:
            del part[job.id]
            self.count -= 1
            return True
        return False

    def values(self) -> Iterator[Job]:
        for part in self.parts:
            if part:
                yield from list(part.values())

    def clear(self) -> None:
        for part in self.parts:
            part.clear()
        self.count = 0

    def scan(self, cursor: int, count: int, busyloop: bool,
             keep: Callable[[Job], bool]) -> tuple[int, list[Job]]:
        """Visit partitions from ``cursor``; returns (next cursor or 0 when done, jobs)."""
        parts = self.parts
        out: list[Job] = []
        steps = count * 10
        i = cursor if 0 <= cursor < PARTS else 0
        while i < PARTS:
            part = parts[i]
            i += 1
            if part:  # only non-empty partitions count as work
                out.extend(j for j in part.values() if keep(j))
                steps -= 1
            if not busyloop and (len(out) >= count or steps <= 0):
                break
        return (i if i < PARTS else 0), out
