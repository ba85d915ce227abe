"""``disque-server [/path/to/disque.conf] [--directive value ...]``"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys

from .. import __version__
from ..core.config import Config, ConfigError
from ..core.ids import new_node_id
from ..core.node import Node
from . import log as logmod
from .driver import Driver
from .log import log
from .protocol import ClientProtocol

USAGE = """Usage: disque-server [/path/to/disque.conf] [options]
       disque-server - (read config from stdin)
       disque-server -v or --version
       disque-server -h or --help

Examples:
       disque-server (run the server with default conf)
       disque-server /etc/disque/7711.conf
       disque-server --port 7777
       disque-server /etc/mydisque.conf --loglevel verbose
"""


def load_config(argv: list[str]) -> tuple[Config, str | None]:
    path = None
    text = ""
    if argv and not argv[0].startswith("--"):
        path = argv[0]
        argv = argv[1:]
        if path == "-":
            text, path = sys.stdin.read(), None
        else:
            path = os.path.abspath(path)
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
    cfg = Config.from_text(text, origin=path or "<stdin>")
    if argv:
        cfg.apply_args(argv)
    return cfg, path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-v", "--version"):
        print(f"Disque server v={__version__} (disquepy)")
        return 0
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    try:
        cfg, path = load_config(argv)
    except ConfigError as e:
        sys.stderr.write(f"\n{e}\n")
        return 1
    except OSError as e:
        sys.stderr.write(f"Fatal error, can't open config file '{argv[0]}': {e.strerror}\n")
        return 1
    try:
        logmod.setup(cfg.loglevel, cfg.logfile)
    except OSError as e:
        sys.stderr.write(f"Can't open the log file: {e.strerror}\n")
        return 1
    try:
        os.chdir(cfg.dir)
    except OSError as e:
        log.warning("Can't chdir to '%s': %s", cfg.dir, e.strerror)
        return 1
    cfg.dir = os.getcwd()
    if cfg.protected_mode and not cfg.requirepass:
        exposed = cfg.protected_mode_violations()
        if exposed:
            log.warning(
                "Refusing to listen on %s without requirepass while protected-mode is "
                "yes: set a password, bind to loopback, or set protected-mode no.",
                " ".join(exposed),
            )
            return 1
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        log.warning("uvloop not available, using the default asyncio loop")
    return asyncio.run(_serve(cfg, path))


def _load_aof(cfg: Config, node: Node, driver: Driver) -> bool:
    """Load the AOF (also with AOF off when aof-enqueue-jobs-once asks for the
    controlled restart), then open it for appending if appendonly is on."""
    from .aof import AofError, load

    once = cfg.aof_enqueue_jobs_once
    if cfg.appendonly or once:
        t = Driver.now()
        try:
            records = load(driver.aof_path, cfg.aof_load_truncated)
        except AofError as e:
            log.warning("%s", e)
            return False
        except OSError as e:
            log.warning("Can't open the append-only file %s: %s", driver.aof_path, e.strerror)
            return False
        n = node.load_aof(records, Driver.now(), enqueue=once)
        log.info("DB loaded from append only file: %d jobs (%d records) in %.3f seconds%s", n,
                 len(records), (Driver.now() - t) / 1000, ", queues restored" if once else "")
    if once:  # a one-time switch: off again, and persisted so
        cfg.aof_enqueue_jobs_once = False
        if driver.config_path:
            reply = driver.config_rewrite()
            if not reply.startswith(b"+"):
                log.warning("Could not persist aof-enqueue-jobs-once no: %s", reply.decode())
    if cfg.appendonly:
        try:
            driver.start_aof(rewrite=False)
        except OSError as e:
            log.warning("Can't open the append-only file %s: %s", driver.aof_path, e.strerror)
            return False
    return True


async def _serve(cfg: Config, path: str | None) -> int:
    loop = asyncio.get_running_loop()
    sysrand = random.SystemRandom()
    node = Node(cfg, new_node_id(sysrand), random.Random(sysrand.getrandbits(64)), Driver.now())
    driver = Driver(node, cfg, path, loop, pure_resp=os.environ.get("DISQUEPY_PURE_RESP") == "1")
    try:
        with open(driver.nodes_conf_path, encoding="utf-8") as f:
            myid = node.members.load_nodes_conf(f.read(), Driver.now())
        if myid is not None:
            node.set_identity(myid)
            log.info("Node configuration loaded, I'm %s", myid[:8])
    except FileNotFoundError:
        log.info("No cluster configuration found, I'm %s", node.myid[:8])
    except OSError as e:
        log.warning("Can't read the cluster config %s: %s", driver.nodes_conf_path, e.strerror)
        return 1
    if not driver.save_nodes_conf():
        return 1
    if not _load_aof(cfg, node, driver):
        return 1
    log.info("Disque (disquepy %s) starting, pid=%d, node id %s", __version__, os.getpid(),
             node.myid)
    try:
        for addr in cfg.bind:
            srv = await loop.create_server(
                lambda: ClientProtocol(driver), addr, cfg.port, backlog=cfg.tcp_backlog,
                reuse_address=True,
            )
            driver.servers.append(srv)
    except OSError as e:
        log.warning("Creating Server TCP listening socket %s:%d: %s", addr, cfg.port, e.strerror)
        return 1
    from .bus import Bus

    bus = Bus(driver.on_bus_frame, driver.on_bus_link, loop, log)
    bus_port = cfg.port + cfg.cluster_port_offset
    try:
        await bus.listen(cfg.bind, bus_port)
    except OSError as e:
        log.warning("Creating the cluster bus listening socket on port %d: %s", bus_port,
                    e.strerror)
        return 1
    driver.bus = bus
    bus.sync_links(node.members.peer_links())
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, driver.shutdown, "signal")
    log.info("The server is now ready to accept connections on port %d", cfg.port)
    driver.start_gc_policy()
    driver.arm()
    await driver.stopping.wait()
    log.warning("Disque is now ready to exit, bye bye...")
    return driver.exit_code


if __name__ == "__main__":
    sys.exit(main())
