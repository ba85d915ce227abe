"""The envelope of a job re-added for a later attempt: the original body plus its attempt
number, as JSON (``{"_disquepy": {"attempt": n, "first_id": id}, "body": ...}``).

A producer may also send a job in an envelope to give it its own retry policy
(``"policy": {"max_attempts": 3, "strategy": "exponential", "base": 1, "cap": 60}``; the
HTTP API does this for ``POST /jobs`` with a ``retry`` object): the worker then uses it
instead of its queue's back-off and dead-letter settings, and keeps it on re-adds."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

PREFIX = b'{"_disquepy":'


def body_to_json(body: bytes) -> str | dict:
    """A body as JSON: the text if it is UTF-8, else ``{"base64": ...}``."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(body).decode("ascii")}


def body_from_json(v: str | dict) -> bytes:
    if isinstance(v, dict):
        return base64.b64decode(v["base64"])
    return v.encode("utf-8")


@dataclass(slots=True)
class Envelope:
    """What the worker reads from a job: the user's body and which attempt this is."""

    body: bytes
    attempt: int = 1
    first_id: str | None = None
    policy: dict | None = None


def wrap(body: bytes, attempt: int, first_id: str | None, policy: dict | None = None) -> bytes:
    meta: dict = {"attempt": attempt, "first_id": first_id}
    if policy is not None:
        meta["policy"] = policy
    return json.dumps({"_disquepy": meta, "body": body_to_json(body)},
                      separators=(",", ":")).encode()


def unwrap(raw: bytes) -> Envelope:
    """The envelope of ``raw`` (a plain body is attempt 1 of itself)."""
    if raw.startswith(PREFIX):
        try:
            d = json.loads(raw)
            meta = d["_disquepy"]
            policy = meta.get("policy")
            return Envelope(body_from_json(d["body"]), int(meta["attempt"]),
                            meta.get("first_id"), policy if isinstance(policy, dict) else None)
        except (ValueError, KeyError, TypeError):
            pass
    return Envelope(raw)
