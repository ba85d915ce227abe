"""The job state table: every state change goes through job.move, which refuses what
TRANSITIONS does not list (an acked job never comes back)."""

import pytest
from nodeharness import Harness

from disquepy.core.job import (
    ACKED,
    ACTIVE,
    QUEUED,
    STATE_NAMES,
    TRANSITIONS,
    WAIT_REPL,
    IllegalTransition,
    Job,
    move,
)

JID = b"D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1"


def test_nothing_leaves_acked():
    job = Job(JID, b"q", b"x", 1, 60)
    move(job, ACTIVE)
    move(job, ACKED)
    for to in (WAIT_REPL, ACTIVE, QUEUED):
        with pytest.raises(IllegalTransition, match="acked -> "):
            move(job, to)
    assert job.state == ACKED


def test_a_queued_job_is_not_acked_without_leaving_its_queue():
    job = Job(JID, b"q", b"x", 1, 60)
    move(job, QUEUED)
    with pytest.raises(IllegalTransition, match="queued -> acked"):
        move(job, ACKED)
    assert job.state == QUEUED


def test_every_listed_change_is_allowed_and_named():
    for (a, b), why in TRANSITIONS.items():
        job = Job(JID, b"q", b"x", 1, 60)
        job.state = a
        move(job, b)
        assert job.state == b and why and STATE_NAMES[a] and STATE_NAMES[b]


def test_commands_walk_the_table():
    h = Harness()
    jid = h("ADDJOB", "q", "x", 0)
    assert h.node.jobs.get(jid).state == QUEUED
    h("GETJOB", "FROM", "q")
    assert h.node.jobs.get(jid).state == ACTIVE
    h("NACK", jid)
    assert h.node.jobs.get(jid).state == QUEUED
    assert h("ACKJOB", jid) == 1
    assert h.node.jobs.get(jid) is None
