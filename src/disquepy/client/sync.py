"""The synchronous, cluster-aware Disque client, on redis-py's connection pools."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import redis
import redis.exceptions as rexc
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import addjobs
from ._commands import Commands, Parser, raw
from .addjobs import TRYAGAIN_LIMIT, TRYAGAIN_SLEEP
from .args import Arg, command_name, jscan_args, qscan_args
from .batch import encode_many, round_trip
from .errors import (
    FAILOVER_CODES,
    LeavingError,
    NoNodesError,
    ResponseError,
    TryAgainError,
    convert_error,
)
from .jobstatus import CancelResult, JobStatus, cancel_job, job_status, wait_job
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

log = logging.getLogger("disquepy.client")

T = TypeVar("T")

_NET_ERRORS = (rexc.ConnectionError, rexc.TimeoutError)


class Disque(Commands):
    """A Disque client, cluster-aware as the Disque spec asks of client libraries.

    ``nodes`` is a seed list (``"host:port"`` or ``(host, port)``). On first use the client
    connects to a seed (in random order, skipping those that refuse), runs ``HELLO`` to
    learn every node and its priority, and moves to the best-priority node. On a
    connection error (or ``-LEAVING``) it marks the node, reconnects to the next best node
    and runs the command again — so a command can run twice when the connection broke
    after the node executed it (an ADDJOB may then add two jobs: Disque is at-least-once;
    use ``idempotent=`` to make that safe).

    ``affinity=True`` makes the client follow the jobs it receives: it counts them by the
    node that created them (the ID prefix) and moves its connection to the node producing
    most of them (see :class:`Affinity` for the hysteresis). ``decode_bodies=True`` gives
    ``str`` bodies. Thread-safe: each thread borrows its own connection from the pool.

    ``socket_timeout`` (default none) also bounds blocking GETJOBs: with one set, give
    ``get_jobs`` a ``timeout_ms`` below it, or a quiet queue reads as a dead node.
    A seed that HELLO shows with a worse priority than another node (a leaving node)
    is left for the better one at connect time.

    ``password`` authenticates every connection (``AUTH password``: the server's
    ``requirepass``); with ``username`` as that ACL user (``AUTH username password``),
    whose role decides what the client may run (docs/SECURITY.md).

    ``ssl=True`` connects over TLS (the servers' ``tls-port``; a cluster with
    ``tls-cluster yes`` lists those ports in HELLO): ``ssl_ca_certs`` is the CA file
    that verifies the servers (the system's CAs when None), ``ssl_certfile`` and
    ``ssl_keyfile`` the client certificate a server with ``tls-auth-clients yes``
    asks for; ``ssl_check_hostname=False`` skips the host-name check of the
    server's certificate (the chain is still verified).
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
        self._lock = threading.RLock()
        self._clients: dict[Address, redis.Redis] = {}
        self._r: redis.Redis | None = None
        self._addr: Address | None = None
        self._my_id: str | None = None
        self._pending_move: Address | None = None
        self.moves = 0  # how many times the client changed node (failover or affinity)

    # ------------------------------------------------------------------ connections

    def _client_for(self, addr: Address) -> redis.Redis:
        r = self._clients.get(addr)
        if r is not None:
            return r
        with self._lock:  # threads asking for the same new node share one pool
            return self._clients.get(addr) or self._new_client(addr)

    def _new_client(self, addr: Address) -> redis.Redis:
        r = redis.Redis(host=addr[0], port=addr[1], username=self._username,
                        password=self._password, socket_timeout=self._socket_timeout,
                        socket_connect_timeout=self._connect_timeout, protocol=2,
                        retry=Retry(NoBackoff(), 0), max_connections=self._max_connections,
                        **self._tls)
        r.response_callbacks.pop("INFO", None)  # our parser keeps strings as strings
        self._clients[addr] = r
        return r

    def _try(self, addr: Address) -> tuple[redis.Redis, Hello] | None:
        """Connect to ``addr`` and HELLO; ``None`` (node marked failed) if it does not answer."""
        r = self._client_for(addr)
        try:
            reply = r.execute_command("HELLO")
        except rexc.AuthenticationError:
            raise
        except rexc.ResponseError as e:
            err = convert_error(e)
            if err.code in ("NOAUTH", "WRONGPASS"):
                raise err from None
            log.debug("node %s answered HELLO with %s", fmt_addr(addr), err)
            self.topology.mark_failed(addr)
            return None
        except (*_NET_ERRORS, OSError) as e:
            log.debug("node %s unreachable: %s", fmt_addr(addr), e)
            self.topology.mark_failed(addr)
            r.connection_pool.disconnect()
            return None
        hello = parse_hello(reply, addr)
        self.topology.mark_ok(addr)
        self.topology.update(hello)
        return r, hello

    def _connect(self, prefer: Address | None = None) -> redis.Redis:
        """Pick and connect to a node (``prefer`` first, then by priority); sets current."""
        with self._lock:
            cands = self.topology.candidates(self._shuffle)
            if prefer is not None:
                cands = [prefer] + [a for a in cands if a != prefer]
            for addr in cands:
                got = self._try(addr)
                if got is None:
                    continue
                r, hello = got
                if prefer is None:
                    # HELLO may reveal a better node (e.g. this one is leaving): one hop
                    best = self.topology.candidates(self._shuffle)[0]
                    if (best != addr and self.topology.priority_of(best)
                            < self.topology.priority_of(addr)):
                        moved = self._try(best)
                        if moved is not None:
                            addr, (r, hello) = best, moved
                self._set_current(addr, r, hello)
                return r
            raise NoNodesError("no Disque node reachable (tried "
                               + ", ".join(fmt_addr(a) for a in cands) + ")")

    def _set_current(self, addr: Address, r: redis.Redis, hello: Hello) -> None:
        if self._addr is not None and self._addr != addr:
            self.moves += 1
            log.info("disque client now on %s (was %s)", fmt_addr(addr), fmt_addr(self._addr))
        self._addr = addr
        self._my_id = hello.my_id
        self._r = r

    def connect(self) -> Disque:
        """Connect now (otherwise the first command does); returns ``self``."""
        self._ensure()
        return self

    def _ensure(self) -> redis.Redis:
        with self._lock:
            return self._r if self._r is not None else self._connect()

    def _prepare(self) -> redis.Redis:
        move = self._pending_move
        if move is not None:
            self._pending_move = None
            with self._lock:
                if move != self._addr:
                    got = self._try(move)
                    if got is not None:
                        self._set_current(move, *got)
        return self._ensure()

    @property
    def node(self) -> str:
        """``"host:port"`` of the node the client uses now."""
        self._ensure()
        assert self._addr is not None  # set by _ensure
        return fmt_addr(self._addr)

    @property
    def node_id(self) -> str:
        """The ID of the node the client uses now."""
        self._ensure()
        assert self._my_id is not None  # set by _ensure
        return self._my_id

    def close(self) -> None:
        """Close every connection."""
        with self._lock:
            for r in self._clients.values():
                r.close()
                r.connection_pool.disconnect()
            self._clients.clear()
            self._r = None

    def __enter__(self) -> Disque:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ running commands

    def _run(self, args: list[Arg], parser: Parser[T]) -> T:
        r = self._r
        if r is None or self._pending_move is not None:
            r = self._prepare()
        try:
            reply = r.execute_command(*args)
        except (rexc.ResponseError, *_NET_ERRORS) as e:
            return self._recover(args, parser, e, r)
        return parser(reply)

    def _recover(self, args: list[Arg], parser: Parser[T], exc: Exception, r: redis.Redis
                 ) -> T:
        """Error path of ``_run``: -TRYAGAIN waits, -LEAVING and connection errors fail over."""
        sticky = "IDEMPOTENT" in args or "TOKEN" in args
        tries = 0
        limit = 2 * len(self.topology.candidates(False)) + 2
        while True:
            if isinstance(exc, rexc.AuthenticationError):
                raise exc
            if isinstance(exc, rexc.ResponseError):
                err = convert_error(exc)
                if isinstance(err, TryAgainError) and tries < TRYAGAIN_LIMIT:
                    time.sleep(TRYAGAIN_SLEEP)
                elif err.code in FAILOVER_CODES and tries < limit:
                    r = self._failover(r, leaving=True, sticky=False)
                else:
                    raise err from None
            else:
                if tries >= limit:
                    raise NoNodesError(f"{command_name(args)} failed on every node: {exc}") from exc
                log.warning("disque node %s failed (%s); failing over",
                            fmt_addr(self._addr) if self._addr else "?", exc)
                r = self._failover(r, leaving=False, sticky=sticky and tries == 0)
            tries += 1
            try:
                reply = r.execute_command(*args)
            except (rexc.ResponseError, *_NET_ERRORS) as e:
                exc = e
                continue
            return parser(reply)

    def _failover(self, failed: redis.Redis, *, leaving: bool, sticky: bool) -> redis.Redis:
        with self._lock:
            if self._r is not None and self._r is not failed:
                return self._r  # another thread already moved
            addr = self._addr
            self._r = None
            if sticky and addr is not None:
                return self._connect(prefer=addr)
            if addr is not None:
                if leaving:
                    self.topology.mark_leaving(addr)
                else:
                    self.topology.mark_failed(addr)
                    client = self._clients.get(addr)  # gone if close() ran meanwhile
                    if client is not None:
                        client.connection_pool.disconnect()
            return self._connect()

    # ------------------------------------------------------------------ parsers with state

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

    # ------------------------------------------------------------------ multi-step commands

    def qscan(self, *, count: int | None = None, busyloop: bool = False,
              minlen: int | None = None, maxlen: int | None = None,
              importrate: int | None = None) -> Iterator[str]:
        """QSCAN with the cursor loop hidden: yields queue names (maybe repeated)."""
        cursor = 0
        while True:
            reply = self._run(qscan_args(cursor, count, busyloop, minlen, maxlen, importrate),
                              raw)
            cursor = int(reply[0])
            for q in reply[1]:
                yield q.decode("utf-8", "surrogateescape")
            if cursor == 0:
                return

    def jscan(self, *, count: int | None = None, busyloop: bool = False,
              queue: str | None = None, state: str | Sequence[str] | None = None,
              reply: str = "id") -> Iterator[Any]:
        """JSCAN with the cursor loop hidden: yields job IDs (``reply="all"``: SHOW dicts)."""
        cursor = 0
        while True:
            res = self._run(jscan_args(cursor, count, busyloop, queue, state, reply), raw)
            cursor = int(res[0])
            for item in res[1]:
                yield item.decode("ascii") if reply == "id" else parse_show(item)
            if cursor == 0:
                return

    def wait(self, id: str, timeout: float) -> JobStatus:
        """Wait until job ``id`` ends or ``timeout`` seconds pass; what became of it
        (:class:`JobStatus`): ``completed`` (``result``: what the worker sent with its
        ack), ``failed`` (``error``), ``cancelled`` or ``expired`` — or, at the timeout,
        its status then (``queued``, ``in_progress``, ``retrying``, ... ``unknown``).

        Polls ``JOBSTATUS`` on the node that created the job (found by the ID prefix
        among the nodes HELLO lists), every 5 ms at first and backing off to 250 ms;
        while that node is unreachable or does not know the job, every node is asked
        (the copies keep the outcome too). Outcomes are kept ``job-outcome-retention``
        seconds (default one hour): a job that ended longer ago is ``unknown``, as is
        every job with a retention of 0.
        """
        self._ensure()
        return wait_job(self, id, timeout)

    def wait_for_ack(self, id: str, timeout: float) -> bool:
        """``True`` once job ``id`` completed (acknowledged by a worker); ``False`` if
        it failed, was cancelled or expired, or ``timeout`` seconds passed first.
        :meth:`wait` says which."""
        return self.wait(id, timeout).status == "completed"

    def status(self, id: str) -> JobStatus:
        """What became of job ``id``: ``queued``, ``scheduled``, ``in_progress``,
        ``retrying``, ``completed``, ``failed`` (with its error), ``cancelled``,
        ``expired`` or ``unknown``, from the nodes' JOBSTATUS (outcomes are kept
        ``job-outcome-retention`` seconds, on every node that held a copy)."""
        return job_status(self, id)

    def cancel(self, id: str) -> CancelResult:
        """Cancel job ``id`` if it is queued, scheduled or retrying (the server's CANCEL:
        it ends as cancelled on every copy); an in-progress or finished job is not
        cancelled and the result says why."""
        return cancel_job(self, id)

    def execute_on(self, node: NodeSpec, *args: Any) -> Any:
        """A raw command on one given node (``"host:port"``), without failover; e.g. a
        WORKING or SHOW for a job on the node that holds it."""
        addr = parse_address(node)
        try:
            return self._client_for(addr).execute_command(*args)
        except rexc.ResponseError as e:
            raise convert_error(e) from None

    def execute_many_on(self, node: NodeSpec, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Raw commands on one given node in one round trip, without failover; replies
        in order, error replies as :class:`ResponseError` instances (not raised)."""
        p = self._client_for(parse_address(node)).pipeline(transaction=False)
        for args in commands:
            p.execute_command(*args)
        try:
            replies = p.execute(raise_on_error=False)
        finally:
            p.reset()
        return [convert_error(r) if isinstance(r, rexc.ResponseError) else r for r in replies]

    def borrow_connection(self) -> Any:
        """A connection to the current node, taken out of its pool, for a caller that
        sends a command and reads the reply itself, later: an event loop that waits on a
        blocking GETJOB's socket (the kombu transport). Give it back with
        :meth:`return_connection`."""
        return self._prepare().connection_pool.get_connection()

    def return_connection(self, conn: Any, failed: bool = False) -> None:
        """Give back a connection from :meth:`borrow_connection`. ``failed=True``: it
        broke (the node is marked failed and the client moves to another node, as after
        a failed command). A connection with a command still in flight must be
        disconnected first (its reply would be read by the next borrower)."""
        addr = (conn.host, conn.port)
        r = self._clients.get(addr)
        if failed:
            conn.disconnect()
        if r is not None:
            r.connection_pool.release(conn)
        else:
            conn.disconnect()
        if failed:
            with self._lock:
                if self._addr == addr and self._r is not None:
                    self._failover(self._r, leaving=False, sticky=False)

    def pipeline(self) -> Pipeline:
        """A pipeline: queue commands, ``execute()`` sends them in one round trip and
        returns the replies in order (errors as exception instances)."""
        return Pipeline(self)

    def add_jobs(self, jobs: Iterable[Any], bodies: Iterable[bytes | str] | None = None, *,
                 idempotent: Sequence[str | bytes | None] | None = None,
                 node: NodeSpec | None = None, **options: Any) -> list[str | ResponseError]:
        """Many ADDJOBs in one round trip (per 1000 jobs): ``add_jobs("q", bodies)`` adds
        each body to queue ``q``; ``add_jobs([("q1", b1), ("q2", b2, {"delay": 5})])``
        adds jobs to their own queues with their own options. ``options`` are
        :meth:`add_job`'s keywords (``timeout_ms``, ``replicate``, ``delay``, ``retry``,
        ``ttl``, ``maxlen``, ``async_``) for every job; ``idempotent`` gives one key per
        job (``None`` for a job without), or put ``"idempotent"`` in a job's options.

        Returns one result per job, in order: its ID, or the error the node answered
        for it (a :class:`ResponseError` instance, e.g. ``PausedError``, not raised).
        Jobs answered ``-TRYAGAIN`` are sent again 50 ms later (up to 100 times), as
        :meth:`add_job` does. After a connection error the batch is sent again, on
        another node (first on the same node when every job has a key, so none is
        added twice; without keys a job may then be added twice, as with
        :meth:`add_job`); a ``-LEAVING`` answer moves the client and those jobs are sent
        again. Raises :class:`NoNodesError` when no node takes the batch.

        ``node="host:port"`` binds the batch to that node, whatever node the client
        uses: no failover, a connection error is raised (redis-py's
        ``ConnectionError``) and a ``-LEAVING`` answer is that job's result. For a
        writer that retries a failed batch itself, on the same node with the same
        idempotency keys (keys are deduplicated per node), as the Spark connector does.
        """
        queue, items = add_jobs_form(jobs, bodies)
        cmds, sticky = addjobs.commands(items, queue, idempotent, options)
        return self._add(addjobs.plan(cmds, sticky, follow=node is None),
                         None if node is None else parse_address(node))

    def _add(self, plan: Generator[addjobs.Send | addjobs.Sleep, Any, list[addjobs.Result]],
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
                time.sleep(step.seconds)
                value = None
                continue
            payload = b"".join(step.commands)
            if node is None:
                value = self._send(payload, len(step.commands), step.sticky)
            else:
                value = round_trip(self._client_for(node).connection_pool, payload,
                                   len(step.commands))

    def _execute_batch(self, queued: list[tuple[list[Arg], Parser[Any] | None]]) -> list[Any]:
        """Send ``(args, parser)`` commands in one write, their parsed replies in order
        (errors as instances), through :meth:`_send`."""
        replies = self._send(encode_many([args for args, _ in queued]), len(queued))
        return [rep if parser is None or isinstance(rep, Exception) else parser(rep)
                for (_, parser), rep in zip(queued, replies, strict=True)]

    def _send(self, payload: bytes, n: int, sticky: bool = False) -> list[Any]:
        """Send ``n`` encoded commands in one write (:func:`~disquepy.client.batch.
        round_trip`), their replies in order (errors as instances). On a connection
        error the client fails over (``sticky``: to the same node first) and the whole
        batch is sent again; a ``-LEAVING`` reply moves the client after the batch (its
        replies stand)."""
        limit = tries = 0
        while True:
            r = self._prepare()
            try:
                replies = round_trip(r.connection_pool, payload, n)
            except rexc.AuthenticationError:
                raise
            except _NET_ERRORS as e:
                if not tries:  # how many tries: only worked out when one failed
                    limit = 2 * len(self.topology.candidates(False)) + 2
                if tries >= limit:
                    raise NoNodesError(f"pipeline failed on every node: {e}") from e
                log.warning("disque node %s failed (%s); failing over",
                            fmt_addr(self._addr) if self._addr else "?", e)
                self._failover(r, leaving=False, sticky=sticky and tries == 0)
                tries += 1
                continue
            if any(type(rep) is LeavingError for rep in replies):
                self._failover(r, leaving=True, sticky=False)  # next commands elsewhere
            return replies


class Pipeline(Commands):
    """Commands queued on a :class:`Disque` and sent together by :meth:`execute`.

    Methods return the pipeline (so calls chain). ``execute()`` returns the parsed replies
    in order; error replies come back as :class:`ResponseError` instances, not raised. On
    a connection error the client fails over and sends the whole batch again (commands
    that had run may run twice).
    """

    def __init__(self, client: Disque) -> None:
        self._client = client
        self._decode_bodies = client._decode_bodies
        self._queued: list[tuple[list[Arg], Parser[Any] | None]] = []

    # (queues the command: every command method returns the pipeline, see Commands)
    def _run(self, args: list[Arg], parser: Parser[Any] | None  # type: ignore[override]
             ) -> Pipeline:
        self._queued.append((args, parser))
        return self

    def _parse_jobs(self, reply: Any) -> list[Job]:
        return parse_jobs(reply, self._decode_bodies)

    def _parse_hello(self, reply: Any) -> Hello:
        return parse_hello(reply)

    def __len__(self) -> int:
        return len(self._queued)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self._queued.clear()

    def execute(self) -> list[Any]:
        """Send the queued commands; their replies in order (errors as instances)."""
        queued, self._queued = self._queued, []
        if not queued:
            return []
        return self._client._execute_batch(queued)


def add_jobs_form(jobs: Any, bodies: Any) -> tuple[str | None, Iterable[Any]]:
    """``add_jobs``'s two forms: ``(queue, bodies)`` or ``(jobs)``."""
    if isinstance(jobs, str):
        if bodies is None:
            raise TypeError("add_jobs(queue, bodies): the bodies are missing")
        return jobs, bodies
    if bodies is not None:
        raise TypeError("add_jobs(queue, bodies) takes the queue name (str) first")
    return None, jobs


__all__ = ["Disque", "Pipeline", "ResponseError"]
