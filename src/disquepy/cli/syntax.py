"""The server's commands as the command line shows them: each one's syntax and summary
(the prompt's ``help``, the hint after a syntax error) and "did you mean" for a typo.

Everything about a command that the server states is read from the server, imported
only when needed (it is slow to import for a one-shot command): the names and groups
from its command table (:mod:`disquepy.core.commands`), the syntax from the first
sentence of the handler's docstring when it states one (``ADDJOB queue job ms-timeout
[...]``). Only what the server does not state is written here: a one-line summary per
command, and the syntax of the commands whose handler states none (``ARGS``). A test
checks that every command has exactly one syntax and one summary.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from typing import Any

# the server's table also guards against HTTP requests sent to its port: not commands
NOT_COMMANDS = frozenset({"post", "host:"})

# the arguments of the commands whose handler's docstring does not state its syntax
ARGS: dict[str, str] = {
    "show": "job-id",
    "deljob": "job-id [job-id ...]",
    "enqueue": "job-id [job-id ...]",
    "dequeue": "job-id [job-id ...]",
    "nack": "job-id [job-id ...]",
    "ackjob": "job-id [job-id ...]",
    "fastack": "job-id [job-id ...]",
    "qlen": "queue",
    "qstat": "queue",
    "qpeek": "queue count",
    "ping": "[message]",
    "echo": "message",
    "info": "[section]",
    "hello": "[protover [AUTH username password] [SETNAME name]]",
    "config": "GET parameter | SET parameter value | RESETSTAT | REWRITE",
    "shutdown": "[REWRITE-AOF]",
    "debug": "FLUSHALL | SLEEP seconds | ERROR message | JOBS | BUS-DROP node on|off",
    "select": "0",
    "client": "LIST | ID | GETNAME | SETNAME name | SETINFO LIB-NAME|LIB-VER value",
    "command": "[COUNT | INFO name [name ...] | DOCS]",
    "time": "",
    "quit": "",
    "cluster": ("MEET ip port | NODES | INFO | MYID | FORGET node-id | LEAVING [yes|no] | "
                "RESET [HARD|SOFT] | SAVECONFIG"),
    "bgrewriteaof": "",
}

# what each command is for, in a line
SUMMARY: dict[str, str] = {
    "addjob": "Add a job to a queue; the reply (its ID) waits up to ms-timeout for the "
              "replication (ASYNC: replicate in the background)",
    "show": "Show a job's state, counters, nodes and body",
    "deljob": "Delete jobs from this node only",
    "enqueue": "Put jobs in their queue if not queued already",
    "dequeue": "Take jobs out of their queue",
    "nack": "Put jobs back in their queue now, counting a failed delivery",
    "working": "Postpone a job's next delivery by its retry period",
    "jscan": "Iterate over the jobs this node knows",
    "ackjob": "Acknowledge jobs: delete them cluster-wide",
    "fastack": "Acknowledge jobs best-effort, without waiting",
    "acktoken": "Acknowledge every job a GETJOB with this TOKEN delivered here",
    "getjob": "Take jobs from the first queue that has some (blocks unless NOHANG)",
    "qlen": "The number of jobs queued in a queue on this node",
    "qstat": "A queue's length, age, rates, pause state and blocked clients",
    "qpeek": "Look at up to count queued jobs without taking them (negative: newest first)",
    "qscan": "Iterate over the queues of this node",
    "pause": "Pause a queue: in, out, all or none; state to read it; bcast to the cluster",
    "ping": "Check the connection",
    "echo": "Return the message",
    "info": "The node's state, counters and settings",
    "hello": "The cluster's nodes (Disque), or Redis's handshake with protover",
    "auth": "Authenticate the connection",
    "config": "Read or change the configuration",
    "shutdown": "Stop the node (after rewriting the AOF)",
    "debug": "Debugging and test helpers",
    "select": "Accepted for Redis clients: Disque has one keyspace",
    "client": "Inspect or name connections",
    "command": "The server's commands",
    "time": "The server's time: seconds and microseconds",
    "quit": "Close the connection",
    "cluster": "Join, inspect and manage the cluster",
    "bgrewriteaof": "Rewrite the append-only file in the background",
}

# error replies after which the command's syntax helps
_SYNTAX_ERRORS = ("wrong number of arguments", "syntax error", "not an integer",
                  "invalid cursor or option", "unknown subcommand")

# where a docstring's syntax sentence ends: "WORKING id: postpone...", "AUTH password,
# or ...", "ACKTOKEN token [token ...] (disquepy): ..."
_SENTENCE_END = re.compile(r"(: |, | \(|\.$)")


@cache
def server_commands() -> dict[str, Any]:
    """The server's commands, lower-case name -> its entry in the command table."""
    from disquepy.core.commands import COMMANDS

    return {k.decode().lower(): c for k, c in COMMANDS.items()
            if k.decode().lower() not in NOT_COMMANDS}


