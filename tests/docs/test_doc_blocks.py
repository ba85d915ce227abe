"""Every snippet of the README and docs/ runs as pasted.

The fenced ```sh, ```python and ```conf blocks of README.md and docs/*.md are extracted
and run (docs/API.md, generated from docstrings, is not: its python blocks are API
examples), and so are
the terminal transcripts (plain ``` blocks that start with a ``$ `` or a
``127.0.0.1:7711> `` prompt: every command runs, and what the block shows after the
commands must be exactly what they print, job IDs aside), in order, each against
fresh real nodes this test starts on the ports the README uses: one node
on 7711 (what `make run` gives), or with a `cluster` marker three joined nodes on
7711-7713 (what `make cluster` gives). If one of those ports (or its bus port) is
busy here, for instance a developer's own `make run`, the snippet's text is rewritten
to free ports before it runs (every 7711-7713 and 17711-17713 in it): so runnable
snippets must name their ports (`disque -p 7711`, `redis-cli -p 7711`, a worker's
`--nodes 127.0.0.1:7711`; a worker or client that would fall back on its default
finds $DISQUE_NODES set to the test's own node all the same). In a
transcript, ``$ redis-cli -p 7711`` or ``$ disque -p 7711`` alone opens a prompt: the
``host:port>`` lines after it are typed there (a prompt line with none open opens
redis-cli on its port), so they can carry no ``#`` comment; a job ID a transcript
shows stands, in the commands after it, for the one the node printed there.

A ```conf block is a node's configuration: a node started with it (on a free port,
in an empty directory) must come up and answer. A plain ``` block is not run, so one
that starts with a command or a directive must say ```sh or ```conf.

An HTML comment on the line before a block steers it (keep this list short):

- ``<!-- doc-test: skip: REASON -->``: not run; the reason must name the test
  file(s) that cover what the block shows (``tests/...py``), and they must exist;
- ``<!-- doc-test: cluster -->``: run against three joined nodes;
- ``<!-- doc-test: config file -->``: the node is started with a copy of the
  repository's disque.conf (for blocks that need one, such as CONFIG REWRITE);
- ``<!-- doc-test: own nodes -->``: the block starts its own nodes (no node is started
  for it; its ports are rewritten all the same);
- ``<!-- doc-test: interrupt after N s: COMMAND -->``: the block's lines that start
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
from pathlib import Path

import pytest
from docblocks import DOCS, JOB_ID, PROMPT, README, Block, doc_blocks, rewrite_ports
from support import PORT_RANGE_ENV, ROOT, Server, join_cluster, port_is_free, port_range

INTERRUPT = re.compile(r"interrupt after (\d+) s: (.+)")
TOOL = re.compile(r"(?<![\w.-])(disque|redis-cli)(?![\w.:-])")  # not disque:// URLs
# tools whose node comes from --nodes (default: $DISQUE_NODES, then 127.0.0.1:7711)
NODES_TOOL = re.compile(r"(?<![\w.-])(disque-worker|disque-web|python -m disquepy\.(worker|web))"
                        r"(?![\w.-])")
MARKS = ("cluster", "config file", "own nodes")
SESSION = re.compile(r"(redis-cli|disque)(?: -p \d+)?")


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


BLOCKS = [b for doc in DOCS for b in doc_blocks(doc)]


def port_base() -> int:
    """7711 if the README's ports and their bus ports are free, else a free run (under
    pytest-xdist, only a run in this worker's port range: workers never race for 7711)."""
    lo, hi = port_range()
    first = () if os.environ.get(PORT_RANGE_ENV) else (7711,)
    for base in (*first, *range(lo + 1, hi - 10, 97)):
        if all(port_is_free(base + i) and port_is_free(base + i + 10000) for i in range(3)):
            return base
    raise RuntimeError("no three free consecutive ports")


def test_docs_link_upstream_not_the_workspace():
    """A reader of the README and docs has a clone, not this machine's ../shared: C Disque
    and the seed projects are linked upstream."""
    for doc in DOCS:
        text = doc.read_text()
        assert "../shared" not in text and "/shared/anchors" not in text, doc.name


def test_docs_have_runnable_blocks_and_few_exceptions():
    assert len([b for b in BLOCKS if b.path == README]) >= 6
    skipped = [b for b in BLOCKS if b.mark.startswith("skip") and b.path == README]
    # make run, make cluster, the Disqueue flow and a failover against their scripts, the
    # Spark API and examples: each names the test that runs it
    assert len(skipped) <= 6, [b.id for b in skipped]
    for doc in DOCS:  # a marker under another name would be ignored, its block run plain
        assert "<!-- readme-test" not in doc.read_text(), f"{doc.name}: say doc-test:"
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
            # a worker's or disque-web's node: its --nodes may be on a continued line
            for m in NODES_TOOL.finditer(b.code):
                rest = re.split(r"(?<!\\)\n", b.code[m.end():])[0]
                assert "--nodes" in rest or "-n " in rest, \
                    f"{b.id}: `{m.group(0)}` names no --nodes"


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
def test_doc_block_runs_as_pasted(block: Block, nodes, tmp_path):
    base = port_base()
    if block.lang == "conf":
        node = Server(tmp_path / "node", port=base, conf=rewrite_ports(block.code, base))
        node.start()  # it came up with the configuration and answers
        try:
            assert node.proc.poll() is None
        finally:
            node.kill()
        return
    cluster = block.mark == "cluster"
    conf = (ROOT / "disque.conf").read_text() if block.mark == "config file" else None
    if block.mark != "own nodes":
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
               PYTHONPATH=str(ROOT / "src"), DISQUE_NODES=f"127.0.0.1:{base}")
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
