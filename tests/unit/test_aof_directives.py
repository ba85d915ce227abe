"""no-appendfsync-on-rewrite and aof-rewrite-incremental-fsync: a real AofFile and
Rewrite on real files, with the fsync calls counted (the one thing a test cannot see
from outside a process)."""

from __future__ import annotations

import os
import random
from types import SimpleNamespace

from disquepy.core.config import Config
from disquepy.core.node import Node
from disquepy.server import aof as aofmod


class Loop:
    """What AofFile and Rewrite ask of the event loop, recorded instead of run."""

    def __init__(self) -> None:
        self.soon: list = []
        self.executor: list = []

    def call_soon(self, fn, *args):
        self.soon.append((fn, args))

    def run_in_executor(self, executor, fn, *args):
        self.executor.append((fn, args))
        return SimpleNamespace(add_done_callback=lambda cb: None)


def make_aof(tmp_path, fsync: str, **config):
    cfg = Config()
    for k, v in config.items():
        setattr(cfg, k, v)
    node = Node(cfg, "a" * 40, random.Random(1), 1_700_000_000_000)
    driver = SimpleNamespace(node=node, loop=Loop(), config=cfg)
    return aofmod.AofFile(driver, str(tmp_path / "disque.aof"), fsync)


def count_fdatasync(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setattr(aofmod.os, "fdatasync", lambda fd: calls.append(fd))
    return calls


def test_always_skips_fsync_during_a_rewrite_only_when_told(tmp_path, monkeypatch):
    calls = count_fdatasync(monkeypatch)
    for skip in (False, True):
        aof = make_aof(tmp_path, "always", no_appendfsync_on_rewrite=skip)
        aof.append([b"record\r\n"])
        aof._flush()
        assert len(calls) == 1  # no rewrite: synced whatever the directive
        calls.clear()
        aof.rewrite = SimpleNamespace(buffer=[])
        aof.append([b"record\r\n"])
        aof._flush()
        assert len(calls) == (0 if skip else 1)
        assert aof.rewrite.buffer == [b"record\r\n"]  # written all the same
        calls.clear()
        aof.rewrite = None
        aof.append([b"record\r\n"])
        aof._flush()
        assert len(calls) == 1  # synced again once the rewrite is over
        calls.clear()
        os.close(aof.fd)


def test_everysec_background_sync_waits_for_the_rewrite_when_told(tmp_path):
    aof = make_aof(tmp_path, "everysec", no_appendfsync_on_rewrite=True)
    aof._last_fsync -= 2  # a second has passed
    aof.rewrite = SimpleNamespace(buffer=[])
    aof.tick()
    assert aof.driver.loop.executor == []
    aof.rewrite = None
    aof.tick()
    assert [fn for fn, _ in aof.driver.loop.executor] == [aofmod._sync_and_close]
    os.close(aof.driver.loop.executor[0][1][0])
    os.close(aof.fd)


def test_rewrite_syncs_incrementally_only_when_told(tmp_path, monkeypatch):
    monkeypatch.setattr(aofmod, "REWRITE_SYNC_BYTES", 1000)
    for incremental, syncs in ((True, 3), (False, 0)):
        aof = make_aof(tmp_path, "everysec", aof_rewrite_incremental_fsync=incremental)
        rw = aofmod.Rewrite(aof)
        for _ in range(7):
            rw.write(b"x" * 500)
        got = [args for fn, args in aof.driver.loop.executor if fn is aofmod._sync_and_close]
        assert len(got) == syncs  # at 1000, 2000 and 3000 of 3500 bytes
        assert os.path.getsize(rw.tmp) == 3500
        for (fd,) in got:
            os.close(fd)
        rw.abort()
        os.close(aof.fd)
