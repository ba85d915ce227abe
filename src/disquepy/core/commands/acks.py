"""ACKJOB and FASTACK."""

from __future__ import annotations

from ...codec import resp
from ..job import ACKED
from .args import job_ids


def ackjob(node, client, argv, now):
    known = 0
    for jid in job_ids(argv):
        job = node.jobs.get(jid)
        if job is None:
            job = node.dummy_ack(jid, now)
        elif job.state != ACKED:
            known += 1
            if node.events_on:
                node.events_out.append((now, "acked", jid, job.queue, None))
            node.ack(job, now)
        if job is not None and job.state == ACKED:
            node.start_gc(job, now)
    return resp.integer(known)


def fastack(node, client, argv, now):
    known = 0
    for jid in job_ids(argv):
        job = node.jobs.get(jid)
        if job is not None:
            known += 1
            if node.events_on and job.state != ACKED:
                node.events_out.append((now, "acked", jid, job.queue, None))
            node.fast_ack(job)
        else:
            node.fast_ack_unknown(jid)
    return resp.integer(known)
