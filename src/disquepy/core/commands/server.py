"""Server commands: PING, ECHO, INFO, CONFIG, SHUTDOWN, DEBUG, CLIENT, ... (HELLO, AUTH
and ACL: users.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ...codec import resp
from .. import errors
from .. import latency as latencymod
from ..client import REPLY_OFF, REPLY_ON, REPLY_SKIP_NEXT
from ..config import ConfigError
from ..errors import ReplyError
from ..outputs import (
    BgRewriteAof,
    BusDrop,
    ConfigChanged,
    ConfigRewrite,
    DebugSleep,
    Info,
    Quit,
    SecurityAbort,
    ShellRequest,
    Shutdown,
)
from .args import parse_int, parse_timeout, to_int

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
    if sub == b"doctor" and len(argv) == 2:
        return resp.bulk(latencymod.doctor(mon, node.latency_ms, node.slow_us, now).encode())
    if sub == b"graph" and len(argv) == 3:
        event = argv[2].decode("utf-8", "replace")
        text = latencymod.graph(mon, event, now)
        if text is None:
            raise ReplyError(f"ERR No samples available for event '{event}'")
        return resp.bulk(text.encode())
    raise ReplyError(errors.SYNTAX)


# ------------------------------------------------------------------------ INFO
def info(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    """INFO needs facts of the process (pid, rss, cpu, the AOF file): the shell reads
    them and hands them to Node.info (core/info.py), which answers."""
    if len(argv) > 2:
        raise ReplyError(errors.SYNTAX)
    return Info(argv[1].decode("utf-8", "replace").lower() if len(argv) == 2 else "default")


# ---------------------------------------------------------------------- CONFIG
_CONFIG_ARGC: Final = {b"get": 3, b"set": 4, b"resetstat": 2, b"rewrite": 2}


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
    if sub == b"structsize" and len(argv) == 2:
        return resp.bulk(_structsize())
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


def _structsize() -> bytes:
    """DEBUG STRUCTSIZE in Disque's form (``name:bytes ``...): what the node counts in
    used_memory for each thing it holds, besides its variable bytes."""
    from ..groups.model import CLAIM_PACKED, PACKED_OVERHEAD
    from ..keys import IDEM_OVERHEAD, TOKEN_OVERHEAD
    from ..memory import CLIENT_OVERHEAD, JOB_OVERHEAD
    from ..queues import QUEUE_OVERHEAD

    sizes = (("bits", 64), ("job", JOB_OVERHEAD), ("queue", QUEUE_OVERHEAD),
             ("client", CLIENT_OVERHEAD), ("idemkey", IDEM_OVERHEAD),
             ("token", TOKEN_OVERHEAD), ("event", PACKED_OVERHEAD), ("claim", CLAIM_PACKED))
    return "".join(f"{k}:{v} " for k, v in sizes).encode()


def monitor(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """MONITOR: every command this node runs from now on is sent to this client (see
    Node._feed_monitors); a second MONITOR gets no reply, as in Disque."""
    if client.id in node.monitors:
        return b""
    node.monitors[client.id] = client
    node.monitor_from[client.id] = len(node.monitor_out)  # what comes after this command
    return resp.OK


def loadjob(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    raise ReplyError("ERR LOADJOB is a special command only processed from AOF")


# ---------------------------------------------------------------- CLIENT / COMMAND
_CLIENT_SYNTAX: Final = ("ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME "
                         "connection-name)")


def client(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | None:
    sub = argv[1].lower()
    n = len(argv)
    if client.allowed is not None:  # subcommands are allowed one by one (core/acl.py)
        from .users import require

        require(node, client, "client|" + sub.decode("utf-8", "replace"))
    if sub == b"kill":
        if n == 2:
            raise ReplyError(errors.SYNTAX)
        return _client_kill(node, client, argv)
    if sub == b"pause" and n == 3:
        ms = parse_timeout(argv[2])
        if not ms:
            return resp.OK
        node.pause_clients(max(node.pause_until, now + ms))
        # the rest of this client's pipeline waits too: its reply comes with the pause
        node.outbox.append((client, resp.OK))
        return None
    if sub == b"unpause" and n == 2:
        node.pause_clients(0)
        return resp.OK
    if sub == b"reply" and n == 3:
        return _client_reply(node, client, argv[2].lower())
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
        return resp.bulk("".join(_client_line(node, c, now) for c in node.clients.values())
                         .encode())
    raise ReplyError(_CLIENT_SYNTAX)


def _client_line(node: Node, c: Client, now: int) -> str:
    """CLIENT LIST's line: Disque's fields, then ours (user, lib-name, lib-ver). Flags:
    O a monitor, b blocked (GETJOB, or ADDJOB waiting for its copies), N neither.
    qbuf-free and obl (the fixed buffers of C Disque's clients) are 0: the shell's
    buffers grow as needed; oll and omem are the replies it holds, not yet sent."""
    flags = ("O" if c.id in node.monitors else "") + (
        "b" if c.blocked is not None or c.blocked_add is not None else "")
    oll, omem = c.out_probe() if c.out_probe is not None else (0, 0)
    return (f"id={c.id} addr={c.addr} fd={c.fd} name={c.name.decode(errors='replace')} "
            f"age={(now - c.ctime) // 1000} idle={(now - c.last_cmd_time) // 1000} "
            f"flags={flags or 'N'} qbuf={c.qbuf} qbuf-free=0 obl=0 oll={oll} omem={omem} "
            f"events={'rw' if omem else 'r'} cmd={c.last_cmd} user={c.user} "
            f"lib-name={c.lib_name.decode(errors='replace')} "
            f"lib-ver={c.lib_ver.decode(errors='replace')}\n")


def _client_kill(node: Node, client: Client, argv: list[bytes]) -> bytes | None:
    """CLIENT KILL ip:port (+OK, or an error when nobody has that address), or CLIENT
    KILL with filters [ID id] [ADDR ip:port] [TYPE normal] [USER name] [SKIPME yes|no]
    (how many were closed; the caller only with SKIPME no). USER is Redis 6's."""
    if len(argv) == 3:  # the old form
        victims = [c for c in node.clients.values() if c.addr.encode() == argv[2]]
        if not victims:
            raise ReplyError("ERR No such client")
        return _kill(node, client, victims[:1], resp.OK)
    if len(argv) % 2:
        raise ReplyError(errors.SYNTAX)
    cid: int | None = None
    addr: bytes | None = None
    user: str | None = None
    skipme = True
    for j in range(2, len(argv), 2):
        opt, val = argv[j].lower(), argv[j + 1]
        if opt == b"id":
            cid = parse_int(val)
        elif opt == b"addr":
            addr = val
        elif opt == b"type":
            if val.lower() != b"normal":
                raise ReplyError(f"ERR Unknown client type '{val.decode(errors='replace')}'")
        elif opt == b"user":
            user = val.decode("utf-8", "surrogateescape")
        elif opt == b"skipme" and val.lower() in (b"yes", b"no"):
            skipme = val.lower() == b"yes"
        else:
            raise ReplyError(errors.SYNTAX)
    victims = [c for c in node.clients.values()
               if (cid is None or c.id == cid) and (addr is None or c.addr.encode() == addr)
               and (user is None or c.user == user) and not (skipme and c is client)]
    return _kill(node, client, victims, resp.integer(len(victims)))


def _kill(node: Node, client: Client, victims: list[Client], reply: bytes) -> bytes | None:
    """Close ``victims``; the caller among them gets ``reply`` first, and nothing of its
    pipeline runs after it (its reply comes with the close: None here)."""
    me = False
    for c in victims:
        if c is client:
            me = True
        else:
            node.kill_client(c)
    if me:
        node.kill_client(client, reply)
        return None
    return reply


def _client_reply(node: Node, client: Client, mode: bytes) -> bytes:
    """CLIENT REPLY ON (+OK) | OFF | SKIP (no reply: the next command's neither)."""
    was = client.noreply
    if mode == b"on":
        client.noreply = REPLY_ON
    elif mode == b"off":
        client.noreply = REPLY_OFF
    elif mode == b"skip":
        if was != REPLY_OFF:
            client.noreply = REPLY_SKIP_NEXT
    else:
        raise ReplyError(errors.SYNTAX)
    node.noreply_clients += (client.noreply != REPLY_ON) - (was != REPLY_ON)
    return resp.OK if mode == b"on" else b""


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
            else resp.null_bulk(client.proto) for name in argv[2:]
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
    return resp.array([resp.bulk(c.name), resp.integer(c.arity),
                       resp.array([resp.simple(f) for f in c.flags]),
                       resp.integer(0), resp.integer(0), resp.integer(0)])
