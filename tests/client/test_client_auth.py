"""The client library as an ACL user, over mutual TLS (a real node with users per role)."""

from __future__ import annotations

import asyncio

import pytest
import redis
from support import ROLE_USERS

from disquepy.client import AsyncDisque, Disque, NoPermissionError


def tls_kw(s) -> dict:
    return {"ssl": True, "ssl_ca_certs": s.tls["cacert"], "ssl_certfile": s.tls["cert"],
            "ssl_keyfile": s.tls["key"]}


def as_user(s, name: str, cls=Disque, **kw):
    return cls([f"127.0.0.1:{s.tls_port}"], username=name, password=ROLE_USERS[name][0],
               **tls_kw(s), **kw)


def test_roles_through_the_sync_client_over_tls(secure_server):
    s = secure_server
    with as_user(s, "producer") as prod, as_user(s, "consumer") as cons, \
            as_user(s, "viewer") as view:
        ids = [prod.add_job("work", f"job {n}") for n in range(5)]
        assert view.qlen("work") == 5
        with pytest.raises(NoPermissionError) as e:
            prod.get_jobs("work", timeout_ms=100)
        assert e.value.code == "NOPERM"
        assert str(e.value) == "User producer has no permissions to run the 'getjob' command"
        with pytest.raises(NoPermissionError):
            view.add_job("work", "x")
        jobs = cons.get_jobs("work", count=5, timeout_ms=1000)
        assert [j.id for j in jobs] == ids
        assert cons.ack(*ids) == 5
        assert view.qlen("work") == 0
    # the default user by requirepass alone (no username), over the plain port
    with Disque([f"127.0.0.1:{s.port}"], password="defaultpw") as c:
        assert c.qlen("work") == 0
    with pytest.raises(redis.AuthenticationError):
        Disque([f"127.0.0.1:{s.port}"], username="producer", password="nope").qlen("x")


def test_roles_through_the_async_client_over_tls(secure_server):
    s = secure_server

    async def main():
        async with as_user(s, "producer", AsyncDisque) as prod, \
                as_user(s, "consumer", AsyncDisque) as cons:
            jid = await prod.add_job("aq", "body")
            with pytest.raises(NoPermissionError):
                await cons.add_job("aq", "x")
            (job,) = await cons.get_jobs("aq", timeout_ms=1000)
            assert job.id == jid and job.body == b"body"
            assert await cons.ack(jid) == 1

    asyncio.run(main())
