"""Every README snippet runs as pasted.

The fenced ```sh and ```python blocks of README.md are extracted and run, and so are
the terminal transcripts (plain ``` blocks that start with a ``$ `` or a
``127.0.0.1:7711> `` prompt: every command runs, and what the block shows after the
commands must be exactly what they print, job IDs aside), in order, each against
fresh real nodes this test starts on the ports the README uses: one node
on 7711 (what `make run` gives), or with a `cluster` marker three joined nodes on
7711-7713 (what `make cluster` gives). If one of those ports (or its bus port) is
busy here, for instance a developer's own `make run`, the snippet's text is rewritten
to free ports before it runs (every 7711-7713 and 17711-17713 in it): so runnable
snippets must name their ports (`disque -p 7711`, `redis-cli -p 7711`). In a
transcript, ``$ redis-cli -p 7711`` or ``$ disque -p 7711`` alone opens a prompt: the
``host:port>`` lines after it are typed there (a prompt line with none open opens
redis-cli on its port), so they can carry no ``#`` comment; a job ID a transcript
shows stands, in the commands after it, for the one the node printed there.

An HTML comment on the line before a block steers it (keep this list short):

- ``<!-- readme-test: skip: REASON -->``: not run; the reason must name the test
  file(s) that cover what the block shows (``tests/...py``), and they must exist;
- ``<!-- readme-test: cluster -->``: run against three joined nodes;
- ``<!-- readme-test: config file -->``: the node is started with a copy of the
  repository's disque.conf (for blocks that need one, such as CONFIG REWRITE);
- ``<!-- readme-test: interrupt after N s: COMMAND -->``: the block's lines that start
  with COMMAND (a long-running one, such as a worker the reader stops with Ctrl-C)
  get SIGINT after N seconds, as the reader would do.

A comment that starts with a reply shows what the line prints: ``# (integer) 3`` or
``# (nil)`` on a sh line, ``# True`` (or False, None) on a python ``print(...)`` line.
Those replies must appear in the block's output, in that order.

sh blocks run with `bash -e -o pipefail` in an empty directory where `.venv` is the
virtualenv running the tests, with its bin/ on PATH (as after the Quick start's
`. .venv/bin/activate`); python blocks run with that interpreter.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import ROOT, Server, join_cluster, port_is_free

README = ROOT / "README.md"
RUNNABLE = ("sh", "python")
MARK = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->$")
INTERRUPT = re.compile(r"interrupt after (\d+) s: (.+)")
PORT = re.compile(r"(?<!\d)(1?771[1-3])(?!\d)")
TOOL = re.compile(r"(?<![\w.-])(disque|redis-cli)(?![\w.:-])")  # not disque:// URLs
EXPECT = {"sh": re.compile(r"#\s*(\(integer\) -?\d+|\(nil\))"),
          "python": re.compile(r"^\s*print\(.*#\s*(True|False|None)\b")}
MARKS = ("cluster", "config file")
PROMPT = re.compile(r"^[\w.]+:(\d+)> (.*)$")
SESSION = re.compile(r"(redis-cli|disque)(?: -p \d+)?")
JOB_ID = re.compile(r"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}")


@dataclass
class Block:
    lineno: int
    lang: str
    code: str
    mark: str = ""

    @property
    def id(self) -> str:
        return f"README.md:{self.lineno}-{self.lang}"

    def expected(self) -> list[str]:
        """The replies its comments show, in order."""
        return [m.group(1) for line in self.code.splitlines()
                if (m := EXPECT[self.lang].search(line))]

    def commands(self) -> list[str]:
        """Its shell command lines (sh: every line; transcript: the ``$`` lines)."""
        if self.lang == "transcript":
            return [ln[2:] for ln in self.code.splitlines() if ln.startswith("$ ")]
        return self.code.splitlines() if self.lang == "sh" else []


def run_group(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group, then kill whatever of the group is left
    (on a timeout too): a snippet's worker or server must not outlive the test (one
    left retrying 7711 would consume the next test's jobs)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"`{cmd[-1]}` still running after {timeout} s\n{out}\n{err}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def transcript_steps(code: str) -> list[tuple[str, list[str]]]:
    """A transcript as (bash command, the non-blank lines it must print) steps; a line
    typed at a prompt is piped into the prompt's program."""
    steps: list[tuple[str, list[str]]] = []
    tool = ""
    for line in code.splitlines():
        if line.startswith("$ "):
            command = line[2:].split("#")[0].strip()
            if SESSION.fullmatch(command):  # a prompt opens; output as on a terminal
                tool = command + (" --no-raw" if command.startswith("redis-cli") else "")
                continue
            tool = ""
            steps.append((line[2:], []))
        elif m := PROMPT.match(line):
            tool = tool or f"redis-cli -p {m.group(1)} --no-raw"
            steps.append((f"printf '%s\\n' {shlex.quote(m.group(2))} | {tool}", []))
        elif line.strip():
            assert steps, f"output before any command: {line!r}"
            steps[-1][1].append(line.rstrip())
    return steps


