"""ADDJOB IDEMPOTENT and GETJOB TOKEN through the client: a reply lost after the server ran
the command is retried on the same node and gives the first result, not a second one."""

from __future__ import annotations

import pytest
from proxy import LossyProxy

from disquepy.client import Disque


@pytest.fixture
def proxy(server):
    p = LossyProxy(server.port)
    yield p
    p.close()


def test_idempotent_add_returns_the_first_id(dq):
    a = dq.add_job("q", "x", idempotent="order-1")
    b = dq.add_job("q", "x", idempotent="order-1")
    c = dq.add_job("q", "x", idempotent=b"order-2")
    assert a == b and c != a
    assert dq.qlen("q") == 2


def test_token_replays_the_same_jobs(dq):
    ids = [dq.add_job("q", f"j{i}") for i in range(3)]
    first = dq.get_jobs("q", count=2, token="batch-1")
    assert [j.id for j in first] == ids[:2]
    again = dq.get_jobs("q", count=2, token="batch-1")
    assert [j.id for j in again] == ids[:2] and dq.qlen("q") == 1
    dq.ack(ids[0])
    assert [j.id for j in dq.get_jobs("q", token="batch-1")] == [ids[1]]


def test_ack_token_acks_a_whole_read(dq):
    ids = [dq.add_job("q", f"j{i}") for i in range(5)]
    dq.get_jobs("q", count=2, token="r1")
    dq.get_jobs("q", count=2, token="r2")
    assert dq.ack_token("r1", "r2") == 4
    assert [dq.show(j) for j in ids[:4]] == [None] * 4
    assert dq.qlen("q") == 1 and dq.ack_token("r1") == 0


@pytest.mark.parametrize("key", ["k-1", None])
def test_lost_addjob_reply_is_retried_once_with_the_key(dq, proxy, key):
    c = Disque([f"127.0.0.1:{proxy.port}"])
    c.ping()
    proxy.arm()
    jid = c.add_job("q", "payload", idempotent=key)
    assert proxy.dropped == 1
    ids = list(dq.jscan(queue="q"))
    if key is not None:
        assert ids == [jid]  # the retry got the first job's ID: one job
    else:
        assert len(ids) == 2 and jid in ids  # without a key the retry added a second job
    c.close()


@pytest.mark.parametrize("token", ["tok-1", None])
def test_lost_getjob_reply_is_replayed_with_the_token(dq, proxy, token):
    a = dq.add_job("q", "a")
    b = dq.add_job("q", "b")
    c = Disque([f"127.0.0.1:{proxy.port}"])
    c.ping()
    proxy.arm()
    jobs = c.get_jobs("q", token=token)
    assert proxy.dropped == 1
    if token is not None:
        assert [j.id for j in jobs] == [a] and dq.qlen("q") == 1  # same job, b still queued
    else:
        # the lost reply's job is stranded until its retry; the retry took the next one
        assert [j.id for j in jobs] == [b] and dq.show(a)["state"] == "active"
    c.close()
