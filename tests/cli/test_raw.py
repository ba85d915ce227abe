"""``disque CMD args``: one command, the reply printed like redis-cli, exit codes."""

from __future__ import annotations

import pytest
from support import free_port


def test_integer_status_and_nil_replies(run_cli, server, r):
    r.execute_command("ADDJOB", "q", "a", 0)
    r.execute_command("ADDJOB", "q", "b", 0)
    res = run_cli("-p", server.port, "QLEN", "q")
    assert (res.rc, res.out, res.err) == (0, "(integer) 2\n", "")
    assert run_cli("-p", server.port, "PING").out == "PONG\n"
    res = run_cli("-p", server.port, "GETJOB", "NOHANG", "FROM", "empty")
    assert (res.rc, res.out) == (0, "(nil)\n")


def test_status_reply_is_bare_and_bulk_string_is_quoted(run_cli, server, r):
    jid = run_cli("-p", server.port, "ADDJOB", "q", "x", 0).out.strip()  # ADDJOB: +D-...
    assert jid.startswith("D-") and r.execute_command("QLEN", "q") == 1
    res = run_cli("-p", server.port, "ECHO", 'say "hi"\n\x01\tend')
    assert res.out == '"say \\"hi\\"\\n\\x01\\tend"\n'


def test_nested_array_is_numbered_and_indented(run_cli, server, r):
    jid = r.execute_command("ADDJOB", "q", "body", 0).decode()
    res = run_cli("-p", server.port, "GETJOB", "FROM", "q")
    assert res.rc == 0
    assert res.out == f'1) 1) "q"\n   2) "{jid}"\n   3) "body"\n'


def test_array_index_width_grows_past_nine_entries(run_cli, server, r):
    ids = [r.execute_command("ADDJOB", "q", f"b{i}", 0).decode() for i in range(10)]
    lines = run_cli("-p", server.port, "QPEEK", "q", 10).out.splitlines()
    assert lines[0] == ' 1) 1) "q"'
    assert lines[1] == f'    2) "{ids[0]}"'
    assert lines[27] == '10) 1) "q"'
    assert lines[29] == '    3) "b9"'
    assert len(lines) == 30
    assert run_cli("-p", server.port, "QPEEK", "empty", 5).out == "(empty array)\n"


def test_error_reply_is_shown_with_nonzero_exit(run_cli, server):
    res = run_cli("-p", server.port, "SHOW", "not-an-id")
    assert res.rc == 1
    assert res.out == "(error) BADID Invalid Job ID format.\n"
    assert "Traceback" not in res.err


def test_unknown_command_is_a_clear_error(run_cli, server):
    res = run_cli("-p", server.port, "NOSUCHCMD", "x")
    assert res.rc == 1
    assert res.out.startswith("(error) ERR unknown command 'NOSUCHCMD'")
    assert "Traceback" not in res.out + res.err


def test_raw_mode_prints_bare_values(run_cli, server, r):
    jid = r.execute_command("ADDJOB", "q", "line one", 0).decode()
    res = run_cli("-p", server.port, "--raw", "GETJOB", "FROM", "q")
    assert res.out == f"q\n{jid}\nline one\n"
    assert run_cli("-p", server.port, "--raw", "QLEN", "q").out == "0\n"
    assert run_cli("-p", server.port, "--raw", "SHOW", "bad").out.startswith("BADID ")


def test_info_and_cluster_info_are_printed_as_text(run_cli, server):
    out = run_cli("-p", server.port, "INFO", "jobs").out
    assert out.splitlines() == ["# Jobs", "registered_jobs:0"]
    assert "cluster_known_nodes:1" in run_cli("-p", server.port, "cluster", "info").out.split()


def test_arguments_that_look_like_options_are_sent_as_typed(run_cli, server):
    assert run_cli("-p", server.port, "ECHO", "-h").out == '"-h"\n'
    assert run_cli("-p", server.port, "ECHO", "--raw").out == '"--raw"\n'


def test_wrong_port_is_a_clear_error(run_cli):
    port = free_port()
    res = run_cli("-p", port, "PING")
    assert res.rc == 1
    assert res.out == ""
    assert res.err.strip() == f"Could not connect to Disque at 127.0.0.1:{port}: Connection refused"


def test_wrong_host_is_a_clear_error(run_cli):
    port = free_port()  # 127.0.0.2 is loopback too; nothing listens there on this port
    res = run_cli("-h", "127.0.0.2", "-p", port, "PING")
    assert res.rc == 1
    assert res.err.strip() == f"Could not connect to Disque at 127.0.0.2:{port}: " \
                              "Connection refused"
    res = run_cli("-h", "127.0.0.2", "-p", port, "jobs", "q")
    assert res.rc == 1
    assert res.err.strip() == f"Could not connect to Disque at 127.0.0.2:{port}: " \
                              "Connection refused"


@pytest.mark.parametrize("args, message", [
    (["-p", "notaport", "PING"], "Invalid value for '-p'"),
    (["top", "--no-such-option"], "No such option '--no-such-option'"),
    (["cluster", "create", "127.0.0.1:x"], "Bad address '127.0.0.1:x'"),
    (["dead", "q", "D-1234"], "Job IDs are only taken with --requeue"),
])
def test_bad_input_is_a_clear_error(run_cli, args, message):
    res = run_cli(*args)
    assert res.rc != 0
    assert message in res.err
    assert "Traceback" not in res.err


def test_password(run_cli, server_factory):
    s = server_factory("--requirepass", "s3cret")
    res = run_cli("-p", s.port, "-a", "s3cret", "PING")
    assert (res.rc, res.out) == (0, "PONG\n")
    res = run_cli("-p", s.port, "QLEN", "q")
    assert res.rc == 1 and res.out.startswith("(error) NOAUTH")
    res = run_cli("-p", s.port, "-a", "wrong", "PING")
    assert res.rc == 1 and "Traceback" not in res.err
    assert "invalid password" in (res.out + res.err).lower()


def test_shutdown_closing_the_connection_is_success(run_cli, server_factory):
    s = server_factory()
    res = run_cli("-p", s.port, "SHUTDOWN")
    assert (res.rc, res.out, res.err) == (0, "", "")
    s.proc.wait(10)
    assert not s.alive()


def test_console_script(server, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from cli_support import cli_env

    script = Path(sys.executable).parent / "disque"
    if not script.exists():
        pytest.skip("the disque console script is not installed in this environment")
    p = subprocess.run([str(script), "-p", str(server.port), "ECHO", "hi"], text=True,
                       capture_output=True, timeout=30, env=cli_env(tmp_path))
    assert (p.returncode, p.stdout) == (0, '"hi"\n')
