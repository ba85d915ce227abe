"""Server commands: PING, ECHO, INFO, CONFIG, SHUTDOWN, DEBUG, CLIENT, ... (HELLO, AUTH
and ACL: users.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from ... import __version__
from ...codec import resp
from .. import errors
from ..config import ConfigError
from ..errors import ReplyError
from .args import to_int

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node
    from ..outputs import ShellRequest
    from . import Command


def ping(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    if len(argv) > 2:
        raise ReplyError(errors.wrong_arity("ping"))
    return resp.PONG if len(argv) == 1 else resp.bulk(argv[1])


def echo(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    return resp.bulk(argv[1])


def quit(node: Node, client: Client, argv: list[bytes], now: int) -> ShellRequest:
    from ..outputs import ShellRequest

    return ShellRequest("quit")


def cross_protocol(node: Node, client: Client, argv: list[bytes], now: int) -> ShellRequest:
    """``POST`` and ``Host:`` start an HTTP request, never a Disque command: a web page
    made the operator's browser send one to this port, with commands hidden in its
    body (cross-protocol scripting). Close the link before anything else in the
    buffer runs, as Redis does."""
    from ..outputs import ShellRequest

    return ShellRequest("security-abort")


def time_cmd(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    return resp.bulk_array([b"%d" % (now // 1000), b"%d" % (now % 1000 * 1000)])


def select(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """Disque has one keyspace; SELECT 0 is accepted so Redis clients can connect."""
    if argv[1] == b"0":
        return resp.OK
    v = to_int(argv[1])
    if v is None:
        raise ReplyError(errors.NOT_INTEGER)
    raise ReplyError("ERR DB index is out of range")


def slowlog(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """SLOWLOG GET [count] | LEN | RESET, as Disque: GET's entries are [id, unix time,
    microseconds, [arguments]], the newest first (count 10 by default, all if < 0)."""
    sub = argv[1].lower()
    if sub == b"get" and len(argv) in (2, 3):
        count = 10
        if len(argv) == 3:
            given = to_int(argv[2])
            if given is None:
                raise ReplyError(errors.NOT_INTEGER)
            count = given
        return resp.array([
            resp.array([resp.integer(i), resp.integer(ts), resp.integer(us),
                        resp.bulk_array(args)])
            for i, ts, us, args in node.slowlog.newest(count)])
    if sub == b"len" and len(argv) == 2:
        return resp.integer(len(node.slowlog.entries))
    if sub == b"reset" and len(argv) == 2:
        node.slowlog.reset()
        return resp.OK
    raise ReplyError("ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.")


def latency(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """LATENCY LATEST | HISTORY event | RESET [event ...], as Disque (times in unix
    seconds, latencies in milliseconds)."""
    sub = argv[1].lower()
    mon = node.latency
    if sub == b"latest" and len(argv) == 2:
        return resp.array([
            resp.array([resp.bulk(name), resp.integer(ts), resp.integer(last),
                        resp.integer(top)])
            for name, ts, last, top in mon.latest()])
    if sub == b"history" and len(argv) == 3:
        return resp.array([resp.array([resp.integer(ts), resp.integer(ms)])
                           for ts, ms in mon.history(argv[2].decode("utf-8", "replace"))])
    if sub == b"reset":
        return resp.integer(mon.reset([a.decode("utf-8", "replace") for a in argv[2:]]))
    raise ReplyError(errors.SYNTAX)


# ------------------------------------------------------------------------ INFO
def _human(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


class HostFacts(TypedDict, total=False):
    """What INFO reports that only the shell can read (a missing fact reads as 0 or "")."""

    pid: int
    rss: int  # resident memory, bytes
    cpu_user: float  # seconds
    cpu_sys: float
    os: str
    arch_bits: int
    multiplexing_api: str
    executable: str
    config_file: str
    net_in: int  # bytes
    net_out: int
    aof: list[tuple[str, object]]  # the AOF file's persistence fields


# INFO: section name -> (field, value) pairs, each value printed as str() does
InfoSections = dict[str, list[tuple[str, object]]]


def info_sections(node: Node, host: HostFacts, now: int) -> InfoSections:
    """Every INFO section as an ordered list of (field, value) pairs. ``host``: the
    facts only the shell can read (pid, rss, cpu_user, cpu_sys, os, arch_bits,
    multiplexing_api, executable, config_file, net_in, net_out; ``aof``: the AOF
    file's persistence fields as (name, value) pairs)."""
    st = node.stats
    cfg = node.config
    uptime = (now - node.start_time) // 1000
    blocked = sum(1 for c in node.clients.values() if c.blocked is not None)
    qbuf = max((c.qbuf for c in node.clients.values()), default=0)
    rss = host.get("rss", 0)
    peak = max(node.mem.peak, node.mem.used)
    node.mem.peak = peak
    return {
        "server": [
            ("disque_version", __version__),
            ("disque_git_sha1", "00000000"),
            ("disque_git_dirty", 0),
            ("disque_build_id", "disquepy"),
            ("os", host.get("os", "")),
            ("arch_bits", host.get("arch_bits", 64)),
            ("multiplexing_api", host.get("multiplexing_api", "")),
            ("gcc_version", "0.0.0"),
            ("process_id", host.get("pid", 0)),
            ("run_id", node.run_id),
            ("tcp_port", node.port),
            ("uptime_in_seconds", uptime),
            ("uptime_in_days", uptime // 86400),
            ("hz", cfg.hz),
            ("executable", host.get("executable", "")),
            ("config_file", host.get("config_file", "")),
        ],
        "clients": [
            ("connected_clients", len(node.clients)),
            ("client_longest_output_list", 0),
            ("client_biggest_input_buf", qbuf),
            ("blocked_clients", blocked),
        ],
        "memory": [
            ("used_memory", node.mem.used),
            ("used_memory_human", _human(node.mem.used)),
            ("used_memory_rss", rss),
            ("used_memory_peak", peak),
            ("used_memory_peak_human", _human(peak)),
            ("maxmemory", cfg.maxmemory),
            ("maxmemory_human", _human(cfg.maxmemory)),
            ("mem_fragmentation_ratio", f"{rss / node.mem.used:.2f}" if node.mem.used
             else "0.00"),
            ("mem_allocator", "pymalloc"),
        ],
        "jobs": [
            ("registered_jobs", len(node.jobs)),
        ],
        "queues": [
            ("registered_queues", len(node.queues.by_name)),
        ],
        "groups": node.groups.info(),
        "persistence": node.persistence_info(host.get("aof")),
        "stats": [
            ("total_connections_received", st.connections),
            ("total_commands_processed", node.ncommands),
            ("instantaneous_ops_per_sec", node.ops_per_sec()),
            ("total_net_input_bytes", host.get("net_in", 0)),
            ("total_net_output_bytes", host.get("net_out", 0)),
            ("rejected_connections", st.rejected_connections),
            ("acl_access_denied_auth", node.acl.fails),
            ("acl_access_denied_cmd", node.acl.denied),
            ("jobs_added", st.jobs_added),
            ("jobs_delivered", st.jobs_delivered),
            ("jobs_acked", st.jobs_acked),
            ("jobs_expired", st.jobs_expired),
            ("evicted_jobs", st.jobs_evicted),
            ("evicted_queues", st.queues_evicted),
            ("oom_refusals", st.oom_refusals),
            ("bus_malformed_messages", st.bus_malformed),
            ("latest_fork_usec", 0),
        ],
        "cpu": [
            ("used_cpu_sys", f"{host.get('cpu_sys', 0.0):.2f}"),
            ("used_cpu_user", f"{host.get('cpu_user', 0.0):.2f}"),
            ("used_cpu_sys_children", "0.00"),
            ("used_cpu_user_children", "0.00"),
        ],
        "commandstats": [
            (f"cmdstat_{name}", f"calls={calls},usec={ns // 1000},"
                                f"usec_per_call={ns / 1000 / calls:.2f}")
            for name, (calls, ns) in sorted(node.cmdstats.items())
        ],
    }


_TITLES = {"cpu": "CPU"}
_NOT_DEFAULT = ("commandstats",)  # INFO with no section leaves these out, as Redis


def info(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    """INFO needs facts of the process (pid, rss, cpu, the AOF file): the shell reads
    them and answers with info_reply()."""
    if len(argv) > 2:
        raise ReplyError(errors.SYNTAX)
    from ..outputs import ShellRequest

    return ShellRequest("info", argv[1].decode("utf-8", "replace").lower()
                        if len(argv) == 2 else "default")


def info_reply(node: Node, want: str, host: HostFacts, now: int) -> bytes:
    sections = info_sections(node, host, now)
    if want == "default":
        sections = {k: v for k, v in sections.items() if k not in _NOT_DEFAULT}
    elif want not in ("all", "everything"):
        sections = {want: sections[want]} if want in sections else {}
    parts = []
    for name, fields in sections.items():
        title = _TITLES.get(name, name.capitalize())
        lines = [f"# {title}"] + [f"{k}:{v}" for k, v in fields]
        parts.append("\r\n".join(lines) + "\r\n")
    return resp.bulk("\r\n".join(parts).encode())


# ---------------------------------------------------------------------- CONFIG
_CONFIG_ARGC = {b"get": 3, b"set": 4, b"resetstat": 2, b"rewrite": 2}


def config(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    sub = argv[1].lower()
    want = _CONFIG_ARGC.get(sub)
    if want is None:
        raise ReplyError("ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")
    if len(argv) != want:
        raise ReplyError(f"ERR Wrong number of arguments for CONFIG {argv[1].decode(errors='replace')}")
    if sub == b"get":
        pairs = node.config.get(argv[2].decode("utf-8", "surrogateescape"))
        return resp.bulk_array([x for pair in pairs for x in pair])
    if sub == b"set":
        name = argv[2].decode("utf-8", "surrogateescape")
        value = argv[3].decode("utf-8", "surrogateescape")
        try:
            changed = node.config.set(name, value)
        except ConfigError as e:
            raise ReplyError(str(e) if str(e).startswith("ERR") else "ERR " + str(e)) from None
        node.config_changed(changed)
        from ..outputs import ShellRequest

        node.requests.append((None, ShellRequest("config-changed", changed)))  # shell's part
        return resp.OK
    if sub == b"resetstat":
        node.reset_stats()
        return resp.OK
    from ..outputs import ShellRequest

    return ShellRequest("config-rewrite")


def bgrewriteaof(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    from ..outputs import ShellRequest

    return ShellRequest("bgrewriteaof")


# -------------------------------------------------------------- SHUTDOWN/DEBUG
def shutdown(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    from ..outputs import ShellRequest

    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"rewrite-aof"):
        raise ReplyError(errors.SYNTAX)
    return ShellRequest("shutdown", argv[1].lower().decode() if len(argv) == 2 else "")


def debug(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    sub = argv[1].lower()
    if sub == b"flushall" and len(argv) == 2:
        node.flushall()
        return resp.OK
    if sub == b"sleep" and len(argv) == 3:
        from ..outputs import ShellRequest

        try:
            secs = float(argv[2])
        except ValueError:
            raise ReplyError("ERR value is not a valid float") from None
        return ShellRequest("debug-sleep", max(0.0, secs))
    if sub == b"error" and len(argv) == 3:
        return resp.error(argv[2])
    if sub == b"bus-drop" and len(argv) == 4:  # disquepy, for fault tests: drop bus traffic
        from ..outputs import ShellRequest

        on = argv[3].lower()
        if on not in (b"on", b"off"):
            raise ReplyError("ERR DEBUG BUS-DROP <node-id|*> on|off")
        return ShellRequest("bus-drop", argv[2].decode("utf-8", "replace"), on == b"on")
    if sub == b"jobs" and len(argv) == 2:  # disquepy: counts by state, for tests
        counts = [0, 0, 0, 0]
        for job in node.jobs.values():
            counts[job.state] += 1
        return resp.encode(counts)
    raise ReplyError(
        f"ERR Unknown DEBUG subcommand or wrong number of arguments for "
        f"'{argv[1].decode(errors='replace')}'"
    )


# ---------------------------------------------------------------- CLIENT / COMMAND
def client(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    sub = argv[1].lower()
    n = len(argv)
    if client.allowed is not None:  # subcommands are allowed one by one (core/acl.py)
        from .users import require

        require(node, client, "client|" + sub.decode("utf-8", "replace"))
    if sub == b"setname" and n == 3:
        if b" " in argv[2] or b"\n" in argv[2]:
            raise ReplyError("ERR Client names cannot contain spaces, newlines or special "
                             "characters.")
        client.name = argv[2]
        return resp.OK
    if sub == b"getname" and n == 2:
        return resp.bulk(client.name) if client.name else resp.null_bulk(client.proto)
    if sub == b"setinfo" and n == 4:
        attr = argv[2].lower()
        if attr == b"lib-name":
            client.lib_name = argv[3]
        elif attr == b"lib-ver":
            client.lib_ver = argv[3]
        else:
            raise ReplyError(f"ERR Unrecognized option '{argv[2].decode(errors='replace')}'")
        return resp.OK
    if sub == b"id" and n == 2:
        return resp.integer(client.id)
    if sub == b"list" and n == 2:
        lines = []
        for c in node.clients.values():
            lines.append(
                f"id={c.id} addr={c.addr} name={c.name.decode(errors='replace')} "
                f"age={(now - c.ctime) // 1000} idle={(now - c.last_cmd_time) // 1000} "
                f"flags={'b' if c.blocked else 'N'} qbuf={c.qbuf} user={c.user} "
                f"lib-name={c.lib_name.decode(errors='replace')} "
                f"lib-ver={c.lib_ver.decode(errors='replace')}"
            )
        return resp.bulk(("\n".join(lines) + "\n").encode())
    raise ReplyError(
        "ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)"
    )


def command(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    from . import COMMANDS

    n = len(argv)
    if n == 1:
        return resp.array([_command_info(c) for c in _unique(COMMANDS)])
    sub = argv[1].lower()
    if sub == b"count" and n == 2:
        return resp.integer(len(_unique(COMMANDS)))
    if sub == b"info":
        return resp.array([
            _command_info(COMMANDS[name.lower()]) if name.lower() in COMMANDS
            else resp.null_array(client.proto) for name in argv[2:]
        ])
    if sub == b"docs":  # Redis 7's form, for its clients' hints: summary, since, group
        wanted = [COMMANDS.get(n.lower()) for n in argv[2:]] if n > 2 else _unique(COMMANDS)
        return resp.encode({c.name: {"summary": c.summary, "since": "1.0.0",
                                     "group": c.handler.__module__.rsplit(".", 1)[-1]}
                            for c in wanted if c is not None and c.summary}, client.proto)
    raise ReplyError("ERR Unknown subcommand or wrong number of arguments.")


def _unique(table: dict[bytes, Command]) -> list[Command]:
    return list({id(c): c for c in table.values()}.values())


def _command_info(c: Command) -> bytes:
    flags = [resp.simple(f) for f, on in (("denyoom", c.denyoom), ("admin", c.admin)) if on]
    return resp.array([resp.bulk(c.name), resp.integer(c.arity), resp.array(flags),
                       resp.integer(0), resp.integer(0), resp.integer(0)])
