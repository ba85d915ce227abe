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
    p = argparse.ArgumentParser(prog="disque-web",
                                description="HTTP API, dashboard and metrics for disquepy.")
    p.add_argument("-n", "--nodes", default=os.environ.get("DISQUE_NODES", "127.0.0.1:7711"),
                   help="comma-separated seed nodes host:port (env DISQUE_NODES)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--cache-ttl", type=float, default=1.0,
                   help="seconds a cluster snapshot (dashboard, /metrics) is reused")
    p.add_argument("--log-level", default="info")
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
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import uvicorn

    logging.getLogger("disquepy.web").info(
        "disque-web on http://%s:%d/ (nodes %s; API docs at /docs)", a.host, a.port,
        ",".join(nodes))
    opts = dict(host=a.host, port=a.port, log_level=a.log_level.lower(), access_log=False,
                loop="auto")
    if a.workers == 1:
        from .app import create_app

        uvicorn.run(create_app(nodes, cache_ttl=a.cache_ttl, **conn), **opts)
        return 0
    # several processes: each builds the app from the environment (app_from_env), and
    # this process's own counters are shared through prometheus-client's multiprocess
    # files, so /metrics answers the same whichever worker serves it
    import tempfile

    with tempfile.TemporaryDirectory(prefix="disque-web-metrics-") as d:
        os.environ.update(PROMETHEUS_MULTIPROC_DIR=d, DISQUE_NODES=",".join(nodes),
                          DISQUE_WEB_CACHE_TTL=str(a.cache_ttl),
                          DISQUE_WEB_CONNECTION=json.dumps(conn))
        uvicorn.run("disquepy.web.app:app_from_env", factory=True, workers=a.workers,
                    **opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
