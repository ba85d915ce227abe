"""ACKJOB, FASTACK, and disquepy's ACKTOKEN."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...codec import resp
from ..job import ACKED
from .args import job_ids

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node


def split_result(argv: list[bytes]) -> tuple[list[bytes], bytes]:
    """``argv`` without a trailing ``RESULT data`` (disquepy), and the data (b'' if none).
    ``RESULT`` is never a job ID, so the IDs before it stay unambiguous."""
    if len(argv) >= 3 and len(argv[-2]) == 6 and argv[-2].upper() == b"RESULT":
        return argv[:-2], argv[-1]
    return argv, b""


def ackjob(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """ACKJOB id [id ...] [RESULT data]: with RESULT (disquepy), the jobs' outcome
    (completed) keeps ``data`` (truncated to the outcome detail limit), on every copy."""
    argv, result = split_result(argv)
    known = 0
    store = node.store
    store.outcomes_later()  # the batch's outcomes stored with one call
    try:
        for jid in job_ids(argv):
            job = node.jobs.get(jid)
            if job is None:
                job = node.acks.dummy_ack(jid, now)
            elif job.state != ACKED:
                known += 1
                node.acks.ack(job, now, result)
            if job is not None and job.state == ACKED:
                node.acks.start_gc(job, now)
    finally:
        store.outcomes_now(now)
    return resp.integer(known)


def fastack(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """FASTACK id [id ...] [RESULT data]: RESULT as for ACKJOB."""
    argv, result = split_result(argv)
    known = 0
    store = node.store
    store.outcomes_later()
    try:
        for jid in job_ids(argv):
            job = node.jobs.get(jid)
            if job is not None:
                known += 1
                if node.events_on and job.state != ACKED:
                    node.events_out.append((now, "acked", jid, job.queue, None))
                node.acks.fast_ack(job, now, result)
            else:
                node.acks.fast_ack_unknown(jid)
    finally:
        store.outcomes_now(now)
    return resp.integer(known)


def acktoken(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """ACKTOKEN token [token ...] (disquepy): ACKJOB every job this node delivered
    under these GETJOB TOKENs and still holds; replies with how many it acked. A
    consumer that reads by token (the Spark source) acks a whole batch in one
    command, without replaying the tokens to learn the IDs."""
    acked = 0
    access = client.queues  # a user limited to some queues acks only their jobs
    store = node.store
    store.outcomes_later()
    try:
        for token in argv[1:]:
            for jid in node.keys.token_get(token, now) or ():
                job = node.jobs.get(jid)
                if job is None or job.state == ACKED:
                    continue
                if access is not None and not access.allows(job.queue):
                    continue
                acked += 1
                node.acks.ack(job, now)
                if job.state == ACKED:
                    node.acks.start_gc(job, now)
    finally:
        store.outcomes_now(now)
    return resp.integer(acked)
