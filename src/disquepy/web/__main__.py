"""``disque-web --nodes HOST:PORT[,HOST:PORT...] --host 127.0.0.1 --port 8000``: the HTTP
API, the dashboard (``/``), the OpenAPI docs (``/docs``) and ``/metrics`` on uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ..client import options as connection_options


def main(argv: list[str] | None = None) -> int:
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
    a = p.parse_args(argv)
    conn = connection_options.client_kwargs(p, a)
    nodes = [n.strip() for n in a.nodes.split(",") if n.strip()]
    if not nodes:
        p.error("--nodes is empty")
    if not 0 < a.port < 65536:
        p.error("--port must be 1-65535")
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import uvicorn

    from .app import create_app

    app = create_app(nodes, cache_ttl=a.cache_ttl, **conn)
    logging.getLogger("disquepy.web").info(
        "disque-web on http://%s:%d/ (nodes %s; API docs at /docs)", a.host, a.port,
        ",".join(nodes))
    uvicorn.run(app, host=a.host, port=a.port, log_level=a.log_level.lower(),
                access_log=False, loop="auto")
    return 0


if __name__ == "__main__":
    sys.exit(main())
