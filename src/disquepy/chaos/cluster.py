"""The real disque-server processes of a fault run: start, kill -9, pause, restart.

Each node runs ``python -m disquepy.server.main`` in its own directory with
``appendonly yes``, ``appendfsync always`` and a short ``cluster-node-timeout``, in its
own session (a Ctrl-C at the terminal reaches only the chaos process, which stops
every node itself), and dies with the chaos process should that be killed outright. Ports are picked free on loopback, for the client port, the bus
port and the bus port on the node's alias address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from .proxy import alias
from .resp import ConnLost, Pool, ReplyError

log = logging.getLogger("disquepy.chaos.cluster")

SRC = str(Path(__file__).resolve().parent.parent.parent)  # the directory holding disquepy
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child before exec (``preexec_fn``): SIGKILL when the process that started
    it dies, however it dies (kill -9 included), so no node outlives the chaos run or
    ``make cluster``. Linux only; elsewhere a no-op."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _bindable(addr: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError:
            return False
    return True


def free_ports(n: int, lo: int = 20000, hi: int = 30000) -> list[int]:
    """n client ports whose bus ports (+10000) are free too, on 127.0.0.1 and the
    aliases. Not seeded: ports are no part of a replay. ``DISQUEPY_PORT_RANGE=lo:hi``
    narrows the range (the test suite gives each of its parallel workers a slice)."""
    narrowed = os.environ.get("DISQUEPY_PORT_RANGE", "")
    if narrowed:
        first, _, end = narrowed.partition(":")
        lo, hi = int(first), int(end) - 1
    rng = random.SystemRandom()
    out: list[int] = []
    for _ in range(2000):
        p = rng.randint(lo, hi)
        i = len(out)
        if p in out or any(abs(p - q) < 2 for q in out):
            continue
        if (_bindable("127.0.0.1", p) and _bindable("127.0.0.1", p + 10000)
                and _bindable(alias(i), p + 10000)):
            out.append(p)
            if len(out) == n:
                return out
    raise RuntimeError("no free ports found")


class NodeProc:
    """One server process; ``incarnation`` counts its starts."""

    def __init__(self, index: int, port: int, workdir: Path, node_timeout: int) -> None:
        self.index = index
        self.port = port
        self.workdir = workdir
        self.node_timeout = node_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        self.expected_exit = False  # set before a kill we do ourselves
        self.paused = False
        self.log_path = workdir / "server.log"
        self.unexpected_exits: list[int] = []

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "disquepy.server.main",
            "--port", str(self.port),
            "--dir", str(self.workdir),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--cluster-node-timeout", str(self.node_timeout),
        ]

    def spawn(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(self.log_path, "ab") as f:
            f.write(b"---- chaos: start %d\n" % self.incarnation)
            f.flush()
            self.proc = subprocess.Popen(
                self.command(), cwd=self.workdir, stdout=f, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, preexec_fn=die_with_parent,
            )
        self.incarnation += 1
        self.expected_exit = False
        self.paused = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_exit(self) -> int | None:
        """The exit code if the process ended without us killing it (once)."""
        if self.proc is None or self.expected_exit:
            return None
        rc = self.proc.poll()
        if rc is None:
            return None
        self.expected_exit = True  # report it once
        self.unexpected_exits.append(rc)
        log.error("node %d (port %d) exited by itself with %s", self.index, self.port, rc)
        return rc

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.expected_exit = True
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.paused:
            self._signal(signal.SIGCONT)
            self.paused = False
        self._signal(sig)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait(5)

    def pause(self) -> None:
        if self.alive() and not self.paused:
            self._signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            self._signal(signal.SIGCONT)
            self.paused = False

    def _signal(self, sig: int) -> None:
        assert self.proc is not None  # only a started node is signalled
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def log_problems(self) -> list[str]:
        """Distinct log lines that say the node itself went wrong (an exception), each
        with how often it appears."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        seen: dict[str, int] = {}
        for ln in lines:
            if "Error" in ln and not ln.startswith(" ") or "Traceback" in ln:
                seen[ln.strip()] = seen.get(ln.strip(), 0) + 1
        return [f"{ln} (x{n})" for ln, n in list(seen.items())[:10]]


class Cluster:
    """N nodes; every method is safe to call in any state (stop_all always works)."""

    def __init__(self, root: Path, n: int, node_timeout: int = 1500) -> None:
        self.root = root
        self.ports = free_ports(n)
        self.nodes = [
            NodeProc(i, p, root / f"node{i}", node_timeout) for i, p in enumerate(self.ports)
        ]
        self.admin = Pool()
        self.ids: list[str] = [""] * n

    @property
    def n(self) -> int:
        return len(self.nodes)

    async def start(self, i: int, timeout: float = 20.0) -> None:
        node = self.nodes[i]
        node.spawn()
        await self.wait_ready(i, timeout)

    async def wait_ready(self, i: int, timeout: float = 20.0) -> None:
        node = self.nodes[i]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if not node.alive():
                raise RuntimeError(f"node {i} exited at start:\n{node.log_tail()}")
            try:
                if await self.admin.call(node.port, "PING", timeout=1.0) == b"PONG":
                    return
            except (ConnLost, ReplyError):
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError(f"node {i} not ready on {node.port}:\n{node.log_tail()}")

    async def start_all(self) -> None:
        for i in range(self.n):
            self.nodes[i].spawn()
        for i in range(self.n):
            await self.wait_ready(i)
            self.ids[i] = (await self.admin.call(self.ports[i], "CLUSTER", "MYID")).decode()

    async def join(self) -> None:
        """Node 0 meets every other node at its alias; gossip does the rest."""
        for j in range(1, self.n):
            r = await self.admin.call(self.ports[0], "CLUSTER", "MEET", alias(j), self.ports[j])
            if r != b"OK":
                raise RuntimeError(f"CLUSTER MEET {alias(j)} {self.ports[j]}: {r!r}")

    async def hello(self, i: int) -> list[Any] | None:
        """HELLO's reply: [version, own ID, [id, host, port, priority] per node]."""
        try:
            reply: list[Any] = await self.admin.call(self.ports[i], "HELLO", timeout=2.0)
            return reply
        except (ConnLost, ReplyError):
            return None

    async def converged(self) -> bool:
        """Every node up and seeing every other one reachable (priority 1)."""
        for i in range(self.n):
            h = await self.hello(i)
            if h is None or len(h) != 2 + self.n or any(e[3] != b"1" for e in h[2:]):
                return False
        return True

    async def wait_converged(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if await self.converged():
                return True
            await asyncio.sleep(0.2)
        return False

    async def addresses(self) -> dict[int, list[str]]:
        """node index -> the addresses its HELLO lists (itself first)."""
        out = {}
        for i in range(self.n):
            h = await self.hello(i)
            out[i] = [] if h is None else [e[1].decode() for e in h[2:]]
        return out

    def kill(self, i: int) -> None:
        self.nodes[i].kill()
        self.admin.conns.pop(self.ports[i], None)

    def stop_all(self) -> None:
        """Kill every process still running (also paused ones)."""
        for node in self.nodes:
            try:
                node.kill()
            except Exception as e:  # keep going: the others must die too
                log.error("stopping node %d: %r", node.index, e)
        try:
            self.admin.close()
        except RuntimeError:  # the event loop is already closed: the sockets go with it
            self.admin.conns.clear()
