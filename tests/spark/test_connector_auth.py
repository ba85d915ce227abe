"""The "disque" Spark connector as an ACL user over mutual TLS: the options ``user``,
``password``, ``tls``, ``tlsCaCert``, ``tlsCert``, ``tlsKey`` (a real node; the writer and
reader run as Spark's executors would run them)."""

from __future__ import annotations

import pytest
from support import ROLE_USERS, start_secure_server

from disquepy.spark._nodes import lower_options
from disquepy.spark.source import DisqueBatchWriter, DisqueSnapshotReader, write_partition


@pytest.fixture
def tls_node(server_factory, tmp_path):
    """With tls-cluster yes the node announces its TLS port in HELLO, which the connector
    follows (as a TLS-only node with port 0 would)."""
    return start_secure_server(server_factory, tmp_path / "certs", "--tls-cluster", "yes")


def options(s, user: str, **more) -> dict[str, str]:
    return lower_options({"nodes": f"127.0.0.1:{s.tls_port}", "user": user,
                          "password": ROLE_USERS[user][0], "tls": "true",
                          "tlsCaCert": s.tls["cacert"], "tlsCert": s.tls["cert"],
                          "tlsKey": s.tls["key"], **more})


def test_write_as_producer_and_read_as_viewer_over_tls(tls_node):
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructType

    s = tls_node
    writer = DisqueBatchWriter(options(s, "producer", queue="sq"),
                               StructType().add("body", StringType()))
    assert [n.port for n in writer.nodes] == [s.tls_port]
    batch = pa.RecordBatch.from_pydict({"body": [f"row {i}" for i in range(20)]})
    _, n = write_partition(writer.nodes, writer.spec, "w1:0:", 0, [batch])
    assert n == 20
    from pyspark.sql.types import LongType, TimestampType

    schema = StructType()
    for name, kind in (("id", StringType()), ("queue", StringType()), ("body", StringType()),
                       ("state", StringType()), ("ctime", TimestampType()),
                       ("nacks", LongType()), ("additional_deliveries", LongType()),
                       ("node", StringType())):
        schema = schema.add(name, kind)
    reader = DisqueSnapshotReader(options(s, "viewer", queue="sq"), schema)
    (part,) = reader.partitions()
    bodies = sorted(x for b in reader.read(part) for x in b.column("body").to_pylist())
    assert bodies == sorted(f"row {i}" for i in range(20))
    # the viewer may not write: the task fails with the server's refusal
    viewer = DisqueBatchWriter(options(s, "viewer", queue="sq"),
                               StructType().add("body", StringType()))
    with pytest.raises(Exception, match="NOPERM|no permissions to run the 'addjob'"):
        write_partition(viewer.nodes, viewer.spec, "w2:0:", 0, [batch])


def test_tls_files_need_tls(tls_node):
    with pytest.raises(ValueError, match="need tls=true"):
        DisqueSnapshotReader(lower_options({"nodes": "127.0.0.1:1", "queue": "q",
                                            "tlsCaCert": "ca.crt"}), None)
