"""What a newcomer meets at the command line: ``help`` with every command's syntax, a
hint after a syntax error, "did you mean" for a typo of a friendly command instead of a
server error, global options after a friendly command, exit statuses of piped input."""

from __future__ import annotations

import re

import pytest
from cli_support import CLI, cli_env
from support import free_port
from test_repl import Pty

from disquepy.cli.syntax import server_commands, usage

# the syntax as the server's handlers state it (the one place it is written)
ADDJOB_SYNTAX = usage("addjob")
GETJOB_SYNTAX = usage("getjob")


def required_words(args: str) -> int:
    """Words a syntax line requires (outside [...]), alternatives excluded."""
    depth, words = 0, 0
    for tok in re.findall(r"\[|\]|[^\s\[\]]+", args):
        if tok == "[":
            depth += 1
        elif tok == "]":
            depth -= 1
        elif depth == 0:
            words += 1
    return words


def test_each_server_command_has_one_syntax_and_one_summary():
    """The names, syntax and summary come from the server's table (one place per
    fact); each syntax agrees with the command's arity in the table."""
    table = server_commands()
    assert {"addjob", "getjob", "nack", "cluster"} <= set(table)
    for name, c in table.items():
        args = usage(name).partition(" ")[2]
        assert c.summary, name
        assert c.args or c.arity in (1, -1), name  # only commands without arguments
        if "|" in args:
            continue
        need = 1 + required_words(args)
        if c.arity > 0:
            assert need == c.arity, (name, args, c.arity)
        else:
            assert need >= -c.arity, (name, args, c.arity)


def test_hint_syntax_names_what_the_newcomer_forgot():
    assert ADDJOB_SYNTAX.startswith("ADDJOB queue job ms-timeout ")
    assert re.search(r"(^| )FROM q", GETJOB_SYNTAX)


@pytest.mark.timeout(60)
def test_prompt_help_lists_every_command_with_its_syntax(run_cli, server):
    res = run_cli("-p", server.port, input="help\n")
    assert res.rc == 0, res
    lines = res.out.splitlines()
    assert '"help COMMAND" for one' in lines[0]
    listed = [ln.strip() for ln in lines[1:] if ln.strip()]
    assert listed == sorted(usage(n) for n in server_commands())
    assert ADDJOB_SYNTAX in listed and GETJOB_SYNTAX in listed


@pytest.mark.timeout(60)
def test_prompt_help_for_one_command_like_redis_cli(run_cli, server):
    want = ("\n  " + ADDJOB_SYNTAX + "\n  summary: " + server_commands()["addjob"].summary +
            "\n  group: jobs\n\n")
    for line in ("help ADDJOB", "help addjob", "? ADDJOB"):
        res = run_cli("-p", server.port, input=line + "\n")
        assert (res.rc, res.out, res.err) == (0, want, ""), line
    res = run_cli("-p", server.port, input="help @acks\n")
    assert [ln for ln in res.out.splitlines() if ln.startswith("  ") and
            "summary" not in ln and "group" not in ln] == [
        "  ACKJOB job-id [job-id ...] [RESULT data]", "  ACKTOKEN token [token ...]",
        "  FASTACK job-id [job-id ...] [RESULT data]"]
    assert run_cli("-p", server.port, input="help ADJOB\n").out == \
        "No command 'ADJOB'; did you mean ADDJOB?\n"
    # the same help without a prompt, and without a server
    res = run_cli("-p", free_port(), "help", "ADDJOB")
    assert (res.rc, res.out) == (0, want)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("line", "error", "hint"), [
    ("ADDJOB q body", "(error) ERR wrong number of arguments for 'addjob' command",
     "(hint) syntax: " + ADDJOB_SYNTAX),
    ("GETJOB q", "(error) ERR syntax error", "(hint) syntax: " + GETJOB_SYNTAX),
    ("ADDJBO q body 0", "(error) ERR unknown command 'ADDJBO'", "(hint) did you mean ADDJOB?"),
    ("qlne q", "(error) ERR unknown command 'qlne'", "(hint) did you mean qlen?"),
])
def test_error_reply_is_followed_by_a_hint(run_cli, server, r, line, error, hint):
    """The server's error unchanged on stdout (as redis-cli), one hint line on stderr;
    in one-shot mode and at the prompt alike."""
    res = run_cli("-p", server.port, *line.split())
    assert (res.rc, res.out, res.err) == (1, error + "\n", hint + "\n")
    res = run_cli("-p", server.port, input=line + "\nPING\n")
    assert (res.rc, res.out, res.err) == (1, error + "\nPONG\n", hint + "\n")
    assert r.execute_command("QLEN", "q") == 0  # nothing was added


