"""The interactive prompt: driven through piped stdin and through a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import queue
import select
import signal
import subprocess
import threading
import time

import pytest
from cli_support import CLI, cli_env
from support import wait_for

from disquepy.cli.repl import to_wire
from disquepy.codec.resp import split_text as split_args


def test_split_args_quotes_like_redis_cli():
    """The prompt splits with the project's one splitter (codec.resp.split_text)."""
    assert split_args('ADDJOB q "a b" 0') == ["ADDJOB", "q", "a b", "0"]
    assert split_args("  ECHO   'x y'  ") == ["ECHO", "x y"]
    assert split_args(r'ECHO "tab\there\n" "q\"uote" "\x41\x42"') == [
        "ECHO", "tab\there\n", 'q"uote', "AB"]
    assert split_args(r"ECHO 'it\'s' 'no\nescape'") == ["ECHO", "it's", "no\\nescape"]
    assert split_args('ECHO ""') == ["ECHO", ""]
    assert split_args("") == []
    assert to_wire(split_args(r'"\xff\x00"')[0]) == b"\xff\x00"
    assert to_wire("é") == "é".encode()
    for bad in ('ECHO "open', "ECHO 'open", 'ECHO "a"b'):
        assert split_args(bad) is None


@pytest.mark.timeout(60)
def test_piped_commands_print_replies_and_errors_are_not_fatal(run_cli, server, r):
    """Every line runs, errors included; the exit status says some failed."""
    script = "\n".join([
        'ADDJOB q "hello world" 0',
        "QLEN q",
        "",
        "SHOW nope",
        'ECHO "unbalanced',
        "NOSUCHCMD",
        "GETJOB FROM q",
        "quit",
        "QLEN never-sent",
    ]) + "\n"
    res = run_cli("-p", server.port, input=script)
    assert res.rc == 1
    lines = res.out.splitlines()
    jid = lines[0]
    assert jid.startswith("D-")
    assert lines[1:5] == ["(integer) 1", "(error) BADID Invalid Job ID format.",
                          "Invalid argument(s)",
                          "(error) ERR unknown command 'NOSUCHCMD'"]
    assert lines[5:] == ['1) 1) "q"', f'   2) "{jid}"', '   3) "hello world"']
    assert r.execute_command("QLEN", "q") == 0  # the GETJOB after the errors ran


@pytest.mark.timeout(60)
def test_exit_and_end_of_input_stop_the_prompt(run_cli, server):
    assert run_cli("-p", server.port, input="PING\nexit\nPING\n").out == "PONG\n"
    assert run_cli("-p", server.port, input="PING\nPING").out == "PONG\nPONG\n"


