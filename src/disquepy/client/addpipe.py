"""Commands pipelined on redis-py connections as they come: what
:meth:`~disquepy.client.AsyncDisque.add_job_pipelined` writes its ADDJOBs on.

The commands waiting are written together on a connection of the pool, without
waiting for the replies to earlier ones, by one task per connection that also reads
the replies in order (redis-py's parser) and hands each to its caller; commands that
come meanwhile go out with the next write. A command
goes on the first connection whose oldest unanswered command is younger than ``SLOW``,
so a node that answers at once gets them all on one connection, while a connection held
up (a node answers a connection's commands in order, and a synchronous ADDJOB holds the
ones behind it until its copies exist) gets company, up to ``MAX_CONNS``. One timer per
connection watches its oldest command: no reply within ``timeout`` fails the connection
and every command on it (the caller decides what to retry).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import redis.asyncio as aredis
import redis.exceptions as rexc

_NET_ERRORS = (rexc.ConnectionError, rexc.TimeoutError, asyncio.TimeoutError, OSError)


class _Lane:
    """One connection: the commands written in batches, the replies read in order, by
    one task while there is something to do."""

    def __init__(self, conn: Any, timeout: float | None) -> None:
        self.conn = conn  # a redis.asyncio Connection of the pool
        self.timeout = timeout
        self.waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self.out: list[list[Any]] = []  # commands not written yet
        self.task: asyncio.Task[None] | None = None  # writing and reading (_run)
        self.timer: asyncio.TimerHandle | None = None
        self.failed: BaseException | None = None

    def send(self, args: list[Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.waiting.append((fut, loop.time()))
        self.out.append(args)
        if self.timer is None and self.timeout is not None:
            self.timer = loop.call_later(self.timeout, self._check)
        if self.task is None:  # it starts next iteration: with this iteration's commands
            self.task = asyncio.ensure_future(self._run())
        return fut

    async def _run(self) -> None:
        """Write what waits to be written, read one reply, again, until every command
        written is answered. Commands that come while a reply is awaited are written
        after it: the node would not run them before it anyway (it answers a
        connection's commands in order)."""
        unread = 0  # written, not answered yet
        try:
            while self.failed is None:
                if self.out:
                    out, self.out = self.out, []
                    await self.conn.send_packed_command(self.conn.pack_commands(out), False)
                    unread += len(out)
                if not unread:
                    break
                try:
                    reply: Any = await self.conn.read_response()
                except rexc.ResponseError as e:
                    reply = e
                unread -= 1
                fut = self.waiting.popleft()[0]
                if not fut.done():
                    if isinstance(reply, rexc.ResponseError):
                        fut.set_exception(reply)
                    else:
                        fut.set_result(reply)
        except _NET_ERRORS as e:
            self.fail(e)
        finally:
            self.task = None
            if self.out and self.failed is None:  # sent while this one was ending
                self.task = asyncio.ensure_future(self._run())

    def _check(self) -> None:
        self.timer = None
        if not self.waiting or self.failed is not None:
            return
        loop = asyncio.get_running_loop()
        assert self.timeout is not None
        late = self.waiting[0][1] + self.timeout - loop.time()
        if late <= 0:  # no reply in time: the replies after it can no longer be matched
            self.fail(rexc.TimeoutError(f"no reply within {self.timeout} s"))
        else:
            self.timer = loop.call_later(late, self._check)

    def fail(self, exc: BaseException) -> None:
        if self.failed is None:
            self.failed = exc
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        while self.waiting:
            fut = self.waiting.popleft()[0]
            if not fut.done():
                fut.set_exception(exc)
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()


class AddPipe:
    """Pipelined commands on up to ``MAX_CONNS`` connections of ``pool``."""

    SLOW = 0.002  # seconds: a connection whose oldest command waits longer is held up
    MAX_CONNS = 16

    def __init__(self, pool: aredis.ConnectionPool, timeout: float | None) -> None:
        self.pool = pool
        self.timeout = timeout
        self.lanes: list[_Lane] = []
        self._opening: asyncio.Future[_Lane] | None = None  # a connection being made: shared

    async def call(self, args: list[Any]) -> Any:
        """The reply to ``args`` (an error reply raised as ``redis.ResponseError``);
        a connection error or timeout when none came."""
        return await (await self._lane()).send(args)

    async def _lane(self) -> _Lane:
        lanes = self.lanes
        if lanes:
            now = asyncio.get_running_loop().time()
            for lane in lanes:
                if lane.failed is None and (not lane.waiting
                                            or now - lane.waiting[0][1] < self.SLOW):
                    return lane
            for lane in [x for x in lanes if x.failed is not None]:
                lanes.remove(lane)
                await self._drop(lane)
            if len(lanes) >= self.MAX_CONNS:
                return min(lanes, key=lambda x: len(x.waiting))
        if self._opening is not None:  # another call is opening one: take it too
            return await asyncio.shield(self._opening)
        opening = self._opening = asyncio.get_running_loop().create_future()
        try:
            conn = await self.pool.get_connection()
            lane = _Lane(conn, self.timeout)  # connected
        except BaseException as e:
            opening.set_exception(e)
            opening.exception()  # retrieved: no "never retrieved" warning
            raise
        finally:
            self._opening = None
        lanes.append(lane)
        opening.set_result(lane)
        return lane

    async def _drop(self, lane: _Lane) -> None:
        await lane.conn.disconnect()
        await self.pool.release(lane.conn)

    async def close(self) -> None:
        for lane in self.lanes:
            lane.fail(rexc.ConnectionError("closed"))
            await self._drop(lane)
        self.lanes = []
        await self.pool.disconnect()
