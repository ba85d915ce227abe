"""add_jobs (sync and asyncio) on a real node: a batch of ADDJOBs in one round trip, one
result per job (its ID or its own error), the same options and idempotency keys as
add_job, and a lost reply retried without adding a job twice when every job has a key."""

from __future__ import annotations

import asyncio

import pytest
import redis
from proxy import LossyProxy

from disquepy.client import AsyncDisque, Disque, PausedError, ResponseError
from disquepy.client.batch import CHUNK, encode


def test_both_forms_options_and_per_job_errors(dq):
    ids = dq.add_jobs("q", [b"a", "b"], retry=7, ttl=600)
    assert len(ids) == 2 and all(isinstance(i, str) and i.startswith("D-") for i in ids)
    assert [(dq.show(i)["body"], dq.show(i)["retry"]) for i in ids] == [(b"a", 7), (b"b", 7)]
    dq.pause("paused", "in")
    out = dq.add_jobs([("q2", b"c"), ("paused", b"d"), ("q2", b"e", {"delay": 100}),
                       ("q2", b"f", {"maxlen": 1})], retry=9)
    assert isinstance(out[0], str) and isinstance(out[2], str)
    assert isinstance(out[1], PausedError) and "PAUSED" in str(out[1])
    assert isinstance(out[3], ResponseError) and out[3].code == "MAXLEN"
    assert dq.show(out[2])["delay"] == 100 and dq.show(out[2])["retry"] == 9
    assert [j.body for j in dq.qpeek("q2", 10)] == [b"c"]  # e is delayed, f refused
    assert dq.add_jobs("q", []) == []


def test_idempotency_keys_are_add_jobs_too(dq):
    first = dq.add_jobs("q", [b"x", b"y", b"z"], idempotent=["k1", None, "k3"])
    again = dq.add_jobs("q", [b"x", b"y", b"z"], idempotent=["k1", None, "k3"])
    assert again[0] == first[0] and again[2] == first[2] and again[1] != first[1]
    assert dq.add_job("q", b"x", idempotent="k1") == first[0]  # the same key as add_job's
    assert dq.add_jobs([("q", b"x", {"idempotent": "k3"})]) == [first[2]]
    assert dq.qlen("q") == 4
    with pytest.raises(ValueError, match="fewer idempotency keys"):
        dq.add_jobs("q", [b"1", b"2"], idempotent=["only-one"])
    with pytest.raises(ValueError, match="more idempotency keys"):
        dq.add_jobs("q", [b"1"], idempotent=["a", "b"])


def test_bad_calls_are_refused_before_anything_is_sent(dq):
    with pytest.raises(TypeError, match=r"\(queue, body\)"):
        dq.add_jobs([b"just a body"])
    with pytest.raises(TypeError, match="unexpected option 'retries'"):
        dq.add_jobs("q", [b"a"], retries=3)
    with pytest.raises(TypeError, match="unknown job option 'ttll'"):
        dq.add_jobs([("q", b"a", {"ttll": 5})])
    with pytest.raises(TypeError, match="the bodies are missing"):
        dq.add_jobs("q")
    assert dq.qlen("q") == 0


