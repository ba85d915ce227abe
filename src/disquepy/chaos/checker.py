"""The history of a fault run and the total-queue check made on it (as Jepsen's).

Clients record what they sent and what came back; after the heal and the drain the
checker compares that history with what the nodes still hold:

lost
    an at-least-once job (RETRY > 0) whose ADDJOB got an ID reply, never delivered.
    Nothing excuses a loss here: every node runs ``appendfsync always`` and every
    killed node is restarted with its data, so no replica is ever lost for good, and
    TTLs are far longer than the run.
unexpected
    a delivery of a body no producer ever sent, or under another ID than the one its
    ADDJOB reply gave.
at-most-once
    a RETRY 0 job delivered more than once.
unacked
    an at-least-once job with an ID that was never acknowledged once the queues were
    drained (delivered, dropped by its consumer, and never delivered again). An ack
    sent without a reply may have been applied: such jobs are not counted.
not-collected
    a job some client acknowledged that a node still holds after the heal.
leftover
    a queued job still on a node after the drain.

Duplicates (an at-least-once job delivered again) are allowed and counted: those a
client asked for (NACK, or a consumer that dropped the job) apart from the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.ids import id_is_at_most_once

# how an ADDJOB ended
ADD_OK, ADD_ERROR, ADD_UNKNOWN = "ok", "error", "unknown"

# What each node holds after the drain: node index -> {jid: (state, queue, retry)}.
JobsHeld = dict[int, dict[bytes, tuple[str, bytes, int]]]
# A few fields showing one violation; which ones depends on its kind (bodies, IDs,
# node indexes, lists of those): no one static type, hence Any.
Example = tuple[Any, ...]


@dataclass(slots=True)
class AddRecord:
    body: bytes
    queue: bytes
    repl: int
    retry: int
    node: int
    outcome: str = ""  # "" while in flight
    jid: bytes | None = None
    error: str = ""


@dataclass(slots=True)
class History:
    """Everything the clients saw. Bodies are unique per run."""

    adds: dict[bytes, AddRecord] = field(default_factory=dict)  # body -> AddRecord
    # body -> [(jid, node)]
    deliveries: dict[bytes, list[tuple[bytes, int]]] = field(default_factory=dict)
    # body -> redeliveries asked (nack/drop)
    requested: dict[bytes, int] = field(default_factory=dict)
    acked: set[bytes] = field(default_factory=set)  # jids whose ACKJOB/FASTACK got a reply
    ack_maybe: set[bytes] = field(default_factory=set)  # jids of an ack sent without a reply
    ack_errors: int = 0
    getjob_calls: int = 0

    def add_sent(self, body: bytes, queue: bytes, repl: int, retry: int, node: int) -> AddRecord:
        rec = AddRecord(body, queue, repl, retry, node)
        self.adds[body] = rec
        return rec

    def delivered(self, body: bytes, jid: bytes, node: int) -> None:
        self.deliveries.setdefault(body, []).append((jid, node))

    def request_redelivery(self, body: bytes) -> None:
        self.requested[body] = self.requested.get(body, 0) + 1

    def ack_ok(self, jid: bytes) -> None:
        self.acked.add(jid)

    # ------------------------------------------------------------- queries
    def alo_with_id(self) -> list[AddRecord]:
        return [r for r in self.adds.values() if r.outcome == ADD_OK and r.retry > 0]

    def open_alo(self) -> list[AddRecord]:
        """At-least-once jobs with an ID, not acknowledged (as far as we know)."""
        return [r for r in self.alo_with_id()
                if r.jid not in self.acked and r.jid not in self.ack_maybe]


@dataclass(slots=True)
class Report:
    """The verdict: counts, examples, and whether any guarantee was broken."""

    counts: dict[str, int | float]  # counts, and the duplicate rates
    examples: dict[str, list[Example]]  # kind -> a few bodies / ids

    @property
    def violations(self) -> dict[str, int | float]:
        return {k: self.counts[k] for k in VIOLATIONS if self.counts.get(k)}

    @property
    def ok(self) -> bool:
        return not self.violations


def _at_most_once(jid: bytes) -> bool:
    try:
        return id_is_at_most_once(jid)
    except (ValueError, IndexError):  # not a Disque job ID
        return False


VIOLATIONS = ("lost", "unexpected", "at_most_once", "unacked", "not_collected", "leftover")
EXAMPLES = 5


def check(history: History, final_jobs: JobsHeld | None = None) -> Report:
    """Compare the history with ``final_jobs`` (node index -> {jid: (state, ...)},
    what each node holds after the drain; None skips those checks)."""
    adds = history.adds
    deliveries = history.deliveries
    ex: dict[str, list[Example]] = {k: [] for k in VIOLATIONS}

    def note(kind: str, what: Example) -> None:
        if len(ex[kind]) < EXAMPLES:
            ex[kind].append(what)

    lost = 0
    unacked = 0
    for r in history.alo_with_id():
        if r.body not in deliveries:
            lost += 1
            note("lost", (r.body, r.jid, f"node {r.node} repl {r.repl}"))
    for r in history.open_alo():
        if r.body not in deliveries:
            continue  # never delivered: lost, above
        unacked += 1
        note("unacked", (r.body, r.jid))
    unexpected = 0
    at_most_once = 0
    dup = dup_unrequested = 0
    delivered_jobs = deliveries_total = 0
    amo_delivered = 0
    for body, ds in deliveries.items():
        delivered_jobs += 1
        deliveries_total += len(ds)
        rec = adds.get(body)
        if rec is None or (rec.jid is not None and any(jid != rec.jid for jid, _ in ds)):
            unexpected += 1
            note("unexpected", (body, [jid for jid, _ in ds]))
            continue
        if rec.retry == 0:
            amo_delivered += 1
            if len(ds) > 1:
                at_most_once += 1
                note("at_most_once", (body, ds))
            continue
        extra = len(ds) - 1
        dup += extra
        dup_unrequested += max(0, extra - history.requested.get(body, 0))
    not_collected = leftover = not_collected_amo = 0
    held = 0
    if final_jobs is not None:
        where: dict[bytes, list[tuple[int, str]]] = {}
        for i, jobs in final_jobs.items():
            for jid, info in jobs.items():
                state = info[0]
                held += 1
                where.setdefault(jid, []).append((i, state))
                if state == "queued":
                    leftover += 1
                    note("leftover", (jid, i))
        for jid, places in where.items():
            if jid in history.acked:
                not_collected += 1
                if _at_most_once(jid):
                    not_collected_amo += 1
                note("not_collected", (jid, places))
    alo_delivered = delivered_jobs - amo_delivered - unexpected
    counts = {
        "adds_sent": len(adds),
        "jobs_added": sum(1 for r in adds.values() if r.outcome == ADD_OK),
        "add_errors": sum(1 for r in adds.values() if r.outcome == ADD_ERROR),
        "add_unknown": sum(1 for r in adds.values() if r.outcome == ADD_UNKNOWN),
        "retry0_added": sum(1 for r in adds.values() if r.outcome == ADD_OK and r.retry == 0),
        "jobs_delivered": delivered_jobs,
        "alo_delivered": alo_delivered,
        "retry0_delivered": amo_delivered,
        "deliveries": deliveries_total,
        "acked": len(history.acked),
        "ack_errors": history.ack_errors,
        "redeliveries_requested": sum(history.requested.values()),
        "duplicates": dup,
        "duplicates_unrequested": dup_unrequested,
        "duplicate_rate": round(dup / alo_delivered, 5) if alo_delivered else 0.0,
        "duplicate_rate_unrequested": (
            round(dup_unrequested / alo_delivered, 5) if alo_delivered else 0.0
        ),
        "jobs_held_at_end": held,
        "lost": lost,
        "unexpected": unexpected,
        "at_most_once": at_most_once,
        "unacked": unacked,
        "not_collected": not_collected,
        "not_collected_retry0": not_collected_amo,
        "leftover": leftover,
    }
    return Report(counts, {k: v for k, v in ex.items() if v})
