"""Options, node discovery and raw connections shared by the Spark readers and writers.

Executors stay lean: plain redis-py connections (RESP2) and the client library's
batches (:mod:`disquepy.client.batch`), no client-library state to pickle.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import redis

from ..client.batch import encode_many, round_trip
from ..codec.nodes import NodeInfo, parse_address, parse_hello

log = logging.getLogger("disquepy.spark")

DEFAULT_NODES = "127.0.0.1:7711"
#: GETJOB on this queue never takes anything: the driver uses it to read back what a
#: delivery token remembered without ever consuming a job with a token it did not create.
PROBE_QUEUE = "__disquepy_spark_probe__"

#: A stream's offset: the JSON object Spark checkpoints and hands back (``stream``,
#: ``batch``, and the reader's plan or counts: values of several JSON types, hence Any;
#: PySpark's own signatures say ``dict``)
Offset = dict[str, Any]
#: one command for :func:`pipeline`: its name and arguments
Command = tuple[str | bytes | int, ...]


#: every option the "disque" format knows, by use (the spelling shown in errors)
COMMON_OPTIONS = ("nodes", "password", "user", "tls", "tlsCaCert", "tlsCert", "tlsKey")
WRITE_OPTIONS = ("queue", "queueColumn", "bodyColumn", "keyColumn", "idempotent", "replicate",
                 "retry", "ttl", "delay", "maxlen", "async", "timeout", "batchSize",
                 "connections", "reportFile")
READ_OPTIONS = ("queue", "queues", "bodyFormat", "states", "copies")
STREAM_READ_OPTIONS = (*READ_OPTIONS, "maxJobsPerTrigger", "fetchSize", "readersPerNode",
                       "workingInterval")
#: a stream read as a consumer group (QGET/QACK/QWORKING): the job read's tuning does
#: not apply (see GROUP_REFUSED)
GROUP_STREAM_OPTIONS = ("queue", "queues", "bodyFormat", "group", "lease",
                        "maxEventsPerTrigger", "maxDeliveries")
#: options Spark itself sets or reads, which reach the data source with the user's
#: (writeStream's checkpointLocation; save(path)/load(path) as "path")
SPARK_OPTIONS = ("checkpointlocation", "path")


def lower_options(options: Any) -> dict[str, str]:
    """Options with lower-cased keys (Spark already passes a case-insensitive map)."""
    return {str(k).lower(): str(v) for k, v in dict(options or {}).items()}


def check_options(opts: dict[str, str], what: str, known: tuple[str, ...]) -> None:
    """Refuse an option ``what`` (e.g. "the disque sink") does not know, naming it, the
    closest known spelling and every valid option: a typo must not be ignored."""
    import difflib

    valid = (*COMMON_OPTIONS, *known)
    by_lower = {k.lower(): k for k in valid}
    unknown = sorted(k for k in opts if k not in by_lower and k not in SPARK_OPTIONS)
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], list(by_lower), n=1)
    hint = f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
    raise ValueError(f"{what}: unknown option {unknown[0]!r}{hint}; valid options: "
                     + ", ".join(valid))


def opt_bool(opts: dict[str, str], key: str, default: bool) -> bool:
    """A boolean option: true/false, yes/no, 1/0 (any case)."""
    v = opts.get(key)
    if v is None or v == "":
        return default
    v = v.strip().lower()
    if v in ("true", "yes", "1", "on"):
        return True
    if v in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"option {key!r}: expected true or false, got {v!r}")


@overload
def opt_int(opts: dict[str, str], key: str, default: int) -> int: ...


@overload
def opt_int(opts: dict[str, str], key: str, default: None) -> int | None: ...


def opt_int(opts: dict[str, str], key: str, default: int | None) -> int | None:
    """An integer option (None when absent and no default)."""
    v = opts.get(key)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"option {key!r}: expected an integer, got {v!r}") from None


def opt_list(opts: dict[str, str], *keys: str) -> list[str]:
    """A comma-separated list option, the first of ``keys`` present."""
    for k in keys:
        v = opts.get(k)
        if v:
            return [s.strip() for s in v.split(",") if s.strip()]
    return []


@dataclass(frozen=True, slots=True)
class Auth:
    """Whom to AUTH as and how to reach the nodes (picklable, for the executors): the
    options ``password``, ``user`` (an ACL user), ``tls`` with ``tlsCaCert`` (the CA
    that verifies the nodes), ``tlsCert`` and ``tlsKey`` (a client certificate)."""

    password: str | None = None
    user: str | None = None
    tls: bool = False
    ca_cert: str | None = None
    cert: str | None = None
    key: str | None = None

    def redis_options(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"username": self.user, "password": self.password}
        if self.tls:
            kw.update(ssl=True, ssl_ca_certs=self.ca_cert, ssl_certfile=self.cert,
                      ssl_keyfile=self.key)
        return kw


def auth_options(opts: dict[str, str]) -> Auth:
    """The connection options of a reader or writer (see :class:`Auth`)."""
    tls = opt_bool(opts, "tls", False)
    files = [opts.get(k) or None for k in ("tlscacert", "tlscert", "tlskey")]
    if not tls and any(files):
        raise ValueError("options 'tlsCaCert', 'tlsCert' and 'tlsKey' need tls=true")
    if bool(files[1]) != bool(files[2]):
        raise ValueError("options 'tlsCert' and 'tlsKey' go together")
    return Auth(opts.get("password") or None, opts.get("user") or None, tls, *files)


def connect(host: str, port: int, auth: Auth | None = None,
            timeout: float | None = 30.0) -> redis.Redis:
    """A RESP2 redis-py client on one node (no retries hidden behind our back)."""
    return redis.Redis(host=host, port=port, protocol=2, socket_timeout=timeout,
                       socket_connect_timeout=10, **(auth or Auth()).redis_options())


def discover(opts: dict[str, str]) -> list[NodeInfo]:
    """Every node known to the first reachable seed, sorted by node ID.

    Nodes reported with priority >= 100 (failing) are left out when others remain.
    """
    seeds = opt_list(opts, "nodes") or [DEFAULT_NODES]
    auth = auth_options(opts)
    errors = []
    for seed in seeds:
        host, port = parse_address(seed)
        try:
            c = connect(host, port, auth, timeout=10)
            try:
                reply = c.execute_command("HELLO")
            finally:
                c.close()
        except (redis.RedisError, OSError) as e:
            errors.append(f"{seed}: {e}")
            continue
        nodes = parse_hello(reply, (host, port)).nodes
        healthy = [n for n in nodes if n.priority < 100]
        return sorted(healthy or nodes, key=lambda n: n.id)
    raise ConnectionError("no Disque node reachable: " + "; ".join(errors))


def pipeline(conn: redis.Redis, commands: Sequence[Command]) -> list[Any]:
    """Send ``commands`` in one write, read every reply; error replies are returned as
    ResponseError instances (not raised) so one bad command does not hide the others
    (the client library's :func:`~disquepy.client.batch.round_trip`)."""
    return round_trip(conn.connection_pool, encode_many(commands), len(commands))
