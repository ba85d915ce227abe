"""A job's status and its cancellation, from what the nodes hold today.

:meth:`Disque.status <disquepy.client.Disque.status>` and :meth:`Disque.cancel
<disquepy.client.Disque.cancel>` are the only entry points: the HTTP API, the dashboard
and the CLI call them, so a server-side status command can replace this module's
implementation without changing any caller.

The nodes answer: JOBSTATUS on each (a job's state while it lives, its outcome for
``job-outcome-retention`` seconds after, on every node that held a copy) and CANCEL on
the node that queues it (the server's ``commands/status.py``). A failed job's dead
letter (the worker's ``*:dead`` queues) is looked up for its ID.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import redis.exceptions as rexc

from ._common import fmt_addr, job_node_prefix, parse_show, wait_backoff
from .priority import split

if TYPE_CHECKING:  # pragma: no cover
    from .sync import Disque

STATES = ("queued", "scheduled", "in_progress", "retrying", "completed", "failed",
          "cancelled", "expired", "unknown")
DEAD_SUFFIX = ":dead"  # the worker's default dead-letter queue pattern, "{queue}:dead"
DEAD_SCAN_LIMIT = 1000  # dead letters looked at per dead-letter queue and node


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
    ``dead_letter_id`` for a failed job; ``result``: what the worker sent with its ack
    (``ACKJOB ... RESULT``, JSON decoded when it is JSON) for a completed one;
    ``detail``: how the status was inferred."""

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
    finished_at: float | None = None  # unix seconds: when it ended
    detail: str = ""
    body: bytes | None = None
    result: Any = None

    @property
    def finished(self) -> bool:
        """Has the job ended (completed, failed, cancelled or expired)?"""
        return self.status in FINAL

    @property
    def ok(self) -> bool:
        """Did the job complete (acknowledged by a worker)?"""
        return self.status == "completed"

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

FINAL = ("failed", "cancelled", "completed", "expired")  # which one wins if copies differ
LIVE = ("in_progress", "retrying", "queued", "scheduled")  # a copy that knows more first


def _statuses(client: Disque, job_id: str) -> tuple[dict[str, dict], list[str]]:
    """JOBSTATUS on every node, the creating node first: ({address: fields} of the nodes
    that know the job, unreachable addresses)."""
    known: dict[str, dict] = {}
    down: list[str] = []
    for addr in _ordered_nodes(client, job_id):
        try:
            r = client.execute_on(addr, "JOBSTATUS", job_id)
        except rexc.ResponseError:  # NOJOB: this node knows nothing of it
            continue
        except rexc.RedisError:
            down.append(addr)
            continue
        known[addr] = {k.decode(): v for k, v in zip(r[::2], r[1::2], strict=True)}
    return known, down


def _text(v: Any) -> str | None:
    return None if v is None else v.decode("utf-8", "replace")


def _result(v: bytes | None) -> Any:
    if not v:
        return None
    try:
        return json.loads(v)
    except ValueError:
        return v.decode("utf-8", "replace")


def status_from(job_id: str, known: dict[str, dict]) -> tuple[JobStatus, str]:
    """The status told by the JOBSTATUS answers in ``known`` ({address: fields}, at least
    one): an outcome on any node wins (failed, cancelled, completed, expired), else the
    copy that knows most (in progress, retrying, queued, scheduled); copies that only
    hold it (``active``) mean a worker has it on a node that did not answer, or it is
    queued there. No dead-letter lookup, no body (see :func:`job_status`). Returns the
    status and the address of the node whose answer it is."""
    states = {f["state"].decode(): addr for addr, f in known.items()}
    status = next((s for s in FINAL if s in states), None) \
        or next((s for s in LIVE if s in states), "in_progress")
    addr = states.get(status) or next(iter(known))
    f = known[addr]
    queue = _text(f.get("queue"))
    logical, prio = split(queue) if queue else (None, None)
    created = f.get("created")
    finished = f.get("finished")
    nacks, adeliv = int(f.get("nacks") or 0), int(f.get("additional-deliveries") or 0)
    # the attempt running or coming (1 for a new job); a finished job's last one
    attempt = 1 + nacks + adeliv if f.get("finished") is None \
        else max(1, int(f.get("attempts") or 0))
    st = JobStatus(job_id, status, logical, prio, attempt, nacks, adeliv,
                   created / 1000 if created else None, nodes=sorted(known),
                   finished_at=finished / 1000 if finished else None,
                   detail=f"reported by {addr}")
    if status == "failed":
        st.error = _text(f.get("detail"))
    elif status == "completed":
        st.result = _result(f.get("detail"))
    return st, addr


