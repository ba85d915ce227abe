"""kombu's virtual transport on Disque: a kombu queue is a Disque queue, a message a job.

URL: ``disque://[[user]:password@]host:port[,host:port...][?option=value&...]``, or
``disques://`` for TLS. Every ``host:port`` is a seed for the project's client
(:class:`disquepy.client.Disque`: HELLO discovery, failover, connection pools), which
this transport rides on; options come from the query string or kombu's
``transport_options`` (Celery's ``broker_transport_options``).

How kombu maps onto Disque (README.md, "Celery", says the same for users):

==========================  =====================================================
kombu / Celery              Disque
==========================  =====================================================
queue ``q``                 Disque queues ``q:high``, ``q``, ``q:low`` (the web
                            API's priority levels, ``client/priority.py``)
message                     a job; its body is the kombu message as JSON, headers
                            first (Celery's task name and ID lead the dashboard's
                            preview); the delivery tag is the job ID
publish                     ``ADDJOB`` (``REPLICATE``/``ASYNC`` from the options)
``basic_ack``               ``ACKJOB``
reject, requeue             ``NACK`` (the same job back in its queue at once)
reject without requeue      ``FAILJOB ... REASON rejected`` (its outcome: failed)
unacked at channel close    ``NACK`` (never a second copy of the job)
``visibility_timeout``      the job's ``RETRY``
``countdown``/``eta``       ``DELAY`` (whole seconds; Celery waits out the rest)
``expires``, expiration,    ``TTL``
``x-message-ttl``
``priority`` 0-9            level high/medium/low (``priority_order``, below)
prefetch (``basic_qos``)    ``GETJOB COUNT`` = the credit left
consume                     a blocking ``GETJOB TIMEOUT`` on a connection of its
                            own, waited on by kombu's event loop (Celery's hub)
fanout/topic exchange ``e``  the event queue ``e`` (``QADD``); a queue bound to it is
                            a consumer group of it (``QNOTIFY``/``QGET``/``QACK``),
                            a topic binding's key matched by the consumer
==========================  =====================================================

Routing: a direct exchange routes by the bindings this process declared (as every
virtual transport); when it knows none for the exchange (a Celery worker answering a
``celery inspect``, whose reply queue another process bound), the routing key names the
Disque queue, and a queue bound with a key that is not its name also consumes the queue
of that key.

Refused with a clear error: exchange types other than direct, topic and fanout;
exchange-to-exchange bindings; queue arguments Disque has no equivalent for
(``x-dead-letter-exchange``, ``x-max-length`` other than with ``x-overflow:
reject-publish``, which is ``MAXLEN``, ...); a queue of type ``stream``.

Options (``transport_options`` or the URL's query): ``visibility_timeout`` (seconds,
3600), ``ttl`` (seconds, 86400: a message without expiration), ``replicate``,
``async_replication`` (``ADDJOB ... ASYNC``), ``add_timeout`` (ms, 10000: the bound on
synchronous replication), ``getjob_timeout`` (seconds, 1: one blocking GETJOB or
QNOTIFY), ``prefetch_unlimited`` (100: GETJOB's COUNT without a prefetch limit),
``priority_order`` (``asc``: 9 is highest, AMQP's, the default; ``desc``: 0 is highest,
kombu's Redis transport's), ``priority_low_share`` (0: strict priorities; see
``client/priority.py``), ``fanout_ttl`` (seconds, 60: how long a broadcast waits for
its groups), ``fanout_lease`` (seconds, 30: an unacked broadcast comes back after it),
``socket_timeout`` (seconds, 30), ``username``, ``password``, and for TLS ``ssl_ca_certs``,
``ssl_certfile``, ``ssl_keyfile``, ``ssl_check_hostname`` (or kombu's ``ssl`` dict).
"""

from __future__ import annotations

import logging
import math
import select
import time
from datetime import UTC, datetime
from queue import Empty
from typing import Any
from urllib.parse import parse_qsl, unquote

