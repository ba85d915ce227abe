"""``disque-worker module:handler --queues a,b --concurrency 4`` (or ``python -m
disquepy.worker ...``): one worker process (``--processes N``: a pool of N, signals
forwarded). ``module:attr`` names a handler function (then ``--queues`` is required) or a
:class:`~disquepy.worker.Tasks` app.

A mistake on the command line (an unknown module or function, a bad option value) is one
line on stderr with exit status 2; a handler's failure is logged with its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

from ..client import Disque
from ..client import options as connection_options
from ..client.envelope import DEFAULT_POLICY
from ..client.nodes import parse_nodes
from ..client.priority import DEFAULT_LOW_SHARE
from ..logformat import RedisFormatter
from .backoff import Backoff
from .core import DEFAULT_PREFETCH, Worker
from .tasks import Tasks

PROG = "disque-worker"
MODULE_PROG = "python -m disquepy.worker"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# options that shape how a handler function's jobs are handled; a Tasks app sets them
# per task (@app.task(...)), so they are refused with one (the retry options are a Tasks
# app's defaults for the tasks that set none)
HANDLER_ONLY = ("body",)
PROCESSES_PER_CPU = 4


class UsageError(Exception):
    """A mistake in the command line: reported as one line, exit status 2."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" after each option's help, except for flags (off unless
    given) and options whose help already names its default (an environment variable)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.nargs == 0 or "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line (argparse prints the usage and then the error)."""
        raise UsageError(message)


def _whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = None
        if n is None or n < minimum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number >= {minimum}, got {text!r}")
        return n

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def _seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        s = -1.0
    if not 0 <= s < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return s


def _backoff(text: str) -> Backoff:
    try:
        return Backoff.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"{e}; write fixed:SECONDS or exponential[:BASE[:FACTOR[:MAX]]], optionally "
            f"with ;jitter=FRACTION, e.g. fixed:5 or exponential:1:2:600") from None


def _default_backoff() -> str:
    b = Backoff.from_policy(DEFAULT_POLICY)
    return f"{b.kind}:{b.base:g}:{b.factor:g}:{b.max:g}"


