"""The connector's rows: the columns a read produces and their Arrow batches (the
snapshot and stream readers of :mod:`.source` and the group reader of :mod:`.groups`)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import StructType

SNAPSHOT_COLUMNS = ("id", "queue", "body", "state", "ctime", "nacks",
                    "additional_deliveries", "node")
#: a stream has the same columns; ``state`` is "active" and ``ctime`` null (GETJOB does
#: not carry the creation time)
STREAM_COLUMNS = SNAPSHOT_COLUMNS


def body_type(opts: dict[str, str]) -> str:
    fmt = opts.get("bodyformat", "string").lower()
    if fmt not in ("string", "binary"):
        raise ValueError("option bodyFormat: string or binary")
    return fmt


def decode_body(body: bytes, fmt: str) -> Any:
    return body if fmt == "binary" else body.decode("utf-8", "replace")


def to_str(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def stream_columns(reply: list[list[Any]], fmt: str, node_id: str) -> list[list[Any]]:
    """A ``GETJOB ... WITHCOUNTERS`` reply as columns in STREAM_COLUMNS order, a column
    at a time (this runs for every job a stream reads). A job's fields are bytes but for
    the counters (ints); a column holds one Spark type each (strings, bytes, ints,
    nulls), so columns are lists of Any."""
    n = len(reply)
    names: dict[bytes, str] = {}  # a reply holds a few queue names: decode each once
    queues = [names.get(j[0]) or names.setdefault(j[0], to_str(j[0])) for j in reply]
    bodies = ([j[2] for j in reply] if fmt == "binary"
              else [j[2].decode("utf-8", "replace") for j in reply])
    nacks: list[int] = []
    adeliv: list[int] = []
    for j in reply:
        if len(j) == 7 and j[3] == b"nacks" and j[5] == b"additional-deliveries":
            nacks.append(int(j[4]))
            adeliv.append(int(j[6]))
        else:  # counters in another shape: by name
            d = dict(zip(j[3::2], j[4::2], strict=False))
            nacks.append(int(d.get(b"nacks", 0)))
            adeliv.append(int(d.get(b"additional-deliveries", 0)))
    return [[j[1].decode() for j in reply], queues, bodies, ["active"] * n, [None] * n,
            nacks, adeliv, [node_id] * n]


def arrow_batch(schema: StructType, columns: list[list[Any]],
                 names: tuple[str, ...] = SNAPSHOT_COLUMNS) -> Any:
    """Columns in ``names`` order (SNAPSHOT_COLUMNS by default) -> an Arrow batch of
    ``schema``'s columns (a user schema may pick and reorder them), typed as Spark
    expects them."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    pa_schema = to_arrow_schema(schema, timezone="UTC")
    by_name = dict(zip(names, columns, strict=True))
    arrays = [pa.array(by_name[f.name], type=f.type) for f in pa_schema]
    return pa.RecordBatch.from_arrays(arrays, schema=pa_schema)
