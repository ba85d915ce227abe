"""Directives that Disque documents and disquepy once parsed and ignored, now doing what
disque.conf says, on real processes: ``tcp-keepalive`` on client connections,
``daemonize`` with its ``pidfile``."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from support import ROOT, SERVER, Server, free_port, raw, wait_for


def keepalive_timers(port: int) -> list[str]:
    """The server side of each established client connection on ``port``, as ss -o
    would name its timer ("timer:(keepalive," when a keepalive probe is due), read from
    /proc/net/tcp (field ``tr``: 1 retransmission, 2 keepalive)."""
    out = []
    with open("/proc/net/tcp", encoding="ascii") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, state, timer = fields[1], fields[3], int(fields[5].split(":")[0], 16)
            if state == "01" and int(local.split(":")[1], 16) == port:
                out.append({0: "timer:(off,", 1: "timer:(on,",
                            2: "timer:(keepalive,"}.get(timer, f"timer:({timer},"))
    return out


@pytest.mark.timeout(60)
def test_tcp_keepalive_probes_idle_client_connections(tmp_path):
    s = Server(tmp_path, "--tcp-keepalive", "60").start()
    try:
        c = s.client()
        assert c.ping()
        # (until the reply is acknowledged ss shows the retransmission timer instead)
        wait_for(lambda: any("timer:(keepalive," in ln for ln in keepalive_timers(s.port)),
                 what="the keepalive timer")  # the first probe due within 60 s
        assert len(keepalive_timers(s.port)) == 1
        # CONFIG SET: connections made after it have no keepalive
        assert c.execute_command("CONFIG", "SET", "tcp-keepalive", "0") == b"OK"
        c2 = s.client()
        assert c2.ping()
        time.sleep(0.5)  # both replies acknowledged
        conns = keepalive_timers(s.port)
        assert len(conns) == 2
        assert sum("keepalive" in ln for ln in conns) == 1, conns
    finally:
        s.kill()


@pytest.mark.timeout(60)
def test_daemonize_returns_at_once_and_keeps_a_pidfile(tmp_path):
    """The command returns 0 while the node runs on in the background; the pid file
    (relative: inside dir) names the node's process and goes with it."""
    port = free_port()
    (tmp_path / "d").mkdir()
    t0 = time.monotonic()
    r = subprocess.run([*SERVER, "--port", str(port), "--daemonize", "yes", "--dir",
                        str(tmp_path / "d"), "--pidfile", "node.pid", "--logfile", "log.txt"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
    assert time.monotonic() - t0 < 20
    pidfile = tmp_path / "d" / "node.pid"
    def pong() -> bool:
        try:
            return raw(port, b"PING\r\n", timeout=1, until=b"\r\n") == b"+PONG\r\n"
        except OSError:
            return False

    wait_for(pong, what="the daemon to answer")
    pid = int(pidfile.read_text())
    try:
        info = raw(port, b"INFO server\r\n", timeout=2, until=b"tcp_port")
        assert f"process_id:{pid}".encode() in info
        assert os.getsid(pid) == pid  # a session of its own: the terminal can go
        assert "ready to accept connections" in (tmp_path / "d" / "log.txt").read_text()
        assert raw(port, b"SHUTDOWN\r\n", timeout=5) == b""  # closes without a reply
        wait_for(lambda: not pidfile.exists(), what="the pid file removed at exit")
        wait_for(lambda: not running(pid), what="the daemon gone")
    finally:
        if running(pid):
            os.kill(pid, 9)


def running(pid: int) -> bool:
    """``pid`` exists and is no zombie (the daemon's reaper is whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(60)
def test_slowlog_keeps_the_commands_slower_than_the_threshold(tmp_path):
    """slowlog-log-slower-than and slowlog-max-len were parsed and ignored, with no
    SLOWLOG command: now SLOWLOG GET|LEN|RESET answer as Disque's."""
    s = Server(tmp_path, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "3").start()
    try:
        c = s.client()
        t0 = int(time.time())
        jid = c.execute_command("ADDJOB", "q", "x" * 200, 0)
        entries = c.execute_command("SLOWLOG", "GET")
        newest = entries[0]
        assert newest[3] == [b"ADDJOB", b"q", b"x" * 128 + b"... (72 more bytes)", b"0"]
        assert newest[2] >= 0 and abs(newest[1] - t0) <= 2
        assert c.execute_command("DELJOB", *[jid] * 40) == 1  # its arguments cut at 32
        many = c.execute_command("SLOWLOG", "GET", 1)[0][3]
        assert len(many) == 32 and many[-1] == b"... (10 more arguments)"
        assert many[:2] == [b"DELJOB", jid]
        assert c.execute_command("SLOWLOG", "LEN") == 3  # slowlog-max-len 3
        ids = [e[0] for e in c.execute_command("SLOWLOG", "GET", -1)]
        assert ids == sorted(ids, reverse=True) and len(ids) == 3
        assert c.execute_command("SLOWLOG", "RESET") == b"OK"
        assert c.execute_command("SLOWLOG", "LEN") == 1  # the SLOWLOG LEN itself
        with pytest.raises(Exception, match="Unknown SLOWLOG subcommand"):
            c.execute_command("SLOWLOG", "NOPE")
        # a negative threshold logs nothing; a high one only slower commands
        c.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "-1")
        c.execute_command("SLOWLOG", "RESET")
        c.execute_command("ADDJOB", "q", "y", 0)
        assert c.execute_command("SLOWLOG", "LEN") == 0
        c.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "10000000")
        c.execute_command("ADDJOB", "q", "y", 0)
        assert c.execute_command("SLOWLOG", "LEN") == 0
    finally:
        s.kill()


