"""The two Spark examples, at small scale, on the 3-node cluster."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from spark_support import wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(180)
def test_fanout_then_stream_worker_processes_every_job_once(spark, cluster3, tmp_path,
                                                           capsys):
    fanout = load("spark_fanout")
    worker = load("spark_stream_worker")
    # the default partitions: a multiple of the nodes, so all 3 get jobs (with the
    # session's 2 cores, 2 partitions used to leave one node out)
    res = fanout.run(spark, cluster3.nodes, queue="emails", rows=1500, progress=0.2)
    assert res["written"] == 1500 and res["partitions"] % 3 == 0
    assert sorted(res["per_node"].values()) == [500, 500, 500]
    assert cluster3.qlen("emails") == 1500

    assert "jobs queued" in capsys.readouterr().out  # progress lines
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    q = worker.start(spark, cluster3.nodes, "emails", out, ck, once=True, max_jobs=750)
    lines: list[str] = []
    worker.follow(q, 0.5, lines.append)  # returns once the query ends
    assert not q.isActive and q.exception() is None
    # progress lines: the batches' jobs add up to every job, the last line says all
    batches = [int(ln.split("batch")[1].split(":")[1].split("jobs")[0].replace(",", ""))
               for ln in lines]
    assert sum(batches) == 1500 and "(1,500 in all" in lines[-1], lines
    rows = spark.read.parquet(out)
    assert rows.count() == 1500
    assert rows.select("job_id").distinct().count() == 1500
    assert rows.select("user_id").distinct().count() == 1500
    one = rows.where("user_id = 7").first()
    assert one.subject == "Welcome to user7@example.net"
    wait_for(lambda: cluster3.jobs() == 0, what="every job acked")
