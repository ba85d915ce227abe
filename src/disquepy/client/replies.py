"""Replies parsed into Python values: jobs, events, SHOW, QSTATUS, INFO and the rest.
Nothing here does I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def job_node_prefix(job_id: str | bytes) -> str:
    """``D-dcb833cf-...`` -> ``dcb833cf``: who created the job."""
    if isinstance(job_id, bytes):
        job_id = job_id.decode("ascii", "replace")
    return job_id[2:10]


@dataclass(slots=True)
class Job:
    """A job as GETJOB or QPEEK return it.

    ``nacks`` and ``additional_deliveries`` are set when asked for
    (``get_jobs(..., with_counters=True)``), ``None`` otherwise. ``body`` is ``bytes``
    (``str`` when the client was made with ``decode_bodies=True``).
    """

    id: str
    queue: str
    body: bytes
    nacks: int | None = None
    additional_deliveries: int | None = None

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)

    @property
    def node_prefix(self) -> str:
        """The first 8 hex digits of the ID of the node that created the job."""
        return job_node_prefix(self.id)


def _s(v: Any) -> Any:
    """bytes -> str (round-trippable for non-UTF-8), lists recursively, others as is."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    if isinstance(v, list):
        return [_s(x) for x in v]
    return v


def parse_jobs(reply: Any, decode_bodies: bool = False) -> list[Job]:
    """GETJOB / QPEEK replies: nil or a list of [queue, id, body, (counters)]."""
    if not reply:
        return []
    out = []
    for item in reply:
        body = item[2]
        if decode_bodies:
            body = body.decode("utf-8", "surrogateescape")
        if len(item) >= 7:
            out.append(Job(item[1].decode("ascii", "replace"),
                           item[0].decode("utf-8", "surrogateescape"), body,
                           int(item[4]), int(item[6])))
        else:
            out.append(Job(item[1].decode("ascii", "replace"),
                           item[0].decode("utf-8", "surrogateescape"), body))
    return out


@dataclass(slots=True)
class Event:
    """An event of a consumer group's queue, as ``qget`` and ``qdead`` return it.

    ``deliveries`` (1 on the first delivery to the group) is set when asked for
    (``qget(..., with_counters=True)``) and by ``qdead``; ``None`` otherwise."""

    id: str
    queue: str
    body: bytes
    deliveries: int | None = None

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


def parse_event(reply: Any, queue: str, decode_bodies: bool = False) -> Event | None:
    """QGET / QDEAD entries: nil or [id, contents(, deliveries)]."""
    if not reply:
        return None
    body = reply[1].decode("utf-8", "surrogateescape") if decode_bodies else reply[1]
    return Event(reply[0].decode("ascii", "replace"), queue, body,
                 int(reply[2]) if len(reply) > 2 else None)


def parse_qstatus(reply: Any) -> dict[str, dict[str, dict[str, int]]]:
    """QSTATUS: {queue: {group: {field: int}}} (bananaq's fields, then disquepy's)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for name, per in reply or []:
        groups = {}
        for g, stats in zip(per[::2], per[1::2], strict=True):
            groups[g.decode("utf-8", "surrogateescape")] = {
                k.decode(): int(v) for k, v in zip(stats[::2], stats[1::2], strict=True)}
        out[name.decode("utf-8", "surrogateescape")] = groups
    return out


def parse_show(reply: Any) -> dict[str, Any] | None:
    """SHOW / JSCAN REPLY all: flat key-value list -> dict (``body`` stays bytes)."""
    if reply is None:
        return None
    out: dict[str, Any] = {}
    it = iter(reply)
    for k, v in zip(it, it, strict=True):
        key = k.decode("utf-8", "replace")
        out[key] = v if key == "body" else _s(v)
    return out


def parse_kv(reply: Any) -> dict[str, str | None] | None:
    """QSTAT and similar flat key-value replies, keys and values as str."""
    if reply is None:
        return None
    it = iter(reply)
    return {k.decode("utf-8", "replace"): _s(v) for k, v in zip(it, it, strict=True)}


def _num(v: str) -> Any:
    try:
        n = int(v)
    except ValueError:
        pass
    else:
        return n if str(n) == v else v
    try:
        return float(v)
    except ValueError:
        return v


def parse_info(reply: Any) -> dict[str, Any]:
    """INFO text -> flat dict (numbers converted); redis-py may have parsed it already."""
    if isinstance(reply, dict):
        return reply
    if isinstance(reply, bytes):
        reply = reply.decode("utf-8", "replace")
    out: dict[str, Any] = {}
    for line in reply.splitlines():
        if not line or line.startswith("#"):
            continue
        k, sep, v = line.partition(":")
        if sep:
            out[k] = _num(v)
    return out


def parse_int(reply: Any) -> int:
    return int(reply)


def parse_str(reply: Any) -> str:
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "surrogateescape")
    return reply if isinstance(reply, str) else str(reply)


def parse_id(reply: Any) -> str:
    return reply.decode("ascii") if isinstance(reply, bytes) else reply


def parse_ping(reply: Any) -> bool:
    return reply is True or reply in (b"PONG", "PONG")

