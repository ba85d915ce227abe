"""The ``disque`` command line: redis-cli for Disque, plus friendly commands.

``disque [-h HOST] [-p PORT] [-a PASSWORD] CMD args...`` sends one command and prints the
reply like redis-cli; with no command it opens an interactive prompt. Lower-case
``cluster``, ``top``, ``jobs``, ``dead``, ``bench`` and ``analytics`` are friendly
commands; every other word (``ADDJOB``, ``info``, ``CLUSTER NODES``...) goes to the server
as typed.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import redis

from .conn import CliError, RawSession, Target, connection_message
from .reply import ServerError, render

CONTEXT = {"help_option_names": ["--help"], "max_content_width": 100}


def translate_errors(fn: Any, ctx: click.Context) -> Any:
    """Run ``fn``; connection and server errors become one-line :class:`CliError`."""
    try:
        return fn()
    except (redis.ConnectionError, redis.TimeoutError) as e:
        target = ctx.find_object(Target)
        raise CliError(connection_message(e, target.addr if target else "the server")) from None
    except ServerError as e:
        raise CliError(f"(error) {e.text}") from None
    except redis.ResponseError as e:
        raise CliError(f"(error) {e}") from None
    except OSError as e:
        raise CliError(str(e)) from None


class RawFallbackGroup(click.Group):
    """A group whose unknown sub-commands are sent to the server as a raw command."""

    raw_prefix: tuple[str, ...] = ()

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        cmd = self.get_command(ctx, args[0])
        if cmd is None:
            return "raw", raw_command, [*self.raw_prefix, *args]
        return args[0], cmd, args[1:]

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return translate_errors(lambda: super(RawFallbackGroup, self).invoke(ctx), ctx)
        finally:
            target = ctx.find_object(Target)
            if target is not None and ctx.parent is None:
                target.close()


@click.command("raw", add_help_option=False, context_settings={
    "ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def raw_command(target: Target, argv: tuple[str, ...]) -> None:
    """Send a command as typed and print the reply like redis-cli."""
    from .repl import to_wire

    session = RawSession(target.host, target.port, target.password)
    try:
        reply = session.call(*[to_wire(a) for a in argv])
    finally:
        session.close()
    if reply is None and argv and argv[0].lower() == "shutdown":
        return
    click.echo(render(reply, argv, target.raw))
    if isinstance(reply, ServerError):
        sys.exit(1)


@click.group(cls=RawFallbackGroup, invoke_without_command=True, context_settings=CONTEXT)
@click.option("-h", "host", default="127.0.0.1", show_default=True, help="Server hostname.")
@click.option("-p", "port", default=7711, show_default=True, type=click.IntRange(1, 65535),
              help="Server port.")
@click.option("-a", "password", default=None, envvar="DISQUE_AUTH",
              help="Password (AUTH); also from $DISQUE_AUTH.")
@click.option("--raw", is_flag=True, help="Print raw values, without quotes and types.")
@click.version_option(package_name="disquepy", message="disque %(version)s")
@click.pass_context
def cli(ctx: click.Context, host: str, port: int, password: str | None, raw: bool) -> None:
    """redis-cli for Disque, plus friendly commands.

    \b
    disque [-h HOST] [-p PORT] [-a PASSWORD] CMD [ARG...]   one command, reply printed
    disque                                                   interactive prompt
    disque cluster create H:P H:P ...                        join nodes into a cluster
    disque top | jobs QUEUE | dead QUEUE | bench | analytics PATH

    Lower-case friendly command names take precedence; any other word (ADDJOB, info,
    CLUSTER INFO, ...) is sent to the server as typed.
    """
    ctx.obj = Target(host=host, port=port, password=password, raw=raw)
    if ctx.invoked_subcommand is None:
        from .repl import run_repl

        ctx.exit(run_repl(ctx.obj))


def _register() -> None:
    from . import analytics, bench, cluster, dead, jobs, top

    for mod in (cluster, top, jobs, dead, bench, analytics):
        cli.add_command(mod.command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``disque``)."""
    cli.main(args=argv, prog_name="disque")


__all__ = ["cli", "main", "CliError", "Target"]
