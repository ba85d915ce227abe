"""The command table: name, arity and flags of every command, declared once.

Arity follows Redis: positive means exactly that many words (name included),
negative means at least that many, 0 any number. Flags are Disque's words, as COMMAND
shows them (C Disque's for its commands): ``write``, ``readonly``, ``denyoom`` (may
grow memory: refused at the memory limit), ``admin``, ``fast``, ``loading``; and ours,
not shown: ``noauth`` (runs before AUTH) and ``nomonitor`` (not in the MONITOR feed:
QUIT and the cross-protocol guards, which Disque handles before any command).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from . import acks, cluster, groups, jobs, queues, server, status, users

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node
    from ..outputs import Reply

    # a command's function: (node, client, argv, now ms) -> its reply
    Handler = Callable[[Node, Client, list[bytes], int], Reply]


class Command:
    """``args``: the syntax after the name, as help shows it; ``summary``: what the
    command is for, in a line (the CLI's help and hints, COMMAND DOCS)."""

    __slots__ = ("name", "arity", "handler", "flags", "denyoom", "noauth", "monitored", "args",
                 "summary")

    def __init__(self, name: str, arity: int, handler: Handler, flags: str = "", args: str = "",
                 summary: str = "") -> None:
        self.name = name
        self.arity = arity
        self.handler = handler
        words = flags.split()
        unknown = set(words) - _FLAGS
        if unknown:
            raise ValueError(f"{name}: unknown flags {sorted(unknown)}")
        self.flags = [w for w in words if w in _SHOWN]  # as COMMAND lists them
        self.denyoom = "denyoom" in words
        self.noauth = "noauth" in words
        self.monitored = "nomonitor" not in words
        self.args = args
        self.summary = summary


_SHOWN: Final = frozenset({"write", "readonly", "denyoom", "admin", "fast", "loading"})
_FLAGS: Final = _SHOWN | {"noauth", "nomonitor"}


_TABLE: Final = [
    # jobs
    Command("addjob", -4, jobs.addjob, "write denyoom fast",
            args=('queue job ms-timeout [REPLICATE n] [DELAY s] [RETRY s] [TTL s] [MAXLEN n] '
                  '[ASYNC] [IDEMPOTENT key]'),
            summary=('Add a job to a queue; the reply (its ID) waits up to ms-timeout for the '
                     'replication (ASYNC: replicate in the background)')),
    Command("show", 2, jobs.show, "readonly fast",
            args='job-id',
            summary="Show a job's state, counters, nodes and body"),
    Command("deljob", -1, jobs.deljob, "write fast",
            args='job-id [job-id ...]',
            summary='Delete jobs from this node only'),
    Command("enqueue", -1, jobs.enqueue, "write denyoom fast",
            args='job-id [job-id ...]',
            summary='Put jobs in their queue if not queued already'),
    Command("dequeue", -1, jobs.dequeue, "write fast",
            args='job-id [job-id ...]',
            summary='Take jobs out of their queue'),
    Command("nack", -1, jobs.nack, "write denyoom fast",
            args='id ... [DELAY seconds]',
            summary=('Put jobs back in their queue, now or after DELAY seconds, counting a failed '
                     'delivery')),
    Command("working", 2, jobs.working, "write fast",
            args='id',
            summary="Postpone a job's next delivery by its retry period"),
    Command("jscan", -1, jobs.jscan, "readonly",
            args='[cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s ...] [REPLY all|id]',
            summary='Iterate over the jobs this node knows'),
    # outcomes (disquepy)
    Command("jobstatus", 2, status.jobstatus, "readonly fast",
            args="job-id",
            summary=("A job's status: queued, in_progress, retrying, completed, failed, "
                     "cancelled, expired; attempts, times, error or result")),
    Command("joboutcomes", -1, status.joboutcomes, "readonly",
            args="[cursor] [COUNT n] [BUSYLOOP] [STATUS s ...] [QUEUE q ...]",
            summary=("How jobs ended, the last finished first (the outcome store): "
                     "completed, failed, cancelled, expired; paged with a cursor")),
    Command("cancel", 2, status.cancel, "write fast",
            args="job-id",
            summary="Cancel a job nobody works on (queued, scheduled, retrying), everywhere"),
    Command("failjob", -2, status.failjob, "write fast",
            args="job-id [ERROR text] [REASON word]",
            summary="Give up on a job: its outcome is failed with the error; acknowledge it"),
    Command("jobmetrics", -1, status.jobmetrics, "readonly",
            args="[queue ...]",
            summary=("Per-queue job counters (added, delivered, acked, nacked, retried, "
                     "requeued, expired, cancelled, dead-lettered by reason) and wait and "
                     "processing time histograms")),
    # acks
    Command("ackjob", -1, acks.ackjob, "write fast",
    # never refused at OOM: acks free memory
            args='job-id [job-id ...] [RESULT data]',
            summary=('Acknowledge jobs: delete them cluster-wide (RESULT: kept in their '
                     'outcome, see JOBSTATUS)')),
    Command("fastack", -1, acks.fastack, "write fast",
            args='job-id [job-id ...] [RESULT data]',
            summary='Acknowledge jobs best-effort, without waiting (RESULT as for ACKJOB)'),
    Command("acktoken", -2, acks.acktoken, "write fast",
            args='token [token ...]',
            summary='Acknowledge every job a GETJOB with this TOKEN delivered here'),
    # queues
    Command("getjob", -2, queues.getjob, "write fast",
            args='[NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] [TOKEN t] FROM q1 ... qN',
            summary='Take jobs from the first queue that has some (blocks unless NOHANG)'),
    Command("qlen", 2, queues.qlen, "readonly fast",
            args='queue',
            summary='The number of jobs queued in a queue on this node'),
    Command("qstat", 2, queues.qstat, "readonly fast",
            args='queue',
            summary="A queue's length, age, rates, pause state and blocked clients"),
    Command("qpeek", 3, queues.qpeek, "readonly",
            args='queue count',
            summary='Look at up to count queued jobs without taking them (negative: newest first)'),
    Command("qscan", -1, queues.qscan, "readonly",
            args='[cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE r]',
            summary='Iterate over the queues of this node'),
    Command("pause", -3, queues.pause, "readonly fast",
            args='queue option...',
            summary='Pause a queue: in, out, all or none; state to read it; bcast to the cluster'),
    # consumer groups (bananaq's event queues; core/groups/, docs/GROUPS.md)
    Command("qadd", -4, groups.qadd, "write denyoom fast",
            args="queue expireSeconds contents [NOBLOCK] [IDEMPOTENT key]",
            summary=("Add an event to a queue, kept until it expires; every consumer group "
                     "gets it (the reply, its ID, waits for its copies unless NOBLOCK)")),
    Command("qget", -3, groups.qget, "write fast",
            args="queue group [EX seconds] [WITHCOUNTERS] [MAXDELIVERIES n] [COUNT n]",
            summary=("Lease the group's next event of a queue for EX seconds (default 30; "
                     "0 acknowledges it at once): [id, contents(, deliveries)] or nil")),
    Command("qack", -4, groups.qack, "write fast",
            args="queue group event-id [event-id ...]",
            summary=("Acknowledge leased events for a group: how many leases were live "
                     "(one ID: 1, or 0 if the lease ran out)")),
    Command("qworking", -4, groups.qworking, "write fast",
            args="queue group event-id [event-id ...] [EX seconds]",
            summary=("Still working: extend leased events' leases to EX seconds from now: "
                     "how many were live")),
    Command("qdead", -3, groups.qdead, "write",
            args="queue group [REQUEUE event-id ...]",
            summary="A group's dead letters (events over MAXDELIVERIES), or requeue them"),
    Command("qnotify", -4, groups.qnotify, "readonly",
            args="group timeout queue [queue ...]",
            summary=("Block until one of the queues has an event available to the group "
                     "(timeout in seconds, 0 forever): the queue's name or nil")),
    Command("qflush", 2, groups.qflush, "write",
            args="queue",
            summary="Remove every event of a queue, on every node"),
    Command("qstatus", -1, groups.qstatus, "readonly",
            args="[queue ...] [GROUPS group ...]",
            summary=("Per queue and group: total, inprogress, redo, done, available, "
                     "consumers")),
    Command("qinfo", -1, groups.qinfo, "readonly",
            args="[queue ...] [GROUPS group ...]",
            summary="QSTATUS as one human-readable line per queue and group"),
    # server
    Command("ping", -1, server.ping, "readonly fast",
            args='[message]',
            summary='Check the connection'),
    Command("echo", 2, server.echo, "readonly fast",
            args='message',
            summary='Return the message'),
    Command("info", -1, server.info, "readonly loading",
            args='needs facts of the process',
            summary="The node's state, counters and settings"),
    Command("hello", -1, users.hello, "readonly fast noauth",
            args='[protover [AUTH username password] [SETNAME name]]',
            summary="The cluster's nodes (Disque), or Redis's handshake with protover"),
    Command("auth", -2, users.auth, "readonly loading fast noauth",
            args='[username] password',
            summary='Authenticate the connection, as the default user or as username'),
    Command("acl", -2, users.acl, "admin loading",
            args='WHOAMI | CAT [category] | USERS | LIST | GETUSER username',
            summary="Users and what they may run: who this connection is, the roles, the users"),
    Command("config", -2, server.config, "readonly admin",
            args='GET parameter | SET parameter value | RESETSTAT | REWRITE',
            summary='Read or change the configuration'),
    Command("shutdown", -1, server.shutdown, "readonly admin loading",
            args='[REWRITE-AOF]',
            summary='Stop the node (after rewriting the AOF)'),
    Command("debug", -2, server.debug, "admin",
            args=('FLUSHALL | SLEEP seconds | ERROR message | STRUCTSIZE | JOBS | '
                  'BUS-DROP node on|off'),
            summary='Debugging and test helpers'),
    Command("select", 2, server.select, "readonly loading fast",
            args='0',
            summary='Accepted for Redis clients: Disque has one keyspace'),
    Command("client", -2, server.client, "readonly admin",
            args=('LIST | KILL ip:port | KILL [ID id] [ADDR ip:port] [TYPE normal] [USER name] '
                  '[SKIPME yes|no] | PAUSE ms | UNPAUSE | REPLY ON|OFF|SKIP | ID | GETNAME | '
                  'SETNAME name | SETINFO LIB-NAME|LIB-VER value'),
            summary='Inspect, name, close or pause connections; turn replies off'),
    Command("command", 0, server.command, "readonly loading",
            args='[COUNT | INFO name [name ...] | DOCS]',
            summary="The server's commands"),
    Command("slowlog", -2, server.slowlog, "readonly",
            args='GET [count] | LEN | RESET',
            summary=('The commands that took slowlog-log-slower-than microseconds or more, '
                     'the newest first')),
    Command("latency", -2, server.latency, "readonly admin loading",
            args='LATEST | HISTORY event | RESET [event ...] | DOCTOR | GRAPH event',
            summary=('Commands that took latency-monitor-threshold ms or more: the latest '
                     'and largest, and one sample a second (event "command")')),
    Command("time", 1, server.time_cmd, "readonly fast",
            args='',
            summary="The server's time: seconds and microseconds"),
    Command("quit", -1, server.quit, "readonly fast noauth nomonitor",
            args='',
            summary='Close the connection'),
    # an HTTP request sent to the RESP port: close it (checked before AUTH)
    Command("post", -1, server.cross_protocol, "readonly loading noauth nomonitor"),
    Command("host:", -1, server.cross_protocol, "readonly loading noauth nomonitor"),
    Command("cluster", -2, cluster.cluster, "readonly admin",
            args=('MEET ip port | NODES | INFO | MYID | FORGET node-id | LEAVING [yes|no] | RESET '
                  '[HARD|SOFT] | SAVECONFIG'),
            summary='Join, inspect and manage the cluster'),
    Command("bgrewriteaof", 1, server.bgrewriteaof, "readonly admin",
            args='',
            summary='Rewrite the append-only file in the background'),
    Command("monitor", 1, server.monitor, "readonly admin",
            args='',
            summary='Stream every command the node runs, with its client\'s address'),
    # the AOF's job record in C Disque's files; here only its refusal (our AOF has its
    # own records, core/aofrecords.py)
    Command("loadjob", 2, server.loadjob, "write",
            args='serialized-job',
            summary="Disque's AOF record: refused outside the AOF, as in Disque"),
]

# keyed by the lower- and upper-case names, so the usual spellings skip a .lower()
COMMANDS: Final[dict[bytes, Command]] = {c.name.encode(): c for c in _TABLE}
COMMANDS.update({c.name.upper().encode(): c for c in _TABLE})


def renamed_table(renames: list[tuple[str, str]]) -> dict[bytes, Command]:
    """The command table after ``rename-command old new`` lines, in order: ``old`` is
    no longer known, ``new`` (unless empty: the command is removed) runs it. The
    command keeps its own name in statistics and ACL rules. Raises ValueError for a
    command that does not exist or a new name that does, as Redis refuses to start."""
    if not renames:
        return COMMANDS
    table = dict(COMMANDS)
    for old, new in renames:
        cmd = table.get(old.encode("utf-8", "surrogateescape"))
        if cmd is None:
            raise ValueError(f"No such command in rename-command: '{old}'")
        new_b = new.encode("utf-8", "surrogateescape")
        if new_b and new_b in table:
            raise ValueError(f"Target command name already exists in rename-command: '{new}'")
        for key in [k for k, c in table.items() if c is cmd]:
            del table[key]
        if new_b:
            table[new_b] = cmd
            table[new_b.upper()] = cmd
    return table
