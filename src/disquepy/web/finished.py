"""Recently finished jobs: the nodes' outcome stores (JOBOUTCOMES), the last finished
first, merged over the cluster and paged on the server.

Every node that held a copy of a job records its outcome, so each job is listed by the
node that created it (the node prefix of its ID), or, while that node does not answer,
by the nodes that answer (once per page). The API's cursor holds one JOBOUTCOMES cursor
per node (``"0"`` starts, ``"0"`` comes back when every node is done): a page asks each
node for up to ``count`` outcomes after its cursor, merges them by finishing time and
keeps ``count``; each node's cursor moves past the outcomes of it the page took.
"""

from __future__ import annotations

import heapq
from typing import Any

import redis.exceptions as rexc

from ..client import Disque
from ..client.jobstatus import json_or_text, node_addresses
from ..client.priority import levels, split
from .cluster import NodesDown

STATES = ("completed", "failed", "cancelled", "expired")
DONE = "x"  # a node's cursor once its store has no older outcome


def _fields(item: list[Any]) -> dict[str, Any]:
    return {k.decode(): v for k, v in zip(item[::2], item[1::2], strict=True)}


def _entry(f: dict[str, Any], addr: str) -> dict[str, Any]:
    queue = f["queue"].decode("utf-8", "replace")
    logical, prio = split(queue)
    state = f["state"].decode()
    detail = json_or_text(f.get("detail"))
    return {"job_id": f["id"].decode(), "status": state, "queue": logical,
            "priority": prio, "attempts": f["attempts"],
            "created_at": f["created"] / 1000 if f["created"] else None,
            "finished_at": f["finished"] / 1000,
            "error": detail if state == "failed" else None,
            "result": detail if state == "completed" else None, "node": addr}


def parse_cursor(cursor: str, n: int) -> list[str]:
    """The API's cursor as one JOBOUTCOMES cursor per node (ValueError if malformed)."""
    if cursor == "0":
        return ["0"] * n
    parts = cursor.split(".")
    if len(parts) != n or not all(p == DONE or p.isdigit() for p in parts):
        raise ValueError("cursor does not fit the cluster: start again with 0")
    return parts


def list_finished(client: Disque, statuses: list[str], queue: str | None, cursor: str,
                  count: int) -> dict[str, Any]:
    nodes = node_addresses(client)
    cursors = parse_cursor(cursor, len(nodes))
    filters: list[Any] = []
    for s in statuses:
        filters += ["STATUS", s]
    if queue is not None:
        for _, q in levels(queue):
            filters += ["QUEUE", q]
    # each node's page (kept outcomes, its next cursor) and its ID
    pages: dict[int, tuple[list[tuple[dict[str, Any], str]], str]] = {}
    ids: dict[int, str] = {}
    down: list[str] = []
    errors: dict[str, str] = {}
    for i, addr in enumerate(nodes):
        try:
            ids[i] = client.execute_on(addr, "HELLO")[1].decode()
            if cursors[i] == DONE:
                continue
            nxt, items = client.execute_on(addr, "JOBOUTCOMES", cursors[i], "COUNT", count,
                                           *filters)
        except rexc.RedisError as e:
            down.append(addr)
            errors[addr] = str(e) or type(e).__name__
            continue
        fields = [_fields(x) for x in items]
        pages[i] = ([(f, f["cursor"].decode()) for f in fields], nxt.decode())
    if len(down) == len(nodes):
        raise NodesDown.of([{"address": a, "error": errors[a]} for a in down])
    up = {ids[i][:8] for i in ids}
    for i, (items, nxt) in pages.items():  # the creating node lists a job, if it answers
        mine = ids[i][:8]
        pages[i] = ([(f, c) for f, c in items
                     if f["id"][2:10].decode() == mine or f["id"][2:10].decode() not in up],
                    nxt)
    # merge by finishing time, newest first, taking a prefix of each node's outcomes; a
    # node whose page ended before its store did stops the merge (its next outcome may
    # be newer than the others' left)
    heap = [(-items[0][0]["finished"], i, 0) for i, (items, _) in pages.items() if items]
    heapq.heapify(heap)
    taken: dict[int, int] = {}
    out: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    stop = False
    while heap and len(out) < count and not stop:
        _, i, k = heapq.heappop(heap)
        items, nxt = pages[i]
        f = items[k][0]
        taken[i] = k + 1
        if f["id"] not in seen:
            seen.add(f["id"])
            out.append(_entry(f, nodes[i]))
        if k + 1 < len(items):
            heapq.heappush(heap, (-items[k + 1][0]["finished"], i, k + 1))
        elif nxt != "0":
            stop = True  # this node has more: the next page goes on from here
    for i, (items, nxt) in pages.items():
        k = taken.get(i, 0)
        if k == len(items):  # everything it sent was taken (or it sent none): past it
            cursors[i] = DONE if nxt == "0" else nxt
        elif k:
            cursors[i] = items[k - 1][1]
    done = all(c == DONE for c in cursors)
    return {"jobs": out, "next_cursor": "0" if done else ".".join(cursors),
            "nodes": len(nodes), "unreachable": down}