class Reader:
    """Lines from a process's stdout, with a deadline for each.

    A thread reads them: select() on the pipe cannot see lines that an earlier
    readline() already pulled into the file's buffer (two replies written at once),
    and would wait for them in vain."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stdout) -> None:
        for line in stdout:
            self.lines.put(line)

    def line(self, timeout: float = 10.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no output from the prompt in time") from None


@pytest.mark.timeout(90)
def test_reconnects_after_the_server_restarts(server_factory, tmp_path):
    s = server_factory()
    proc = subprocess.Popen([*CLI, "-p", str(s.port)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            bufsize=1, env=cli_env(tmp_path))
    try:
        out = Reader(proc)
        proc.stdin.write("ADDJOB q before 0\n")
        proc.stdin.flush()
        assert out.line().startswith("D-")
        s.kill()
        proc.stdin.write("PING\n")  # nobody listens: an error, the prompt goes on
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stderr], [], [], 10)
        assert ready
        assert proc.stderr.readline().startswith(
            f"Could not connect to Disque at 127.0.0.1:{s.port}: ")
        s.start()  # same port, fresh (in-memory) node
        proc.stdin.write("QLEN q\nPING\n")
        proc.stdin.flush()
        assert out.line() == "(integer) 0\n"
        assert out.line() == "PONG\n"
        s.kill()  # killed while connected: noticed before the next command is sent
        s.start()
        proc.stdin.write("ECHO again\n")
        proc.stdin.flush()
        assert out.line() == '"again"\n'
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        assert proc.wait(10) == 1  # piped, and one command could not be sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Pty:
    """The CLI on a pseudo-terminal, as a user at a keyboard would see it."""

    def __init__(self, args: list[str], env: dict) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     close_fds=True, start_new_session=True)
        os.close(slave)
        self.seen = b""

    def expect(self, data: bytes, timeout: float = 10.0) -> bytes:
        deadline = time.monotonic() + timeout
        while data not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{data!r} not seen; got {self.seen[-500:]!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:
                    chunk = b""
                assert chunk, f"terminal closed before {data!r}; got {self.seen[-500:]!r}"
                self.seen += chunk
        before, _, self.seen = self.seen.partition(data)
        return before

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def __enter__(self) -> Pty:
        return self

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        """A failed step: the process is killed at once, not waited for."""
        if exc_type is not None and self.master >= 0:
            self.close(wait=0)

    def close(self, wait: float = 10) -> int | None:
        """Wait for the process to exit (killed after ``wait`` seconds) and return its
        exit code (None if it had to be killed)."""
        try:
            return self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            if self.master >= 0:
                os.close(self.master)
                self.master = -1


@pytest.mark.timeout(90)
def test_terminal_prompt_and_history_file(server, tmp_path):
    env = cli_env(tmp_path)
    prompt = f"127.0.0.1:{server.port}> ".encode()
    with Pty([*CLI, "-p", str(server.port)], env) as t:
        t.expect(prompt)
        t.send(b'ECHO "from history"\r')
        t.expect(b'\r\n"from history"\r\n')  # the reply, not the echo of the input
        t.expect(prompt)
        t.send(b"QLEN q\r")
        t.expect(b"\r\n(integer) 0\r\n")
        t.expect(prompt)
        t.send(b"exit\r")
        assert t.close() == 0
    history = (tmp_path / ".disque_history").read_text()
    assert 'ECHO "from history"' in history and "QLEN q" in history
    # a new session reads the history back: "up" three times (exit, QLEN, ECHO)
    with Pty([*CLI, "-p", str(server.port)], env) as t:
        t.expect(prompt)
        t.send(b"\x1b[A\x1b[A\x1b[A\r")
        t.expect(b'\r\n"from history"\r\n')
        t.send(b"quit\r")
        assert t.close() == 0


@pytest.mark.timeout(60)
def test_terminal_prompt_says_not_connected(tmp_path):
    from support import free_port

    port = free_port()
    with Pty([*CLI, "-p", str(port)], cli_env(tmp_path)) as t:
        t.expect(f"Could not connect to Disque at 127.0.0.1:{port}: Connection refused".encode())
        t.expect(b"not connected> ")
        t.send(b"PING\r")
        t.expect(b"PING\r\nCould not connect")
        t.expect(b"not connected> ")
        t.send(b"quit\r")
        assert t.close() == 0


@pytest.mark.timeout(60)
def test_top_live_table_on_a_terminal_until_interrupted(server, r, tmp_path):
    r.execute_command("ADDJOB", "livequeue", "x", 0)
    with Pty([*CLI, "-p", str(server.port), "top", "-i", "0.2"], cli_env(tmp_path)) as t:
        t.expect(b"livequeue")
        r.execute_command("ADDJOB", "second", "y", 0)
        t.expect(b"second")  # the live table refreshed with the new queue
        t.proc.send_signal(signal.SIGINT)
        assert t.close() == 0


@pytest.mark.timeout(60)
def test_interrupting_a_blocked_command_keeps_the_prompt(server, r, tmp_path):
    prompt = f"127.0.0.1:{server.port}> ".encode()
    with Pty([*CLI, "-p", str(server.port)], cli_env(tmp_path)) as t:
        t.expect(prompt)
        t.send(b"GETJOB FROM nothing\r")
        wait_for(lambda: r.info("clients")["blocked_clients"] == 1, what="GETJOB to block")
        t.proc.send_signal(signal.SIGINT)
        t.expect(b"(interrupted)")
        t.expect(prompt)
        t.send(b"PING\r")
        t.expect(b"\r\nPONG\r\n")
        t.send(b"quit\r")
        assert t.close() == 0
