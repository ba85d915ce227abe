"""Shell requests (core/outputs.py): one frozen dataclass per kind, carried out by the
one dispatch every shell shares (``Shell.finish``)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from nodeharness import Harness, decode

from disquepy.core import outputs
from disquepy.core.config import Config
from disquepy.core.info import HostFacts
from disquepy.core.node import Node
from disquepy.core.outputs import ShellRequest

# each kind and the Shell method that carries it out, with the arguments it gets
KINDS = {
    outputs.Info("memory"): ("info", ("memory",)),
    outputs.ConfigChanged(("loglevel",)): ("config_changed", (("loglevel",),)),
    outputs.ConfigRewrite(): ("config_rewrite", ()),
    outputs.BgRewriteAof(): ("bgrewriteaof", ()),
    outputs.ClusterSaveConfig(): ("cluster_saveconfig", ()),
    outputs.ClusterMeet("127.0.0.1", 7712): ("cluster_meet", ("C", "127.0.0.1", 7712)),
    outputs.Shutdown("rewrite-aof"): ("shutdown_requested", ("C", "rewrite-aof")),
    outputs.Quit(): ("quit", ("C",)),
    outputs.SecurityAbort(): ("security_abort", ("C",)),
    outputs.AuthFailed(100, b"-ERR no\r\n"): ("auth_failed", ("C", 100, b"-ERR no\r\n")),
    outputs.AuthWait(200, (b"AUTH", b"pw")): ("auth_wait", ("C", 200, (b"AUTH", b"pw"))),
    outputs.DebugSleep(0.5): ("debug_sleep", (0.5,)),
    outputs.BusDrop("*", True): ("bus_drop", ("*", True)),
}


def node() -> Node:
    return Node(Config(), "a" * 40, random.Random(1), 1_700_000_000_000)


class Recording(outputs.Shell):
    """A shell that records which of its methods each request reached."""

    def __init__(self) -> None:
        self.calls: list = []
        self.answers: list = []

    def answer(self, client, data: bytes) -> None:
        self.answers.append(data)

    def __getattribute__(self, name: str):
        attr = object.__getattribute__(self, name)
        if name in {m for m, _ in KINDS.values()}:
            def record(*args):
                self.calls.append((name, tuple("C" if a is client else a for a in args)))
                # (as each method is typed: compiled, Shell.finish checks what it gets)
                return None if name == "config_changed" else b"+done\r\n"
            return record
        return attr


client = node().new_client(now=0)


def test_every_kind_is_a_frozen_dataclass_the_dispatch_knows():
    # (by name: dataclass(slots=True) leaves the class it replaced among the subclasses)
    kinds = {k.__name__ for k in ShellRequest.__subclasses__()}
    assert kinds == {type(r).__name__ for r in KINDS}, "a new kind needs its line in KINDS"
    for req in KINDS:
        assert dataclasses.is_dataclass(req) and type(req).__dataclass_params__.frozen
        for f in dataclasses.fields(req):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(req, f.name, None)


@pytest.mark.parametrize("req", list(KINDS), ids=[type(r).__name__ for r in KINDS])
def test_each_kind_reaches_its_own_method_and_its_reply_is_sent(req):
    shell = Recording()
    shell.finish(client, req)
    method, args = KINDS[req]
    assert shell.calls == [(method, args)]
    # CONFIG SET's reply is +OK once the shell's part is done; the others send theirs
    assert shell.answers == [b"+OK\r\n" if method == "config_changed" else b"+done\r\n"]


@pytest.mark.parametrize("req", list(KINDS), ids=[type(r).__name__ for r in KINDS])
def test_a_shell_that_cannot_finish_a_kind_says_so(req):
    class Bare(outputs.Shell):
        def __init__(self) -> None:
            self.answers: list = []

        def answer(self, client, data: bytes) -> None:
            self.answers.append(data)

    shell = Bare()
    shell.finish(client, req)
    if isinstance(req, outputs.ConfigChanged):  # nothing of the shell's to change
        assert shell.answers == [b"+OK\r\n"]
    else:
        assert shell.answers == [f"-ERR unsupported request {type(req).__name__}\r\n".encode()]


def test_a_closed_client_gets_no_reply():
    shell = Recording()
    c = node().new_client(now=0)
    c.closed = True
    shell.finish(c, outputs.ConfigRewrite())
    assert shell.calls == [("config_rewrite", ())] and shell.answers == []


def test_config_set_is_answered_after_the_shells_part():
    h = Harness()
    seen = []
    h.shell.config_changed = lambda names: seen.append((names, h.shell.finished.get(h.client.id)))
    assert h("CONFIG", "SET", "loglevel", "verbose") == b"OK"
    assert seen == [(("loglevel",), None)]  # no reply yet when the shell changed its part
    assert h.node.requests == []  # nothing else waits for the shell


def test_info_reads_the_facts_the_shell_hands_in():
    n = node()
    facts = HostFacts(pid=4242, rss=1 << 20, os="Plan 9", config_file="/etc/d.conf",
                      aof=(("aof_rewrite_in_progress", 1),))
    text = decode(n.info("all", facts, n.now)).decode()
    for line in ("process_id:4242", "used_memory_rss:1048576", "os:Plan 9",
                 "config_file:/etc/d.conf", "aof_rewrite_in_progress:1"):
        assert line in text.split("\r\n"), line
    assert "process_id:0" in decode(n.info("server", HostFacts(), n.now)).decode()