def _nodes(text: str) -> str:
    try:
        parse_nodes([n for n in text.split(",") if n.strip()])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT[,HOST:PORT...], got {text!r}") from None
    return text


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command line (``prog``: the name the help and the errors show)."""
    p = _Parser(prog=prog, formatter_class=_HelpFormatter,
                description="Run a disquepy worker: fetch jobs from Disque queues and run "
                            "a handler function (or a Tasks app) on each.",
                epilog=f"example: {prog} myworker:handle --queues high,low --concurrency 4")
    p.add_argument("target", metavar="MODULE:ATTR",
                   help="a handler function (module:function, called with each job's body) "
                        "or a Tasks app (module:app); the module is imported from the "
                        "current directory or PYTHONPATH")
    p.add_argument("-q", "--queues", default="", metavar="Q1,Q2",
                   help="comma-separated queues, highest priority first (default: none; "
                        "required with a handler function, a Tasks app serves all its "
                        "queues)")
    p.add_argument("-c", "--concurrency", type=_whole(1), default=1, metavar="N",
                   help="handler threads in the process")
    p.add_argument("-n", "--nodes", type=_nodes, metavar="HOST:PORT,...",
                   default=os.environ.get("DISQUE_NODES", "127.0.0.1:7711"),
                   help="comma-separated seed nodes; $DISQUE_NODES sets the default")
    p.add_argument("--body", choices=("json", "bytes", "text"), default="json",
                   help="how the handler gets the job body: decoded JSON (a body that is "
                        "not JSON arrives as bytes), bytes, or text")
    p.add_argument("--backoff", type=_backoff, default=None, metavar="SPEC",
                   help="delay before a failed job's next attempt (NACK ... DELAY): "
                        "fixed:SECONDS or exponential[:BASE[:FACTOR[:MAX]]] (default: "
                        f"{_default_backoff()}, 1, 2, 4 s...; a job's own retry policy "
                        "comes first)")
    retries = p.add_mutually_exclusive_group()
    retries.add_argument("--max-retries", type=_whole(0), default=None, metavar="N",
                         help="retries of a failed job before it goes to QUEUE:dead "
                              f"(default: {DEFAULT_POLICY.max_retries}, i.e. "
                              f"{DEFAULT_POLICY.max_attempts} attempts)")
    retries.add_argument("--dead-letter-after", type=_whole(1), default=None, metavar="N",
                         help="attempts of a job before it goes to QUEUE:dead, the same as "
                              f"--max-retries N-1 (default: {DEFAULT_POLICY.max_attempts})")
    p.add_argument("--dead-letter-deliveries", type=_whole(1), default=None, metavar="N",
                   help="move a job to QUEUE:dead once delivered N extra times, e.g. by "
                        "crashing workers (default: none, such deliveries count as "
                        "attempts)")
    p.add_argument("--prefetch", type=_whole(0), default=DEFAULT_PREFETCH, metavar="N",
                   help="jobs fetched ahead of the free handler threads, at most (fewer "
                        "for slow handlers: about 20 ms of work; 0: one job per free "
                        "thread)")
    p.add_argument("--shutdown-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, how long running jobs may finish before they "
                        "are NACKed")
    p.add_argument("--poll-timeout-ms", type=_whole(1), default=1000, metavar="MS",
                   help="how long one GETJOB waits for a job")
    p.add_argument("--no-heartbeat", action="store_true",
                   help="no WORKING for long jobs (they are re-delivered after their RETRY)")
    p.add_argument("--affinity", action="store_true",
                   help="move to the node producing most of the jobs received")
    p.add_argument("--fastack", action="store_true", help="FASTACK instead of ACKJOB")
    pri = p.add_mutually_exclusive_group()
    pri.add_argument("--priorities", dest="priorities", action="store_true", default=True,
                     help="the queues are logical queues with high/medium/low levels "
                          "(q:high, q, q:low), served high first: the default")
    pri.add_argument("--no-priorities", dest="priorities", action="store_false",
                     help="serve exactly the queues named, in the order given")
    p.add_argument("--low-share", type=float, default=DEFAULT_LOW_SHARE,
                   help="with priorities, the share of fetches that take low first "
                        "(guards low jobs against starvation; 0: strict)")
    p.add_argument("--metrics-port", type=_whole(1), default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://127.0.0.1:PORT/metrics "
                        "(with --processes N: PORT, PORT+1 ... PORT+N-1, one per process)")
    p.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO",
                   help="log threshold (job outcomes are INFO, failures WARNING)")
    p.add_argument("-g", "--group", default=None, metavar="GROUP",
                   help="consume the queues' events as this consumer group (QNOTIFY, QGET, "
                        "QACK: docs/GROUPS.md) instead of their jobs")
    p.add_argument("--lease", type=_seconds, default=30.0, metavar="SECONDS",
                   help="with --group: each event's lease (QGET EX), extended while the "
                        "handler runs")
    p.add_argument("--max-deliveries", type=_whole(1), default=None, metavar="N",
                   help="with --group: an event delivered N times unacknowledged goes to "
                        "the group's dead letters (QDEAD)")
    p.add_argument("--processes", type=_whole(1), default=1, metavar="N",
                   help=f"run a pool of N worker processes (SIGTERM/SIGINT forwarded; at "
                        f"most {max_processes()}, {PROCESSES_PER_CPU} per CPU here)")
    # -p is the port in disque and redis-cli: `disque-worker ... -p 7711` must not start
    # 7711 processes (it did when -p was --processes), so it is refused with the fix
    p.add_argument("-p", "--port", dest="port_given", default=None, help=argparse.SUPPRESS)
    connection_options.add_arguments(p)
    return p


def max_processes() -> int:
    """The largest --processes accepted: a few per CPU (more parallelism in one process
    is --concurrency); a typo such as --processes 7711 must not fork thousands."""
    return max(8, PROCESSES_PER_CPU * (os.cpu_count() or 1))


def load(target: str) -> Any:
    """The object ``module:attr`` names. Raises :class:`UsageError` when the module or the
    attribute does not exist; an exception raised by the module's own code propagates."""
    mod, sep, attr = target.partition(":")
    if not sep or not mod or not attr:
        raise UsageError(f"expected MODULE:ATTR (e.g. myworker:handle), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name is None or (mod != e.name and not mod.startswith(e.name + ".")):
            raise  # a module the target imports is missing: its traceback says where
        raise UsageError(f"no module named {e.name!r}: run from the directory holding "
                         f"{mod.split('.')[0]}.py (or its package), or add that directory "
                         f"to PYTHONPATH") from None
    where = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{where} has no attribute {part!r}"
                             + _candidates(obj)) from None
        where = f"{where}.{part}"
    return obj