def test_a_batch_is_one_write_per_chunk(dq, monkeypatch):
    """2500 jobs: three writes (CHUNK = 1000 commands each), all added in order."""
    dq.ping()  # connected: HELLO and redis-py's own set-up are not counted
    writes = []
    send = redis.connection.Connection.send_packed_command

    def counting(self, command, check_health=True):
        writes.append(sum(len(c) for c in command))
        return send(self, command, check_health)

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counting)
    bodies = [b"%d" % i for i in range(2500)]
    ids = dq.add_jobs("big", bodies)
    assert len(writes) == -(-2500 // CHUNK) == 3
    assert all(isinstance(i, str) for i in ids) and len(set(ids)) == 2500
    assert writes[0] == sum(len(encode(["ADDJOB", "big", b, 0])) for b in bodies[:CHUNK])
    assert [j.id for j in dq.qpeek("big", 2500)] == ids


@pytest.mark.parametrize("keyed", [True, False])
def test_lost_reply_is_sent_again(dq, server, keyed):
    """The connection drops after the node ran the batch: with a key on every job the
    batch goes again to the same node and answers the first jobs' IDs (nothing added
    twice); without keys the jobs are added again, as add_job's retry does."""
    proxy = LossyProxy(server.port)
    c = Disque([f"127.0.0.1:{proxy.port}"])
    try:
        c.ping()
        proxy.arm()
        keys = [f"k{i}" for i in range(20)] if keyed else None
        ids = c.add_jobs("q", [b"%d" % i for i in range(20)], idempotent=keys)
        assert proxy.dropped == 1 and len(ids) == 20
        queued = list(dq.jscan(queue="q"))
        if keyed:
            assert sorted(queued) == sorted(ids)
        else:
            assert len(queued) == 40 and set(ids) <= set(queued)
    finally:
        c.close()
        proxy.close()


def test_async_add_jobs(server):
    async def main():
        async with AsyncDisque(f"127.0.0.1:{server.port}") as c:
            ids = await c.add_jobs("q", [b"%d" % i for i in range(1500)], retry=5)
            assert len(ids) == 1500 and all(isinstance(i, str) for i in ids)
            assert await c.qlen("q") == 1500
            await c.pause("p", "in")
            out = await c.add_jobs([("q", b"a", {"idempotent": "ka"}), ("p", b"b")])
            assert isinstance(out[0], str) and isinstance(out[1], PausedError)
            assert await c.add_jobs("q", [b"a"], idempotent=["ka"]) == [out[0]]
            return ids

    ids = asyncio.run(asyncio.wait_for(main(), 60))
    with Disque(f"127.0.0.1:{server.port}") as c:
        assert c.show(ids[0])["retry"] == 5


def test_a_batch_bound_to_a_node_never_moves(server_factory):
    """node=: the batch goes to that node whatever node the client uses; a lost node is
    an error (no failover to another node, whose keys would not know the jobs)."""
    a, b = server_factory(), server_factory()
    c = Disque([f"127.0.0.1:{a.port}"])
    try:
        assert c.node == f"127.0.0.1:{a.port}"
        bound = f"127.0.0.1:{b.port}"
        ids = c.add_jobs("q", [b"x", b"y"], idempotent=["k1", "k2"], node=bound)
        assert c.add_jobs("q", [b"x"], idempotent=["k1"], node=bound) == ids[:1]
        with Disque(bound) as on_b, Disque(f"127.0.0.1:{a.port}") as on_a:
            assert on_b.qlen("q") == 2 and on_a.qlen("q") == 0
        b.kill()
        with pytest.raises(redis.ConnectionError):
            c.add_jobs("q", [b"w"], node=bound)
        assert c.node == f"127.0.0.1:{a.port}" and c.qlen("q") == 0
    finally:
        c.close()


def test_error_replies_read_the_same_both_ways():
    """An error reply read by the asyncio wire (errors.reply_error) is the same class,
    code and text as the one redis-py reads (errors.convert_error): -TRYAGAIN included,
    which redis-py raises as a class of its own with the code cut off."""
    from redis._parsers.base import BaseParser

    from disquepy.client import TryAgainError
    from disquepy.client.errors import convert_error, reply_error

    for msg in ["ERR unknown command 'X'", "TRYAGAIN job being replicated",
                "PAUSED Queue paused in input", "NOPERM this user has no permissions",
                "LEAVING node is leaving", "NOREPL Not enough reachable nodes",
                "BADID Invalid Job ID format.", "MAXLEN queue full", "ERR", "WEIRD x"]:
        via_redis, via_wire = convert_error(BaseParser.parse_error(msg)), reply_error(msg)
        assert (type(via_redis), via_redis.code, str(via_redis)) == (
            type(via_wire), via_wire.code, str(via_wire)), msg
    assert isinstance(reply_error("TRYAGAIN x"), TryAgainError)


@pytest.mark.parametrize("follow", [True, False])
def test_the_plan_sends_leaving_jobs_again_only_when_following_the_cluster(follow):
    from disquepy.client import LeavingError
    from disquepy.client.addjobs import Send, plan

    p = plan([b"cmd-a", b"cmd-b"], sticky=True, follow=follow)
    first = next(p)
    assert first == Send([b"cmd-a", b"cmd-b"], True)
    leaving = LeavingError("LEAVING node is leaving", "LEAVING")
    try:
        again = p.send([b"D-1", leaving])
    except StopIteration as done:
        assert not follow and done.value == ["D-1", leaving]
    else:
        assert follow and again == Send([b"cmd-b"], True)
        with pytest.raises(StopIteration) as done:
            p.send([b"D-2"])
        assert done.value.value == ["D-1", "D-2"]