import redis.exceptions as rexc
from kombu.exceptions import ChannelError
from kombu.transport import virtual
from kombu.transport.virtual.exchange import DirectExchange, FanoutExchange, TopicExchange
from kombu.utils.eventio import ERR, READ, poll
from kombu.utils.json import dumps, loads

from ..client import Disque, NoNodesError, ResponseError
from ..client.args import Arg
from ..client.errors import convert_error
from ..client.nodes import parse_address
from ..client.priority import PriorityOrder, queue_for, split
from ..client.replies import Job, parse_jobs

log = logging.getLogger("disquepy.kombu")

DEFAULT_PORT = 7711
MAX_PRIORITY = 9
NACK_CHUNK = 1000  # job IDs per NACK/ACKJOB command
PURGE_ROUNDS = 10_000  # GETJOB+FASTACK rounds of a purge at most (1000 jobs each)

# queue arguments (AMQP's x-...) and what becomes of them here
_ACCEPTED_ARGS = {"x-max-priority", "x-message-ttl", "x-expires", "x-queue-type",
                  "x-max-length", "x-overflow"}

OPTIONS = {  # name: (type, default)
    "visibility_timeout": (int, 3600),
    "ttl": (int, 86400),
    "replicate": (int, None),
    "async_replication": (bool, False),
    "add_timeout": (int, 10_000),
    "getjob_timeout": (float, 1.0),
    "prefetch_unlimited": (int, 100),
    "priority_order": (str, "asc"),
    "priority_low_share": (float, 0.0),
    "fanout_ttl": (float, 60.0),
    "fanout_lease": (float, 30.0),
    "socket_timeout": (float, 30.0),
    "username": (str, None),
    "password": (str, None),
    "ssl_ca_certs": (str, None),
    "ssl_certfile": (str, None),
    "ssl_keyfile": (str, None),
    "ssl_check_hostname": (bool, True),
}


def _as_bool(v: Any) -> bool:
    if isinstance(v, str):
        if v.lower() in ("1", "true", "yes", "on"):
            return True
        if v.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {v!r}")
    return bool(v)