def handler_syntax(name: str) -> str | None:
    """The arguments the handler's docstring states (its first sentence, when that
    starts with the command's name in capitals), or None."""
    c = server_commands().get(name.lower())
    doc = " ".join((c.handler.__doc__ or "").split("\n\n")[0].split()) if c else ""
    head = name.upper()
    if doc != head and not doc.startswith(head + " "):
        return None
    end = _SENTENCE_END.search(doc)
    return doc[len(head):end.start() if end else len(doc)].strip()


def usage(name: str) -> str | None:
    """``ADDJOB queue job ms-timeout [...]``, or None for an unknown command."""
    if name.lower() not in server_commands():
        return None
    args = handler_syntax(name)
    if args is None:
        args = ARGS.get(name.lower(), "")
    return f"{name.upper()} {args}".rstrip()


def group(name: str) -> str:
    """The command's group: the module of the server that runs it (jobs, queues...)."""
    c = server_commands().get(name.lower())
    return c.handler.__module__.rsplit(".", 1)[-1] if c is not None else "-"


def suggest(word: str, names: list[str] | tuple[str, ...]) -> list[str]:
    """Names close to ``word`` (difflib, as click's "Did you mean"), in ``word``'s case."""
    found = difflib.get_close_matches(word.lower(), names)
    return [n.upper() for n in found] if word.isupper() else found


def describe(name: str) -> str | None:
    """One command's help, as redis-cli shows it (``help ADDJOB``)."""
    line = usage(name)
    if line is None:
        return None
    summary = SUMMARY.get(name.lower(), "-")
    return f"\n  {line}\n  summary: {summary}\n  group: {group(name)}\n"


def help_text(args: list[str]) -> str:
    """The prompt's ``help`` (every command with its syntax), ``help CMD``, ``help @group``."""
    names = sorted(server_commands())
    if not args:
        lines = ['Disque commands; "help COMMAND" for one, "help @group" for a group, '
                 '"quit" to exit.', ""]
        lines += [f"  {usage(n)}" for n in names]
        return "\n".join(lines)
    topic = args[0]
    if topic.startswith("@"):
        members = [n for n in names if group(n) == topic[1:].lower()]
        if members:
            return "".join(describe(n) for n in members)
        groups = sorted({group(n) for n in names})
        return f"No group {topic!r}: the groups are " + ", ".join(f"@{g}" for g in groups)
    text = describe(topic)
    if text is not None:
        return text
    close = suggest(topic, names)
    return f"No command {topic!r}" + (f"; did you mean {close[0]}?" if close else ".")


def error_hint(args: list[str] | tuple[str, ...], error: str) -> str | None:
    """The line to show after ``error`` replied to ``args``: the command's syntax after a
    syntax error, the closest command after an unknown one."""
    if not args:
        return None
    name = args[0]
    if error.startswith("ERR unknown command"):
        close = suggest(name, sorted(server_commands()))
        return f"(hint) did you mean {close[0]}?" if close else None
    low = error.lower()
    if usage(name) is not None and any(s in low for s in _SYNTAX_ERRORS):
        return f"(hint) syntax: {usage(name)}"
    return None
