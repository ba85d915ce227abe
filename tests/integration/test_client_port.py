"""The client port's directives on a real process: rename-command renames and removes
commands as in Redis; timeout closes idle clients but not blocked ones."""

from __future__ import annotations

import socket
import time

import pytest
import redis
from support import wait_for

from disquepy.codec import resp


def test_rename_command_renames_and_removes(server_factory):
    s = server_factory(conf='rename-command DEBUG ""\nrename-command CONFIG cfg-7f3a\n')
    c = s.client()
    jid = c.execute_command("ADDJOB", "q", "kept", 0)
    for cmd in (("DEBUG", "FLUSHALL"), ("debug", "flushall"), ("CONFIG", "GET", "port")):
        with pytest.raises(redis.ResponseError, match=f"unknown command '{cmd[0]}'"):
            c.execute_command(*cmd)
    assert c.execute_command("cfg-7f3a", "GET", "port") == [b"port", str(s.port).encode()]
    assert c.execute_command("CFG-7F3A", "GET", "port")
    assert c.execute_command("SHOW", jid)  # DEBUG FLUSHALL never ran
    # the cross-protocol attack that emptied a node: DEBUG is gone, nothing to run
    assert c.execute_command("QLEN", "q") == 1


def test_rename_command_of_an_unknown_command_stops_the_node(server_factory):
    s = server_factory(conf="rename-command NOSUCH other\n", start=False)
    s.start(wait=False)
    assert s.proc.wait(15) == 1
    assert "No such command in rename-command: 'nosuch'" in s.log()


def _open(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"PING\r\n")
    assert sock.recv(64) == b"+PONG\r\n"
    return sock


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(0.01)
    try:
        return sock.recv(64) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_timeout_closes_idle_clients_but_not_blocked_ones(server_factory):
    s = server_factory("--loglevel", "verbose")
    c = s.client()
    idle = [_open(s.port) for _ in range(20)]
    blocked = _open(s.port)
    blocked.sendall(resp.bulk_array([b"GETJOB", b"TIMEOUT", b"0", b"FROM", b"jobs"]))
    busy = _open(s.port)
    time.sleep(1.5)
    assert not any(_closed(x) for x in idle)  # timeout 0: never
    assert c.execute_command("CONFIG", "SET", "timeout", "1") == b"OK"
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.5:  # busy talks every 0.3 s: never idle
        busy.sendall(b"PING\r\n")
        assert busy.recv(64) == b"+PONG\r\n"
        time.sleep(0.3)
    assert all(_closed(x) for x in idle)
    assert not _closed(blocked) and not _closed(busy)
    jid = c.execute_command("ADDJOB", "jobs", "for-the-blocked-one", 0)
    blocked.settimeout(5)
    assert jid in blocked.recv(4096)
    wait_for(lambda: s.log().count("Closing idle client") >= 20, what="the log lines")
    assert c.info("clients")["connected_clients"] == 3  # c, blocked, busy
    for x in (*idle, blocked, busy):
        x.close()
