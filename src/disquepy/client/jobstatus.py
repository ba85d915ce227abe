"""A job's status and its cancellation, from what the nodes hold today.

:meth:`Disque.status <disquepy.client.Disque.status>` and :meth:`Disque.cancel
<disquepy.client.Disque.cancel>` are the only entry points: the HTTP API, the dashboard
and the CLI call them, so a server-side status command can replace this module's
implementation without changing any caller.

The nodes answer: JOBSTATUS on each (a job's state while it lives, its outcome for
``job-outcome-retention`` seconds after, on every node that held a copy) and CANCEL on
the node that queues it (the server's ``commands/status.py``). A failed job's dead
letter (the worker's ``*:dead`` queues) is looked up for its ID.

Each lookup is written once, without I/O, as a *plan*: a generator that yields what it
needs from the cluster (an :class:`Ask` for one command on one node, :data:`HELLO` for
the cluster's nodes, a :class:`Sleep` between polls) and is sent the answer, or has the
error thrown in. :func:`run` carries a plan out with the blocking client, :func:`arun`
with :class:`~disquepy.client.AsyncDisque`, so both clients give the same answers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Generator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import redis.exceptions as rexc

from .args import wait_backoff
from .errors import convert_error
from .nodes import Topology, fmt_addr
from .priority import split
from .replies import job_node_prefix, parse_show

if TYPE_CHECKING:  # pragma: no cover
    from ..codec.nodes import Hello
    from .aio import AsyncDisque
    from .deadletter import DeadLetter
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
    from .envelope import unwrap  # the worker's envelope: show the user's body

    raw = unwrap(body).body
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


# ---------------------------------------------------------------------------- plans


@dataclass(frozen=True, slots=True)
class Ask:
    """One command on one node (``host:port``, no failover); the plan gets its reply,
    or the error (a ``redis.exceptions.RedisError``) thrown in."""

    addr: str
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


MAX_STEPS = 1_000_000  # what a plan may ask, at most (each plan bounds itself first)

class _HelloNeed:
    """(the type of HELLO)"""


HELLO = _HelloNeed()  # what a plan yields for the client's HELLO (parsed: ``Hello``)

T = TypeVar("T")
# what a plan yields (its needs), is sent (a reply), and returns
Plan = Generator[Ask | Sleep | _HelloNeed, Any, T]


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    value: T


def _advance(plan: Plan[T], value: Any, error: BaseException | None
             ) -> _Done[T] | Ask | Sleep | _HelloNeed:
    """The plan's next need, given the last answer (or error); ``_Done`` at its end."""
    try:
        return plan.send(value) if error is None else plan.throw(error)
    except StopIteration as done:
        return _Done(done.value)


def run(client: Disque, plan: Plan[T]) -> T:
    """Carry ``plan`` out with the blocking client."""
    value: Any = None
    error: BaseException | None = None
    for _ in range(MAX_STEPS):
        need = _advance(plan, value, error)
        if isinstance(need, _Done):
            return need.value
        value, error = None, None
        try:
            if isinstance(need, Sleep):
                time.sleep(need.seconds)
            elif isinstance(need, _HelloNeed):
                value = client.hello()
            else:
                value = client.execute_on(need.addr, *need.args)
        except rexc.RedisError as e:
            error = e
    raise RuntimeError("a job status lookup did not finish")


async def arun(client: AsyncDisque, plan: Plan[T]) -> T:
    """Carry ``plan`` out with the asyncio client."""
    value: Any = None
    error: BaseException | None = None
    for _ in range(MAX_STEPS):
        need = _advance(plan, value, error)
        if isinstance(need, _Done):
            return need.value
        value, error = None, None
        try:
            if isinstance(need, Sleep):
                await asyncio.sleep(need.seconds)
            elif isinstance(need, _HelloNeed):
                # (AsyncDisque's commands are typed as Disque's results: see Commands)
                value = await cast("Awaitable[Hello]", client.hello())
            else:
                value = await client.execute_on(need.addr, *need.args)
        except rexc.RedisError as e:
            error = e
        except OSError as e:  # the node did not answer (TimeoutError is one)
            error = rexc.ConnectionError(str(e) or type(e).__name__)
    raise RuntimeError("a job status lookup did not finish")


# ---------------------------------------------------------------------------- gathering


def addresses_plan(topology: Topology) -> Plan[list[str]]:
    """Every node the cluster knows (HELLO), as ``host:port``; the seeds if HELLO fails."""
    try:
        hello = yield HELLO
    except rexc.RedisError:
        return [fmt_addr(a) for a in topology.seeds]
    return [n.address for n in hello.nodes if n.host]


