"""Priorities: one logical queue, three Disque queues, served high to low.

A logical queue ``q`` with priorities maps to three Disque queues:

=========  ==============
priority   Disque queue
=========  ==============
``high``   ``q:high``
``medium`` ``q`` (the plain queue: jobs added without a priority are medium)
``low``    ``q:low``
=========  ==============

A consumer asks ``GETJOB FROM q:high q q:low`` (Disque serves the queues left to right),
so a high job always goes before a medium one, which goes before a low one. To keep a
steady stream of high and medium jobs from starving ``low`` for ever, a share of the
fetches (``low_share``, default 0.1: one GETJOB in ten) lists the queues in the reverse
order: a consumer busy with high jobs still takes a low job now and then, and low jobs
get at least about ``low_share`` of the consumer's throughput while they wait.

This module is the one place the naming and the order are defined: the worker
(``--priorities``), the HTTP API and the dashboard all use it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence

PRIORITIES = ("high", "medium", "low")  # served in this order
DEFAULT_PRIORITY = "medium"
_SUFFIX = {"high": ":high", "medium": "", "low": ":low"}
DEFAULT_LOW_SHARE = 0.1


def check_priority(priority: str) -> str:
    """``priority`` if it is one of :data:`PRIORITIES`; ``ValueError`` otherwise."""
    if priority not in _SUFFIX:
        raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
    return priority


def queue_for(queue: str, priority: str = DEFAULT_PRIORITY) -> str:
    """The Disque queue holding ``queue``'s jobs of ``priority`` (``q:high``, ``q``, ``q:low``)."""
    return queue + _SUFFIX[check_priority(priority)]


def levels(queue: str) -> list[tuple[str, str]]:
    """``[(priority, Disque queue), ...]`` of a logical queue, high first."""
    return [(p, queue + _SUFFIX[p]) for p in PRIORITIES]


def split(name: str) -> tuple[str, str]:
    """A Disque queue name as ``(logical queue, priority)``: ``"q:low"`` ->
    ``("q", "low")``; a name without a priority suffix is medium."""
    for p in ("high", "low"):
        suffix = _SUFFIX[p]
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], p
    return name, DEFAULT_PRIORITY


def fetch_order(queues: Iterable[str], reverse: bool = False) -> list[str]:
    """The Disque queues of the logical ``queues`` in serving order: every queue's high
    level first, then medium, then low (``reverse``: low first)."""
    qs = list(queues)
    order = list(reversed(PRIORITIES)) if reverse else list(PRIORITIES)
    return [q + _SUFFIX[p] for p in order for q in qs]


class PriorityOrder:
    """The GETJOB queue list for each fetch of a consumer of logical ``queues``.

    ``next()`` returns :func:`fetch_order` (high first), except for a ``low_share`` of
    the calls, spread evenly (every ``round(1 / low_share)``-th call), which get the
    reversed order (low first): the guard against starving ``low``. ``low_share=0``
    serves strictly by priority. Thread-safe.
    """

    def __init__(self, queues: Sequence[str], low_share: float = DEFAULT_LOW_SHARE) -> None:
        if not queues:
            raise ValueError("no queues given")
        if not 0 <= low_share <= 0.5:
            raise ValueError("low_share must be between 0 and 0.5")
        self.queues = list(queues)
        self.low_share = low_share
        self.normal = fetch_order(self.queues)
        self.reverse = fetch_order(self.queues, reverse=True)
        self._every = round(1 / low_share) if low_share else 0
        self._count = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def disque_queues(self) -> list[str]:
        """Every Disque queue this order covers."""
        return list(self.normal)

    def next(self) -> list[str]:
        if not self._every:
            return self.normal
        with self._lock:
            n = next(self._count)
        return self.reverse if n % self._every == 0 else self.normal


__all__ = [
    "PRIORITIES",
    "DEFAULT_PRIORITY",
    "DEFAULT_LOW_SHARE",
    "check_priority",
    "queue_for",
    "levels",
    "split",
    "fetch_order",
    "PriorityOrder",
]