def parse_url(url: str) -> tuple[list[tuple[str, int]], bool, dict[str, Any]]:
    """``disque[s]://[[user]:password@]host:port[,host:port...][/][?opt=v...]`` as
    ``(nodes, tls, options)``; each ``host:port`` is read by the client's own parser."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("disque", "disques"):
        raise ValueError(f"not a disque:// or disques:// URL: {url!r}")
    rest, _, query = rest.partition("?")
    rest = rest.split("/", 1)[0]  # a virtual host means nothing to Disque
    userinfo, at, hosts = rest.rpartition("@")
    opts: dict[str, Any] = dict(parse_qsl(query))
    if at:
        user, colon, password = userinfo.partition(":")
        if user:
            opts["username"] = unquote(user)
        if colon:
            opts["password"] = unquote(password)
    nodes = [parse_address(h) for h in hosts.split(",") if h.strip()]
    return nodes or [("127.0.0.1", DEFAULT_PORT)], scheme.lower() == "disques", opts


def read_options(raw: dict[str, Any]) -> dict[str, Any]:
    """The transport's options from ``raw`` (strings from a URL, or typed values), with
    defaults; a value of the wrong kind is a ``ValueError`` that names the option."""
    out = {}
    for name, (kind, default) in OPTIONS.items():
        v = raw.get(name, default)
        if v is None or v is default:
            out[name] = v
            continue
        try:
            out[name] = _as_bool(v) if kind is bool else kind(v)
        except (TypeError, ValueError):
            raise ValueError(f"disque transport option {name}: expected {kind.__name__}, "
                             f"got {v!r}") from None
    if out["priority_order"] not in ("asc", "desc"):
        raise ValueError("disque transport option priority_order: 'asc' or 'desc'")
    return out


def priority_level(priority: Any, order: str = "asc") -> str:
    """A kombu priority as one of the three levels. ``asc`` (AMQP's order, 9 highest):
    7-9 high, 4-6 medium, 1-3 low, and 0 (what kombu sends when none is given) or none
    medium; ``desc`` (kombu's Redis transport, 0 highest): 0-2 high, 3-5 medium, 6-9
    low, none medium. Values beyond 9 count as 9."""
    if priority is None:
        return "medium"
    p = min(max(int(priority), 0), MAX_PRIORITY)
    if order == "desc":
        return "high" if p <= 2 else "medium" if p <= 5 else "low"
    if p == 0:
        return "medium"
    return "high" if p >= 7 else "medium" if p >= 4 else "low"


def _timestamp(v: Any) -> float | None:
    """Celery's ``eta``/``expires`` headers (ISO 8601, UTC when naive) or kombu's pidbox
    ``expires`` (epoch seconds) as epoch seconds."""
    if v is None or v == 0 or v == "":
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, datetime):
        d = v
    else:
        try:
            d = datetime.fromisoformat(str(v))
        except ValueError:
            return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d.timestamp()


class QoS(virtual.QoS):
    """Acks, rejects and restores as Disque commands on the delivered jobs and events."""

    def ack(self, delivery_tag: str) -> None:
        self.channel._server_ack([delivery_tag])
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.channel._server_reject(delivery_tag, requeue)
        self._quick_ack(delivery_tag)

    def restore_unacked(self) -> list[Any]:
        """Every unacked delivery back to its queue, as the same job (NACK)."""
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        try:
            self.channel._requeue(tags)
        except Exception as exc:  # reported by restore_unacked_once
            return [(exc, tag) for tag in tags]
        return []


class _Waiter:
    """One blocking command (GETJOB or QNOTIFY) in flight on a connection of its own."""

    __slots__ = ("kind", "group", "conn", "fd", "pending")

    def __init__(self, kind: str, group: str | None = None) -> None:
        self.kind = kind
        self.group = group
        self.conn: Any = None
        self.fd = -1
        self.pending = False


class Poller:
    """The transport's cycle: the waiters' sockets, on kombu's hub (Celery's event loop)
    once registered with it, else on a poller of its own (``drain_events``)."""

    def __init__(self) -> None:
        self.channels: list[Channel] = []
        self.fds: dict[int, tuple[Channel, _Waiter]] = {}
        self.hub: Any = None
        self._poll = poll()

    def add(self, channel: Channel) -> None:
        if channel not in self.channels:
            self.channels.append(channel)

    def discard(self, channel: Channel) -> None:
        if channel in self.channels:
            self.channels.remove(channel)

    def register(self, fd: int, channel: Channel, waiter: _Waiter) -> None:
        self.fds[fd] = (channel, waiter)
        if self.hub is not None:
            self.hub.add_reader(fd, self.on_readable, fd)
        else:
            self._poll.register(fd, READ | ERR)

    def unregister(self, fd: int) -> None:
        if self.fds.pop(fd, None) is None:
            return
        if self.hub is not None:
            self.hub.remove_reader(fd)
        else:
            self._poll.unregister(fd)

    def use_hub(self, hub: Any) -> None:
        for fd in list(self.fds):
            self._poll.unregister(fd)
            hub.add_reader(fd, self.on_readable, fd)
        self.hub = hub

    def on_poll_start(self) -> None:
        for ch in list(self.channels):
            ch._start_waits()

    def on_readable(self, fd: int) -> int:
        entry = self.fds.get(fd)
        if entry is None:
            return 0
        channel, waiter = entry
        return channel._on_readable(waiter)

    def get(self, callback: Any, timeout: float | None = None) -> None:
        """kombu's ``drain_events`` without a hub: wait for the waiters' replies and
        deliver what they bring; ``Empty`` when nothing came."""
        self.on_poll_start()
        if not any(w.pending for _, w in self.fds.values()):
            time.sleep(min(timeout, 1.0) if timeout is not None else 1.0)
            raise Empty()
        delivered = 0
        for fd, _ in self._poll.poll(timeout) or ():
            delivered += self.on_readable(fd)
        if not delivered:
            raise Empty()

    def close(self) -> None:
        for ch in list(self.channels):
            ch._drop_waiters()
        self.channels.clear()


class _Direct(DirectExchange):
    pass


class _Topic(TopicExchange):
    """A topic exchange is an event queue: every binding's group gets each message and
    keeps those whose routing key matches its pattern (matched by the consumer)."""

    def deliver(self, message: dict[str, Any], exchange: str, routing_key: str, **kwargs: Any) -> None:
        self.channel._put_fanout(exchange, message, routing_key, **kwargs)


class Channel(virtual.Channel):
    """A kombu channel on the transport's :class:`Disque` client."""

    QoS = QoS
    supports_fanout = True
    exchange_types = {"direct": _Direct, "topic": _Topic, "fanout": FanoutExchange}
    # None: no priority given (kombu's class says int, from its default 0)
    default_priority = None  # type: ignore[assignment]
    min_priority = 0
    max_priority = MAX_PRIORITY

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self.opts = connection.options
        self.client: Disque = connection.disque
        self._jobs = _Waiter("jobs")
        self._groups: dict[str, _Waiter] = {}  # group (a queue bound to a fanout/topic)
        self._no_ack: set[str] = set()
        self._order: PriorityOrder | None = None
        self._queue_of: dict[str, str] = {}  # Disque queue -> kombu queue consuming it
        self._event_tags: dict[str, tuple[str, str]] = {}  # event ID -> (exchange, group)
        self._queue_args: dict[str, dict[str, Any]] = {}
        connection.cycle.add(self)

    # ------------------------------------------------------------------ declarations

    def exchange_declare(self, exchange: str | None = None, type: str = "direct",
                         *args: Any, **kwargs: Any) -> None:
        if (type or "direct") not in self.exchange_types:
            raise ChannelError(f"disque transport: exchange type {type!r} is not supported "
                               "(direct, topic and fanout are)")
        super().exchange_declare(exchange, type, *args, **kwargs)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        args = kwargs.get("arguments") or {}
        unknown = sorted(set(args) - _ACCEPTED_ARGS)
        if unknown:
            raise ChannelError(f"disque transport: queue {queue!r}: no Disque equivalent of "
                               f"{', '.join(unknown)} (accepted: {', '.join(sorted(_ACCEPTED_ARGS))})")
        if args.get("x-queue-type") == "stream":
            raise ChannelError(f"disque transport: queue {queue!r}: stream queues are not "
                               "supported (a consumer group of a fanout exchange is the nearest)")
        if "x-max-length" in args and args.get("x-overflow") != "reject-publish":
            raise ChannelError(f"disque transport: queue {queue!r}: x-max-length needs "
                               "x-overflow reject-publish (Disque's MAXLEN refuses new jobs; "
                               "it never drops old ones)")
        self._queue_args[queue] = args

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str | None,
                    queue: str) -> None:
        pass  # the bindings live in the process' state (virtual.BrokerState), read below

    def _event_bindings(self, queue: str) -> dict[str, list[str | None]]:
        """The fanout/topic exchanges ``queue`` is bound to: {exchange: [patterns]}
        (``None``: every message, a fanout binding)."""
        out: dict[str, list[str | None]] = {}
        for exchange, routing_key, args in self.state.queue_bindings(queue):
            kind = self.typeof(exchange).type
            if kind in ("fanout", "topic"):
                meta = self.typeof(exchange).prepare_bind(queue, exchange, routing_key, args)
                out.setdefault(exchange, []).append(meta[1] if kind == "topic" else None)
        return out

    def _sources(self, queue: str) -> list[str]:
        """The Disque queues (before priority levels) that feed kombu queue ``queue``:
        itself, and the routing key of each direct binding whose key is not its name
        (see the module's "Routing")."""
        out = [queue]
        for exchange, routing_key, _ in self.state.queue_bindings(queue):
            if (exchange and routing_key and routing_key != queue
                    and self.typeof(exchange).type == "direct" and routing_key not in out):
                out.append(routing_key)
        return out

    def _lookup(self, exchange: str, routing_key: str, default: str | None = None) -> list[str]:
        if exchange and self.typeof(exchange).type == "direct":
            try:
                table = self.get_table(exchange)
            except KeyError:
                table = []
            if not table:  # no binding known here: the routing key names the queue
                return [routing_key] if routing_key else []
        queues: list[str] = super()._lookup(exchange, routing_key, default)
        return queues

    # ------------------------------------------------------------------ consuming

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack.add(queue)
        else:
            self._no_ack.discard(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack, **kwargs)
        if message is not None and no_ack:
            self._server_ack([message.delivery_tag])
        return message

    def _reset_cycle(self) -> None:
        """The consumed queues changed: the next GETJOB lists the new set."""
        super()._reset_cycle()
        sources: list[str] = []
        self._queue_of = {}
        groups = set()
        for q in self._active_queues:
            if self._event_bindings(q):
                groups.add(q)
                continue
            for s in self._sources(q):
                if s not in sources:
                    sources.append(s)
                for level in ("high", "medium", "low"):
                    self._queue_of.setdefault(queue_for(s, level), q)
        self._order = PriorityOrder(sources, self.opts["priority_low_share"]) if sources else None
        for g in list(self._groups):
            if g not in groups:
                self._drop(self._groups.pop(g))
        for g in groups:
            self._groups.setdefault(g, _Waiter("group", g))

    def _start_waits(self) -> None:
        """Send the blocking commands that are not in flight (called each loop tick)."""
        if self.closed:
            return
        t = self.opts["getjob_timeout"]
        w = self._jobs
        if self._order is not None and not w.pending and self.qos.can_consume():
            count = self.qos.can_consume_max_estimate() or self.opts["prefetch_unlimited"]
            self._send(w, ["GETJOB", "TIMEOUT", max(1, int(t * 1000)), "COUNT", count,
                           "WITHCOUNTERS", "FROM", *self._order.next()])
        for group, gw in self._groups.items():
            if not gw.pending:
                exchanges = sorted(self._event_bindings(group))
                if exchanges:
                    self._send(gw, ["QNOTIFY", group, f"{t:g}", *exchanges])

    def _send(self, w: _Waiter, args: list[Arg]) -> None:
        if w.conn is None:
            w.conn = self.client.borrow_connection()
            try:
                w.conn.connect()
            except Exception:
                self._drop(w, failed=True)
                raise
            w.fd = w.conn._sock.fileno()
            self.connection.cycle.register(w.fd, self, w)
        try:
            w.conn.send_command(*args)
        except (rexc.ConnectionError, rexc.TimeoutError, OSError):
            self._drop(w, failed=True)
            raise
        w.pending = True

    def _on_readable(self, w: _Waiter) -> int:
        """Read the reply on ``w``'s connection and deliver; how many messages."""
        if not w.pending:  # nothing asked: the node closed the connection
            self._drop(w, failed=True)
            return 0
        try:
            reply = w.conn.read_response()
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as e:
            log.warning("disque transport: connection to %s:%s lost (%s); failing over",
                        w.conn.host, w.conn.port, e)
            self._drop(w, failed=True)
            return 0
        except rexc.ResponseError as e:
            w.pending = False
            raise convert_error(e) from None
        w.pending = False
        if w.kind == "jobs":
            return self._deliver_jobs(parse_jobs(reply))
        return self._deliver_events(w.group, reply)

    def _drop(self, w: _Waiter, failed: bool = False) -> None:
        """Give ``w``'s connection back; a GETJOB still in flight is cut off, and jobs
        already in its reply go back to their queues (NACK)."""
        conn, w.conn = w.conn, None
        if conn is None:
            return
        self.connection.cycle.unregister(w.fd)
        if w.pending and not failed:
            try:
                ready = select.select([conn._sock], [], [], 0)[0] if conn._sock else []
                if ready and w.kind == "jobs":
                    jobs = parse_jobs(conn.read_response())
                    self._requeue([j.id for j in jobs])
                    w.pending = False
            except Exception as e:  # the jobs come back by their retry time
                log.debug("disque transport: reply lost at close: %s", e)
        if w.pending:
            conn.disconnect()
        w.pending = False
        try:
            self.client.return_connection(conn, failed=failed)
        except NoNodesError as e:
            log.warning("disque transport: no node reachable: %s", e)

    def _drop_waiters(self) -> None:
        self._drop(self._jobs)
        for w in self._groups.values():
            self._drop(w)

    def _deliver_jobs(self, jobs: list[Job]) -> int:
        deliver = self.connection._deliver
        out = []
        no_ack = []
        for job in jobs:
            queue = self._queue_of.get(job.queue) or split(job.queue)[0]
            try:
                payload = self._job_payload(job)
            except (ValueError, KeyError, TypeError) as e:
                self._fail_malformed(job.id, job.queue, e)
                continue
            if queue in self._no_ack:
                no_ack.append(job.id)
            out.append((payload, queue))
        if no_ack:
            self._server_ack(no_ack)
        for payload, queue in out:
            deliver(payload, queue)
        return len(out)

    def _deliver_events(self, group: str | None, reply: Any) -> int:
        if reply is None or group is None:
            return 0
        exchange = reply.decode("utf-8", "surrogateescape") if isinstance(reply, bytes) else reply
        payload = self._get_event(group, exchange)
        if payload is None:
            return 0
        self.connection._deliver(payload, group)
        return 1

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        """One message now (``basic_get``), or ``Empty``."""
        bound = self._event_bindings(queue)
        for exchange in bound:
            payload = self._get_event(queue, exchange)
            if payload is not None:
                return payload
        if bound:
            raise Empty()
        names = [queue_for(s, level) for level in ("high", "medium", "low")
                 for s in self._sources(queue)]
        for job in self.client.get_jobs(names, nohang=True, with_counters=True):
            try:
                return self._job_payload(job)
            except (ValueError, KeyError, TypeError) as e:
                self._fail_malformed(job.id, job.queue, e)
        raise Empty()

    def _get_event(self, group: str, exchange: str) -> dict[str, Any] | None:
        """The next event of ``exchange`` for ``group`` whose routing key its bindings
        match (others are acknowledged and skipped), as a kombu message, or ``None``."""
        patterns = self._event_bindings(group).get(exchange, [None])
        no_ack = group in self._no_ack
        lease = 0 if no_ack else self.opts["fanout_lease"]
        topic = self.typeof(exchange)
        for _ in range(1000):
            event = self.client.qget(exchange, group, lease=lease)
            if event is None:
                return None
            payload: dict[str, Any] | None
            try:
                payload = loads(event.body)
                props = payload["properties"]
                rkey = props.get("delivery_info", {}).get("routing_key") or ""
            except (ValueError, KeyError, TypeError) as e:
                log.warning("disque transport: event %s of %s is not a kombu message "
                            "(%s): skipped", event.id, exchange, e)
                rkey, payload = None, None
            if payload is not None and any(p is None or topic._match(p, rkey) for p in patterns):
                props["delivery_tag"] = event.id
                if not no_ack:
                    self._event_tags[event.id] = (exchange, group)
                return payload
            if not no_ack:
                self.client.qack(exchange, group, event.id)
        return None

    def _job_payload(self, job: Job) -> dict[str, Any]:
        payload: dict[str, Any] = loads(job.body)
        props = payload["properties"]
        props["delivery_tag"] = job.id
        info = props.setdefault("delivery_info", {})
        info["redelivered"] = bool(job.nacks or job.additional_deliveries)
        return payload

    def _fail_malformed(self, jid: str, queue: str, e: Exception) -> None:
        log.warning("disque transport: job %s in %s is not a kombu message (%s): "
                    "failed with REASON malformed", jid, queue, e)
        self.client.fail(jid, f"not a kombu message: {e}"[:200], reason="malformed")

    # ------------------------------------------------------------------ acks

    def _server_ack(self, tags: list[str]) -> None:
        jobs = [t for t in tags if t not in self._event_tags]
        for t in tags:
            ev = self._event_tags.pop(t, None)
            if ev is not None:
                self.client.qack(ev[0], ev[1], t)
        for i in range(0, len(jobs), NACK_CHUNK):
            self.client.ack(*jobs[i:i + NACK_CHUNK])

    def _server_reject(self, tag: str, requeue: bool) -> None:
        ev = self._event_tags.pop(tag, None)
        if ev is not None:
            if not requeue:  # a requeued event comes back when its lease runs out
                self.client.qack(ev[0], ev[1], tag)
        elif requeue:
            self.client.nack(tag)
        else:
            self.client.fail(tag, "rejected by the consumer (requeue=False)", reason="rejected")

    def _requeue(self, tags: list[str]) -> None:
        jobs = []
        for t in tags:
            if self._event_tags.pop(t, None) is None:
                jobs.append(t)
        for i in range(0, len(jobs), NACK_CHUNK):
            self.client.nack(*jobs[i:i + NACK_CHUNK])

    # ------------------------------------------------------------------ publishing

    def prepare_message(self, body: Any, priority: Any = None, content_type: Any = None,
                        content_encoding: Any = None, headers: Any = None,
                        properties: Any = None) -> dict[str, Any]:
        """As kombu's, but a message without a priority keeps none (medium)."""
        properties = properties or {}
        properties.setdefault("delivery_info", {})
        properties.setdefault("priority", priority)
        return {"body": body, "content-encoding": content_encoding,
                "content-type": content_type, "headers": headers or {},
                "properties": properties}

    def encode_body(self, body: Any, encoding: Any = None) -> tuple[Any, Any]:
        """Text stays text (readable in the dashboard); bytes go as base64."""
        if isinstance(body, str):
            return body, None
        encoded: tuple[Any, Any] = super().encode_body(body, encoding or "base64")
        return encoded

    def _job_body(self, message: dict[str, Any]) -> str:
        # headers first: Celery's task name and ID lead the dashboard's preview
        ordered = {"headers": message.get("headers") or {}}
        ordered.update((k, v) for k, v in message.items() if k != "headers")
        text: str = dumps(ordered)
        return text

    def _times(self, queue: str | None, message: dict[str, Any]) -> tuple[float | None, float]:
        """(seconds to live or None, seconds of delay) of a message put now."""
        now = time.time()
        props = message.get("properties") or {}
        headers = message.get("headers") or {}
        ttl = None
        expiration = props.get("expiration")
        if expiration is not None:
            ttl = float(expiration) / 1000.0
        elif queue is not None and "x-message-ttl" in self._queue_args.get(queue, {}):
            ttl = float(self._queue_args[queue]["x-message-ttl"]) / 1000.0
        expires = _timestamp(headers.get("expires"))
        if expires is not None:
            ttl = expires - now if ttl is None else min(ttl, expires - now)
        eta = _timestamp(headers.get("eta"))
        delay = max(0.0, eta - now) if eta is not None else 0.0
        return ttl, delay

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """ADDJOB: the message as a job of ``queue`` at its priority level."""
        o = self.opts
        ttl, delay = self._times(queue, message)
        delay_s = int(delay)
        if ttl is None:
            ttl_s = o["ttl"] + delay_s
        else:
            ttl_s = max(1, math.ceil(ttl))
        if delay_s >= ttl_s:  # expires before its eta: Celery discards it on receipt
            delay_s = ttl_s - 1
        level = priority_level((message.get("properties") or {}).get("priority"),
                               o["priority_order"])
        maxlen = self._queue_args.get(queue, {}).get("x-max-length")
        self.client.add_job(queue_for(queue, level), self._job_body(message), o["add_timeout"],
                            replicate=o["replicate"], delay=delay_s or None,
                            retry=o["visibility_timeout"], ttl=ttl_s,
                            maxlen=int(maxlen) if maxlen else None,
                            async_=o["async_replication"])

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str,
                    **kwargs: Any) -> None:
        """QADD: one event on ``exchange``'s event queue; every bound group gets it."""
        ttl, _ = self._times(None, message)
        if ttl is None:
            ttl = self.opts["fanout_ttl"]
        if ttl <= 0:
            return  # expired already: no consumer may see it
        self.client.qadd(exchange, self._job_body(message), expire=max(ttl, 0.001))

    # ------------------------------------------------------------------ queues

    def _levels(self, queue: str) -> list[str]:
        return [queue_for(queue, level) for level in ("high", "medium", "low")]

    def _size(self, queue: str) -> int:
        """Jobs queued on the node the client uses (Disque queues are per node)."""
        return sum(self.client.qlen(q) for q in self._levels(queue))

    def _purge(self, queue: str) -> int:
        """Take every job queued here for ``queue`` and delete it (GETJOB + FASTACK)."""
        n = 0
        for _ in range(PURGE_ROUNDS):
            jobs = self.client.get_jobs(self._levels(queue), count=1000, nohang=True)
            if not jobs:
                break
            self.client.fast_ack(*[j.id for j in jobs])
            n += len(jobs)
        return n

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self._purge(queue)
        self._queue_args.pop(queue, None)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True  # a Disque queue exists whenever jobs are sent to it

    def close(self) -> None:
        if not self.closed:
            if self.connection is not None:
                self._drop_waiters()
                self.connection.cycle.discard(self)
            super().close()  # cancels consumers, NACKs what was delivered and not acked