def node_addresses(client: Disque) -> list[str]:
    """Every node the cluster knows (HELLO), as ``host:port``; the seeds if HELLO fails."""
    return run(client, addresses_plan(client.topology))


def _ordered_plan(topology: Topology, job_id: str) -> Plan[list[str]]:
    nodes = yield from addresses_plan(topology)
    owner = topology.address_of(job_node_prefix(job_id))
    if owner is not None and fmt_addr(owner) in nodes:
        nodes.remove(fmt_addr(owner))
        nodes.insert(0, fmt_addr(owner))
    return nodes


def queues_plan(addr: str) -> Plan[list[str]]:
    """Every queue of one node (QSCAN's cursor loop there), sorted, without repeats."""
    out: list[str] = []
    cursor = 0
    for _ in range(10000):  # bounded: QSCAN returns 0 when done
        reply = yield Ask(addr, ("QSCAN", cursor, "COUNT", 1000))
        cursor = int(reply[0])
        out.extend(q.decode("utf-8", "surrogateescape") for q in reply[1])
        if cursor == 0:
            break
    return sorted(set(out))


def node_queues(client: Disque, addr: str) -> list[str]:
    """Every queue of one node (QSCAN's cursor loop there), sorted, without repeats."""
    return run(client, queues_plan(addr))


def dead_letter_plan(topology: Topology, job_id: str, queue: str | None = None
                     ) -> Plan[DeadLetter | None]:
    """The dead letter of ``job_id`` (:class:`~disquepy.client.deadletter.DeadLetter`) on
    any node, looking in ``queue``'s dead-letter queue (every ``*:dead`` queue if
    ``None``); ``None`` if there is none."""
    from .deadletter import parse_dead_letter

    for addr in (yield from addresses_plan(topology)):
        try:
            if queue is not None:  # a priority worker uses the logical queue's
                dqs = list(dict.fromkeys([split(queue)[0] + DEAD_SUFFIX, queue + DEAD_SUFFIX]))
            else:
                dqs = [q for q in (yield from queues_plan(addr)) if q.endswith(DEAD_SUFFIX)]
            for dq in dqs:
                for item in (yield Ask(addr, ("QPEEK", dq, DEAD_SCAN_LIMIT))) or []:
                    dl = parse_dead_letter(item[1].decode("ascii", "replace"), dq, item[2])
                    if dl is not None and (dl.original_id == job_id or dl.id == job_id):
                        return dl
        except rexc.RedisError:
            continue
    return None


def find_dead_letter(client: Disque, job_id: str, queue: str | None = None) -> DeadLetter | None:
    """The dead letter of ``job_id`` on any node (see :func:`dead_letter_plan`)."""
    return run(client, dead_letter_plan(client.topology, job_id, queue))


# ---------------------------------------------------------------------------- status

FINAL = ("failed", "cancelled", "completed", "expired")  # which one wins if copies differ
LIVE = ("in_progress", "retrying", "queued", "scheduled")  # a copy that knows more first


def _fields(r: list[Any]) -> dict[str, Any]:
    return {k.decode(): v for k, v in zip(r[::2], r[1::2], strict=True)}


def _statuses_plan(topology: Topology, job_id: str) -> Plan[tuple[dict[str, dict[str, Any]], list[str]]]:
    """JOBSTATUS on every node, the creating node first: ({address: fields} of the nodes
    that know the job, unreachable addresses)."""
    known: dict[str, dict[str, Any]] = {}
    down: list[str] = []
    for addr in (yield from _ordered_plan(topology, job_id)):
        try:
            r = yield Ask(addr, ("JOBSTATUS", job_id))
        except rexc.ResponseError:  # NOJOB: this node knows nothing of it
            continue
        except rexc.RedisError:
            down.append(addr)
            continue
        known[addr] = _fields(r)
    return known, down


def _text(v: Any) -> str | None:
    return None if v is None else v.decode("utf-8", "replace")


def json_or_text(v: bytes | None) -> Any:
    """A body, result or error as the JSON it holds, else as text (None when empty)."""
    if not v:
        return None
    try:
        return json.loads(v)
    except ValueError:
        return v.decode("utf-8", "replace")


