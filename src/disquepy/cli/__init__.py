"""The ``disque`` command line: redis-cli for Disque, plus friendly commands.

``disque [-h HOST] [-p PORT] [-a PASSWORD] CMD args...`` sends one command and prints the
reply like redis-cli; with no command it opens an interactive prompt. Lower-case
``cluster``, ``top``, ``jobs``, ``dead``, ``groups``, ``bench`` and ``analytics`` are friendly
commands; every other word (``ADDJOB``, ``info``, ``CLUSTER NODES``...) goes to the server
as typed.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import redis
from click.core import ParameterSource

from .conn import CliError, RawSession, Target, connection_message
from .reply import ServerError, render
from .syntax import error_hint, help_text, server_commands, suggest

CONTEXT = {"help_option_names": ["--help"], "max_content_width": 100}

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def translate_errors(fn: Callable[[], T], ctx: click.Context) -> T:
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
    """A group whose unknown sub-commands are sent to the server as a raw command, unless
    the word is a typo of a sub-command (close to one, and not a server command)."""

    raw_prefix: tuple[str, ...] = ()

    def raw_names(self) -> list[str]:
        """The server commands a word sent raw can be (none known: CLUSTER's)."""
        return []

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        cmd = self.get_command(ctx, args[0])
        if cmd is None:
            self.refuse_typo(ctx, args[0])
            return "raw", raw_command, [*self.raw_prefix, *args]
        return args[0], cmd, args[1:]

    def refuse_typo(self, ctx: click.Context, word: str) -> None:
        """A usage error (exit 2) saying which sub-command or server command ``word`` may
        be a typo of, when it is close to a sub-command and not a server command."""
        mine = self.list_commands(ctx)
        if not difflib.get_close_matches(word.lower(), mine):  # the server table is
            return                                              # only read when needed
        raw = self.raw_names()
        if word.lower() in raw:
            return
        what = (f"neither a '{ctx.command_path}' command nor a server command" if raw
                else f"not a '{ctx.command_path}' command")
        names = dict.fromkeys([*mine, *raw])  # in order, once
        close = [n if n in mine else suggest(word, [n])[0]
                 for n in difflib.get_close_matches(word.lower(), list(names))]
        raise click.UsageError(f"No such command {word!r}: it is {what}. Did you mean "
                               + " or ".join(repr(n) for n in close) + "?", ctx)

    def invoke(self, ctx: click.Context) -> Any:  # what the command returns (click's type)
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

    session = RawSession(target.host, target.port, target.password,
                         target.tls_options, target.user)
    try:
        reply = session.call(*[to_wire(a) for a in argv])
    finally:
        session.close()
    if reply is None and argv and argv[0].lower() == "shutdown":
        return
    click.echo(render(reply, argv, target.raw))
    if isinstance(reply, ServerError):
        hint = error_hint(argv, reply.text)
        if hint:
            click.echo(hint, err=True)
        sys.exit(1)


class TopGroup(RawFallbackGroup):
    """``disque``: a word that is not a friendly command may be any server command."""

    def raw_names(self) -> list[str]:
        return sorted(server_commands())


# the options saying where to connect: (declarations, settings); given to the group and,
# so that they may also follow a friendly command (disque jobs q -p 7712), to each of those
GLOBAL_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("-h", "host"), dict(default="127.0.0.1", show_default=True, help="Server hostname.")),
    (("-p", "port"), dict(default=7711, show_default=True, type=click.IntRange(1, 65535),
                          help="Server port.")),
    (("-a", "--pass", "password"), dict(default=None, envvar="DISQUE_AUTH",
                                        help="Password (AUTH); also from $DISQUE_AUTH.")),
    (("--user", "user"), dict(default=None, envvar="DISQUE_USER",
                              help="ACL user to AUTH as, with -a (AUTH user password); also "
                                   "from $DISQUE_USER.")),
    (("--raw",), dict(is_flag=True, help="Print raw values, without quotes and types.")),
    (("--tls",), dict(is_flag=True, help="Connect over TLS (the server's tls-port).")),
    (("--cacert",), dict(default=None, help="CA certificate file that verifies the server "
                                           "(default: the system's CAs).")),
    (("--cert",), dict(default=None, help="Client certificate file, for a server with "
                                         "tls-auth-clients yes.")),
    (("--key",), dict(default=None, help="Private key file of --cert.")),
]


def _override_target(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """A global option given after a friendly command: it wins over the one before."""
    if ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
        setattr(ctx.find_object(Target), param.name, value)


def _accept_global_options(cmd: click.Command) -> None:
    """Give ``cmd`` (and its sub-commands) the global options, applied to the Target."""
    have = {o for p in cmd.params for o in getattr(p, "opts", ())}
    for decls, settings in GLOBAL_OPTIONS:
        if have.intersection(d for d in decls if d.startswith("-")):
            continue  # the command's own option of that name wins
        kept = {k: v for k, v in settings.items() if k in ("type", "help", "is_flag")}
        if settings.get("show_default"):
            kept["show_default"] = f"as before the command, else {settings['default']}"
        cmd.params.append(click.Option(decls, expose_value=False, callback=_override_target,
                                       **kept))
    for sub in getattr(cmd, "commands", {}).values():
        _accept_global_options(sub)


def _global_options(fn: F) -> F:
    for decls, settings in reversed(GLOBAL_OPTIONS):
        fn = click.option(*decls, **settings)(fn)
    return fn


@click.group(cls=TopGroup, invoke_without_command=True, context_settings=CONTEXT)
@_global_options
@click.version_option(package_name="disquepy", message="disque %(version)s")
@click.pass_context
def cli(ctx: click.Context, host: str, port: int, password: str | None, user: str | None,
        raw: bool, tls: bool, cacert: str | None, cert: str | None, key: str | None) -> None:
    """redis-cli for Disque, plus friendly commands.

    \b
    disque [-h HOST] [-p PORT] [-a PASSWORD] CMD [ARG...]   one command, reply printed
    disque --user NAME -a PASSWORD ...                       as an ACL user
    disque --tls --cacert CA [--cert C --key K] -p PORT ...  the same over TLS
    disque                                                   interactive prompt
    disque cluster create H:P H:P ...                        join nodes into a cluster
    disque top | jobs QUEUE | dead QUEUE | groups [QUEUE...] | bench | analytics PATH
    disque help [COMMAND]                                    server commands' syntax

    Lower-case friendly command names take precedence; any other word (ADDJOB, info,
    CLUSTER INFO, ...) is sent to the server as typed, unless it looks like a typo of a
    friendly command (and is no server command): then the closest names are suggested.
    -h, -p, -a, --user, --raw and the TLS options may also follow a friendly command
    (disque jobs q -p 7712).
    """
    ctx.obj = Target(host=host, port=port, password=password, user=user, raw=raw, tls=tls,
                     cacert=cacert, cert=cert, key=key)
    if ctx.invoked_subcommand is None:
        from .repl import run_repl

        ctx.exit(run_repl(ctx.obj))


@click.command("help")
@click.argument("topic", nargs=-1)
def help_command(topic: tuple[str, ...]) -> None:
    """The server's commands with their syntax (as the prompt's help): help ADDJOB for
    one, help @queues for a group."""
    click.echo(help_text(list(topic)))


def _register() -> None:
    from . import analytics, bench, cluster, dead, groups, jobs, top

    cli.add_command(help_command)
    for mod in (cluster, top, jobs, dead, groups, bench, analytics):
        _accept_global_options(mod.command)
        cli.add_command(mod.command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``disque``)."""
    cli.main(args=argv, prog_name="disque")


__all__ = ["cli", "main", "CliError", "Target"]