class Transport(virtual.Transport):
    """kombu transport for disquepy (``disque://`` and ``disques://``)."""

    Channel = Channel
    # (kombu's class attributes are typed by their defaults: a float and None)
    polling_interval = None  # type: ignore[assignment]  # consumers block in GETJOB: no sleep
    default_port = DEFAULT_PORT  # type: ignore[assignment]
    can_parse_url = True  # several host:port seeds: kombu's URL parser takes one
    driver_type = "disque"
    driver_name = "disquepy"
    connection_errors = virtual.Transport.connection_errors + (  # type: ignore[assignment]
        rexc.ConnectionError, rexc.TimeoutError, NoNodesError, OSError)
    channel_errors = virtual.Transport.channel_errors + (  # type: ignore[assignment]
        ResponseError, rexc.ResponseError)
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset(["direct", "topic", "fanout"]))

    cycle: Poller  # type: ignore[assignment]  # (kombu's FairCycle replaced: see Poller)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.cycle = Poller()
        host = client.hostname or "127.0.0.1"
        raw: dict[str, Any] = {}
        if "://" in host:
            nodes, tls, url_opts = parse_url(host)
            raw.update(url_opts)
        else:
            nodes = [(h, client.port or DEFAULT_PORT) for h in host.split(",")]
            tls = False
        raw.update(client.transport_options or {})
        if client.userid and "username" not in raw:
            raw["username"] = client.userid
        if client.password and "password" not in raw:
            raw["password"] = client.password
        ssl = client.ssl
        if isinstance(ssl, dict):
            for k, v in ssl.items():
                key = k if k.startswith("ssl_") else "ssl_" + k
                raw.setdefault(key, v)
            tls = True
        elif ssl:
            tls = True
        self.options = read_options(raw)
        self._connect_timeout = float(client.connect_timeout or 5)
        self.nodes = nodes
        self.tls = tls
        self.disque = self._new_client()

    def _new_client(self) -> Disque:
        o = self.options
        return Disque(self.nodes, username=o["username"], password=o["password"],
                      socket_timeout=o["socket_timeout"],
                      socket_connect_timeout=self._connect_timeout,
                      ssl=self.tls, ssl_ca_certs=o["ssl_ca_certs"],
                      ssl_certfile=o["ssl_certfile"], ssl_keyfile=o["ssl_keyfile"],
                      ssl_check_hostname=o["ssl_check_hostname"])

    def driver_version(self) -> str:
        from importlib.metadata import version

        return version("disquepy")

    def establish_connection(self) -> Any:
        self.disque.connect()  # NoNodesError (a connection error) when no node answers
        return super().establish_connection()

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)
        self.cycle.close()
        self.disque.close()

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """Celery's hub: the waiters' sockets become its readers, and each loop tick
        sends the blocking GETJOB/QNOTIFY that are not in flight."""
        self.cycle.use_hub(loop)
        loop.on_tick.add(self.cycle.on_poll_start)

    # (as kombu's redis transport: the hub calls it with the readable socket)
    def on_readable(self, fileno: int) -> None:  # type: ignore[override]
        self.cycle.on_readable(fileno)
