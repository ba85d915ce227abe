"""``disque-web --nodes HOST:PORT[,HOST:PORT...] --host 127.0.0.1 --port 8000``: the HTTP
API, the dashboard (``/``), the OpenAPI docs (``/docs``) and ``/metrics`` on uvicorn."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from ..client import options as connection_options
from ..extras import require


def main(argv: list[str] | None = None) -> int:
    require("web", "disque-web")
    p = argparse.ArgumentParser(
        prog="disque-web", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="HTTP API, dashboard and metrics for disquepy.",
        epilog="""What POST /jobs asks of the cluster, by default:
  REPLICATE a majority of the nodes (HELLO's list, down ones included), at most 3:
  1 of 1, 2 of 2, 2 of 3, 3 of 4 or more. A job answered 202 has that many copies,
  so the loss of one node loses no accepted job, and with one node of three down
  POST /jobs keeps working. Replication is synchronous (never ASYNC: a 202 before
  the copies exist could be lost with one node), and the node gives up after
  --replication-timeout, deleting the job and answering NOREPL: a 503, nothing kept,
  safe to retry. Every job carries an idempotency key (the Idempotency-Key header,
  or one made per request); a 503 whose outcome is unknown names it: send the same
  request with that key to get the job if it was kept, never a second one.""")
    p.add_argument("-n", "--nodes", default=os.environ.get("DISQUE_NODES", "127.0.0.1:7711"),
                   help="comma-separated seed nodes host:port (env DISQUE_NODES)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--cache-ttl", type=float, default=1.0,
                   help="seconds a cluster snapshot (dashboard, /metrics) is reused")
    p.add_argument("--log-level", default="info")
    p.add_argument("--replicate", default="majority", metavar="N|majority",
                   help="copies of each job submitted without 'replicate' (default: a "
                        "majority of the nodes, at most 3; see below)")
    p.add_argument("--replication-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="how long ADDJOB waits for the copies before the node gives up "
                        "(503, nothing kept); below the 10 s client timeout (default 5)")
    p.add_argument("--default-retry", default=None, metavar="JSON",
                   help="retry policy stamped on jobs submitted without one, the job "
                        "envelope's (POST /jobs' 'retry' object), e.g. '{\"max_retries\": "
                        "3, \"strategy\": \"exponential\", \"base\": 1, \"cap\": 600}' "
                        "(default: none stamped; the worker applies its queue's, else "
                        "Disqueue's: 3 retries, exponential from 1 s)")
    connection_options.add_arguments(p)
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes serving the same port (each with its own "
                        "connections to the nodes); more than 1 where there are cores")
    a = p.parse_args(argv)
    conn = connection_options.client_kwargs(p, a)
    nodes = [n.strip() for n in a.nodes.split(",") if n.strip()]
    if not nodes:
        p.error("--nodes is empty")
    if not 0 < a.port < 65536:
        p.error("--port must be 1-65535")
    if not 1 <= a.workers <= 64:
        p.error("--workers must be 1-64")
    options: dict = {"cache_ttl": a.cache_ttl,
                     "replication_timeout": a.replication_timeout}
    if a.replicate != "majority":
        if not a.replicate.isdigit() or not 1 <= int(a.replicate) <= 1000:
            p.error("--replicate must be 'majority' or a number of copies, 1-1000")
        options["replicate"] = int(a.replicate)
    if not 0 < a.replication_timeout < 10:
        p.error("--replication-timeout must be above 0 and below 10 seconds")
    if a.default_retry is not None:
        options["default_retry"] = retry_policy(p, a.default_retry)
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import uvicorn

    logging.getLogger("disquepy.web").info(
        "disque-web on http://%s:%d/ (nodes %s; API docs at /docs)", a.host, a.port,
        ",".join(nodes))
    opts = dict(host=a.host, port=a.port, log_level=a.log_level.lower(), access_log=False,
                loop="auto")
    if a.workers == 1:
        from .app import asgi_app

        uvicorn.run(asgi_app(nodes, **options, **conn), **opts)
        return 0
    # several processes: each builds the app from the environment (app_from_env), and
    # this process's own counters are shared through prometheus-client's multiprocess
    # files, so /metrics answers the same whichever worker serves it
    import tempfile

    with tempfile.TemporaryDirectory(prefix="disque-web-metrics-") as d:
        options["history_dir"] = d  # the charts' history, shared (web/history.py)
        os.environ.update(PROMETHEUS_MULTIPROC_DIR=d, DISQUE_NODES=",".join(nodes),
                          DISQUE_WEB_OPTIONS=json.dumps(options),
                          DISQUE_WEB_CONNECTION=json.dumps(conn))
        uvicorn.run("disquepy.web.app:app_from_env", factory=True, workers=a.workers,
                    **opts)
    return 0


def retry_policy(p: argparse.ArgumentParser, text: str) -> dict:
    """--default-retry's JSON as the envelope's policy (its defaults filled in), or an
    error through ``p``."""
    from ..client.envelope import RetryPolicy

    try:
        return RetryPolicy.from_dict(json.loads(text)).to_dict()
    except ValueError as e:  # json.JSONDecodeError is one
        p.error(f"--default-retry: {e}")
    raise AssertionError("unreachable")  # p.error exits


if __name__ == "__main__":
    sys.exit(main())