@pytest.mark.timeout(60)
def test_unixsocket_serves_clients_with_its_permissions(tmp_path):
    """unixsocket (relative: inside dir) and unixsocketperm were parsed and ignored."""
    import redis

    d = tmp_path / "d"
    d.mkdir()
    s = Server(tmp_path, "--dir", str(d), "--unixsocket", "node.sock",
               "--unixsocketperm", "700").start()
    try:
        path = d / "node.sock"
        assert oct(path.stat().st_mode & 0o777) == "0o700"
        c = redis.Redis(unix_socket_path=str(path), protocol=2, socket_timeout=10)
        jid = c.execute_command("ADDJOB", "q", "over the unix socket", 0)
        assert s.client().execute_command("QLEN", "q") == 1  # the same node over TCP
        assert c.execute_command("GETJOB", "FROM", "q")[0][1] == jid
        assert "ready to accept connections at node.sock" in s.log()
        c.close()
        s.kill()  # kill -9 leaves the socket file: the next start replaces it
        assert path.exists()
        s.start()
        assert redis.Redis(unix_socket_path=str(path), protocol=2).ping()
        s.stop()  # SIGTERM: the socket file goes with the node
        assert not path.exists()
    finally:
        s.kill()


@pytest.mark.timeout(60)
def test_latency_monitor_records_commands_over_the_threshold(tmp_path):
    """latency-monitor-threshold was parsed and ignored, with no LATENCY command."""
    s = Server(tmp_path).start()  # threshold 0: off
    try:
        c = s.client()
        p = c.pipeline(transaction=False)
        for i in range(40000):
            p.execute_command("ADDJOB", "q", f"job {i}", 0)
        p.execute()

        def slow():  # a reply of 40,000 jobs: well over 1 ms to build, compiled too
            assert len(c.execute_command("QPEEK", "q", 40000)) == 40000

        slow()
        assert c.execute_command("LATENCY", "LATEST") == []
        assert c.execute_command("CONFIG", "SET", "latency-monitor-threshold", "1") == b"OK"
        t0 = int(time.time())
        slow()
        [(event, ts, latest, top)] = c.execute_command("LATENCY", "LATEST")
        assert event == b"command" and abs(ts - t0) <= 2 and 1 <= latest <= top
        [(ts2, ms)] = c.execute_command("LATENCY", "HISTORY", "command")
        assert ts2 == ts and ms == latest
        assert c.execute_command("LATENCY", "HISTORY", "nothing") == []
        assert c.execute_command("LATENCY", "RESET") == 1
        assert c.execute_command("LATENCY", "LATEST") == []
        with pytest.raises(Exception, match="syntax error"):
            c.execute_command("LATENCY", "NOPE")
    finally:
        s.kill()


