"""The bus proxy on a real 3-node cluster: nodes know each other only by their
aliases, a partition through the proxy really cuts a node off (the others see it
fail), and the heal brings it back."""

from __future__ import annotations

import asyncio
import random

import pytest

from disquepy.chaos.cluster import Cluster
from disquepy.chaos.proxy import BusProxy, alias


async def _prio_of(c: Cluster, observer: int, target: int) -> bytes | None:
    h = await c.hello(observer)
    if h is None:
        return None
    want = c.ids[target].encode()
    return next((e[3] for e in h[2:] if e[0] == want), None)


async def _wait(pred, timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await pred():
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.mark.timeout(120)
def test_partition_through_the_proxy_cuts_a_node_off_and_heal_restores_it(tmp_path):
    async def scenario():
        c = Cluster(tmp_path, 3, node_timeout=1000)
        px = BusProxy(c.ports, random.Random(1))
        try:
            await px.start()
            await c.start_all()
            await c.join()
            assert await c.wait_converged(20)
            addrs = await c.addresses()
            assert all(set(a) == {alias(0), alias(1), alias(2)} for a in addrs.values())
            forwarded = px.stats.forwarded
            assert forwarded > 0  # every bus frame so far went through the proxy

            # isolate node 2 (blackhole both ways): 0 and 1 must see it fail
            px.partition({(2, 0), (2, 1), (0, 2), (1, 2)}, reset=False)

            async def both_see_2_down():
                p0, p1 = await _prio_of(c, 0, 2), await _prio_of(c, 1, 2)
                return p0 not in (None, b"1") and p1 not in (None, b"1")

            assert await _wait(both_see_2_down, 20)
            assert await _prio_of(c, 0, 1) == b"1"  # the rest still talk
            assert px.stats.dropped_partition > 0

            px.heal()
            assert await c.wait_converged(30)
            assert px.stats.forwarded > forwarded
        finally:
            c.stop_all()
            px.close()

    asyncio.run(scenario())
