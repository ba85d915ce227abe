"""The worker's command line as a user meets it (real subprocesses): a mistake is one line
on stderr with exit status 2 and no traceback, ``--help`` names the program as it was
started and gives every option a help text and its default, a handler's failure is logged
with its traceback under a Redis-style line."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
from support import ROOT, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), HERE]), COLUMNS="2000")
# pid:M 25 Nov 2026 09:12:01.123 # message
REDIS_LINE = re.compile(r"^\d+:M \d\d \w{3} \d{4} \d\d:\d\d:\d\d\.\d{3} [.\-*#] ")


def entry_point_code() -> str:
    """Python code running the ``disque-worker`` console script as pyproject declares it."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = scripts["disque-worker"].split(":")
    return f"import sys; from {module} import {func}; sys.exit({func}())"


def run_worker(*args: str, entry: bool = False, timeout: float = 30) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", entry_point_code()] if entry else \
        [sys.executable, "-m", "disquepy.worker"]
    return subprocess.run([*cmd, *args], cwd=HERE, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize(("args", "said"), [
    (["nosuch:handle", "-q", "q"], ["no module named 'nosuch'", "PYTHONPATH"]),
    (["nosuch:handle", "-q", "q", "--processes", "2"], ["no module named 'nosuch'"]),
    (["handlers:nosuch", "-q", "q"], ["handlers has no attribute 'nosuch'", "it has:",
                                      "slow"]),
    (["handlers", "-q", "q"], ["expected MODULE:ATTR", "myworker:handle"]),
    (["handlers:slow"], ["--queues is required", "--queues myqueue"]),
    (["handlers:slow", "-q", "q", "--backoff", "linear"],
     ["--backoff", "unknown back-off 'linear'", "fixed:SECONDS"]),
    (["handlers:slow", "-q", "q", "--backoff", "fixed:x"],
     ["--backoff", "'x'", "exponential:1:2:600"]),
    (["handlers:slow", "-q", "q", "--backoff", "exponential:1:2:3:4"],
     ["--backoff", "up to three numbers"]),
    (["handlers:slow", "-q", "q", "--concurrency", "0"], ["--concurrency", ">= 1", "'0'"]),
    (["handlers:slow", "-q", "q", "--dead-letter-after", "x"], ["--dead-letter-after"]),
    (["handlers:slow", "-q", "q", "--shutdown-timeout", "-1"], ["--shutdown-timeout"]),
    (["handlers:slow", "-q", "q", "--log-level", "loud"], ["--log-level", "'LOUD'",
                                                           "WARNING"]),
    (["handlers:slow", "-q", "q", "--nodes", "127.0.0.1:x"], ["--nodes", "HOST:PORT"]),
    (["handlers:slow", "-q", "q", "--bogus"], ["unrecognized arguments: --bogus"]),
    # -p is the port in disque and redis-cli; it was --processes here, so a newcomer's
    # `-p 7711` started 7711 worker processes
    (["handlers:slow", "-q", "q", "-p", "7711"],
     ["-p/--port is not a worker option", "--nodes 127.0.0.1:7711", "--processes N"]),
    (["handlers:slow", "-q", "q", "--processes", "7711"],
     ["--processes 7711 is more than", "per CPU", "--concurrency"]),
    (["handlers:app", "-q", "nosuch"], ["no task for queue 'nosuch'", "its queues: tq"]),
    (["handlers:app", "--body", "bytes"], ["--body applies to a handler function",
                                           "@app.task"]),
    (["handlers:slow", "-q", "q", "--max-retries", "2", "--dead-letter-after", "3"],
     ["--dead-letter-after: not allowed with argument --max-retries"]),
    (["handlers:slow", "-q", "q", "--prefetch", "-1"], ["--prefetch", ">= 0"]),
    (["handlers:HERE_NOT", "-q", "q"], ["no attribute 'HERE_NOT'"]),
    (["os:sep", "-q", "q"], ["neither a function nor a Tasks app"]),
])
def test_command_line_mistake_is_one_line_exit_2(args, said):
    r = run_worker(*args)
    assert r.returncode == 2, r
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("python -m disquepy.worker: ")
    assert lines[0].endswith("(see 'python -m disquepy.worker --help')")
    for s in said:
        assert s in lines[0], (s, lines[0])
    assert r.stdout == ""


def test_console_script_errors_name_disque_worker():
    r = run_worker("nosuch:handle", entry=True)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "disque-worker: no module named 'nosuch': run from the directory holding nosuch.py "
        "(or its package), or add that directory to PYTHONPATH (see 'disque-worker --help')"]


