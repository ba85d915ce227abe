"""Dead letters: jobs that failed too often, parked in a queue of their own.

The dead-letter queue of queue ``Q`` is ``Q:dead`` by default. A dead letter is a job in
that queue whose body is JSON::

    {"queue": Q, "id": original_job_id,
     "body": <original body as str if UTF-8 else {"base64": "..."}>,
     "error": "<repr of the last exception>", "nacks": n, "additional_deliveries": m,
     "failed_at": <unix ms>}

added with a 7-day TTL. Workers of ``Q`` never consume ``Q:dead``. This module is the
format; :mod:`disquepy.client.deadqueue` lists, re-queues and deletes them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

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
    extra: dict[str, Any]

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
