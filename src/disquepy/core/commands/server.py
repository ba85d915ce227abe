"""Server commands: PING, ECHO, INFO, CONFIG, SHUTDOWN, DEBUG, CLIENT, ... (HELLO, AUTH
and ACL: users.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...codec import resp
from .. import errors
from ..config import ConfigError
from ..errors import ReplyError
from ..outputs import (
    BgRewriteAof,
    BusDrop,
    ConfigChanged,
    ConfigRewrite,
    DebugSleep,
    Info,
    KillClients,
    Quit,
    SecurityAbort,
    ShellRequest,
    Shutdown,
)
from .args import to_int

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node
    from . import Command


def ping(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    if len(argv) > 2:
        raise ReplyError(errors.wrong_arity("ping"))
    return resp.PONG if len(argv) == 1 else resp.bulk(argv[1])


def echo(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    return resp.bulk(argv[1])


def quit(node: Node, client: Client, argv: list[bytes], now: int) -> ShellRequest:
    return Quit()


def cross_protocol(node: Node, client: Client, argv: list[bytes], now: int) -> ShellRequest:
    """``POST`` and ``Host:`` start an HTTP request, never a Disque command: a web page
    made the operator's browser send one to this port, with commands hidden in its
    body (cross-protocol scripting). Close the link before anything else in the
    buffer runs, as Redis does."""
    return SecurityAbort()


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
def info(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    """INFO needs facts of the process (pid, rss, cpu, the AOF file): the shell reads
    them and hands them to Node.info (core/info.py), which answers."""
    if len(argv) > 2:
        raise ReplyError(errors.SYNTAX)
    return Info(argv[1].decode("utf-8", "replace").lower() if len(argv) == 2 else "default")


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
        return ConfigChanged(tuple(changed))  # the shell's part, then +OK
    if sub == b"resetstat":
        node.reset_stats()
        return resp.OK
    return ConfigRewrite()


def bgrewriteaof(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    return BgRewriteAof()


# -------------------------------------------------------------- SHUTDOWN/DEBUG
def shutdown(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"rewrite-aof"):
        raise ReplyError(errors.SYNTAX)
    return Shutdown(argv[1].lower().decode() if len(argv) == 2 else "")


def debug(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    sub = argv[1].lower()
    if sub == b"flushall" and len(argv) == 2:
        node.flushall()
        return resp.OK
    if sub == b"sleep" and len(argv) == 3:
        try:
            secs = float(argv[2])
        except ValueError:
            raise ReplyError("ERR value is not a valid float") from None
        return DebugSleep(max(0.0, secs))
    if sub == b"error" and len(argv) == 3:
        return resp.error(argv[2])
    if sub == b"bus-drop" and len(argv) == 4:  # disquepy, for fault tests: drop bus traffic
        on = argv[3].lower()
        if on not in (b"on", b"off"):
            raise ReplyError("ERR DEBUG BUS-DROP <node-id|*> on|off")
        return BusDrop(argv[2].decode("utf-8", "replace"), on == b"on")
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
def client(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
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
    if sub == b"kill" and n >= 3:
        return client_kill(node, client, argv)
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
        "ERR Syntax error, try CLIENT (LIST | KILL ip:port | KILL [ID id] [ADDR ip:port] "
        "[USER name] [SKIPME yes|no] | GETNAME | SETNAME connection-name)"
    )


def client_kill(node: Node, me: Client, argv: list[bytes]) -> KillClients:
    """CLIENT KILL ip:port (+OK, or an error when no client has that address), or
    Redis's filters CLIENT KILL [ID id] [ADDR ip:port] [USER name] [SKIPME yes|no]
    (how many were closed; SKIPME yes by default)."""
    if len(argv) == 3:
        targets = [c for c in node.clients.values() if c.addr == argv[2].decode("latin-1")]
        if not targets:
            raise ReplyError("ERR No such client")
        return KillClients(tuple(targets[:1]), resp.OK)
    if len(argv) % 2:
        raise ReplyError(errors.SYNTAX)
    cid: int | None = None
    addr = user = None
    skipme = True
    for i in range(2, len(argv), 2):
        opt, v = argv[i].lower(), argv[i + 1]
        if opt == b"id":
            cid = to_int(v)
            if cid is None or cid <= 0:
                raise ReplyError("ERR client-id should be greater than 0")
        elif opt == b"addr":
            addr = v.decode("latin-1")
        elif opt == b"user":
            user = v.decode("utf-8", "surrogateescape")
        elif opt == b"skipme" and v.lower() in (b"yes", b"no"):
            skipme = v.lower() == b"yes"
        else:
            raise ReplyError(errors.SYNTAX)
    targets = [c for c in node.clients.values()
               if (cid is None or c.id == cid) and (addr is None or c.addr == addr)
               and (user is None or c.user == user) and not (skipme and c is me)]
    return KillClients(tuple(targets), resp.integer(len(targets)))


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
