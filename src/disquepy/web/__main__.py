"""``disque-web --nodes HOST:PORT[,HOST:PORT...] --host 127.0.0.1 --port 8000``: the HTTP
API, the dashboard (``/``), the OpenAPI docs (``/docs``) and ``/metrics`` on uvicorn."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from ..client import options as connection_options
from ..extras import require

if TYPE_CHECKING:
    from .guard import Policy


def main(argv: list[str] | None = None) -> int:
    require("web", "disque-web")
    from . import guard
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
    g = p.add_argument_group("who may use it (docs/SECURITY.md, disque-web)")
    g.add_argument("--auth", choices=("none", "nodes"), default="none",
                   help="nodes: people log in (the login page, POST /login, or HTTP Basic) "
                        "with a user of the nodes' own ACL, and every request runs as that "
                        "user (default: none)")
    g.add_argument("--token-file", default=None, metavar="FILE",
                   help="bearer tokens ('Authorization: Bearer ...', or the login page), "
                        "one '<name> <sha256 hex of the token>' a line; they act as "
                        "disque-web's own --user")
    g.add_argument("--metrics-token-file", default=None, metavar="FILE",
                   help="a token file for /metrics (open without one; /health always is)")
    g.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name clients reach this server by (the Host header); "
                        "repeatable; the loopback names and --host are always allowed; "
                        "'*': any (no DNS-rebinding protection)")
    g.add_argument("--insecure-no-auth", action="store_true",
                   help="listen on a non-loopback address without --auth or --token-file "
                        "(anyone who reaches the port can do anything the web's own user "
                        "can)")
    g.add_argument("--max-body", type=int, default=guard.MAX_BODY, metavar="BYTES",
                   help=f"largest request body (default {guard.MAX_BODY})")
    g.add_argument("--body-timeout", type=float, default=guard.BODY_TIMEOUT,
                   metavar="SECONDS",
                   help=f"time to receive a request's body (default {guard.BODY_TIMEOUT:g})")
    g.add_argument("--limit-concurrency", type=int, default=1000, metavar="N",
                   help="connections and requests at once per process; past it a 503 "
                        "(default 1000)")
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
    options: dict[str, Any] = {"cache_ttl": a.cache_ttl,
                     "replication_timeout": a.replication_timeout}
    if a.replicate != "majority":
        if not a.replicate.isdigit() or not 1 <= int(a.replicate) <= 1000:
            p.error("--replicate must be 'majority' or a number of copies, 1-1000")
        options["replicate"] = int(a.replicate)
    if not 0 < a.replication_timeout < 10:
        p.error("--replication-timeout must be above 0 and below 10 seconds")
    if a.default_retry is not None:
        options["default_retry"] = retry_policy(p, a.default_retry)
    policy = web_policy(p, a)
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import uvicorn

    log = logging.getLogger("disquepy.web")
    log.info("disque-web on http://%s:%d/ (nodes %s; API docs at /docs)", a.host, a.port,
             ",".join(nodes))
    if not policy.login:
        log.warning("no login (--auth nodes or --token-file): every process that can reach "
                    "%s:%d can add, read and cancel jobs as disque-web's own user",
                    a.host, a.port)
    from .httpproto import HttpProtocol

    opts = dict(host=a.host, port=a.port, log_level=a.log_level.lower(), access_log=False,
                loop="auto", limit_concurrency=a.limit_concurrency, http=HttpProtocol)
    if a.workers == 1:
        from .app import asgi_app

        uvicorn.run(asgi_app(nodes, policy, **options, **conn), **opts)
        return 0
    # several processes: each builds the app from the environment (app_from_env), and
    # this process's own counters are shared through prometheus-client's multiprocess
    # files, so /metrics answers the same whichever worker serves it
    import tempfile

    with tempfile.TemporaryDirectory(prefix="disque-web-metrics-") as d:
        options["history_dir"] = d  # the charts' history, shared (web/history.py)
        policy.session_dir = os.path.join(d, "sessions")  # the logins, shared (sessions.py)
        os.mkdir(policy.session_dir, 0o700)
        os.environ.update(PROMETHEUS_MULTIPROC_DIR=d, DISQUE_NODES=",".join(nodes),
                          DISQUE_WEB_OPTIONS=json.dumps(options),
                          DISQUE_WEB_CONNECTION=json.dumps(conn),
                          DISQUE_WEB_POLICY=policy.to_json())
        uvicorn.run("disquepy.web.app:app_from_env", factory=True, workers=a.workers,
                    **opts)
    return 0


def web_policy(p: argparse.ArgumentParser, a: argparse.Namespace) -> Policy:
    """The guard's policy from the options (an error through ``p``): no login on a
    non-loopback address unless --insecure-no-auth says so."""
    from . import guard

    try:
        tokens = guard.read_tokens(a.token_file) if a.token_file else {}
        metrics = guard.read_tokens(a.metrics_token_file) if a.metrics_token_file else {}
    except (OSError, ValueError) as e:
        p.error(str(e))
    policy = guard.Policy(nodes_auth=a.auth == "nodes", tokens=tokens, metrics_tokens=metrics)
    if not policy.login and not guard.is_loopback(a.host) and not a.insecure_no_auth:
        p.error(f"refusing to listen on {a.host} without a login: anyone who reaches it "
                "could add, read and cancel jobs. Use --auth nodes and/or --token-file, "
                "or --insecure-no-auth on a network you trust")
    hosts = set(guard.LOOPBACK_NAMES) | {guard.host_name(h) for h in a.allowed_host}
    if a.host not in ("0.0.0.0", "::", ""):
        hosts.add(guard.host_name(a.host if ":" not in a.host else f"[{a.host}]"))
    policy.allowed_hosts = frozenset(hosts)
    if not 1024 <= a.max_body <= 1 << 30:
        p.error("--max-body must be 1024 bytes to 1 GiB")
    if not 0 < a.body_timeout <= 3600:
        p.error("--body-timeout must be above 0 and at most 3600 seconds")
    if a.limit_concurrency < 1:
        p.error("--limit-concurrency must be at least 1")
    policy.max_body, policy.body_timeout = a.max_body, a.body_timeout
    return policy


def retry_policy(p: argparse.ArgumentParser, text: str) -> dict[str, Any]:
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
