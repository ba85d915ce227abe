"""The ``"disque"`` Spark data source (Spark 4 Python Data Source API).

Design, and why:

Batch and streaming write (``df.write`` / ``writeStream``)
    Each Spark partition writes to exactly one node: the driver asks a seed for HELLO
    once, sorts the node IDs, and partition *p* writes to node ``p mod N``. The mapping
    is fixed on the driver and pickled into the writer, so a retried task (same
    partition) goes to the same node, which is what makes the server-side idempotency
    work: ``ADDJOB ... IDEMPOTENT key`` is deduplicated per node. Keys are stable per
    row across task retries: ``<write id>:<partition>:<row index>`` for a batch write
    (the write id is a UUID drawn on the driver when the write is planned) and
    ``<query id>:<batch id>:<partition>:<row index>`` for a streaming write (the query
    id survives restarts from the checkpoint, and Spark replays a micro-batch with the
    same id), so a replayed micro-batch does not enqueue twice either. With
    ``keyColumn`` a column supplies the key instead of the row index: use it when the
    rows of a partition do not come back in the same order on recomputation (e.g.
    after an unsorted shuffle). ADDJOBs are sent ``batchSize`` at a time with the client
    library's ``add_jobs`` bound to the partition's node (``node=``: no failover to
    another node, whose idempotency keys would not know the first one's jobs), spread
    over ``connections`` connections per task (default 16 when jobs are replicated
    synchronously: a node runs a connection's next command only once the previous job
    is replicated; else 1). Every task reports how many
    jobs it wrote in its commit message; the driver logs the total (and writes it as
    JSON to ``reportFile`` when that option is set).

Batch read (``spark.read``)
    A non-consuming snapshot of the queues named by ``queue``/``queues`` (required, as
    for a stream read): one partition per node, each scanning its node with
    ``JSCAN ... QUEUE q REPLY all`` (optionally per state). A job replicated to
    three nodes has three copies: ``copies=all`` (default) returns one row per copy
    (the ``node`` column says where; ``dropDuplicates(["id"])`` gives one per job),
    ``copies=primary`` keeps only the copy held by the node that created the job
    (its ID carries that node's ID prefix).

Streaming read (``spark.readStream``), at-least-once end to end
    Offsets are micro-batch sequence numbers plus the plan of the batch:
    ``{"stream": <uuid>, "batch": b, "plan": {node id: n jobs}}``. The stream UUID is
    drawn once by ``initialOffset`` and then travels inside every checkpointed offset,
    so a query restarted from its checkpoint keeps its identity without any option.
    ``latestOffset`` asks every node for QLEN of the queues and plans at most
    ``maxJobsPerTrigger`` jobs (Spark's ReadMaxRows limit), shared fairly between
    nodes; with nothing queued it returns ``start`` (no batch). A node's share of a
    batch is fetched with
    ``GETJOB NOHANG COUNT k WITHCOUNTERS TOKEN <stream>:<batch>:<chunk> FROM queues``
    in chunks of ``fetchSize``, the chunks dealt to ``readersPerNode`` partitions
    (default 2; fewer when there are fewer chunks) so executors fetch and convert in
    parallel even from one node; every task always runs every chunk it was given. The server
    remembers what each token delivered, so a task retry, a second action on the
    batch's DataFrame in ``foreachBatch``, or a batch replayed after a driver crash
    reads the same jobs again instead of taking new ones.

    Jobs are acknowledged only after Spark has committed the batch that carried them:
    Spark calls ``latestOffset(start)`` only once the batch ending at ``start`` is in
    the commit log (also after a restart, and also after the last batch of
    ``availableNow``, for which ``commit`` is never called), and ``commit(end)``
    only when it plans the next batch. Both acknowledge the batch they name; the
    second is then a no-op. When ``latestOffset`` plans a next batch, the ack runs on
    a thread while that batch is read (one ack in flight at most; a driver crash
    meanwhile leaves those jobs to come back by retry: duplicates, never a loss); when
    it plans none (idle trigger, end of ``availableNow``) the ack completes before it
    returns. The driver acknowledges with ``ACKTOKEN <tokens...>`` on each node: the
    node acks what those tokens delivered there (an unknown token, e.g. after the node
    restarted, acks nothing). To learn a batch's IDs (for WORKING) the driver replays
    its tokens with GETJOB on a queue that is always empty
    (``__disquepy_spark_probe__``): a remembered token answers with its jobs, and an
    unknown one takes nothing, so the driver can never consume a job itself.

    A failed batch is never acknowledged: its jobs come back by their retry time. A
    long batch keeps its jobs: when a read task has fetched all its chunks it leaves a
    marker job (body = its marker token, ``spark:<stream>:<batch>[#<reader>]``,
    REPLICATE 1, IDEMPOTENT so a retry adds none) in
    ``__disquepy_spark_marks__:<stream>`` on its node; a driver thread polls those
    queues with QPEEK (non-consuming) and, for each node whose markers (one per read
    task) are all there, replays
    the tokens and sends WORKING for every job at once and then every
    ``workingInterval`` seconds (default 60, must stay below the producers' RETRY; 0
    disables). The driver never replays a token before its read task used it (that
    would leave the task nothing to read). Markers are deleted when the batch is acked.
    Note that, as in Disque, a job's retry counts from when it was queued, so a job
    that waited in the queue may be due for re-queueing soon after delivery: the first
    WORKING goes out as soon as the marker is seen (within 0.5 s).

    ``availableNow``: ``prepareForTriggerAvailableNow`` notes how many jobs are queued;
    the query plans batches until that many were planned or the queues are empty.

    Limits, by design of the server: tokens are not persisted, so a batch replayed
    after the *node* restarted reads new jobs (the old ones come back by retry), and
    tokens expire after ``delivery-token-ttl`` (1 hour by default), so a query
    restarted later than that replays its last batch as a new read: at-least-once
    either way, never a loss. Async progress tracking is not supported.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict, cast

import redis
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..client import Disque, ResponseError

if TYPE_CHECKING:
    from pyarrow import RecordBatch  # no type hints (pyproject.toml): Any
    from pyspark import TaskContext

from ..codec.nodes import NodeInfo
from ._nodes import (
    PROBE_QUEUE,
    READ_OPTIONS,
    STREAM_READ_OPTIONS,
    WRITE_OPTIONS,
    Auth,
    Command,
    Offset,
    auth_options,
    check_options,
    connect,
    discover,
    lower_options,
    opt_bool,
    opt_int,
    opt_list,
    pipeline,
)
from .rows import (
    SNAPSHOT_COLUMNS,
    arrow_batch,
    body_type,
    decode_body,
    stream_columns,
    to_str,
)

log = logging.getLogger("disquepy.spark")

# ---------------------------------------------------------------------------- writing


@dataclass
class WriteReport(WriterCommitMessage):
    """What one write task did: its partition, the node it wrote to, jobs written."""

    partition: int
    node: str
    written: int
    attempt: int = 0


@dataclass
class _AddJobSpec:
    """Everything an executor needs to turn rows into ADDJOB commands."""

    queue: str | None
    queue_column: str | None
    body_column: str | None
    key_column: str | None
    idempotent: bool
    timeout_ms: int
    options: dict[str, Any] = field(default_factory=dict)  # add_jobs' (replicate...)
    batch_size: int = 1000
    connections: int | None = None  # None: see sync_connections
    auth: Auth | None = None

    def sync_connections(self, n_nodes: int) -> int:
        """Connections per task: the ``connections`` option, else 16 when the jobs are
        replicated synchronously (a cluster, without ASYNC or REPLICATE 1: each job
        holds its connection for a replication round trip), else 1 (the node answers
        at once; more connections would only add threads)."""
        if self.connections is not None:
            return self.connections
        one_copy = self.options.get("replicate") == 1
        return 16 if n_nodes > 1 and not self.options.get("async_") and not one_copy else 1

    @classmethod
    def from_options(cls, opts: dict[str, str], schema: StructType) -> _AddJobSpec:
        check_options(opts, "the disque sink", WRITE_OPTIONS)
        names = [f.name for f in schema.fields]
        lower = {n.lower(): n for n in names}
        queues = opt_list(opts, "queue")
        queue_col = opts.get("queuecolumn")
        if queue_col is not None:
            queue_col = lower.get(queue_col.lower(), queue_col)
            if queue_col not in names:
                raise ValueError(f"queueColumn {queue_col!r} is not a column")
        if not queues and queue_col is None:
            raise ValueError("the disque sink needs option queue (or queueColumn)")
        if len(queues) > 1:
            raise ValueError("the disque sink writes to one queue (or use queueColumn)")
        body_name = opts.get("bodycolumn", "body")
        body_col = lower.get(body_name.lower())
        if "bodycolumn" in opts and body_col is None:
            raise ValueError(f"bodyColumn {opts['bodycolumn']!r} is not a column")
        key_col = opts.get("keycolumn")
        if key_col is not None:
            key_col = lower.get(key_col.lower())
            if key_col is None:
                raise ValueError(f"keyColumn {opts['keycolumn']!r} is not a column")
        options: dict[str, Any] = {}
        for opt in ("replicate", "retry", "ttl", "delay", "maxlen"):
            v = opt_int(opts, opt, None)
            if v is not None:
                options[opt] = v
        if opt_bool(opts, "async", False):
            options["async_"] = True
        return cls(queue=queues[0] if queues else None, queue_column=queue_col,
                   body_column=body_col, key_column=key_col,
                   idempotent=opt_bool(opts, "idempotent", True),
                   timeout_ms=opt_int(opts, "timeout", 10000), options=options,
                   batch_size=max(1, opt_int(opts, "batchsize", 1000)),
                   connections=_connections(opts), auth=auth_options(opts))


def _connections(opts: dict[str, str]) -> int | None:
    n = opt_int(opts, "connections", None)
    if n is not None and not 1 <= n <= 256:
        raise ValueError(f"connections must be between 1 and 256, not {n}")
    return n


def _column_values(batch: RecordBatch, name: str) -> list[bytes]:
    """A column of an Arrow batch as Python values, bodies encoded to bytes."""
    import pyarrow as pa

    col = batch.column(name)
    t = col.type
    values = col.to_pylist()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [b"" if v is None else v for v in values]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [b"" if v is None else v.encode() for v in values]
    if pa.types.is_map(t):
        values = [None if v is None else dict(v) for v in values]
    if pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t):
        return [json.dumps(v, separators=(",", ":"), default=str).encode() for v in values]
    return [b"" if v is None else str(v).encode() for v in values]


def _add_all(client: Disque, node: NodeInfo, spec: _AddJobSpec, queue: str | None,
             jobs: Sequence[Any], keys: Sequence[bytes | None] | None) -> int:
    """Add ``jobs`` (bodies for ``queue``, else ``(queue, body)`` pairs) on ``node``
    alone with ``add_jobs`` (jobs answered -TRYAGAIN, the same key's first job still
    being replicated by a retried task racing its predecessor, are sent again by it).
    Any other error fails the task, as a lost connection does."""
    results = client.add_jobs(queue if queue is not None else jobs,
                              jobs if queue is not None else None, idempotent=keys,
                              node=(node.host, node.port), timeout_ms=spec.timeout_ms,
                              **spec.options)
    for r in results:
        if isinstance(r, ResponseError):
            raise RuntimeError(f"ADDJOB on {node.host}:{node.port} failed: {r}")
    return len(results)


def write_partition(nodes: list[NodeInfo], spec: _AddJobSpec, key_prefix: str | None,
                    partition: int, batches: Iterable[RecordBatch]) -> tuple[NodeInfo, int]:
    """Write every row of ``batches`` (Arrow record batches) to the partition's node with
    ``add_jobs`` bound to it; returns (node, jobs written). Raises on any error reply or
    lost connection, so Spark retries the task, on the same node, with the same keys.

    A node answers a synchronously replicated ADDJOB once its copies are made, and runs
    a connection's next command only then (as Disque does): one connection moves one job
    per replication round trip, however deep its pipeline. So each ``batchSize`` rows
    are spread over several connections sending at once (``connections``; see
    :meth:`_AddJobSpec.sync_connections`); the node replicates the jobs that arrive
    together in one message per peer."""
    node = nodes[partition % len(nodes)]
    keyed = spec.idempotent and key_prefix is not None
    prefix = (key_prefix or "").encode()
    n_conns = spec.sync_connections(len(nodes))
    client = Disque([(node.host, node.port)], socket_timeout=30.0,
                    socket_connect_timeout=10.0, **(spec.auth or Auth()).redis_options())
    pool = ThreadPoolExecutor(n_conns) if n_conns > 1 else None
    written = 0
    row = 0
    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            if spec.body_column is not None:
                bodies = _column_values(batch, spec.body_column)
            else:
                bodies = [json.dumps(r, separators=(",", ":"), default=str).encode()
                          for r in batch.to_pylist()]
            jobs: Sequence[Any] = bodies
            if spec.queue_column:
                jobs = list(zip(_column_values(batch, spec.queue_column), bodies,
                                strict=True))
            keys: Sequence[bytes | None] | None = None
            if keyed and spec.key_column:
                keys = _column_values(batch, spec.key_column)
            elif keyed:
                keys = [b"%b%d" % (prefix, row + i) for i in range(n)]
            queue = None if spec.queue_column else spec.queue
            for lo in range(0, n, spec.batch_size):
                hi = min(n, lo + spec.batch_size)
                part_keys = None if keys is None else keys[lo:hi]
                if pool is None:
                    written += _add_all(client, node, spec, queue, jobs[lo:hi], part_keys)
                    continue
                k = min(n_conns, hi - lo)
                written += sum(pool.map(
                    partial(_add_all, client, node, spec, queue),
                    [jobs[lo + j:hi:k] for j in range(k)],
                    [None if part_keys is None else part_keys[j::k] for j in range(k)]))
            row += n
    finally:
        if pool is not None:
            pool.shutdown()
        client.close()
    return node, written


def _task_context() -> tuple[int, int, TaskContext | None]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return 0, 0, None
    return tc.partitionId(), tc.attemptNumber(), tc


def _report(kind: str, opts: dict[str, str], messages: list[WriterCommitMessage | None],
            extra: dict[str, str | int]) -> int:
    reports = [m for m in messages if isinstance(m, WriteReport)]
    total = sum(m.written for m in reports)
    log.info("disque %s: %d jobs written by %d tasks %s", kind, total, len(reports),
             json.dumps(extra, sort_keys=True))
    path = opts.get("reportfile")
    if path:
        with open(path, "w") as f:
            json.dump({"written": total, **extra,
                       "partitions": [{"partition": m.partition, "node": m.node,
                                       "written": m.written, "attempt": m.attempt}
                                      for m in sorted(reports, key=lambda m: m.partition)]},
                      f)
    return total


class DisqueBatchWriter(DataSourceArrowWriter):
    """``df.write.format("disque")``: one node per partition, idempotent ADDJOBs."""

    def __init__(self, opts: dict[str, str], schema: StructType) -> None:
        self.opts = opts
        self.spec = _AddJobSpec.from_options(opts, schema)
        self.nodes = discover(opts)
        self.write_id = uuid.uuid4().hex[:16]  # 64 bits: short keys, still unique

    def write(self, iterator: Iterator[RecordBatch]) -> WriteReport:
        """Executor side: write this partition's rows; report how many."""
        partition, attempt, _ = _task_context()
        node, written = write_partition(self.nodes, self.spec, f"{self.write_id}:{partition}:",
                                        partition, iterator)
        log.info("disque write %s partition %d attempt %d: %d jobs to %s", self.write_id,
                 partition, attempt, written, node.id[:8])
        return WriteReport(partition, node.id, written, attempt)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver side: log (and optionally save) the number of jobs written."""
        _report("write", self.opts, messages, {"write_id": self.write_id})

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver side: a task failed; jobs already written stay (a rerun of the same
        write would use a new write id: deduplication covers task retries only)."""
        done = sum(m.written for m in messages if isinstance(m, WriteReport))
        log.warning("disque write %s aborted after %d jobs written", self.write_id, done)


class DisqueStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("disque")``: keys from the query id and the batch id."""

    def __init__(self, opts: dict[str, str], schema: StructType) -> None:
        self.opts = opts
        self.spec = _AddJobSpec.from_options(opts, schema)
        self.nodes = discover(opts)
        self.fallback_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[RecordBatch]) -> WriteReport:
        """Executor side: write this partition of the micro-batch."""
        partition, attempt, tc = _task_context()
        query = batch = None
        if tc is not None:
            query = tc.getLocalProperty("sql.streaming.queryId")
            batch = tc.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            log.warning("disque stream write: no query/batch id in the task context; "
                        "replayed batches will not be deduplicated")
            query, batch = self.fallback_id, uuid.uuid4().hex
        node, written = write_partition(self.nodes, self.spec, f"{query}:{batch}:{partition}:",
                                        partition, iterator)
        return WriteReport(partition, node.id, written, attempt)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: log the jobs written by this micro-batch."""
        _report("stream write", self.opts, messages, {"batch": batchId})

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: the micro-batch failed; its replay reuses the same keys."""
        log.warning("disque stream write batch %d aborted", batchId)


# ---------------------------------------------------------------------------- batch read


@dataclass
class NodePartition(InputPartition):
    """One node to scan (batch read)."""

    node: NodeInfo

    def __init__(self, node: NodeInfo) -> None:
        self.node = node
        self.value = node.id


class DisqueSnapshotReader(DataSourceReader):
    """``spark.read.format("disque")``: every job on every node, nothing consumed."""

    def __init__(self, opts: dict[str, str], schema: StructType) -> None:
        check_options(opts, "the disque batch source", READ_OPTIONS)
        self.opts = opts
        self.schema = schema
        self.queues = opt_list(opts, "queue", "queues")
        if not self.queues:
            raise ValueError("the disque batch source needs option queue (or queues)")
        self.states = opt_list(opts, "states")
        self.fmt = body_type(opts)
        copies = opts.get("copies", "all").lower()
        if copies not in ("all", "primary"):
            raise ValueError("option copies: all or primary")
        self.primary_only = copies == "primary"
        self.auth = auth_options(opts)
        self.nodes = discover(opts)

    def partitions(self) -> list[NodePartition]:
        """One partition per node."""
        return [NodePartition(n) for n in self.nodes]

    def read(self, partition: InputPartition) -> Iterator[RecordBatch]:
        """Scan one node with JSCAN REPLY all; yields Arrow record batches."""
        node = cast(NodePartition, partition).node  # one of partitions()'s
        conn = connect(node.host, node.port, self.auth)
        prefix = node.id[:8]
        seen: set[bytes] = set()
        try:
            for queue in self.queues:
                cursor = b"0"
                while True:
                    args: list[bytes | str | int] = ["JSCAN", cursor, "COUNT", 1000,
                                                     "QUEUE", queue]
                    for s in self.states:
                        args += ["STATE", s]
                    args += ["REPLY", "all"]
                    cursor, jobs = conn.execute_command(*args)
                    cols: list[list[Any]] = [[] for _ in SNAPSHOT_COLUMNS]
                    for entry in jobs:
                        d = dict(zip(entry[::2], entry[1::2], strict=False))
                        jid = d[b"id"]
                        if jid in seen:  # JSCAN may return an element twice
                            continue
                        seen.add(jid)
                        sid = jid.decode()
                        if self.primary_only and sid[2:10] != prefix:
                            continue
                        ctime = int(d.get(b"ctime", 0))
                        for col, v in zip(cols, (
                                sid, to_str(d[b"queue"]),
                                decode_body(d.get(b"body", b""), self.fmt),
                                to_str(d[b"state"]),
                                datetime.fromtimestamp(ctime / 1e9, UTC),
                                int(d.get(b"nacks", 0)),
                                int(d.get(b"additional-deliveries", 0)), node.id), strict=True):
                            col.append(v)
                    if cols[0]:
                        yield arrow_batch(self.schema, cols)
                    if cursor in (b"0", 0, "0"):
                        break
        finally:
            conn.close()


# ---------------------------------------------------------------------------- stream read


@dataclass
class BatchPartition(InputPartition):
    """A share of one node's part of a micro-batch: the GETJOBs of ``chunks`` (token,
    COUNT), then a marker job named ``mark`` once they are all fetched."""

    node: NodeInfo
    mark: str
    chunks: list[tuple[str, int]]
    queues: list[str] = field(default_factory=list)

    def __init__(self, node: NodeInfo, mark: str, chunks: list[tuple[str, int]],
                 queues: list[str]) -> None:
        self.node, self.mark, self.chunks, self.queues = node, mark, chunks, queues
        self.value = mark


def batch_token(offset: Offset) -> str:
    """The token base of the micro-batch ending at ``offset``: ``spark:<stream>:<batch>``
    (its GETJOB chunks are ``<base>:<i>``, its markers ``<base>[#<reader>]``)."""
    return f"spark:{offset['stream']}:{offset['batch']}"


def mark_queue(token: str) -> str:
    """The queue where read tasks leave a marker job once they fetched under ``token``
    (``spark:<stream>:<batch>``): one queue per stream."""
    return "__disquepy_spark_marks__:" + token.split(":")[1]


def chunk_tokens(token: str, count: int, fetch: int) -> list[tuple[str, int]]:
    """The (token, COUNT) of every GETJOB a partition of ``count`` jobs runs."""
    out = []
    i = 0
    left = count
    while left > 0:
        k = min(fetch, left)
        out.append((f"{token}:{i}", k))
        left -= k
        i += 1
    return out


def node_readers(base: str, count: int, fetch: int,
                 readers: int) -> list[tuple[str, list[tuple[str, int]]]]:
    """How ``count`` jobs of one node in batch ``base`` are read: (marker token, chunks)
    per read task. The node's chunks (``chunk_tokens``) are dealt into at most
    ``readers`` contiguous groups, marked ``<base>#<k>``; a lone group is marked with
    the batch's own name ``base``."""
    chunks = chunk_tokens(base, count, fetch)
    n = max(1, min(readers, len(chunks)))
    if n == 1:
        return [(base, chunks)] if chunks else []
    size, extra = divmod(len(chunks), n)
    out, lo = [], 0
    for k in range(n):
        hi = lo + size + (1 if k < extra else 0)
        out.append((f"{base}#{k}", chunks[lo:hi]))
        lo = hi
    return out


def marker_batch(token: str) -> int:
    """The batch number in a marker token (``spark:<stream>:<batch>[#<reader>]``)."""
    return int(token.rsplit(":", 1)[1].split("#", 1)[0])


def share(qlens: dict[str, int], cap: int | None) -> dict[str, int]:
    """Split at most ``cap`` jobs between nodes (water-filling): every node gets its
    QLEN if the total fits, otherwise an equal share, leftovers to the larger ones."""
    plan = {nid: n for nid, n in qlens.items() if n > 0}
    if cap is None or sum(plan.values()) <= cap:
        return plan
    out: dict[str, int] = {}
    left = cap
    items = sorted(plan.items(), key=lambda kv: (kv[1], kv[0]))
    for i, (nid, n) in enumerate(items):
        give = min(n, left // (len(items) - i))
        out[nid] = give
        left -= give
    # integer division may leave a few: hand them out in order
    for nid, n in sorted(plan.items(), key=lambda kv: (-kv[1], kv[0])):
        if left <= 0:
            break
        extra = min(left, n - out[nid])
        out[nid] += extra
        left -= extra
    return {nid: n for nid, n in out.items() if n > 0}


class _InFlight(TypedDict):
    """A planned batch not yet acknowledged (DisqueStreamReader._inflight)."""

    off: Offset  # its end offset
    seen: dict[str, float]  # node id -> when all its read tasks' markers were seen
    sent: dict[str, float]  # node id -> when WORKING last went out for its jobs


class DisqueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("disque")``: consume jobs, ack after the batch commits."""

    def __init__(self, opts: dict[str, str], schema: StructType) -> None:
        check_options(opts, "the disque stream source", STREAM_READ_OPTIONS)
        self.opts = opts
        self.schema = schema
        self.queues = opt_list(opts, "queue", "queues")
        if not self.queues:
            raise ValueError("the disque stream source needs option queue (or queues)")
        self.fmt = body_type(opts)
        self.auth = auth_options(opts)
        self.max_jobs = opt_int(opts, "maxjobspertrigger", None)
        self.fetch = max(1, opt_int(opts, "fetchsize", 1000))
        # read tasks per node and batch: a node's jobs are fetched (and turned into
        # Arrow batches) by that many executor tasks in parallel
        self.readers = max(1, opt_int(opts, "readerspernode", 2))
        self.working_interval = float(opts.get("workinginterval", "60"))
        self.stream_id: str | None = None
        self.nodes: dict[str, NodeInfo] = {}
        self.acked: set[tuple[str, int]] = set()
        self.available_budget: int | None = None
        self._lock = threading.Lock()
        # (stream, batch) -> {"off": end offset, "seen": {node: t}, "sent": {node: t}}
        self._inflight: dict[tuple[str, int], _InFlight] = {}
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None
        self._acker: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:  # the reader's attributes
        # the reader is pickled into every read task: driver-only state stays behind
        state = dict(self.__dict__)
        for k in ("_lock", "_inflight", "_stop", "_heart", "acked", "_acker"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._inflight = {}
        self._stop = threading.Event()
        self._heart = None
        self._acker = None
        self.acked = set()

    # -- nodes
    def _refresh_nodes(self) -> dict[str, NodeInfo]:
        self.nodes = {n.id: n for n in discover(self.opts)}
        return self.nodes

    def _node(self, nid: str) -> NodeInfo | None:
        if nid not in self.nodes:
            self._refresh_nodes()
        return self.nodes.get(nid)

    def _qlens(self) -> dict[str, int]:
        out = {}
        for nid, node in self._refresh_nodes().items():
            try:
                c = connect(node.host, node.port, self.auth, timeout=10)
                try:
                    out[nid] = sum(pipeline(c, [("QLEN", q) for q in self.queues]))
                finally:
                    c.close()
            except Exception as e:  # an unreachable node has nothing for us right now
                log.warning("disque stream: QLEN on %s failed: %s", nid[:8], e)
        return out

    # -- offsets
    def initialOffset(self) -> Offset:
        """A new stream: a fresh identity, batch 0, nothing planned."""
        if self.stream_id is None:
            self.stream_id = uuid.uuid4().hex
        return {"stream": self.stream_id, "batch": 0, "plan": {}}

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxJobsPerTrigger as Spark's ReadMaxRows."""
        return ReadMaxRows(self.max_jobs) if self.max_jobs else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: read at most the jobs queued now."""
        self.available_budget = sum(self._qlens().values())
        log.info("disque stream: availableNow, %d jobs queued", self.available_budget)

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """The batch ending at ``start`` is committed: ack it, then plan the next.

        When a next batch follows, the ack runs on a thread while that batch is read
        (at most one ack in flight); when none follows (idle trigger, the end of
        availableNow) it completes before this returns."""
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if self.available_budget is not None:
            cap = self.available_budget if cap is None else min(cap, self.available_budget)
        plan = share(self._qlens(), cap) if cap is None or cap > 0 else {}
        if not plan:
            self._wait_acks()
            self._ack_batch(start)
            return start
        self._ack_async(start)
        if self.available_budget is not None:
            self.available_budget -= sum(plan.values())
        return {"stream": start["stream"], "batch": int(start["batch"]) + 1, "plan": plan}

    def _ack_async(self, offset: Offset) -> None:
        self._wait_acks()
        if not offset or not offset.get("plan"):
            return
        self._acker = threading.Thread(target=self._ack_batch, args=(offset,),
                                       name="disque-ack", daemon=True)
        self._acker.start()

    def _wait_acks(self, timeout: float = 300.0) -> None:
        t = self._acker
        if t is not None:
            t.join(timeout)
            if t.is_alive():
                log.warning("disque stream: an ack is still running after %.0f s", timeout)
            self._acker = None

    def partitions(self, start: Offset, end: Offset) -> list[BatchPartition]:
        """One partition per node with jobs planned in the batch ending at ``end``."""
        if end == start or not end.get("plan"):
            return []
        key = (end["stream"], int(end["batch"]))
        base = batch_token(end)
        parts = []
        for nid in sorted(end["plan"]):
            node = self._node(nid)
            if node is None:  # gone: its jobs come back elsewhere by their retry
                log.warning("disque stream: node %s of batch %s is gone", nid[:8], key[1])
                continue
            for mark, chunks in node_readers(base, int(end["plan"][nid]), self.fetch,
                                             self.readers):
                parts.append(BatchPartition(node, mark, chunks, self.queues))
        with self._lock:
            self._inflight.setdefault(key, {"off": end, "seen": {}, "sent": {}})
        self._start_heartbeat()
        return parts

    def read(self, partition: InputPartition) -> Iterator[RecordBatch]:
        """Executor side: fetch this node's share under the batch's tokens."""
        part = cast(BatchPartition, partition)  # one of partitions()'s
        node = part.node
        conn = connect(node.host, node.port, self.auth)
        try:
            for reply in self._fetch(conn, part.chunks, part.queues):
                if reply:
                    yield arrow_batch(self.schema, stream_columns(reply, self.fmt, node.id))
            # every chunk fetched: tell the driver these tokens are safe to replay
            mark = part.mark
            conn.execute_command("ADDJOB", mark_queue(mark), mark, 0, "REPLICATE", 1,
                                 "TTL", 86400, "RETRY", 0, "IDEMPOTENT", mark + ":mark")
        finally:
            conn.close()

    @staticmethod
    def _fetch(conn: redis.Redis, chunks: list[tuple[str, int]], queues: list[str],
               window: int = 4) -> Iterator[list[list[Any]] | None]:
        """GETJOB replies of every chunk (its jobs' fields, or None: none), ``window``
        chunks pipelined per round trip."""
        for lo in range(0, len(chunks), window):
            cmds: list[Command] = [
                ("GETJOB", "NOHANG", "COUNT", k, "WITHCOUNTERS", "TOKEN", t, "FROM", *queues)
                for t, k in chunks[lo:lo + window]]
            for reply in pipeline(conn, cmds):
                if isinstance(reply, Exception):
                    raise reply
                yield reply

    def commit(self, end: Offset) -> None:
        """Spark committed every batch up to ``end``: ack it (usually done already, or
        running since ``latestOffset``)."""
        self._wait_acks()
        self._ack_batch(end)

    def stop(self) -> None:
        """The query ended: let a running ack finish, stop the WORKING thread (jobs of a
        batch not committed come back by their retry)."""
        self._wait_acks(60.0)
        self._stop.set()

    # -- acks and WORKING
    def _batch_ids(self, offset: Offset) -> dict[str, list[bytes]]:
        """node id -> job IDs the batch's tokens delivered there (nothing consumed)."""
        out: dict[str, list[bytes]] = {}
        base = batch_token(offset)
        for nid, count in sorted(offset.get("plan", {}).items()):
            node = self._node(nid)
            if node is None:
                continue
            cmds = [("GETJOB", "NOHANG", "COUNT", k, "TOKEN", t, "FROM", PROBE_QUEUE)
                    for t, k in chunk_tokens(base, int(count), self.fetch)]
            c = connect(node.host, node.port, self.auth)
            try:
                ids = []
                for reply in pipeline(c, cmds):
                    if isinstance(reply, Exception):
                        raise reply
                    ids += [job[1] for job in reply or ()]
                out[nid] = ids
            finally:
                c.close()
        return out

    def _ack_batch(self, offset: Offset) -> None:
        if not offset or not offset.get("plan"):
            return
        key = (offset["stream"], int(offset["batch"]))
        if key in self.acked:
            return
        t_ack = time.monotonic()
        total = 0
        base = batch_token(offset)
        # ACKTOKEN acks what each token delivered on its node, in one command per
        # 1000 tokens: no replay of the bodies, no second round trip with the IDs
        for nid, count in sorted(offset["plan"].items()):
            node = self._node(nid)
            if node is None:
                continue
            tokens = [t for t, _ in chunk_tokens(base, int(count), self.fetch)]
            try:
                c = connect(node.host, node.port, self.auth)
            except Exception as e:  # not acked: the jobs come back by retry (duplicates)
                log.warning("disque stream: ACKTOKEN on %s failed: %s", nid[:8], e)
                continue
            try:
                for r in pipeline(c, [("ACKTOKEN", *tokens[lo:lo + 1000])
                                      for lo in range(0, len(tokens), 1000)]):
                    if isinstance(r, Exception):
                        raise r
                    total += int(r)
            except Exception as e:  # not acked: the jobs come back by retry (duplicates)
                log.warning("disque stream: ACKTOKEN on %s failed: %s", nid[:8], e)
            finally:
                c.close()
        self._drop_markers(offset)
        with self._lock:
            self._inflight.pop(key, None)
            for k in [k for k in self._inflight if k[0] == key[0] and k[1] <= key[1]]:
                self._inflight.pop(k)
        self.acked.add(key)
        log.info("disque stream %s: batch %d committed, %d jobs acked in %.3f s", key[0][:8], key[1],
                 total, time.monotonic() - t_ack)

    def _markers(self, nid: str, stream: str) -> list[tuple[bytes, str]]:
        """(marker job ID, token) of every read task that finished on node ``nid``."""
        node = self._node(nid)
        if node is None:
            return []
        c = connect(node.host, node.port, self.auth, timeout=10)
        try:
            jobs = c.execute_command("QPEEK", mark_queue(f"spark:{stream}"), 100000)
        finally:
            c.close()
        return [(j[1], j[2].decode()) for j in jobs or ()]

    def _drop_markers(self, offset: Offset) -> None:
        upto = int(offset["batch"])
        for nid in offset.get("plan", {}):
            try:
                old = [jid for jid, tok in self._markers(nid, offset["stream"])
                       if marker_batch(tok) <= upto]
                if old:
                    node = self.nodes[nid]
                    c = connect(node.host, node.port, self.auth, timeout=10)
                    try:
                        c.execute_command("DELJOB", *old)
                    finally:
                        c.close()
            except Exception as e:  # harmless: a later commit drops them, or their TTL
                log.info("disque stream: batch %s's read markers on node %s stay for now "
                         "(%s: %s); harmless: the next commit drops them, else they expire "
                         "within a day", upto, nid[:8], type(e).__name__, e)

    def _batch_ids_safe(self, offset: Offset) -> dict[str, list[bytes]]:
        try:
            return self._batch_ids(offset)
        except Exception as e:
            log.warning("disque stream: reading back batch %s failed: %s", offset["batch"], e)
            return {}

    def _start_heartbeat(self) -> None:
        if self.working_interval <= 0 or (self._heart is not None and self._heart.is_alive()):
            return
        self._heart = threading.Thread(target=self._heartbeat, name="disque-working",
                                       daemon=True)
        self._heart.start()

    def _heartbeat(self) -> None:
        """Keep in-flight batches' jobs: once a node's read task has left its marker
        (it fetched everything), send WORKING for its jobs every ``working_interval``."""
        interval = self.working_interval
        while not self._stop.wait(min(interval / 2, 0.5)):
            now = time.monotonic()
            with self._lock:
                batches = list(self._inflight.items())
            for k, st in batches:
                off = st["off"]
                base = batch_token(off)
                for nid in off["plan"]:
                    if nid in st["seen"]:
                        continue
                    # every read task of the node left its marker: all tokens were used
                    marks = {m for m, _ in node_readers(base, int(off["plan"][nid]),
                                                        self.fetch, self.readers)}
                    try:
                        if marks <= {t for _, t in self._markers(nid, off["stream"])}:
                            st["seen"][nid] = now
                    except Exception as e:
                        log.warning("disque stream: reading markers on %s failed: %s",
                                    nid[:8], e)
                # at once when the marker shows up (a job's retry counts from when it
                # was queued, not delivered: it may be due soon), then every interval
                due = [nid for nid in st["seen"]
                       if nid not in st["sent"] or now - st["sent"][nid] >= interval]
                if not due:
                    continue
                part = dict(off, plan={nid: off["plan"][nid] for nid in due})
                n = 0
                for nid, ids in self._batch_ids_safe(part).items():
                    st["sent"][nid] = now
                    node = self.nodes.get(nid)
                    if node is None or not ids:
                        continue
                    c = connect(node.host, node.port, self.auth)
                    try:
                        replies = pipeline(c, [("WORKING", i) for i in ids])
                        n += sum(1 for r in replies if not isinstance(r, Exception))
                    except Exception as e:
                        log.warning("disque stream: WORKING on %s failed: %s", nid[:8], e)
                    finally:
                        c.close()
                log.info("disque stream %s: batch %d still running, WORKING sent for %d jobs",
                         k[0][:8], k[1], n)


# ---------------------------------------------------------------------------- the source


class DisqueDataSource(DataSource):
    """The ``"disque"`` format: batch/stream read and write of disquepy queues.

    Options (keys case-insensitive): ``nodes`` (seed list ``host:port,...``, default
    ``127.0.0.1:7711``), ``password``, ``user``, ``tls`` (with ``tlsCaCert``,
    ``tlsCert``, ``tlsKey``), ``queue``/``queues``; write: ``replicate``,
    ``retry``, ``ttl``, ``delay``, ``maxlen``, ``async``, ``timeout`` (ms, default
    10000), ``bodyColumn`` (default ``body``; string/binary as is, struct/map/array as
    JSON; without such a column the whole row as JSON), ``queueColumn``, ``keyColumn``,
    ``idempotent`` (default true), ``batchSize``, ``reportFile``; read: ``bodyFormat``
    (string or binary), ``states``, ``copies`` (all or primary); stream read:
    ``maxJobsPerTrigger``, ``fetchSize``, ``readersPerNode``, ``workingInterval``;
    stream read as a consumer group (:mod:`disquepy.spark.groups`): ``group``,
    ``lease``, ``maxEventsPerTrigger``, ``maxDeliveries``.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``"disque"``."""
        return "disque"

    def _opts(self) -> dict[str, str]:
        return lower_options(self.options)

    def schema(self) -> str:
        """id, queue, body, state, ctime, nacks, additional_deliveries, node; a group
        stream read (option ``group``): id, queue, group, body, deliveries."""
        body = "binary" if body_type(self._opts()) == "binary" else "string"
        if "group" in self._opts():
            return f"id string, queue string, group string, body {body}, deliveries long"
        return (f"id string, queue string, body {body}, state string, ctime timestamp, "
                f"nacks long, additional_deliveries long, node string")

    def reader(self, schema: StructType) -> DisqueSnapshotReader:
        """Batch read: a non-consuming snapshot."""
        if "group" in self._opts():
            raise ValueError("option group reads a queue's events as a consumer group: "
                             "use spark.readStream (spark.read is a non-consuming "
                             "snapshot of jobs)")
        return DisqueSnapshotReader(self._opts(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Streaming read: consume with at-least-once semantics (the jobs of the
        queues, or with option ``group`` their events as that consumer group)."""
        opts = self._opts()
        if "group" in opts or "lease" in opts or "maxdeliveries" in opts:
            from .groups import DisqueGroupStreamReader

            return DisqueGroupStreamReader(opts, schema)
        return DisqueStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DisqueBatchWriter:
        """Batch write."""
        return DisqueBatchWriter(self._opts(), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DisqueStreamWriter:
        """Streaming write."""
        return DisqueStreamWriter(self._opts(), schema)