def test_module_failing_at_import_shows_its_traceback_and_one_line():
    """A bug in the user's module is not a missing module: its traceback shows where."""
    r = run_worker("broken_module:handle", "-q", "q")
    assert r.returncode == 2
    assert "Traceback (most recent call last):" in r.stderr
    assert 'raise RuntimeError("broken on purpose at import")' in r.stderr
    assert r.stderr.splitlines()[-1] == (
        "python -m disquepy.worker: importing 'broken_module' failed with RuntimeError: "
        "broken on purpose at import (traceback above) (see 'python -m disquepy.worker "
        "--help')")


@pytest.mark.parametrize(("entry", "prog"), [(False, "python -m disquepy.worker"),
                                             (True, "disque-worker")])
def test_help_names_the_program_and_every_option_with_its_default(entry, prog):
    r = run_worker("--help", entry=entry)
    assert r.returncode == 0 and r.stderr == ""
    out = r.stdout
    assert out.startswith(f"usage: {prog} ")
    assert f"example: {prog} myworker:handle" in out
    from disquepy.worker.__main__ import parser

    p = parser()
    opts = [a for a in p._actions  # (-p is hidden: refused with the fix, see above)
            if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS]
    assert len(opts) >= 15
    lines = out.splitlines()
    for a in opts:
        i = next((i for i, ln in enumerate(lines)
                  if ln.strip().startswith(a.option_strings[0])), None)
        assert i is not None, a.option_strings
        line = lines[i]  # a long option's help is on the next (indented) line
        if i + 1 < len(lines) and lines[i + 1].startswith(" " * 10):
            line += lines[i + 1]
        assert a.help and a.help.split()[0] in line, line  # the help is on the line
        if a.nargs != 0:  # flags are off unless given; every other option: its default
            assert "(default: " in line, line
    assert "(default: 30.0)" in out and "(default: 1000)" in out and "(default: json)" in out


def test_password_from_environment_is_not_shown_in_help():
    r = subprocess.run([sys.executable, "-m", "disquepy.worker", "--help"], cwd=HERE,
                       env=dict(ENV, DISQUE_PASSWORD="s3cret-pw"), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and "s3cret-pw" not in r.stdout
    assert "(default: $DISQUE_PASSWORD, else none)" in r.stdout


@pytest.mark.timeout(60)
def test_handler_failure_is_logged_with_its_traceback(dq, server, spawn_worker):
    """One log event: a Redis-style WARNING line with the outcome, then the handler's
    traceback (not a repr squeezed on one line, not a second unrelated record)."""
    dq.add_job("q", json.dumps("payload-1"))
    p = spawn_worker(server.port, "handlers:fail", "--queues", "q", "--backoff", "fixed:60")
    wait_for(lambda: "outcome=retry-later" in p.log_path.read_text(),
             what="the failure logged")
    p.kill()
    p.wait(10)
    lines = p.log_path.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if "outcome=retry-later" in ln)
    assert REDIS_LINE.match(lines[i]) and " # event=job " in lines[i], lines[i]
    tb = lines[i + 1:]
    assert tb[0] == "Traceback (most recent call last):"
    end = next(j for j, ln in enumerate(tb) if REDIS_LINE.match(ln) or
               ln.startswith("ValueError"))
    assert tb[end] == "ValueError: handler failed on purpose: 'payload-1'"
    assert any("handlers.py" in ln for ln in tb[:end])
    assert any('raise ValueError(f"handler failed on purpose' in ln for ln in tb[:end])
    assert all(not REDIS_LINE.match(ln) for ln in tb[:end])  # no record in between
    started = next(ln for ln in lines if "worker started" in ln)
    assert REDIS_LINE.match(started) and " * worker started" in started
