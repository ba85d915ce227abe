"""A real disque-server process, spoken to over real sockets."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time

import pytest
import redis
from support import ROOT, raw

ID_RE = re.compile(r"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")
REDIS_CLI = shutil.which("redis-cli")


def cli(port: int, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run([REDIS_CLI, "-p", str(port), *args], input=stdin, text=True,
                         capture_output=True, timeout=20)
    return out.stdout


# --------------------------------------------------------------------- redis-cli
@pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed (make test installs it)")
def test_readme_session_with_redis_cli(server):
    jid = cli(server.port, "ADDJOB", "queue", "body", "0").strip()
    assert ID_RE.match(jid)
    got = cli(server.port, "GETJOB", "FROM", "queue").split()
    assert got == ["queue", jid, "body"]
    assert cli(server.port, "ACKJOB", jid).strip() == "1"
    assert cli(server.port, "SHOW", jid).strip() == ""
    assert cli(server.port, "QLEN", "queue").strip() == "0"
    # interactive mode, as typed at the prompt
    out = cli(server.port, stdin="ADDJOB q2 hello 0\nQLEN q2\nQPEEK q2 1\nPING\n")
    lines = out.split()
    assert ID_RE.match(lines[0]) and lines[1] == "1" and lines[3] == lines[0]
    assert lines[-1] == "PONG"
    assert "ERR unknown command 'NOPE'" in cli(server.port, "NOPE")


# -------------------------------------------------------------------- protocol
def test_pipelining_keeps_order_and_batches(server):
    n = 2000
    req = b"".join(b"*4\r\n$6\r\nADDJOB\r\n$1\r\np\r\n$%d\r\n%d\r\n$1\r\n0\r\n"
                   % (len(str(i)), i) for i in range(n))
    req += b"*2\r\n$4\r\nQLEN\r\n$1\r\np\r\n"
    out = raw(server.port, req, until=b"\r\n:%d\r\n" % n)
    lines = out.split(b"\r\n")
    assert len([x for x in lines if x.startswith(b"+D-")]) == n
    assert lines[n] == b":%d" % n
    peek = server.client().execute_command("QPEEK", "p", n)
    assert [j[2] for j in peek] == [str(i).encode() for i in range(n)]


def test_inline_commands_like_telnet(server):
    out = raw(server.port, b'PING\r\nADDJOB "my queue" "hello world" 0\r\nQLEN "my queue"\r\n',
              until=b":1\r\n")
    assert out.startswith(b"+PONG\r\n+D-") and out.endswith(b":1\r\n")


def test_a_client_that_half_closes_gets_its_replies_then_is_closed(server):
    """As ``printf 'PING\r\n' | nc`` does: requests, then shutdown(SHUT_WR): every reply
    comes, then the close, and nothing is logged as an error. (eof_received on asyncio's
    own loop: tests/unit/test_driver.py.)"""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"PING\r\nADDJOB hq body 0\r\n")
        s.shutdown(socket.SHUT_WR)
        buf = b""
        while chunk := s.recv(1024):
            buf += chunk
    assert buf.startswith(b"+PONG\r\n+D-") and buf.endswith(b"\r\n")
    assert server.client().execute_command("QLEN", "hq") == 1
    time.sleep(0.2)
    assert "Traceback" not in server.log() and "Fatal error" not in server.log()


def test_byte_at_a_time(server):
    req = b"*4\r\n$6\r\nADDJOB\r\n$2\r\nbq\r\n$6\r\nhel\r\no\r\n$1\r\n0\r\n*2\r\n$4\r\nQLEN\r\n$2\r\nbq\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(req)):
            s.sendall(req[i:i + 1])
            time.sleep(0.001)
        buf = b""
        while not buf.endswith(b":1\r\n"):
            chunk = s.recv(1024)
            assert chunk
            buf += chunk
    body = server.client().execute_command("QPEEK", "bq", 1)[0][2]
    assert body == b"hel\r\no"


@pytest.mark.parametrize("junk,err", [
    (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1\r\n$99999999999\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n+PING\r\n", b"-ERR Protocol error: expected '$', got '+'\r\n"),
    (b'PING "unbalanced\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n"),
])
def test_protocol_errors_reply_then_close_and_server_survives(server, junk, err):
    r = server.client()
    jid = r.execute_command("ADDJOB", "safe", "x", 0)
    out = raw(server.port, b"PING\r\n" + junk + b"PING\r\n")
    assert out == b"+PONG\r\n" + err  # replied, then closed: the last PING is not run
    assert r.ping() and r.execute_command("QLEN", "safe") == 1
    assert r.execute_command("SHOW", jid) is not None


def test_huge_declared_bulk_is_refused_before_data_arrives(server_factory):
    s = server_factory("--proto-max-bulk-len", "1mb")
    out = raw(s.port, b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$2000000\r\n", timeout=3)
    assert out == b"-ERR Protocol error: invalid bulk length\r\n"
    assert s.client().ping()


def test_query_buffer_limit_closes_connection(server_factory):
    s = server_factory("--client-query-buffer-limit", "1mb")
    with socket.create_connection(("127.0.0.1", s.port), timeout=5) as sock:
        sock.sendall(b"*2\r\n$4\r\nECHO\r\n$900000\r\n")
        closed = False
        try:
            for _ in range(40):
                sock.sendall(b"x" * 65536)
                time.sleep(0.005)
        except OSError:
            closed = True
        if not closed:
            sock.settimeout(3)
            try:
                closed = sock.recv(100) == b""
            except OSError:
                closed = True
    assert closed
    assert s.client().ping()


# ------------------------------------------------------------------- blocking
def test_blocked_getjob_does_not_stall_others_nor_reorder_its_pipeline(server):
    consumer = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    consumer.sendall(b"GETJOB TIMEOUT 5000 FROM bq\r\nPING\r\n")
    time.sleep(0.2)
    r = server.client()
    assert r.ping()  # another client is served while the consumer waits
    assert r.execute_command("QSTAT", "bq")[9] == 1  # blocked: 1
    jid = r.execute_command("ADDJOB", "bq", "job", 0)
    buf = b""
    deadline = time.monotonic() + 5
    while not buf.endswith(b"+PONG\r\n") and time.monotonic() < deadline:
        buf += consumer.recv(4096)
    consumer.close()
    assert buf == b"*1\r\n*3\r\n$2\r\nbq\r\n$40\r\n" + jid + b"\r\n$3\r\njob\r\n+PONG\r\n"


def test_blocked_getjob_timeout(server):
    r = server.client()
    t = time.monotonic()
    assert r.execute_command("GETJOB", "TIMEOUT", 300, "FROM", "nothing") is None
    assert 0.25 <= time.monotonic() - t < 2


# ------------------------------------------------------------------- clients
def test_redis_py_8_resp3_handshake_and_commands(server):
    r = redis.Redis(host="127.0.0.1", port=server.port, protocol=3, client_name="worker-1",
                    socket_timeout=5)
    jid = r.execute_command("ADDJOB", "q3", "b", 0)
    assert ID_RE.match(jid.decode() if isinstance(jid, bytes) else jid)
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "none") is None
    assert r.execute_command("SHOW", "D-00000000-" + "A" * 24 + "-05a1") is None
    assert r.execute_command("CLIENT", "GETNAME") == b"worker-1"
    assert r.execute_command("ECHO", "hi") == b"hi"
    r2 = redis.Redis(host="127.0.0.1", port=server.port, db=0, socket_timeout=5)
    assert r2.execute_command("QLEN", "q3") == 1
    assert raw(server.port, b"COMMAND COUNT\r\n", until=b"\r\n").startswith(b":")


def test_pydisque_with_current_redis_py(server):
    from pydisque.client import Client

    c = Client([f"127.0.0.1:{server.port}"])
    c.connect()
    jid = c.add_job("pq", "payload", timeout=100)
    jobs = c.get_job(["pq"], timeout=1000)
    assert [(q, i, b) for q, i, b in jobs] == [(b"pq", jid, b"payload")]
    c.ack_job(jid)
    assert c.show(jid) is None
    assert c.qlen("pq") == 0
    c.add_job("pq", "later", retry=10, ttl=100, delay=1)
    assert c.qlen("pq") == 0
    assert c.hello()[0] == 1


COMPAT_PY = ROOT / ".venv-compat" / "bin" / "python"
PYDISQUE_SCRIPT = """
import sys
from pydisque.client import Client
c = Client(['127.0.0.1:%s' % sys.argv[1]])
c.connect()
jid = c.add_job('cq', 'payload', timeout=100, replicate=1, retry=5, ttl=60)
stat = c.qstat('cq', return_dict=True)
assert stat[b'len'] == 1, stat
jobs = c.get_job(['cq'], timeout=1000, withcounters=True)
q, i, body, nacks, adeliv = jobs[0]
assert (q, i, body, nacks, adeliv) == (b'cq', jid, b'payload', 0, 0), jobs
c.nack_job(jid)
assert c.get_job(['cq'], withcounters=True)[0][3] == 1
assert c.working(jid) == 5
assert c.show(jid, return_dict=True)[b'state'] == b'active'
c.fast_ack(jid)
assert c.pause('cq', kw_in=True) == b'in'
assert c.qscan()[1] == [b'cq']
print('ok', jid.decode())
"""


@pytest.mark.skipif(not COMPAT_PY.exists(), reason="make test builds .venv-compat")
def test_pydisque_with_redis_py_3(server):
    out = subprocess.run([str(COMPAT_PY), "-c", PYDISQUE_SCRIPT, str(server.port)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok D-")
    ver = subprocess.run([str(COMPAT_PY), "-c", "import redis; print(redis.__version__)"],
                         capture_output=True, text=True, timeout=30).stdout
    assert ver.startswith("3.")


# ------------------------------------------------------------- config & admin
CONF = """# disquepy test config
# a comment that must survive

