"""The server's commands as the command line shows them: each one's syntax and summary
(the prompt's ``help``, the hint after a syntax error) and "did you mean" for a typo.

Everything is read from the server's command table (:mod:`disquepy.core.commands`,
imported only when needed: it is slow to import for a one-shot command): the names,
each command's syntax (``Command.args``) and summary, and its group (the module of
its handler).
"""

from __future__ import annotations

import difflib
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from disquepy.core.commands import Command

# the server's table also guards against HTTP requests sent to its port: not commands
NOT_COMMANDS = frozenset({"post", "host:"})

# error replies after which the command's syntax helps
_SYNTAX_ERRORS = ("wrong number of arguments", "syntax error", "not an integer",
                  "invalid cursor or option", "unknown subcommand")


@cache
def server_commands() -> dict[str, Command]:
    """The server's commands, lower-case name -> its entry in the command table."""
    from disquepy.core.commands import COMMANDS

    return {k.decode().lower(): c for k, c in COMMANDS.items()
            if k.decode().lower() not in NOT_COMMANDS}


def usage(name: str) -> str | None:
    """``ADDJOB queue job ms-timeout [...]``, or None for an unknown command."""
    c = server_commands().get(name.lower())
    if c is None:
        return None
    return f"{name.upper()} {c.args}".rstrip()


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
    summary = server_commands()[name.lower()].summary or "-"
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
            return "".join(describe(n) or "" for n in members)  # known: never None
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