@pytest.mark.timeout(60)
def test_watchdog_logs_where_the_loop_is_stuck(tmp_path):
    """watchdog-period was parsed and ignored: now a loop stuck longer than the period
    logs the running code's stack, in one line; 0 (the default) logs nothing."""
    s = Server(tmp_path).start()
    try:
        c = s.client()
        assert c.execute_command("DEBUG", "SLEEP", "0.5") == b"OK"
        assert "WATCHDOG" not in s.log()
        assert c.execute_command("CONFIG", "SET", "watchdog-period", "200") == b"OK"
        time.sleep(0.3)  # the cron arms it
        assert c.execute_command("DEBUG", "SLEEP", "0.6") == b"OK"
        wait_for(lambda: "WATCHDOG TIMER EXPIRED" in s.log(), what="the watchdog line")
        [line] = [ln for ln in s.log().splitlines() if "WATCHDOG" in ln]
        assert "over 200 ms" in line and "time.sleep(seconds)" in line, line
        assert c.execute_command("CONFIG", "SET", "watchdog-period", "0") == b"OK"
        time.sleep(0.3)
        assert c.execute_command("DEBUG", "SLEEP", "0.6") == b"OK"
        assert c.ping() and s.log().count("WATCHDOG") == 1
    finally:
        s.kill()


@pytest.mark.timeout(60)
def test_syslog_gets_every_line_with_ident_and_facility(tmp_path):
    """syslog-enabled, syslog-ident and syslog-facility were parsed and ignored."""
    import socket

    path = tmp_path / "syslog.sock"
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(path))
    sink.settimeout(10)
    s = Server(tmp_path, "--syslog-enabled", "yes", "--syslog-ident", "dq-test",
               "--syslog-facility", "local3",
               env={"DISQUEPY_SYSLOG_SOCKET": str(path)}).start()
    try:
        got = []
        while not any(b"ready to accept connections" in m for m in got):
            got.append(sink.recv(65536))
        pid = s.proc.pid
        # <priority>: facility local3 (19) * 8 + severity info (6) = 158
        ready = next(m for m in got if b"ready to accept" in m)
        assert ready.startswith(b"<158>dq-test[%d]: " % pid), ready
        assert "ready to accept connections" in s.log()  # the log file still has it
    finally:
        s.kill()
        sink.close()
    # nothing listening (as C's openlog: no error): the node says so in its log and
    # serves; a syslog that comes up later gets the lines from then on
    later = tmp_path / "later.sock"
    bad = Server(tmp_path / "bad", "--syslog-enabled", "yes",
                 env={"DISQUEPY_SYSLOG_SOCKET": str(later)}).start()
    try:
        assert f"nothing listens at {later}" in bad.log()
        sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sink.bind(str(later))
        sink.settimeout(10)
        assert bad.client().ping()
        raw(bad.port, b"SHUTDOWN\r\n", timeout=5)  # logs "User requested shutdown..."
        lines = [sink.recv(65536)]  # (startup lines may still be on their way first)
        while b"User requested shutdown" not in lines[-1] and len(lines) < 50:
            lines.append(sink.recv(65536))
        assert b"User requested shutdown" in lines[-1], lines
    finally:
        bad.kill()
        sink.close()
