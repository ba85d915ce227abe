"""Limits on what one request or one peer can make a node do (issue #18, items 4-5),
on real processes: each limit refuses, logs, and leaves the node serving."""

from __future__ import annotations

import signal

import pytest
import redis
from support import hello_ok, join_cluster, wait_for

AOF = ["--appendonly", "yes", "--appendfsync", "always"]


def show(c, jid) -> dict:
    r = c.execute_command("SHOW", jid)
    return dict(zip(r[::2], r[1::2], strict=True))


# ----------------------------------------------------------- 32-bit job fields
@pytest.mark.parametrize("opt", ["TTL", "RETRY", "DELAY"])
def test_addjob_refuses_seconds_past_32_bits(server, opt):
    c = server.client()
    errors = {"TTL": "TTL must be a number > 0",
              "RETRY": "RETRY time must be a non negative number",
              "DELAY": "DELAY time must be a non negative number"}
    with pytest.raises(redis.ResponseError, match=errors[opt]):
        c.execute_command("ADDJOB", "q", "b", 0, opt, 2**32)
    assert c.execute_command("QLEN", "q") == 0


def test_largest_32_bit_fields_replicate_and_survive_a_restart(server_factory):
    """What ADDJOB takes, replication and the AOF carry: the largest values reach the
    copy and come back from the file (C Disque would have truncated them)."""
    a, b = server_factory(*AOF), server_factory(*AOF)
    ca, cb = join_cluster([a, b])
    top = 2**32 - 1
    jid = ca.execute_command("ADDJOB", "q", "big", 0, "REPLICATE", 2, "TTL", top,
                             "RETRY", top, "DELAY", top - 1)
    assert show(cb, jid)[b"retry"] == top
    a.kill(signal.SIGTERM)
    a.start()
    ca = a.client()
    s = show(ca, jid)
    assert (s[b"retry"], s[b"delay"]) == (top, top - 1) and s[b"ttl"] > top - 100
    wait_for(lambda: hello_ok(ca, 2), what="the restarted node to rejoin")
