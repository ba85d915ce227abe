"""Dead letters: jobs that failed too often, parked in a queue of their own.

The dead-letter queue of queue ``Q`` is ``Q:dead`` by default. A dead letter is a job in
that queue whose body is JSON::

    {"queue": Q, "id": original_job_id,
     "body": <original body as str if UTF-8 else {"base64": "..."}>,
     "error": "<repr of the last exception>", "nacks": n, "additional_deliveries": m,
     "failed_at": <unix ms>}

added with a 7-day TTL. Workers of ``Q`` never consume ``Q:dead``. Dead letters are
listed without being consumed (QPEEK: the node's local queue, so ask the node the worker
added them on) and re-queued with :func:`requeue_dead`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..client import Disque
from .envelope import body_from_json, body_to_json

DEFAULT_DLQ = "{queue}:dead"
DEAD_TTL = 7 * 24 * 3600


def dead_queue_name(queue: str, pattern: str = DEFAULT_DLQ) -> str:
    """The dead-letter queue of ``queue`` (``pattern`` has a ``{queue}`` field)."""
    return pattern.format(queue=queue)


def dead_letter_body(queue: str, job_id: str, body: bytes, error: str, nacks: int,
                     additional_deliveries: int, **extra: Any) -> bytes:
    """The JSON body of a dead letter (the format above; ``extra`` keys are added)."""
    d = {"queue": queue, "id": job_id, "body": body_to_json(body), "error": error,
         "nacks": nacks, "additional_deliveries": additional_deliveries,
         "failed_at": int(time.time() * 1000)}
    d.update(extra)
    return json.dumps(d).encode()


@dataclass(slots=True)
class DeadLetter:
    """A dead letter: ``id`` is the dead letter's own job ID (in ``dead_queue``),
    ``original_id`` the failed job's; ``body`` the original body (bytes)."""

    id: str
    dead_queue: str
    queue: str
    original_id: str
    body: bytes
    error: str
    nacks: int
    additional_deliveries: int
    failed_at: int
    extra: dict

    def json(self) -> Any:
        """The original body decoded as JSON."""
        return json.loads(self.body)


def parse_dead_letter(job_id: str, dead_queue: str, raw: bytes) -> DeadLetter | None:
    """A dead letter from its job body, ``None`` if the body is not one."""
    try:
        d = json.loads(raw)
        known = ("queue", "id", "body", "error", "nacks", "additional_deliveries",
                 "failed_at")
        return DeadLetter(job_id, dead_queue, d["queue"], d["id"], body_from_json(d["body"]),
                          d["error"], int(d["nacks"]), int(d["additional_deliveries"]),
                          int(d["failed_at"]),
                          {k: v for k, v in d.items() if k not in known})
    except (ValueError, KeyError, TypeError):
        return None


def _peek(client: Disque, dq: str, count: int, node: str | None) -> list:
    if node is None:
        return client.qpeek(dq, count)
    from ..client._common import parse_jobs

    return parse_jobs(client.execute_on(node, "QPEEK", dq, count))


def list_dead(client: Disque, queue: str, count: int = 100, *,
              pattern: str = DEFAULT_DLQ, cluster: bool = False) -> list[DeadLetter]:
    """Up to ``count`` dead letters of ``queue``, oldest first, without consuming them:
    from the client's current node, or (``cluster=True``) from every node HELLO lists,
    up to ``count`` from each, oldest first overall."""
    dq = dead_queue_name(queue, pattern)
    nodes: list = [None]
    if cluster:
        from ..client.jobstatus import node_addresses

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
    from ..client.jobstatus import node_addresses

    return sum(int(client.execute_on(a, "QLEN", dq)) for a in node_addresses(client))