def status_from(job_id: str, known: dict[str, dict[str, Any]]) -> tuple[JobStatus, str]:
    """The status told by the JOBSTATUS answers in ``known`` ({address: fields}, at least
    one): an outcome on any node wins (failed, cancelled, completed, expired), else the
    copy that knows most (in progress, retrying, queued, scheduled); copies that only
    hold it (``active``) mean a worker has it on a node that did not answer, or it is
    queued there. No dead-letter lookup, no body (see :func:`status_plan`). Returns the
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
        st.result = json_or_text(f.get("detail"))
    return st, addr


def status_plan(topology: Topology, job_id: str) -> Plan[JobStatus]:
    """The status of ``job_id`` from JOBSTATUS on every node (see the server's
    ``commands/status.py`` and :func:`status_from`), with a failed job's dead letter
    and a live job's body, TTL, retry and delay."""
    known, down = yield from _statuses_plan(topology, job_id)
    if not known:
        owner = topology.address_of(job_node_prefix(job_id))
        why = ("its creating node is unreachable" if owner is not None and fmt_addr(owner)
               in down else "no node knows it (never created, or its outcome's "
               "retention ended)")
        return JobStatus(job_id, "unknown", detail=why)
    st, addr = status_from(job_id, known)
    status, queue = st.status, _text(known[addr].get("queue"))
    if status == "failed":
        dl = yield from dead_letter_plan(topology, job_id, queue)
        if dl is not None:
            st.dead_letter_id = dl.id
    if status in LIVE or status == "in_progress":
        try:
            s = parse_show((yield Ask(addr, ("SHOW", job_id))))
        except rexc.RedisError:
            s = None
        if s is not None:
            st.body, st.ttl, st.retry, st.delay = (s.get("body"), s.get("ttl"),
                                                   s.get("retry"), s.get("delay"))
    return st


def job_status(client: Disque, job_id: str) -> JobStatus:
    return run(client, status_plan(client.topology, job_id))


# ---------------------------------------------------------------------------- wait


def wait_plan(topology: Topology, job_id: str, timeout: float) -> Plan[JobStatus]:
    """Wait until ``job_id`` ends (completed, failed, cancelled or expired) or
    ``timeout`` seconds pass; its :func:`status_plan` then (at the timeout: its status
    then, ``queued``, ``in_progress``, ... or ``unknown``).

    Polls JOBSTATUS on the node that created the job (every copy records the outcome,
    that one too) with back-off from 5 ms to 250 ms; when that node is unreachable or
    knows nothing of the job, asks every node."""
    deadline = time.monotonic() + timeout
    prefix = job_node_prefix(job_id)
    for attempt in range(1_000_000):  # bounded by the deadline long before this
        owner = topology.address_of(prefix)
        try:
            if owner is None:
                raise rexc.ConnectionError("creating node unknown")
            f = _fields((yield Ask(fmt_addr(owner), ("JOBSTATUS", job_id))))
            ended = f["state"].decode() in FINAL
        except rexc.RedisError:
            # NOJOB there (never created, retention 0) or the creating node is down:
            # the copies tell
            known, _ = yield from _statuses_plan(topology, job_id)
            ended = bool(known) and status_from(job_id, known)[0].status in FINAL
        left = deadline - time.monotonic()
        if ended or left <= 0:
            break
        yield Sleep(min(wait_backoff(attempt), left))
    return (yield from status_plan(topology, job_id))


def wait_job(client: Disque, job_id: str, timeout: float) -> JobStatus:
    return run(client, wait_plan(client.topology, job_id, timeout))


# ---------------------------------------------------------------------------- cancel


def cancel_plan(topology: Topology, job_id: str) -> Plan[CancelResult]:
    """Cancel a queued, scheduled or retrying job with the server's CANCEL, on the node
    that queues it (it ends as ``cancelled`` on every copy). A job a worker holds, or one
    that ended, is not cancelled, and ``reason`` says why (the node's own words)."""
    known, down = yield from _statuses_plan(topology, job_id)
    reason = ""
    for addr, f in known.items():
        if f["state"] == b"active":  # a copy: the job is queued or worked on elsewhere
            continue
        try:
            yield Ask(addr, ("CANCEL", job_id))
        except rexc.ResponseError as e:
            err = convert_error(e)
            if err.code == "NOPERM":  # the user may not cancel: not the job's state
                raise err from None
            reason = str(e)
            continue
        except rexc.RedisError:
            down.append(addr)
            continue
        queue = _text(f.get("queue"))
        logical, prio = split(queue) if queue else (None, None)
        return CancelResult(job_id, True, "cancelled", "", sorted(known), down, logical, prio)
    st = yield from status_plan(topology, job_id)
    if st.status == "cancelled":  # cancelling twice is not an error
        return CancelResult(job_id, True, "cancelled", "already cancelled", st.nodes, down,
                            st.queue, st.priority)
    if not reason:
        reason = (f"the job is {st.status.replace('_', ' ')}: only queued, scheduled or "
                  "retrying jobs can be cancelled")
    return CancelResult(job_id, False, st.status, reason, st.nodes, down, st.queue,
                        st.priority)


def cancel_job(client: Disque, job_id: str) -> CancelResult:
    return run(client, cancel_plan(client.topology, job_id))
