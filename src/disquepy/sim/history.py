"""What the clients saw: jobs they added (with parameters), deliveries, acks.

The checkers judge the cluster against this record only (plus the nodes' own state
for copies held), never against the core's internals alone.
"""

from __future__ import annotations


class JobRecord:
    """One ADDJOB: its parameters when sent, and what happened to the job after."""

    __slots__ = (
        "body",
        "queue",
        "repl",
        "retry",
        "delay",
        "ttl",
        "is_async",
        "agent",
        "node",
        "sent_at",
        "jid",
        "replied_at",
        "error",
        "deliveries",
        "open",
        "acked_at",
        "holders_at_reply",
    )

    def __init__(
        self,
        body: bytes,
        queue: bytes,
        repl: int,
        retry: int,
        delay: int,
        ttl: int,
        is_async: bool,
        agent: int,
        node: int,
        sent_at: int,
    ) -> None:
        self.body = body
        self.queue = queue
        self.repl = repl
        self.retry = retry
        self.delay = delay
        self.ttl = ttl
        self.is_async = is_async
        self.agent = agent
        self.node = node
        self.sent_at = sent_at
        self.jid: bytes | None = None  # set when the ID reply arrived
        self.replied_at: int | None = None
        self.error: str | None = None
        self.deliveries: list[tuple[int, int, int]] = []  # (time, node, agent)
        self.open = 0  # deliveries a consumer still holds (not acked, nacked or dropped)
        self.acked_at: int | None = None  # first ACKJOB / FASTACK reply
        self.holders_at_reply = 0

    @property
    def at_least_once(self) -> bool:
        return self.retry > 0

    def __repr__(self) -> str:
        jid = self.jid.decode() if self.jid else "-"
        return (
            f"<Job {jid} body={self.body.decode()} q={self.queue.decode()} "
            f"repl={self.repl} retry={self.retry} delay={self.delay} ttl={self.ttl}"
            f"{' async' if self.is_async else ''} via node {self.node}>"
        )


class History:
    __slots__ = (
        "by_body",
        "by_id",
        "adds_sent",
        "adds_ok",
        "add_errors",
        "deliveries",
        "jobs_delivered",
        "first",
        "requested",
        "dup_after_ack",
        "dup_while_held",
        "acks",
    )

    def __init__(self) -> None:
        self.by_body: dict[bytes, JobRecord] = {}
        self.by_id: dict[bytes, JobRecord] = {}
        self.adds_sent = 0
        self.adds_ok = 0
        self.add_errors: dict[str, int] = {}
        self.deliveries = 0
        self.jobs_delivered = 0  # jobs delivered at least once, any kind
        # deliveries of at-least-once jobs, by class:
        self.first = 0  # first delivery of a job
        self.requested = 0  # redelivery after the consumer NACKed or dropped it
        self.dup_after_ack = 0  # delivered again after a client acked it
        self.dup_while_held = 0  # delivered again while a consumer still held it
        self.acks = 0

    def sent(self, rec: JobRecord) -> None:
        self.by_body[rec.body] = rec
        self.adds_sent += 1

    def added(self, rec: JobRecord, jid: bytes, t: int) -> None:
        rec.jid = jid
        rec.replied_at = t
        self.by_id[jid] = rec
        self.adds_ok += 1

    def add_failed(self, rec: JobRecord, error: str) -> None:
        rec.error = error
        key = error.split(" ", 1)[0] if error else "?"
        self.add_errors[key] = self.add_errors.get(key, 0) + 1

    def delivered(self, rec: JobRecord, t: int, node: int, agent: int) -> str:
        """Record one delivery; returns its class (first / requested / dup-*), or
        "at-most-once" for a RETRY 0 job (a second delivery of one is a failure)."""
        self.deliveries += 1
        if not rec.deliveries:
            self.jobs_delivered += 1
        if not rec.retry:
            kind = "at-most-once"
        elif not rec.deliveries:
            kind = "first"
            self.first += 1
        elif rec.acked_at is not None:
            kind = "dup-after-ack"
            self.dup_after_ack += 1
        elif rec.open:
            kind = "dup-while-held"
            self.dup_while_held += 1
        else:
            kind = "requested"
            self.requested += 1
        rec.deliveries.append((t, node, agent))
        rec.open += 1
        return kind

    def released(self, rec: JobRecord) -> None:
        """A consumer let go of a delivery without acking it (NACK, or dropped)."""
        if rec.open:
            rec.open -= 1

    def acked(self, rec: JobRecord, t: int) -> None:
        self.acks += 1
        if rec.open:
            rec.open -= 1
        if rec.acked_at is None:
            rec.acked_at = t
