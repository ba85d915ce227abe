"""One method per Disque command, shared by :class:`Disque`, :class:`AsyncDisque` and the
pipelines: each builds the arguments and names the reply parser, then hands both to
``self._run(args, parser)`` — which runs it now (sync), returns an awaitable (asyncio) or
queues it (pipeline)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..codec.nodes import Hello
from .args import Arg, addjob_args, getjob_args, qget_args, result_args, seconds_arg, status_args
from .replies import (
    Event,
    Job,
    parse_event,
    parse_id,
    parse_info,
    parse_int,
    parse_jobs,
    parse_kv,
    parse_ping,
    parse_qstatus,
    parse_show,
    parse_str,
)

T = TypeVar("T")

# a reply parser: redis-py's reply -> the method's result
Parser = Callable[[Any], T]


def raw(reply: Any) -> Any:
    """The parser of a command whose result is redis-py's reply as it is."""
    return reply


class Commands:
    """The Disque command set. ``_run`` and ``_parse_jobs`` come from the concrete class.

    The results are typed as :class:`Disque` returns them (``_run`` runs the command);
    the asyncio client's ``_run`` returns an awaitable of that, a pipeline's itself."""

    __slots__ = ()
    _decode_bodies: bool  # (set by the concrete class)

    def _run(self, args: list[Arg], parser: Parser[T]) -> T:  # pragma: no cover
        raise NotImplementedError

    def _parse_jobs(self, reply: Any) -> list[Job]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _parse_hello(self, reply: Any) -> Hello:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- jobs

    def add_job(self, queue: str, body: bytes | str, timeout_ms: int = 0, *,
                replicate: int | None = None, delay: int | None = None,
                retry: int | None = None, ttl: int | None = None, maxlen: int | None = None,
                async_: bool = False, idempotent: str | bytes | None = None) -> str:
        """ADDJOB: add ``body`` to ``queue``; returns the job ID.

        ``timeout_ms`` bounds the wait for synchronous replication (0: no limit).
        ``delay``, ``retry`` and ``ttl`` are in seconds. ``async_=True`` replicates in the
        background. ``idempotent=key`` makes a retry with the same key on the same node
        return the first job's ID instead of adding a second job; after a connection
        error the client retries such an add on the same node first.
        """
        return self._run(addjob_args(queue, body, timeout_ms, replicate, delay, retry, ttl,
                                     maxlen, async_, idempotent), parse_id)

    def get_jobs(self, queues: str | Sequence[str], *, count: int = 1,
                 timeout_ms: int | None = None, nohang: bool = False,
                 with_counters: bool = False, token: str | bytes | None = None) -> list[Job]:
        """GETJOB: up to ``count`` jobs from ``queues`` (served left to right); ``[]`` when
        none arrived in ``timeout_ms`` (``None``: block until a job arrives; ``nohang``:
        never block). ``with_counters`` fills ``Job.nacks`` and
        ``Job.additional_deliveries``. ``token``: a retry of a GETJOB whose reply was lost,
        sent with the same token to the same node, returns the same jobs again instead of
        new ones (the client retries on the same node first after a connection error).
        """
        return self._run(getjob_args(queues, count, timeout_ms, nohang, with_counters, token),
                         self._parse_jobs)

    def ack(self, *ids: str, result: Any = None) -> int:
        """ACKJOB: acknowledge jobs (cluster-wide, replicated); returns how many were known.
        ``result`` (disquepy's ``ACKJOB ... RESULT``): kept in the jobs' outcome, which
        :meth:`status` and :meth:`wait` return; bytes and str as they are, anything else
        as JSON; the nodes keep its first 1024 bytes."""
        return self._run(["ACKJOB", *ids, *result_args(result)], parse_int)

    def ack_token(self, *tokens: str | bytes) -> int:
        """ACKTOKEN (disquepy): acknowledge every job that ``get_jobs(..., token=t)``
        delivered on the current node for each token; returns how many were acked."""
        return self._run(["ACKTOKEN", *tokens], parse_int)

    def fast_ack(self, *ids: str, result: Any = None) -> int:
        """FASTACK: best-effort cluster-wide delete; returns how many were known here.
        ``result`` as for :meth:`ack`."""
        return self._run(["FASTACK", *ids, *result_args(result)], parse_int)

    def nack(self, *ids: str, delay: int | None = None) -> int:
        """NACK: put jobs back in their queue, counting a nack; with ``delay`` (seconds,
        disquepy's NACK ... DELAY) only after it, under the same ID (a retry with
        back-off). Returns how many."""
        delay_args: list[Arg] = ["DELAY", delay] if delay else []
        return self._run(["NACK", *ids, *delay_args], parse_int)

    def fail(self, id: str, error: str = "", reason: str | None = None) -> int:
        """FAILJOB (disquepy): give up on a job: its outcome is ``failed`` with ``error``
        on every node that holds it, and it is acknowledged. ``reason`` (a word) labels
        it in the nodes' dead-lettered counts (``failed`` if not given). Returns 1, or 0
        if it had ended already; raises :class:`NoJobError` if this node does not know
        it."""
        return self._run(["FAILJOB", id, *(["ERROR", error] if error else []),
                          *(["REASON", reason] if reason else [])], parse_int)

    def job_metrics(self, *queues: str) -> list[Any]:
        """JOBMETRICS (disquepy) on one node: per-queue counters and histograms, raw."""
        return self._run(["JOBMETRICS", *queues], lambda r: r)

    def job_status(self, id: str) -> list[Any]:
        """JOBSTATUS (disquepy) on one node: the raw field/value list; see :meth:`status`
        for the cluster-wide answer."""
        return self._run(["JOBSTATUS", id], lambda r: r)

    def working(self, id: str) -> int:
        """WORKING: postpone the next delivery; returns the seconds postponed (the retry).
        Raises :class:`NoJobError` if this node does not know the job."""
        return self._run(["WORKING", id], parse_int)

    def enqueue(self, *ids: str) -> int:
        """ENQUEUE: queue jobs not already queued; returns how many were queued."""
        return self._run(["ENQUEUE", *ids], parse_int)

    def dequeue(self, *ids: str) -> int:
        """DEQUEUE: take jobs out of their queue; returns how many were dequeued."""
        return self._run(["DEQUEUE", *ids], parse_int)

    def del_job(self, *ids: str) -> int:
        """DELJOB: delete jobs from this node only; returns how many were deleted."""
        return self._run(["DELJOB", *ids], parse_int)

    def show(self, id: str) -> dict[str, Any] | None:
        """SHOW: the job's fields as a dict (keys str, ``"body"`` bytes), ``None`` if this
        node does not know it."""
        return self._run(["SHOW", id], parse_show)

    # -- queues

    def qlen(self, queue: str) -> int:
        """QLEN: jobs queued in ``queue`` on this node."""
        return self._run(["QLEN", queue], parse_int)

    def qstat(self, queue: str) -> dict[str, str | None] | None:
        """QSTAT: the queue's fields as a dict (str keys), ``None`` if it does not exist."""
        return self._run(["QSTAT", queue], parse_kv)

    def qpeek(self, queue: str, count: int) -> list[Job]:
        """QPEEK: up to ``count`` queued jobs without taking them (negative: newest first)."""
        return self._run(["QPEEK", queue, count], self._parse_jobs_plain)

    def pause(self, queue: str, *flags: str) -> str:
        """PAUSE: change or read (``"state"``) a queue's pause state; returns it
        (``"none"``, ``"in"``, ``"out"`` or ``"all"``)."""
        return self._run(["PAUSE", queue, *flags], parse_str)

    # -- consumer groups (bananaq's event queues; docs/GROUPS.md)

    def qadd(self, queue: str, body: bytes | str, expire: float, *,
             noblock: bool = False) -> str | None:
        """QADD: push an event on ``queue``, kept ``expire`` seconds; every consumer group
        gets it. Returns its ID (``None`` with ``noblock``: replicated in the background)."""
        args: list[Arg] = ["QADD", queue, seconds_arg(expire), body, *(["NOBLOCK"] if noblock else [])]
        return self._run(args, lambda r: None if noblock else parse_str(r))

    def qget(self, queue: str, group: str, *, lease: float | None = None,
             with_counters: bool = False, max_deliveries: int | None = None) -> Event | None:
        """QGET: lease ``group``'s next event of ``queue`` for ``lease`` seconds (server
        default 30; 0 acknowledges it at once): an :class:`Event`, or ``None``. With
        ``max_deliveries`` an event delivered that many times unacknowledged goes to the
        group's dead letters instead (see :meth:`qdead`)."""
        return self._run(qget_args(queue, group, lease, with_counters, max_deliveries),
                         lambda r: parse_event(r, queue, self._decode_bodies))

    def qget_many(self, queue: str, group: str, count: int, *, lease: float | None = None,
                  with_counters: bool = False,
                  max_deliveries: int | None = None) -> list[Event]:
        """QGET ... COUNT n: lease up to ``count`` of ``group``'s next events of ``queue``
        in one call (each for ``lease`` seconds, from now), oldest first; ``[]`` if
        none."""
        args = qget_args(queue, group, lease, with_counters, max_deliveries)
        return self._run([*args, "COUNT", count],
                         lambda r: [e for e in (parse_event(x, queue, self._decode_bodies)
                                                for x in r or ()) if e is not None])

    def qack(self, queue: str, group: str, id: str, *ids: str) -> int:
        """QACK: the events are done for ``group``; how many of their leases were live
        (an ID given twice counts once). One call for a batch, as Redis's XACK. With
        one ID the result is a ``bool`` (an ``int``, 1 or 0), as it always was: ``True``
        if the lease was live and the event is now done for ``group``."""
        if not ids:
            return self._run(["QACK", queue, group, id], lambda r: bool(parse_int(r)))
        return self._run(["QACK", queue, group, id, *ids], parse_int)

    def qworking(self, queue: str, group: str, id: str, *ids: str,
                 lease: float | None = None) -> int:
        """QWORKING (disquepy): still working; the leases now end ``lease`` seconds from
        now (server default 30). How many leases were live; with one ID a ``bool``
        (``False`` if the lease had run out), as :meth:`qack`."""
        args: list[Arg] = ["QWORKING", queue, group, id, *ids,
                           *(["EX", seconds_arg(lease)] if lease else [])]
        if not ids:
            return self._run(args, lambda r: bool(parse_int(r)))
        return self._run(args, parse_int)

    def qnotify(self, group: str, timeout: float, *queues: str) -> str | None:
        """QNOTIFY: the first of ``queues`` with an event available to ``group``, waiting
        up to ``timeout`` seconds (0: forever); ``None`` on timeout."""
        return self._run(["QNOTIFY", group, seconds_arg(timeout), *queues],
                         lambda r: None if r is None else parse_str(r))

    def qflush(self, queue: str) -> bool:
        """QFLUSH: drop every event of ``queue``, on every node."""
        return self._run(["QFLUSH", queue], lambda r: True)

    def qstatus(self, *queues: str, groups: Sequence[str] | None = None
                ) -> dict[str, dict[str, dict[str, int]]]:
        """QSTATUS: ``{queue: {group: {"total": n, "inprogress": n, ..., "lag": n,
        "pending": n, "oldest-pending-ms": n}}}`` (this node's view)."""
        return self._run(status_args("QSTATUS", queues, groups), parse_qstatus)

    def qinfo(self, *queues: str, groups: Sequence[str] | None = None) -> list[str]:
        """QINFO: one human-readable line per queue and group."""
        return self._run(status_args("QINFO", queues, groups),
                         lambda r: [x.decode("utf-8", "surrogateescape") for x in r])

    def qdead(self, queue: str, group: str) -> list[Event]:
        """QDEAD (disquepy): ``group``'s dead letters of ``queue`` held on this node, as
        :class:`Event` (``deliveries`` set), oldest first."""
        def events(r: Any) -> list[Event]:  # (an entry is never nil)
            return [e for x in r if (e := parse_event(x, queue, self._decode_bodies))]

        return self._run(["QDEAD", queue, group], events)

    def qrequeue(self, queue: str, group: str, *ids: str) -> int:
        """QDEAD ... REQUEUE (disquepy): give dead letters back to ``group``; how many."""
        return self._run(["QDEAD", queue, group, "REQUEUE", *ids], parse_int)

    # -- server

    def hello(self) -> Hello:
        """HELLO: :class:`Hello` (version, this node's ID, every node with its priority)."""
        return self._run(["HELLO"], self._parse_hello)

    def info(self, section: str | None = None) -> dict[str, Any]:
        """INFO: the fields as a flat dict (numbers converted)."""
        args: list[Arg] = ["INFO"] if section is None else ["INFO", section]
        return self._run(args, parse_info)

    def ping(self) -> bool:
        """PING: ``True`` when the node answers."""
        return self._run(["PING"], parse_ping)

    def execute_command(self, *args: Any) -> Any:
        """Any command, raw reply (as redis-py returns it), on the current node."""
        return self._run(list(args), raw)

    def _parse_jobs_plain(self, reply: Any) -> list[Job]:
        return parse_jobs(reply, self._decode_bodies)