def _candidates(obj: object) -> str:
    """"; it has: a, b" (the handler functions and Tasks apps ``obj`` defines)."""
    if not inspect.ismodule(obj):
        return ""
    names = sorted(n for n, v in vars(obj).items() if not n.startswith("_") and (
        isinstance(v, Tasks) or (inspect.isfunction(v) and v.__module__ == obj.__name__)))
    return f"; it has: {', '.join(names[:20])}" if names else ""


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    p = parser(prog)
    try:
        return _main(p, sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        print(f"{prog}: {e} (see '{prog} --help')", file=sys.stderr)
        return 2


def _main(p: argparse.ArgumentParser, argv: list[str]) -> int:
    a = p.parse_args(argv)
    if a.port_given is not None:
        raise UsageError(f"-p/--port is not a worker option (the port is -p in disque and "
                         f"redis-cli): name the node with --nodes 127.0.0.1:{a.port_given} "
                         f"(a pool of N processes is --processes N)")
    if a.processes > max_processes():
        raise UsageError(f"--processes {a.processes} is more than {max_processes()} "
                         f"({PROCESSES_PER_CPU} per CPU here); for more jobs at once in a "
                         f"process raise --concurrency (handler threads)")
    conn = connection_options.client_kwargs(p, a)
    obj = _load_reporting(a.target)
    queues = [q.strip() for q in a.queues.split(",") if q.strip()]
    common = dict(shutdown_timeout=a.shutdown_timeout, poll_timeout_ms=a.poll_timeout_ms,
                  heartbeat=not a.no_heartbeat, ack="fastack" if a.fastack else "ack",
                  priorities=a.priorities, low_share=a.low_share, prefetch=a.prefetch,
                  backoff=a.backoff, dead_letter_after=a.dead_letter_after,
                  max_retries=a.max_retries,
                  dead_letter_deliveries=a.dead_letter_deliveries)
    if isinstance(obj, Tasks):
        given = [f"--{o.replace('_', '-')}" for o in HANDLER_ONLY
                 if getattr(a, o) != p.get_default(o)]
        if given:
            raise UsageError(f"{', '.join(given)} applies to a handler function; {a.target} "
                             f"is a Tasks app: set it per task (@app.task(...)) or in "
                             f"Tasks(...)")
        unknown = [q for q in queues if q not in obj.tasks]
        if unknown:
            raise UsageError(f"{a.target} has no task for queue {unknown[0]!r}; its queues: "
                             f"{', '.join(obj.queues()) or '(none)'}")
        if not obj.tasks:
            raise UsageError(f"{a.target} has no tasks: decorate functions with "
                             f"@app.task(QUEUE) in its module")
    elif callable(obj):
        if not queues:
            raise UsageError(f"--queues is required with a handler function "
                             f"(e.g. {a.target} --queues myqueue)")
    else:
        raise UsageError(f"{a.target} is a {type(obj).__name__}, neither a function nor "
                         f"a Tasks app")
    if a.group is not None and isinstance(obj, Tasks):
        raise UsageError(f"--group takes a handler function; {a.target} is a Tasks app")
    if a.processes > 1:  # the children get the same (checked) command line
        return run_pool(argv, a.processes, a.metrics_port)
    setup_logging(a.log_level)
    if a.metrics_port is not None:
        from .metrics import WorkerMetrics

        common["metrics"] = metrics = WorkerMetrics()
        metrics.serve(a.metrics_port)
        logging.getLogger("disquepy.worker").info(
            "metrics at http://127.0.0.1:%d/metrics", a.metrics_port)
    client = Disque(a.nodes.split(","), affinity=a.affinity, **conn)
    if a.group is not None:
        from .groups import GroupWorker

        w: Worker | GroupWorker = GroupWorker(client, queues, a.group, a.concurrency, obj, body=a.body,
                        lease=a.lease, max_deliveries=a.max_deliveries,
                        poll_timeout=a.poll_timeout_ms / 1000,
                        heartbeat=not a.no_heartbeat, shutdown_timeout=a.shutdown_timeout,
                        prefetch=a.prefetch)
    elif isinstance(obj, Tasks):
        w = obj.worker(a.concurrency, queues or None, client, **common)
    else:
        w = Worker(client, queues, a.concurrency, obj, body=a.body, **common)
    clean = w.run()
    client.close()
    if w.fatal is not None:
        return 1  # nothing to retry: the command line or the server's users must change
    return 0 if clean else 3


def _load_reporting(target: str) -> Any:
    """:func:`load`; an exception from the module's own code: its traceback, then one line
    saying so (the fix is in that code)."""
    try:
        return load(target)
    except UsageError:
        raise
    except Exception as e:
        traceback.print_exc()
        raise UsageError(f"importing {target.partition(':')[0]!r} failed with "
                         f"{type(e).__name__}: {e} (traceback above)") from None


def setup_logging(level: str) -> None:
    """Redis-style log lines on stderr (``pid:M 25 Nov 2026 09:12:01.123 * message``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedisFormatter(fold_tracebacks=False))
    logging.basicConfig(level=level, handlers=[handler], force=True)


def run_pool(argv: list[str], n: int, metrics_port: int | None = None) -> int:
    """Start ``n`` copies of this worker (same arguments, one process each), forward
    SIGTERM/SIGINT to them, wait; the exit status is the worst child's. With
    ``--metrics-port P`` the i-th process serves its metrics on port P+i (scrape each)."""
    args = []
    skip = False
    for x in argv:  # drop --processes N and --metrics-port P (given per child)
        if skip:
            skip = False
            continue
        if x in ("--processes", "--metrics-port"):
            skip = True
            continue
        if x.startswith(("--processes=", "--metrics-port=")):
            continue
        args.append(x)
    # "--processes 1" last: it wins over an abbreviation left in args (--proc 2), with
    # which each child started a pool of its own, and so on without end
    children = [subprocess.Popen([sys.executable, "-m", "disquepy.worker", *args, *(
        ["--metrics-port", str(metrics_port + i)] if metrics_port is not None else []),
        "--processes", "1"]) for i in range(n)]

    def forward(signum: int, frame: FrameType | None) -> None:
        for c in children:
            if c.poll() is None:
                c.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return max(c.wait() for c in children)


if __name__ == "__main__":
    sys.exit(main(prog=MODULE_PROG))
