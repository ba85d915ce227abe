"""Paging through jobs: JSCAN on every node in turn, with a cursor the API hands out.

The API's cursor is ``"<node index>:<JSCAN cursor>"`` (``"0"`` starts, ``"0"`` comes back
at the end). A page asks one node's JSCAN until it has ``count`` jobs or that node is done,
then moves on to the next node, so a page costs a few round trips however many jobs the
nodes hold (JSCAN visits a bounded number of partitions per call). A job replicated on
several nodes is listed once, by the node that created it (its ID prefix), except in the
``queued`` state, which only the node queueing it reports.
"""

from __future__ import annotations

import time
from typing import Any

import redis.exceptions as rexc

from ..client import Disque
from ..client.jobstatus import dead_letters_of, node_addresses
from ..client.priority import queue_for, split
from ..client.replies import parse_show
from .cluster import NodesDown

ROUNDS = 64  # JSCAN calls per page at most
PREVIEW = 200  # characters of a payload shown in a listing


def _preview(body: bytes | None) -> str:
    if body is None:
        return ""
    from ..client.envelope import unwrap

    text = unwrap(body).body.decode("utf-8", "replace")
    return text if len(text) <= PREVIEW else text[:PREVIEW] + "…"


def summary(s: dict[str, Any], now: float) -> dict[str, Any]:
    logical, prio = split(s.get("queue") or "")
    ctime = int(s.get("ctime") or 0) / 1e9
    return {"job_id": s["id"], "queue": logical, "priority": prio, "state": s["state"],
            "age": round(max(0.0, now - ctime), 3) if ctime else None,
            "nacks": s.get("nacks"), "additional_deliveries": s.get("additional-deliveries"),
            "ttl": s.get("ttl"), "payload_preview": _preview(s.get("body"))}


def list_jobs(client: Disque, state: str | None, queue: str | None, priority: str | None,
              cursor: str, count: int) -> dict[str, Any]:
    nodes = node_addresses(client)
    idx, _, c = cursor.partition(":")
    node_i, jcursor = int(idx), int(c or 0)
    args_tail: list[Any] = ["COUNT", count, "REPLY", "all"]
    if state is not None:
        args_tail += ["STATE", state]
    if queue is not None and priority is not None:
        args_tail += ["QUEUE", queue_for(queue, priority)]
    out: list[dict[str, Any]] = []
    now = time.time()
    rounds = 0
    ids: dict[str, str] = {}
    down: list[str] = []
    errors: dict[str, str] = {}
    while node_i < len(nodes) and len(out) < count and rounds < ROUNDS:
        addr = nodes[node_i]
        rounds += 1
        try:
            if addr not in ids:
                ids[addr] = client.execute_on(addr, "HELLO")[1].decode()
            reply = client.execute_on(addr, "JSCAN", jcursor, *args_tail)
        except rexc.RedisError as e:  # a node down: its jobs are skipped this time
            down.append(addr)
            errors[addr] = str(e) or type(e).__name__
            node_i, jcursor = node_i + 1, 0
            continue
        hello_id = ids[addr]
        jcursor = int(reply[0])
        for item in reply[1]:
            s = parse_show(item)
            if s is None:  # (JSCAN REPLY all lists a job's fields)
                continue
            if state != "queued" and s["id"][2:10] != hello_id[:8]:
                continue  # a replica's copy: listed by the node that created it
            if queue is not None and priority is None and split(s.get("queue") or "")[0] != queue:
                continue
            if queue is None and dead_letters_of(s.get("queue") or "") is not None:
                continue  # dead letters have their own view (/queues/{name}/dead-letters)
            out.append(summary(s, now))
        if jcursor == 0:
            node_i += 1
    if down and len(down) == len(nodes):
        raise NodesDown.of([{"address": a, "error": errors[a]} for a in down])
    done = node_i >= len(nodes)
    return {"jobs": out, "next_cursor": "0" if done else f"{node_i}:{jcursor}",
            "nodes": len(nodes), "unreachable": down}
