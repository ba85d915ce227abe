"""Drive a pure Node in-process with a virtual clock: no sockets, no real time."""

from __future__ import annotations

import random

from disquepy.core.config import Config
from disquepy.core.info import HostFacts
from disquepy.core.node import Node
from disquepy.core.outputs import Shell
from disquepy.sim.replies import ErrorReply as Error  # noqa: F401 (the tests' name)
from disquepy.sim.replies import decode as decode_reply


class HarnessShell(Shell):
    """A node's outputs in a test: replies kept for the test to read; INFO finished
    with no process facts; other shell requests left as the reply, for the test to see."""

    def __init__(self, node) -> None:
        self.node = node
        self.replies: list = []  # (client, reply bytes) for other clients
        self.finished: dict = {}  # client id -> the reply of its shell request
        self.records: list = []  # AOF records, all since the start
        self.events: list = []  # lifecycle events, all since the start

    def record_events(self, events: list) -> None:
        self.events.extend(events)

    def persist(self, records: list) -> None:
        self.records.extend(records)

    def reply(self, client, data: bytes) -> None:
        self.replies.append((client, data))

    def answer(self, client, data) -> None:
        self.finished[client.id] = data

    def info(self, section: str) -> bytes:
        return self.node.info(section, HostFacts(), self.node.now)

    def auth_failed(self, client, delay_ms: int, error: bytes) -> bytes:
        return error  # without the delay

    def unsupported(self, req):
        return req  # the request itself, for the test to see

    def run(self, client) -> bytes | None:
        """Carry out everything; the reply a shell request of ``client`` got, if any."""
        self.deliver(self.node.take_outputs())
        return self.finished.pop(client.id, None)


class Harness:
    def __init__(self, now: int = 1_700_000_000_000, seed: int = 1, **config) -> None:
        cfg = Config()
        for k, v in config.items():
            setattr(cfg, k, v)
        self.now = now
        self.node = Node(cfg, f"{random.Random(seed).getrandbits(160):040x}",
                         random.Random(seed), now)
        self.client = self.node.new_client(now=now)
        self.shell = HarnessShell(self.node)

    def new_client(self):
        return self.node.new_client(now=self.now)

    def raw(self, *args, client=None):
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        client = client or self.client
        r = self.node.execute(client, argv, self.now)
        finished = self.shell.run(client)
        return r if r is not None or finished is None else finished

    def __call__(self, *args, client=None):
        """Run a command and decode its reply into Python values."""
        return decode(self.raw(*args, client=client))

    def advance(self, ms: int) -> list:
        """Move the clock, firing every timer on the way; returns outbox replies."""
        end = self.now + ms
        while True:
            t = self.node.next_wake()
            if t is None or t > end:
                break
            self.now = max(self.now, t)
            self.node.tick(self.now)
        self.now = end
        self.node.tick(end)
        return self.drain()

    def drain(self) -> list:
        self.shell.deliver(self.node.take_outputs())
        out = [(c, decode(data)) for c, data in self.shell.replies]
        self.shell.replies.clear()
        return out


def decode(data):
    """One reply (bytes) as Python values (the simulator's decoder, sim/replies.py);
    "BLOCKED" for no reply yet, anything else (a shell request) as it is."""
    if data is None:
        return "BLOCKED"
    if not isinstance(data, bytes):
        return data
    return decode_reply(data)
