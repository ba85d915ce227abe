"""The command table: name, arity and flags of every command, declared once.

Arity follows Redis: positive means exactly that many words (name included),
negative means at least that many. ``denyoom`` commands may grow memory and are
refused at the memory limit; ``noauth`` commands run before AUTH.
"""

from __future__ import annotations

from . import acks, cluster, jobs, queues, server


class Command:
    __slots__ = ("name", "arity", "handler", "denyoom", "noauth", "admin")

    def __init__(self, name: str, arity: int, handler, flags: str = "") -> None:
        self.name = name
        self.arity = arity
        self.handler = handler
        self.denyoom = "m" in flags
        self.noauth = "n" in flags
        self.admin = "a" in flags


_TABLE = [
    # jobs
    Command("addjob", -4, jobs.addjob, "m"),
    Command("show", 2, jobs.show),
    Command("deljob", -1, jobs.deljob),
    Command("enqueue", -1, jobs.enqueue),
    Command("dequeue", -1, jobs.dequeue),
    Command("nack", -1, jobs.nack),
    Command("working", 2, jobs.working),
    Command("jscan", -1, jobs.jscan),
    # acks
    Command("ackjob", -1, acks.ackjob),  # never refused at OOM: acks free memory
    Command("fastack", -1, acks.fastack),
    Command("acktoken", -2, acks.acktoken),
    # queues
    Command("getjob", -2, queues.getjob),
    Command("qlen", 2, queues.qlen),
    Command("qstat", 2, queues.qstat),
    Command("qpeek", 3, queues.qpeek),
    Command("qscan", -1, queues.qscan),
    Command("pause", -3, queues.pause),
    # server
    Command("ping", -1, server.ping),
    Command("echo", 2, server.echo),
    Command("info", -1, server.info),
    Command("hello", -1, server.hello, "n"),
    Command("auth", -2, server.auth, "n"),
    Command("config", -2, server.config, "a"),
    Command("shutdown", -1, server.shutdown, "a"),
    Command("debug", -2, server.debug, "a"),
    Command("select", 2, server.select),
    Command("client", -2, server.client),
    Command("command", -1, server.command),
    Command("time", 1, server.time_cmd),
    Command("quit", -1, server.quit, "n"),
    # an HTTP request sent to the RESP port: close it (checked before AUTH)
    Command("post", -1, server.cross_protocol, "n"),
    Command("host:", -1, server.cross_protocol, "n"),
    Command("cluster", -2, cluster.cluster, "a"),
    Command("bgrewriteaof", 1, server.bgrewriteaof, "a"),
]

# keyed by the lower- and upper-case names, so the usual spellings skip a .lower()
COMMANDS: dict[bytes, Command] = {c.name.encode(): c for c in _TABLE}
COMMANDS.update({c.name.upper().encode(): c for c in _TABLE})
