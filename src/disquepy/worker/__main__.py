"""``python -m disquepy.worker module:handler --queues a,b --concurrency 4``: one worker
process (``--processes N``: a pool of N, signals forwarded). ``module:attr`` names a
handler function (then ``--queues`` is required) or a :class:`~disquepy.worker.Tasks`
app."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import subprocess
import sys

from ..client import Disque
from ..client.priority import DEFAULT_LOW_SHARE
from .backoff import Backoff
from .core import Worker
from .tasks import Tasks


def load(target: str):
    mod, sep, attr = target.partition(":")
    if not sep:
        raise SystemExit(f"expected module:attribute, got {target!r}")
    sys.path.insert(0, os.getcwd())
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m disquepy.worker",
                                description="Run a disquepy worker process.")
    p.add_argument("target", help="module:handler or module:tasks_app")
    p.add_argument("-q", "--queues", default="",
                   help="comma-separated queues, highest priority first")
    p.add_argument("-c", "--concurrency", type=int, default=1)
    p.add_argument("-n", "--nodes", default=os.environ.get("DISQUE_NODES", "127.0.0.1:7711"),
                   help="comma-separated seed nodes host:port (env DISQUE_NODES)")
    p.add_argument("--password", default=os.environ.get("DISQUE_PASSWORD"))
    p.add_argument("--body", choices=("json", "bytes", "text"), default="json")
    p.add_argument("--backoff", default=None,
                   help="re-add failed jobs with a delay: fixed:S or exponential[:base:factor:max]")
    p.add_argument("--dead-letter-after", type=int, default=None,
                   help="dead-letter a job after this many failures")
    p.add_argument("--dead-letter-deliveries", type=int, default=None,
                   help="dead-letter a job delivered this many extra times")
    p.add_argument("--shutdown-timeout", type=float, default=30.0)
    p.add_argument("--poll-timeout-ms", type=int, default=1000)
    p.add_argument("--no-heartbeat", action="store_true")
    p.add_argument("--affinity", action="store_true",
                   help="move to the node producing most of the jobs received")
    p.add_argument("--fastack", action="store_true", help="FASTACK instead of ACKJOB")
    p.add_argument("--priorities", action="store_true",
                   help="the queues are logical queues with high/medium/low levels "
                        "(q:high, q, q:low), fetched high first")
    p.add_argument("--low-share", type=float, default=DEFAULT_LOW_SHARE,
                   help="with --priorities, the share of fetches that take low first "
                        "(guards low jobs against starvation; 0: strict)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus metrics at http://127.0.0.1:PORT/metrics "
                        "(with --processes N: PORT, PORT+1 ... PORT+N-1, one per process)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("-p", "--processes", type=int, default=1,
                   help="run a pool of this many worker processes (SIGTERM/SIGINT forwarded)")
    a = p.parse_args(argv)
    if a.processes > 1:
        return run_pool(sys.argv[1:] if argv is None else argv, a.processes, a.metrics_port)
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    client = Disque(a.nodes.split(","), password=a.password, affinity=a.affinity)
    obj = load(a.target)
    queues = [q for q in a.queues.split(",") if q]
    metrics = None
    if a.metrics_port is not None:
        from .metrics import WorkerMetrics

        metrics = WorkerMetrics()
        metrics.serve(a.metrics_port)
        logging.getLogger("disquepy.worker").info(
            "metrics at http://127.0.0.1:%d/metrics", a.metrics_port)
    common = dict(shutdown_timeout=a.shutdown_timeout, poll_timeout_ms=a.poll_timeout_ms,
                  heartbeat=not a.no_heartbeat, ack="fastack" if a.fastack else "ack",
                  priorities=a.priorities, low_share=a.low_share, metrics=metrics)
    if isinstance(obj, Tasks):
        w = obj.worker(a.concurrency, queues or None, client, **common)
    elif callable(obj):
        if not queues:
            p.error("--queues is required with a handler function")
        w = Worker(client, queues, a.concurrency, obj, body=a.body,
                   backoff=Backoff.parse(a.backoff) if a.backoff else None,
                   dead_letter_after=a.dead_letter_after,
                   dead_letter_deliveries=a.dead_letter_deliveries, **common)
    else:
        p.error(f"{a.target} is neither a function nor a Tasks app")
    clean = w.run()
    client.close()
    return 0 if clean else 3


def run_pool(argv: list[str], n: int, metrics_port: int | None = None) -> int:
    """Start ``n`` copies of this worker (same arguments, one process each), forward
    SIGTERM/SIGINT to them, wait; the exit status is the worst child's. With
    ``--metrics-port P`` the i-th process serves its metrics on port P+i (scrape each)."""
    args = []
    skip = False
    for x in argv:  # drop --processes N / -p N and --metrics-port P (given per child)
        if skip:
            skip = False
            continue
        if x in ("-p", "--processes", "--metrics-port"):
            skip = True
            continue
        if x.startswith(("--processes=", "--metrics-port=")):
            continue
        args.append(x)
    children = [subprocess.Popen([sys.executable, "-m", "disquepy.worker", *args, *(
        ["--metrics-port", str(metrics_port + i)] if metrics_port is not None else [])])
        for i in range(n)]

    def forward(signum, frame):
        for c in children:
            if c.poll() is None:
                c.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return max(c.wait() for c in children)


if __name__ == "__main__":
    sys.exit(main())
