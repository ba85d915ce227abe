"""What a worker tells the nodes about itself: its connection's name (``CLIENT SETNAME``),
read back from ``CLIENT LIST`` by the dashboard's workers view.

A name has no spaces (Redis refuses them), so the fields are ``key=value`` pairs joined
by ``|`` after a version tag, values percent-encoded::

    dqw1|host=web-1|pid=4242|queues=emails,reports|concurrency=4|done=1532|failed=3|started=1764300000

``queues`` are the logical queues the worker serves (comma separated), ``done`` and
``failed`` the jobs it finished since ``started`` (unix seconds). A worker sets the name
when it connects and again as its counters change (on its heartbeat), so a node's
``CLIENT LIST`` shows each worker's latest counts, and its ``age``/``idle`` fields say how
long it has been connected and when it was last heard from.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

TAG = "dqw1"
_SAFE = "@:/.-_~,"  # left as they are in values; everything else is percent-encoded


@dataclass(slots=True, frozen=True)
class WorkerInfo:
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    done: int = 0
    failed: int = 0
    started: int = 0  # unix seconds

    def name(self) -> str:
        """The connection name that says all this (``CLIENT SETNAME``)."""
        fields = {"host": self.host, "pid": self.pid,
                  "queues": ",".join(quote(q, safe="@:/.-_~") for q in self.queues),
                  "concurrency": self.concurrency, "done": self.done, "failed": self.failed,
                  "started": self.started}
        return "|".join([TAG, *(f"{k}={v if k == 'queues' else quote(str(v), safe=_SAFE)}"
                                for k, v in fields.items())])


def parse_name(name: str) -> WorkerInfo | None:
    """The worker a connection name describes; ``None`` when the name is not a worker's
    (another client's name, or a malformed one)."""
    head, _, rest = name.partition("|")
    if head != TAG:
        return None
    try:
        d = dict(kv.split("=", 1) for kv in rest.split("|"))
        return WorkerInfo(unquote(d["host"]), int(d["pid"]),
                          tuple(unquote(q) for q in d["queues"].split(",") if q),
                          int(d["concurrency"]), int(d.get("done", 0)),
                          int(d.get("failed", 0)), int(d.get("started", 0)))
    except (KeyError, ValueError):
        return None