def test_other_errors_get_no_hint(run_cli, server):
    res = run_cli("-p", server.port, "SHOW", "not-an-id")
    assert (res.rc, res.out, res.err) == (1, "(error) BADID Invalid Job ID format.\n", "")
    res = run_cli("-p", server.port, "NOSUCHCMD")  # nothing close: no guess
    assert (res.rc, res.err) == (1, "")


@pytest.mark.parametrize(("args", "said"), [
    (["jbos", "q"], "No such command 'jbos': it is neither a 'disque' command nor a server "
                    "command. Did you mean 'jobs'?"),
    (["JOBS", "q"], "Did you mean 'jobs'"),
    (["tpo"], "Did you mean 'top'?"),
    (["analitics", "x"], "Did you mean 'analytics'?"),
    (["clustr", "nodes"], "Did you mean 'cluster'?"),
    (["cluster", "nodez"], "No such command 'nodez': it is not a 'disque cluster' command. "
                           "Did you mean 'nodes'?"),
])
def test_typo_of_a_friendly_command_suggests_it_and_sends_nothing(run_cli, args, said):
    """Refused before any connection: nothing listens on the port given."""
    res = run_cli("-p", free_port(), *args)
    assert res.rc == 2, res
    assert res.out == ""
    assert said in res.err
    assert "Could not connect" not in res.err and "Traceback" not in res.err


def test_server_commands_close_to_friendly_names_still_go_to_the_server(run_cli, server):
    assert run_cli("-p", server.port, "echo", "hi").out == '"hi"\n'  # close to "bench"
    assert run_cli("-p", server.port, "hello").rc == 0  # close to "help"
    assert run_cli("-p", server.port, "JSCAN").rc == 0  # close to "jobs"


@pytest.mark.timeout(60)
def test_global_options_after_a_friendly_command(run_cli, server, r):
    r.execute_command("ADDJOB", "q", "body-after", 0)
    nobody = free_port()
    res = run_cli("-p", nobody, "jobs", "q", "-p", server.port)  # the later one wins
    assert res.rc == 0, res
    assert f"q on 127.0.0.1:{server.port}: 1 queued" in res.out and "body-after" in res.out
    res = run_cli("jobs", "q", "--count", "1", "-p", server.port, "--raw")
    assert res.rc == 0 and "body-after" in res.out
    res = run_cli("top", "--once", "-p", server.port)
    assert res.rc == 0 and "q" in res.out
    res = run_cli("cluster", "nodes", "-p", server.port)
    assert res.rc == 0 and f"127.0.0.1:{server.port}" in res.out
    res = run_cli("jobs", "q", "-h", "127.0.0.2", "-p", nobody)
    assert res.rc == 1
    assert res.err.strip() == f"Could not connect to Disque at 127.0.0.2:{nobody}: " \
                              "Connection refused"
    # their help says what they default to there
    flat = " ".join(run_cli("jobs", "--help").out.split())  # as wrapped at any width
    assert ("-h TEXT Server hostname. [default: (as before the command, else 127.0.0.1)]"
            in flat), flat
    assert ("-p INTEGER RANGE Server port. [default: (as before the command, else 7711); "
            "1<=x<=65535]" in flat), flat
    # raw commands keep their arguments as typed
    assert run_cli("-p", server.port, "ECHO", "-p").out == '"-p"\n'


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("script", "rc"), [
    ("PING\n", 0),
    ("BAD\n", 1),
    ("BAD\nPING\n", 1),  # a later success does not hide the failure
    ("PING\nBAD\nquit\n", 1),
    ('ECHO "open\n', 1),
    ("help\nhelp NOPE\n", 0),  # help is not a failed command
])
def test_piped_input_exit_status(run_cli, server, script, rc):
    assert run_cli("-p", server.port, input=script).rc == rc


@pytest.mark.timeout(60)
def test_terminal_prompt_help_and_errors_keep_exit_status_zero(server, tmp_path):
    """At a terminal an error is part of the conversation: quit exits 0, as redis-cli."""
    prompt = f"127.0.0.1:{server.port}> ".encode()
    with Pty([*CLI, "-p", str(server.port)], cli_env(tmp_path)) as t:
        t.expect(prompt)
        t.send(b"help GETJOB\r")
        t.expect(b"\r\n  " + GETJOB_SYNTAX.encode() + b"\r\n  summary: ")
        t.expect(prompt)
        t.send(b"GETJOB q\r")
        t.expect(b"(error) ERR syntax error\r\n(hint) syntax: GETJOB ")
        t.expect(prompt)
        t.send(b"quit\r")
        assert t.close() == 0
