"""The workers connected to each node: ``CLIENT LIST`` on every node, the connections a
worker named (``CLIENT SETNAME`` in :mod:`disquepy.client.workerinfo`'s format)."""

from __future__ import annotations

from typing import Any

import redis.exceptions as rexc

from ..client import Disque
from ..client.jobstatus import node_addresses
from ..client.workerinfo import parse_name
from .cluster import NodesDown


def parse_client_list(text: str) -> list[dict[str, str]]:
    """CLIENT LIST's lines as dicts (``key=value`` fields; a name has no spaces)."""
    out = []
    for line in text.splitlines():
        if line.strip():
            out.append(dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv))
    return out


def list_workers(client: Disque) -> dict[str, Any]:
    """Per node: its workers (one entry per worker process, however many connections it
    holds there: the freshest counts), and whether the node answered."""
    nodes: list[dict[str, Any]] = []
    for addr in node_addresses(client):
        try:
            raw = client.execute_on(addr, "CLIENT", "LIST")
        except rexc.RedisError as err:
            nodes.append({"address": addr, "state": "down", "error": str(err), "workers": []})
            continue
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        found: dict[tuple[str, int], dict[str, Any]] = {}
        for c in parse_client_list(text):
            w = parse_name(c.get("name", ""))
            if w is None:
                continue
            age, idle = int(c.get("age", 0)), int(c.get("idle", 0))
            e = found.get((w.host, w.pid))
            if e is None:
                e = found[(w.host, w.pid)] = {
                    "host": w.host, "pid": w.pid, "queues": list(w.queues),
                    "concurrency": w.concurrency, "done": w.done, "failed": w.failed,
                    "started_at": w.started or None, "connected_for": age,
                    "last_seen": idle, "connections": 0, "addresses": []}
            e["connections"] += 1
            e["addresses"].append(c.get("addr", ""))
            e["connected_for"] = max(e["connected_for"], age)
            e["last_seen"] = min(e["last_seen"], idle)
            e["done"], e["failed"] = max(e["done"], w.done), max(e["failed"], w.failed)
        workers = sorted(found.values(), key=lambda e: (e["host"], e["pid"]))
        nodes.append({"address": addr, "state": "up", "workers": workers})
    if nodes and all(n["state"] == "down" for n in nodes):
        raise NodesDown.of(nodes)
    total = sum(len(n["workers"]) for n in nodes)
    return {"nodes": nodes, "workers": total}
