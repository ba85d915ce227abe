"""client-output-buffer-limit on real processes: a client that never reads its
replies is closed at the hard limit, or after the soft limit held for its seconds,
and the node stays healthy. Disque enforces it the same way."""

from __future__ import annotations

import socket
import time

import pytest
from support import wait_for

BODY = 300_000  # bytes per SHOW reply (about)
SHOWS = 40  # pipelined at once: ~12 MB of replies, far beyond the kernel's buffers


def _flood(port: int, jid: bytes) -> socket.socket:
    """A client that pipelines many SHOWs and reads nothing."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"SHOW %s\r\n" % jid * SHOWS)
    return s


def _drain(s: socket.socket, timeout: float = 20.0) -> tuple[int, bool]:
    """Read until the server closes or the time is up: (bytes read, closed)."""
    s.settimeout(2)
    n = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(1 << 20)
            except TimeoutError:
                return n, False
            if not chunk:
                return n, True
            n += len(chunk)
    except ConnectionResetError:
        return n, True
    finally:
        s.close()
    return n, False


@pytest.mark.timeout(90)
@pytest.mark.parametrize("limit, closed", [
    (None, False),                 # the default: no limit, every reply arrives
    ("normal 1mb 0 0", True),      # hard limit
    ("normal 0 256kb 1", True),    # soft limit held for more than 1 s
], ids=["none", "hard", "soft"])
def test_client_that_never_reads_is_closed(server_factory, limit, closed):
    args = ("--client-output-buffer-limit", *limit.split()) if limit else ()
    srv = server_factory(*args)
    c = srv.client()
    jid = c.execute_command("ADDJOB", "q", "x" * BODY, 0)
    s = _flood(srv.port, jid)
    time.sleep(2.5)  # longer than the soft limit's 1 s
    n, was_closed = _drain(s)
    assert was_closed == closed
    if closed:
        assert n < BODY * SHOWS // 2, n  # its pending replies were dropped
        assert "closed for overcoming of output buffer limits" in srv.log()
    else:
        assert n > BODY * SHOWS, n  # everything arrived (it was read, at last)
        assert "output buffer limits" not in srv.log()
    # the node is healthy: others are served and the flooder is gone
    assert c.ping()
    assert c.execute_command("QLEN", "q") == 1
    wait_for(lambda: c.info("clients")["connected_clients"] == 1, what="one client left")


@pytest.mark.timeout(60)
def test_config_set_output_limit_applies_at_once(server_factory):
    srv = server_factory()
    c = srv.client()
    assert c.execute_command("CONFIG", "SET", "client-output-buffer-limit",
                             "normal 1048576 0 0") == b"OK"
    jid = c.execute_command("ADDJOB", "q", "x" * BODY, 0)
    s = _flood(srv.port, jid)
    # read only once the node has acted: a reader this fast could otherwise keep
    # the node's output buffer under the limit, and nothing would be closed
    wait_for(lambda: "output buffer limits" in srv.log(), what="the log line")
    n, was_closed = _drain(s)
    assert was_closed and n < BODY * SHOWS // 2, (n, was_closed)
    assert c.execute_command("CONFIG", "SET", "client-output-buffer-limit",
                             "normal 0 0 0") == b"OK"
    n, was_closed = _drain(_flood(srv.port, jid))
    assert not was_closed and n > BODY * SHOWS
