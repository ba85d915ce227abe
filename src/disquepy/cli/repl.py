"""The interactive prompt: ``127.0.0.1:7711> ``, history, redis-cli quoting, reconnects."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import TextIO

import click
import redis

from ..codec.resp import split_text
from .conn import RawSession, Target, connection_reason
from .reply import ServerError, render
from .syntax import error_hint, help_text

log = logging.getLogger(__name__)

def to_wire(arg: str) -> bytes:
    """An argument as bytes: ``\\xHH`` escapes become those bytes, the rest UTF-8."""
    return arg.encode("utf-8", "surrogateescape")


def history_path() -> Path:
    """``$DISQUE_HISTFILE`` or ``~/.disque_history``."""
    return Path(os.environ.get("DISQUE_HISTFILE") or Path.home() / ".disque_history")


class _History:
    """readline history kept in a file, when the prompt talks to a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.readline = None
        if not enabled:
            return
        try:
            import readline
        except ImportError:  # pragma: no cover - platforms without readline
            return
        self.readline = readline
        self.path = history_path()
        with contextlib.suppress(OSError):
            readline.read_history_file(self.path)
        readline.set_history_length(1000)

    def save(self) -> None:
        if self.readline is None:
            return
        try:
            self.readline.write_history_file(self.path)
        except OSError as e:
            log.warning("cannot write history file %s: %s", self.path, e)


def run_repl(target: Target, stdin: TextIO | None = None) -> int:
    """Read commands from the prompt (or piped stdin) until ``quit``/``exit`` or EOF.

    With a terminal: a prompt ``host:port> `` and readline history. With piped input:
    no prompt, one reply per command, for scripts. Errors are printed, never fatal; a
    server that went away is reconnected to on the next command. ``help`` lists the
    commands with their syntax (``help CMD``: one). Returns the exit status: with piped
    input 1 if any command failed (an error reply, bad quoting, no connection), else 0.
    """
    stdin = stdin or sys.stdin
    interactive = stdin.isatty()
    history = _History(interactive and stdin is sys.stdin)
    session = RawSession(target.host, target.port, target.password,
                         target.tls_options, target.user)
    failed = False
    try:
        session.connect()
    except redis.ConnectionError as e:
        click.echo(f"Could not connect to Disque at {target.addr}: {connection_reason(e)}",
                   err=True)
    try:
        while True:
            prompt = f"{target.addr}> " if session.connected else "not connected> "
            try:
                if interactive and history.readline is not None:
                    line = input(prompt)
                else:
                    if interactive:
                        click.echo(prompt, nl=False)
                    line = stdin.readline()
                    if not line:
                        raise EOFError
            except EOFError:
                if interactive:
                    click.echo()
                return 1 if failed and not interactive else 0
            except KeyboardInterrupt:
                click.echo()
                continue
            args = split_text(line)  # redis-cli's splitting (sdssplitargs), codec's
            if args is None:
                click.echo("Invalid argument(s)")
                failed = True
                continue
            if not args:
                continue
            if args[0].lower() in ("quit", "exit"):
                return 1 if failed and not interactive else 0
            if args[0].lower() in ("help", "?"):
                click.echo(help_text(args[1:]))
                continue
            try:
                reply = session.call(*[to_wire(a) for a in args])
            except KeyboardInterrupt:  # e.g. a blocked GETJOB: its reply would come later
                session.close()
                click.echo("(interrupted)")
                with contextlib.suppress(redis.ConnectionError, OSError):
                    session.connect()  # a fresh connection, as before the command
                continue
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                session.close()
                click.echo(f"Could not connect to Disque at {target.addr}: "
                           f"{connection_reason(e)}", err=True)
                failed = True
                continue
            if reply is None and args[0].lower() == "shutdown":
                continue  # the server is going away: the next prompt says not connected
            click.echo(render(reply, args, target.raw))
            sys.stdout.flush()
            if isinstance(reply, ServerError):
                failed = True
                hint = error_hint(args, reply.text)
                if hint:
                    click.echo(hint, err=True)
    finally:
        history.save()
        session.close()