def run_transcript(block_id: str, code: str, **run) -> None:
    """Run the steps in order, each output compared with the transcript's. Job IDs
    differ on every run: the reader types the IDs their node printed, so an ID seen in
    the transcript is replaced by the one printed in its place."""
    ids: dict[str, str] = {}
    for command, expected in transcript_steps(code):
        command = JOB_ID.sub(lambda m: ids.get(m.group(0), m.group(0)), command)
        p = run_group(["bash", "-o", "pipefail", "-c", command], timeout=60, **run)
        printed = [ln.rstrip() for ln in p.stdout.splitlines() if ln.strip()]
        assert p.returncode == 0 and "Traceback" not in p.stderr, (
            f"{block_id}: `{command}` failed ({p.returncode})\n{p.stdout}\n{p.stderr}")
        assert [JOB_ID.sub("<ID>", ln) for ln in printed] == \
            [JOB_ID.sub("<ID>", ln) for ln in expected], f"{block_id}: `{command}`: {p.stderr}"
        for want, got in zip(expected, printed, strict=True):
            ids.update(zip(JOB_ID.findall(want), JOB_ID.findall(got), strict=True))


def readme_blocks() -> list[Block]:
    blocks: list[Block] = []
    lines = README.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        prev = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        mark = MARK.match(prev)
        first = next((ln for ln in body if ln.strip()), "")
        if not lang and (first.startswith("$ ") or PROMPT.match(first)):
            lang = "transcript"
        if lang in (*RUNNABLE, "transcript"):
            blocks.append(Block(start + 1, lang, "\n".join(body) + "\n",
                                mark.group(1) if mark else ""))
        else:
            assert not mark, f"README.md:{start + 1}: a readme-test marker on a ``` block " \
                             f"that is not {RUNNABLE}"
    return blocks


BLOCKS = readme_blocks()


def port_base() -> int:
    """7711 if the README's ports and their bus ports are free, else a free run."""
    for base in (7711, *range(21000, 29000, 97)):
        if all(port_is_free(base + i) and port_is_free(base + i + 10000) for i in range(3)):
            return base
    raise RuntimeError("no three free consecutive ports")


def rewrite_ports(code: str, base: int) -> str:
    def sub(m: re.Match) -> str:
        p = int(m.group(1))
        return str(base + p - 7711 if p < 10000 else base + 10000 + p - 17711)
    return code if base == 7711 else PORT.sub(sub, code)


def test_readme_has_runnable_blocks_and_few_exceptions():
    assert len(BLOCKS) >= 6
    skipped = [b for b in BLOCKS if b.mark.startswith("skip")]
    # make run, make cluster, the disque-web curl calls, the Spark API and examples: each
    # names the test that runs it (a "web" marker starting disque-web would run the curls)
    assert len(skipped) <= 5, [b.id for b in skipped]
    for b in BLOCKS:
        assert not b.mark or b.mark in MARKS or b.mark.startswith("skip: ") \
            or INTERRUPT.fullmatch(b.mark), f"{b.id}: unknown marker {b.mark!r}"
        if b.mark.startswith("skip: "):
            cited = re.findall(r"tests/[\w/]+\.py", b.mark)
            assert cited, f"{b.id}: a skip must name the tests that cover the block"
            for path in cited:
                assert (ROOT / path).is_file(), f"{b.id}: {path} does not exist"
        else:  # the port rewrite must reach every command
            for line in b.commands():
                command = line.split("#")[0]
                for m in TOOL.finditer(command):
                    args = re.split(r"[|;)&]", command[m.end():])[0].split()
                    assert "-p" in args, f"{b.id}: `{line.strip()}` names no port"


@pytest.fixture
def nodes(tmp_path):
    started: list[Server] = []

    def start(n: int, base: int, join: bool, conf: str | None = None) -> None:
        for i in range(n):
            s = Server(tmp_path / f"node{i}", port=base + i, conf=conf).start()
            started.append(s)
            c = s.client()  # ours, not a node that took the port after port_base()
            assert c.info("server")["process_id"] == s.proc.pid, f"port {s.port} taken"
            c.close()
        if join:
            join_cluster(started)

    yield start
    for s in started:
        s.kill()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.mark.startswith("skip")],
                         ids=lambda b: b.id)
def test_readme_block_runs_as_pasted(block: Block, nodes, tmp_path):
    base = port_base()
    cluster = block.mark == "cluster"
    conf = (ROOT / "disque.conf").read_text() if block.mark == "config file" else None
    nodes(3 if cluster else 1, base, join=cluster, conf=conf)
    code = rewrite_ports(block.code, base)
    m = INTERRUPT.fullmatch(block.mark)
    if m:  # a long-running command: stopped with SIGINT after N s, as the reader does
        secs, command = m.groups()
        lines = code.splitlines()
        hits = [i for i, ln in enumerate(lines) if ln.lstrip().startswith(command)]
        assert hits, f"{block.id}: no line starts with {command!r}"
        for i in hits:
            # --foreground: it stays in the block's process group (killed after it)
            lines[i] = f"timeout --foreground -k 30 -s INT --preserve-status {secs} {lines[i]}"
        code = "\n".join(lines) + "\n"
    work = tmp_path / "cwd"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = dict(os.environ, PATH=f"{Path(sys.prefix) / 'bin'}:{os.environ.get('PATH', '')}",
               PYTHONPATH=str(ROOT / "src"))
    if block.lang == "transcript":
        run_transcript(block.id, code, cwd=work, env=env)
        return
    if block.lang == "sh":
        cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
    else:
        cmd = [sys.executable, "-c", code]
    p = run_group(cmd, timeout=200, cwd=work, env=env)
    assert p.returncode == 0, (
        f"{block.id} failed ({p.returncode}); ports from {base}\n--- code\n{code}"
        f"--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}")
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    pos = 0
    for reply in block.expected():
        found = p.stdout.find(reply, pos)
        assert found >= 0, (f"{block.id}: {reply!r} not printed (in order)\n--- stdout\n"
                            f"{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}")
        pos = found + len(reply)
