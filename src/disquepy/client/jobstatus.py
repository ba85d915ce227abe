"""A job's status and its cancellation, from what the nodes hold today.

:meth:`Disque.status <disquepy.client.Disque.status>` and :meth:`Disque.cancel
<disquepy.client.Disque.cancel>` are the only entry points: the HTTP API, the dashboard
and the CLI call them, so a server-side status command can replace this module's
implementation without changing any caller.

How the status is found now (no node remembers outcomes yet):

- ``SHOW`` on every node the cluster knows (the creating node first). A copy ``acked``
  anywhere: ``completed``. ``queued`` anywhere: ``queued`` (``retrying`` once it was
  nacked or re-delivered). Otherwise ``active`` everywhere: ``scheduled`` while its
  DELAY runs, ``retrying`` if it is a worker's back-off re-add (an envelope with attempt
  > 1) waiting for its delay, else ``in_progress``. ``wait-repl``: ``queued``.
- No node holds it: a dead letter naming it (in the dead-letter queues, see
  :mod:`disquepy.worker.deadletter`) makes it ``failed`` with the error; a cancel made
  through this client makes it ``cancelled``; otherwise, when its creating node answered,
  ``completed`` — the same inference as :meth:`wait_for_ack`: the creating node keeps a
  copy until the job is acknowledged, so "gone" is read as done, although an expired or
  DELJOB'd job looks the same. An ID whose creating node is not known is ``unknown``.

Known gaps until the core keeps outcomes: a job retried by the worker's back-off is
re-added under a new ID (the original then reads ``completed``); ``cancelled`` is
remembered by the cancelling client process only (bounded), not cluster-wide.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import redis.exceptions as rexc

from ._common import fmt_addr, job_node_prefix, parse_show
from .priority import split

if TYPE_CHECKING:  # pragma: no cover
    from .sync import Disque

STATES = ("queued", "scheduled", "in_progress", "retrying", "completed", "failed",
          "cancelled", "unknown")
DEAD_SUFFIX = ":dead"  # the worker's default dead-letter queue pattern, "{queue}:dead"
DEAD_SCAN_LIMIT = 1000  # dead letters looked at per dead-letter queue and node
CANCEL_MEMORY = 10000  # cancelled IDs a client remembers
DELAY_MARGIN_MS = 500  # a delayed job this close to its start is not cancelled


def dead_letters_of(queue: str) -> str | None:
    """The queue whose dead letters ``queue`` holds (``emails`` for ``emails:dead``), or
    ``None`` if ``queue`` is not a dead-letter queue."""
    if queue.endswith(DEAD_SUFFIX) and len(queue) > len(DEAD_SUFFIX):
        return queue[: -len(DEAD_SUFFIX)]
    return None


def valid_id(job_id: str) -> bool:
    """Does ``job_id`` look like a Disque job ID (``D-<8 hex>-<24>-<4>``, 40 chars)?"""
    return (len(job_id) == 40 and job_id.startswith("D-") and job_id[10] == "-"
            and job_id[35] == "-" and all(c in "0123456789abcdef" for c in job_id[2:10]))


@dataclass(slots=True)
class JobStatus:
    """What is known of a job. ``nodes``: addresses holding a copy; ``error`` and
    ``dead_letter_id`` for a failed job; ``detail``: how the status was inferred."""

    job_id: str
    status: str
    queue: str | None = None
    priority: str | None = None
    attempt: int = 0
    nacks: int = 0
    additional_deliveries: int = 0
    created_at: float | None = None  # unix seconds
    ttl: int | None = None
    retry: int | None = None
    delay: int | None = None
    nodes: list[str] = field(default_factory=list)
    error: str | None = None
    dead_letter_id: str | None = None
    finished_at: float | None = None  # unix seconds: when it failed (dead letter)
    detail: str = ""
    body: bytes | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        body = d.pop("body")
        d["payload"] = _payload(body) if body is not None else None
        return d


@dataclass(slots=True)
class CancelResult:
    """``cancelled`` or not, the status after the attempt and why."""

    job_id: str
    cancelled: bool
    status: str
    reason: str = ""
    nodes: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    queue: str | None = None
    priority: str | None = None


def _payload(body: bytes) -> Any:
    from ..worker.envelope import unwrap  # the worker's envelope: show the user's body

    raw = unwrap(body).body
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _attempt(body: bytes | None) -> int:
    if body is None:
        return 1
    from ..worker.envelope import unwrap

    return unwrap(body).attempt


# ---------------------------------------------------------------------------- gathering


def node_addresses(client: Disque) -> list[str]:
    """Every node the cluster knows (HELLO), as ``host:port``; the seeds if HELLO fails."""
    try:
        return [n.address for n in client.hello().nodes if n.host]
    except rexc.RedisError:
        return [fmt_addr(a) for a in client.topology.seeds]


def _ordered_nodes(client: Disque, job_id: str) -> list[str]:
    nodes = node_addresses(client)
    owner = client.topology.address_of(job_node_prefix(job_id))
    if owner is not None and fmt_addr(owner) in nodes:
        nodes.remove(fmt_addr(owner))
        nodes.insert(0, fmt_addr(owner))
    return nodes


def _shows(client: Disque, job_id: str) -> tuple[dict[str, dict], list[str]]:
    """SHOW on every node: ({address: fields} of the copies, unreachable addresses)."""
    copies: dict[str, dict] = {}
    down: list[str] = []
    for addr in _ordered_nodes(client, job_id):
        try:
            s = parse_show(client.execute_on(addr, "SHOW", job_id))
        except rexc.RedisError:
            down.append(addr)
            continue
        if s is not None:
            copies[addr] = s
    return copies, down


def find_dead_letter(client: Disque, job_id: str, queue: str | None = None):
    """The dead letter of ``job_id`` (:class:`~disquepy.worker.deadletter.DeadLetter`) on
    any node, looking in ``queue``'s dead-letter queue (every ``*:dead`` queue if
    ``None``); ``None`` if there is none."""
    from ..worker.deadletter import parse_dead_letter

    for addr in node_addresses(client):
        try:
            if queue is not None:  # a priority worker uses the logical queue's
                dqs = dict.fromkeys([split(queue)[0] + DEAD_SUFFIX, queue + DEAD_SUFFIX])
            else:
                dqs = [q for q in node_queues(client, addr) if q.endswith(DEAD_SUFFIX)]
            for dq in dqs:
                for item in client.execute_on(addr, "QPEEK", dq, DEAD_SCAN_LIMIT) or []:
                    dl = parse_dead_letter(item[1].decode("ascii", "replace"), dq, item[2])
                    if dl is not None and (dl.original_id == job_id or dl.id == job_id):
                        return dl
        except rexc.RedisError:
            continue
    return None


def node_queues(client: Disque, addr: str) -> list[str]:
    """Every queue of one node (QSCAN's cursor loop there), sorted, without repeats."""
    out: list[str] = []
    cursor = 0
    for _ in range(10000):  # bounded: QSCAN returns 0 when done
        reply = client.execute_on(addr, "QSCAN", cursor, "COUNT", 1000)
        cursor = int(reply[0])
        out.extend(q.decode("utf-8", "surrogateescape") for q in reply[1])
        if cursor == 0:
            break
    return sorted(set(out))


# ---------------------------------------------------------------------------- status


def _from_copies(job_id: str, copies: dict[str, dict], now_ms: int) -> JobStatus:
    states = {s["state"] for s in copies.values()}
    # the copy that says most: acked, then queued, then any other
    best = next((s for s in copies.values() if s["state"] == "acked"), None) \
        or next((s for s in copies.values() if s["state"] == "queued"), None) \
        or next(iter(copies.values()))
    body = next((s["body"] for s in copies.values() if s.get("body") is not None), None)
    queue = next((s["queue"] for s in copies.values() if s.get("queue")), None)
    nacks = max(int(s.get("nacks") or 0) for s in copies.values())
    adeliv = max(int(s.get("additional-deliveries") or 0) for s in copies.values())
    attempt = _attempt(body)
    ctime_ms = int(best.get("ctime") or 0) // 1_000_000
    delay = int(best.get("delay") or 0)
    if "acked" in states:
        status, detail = "completed", "acknowledged"
    elif "queued" in states:
        again = nacks or adeliv
        status = "retrying" if again else "queued"
        detail = "queued again after a failure or a timeout" if again else "waiting for a worker"
    elif states == {"wait-repl"}:
        status, detail = "queued", "being replicated"
    elif delay and now_ms < ctime_ms + delay * 1000:
        status = "retrying" if attempt > 1 else "scheduled"
        detail = f"delayed: starts in {(ctime_ms + delay * 1000 - now_ms) / 1000:.0f} s"
    else:
        status, detail = "in_progress", "delivered to a worker"
    logical, prio = split(queue) if queue else (None, None)
    return JobStatus(job_id, status, logical, prio, attempt + nacks + adeliv, nacks, adeliv,
                     ctime_ms / 1000 if ctime_ms else None, best.get("ttl"), best.get("retry"),
                     delay, sorted(copies), detail=detail, body=body)


def job_status(client: Disque, job_id: str) -> JobStatus:
    """See the module's docstring: the status of ``job_id`` from SHOW on every node, the
    dead-letter queues and this client's cancellations."""
    copies, down = _shows(client, job_id)
    if copies:
        st = _from_copies(job_id, copies, int(time.time() * 1000))
        if st.status == "completed":  # a dead-lettered job was acked by the worker
            dl = find_dead_letter(client, job_id, st.queue)
            if dl is not None:
                _failed(st, dl)
        return st
    cancelled = client._cancelled.get(job_id)
    if cancelled is not None:
        return JobStatus(job_id, "cancelled", cancelled[0], cancelled[1],
                         detail="cancelled through this client")
    dl = find_dead_letter(client, job_id)
    if dl is not None:
        logical, prio = split(dl.queue)
        st = JobStatus(job_id, "failed", logical, prio, body=dl.body)
        _failed(st, dl)
        return st
    owner = client.topology.address_of(job_node_prefix(job_id))
    if owner is not None and fmt_addr(owner) not in down:
        return JobStatus(job_id, "completed",
                         detail="no node holds it any more: acknowledged (or expired or "
                                "deleted: the nodes do not keep outcomes yet)")
    why = ("its creating node is unreachable" if owner is not None
           else "no known node created it")
    return JobStatus(job_id, "unknown", detail=f"no node holds this job and {why}")


def _failed(st: JobStatus, dl) -> None:
    st.status = "failed"
    st.error = dl.error
    st.dead_letter_id = dl.id
    st.finished_at = dl.failed_at / 1000
    st.attempt = int(dl.extra.get("attempts") or st.attempt or 1)
    st.nacks = dl.nacks
    st.additional_deliveries = dl.additional_deliveries
    st.detail = "moved to the dead letters after its last attempt failed"


# ---------------------------------------------------------------------------- cancel


def cancel_job(client: Disque, job_id: str) -> CancelResult:
    """Cancel a queued, scheduled or retrying job: DEQUEUE it on every node holding a
    copy, then DELJOB every copy. A job a worker already holds, or one that ended, is not
    cancelled (``reason`` says why).

    Not cluster-safe yet: a node holding a copy that cannot be reached keeps it and may
    queue it again after its RETRY (``unreachable`` lists such nodes: try again once it
    is back), and a worker can take the job on a node between the check and the DEQUEUE
    there (the job is then reported in progress and not deleted).
    """
    copies, down = _shows(client, job_id)
    if not copies:
        st = job_status(client, job_id)
        if st.status == "cancelled":  # cancelling twice is not an error
            return CancelResult(job_id, True, "cancelled", "already cancelled", [], down,
                                st.queue, st.priority)
        return CancelResult(job_id, False, st.status,
                            "the job is not held by any node: " + (st.detail or st.status),
                            [], down)
    now_ms = int(time.time() * 1000)
    st = _from_copies(job_id, copies, now_ms)
    if st.status in ("completed", "in_progress"):
        return CancelResult(job_id, False, st.status,
                            f"the job is {st.status.replace('_', ' ')}: only queued, "
                            "scheduled or retrying jobs can be cancelled", sorted(copies), down)
    dequeued = 0
    for addr in copies:
        try:
            dequeued += int(client.execute_on(addr, "DEQUEUE", job_id))
        except rexc.RedisError:
            down.append(addr)
    if not dequeued:
        # nothing was queued: fine for a job still in its delay, else a worker took it
        ctime_ms = int(st.created_at * 1000) if st.created_at else 0
        still_delayed = st.delay and now_ms + DELAY_MARGIN_MS < ctime_ms + st.delay * 1000
        if not still_delayed:
            return CancelResult(job_id, False, "in_progress",
                                "a worker took the job before it could be cancelled",
                                sorted(copies), down)
    for addr in copies:
        try:
            client.execute_on(addr, "DELJOB", job_id)
        except rexc.RedisError:
            down.append(addr)
    mem = client._cancelled
    mem[job_id] = (st.queue, st.priority)
    while len(mem) > CANCEL_MEMORY:
        mem.popitem(last=False)
    reason = "" if not down else ("copies on unreachable nodes may come back: "
                                  + ", ".join(sorted(set(down))))
    return CancelResult(job_id, True, "cancelled", reason, sorted(copies), sorted(set(down)),
                        st.queue, st.priority)


def new_cancel_memory() -> OrderedDict:
    return OrderedDict()
