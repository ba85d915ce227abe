"""The dead-letter queues (``Q:dead``, the format in :mod:`disquepy.client.deadletter`):
list them without consuming them (QPEEK: a node's local queue, so ask the node the
worker added them on, or every node with ``cluster=True``), re-queue and delete them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .deadletter import DEFAULT_DLQ, DeadLetter, dead_queue_name, parse_dead_letter
from .jobstatus import node_addresses
from .replies import Job, parse_jobs
from .sync import Disque


def _peek(client: Disque, dq: str, count: int, node: str | None) -> list[Job]:
    if node is None:
        return client.qpeek(dq, count)
    return parse_jobs(client.execute_on(node, "QPEEK", dq, count))


def list_dead(client: Disque, queue: str, count: int = 100, *,
              pattern: str = DEFAULT_DLQ, cluster: bool = False) -> list[DeadLetter]:
    """Up to ``count`` dead letters of ``queue``, oldest first, without consuming them:
    from the client's current node, or (``cluster=True``) from every node HELLO lists,
    up to ``count`` from each, oldest first overall."""
    dq = dead_queue_name(queue, pattern)
    nodes: list[str | None] = [None]
    if cluster:
        nodes = list(node_addresses(client))
    out = []
    for node in nodes:
        for job in _peek(client, dq, count, node):
            body = job.body.encode("utf-8", "surrogateescape") if isinstance(job.body, str) \
                else job.body
            dl = parse_dead_letter(job.id, dq, body)
            if dl is not None:
                out.append(dl)
    if cluster:
        out.sort(key=lambda d: d.failed_at)
    return out


def requeue_dead(client: Disque, queue: str, ids: Iterable[str] | None = None, *,
                 pattern: str = DEFAULT_DLQ, cluster: bool = False,
                 **add_job_options: Any) -> int:
    """Re-add dead letters' original bodies to their queue and ACK the dead letters.

    ``ids`` selects dead letters by their own ID or by the original job's ID; ``None``
    means all. ``add_job_options`` go to ``add_job`` (``retry=``, ``ttl=``...).
    ``cluster=True`` looks for them on every node (else the current node). Returns
    how many were re-queued.
    """
    want = None if ids is None else set(ids)
    dq = dead_queue_name(queue, pattern)
    n = 0
    total = _dead_total(client, dq, cluster)
    if total == 0:
        return 0
    for dl in list_dead(client, queue, total, pattern=pattern, cluster=cluster):
        if want is not None and dl.id not in want and dl.original_id not in want:
            continue
        client.add_job(dl.queue, dl.body, **add_job_options)
        client.ack(dl.id)
        n += 1
    return n


def delete_dead(client: Disque, queue: str, ids: Iterable[str], *,
                pattern: str = DEFAULT_DLQ) -> int:
    """Delete dead letters of ``queue`` (by their own ID or the original job's ID, on any
    node) for good; returns how many were deleted."""
    want = set(ids)
    total = _dead_total(client, dead_queue_name(queue, pattern), True)
    found = [dl.id for dl in list_dead(client, queue, total, pattern=pattern, cluster=True)
             if dl.id in want or dl.original_id in want] if total else []
    return client.ack(*found) if found else 0


def _dead_total(client: Disque, dq: str, cluster: bool) -> int:
    """Dead letters queued in ``dq``: on the current node, or summed over every node."""
    if not cluster:
        return client.qlen(dq)
    return sum(int(client.execute_on(a, "QLEN", dq)) for a in node_addresses(client))
