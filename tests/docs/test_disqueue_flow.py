"""`make run` is Disqueue's whole flow: its command (from `make -n run`) starts a node,
disque-web and a worker running the example handler, and the README's curl calls (Disqueue's
own) answer what the README shows, call by call, on those real processes.

The README block is read as written: each curl command, then a comment line with the
answer: ``# 202 {...}`` (the status code and the JSON fields shown; ``...`` stands for
the rest), optionally after ``(a moment later)`` or ``(within N s)``, which ask the same
again until it answers so (10 s, or N s). A job ID shown in an answer stands, in the
calls after it, for the one the API printed in its place."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import httpx
import pytest
from docblocks import JOB_ID, README, marked_block
from support import ROOT, end_process, free_port, wait_for

EXPECT = re.compile(r"^#\s*(?:\((a moment later|within (\d+) s)\)\s*)?(\d{3})\s+(\{.*\})\s*$")


def steps(code: str) -> list[tuple[str, int, dict, float]]:
    """(curl command, status, JSON fields, seconds to keep asking) for each curl call."""
    lines = code.replace("\\\n", " ").splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.startswith("curl "):
            continue
        m = EXPECT.match(lines[i + 1].strip())
        assert m, f"no answer shown after `{line}`"
        wait = 0.0 if not m.group(1) else float(m.group(2) or 10)
        fields = json.loads(re.sub(r",\s*\.\.\.\s*}", "}", m.group(4)))
        out.append((line, int(m.group(3)), fields, wait))
    return out


def call(argv: list[str]) -> list:
    """[HTTP status, JSON body] of a curl call."""
    r = subprocess.run([*argv, "-s", "-w", "\n%{http_code}"], capture_output=True, text=True,
                       timeout=30)
    body, _, code = r.stdout.rpartition("\n")
    return [int(code), json.loads(body)]


def matches(got: list, status: int, fields: dict) -> bool:
    """The answer has the status and every field shown (a job ID field: any job ID)."""
    return got[0] == status and all(
        k in got[1] and (got[1][k] == v or bool(JOB_ID.fullmatch(str(v))
                                                and JOB_ID.fullmatch(str(got[1][k]))))
        for k, v in fields.items())


def make_run_command(port: int, web: int, rundir) -> list[str]:
    """The command `make run` runs (its last line, from `make -n`), on our ports and
    with its files in ``rundir``."""
    plan = subprocess.run(["make", "-n", "run", f"PORT={port}", f"WEB_PORT={web}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=True).stdout
    line = next(ln for ln in plan.replace("\\\n", " ").splitlines() if "scripts/cluster.py" in ln)
    argv = shlex.split(line)
    argv[0] = sys.executable
    argv[argv.index("--dir") + 1] = str(rundir)
    return argv


@pytest.mark.timeout(180)
def test_the_readme_curl_calls_answer_as_shown_on_make_run(tmp_path):
    block = marked_block(README, "against `make run`'s processes")
    port, web = free_port(), free_port()
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        p = subprocess.Popen(make_run_command(port, web, tmp_path / "run"), stdout=f,
                             stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_for(lambda: b"worker:" in out.read_bytes() or p.poll() is not None, timeout=90,
                 what="make run's processes")
        assert p.poll() is None, out.read_text()
        ids: dict[str, str] = {}
        for command, status, fields, wait in steps(block.code):
            command = command.replace("localhost:8000", f"127.0.0.1:{web}")
            command = JOB_ID.sub(lambda m: ids.get(m.group(0), m.group(0)), command)
            argv = shlex.split(command)
            assert argv[0] == "curl"
            got: list = []

            def answers(argv=argv, got=got, status=status, fields=fields) -> bool:
                got[:] = call(argv)
                return matches(got, status, fields)

            if wait:
                wait_for(answers, timeout=wait, step=0.2,
                         what=f"`{command}` to answer {status} {fields} (last: {got})")
            else:
                assert answers(), f"`{command}`: {got}, not {status} {fields}"
            for k, v in fields.items():  # the IDs shown stand for the ones printed
                if JOB_ID.fullmatch(str(v)):
                    assert ids.setdefault(v, got[1][k]) == got[1][k], (k, v, got)
        # the failed job went to the dead letters, with its error
        failed = [v for k, v in ids.items() if "4dYqzGQf" in k][0]
        dead = httpx.get(f"http://127.0.0.1:{web}/queues/default/dead-letters").json()
        assert failed in json.dumps(dead), dead
        # the worker logged each attempt of the failing job and the example's error
        log = (tmp_path / "run" / "worker.log").read_text()
        assert log.count(failed) >= 4, log[-3000:]
    finally:
        end_process(p, timeout=20)
