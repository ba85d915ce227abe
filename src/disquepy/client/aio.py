"""The asyncio Disque client: :class:`Disque`'s behaviour on ``redis.asyncio``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Generator, Iterable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from . import addjobs
from ._commands import Commands, Parser, raw
from .addjobs import TRYAGAIN_LIMIT, TRYAGAIN_SLEEP
from .args import Arg, command_name, jscan_args, qscan_args
from .batch import Wire, encode_many
from .errors import (
    FAILOVER_CODES,
    LeavingError,
    NoNodesError,
    ResponseError,
    TryAgainError,
    convert_error,
)
from .jobstatus import CancelResult, JobStatus, arun, cancel_plan, status_plan, wait_plan
from .nodes import (
    Address,
    Affinity,
    Hello,
    NodeSpec,
    Topology,
    fmt_addr,
    parse_address,
    parse_hello,
    parse_nodes,
    tls_options,
)
from .replies import Job, parse_jobs, parse_show
from .sync import add_jobs_form

log = logging.getLogger("disquepy.client")

T = TypeVar("T")

_NET_ERRORS = (rexc.ConnectionError, rexc.TimeoutError, asyncio.TimeoutError)


class AsyncDisque(Commands):
    """The asyncio twin of :class:`~disquepy.client.Disque`: the same constructor, the same
    methods (awaitable), the same cluster behaviour (HELLO, priority, failover on
    connection errors and ``-LEAVING``, affinity), on ``redis.asyncio`` pools.

    ``qscan``/``jscan`` are async iterators (``async for q in c.qscan(): ...``);
    ``async with AsyncDisque(...) as c:`` closes it at the end.
    """

    def __init__(self, nodes: NodeSpec | Sequence[NodeSpec] | None = None, *,
                 password: str | None = None, username: str | None = None,
                 socket_timeout: float | None = None,
                 affinity: bool = False, decode_bodies: bool = False,
                 socket_connect_timeout: float = 2.0, shuffle: bool = True,
                 affinity_window: int = 32, affinity_ratio: float = 2.0,
                 max_connections: int | None = None, ssl: bool = False,
                 ssl_ca_certs: str | None = None, ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None, ssl_check_hostname: bool = True) -> None:
        self._seeds = parse_nodes(nodes)
        self._password = password
        self._username = username  # an ACL user (AUTH username password); None: default
        self._tls = tls_options(ssl, ssl_ca_certs, ssl_certfile, ssl_keyfile,
                                ssl_check_hostname)
        self._socket_timeout = socket_timeout
        self._connect_timeout = socket_connect_timeout
        self._decode_bodies = decode_bodies
        self._shuffle = shuffle
        self._max_connections = max_connections
        self.topology = Topology(self._seeds)
        self._affinity = Affinity(affinity_window, affinity_ratio) if affinity else None
        self._lock: asyncio.Lock | None = None
        self._clients: dict[Address, aredis.Redis] = {}
        self._r: aredis.Redis | None = None
        self._addr: Address | None = None
        self._my_id: str | None = None
        self._pending_move: Address | None = None
        self.moves = 0
        self._wires: dict[Address, Wire] = {}  # batches and ADDJOBs, per node

    # ------------------------------------------------------------------ connections

    def _get_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _client_for(self, addr: Address) -> aredis.Redis:
        r = self._clients.get(addr)
        if r is None:
            r = aredis.Redis(host=addr[0], port=addr[1], username=self._username,
                             password=self._password,
                             socket_timeout=self._socket_timeout,
                             socket_connect_timeout=self._connect_timeout, protocol=2,
                             retry=Retry(NoBackoff(), 0),
                             max_connections=self._max_connections, **self._tls)
            r.response_callbacks.pop("INFO", None)
            self._clients[addr] = r
        return r

    async def _try(self, addr: Address) -> tuple[aredis.Redis, Hello] | None:
        r = self._client_for(addr)
        try:
            reply = await r.execute_command("HELLO")
        except rexc.AuthenticationError:
            raise
        except rexc.ResponseError as e:
            err = convert_error(e)
            if err.code in ("NOAUTH", "WRONGPASS"):
                raise err from None
            self.topology.mark_failed(addr)
            return None
        except (*_NET_ERRORS, OSError) as e:
            log.debug("node %s unreachable: %s", fmt_addr(addr), e)
            self.topology.mark_failed(addr)
            await r.connection_pool.disconnect()
            return None
        hello = parse_hello(reply, addr)
        self.topology.mark_ok(addr)
        self.topology.update(hello)
        return r, hello

    async def _connect_locked(self, prefer: Address | None = None) -> aredis.Redis:
        cands = self.topology.candidates(self._shuffle)
        if prefer is not None:
            cands = [prefer] + [a for a in cands if a != prefer]
        for addr in cands:
            got = await self._try(addr)
            if got is None:
                continue
            r, hello = got
            if prefer is None:
                best = self.topology.candidates(self._shuffle)[0]
                if (best != addr and self.topology.priority_of(best)
                        < self.topology.priority_of(addr)):
                    moved = await self._try(best)
                    if moved is not None:
                        addr, (r, hello) = best, moved
            self._set_current(addr, r, hello)
            return r
        raise NoNodesError("no Disque node reachable (tried "
                           + ", ".join(fmt_addr(a) for a in cands) + ")")

    def _set_current(self, addr: Address, r: aredis.Redis, hello: Hello) -> None:
        if self._addr is not None and self._addr != addr:
            self.moves += 1
            log.info("disque client now on %s (was %s)", fmt_addr(addr), fmt_addr(self._addr))
        self._addr = addr
        self._my_id = hello.my_id
        self._r = r

    async def connect(self) -> AsyncDisque:
        """Connect now (otherwise the first command does); returns ``self``."""
        await self._ensure()
        return self

    async def _ensure(self) -> aredis.Redis:
        async with self._get_lock():
            return self._r if self._r is not None else await self._connect_locked()

    async def _prepare(self) -> aredis.Redis:
        move = self._pending_move
        if move is not None:
            self._pending_move = None
            async with self._get_lock():
                if move != self._addr:
                    got = await self._try(move)
                    if got is not None:
                        self._set_current(move, *got)
        return await self._ensure()

    @property
    def node(self) -> str | None:
        """``"host:port"`` of the node in use (``None`` before the first command)."""
        return fmt_addr(self._addr) if self._addr is not None else None

    @property
    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the node in use (``None`` before the first command)."""
        return self._addr

    @property
    def node_id(self) -> str | None:
        """The ID of the node in use (``None`` before the first command)."""
        return self._my_id

    async def close(self) -> None:
        """Close every connection."""
        for r in self._clients.values():
            await r.aclose()
            await r.connection_pool.disconnect()
        self._clients.clear()
        for wire in self._wires.values():
            await wire.close()
        self._wires.clear()
        self._r = None

    async def __aenter__(self) -> AsyncDisque:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ running commands

    # (the commands' results, awaitable: see Commands)
    async def _run(  # type: ignore[override]
            self, args: list[Arg], parser: Parser[T]) -> T:
        r = self._r
        if r is None or self._pending_move is not None:
            r = await self._prepare()
        try:
            reply = await r.execute_command(*args)
        except (rexc.ResponseError, *_NET_ERRORS) as e:
            return await self._recover(args, parser, e, r)
        return parser(reply)

    async def _recover(self, args: list[Arg], parser: Parser[T], exc: BaseException,
                       r: aredis.Redis) -> T:
        sticky = "IDEMPOTENT" in args or "TOKEN" in args
        tries = 0
        limit = 2 * len(self.topology.candidates(False)) + 2
        while True:
            if isinstance(exc, rexc.AuthenticationError):
                raise exc
            if isinstance(exc, rexc.ResponseError):
                err = convert_error(exc)
                if isinstance(err, TryAgainError) and tries < TRYAGAIN_LIMIT:
                    await asyncio.sleep(TRYAGAIN_SLEEP)
                elif err.code in FAILOVER_CODES and tries < limit:
                    r = await self._failover(r, leaving=True, sticky=False)
                else:
                    raise err from None
            else:
                if tries >= limit:
                    raise NoNodesError(f"{command_name(args)} failed on every node: {exc}") from exc
                log.warning("disque node %s failed (%s); failing over",
                            fmt_addr(self._addr) if self._addr else "?", exc)
                r = await self._failover(r, leaving=False, sticky=sticky and tries == 0)
            tries += 1
            try:
                reply = await r.execute_command(*args)
            except (rexc.ResponseError, *_NET_ERRORS) as e:
                exc = e
                continue
            return parser(reply)

    async def _failover(self, failed: aredis.Redis, *, leaving: bool,
                        sticky: bool) -> aredis.Redis:
        async with self._get_lock():
            if self._r is not None and self._r is not failed:
                return self._r
            addr = self._addr
            self._r = None
            if sticky and addr is not None:
                return await self._connect_locked(prefer=addr)
            if addr is not None:
                if leaving:
                    self.topology.mark_leaving(addr)
                else:
                    self.topology.mark_failed(addr)
                    client = self._clients.get(addr)  # gone if close() ran meanwhile
                    if client is not None:
                        await client.connection_pool.disconnect()
            return await self._connect_locked()

    def _parse_jobs(self, reply: Any) -> list[Job]:
        jobs = parse_jobs(reply, self._decode_bodies)
        if self._affinity is not None and jobs:
            target = self._affinity.observe(jobs, self._my_id[:8] if self._my_id else None)
            if target is not None:
                addr = self.topology.address_of(target)
                if addr is not None and addr != self._addr:
                    log.info("affinity: moving to %s (node %s produces most jobs)",
                             fmt_addr(addr), target)
                    self._pending_move = addr
        return jobs

    def _parse_hello(self, reply: Any) -> Hello:
        hello = parse_hello(reply, self._addr)
        self.topology.update(hello)
        return hello

    # ------------------------------------------------------------------ ADDJOB, batched

    # the ignore below: Commands' methods are typed as the sync client's; this is awaited
    async def add_job(self, queue: str, body: bytes | str,  # type: ignore[override]
                      timeout_ms: int = 0, *,
                      replicate: int | None = None, delay: int | None = None,
                      retry: int | None = None, ttl: int | None = None,
                      maxlen: int | None = None, async_: bool = False,
                      idempotent: str | bytes | None = None) -> str:
        """ADDJOB, as :meth:`disquepy.client.Disque.add_job`; returns the job ID.

        Sent the way :meth:`add_jobs` sends a batch (:class:`~disquepy.client.batch.
        Wire`): the ADDJOBs of the coroutines calling this during one event-loop
        iteration (a server answering many producers at once, as disque-web's
        ``POST /jobs``) go out in one write, each getting its own reply. The same rules
        as :meth:`add_jobs` for one job: ``-TRYAGAIN`` sent again 50 ms later, failover
        on ``-LEAVING`` and connection errors (to the same node first for an
        ``idempotent`` add); an error the node answers for the job is raised."""
        cmd = addjobs.encode(queue, body, timeout_ms, replicate, delay, retry, ttl, maxlen,
                             async_, idempotent)
        sticky = idempotent is not None
        reply = (await self._send(cmd, 1, sticky))[0]
        if type(reply) is bytes:  # the job ID: most adds end here
            return reply.decode("ascii")
        # an error: what add_jobs does with it (TRYAGAIN sent again...)
        result = (await self._add(addjobs.plan([cmd], sticky, answered=[reply]), None))[0]
        if isinstance(result, ResponseError):
            raise result
        return result

    # ------------------------------------------------------------------ multi-step commands

    async def qscan(self, *, count: int | None = None, busyloop: bool = False,
                    minlen: int | None = None, maxlen: int | None = None,
                    importrate: int | None = None) -> AsyncIterator[str]:
        """QSCAN with the cursor loop hidden: an async iterator of queue names."""
        cursor = 0
        while True:
            reply = await self._run(
                qscan_args(cursor, count, busyloop, minlen, maxlen, importrate), raw)
            cursor = int(reply[0])
            for q in reply[1]:
                yield q.decode("utf-8", "surrogateescape")
            if cursor == 0:
                return

    async def jscan(self, *, count: int | None = None, busyloop: bool = False,
                    queue: str | None = None, state: str | Sequence[str] | None = None,
                    reply: str = "id") -> AsyncIterator[Any]:
        """JSCAN with the cursor loop hidden: an async iterator of job IDs (or SHOW dicts)."""
        cursor = 0
        while True:
            res = await self._run(jscan_args(cursor, count, busyloop, queue, state, reply),
                                  raw)
            cursor = int(res[0])
            for item in res[1]:
                yield item.decode("ascii") if reply == "id" else parse_show(item)
            if cursor == 0:
                return

    async def wait(self, id: str, timeout: float) -> JobStatus:
        """Wait until job ``id`` ends or ``timeout`` seconds pass; what became of it, as
        :meth:`disquepy.client.Disque.wait` (the same lookup: JOBSTATUS on the creating
        node, every node while that one is unreachable or does not know the job; a
        failed job's dead letter, a live job's body)."""
        await self._ensure()
        return await arun(self, wait_plan(self.topology, id, timeout))

    async def status(self, id: str) -> JobStatus:
        """What became of job ``id``, as :meth:`disquepy.client.Disque.status`."""
        await self._ensure()
        return await arun(self, status_plan(self.topology, id))

    async def cancel(self, id: str) -> CancelResult:
        """Cancel job ``id`` if it is queued, scheduled or retrying, as
        :meth:`disquepy.client.Disque.cancel`."""
        await self._ensure()
        return await arun(self, cancel_plan(self.topology, id))

    async def wait_for_ack(self, id: str, timeout: float) -> bool:
        """``True`` once job ``id`` completed; ``False`` if it failed, was cancelled or
        expired, or at the timeout (:meth:`wait` says which)."""
        return (await self.wait(id, timeout)).status == "completed"

    async def execute_on(self, node: NodeSpec, *args: Any) -> Any:
        """A raw command on one given node (``"host:port"``), without failover."""
        addr = parse_address(node)
        try:
            return await self._client_for(addr).execute_command(*args)
        except rexc.ResponseError as e:
            raise convert_error(e) from None

    def pipeline(self) -> AsyncPipeline:
        """A pipeline: queue commands, ``await execute()`` sends them in one round trip."""
        return AsyncPipeline(self)

    async def add_jobs(self, jobs: Iterable[Any],
                       bodies: Iterable[bytes | str] | None = None, *,
                       idempotent: Sequence[str | bytes | None] | None = None,
                       node: NodeSpec | None = None,
                       **options: Any) -> list[str | ResponseError]:
        """Many ADDJOBs in one round trip (per 1000 jobs), as
        :meth:`disquepy.client.Disque.add_jobs`: ``await c.add_jobs("q", bodies)`` or
        ``await c.add_jobs([(queue, body[, options]), ...])``; one result per job, its
        ID or the error the node answered for it (an instance, not raised); ``node``
        binds the batch to one node (no failover). Batches of concurrent callers share
        writes, as :meth:`add_job`'s do."""
        queue, items = add_jobs_form(jobs, bodies)
        cmds, sticky = addjobs.commands(items, queue, idempotent, options)
        return await self._add(addjobs.plan(cmds, sticky, follow=node is None),
                               None if node is None else parse_address(node))

    async def _add(self, plan: Generator[addjobs.Send | addjobs.Sleep, Any,
                                         list[addjobs.Result]],
                   node: Address | None) -> list[addjobs.Result]:
        """Run an :mod:`~disquepy.client.addjobs` plan: its batches through
        :meth:`_send` (or on ``node`` alone), its sleeps."""
        value: Any = None
        while True:
            try:
                step = plan.send(value)
            except StopIteration as done:
                results: list[addjobs.Result] = done.value
                return results
            if isinstance(step, addjobs.Sleep):
                await asyncio.sleep(step.seconds)
                value = None
                continue
            cmds = step.commands
            payload = cmds[0] if len(cmds) == 1 else b"".join(cmds)
            if node is None:
                value = await self._send(payload, len(cmds), step.sticky)
            else:
                value = await self._wire(node, self._client_for(node)).call(payload,
                                                                             len(cmds))

    def _wire(self, addr: Address, r: aredis.Redis) -> Wire:
        wire = self._wires.get(addr)
        if wire is None:
            pool = r.connection_pool
            # connections of their own (a lane keeps its connection; the client's pool
            # may be emptied on failover), without redis-py's timeout per read: the
            # wire has one
            kw = dict(pool.connection_kwargs, socket_timeout=None)
            wire = self._wires[addr] = Wire(
                type(pool)(connection_class=pool.connection_class,
                           max_connections=Wire.MAX_LANES, **kw),
                self._socket_timeout)
        return wire

    async def _execute_batch(self, queued: list[tuple[list[Arg], Parser[Any] | None]]) -> list[Any]:
        """:meth:`disquepy.client.Disque._execute_batch`, awaited."""
        replies = await self._send(encode_many([args for args, _ in queued]), len(queued))
        return [rep if parser is None or isinstance(rep, Exception) else parser(rep)
                for (_, parser), rep in zip(queued, replies, strict=True)]

    async def _send(self, payload: bytes, n: int, sticky: bool = False) -> list[Any]:
        """:meth:`disquepy.client.Disque._send` on the node's :class:`~disquepy.client.
        batch.Wire`: the batches of concurrent callers share writes."""
        limit = tries = 0
        while True:
            r = self._r
            if r is None or self._pending_move is not None:
                r = await self._prepare()
            addr = self._addr
            assert addr is not None  # set with self._r
            try:
                replies = await self._wire(addr, r).call(payload, n)
            except rexc.AuthenticationError:
                raise
            except _NET_ERRORS as e:
                if not tries:  # how many tries: only worked out when one failed
                    limit = 2 * len(self.topology.candidates(False)) + 2
                if tries >= limit:
                    raise NoNodesError(f"pipeline failed on every node: {e}") from e
                log.warning("disque node %s failed (%s); failing over",
                            fmt_addr(addr), e)
                await self._failover(r, leaving=False, sticky=sticky and tries == 0)
                tries += 1
                continue
            for rep in replies:
                if type(rep) is LeavingError:
                    await self._failover(r, leaving=True, sticky=False)
                    break
            return replies


class AsyncPipeline(Commands):
    """Commands queued on an :class:`AsyncDisque`, sent by ``await execute()``; replies in
    order, errors as instances (like :class:`disquepy.client.Pipeline`)."""

    def __init__(self, client: AsyncDisque) -> None:
        self._client = client
        self._decode_bodies = client._decode_bodies
        self._queued: list[tuple[list[Arg], Parser[Any] | None]] = []

    # (queues the command: every command method returns the pipeline, see Commands)
    def _run(self, args: list[Arg], parser: Parser[Any] | None  # type: ignore[override]
             ) -> AsyncPipeline:
        self._queued.append((args, parser))
        return self

    def _parse_jobs(self, reply: Any) -> list[Job]:
        return parse_jobs(reply, self._decode_bodies)

    def _parse_hello(self, reply: Any) -> Hello:
        return parse_hello(reply)

    def __len__(self) -> int:
        return len(self._queued)

    async def __aenter__(self) -> AsyncPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._queued.clear()

    async def execute(self) -> list[Any]:
        """Send the queued commands; their replies in order (errors as instances)."""
        queued, self._queued = self._queued, []
        if not queued:
            return []
        return await self._client._execute_batch(queued)