def job_status(client: Disque, job_id: str) -> JobStatus:
    """The status of ``job_id`` from JOBSTATUS on every node (see the server's
    ``commands/status.py`` and :func:`status_from`), with a failed job's dead letter
    and a live job's body, TTL, retry and delay."""
    known, down = _statuses(client, job_id)
    if not known:
        owner = client.topology.address_of(job_node_prefix(job_id))
        why = ("its creating node is unreachable" if owner is not None and fmt_addr(owner)
               in down else "no node knows it (never created, or its outcome's "
               "retention ended)")
        return JobStatus(job_id, "unknown", detail=why)
    st, addr = status_from(job_id, known)
    status, queue = st.status, _text(known[addr].get("queue"))
    if status == "failed":
        dl = find_dead_letter(client, job_id, queue)
        if dl is not None:
            st.dead_letter_id = dl.id
    if status in LIVE or status == "in_progress":
        try:
            s = parse_show(client.execute_on(addr, "SHOW", job_id))
        except rexc.RedisError:
            s = None
        if s is not None:
            st.body, st.ttl, st.retry, st.delay = (s.get("body"), s.get("ttl"),
                                                   s.get("retry"), s.get("delay"))
    return st


# ---------------------------------------------------------------------------- wait


def _fields(r: list) -> dict:
    return {k.decode(): v for k, v in zip(r[::2], r[1::2], strict=True)}


def wait_job(client: Disque, job_id: str, timeout: float) -> JobStatus:
    """Wait until ``job_id`` ends (completed, failed, cancelled or expired) or
    ``timeout`` seconds pass; its :func:`job_status` then (at the timeout: its status
    then, ``queued``, ``in_progress``, ... or ``unknown``).

    Polls JOBSTATUS on the node that created the job (every copy records the outcome,
    that one too) with back-off from 5 ms to 250 ms; when that node is unreachable or
    knows nothing of the job, asks every node."""
    deadline = time.monotonic() + timeout
    prefix = job_node_prefix(job_id)
    for attempt in range(1_000_000):  # bounded by the deadline long before this
        owner = client.topology.address_of(prefix)
        ended = False
        try:
            if owner is None:
                raise rexc.ConnectionError("creating node unknown")
            f = _fields(client.execute_on(fmt_addr(owner), "JOBSTATUS", job_id))
            ended = f["state"].decode() in FINAL
        except rexc.ResponseError:  # NOJOB: never created, or retention 0
            ended = job_status(client, job_id).status in FINAL
        except rexc.RedisError:  # the creating node is down: the copies may know
            ended = job_status(client, job_id).status in FINAL
        left = deadline - time.monotonic()
        if ended or left <= 0:
            break
        time.sleep(min(wait_backoff(attempt), left))
    return job_status(client, job_id)


# ---------------------------------------------------------------------------- cancel


def cancel_job(client: Disque, job_id: str) -> CancelResult:
    """Cancel a queued, scheduled or retrying job with the server's CANCEL, on the node
    that queues it (it ends as ``cancelled`` on every copy). A job a worker holds, or one
    that ended, is not cancelled, and ``reason`` says why (the node's own words)."""
    known, down = _statuses(client, job_id)
    reason = ""
    for addr, f in known.items():
        if f["state"] == b"active":  # a copy: the job is queued or worked on elsewhere
            continue
        try:
            client.execute_on(addr, "CANCEL", job_id)
        except rexc.ResponseError as e:
            reason = str(e)
            continue
        except rexc.RedisError:
            down.append(addr)
            continue
        queue = _text(f.get("queue"))
        logical, prio = split(queue) if queue else (None, None)
        return CancelResult(job_id, True, "cancelled", "", sorted(known), down, logical, prio)
    st = job_status(client, job_id)
    if st.status == "cancelled":  # cancelling twice is not an error
        return CancelResult(job_id, True, "cancelled", "already cancelled", st.nodes, down,
                            st.queue, st.priority)
    if not reason:
        reason = (f"the job is {st.status.replace('_', ' ')}: only queued, scheduled or "
                  "retrying jobs can be cancelled")
    return CancelResult(job_id, False, st.status, reason, st.nodes, down, st.queue,
                        st.priority)