port 7711
maxmemory 100mb{TRAILING}
loglevel notice
# trailing comment
""".replace("{TRAILING}", "   ")  # trailing blanks after a value are tolerated


def test_config_get_set_rewrite_keeps_comments(server_factory):
    s = server_factory(conf=CONF)
    r = s.client()
    assert r.execute_command("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"104857600"]
    assert r.execute_command("CONFIG", "SET", "maxmemory", "2gb") == b"OK"
    assert r.execute_command("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"OK"
    with pytest.raises(redis.ResponseError, match="Unsupported CONFIG parameter: nope"):
        r.execute_command("CONFIG", "SET", "nope", "1")
    with pytest.raises(redis.ResponseError, match="Invalid argument 'x' for CONFIG SET 'hz'"):
        r.execute_command("CONFIG", "SET", "hz", "x")
    assert r.execute_command("CONFIG", "REWRITE") == b"OK"
    text = s.conf_path.read_text()
    # comments and order kept; the running port (given on the command line) is written
    assert text.startswith("# disquepy test config\n# a comment that must survive\n\n"
                           f"port {s.port}\n")
    assert "maxmemory 2gb" in text and "# trailing comment" in text
    assert "aof-enqueue-jobs-once yes" in text
    assert text.index("maxmemory 2gb") < text.index("# trailing comment")


def test_config_rewrite_without_file(server):
    with pytest.raises(redis.ResponseError, match="running without a config file"):
        server.client().execute_command("CONFIG", "REWRITE")


def test_shutdown_exits_cleanly(server_factory):
    s = server_factory()
    assert raw(s.port, b"SHUTDOWN\r\n", timeout=5) == b""  # no reply: the server exits
    assert s.proc.wait(10) == 0
    assert "ready to exit" in s.log()


def test_shutdown_rejects_unknown_option(server):
    with pytest.raises(redis.ResponseError, match="syntax error"):
        server.client().execute_command("SHUTDOWN", "NOSAVE")


def test_requirepass_from_config(server_factory):
    s = server_factory("--requirepass", "pw")
    with pytest.raises(redis.AuthenticationError):
        s.client().execute_command("ADDJOB", "q", "b", 0)
    assert ID_RE.match(s.client(password="pw").execute_command("ADDJOB", "q", "b", 0).decode())
    assert ID_RE.match(s.client(password="pw", protocol=3).execute_command(
        "ADDJOB", "q", "b", 0).decode())


def test_protected_mode_refuses_public_bind_without_password(tmp_path):
    out = subprocess.run([sys.executable, "-m", "disquepy.server.main", "--port", "0",
                          "--bind", "0.0.0.0"], capture_output=True, text=True, timeout=30,
                         cwd=tmp_path, env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""})
    assert out.returncode == 1
    assert "protected-mode" in out.stdout + out.stderr


def test_bad_config_file_is_fatal(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("port 7711\nmaxmemory lots\n")
    out = subprocess.run([sys.executable, "-m", "disquepy.server.main", str(conf)],
                         capture_output=True, text=True, timeout=30,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""})
    assert out.returncode == 1
    assert "FATAL CONFIG FILE ERROR" in out.stderr and "line 2" in out.stderr
    assert out.stderr.count("FATAL CONFIG FILE ERROR") == 1


def test_info_reports_rss_and_accounted_memory(server):
    r = server.client()
    for _ in range(100):
        r.execute_command("ADDJOB", "m", "x" * 1000, 0)
    info = r.info("memory")
    assert info["used_memory"] > 100 * 1000
    assert info["used_memory_rss"] > 10 * 1024 * 1024
    assert r.info("server")["process_id"] == server.proc.pid


def test_maxmemory_oom_over_the_wire(server_factory):
    s = server_factory("--maxmemory", "2mb")
    r = s.client()
    accepted = 0
    # past 75% of maxmemory a lone node holds no new job, as C Disque
    with pytest.raises(redis.ResponseError, match="NOREPL .* I'm out of memory"):
        for _ in range(100_000):
            r.execute_command("ADDJOB", "m", "x" * 1000, 0)
            accepted += 1
    used = int(r.info("memory")["used_memory"])
    assert 0.75 * 2**21 < used < 0.8 * 2**21
    # at the limit (here lowered under what the node holds) any command that may grow
    # memory is refused; redis-py strips the OOM code into its exception class
    r.config_set("maxmemory", used - 10_000)
    for cmd in (("ADDJOB", "m", "x", 0), ("NACK", "D-00000000-0000000000000000000000000-0000")):
        with pytest.raises(redis.exceptions.OutOfMemoryError,
                           match="command not allowed when used memory > 'maxmemory'."):
            r.execute_command(*cmd)
    assert r.execute_command("QLEN", "m") == accepted
    assert r.ping()



# -------------------------------------------------------- cross-protocol attack
@pytest.mark.parametrize("first_line", [b"POST / HTTP/1.1", b"Host: 127.0.0.1:7711"])
def test_http_request_closes_the_link_before_its_body_runs(server, first_line):
    """A web page can make a browser POST to the RESP port with commands in the body;
    the node must close the link at ``POST`` or ``Host:`` and run nothing after it."""
    c = server.client()
    jid = c.execute_command("ADDJOB", "safe", "keep me", 0)
    attack = (first_line + b"\r\nContent-Type: text/plain\r\n\r\n"
              b"DEBUG FLUSHALL\r\nADDJOB evil x 0\r\nPING\r\n")
    out = raw(server.port, attack, timeout=5)
    assert out == b"", out  # closed without a reply, nothing after it ran
    assert c.execute_command("QLEN", "safe") == 1
    assert c.execute_command("SHOW", jid) is not None
    assert c.execute_command("QLEN", "evil") == 0
    assert "Possible SECURITY ATTACK detected" in server.log()


def test_http_request_after_a_valid_command_answers_it_then_closes(server):
    out = raw(server.port, b"PING\r\nGET / HTTP/1.1\r\nHost: x\r\nDEBUG FLUSHALL\r\n", timeout=5)
    # PING answered, GET is an unknown command, Host: closes before DEBUG runs
    assert out == b"+PONG\r\n-ERR unknown command 'GET'\r\n", out


def test_info_commandstats(server):
    """INFO commandstats (and INFO all) report calls and time per command, as Disque
    and Redis do; the default INFO leaves the section out; CONFIG RESETSTAT clears it."""
    c = server.client()
    c.execute_command("CONFIG", "RESETSTAT")  # the server is shared with other tests
    for _ in range(3):
        c.execute_command("ADDJOB", "q", "x", 0)
    c.execute_command("QLEN", "q")
    raw_text = raw(server.port, b"INFO commandstats\r\n", until=b"\r\n\r\n")
    assert b"# Commandstats\r\ncmdstat_addjob:calls=3,usec=" in raw_text
    stats = c.info("commandstats")
    assert stats["cmdstat_addjob"]["calls"] == 3
    assert stats["cmdstat_addjob"]["usec_per_call"] > 0
    assert stats["cmdstat_qlen"]["calls"] == 1
    assert "cmdstat_addjob" in c.info("all")
    assert not any(k.startswith("cmdstat_") for k in c.info())
    c.execute_command("CONFIG", "RESETSTAT")
    stats = c.info("commandstats")
    assert "cmdstat_addjob" not in stats and "cmdstat_config" not in stats
