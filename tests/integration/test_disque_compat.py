"""What a Disque client or a Redis tool sees, as C Disque 1.0-rc1 shows it (issue #29).

Each test was written by sending the same commands to the C binary
(``../shared/anchors/disque/disque-server``) and to a disquepy node and comparing the
replies; the C replies are written down here, so no test needs the binary. Where
disquepy deliberately differs, the README's compatibility table says so and why, and
the test checks our side of it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time

import pytest
import redis
from support import raw, wait_for

NOREPL_WHY = ("NOREPL Not enough reachable nodes for the requested replication level, "
              "since I'm unable to hold a copy of the message for the following reason: ")


class Conn:
    """One raw connection: send bytes, read what came within a short time."""

    def __init__(self, port: int, timeout: float = 0.4) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        host, local_port = self.sock.getsockname()
        self.addr = f"{host}:{local_port}"

    def read(self, timeout: float | None = None) -> bytes:
        if timeout is not None:
            self.sock.settimeout(timeout)
        out = b""
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    return out + b"<EOF>"
                out += chunk
        except TimeoutError:
            return out

    def ask(self, data: bytes, timeout: float | None = None) -> bytes:
        self.sock.sendall(data)
        return self.read(timeout)

    def close(self) -> None:
        self.sock.close()


def show(c, jid) -> dict:
    r = c.execute_command("SHOW", jid)
    return dict(zip(r[::2], r[1::2], strict=True))


# ------------------------------------------------------- 1. federation back-off
@pytest.mark.timeout(60)
def test_short_getjobs_elsewhere_do_not_pull_a_job_within_the_back_off(make_cluster):
    """C keeps the NEEDJOBS broadcast back-off per queue: after node 2's first GETJOB
    broadcast, a job added with REPLICATE 1 on node 1 stays there for node 2's next
    short GETJOBs (C: 10 of 10), and a consumer waiting on node 2 gets it with the
    next broadcast, 4 s after the first (C: 4.06 s)."""
    _, (c1, c2) = make_cluster(2)
    t0 = time.monotonic()
    assert c2.execute_command("GETJOB", "TIMEOUT", 100, "FROM", "fq") is None
    jid = c1.execute_command("ADDJOB", "fq", "x", 0, "REPLICATE", 1)
    for _ in range(10):
        assert c2.execute_command("GETJOB", "TIMEOUT", 1, "FROM", "fq") is None
        assert c1.execute_command("QLEN", "fq") == 1
    got = c2.execute_command("GETJOB", "TIMEOUT", 10_000, "FROM", "fq")
    waited = time.monotonic() - t0
    assert got == [[b"fq", jid, b"x"]]
    assert 3.0 < waited < 6.0, waited


# ------------------------------------------------------------ 2. INFO sections
def test_info_sections_and_fields_as_disque(server):
    c = server.client()
    text_of = server.client()
    text_of.response_callbacks.pop("INFO", None)  # the text as sent

    def titles(*section):
        text = text_of.execute_command("INFO", *section).decode()
        return re.findall(r"^# (\w+)", text, re.M)

    # C Disque's default INFO; our consumer groups' section is optional, as Redis's are
    assert titles() == ["Server", "Clients", "Memory", "Jobs", "Queues", "Persistence",
                        "Stats", "CPU"]
    assert titles("groups") == ["Groups"]
    assert titles("all")[-3:] == ["CPU", "Groups", "Commandstats"]
    persistence = c.info("persistence")
    assert (persistence["aof_rewrite_scheduled"], persistence["aof_current_rewrite_time_sec"]) \
        == (0, -1)
    keys = list(c.info("stats"))
    at = keys.index("total_net_input_bytes")
    assert keys[at:at + 5] == ["total_net_input_bytes", "total_net_output_bytes",
                               "instantaneous_input_kbps", "instantaneous_output_kbps",
                               "rejected_connections"]


@pytest.mark.timeout(60)
def test_info_counts_network_bytes_and_their_rate(server_factory):
    s = server_factory()
    c = s.client()
    before = c.info("stats")
    body = "x" * 100_000
    for _ in range(20):
        c.execute_command("ECHO", body)
    after = c.info("stats")
    assert after["total_net_input_bytes"] - before["total_net_input_bytes"] > 2_000_000
    assert after["total_net_output_bytes"] - before["total_net_output_bytes"] > 2_000_000

    def rates():
        st = c.info("stats")
        return st["instantaneous_input_kbps"] > 100 and st["instantaneous_output_kbps"] > 100
    # sampled every 100 ms over the last ~1.6 s, as C's
    wait_for(lambda: [c.execute_command("ECHO", body) for _ in range(5)] and rates(),
             timeout=10, what="instantaneous kbps")
    assert c.execute_command("CONFIG", "RESETSTAT") == b"OK"
    st = c.info("stats")  # C: the INFO itself is the one command since
    assert st["total_commands_processed"] == 1
    assert st["total_net_input_bytes"] < 100


# ------------------------------------------- 3. producer gone during ADDJOB
@pytest.mark.timeout(90)
def test_a_producer_gone_before_its_addjob_replied_takes_the_job_away(make_cluster):
    """C deletes the job from the cluster: the producer was never told its ID and may
    add it again, so keeping it would deliver a duplicate later."""
    servers, clients = make_cluster(3)
    c1 = clients[0]
    for s in servers[1:]:  # the copies cannot be confirmed while these are stopped
        os.kill(s.proc.pid, signal.SIGSTOP)
    try:
        producer = Conn(servers[0].port)
        producer.sock.sendall(b"ADDJOB dq body 10000 REPLICATE 3\r\n")
        jids = wait_for(lambda: c1.execute_command("JSCAN", "BUSYLOOP")[1],
                        what="the job waiting for its copies")
        assert show(c1, jids[0])[b"state"] == b"wait-repl"
        producer.close()
        wait_for(lambda: c1.execute_command("JSCAN", "BUSYLOOP")[1] == [],
                 what="the job deleted")
    finally:
        for s in servers[1:]:
            os.kill(s.proc.pid, signal.SIGCONT)
    time.sleep(1.5)  # the stopped nodes handle the REPLJOB, then the DELJOB
    for c in clients:
        assert c.execute_command("JSCAN", "BUSYLOOP")[1] == []
        assert c.execute_command("QLEN", "dq") == 0


# ------------------------------------------------------------- 4. AUTH pass
def test_a_wrong_password_logs_the_connection_out(server_factory):
    """Disque's one-argument AUTH: a failed one after a good one leaves the connection
    unauthenticated. ``AUTH user pass`` keeps Redis 6's rule (a failure changes
    nothing): see the README's compatibility table."""
    s = server_factory(conf="requirepass pw\nuser ops on >opspw +@all\n")
    c = Conn(s.port, timeout=3)
    assert c.ask(b"PING\r\n") == b"-NOAUTH Authentication required.\r\n"
    assert c.ask(b"AUTH pw\r\n") == b"+OK\r\n"
    assert c.ask(b"PING\r\n") == b"+PONG\r\n"
    assert c.ask(b"AUTH wrong\r\n", timeout=3) == b"-ERR invalid password\r\n"
    assert c.ask(b"PING\r\n") == b"-NOAUTH Authentication required.\r\n"
    assert c.ask(b"HELLO\r\n") == b"-NOAUTH Authentication required.\r\n"
    assert c.ask(b"AUTH ops opspw\r\n") == b"+OK\r\n"
    assert c.ask(b"AUTH ops wrong\r\n", timeout=3).startswith(b"-WRONGPASS")
    assert c.ask(b"PING\r\n") == b"+PONG\r\n"


# ------------------------------------------------- 5. SHOW nodes-confirmed
def test_show_forgets_who_confirmed_once_the_job_is_replicated(make_cluster):
    """C empties nodes-confirmed once the job leaves wait-repl (its copies: always)."""
    _, clients = make_cluster(3)
    c1 = clients[0]
    jid = c1.execute_command("ADDJOB", "sq", "body", 0, "REPLICATE", 2)
    s1 = show(c1, jid)
    assert s1[b"state"] == b"queued" and len(s1[b"nodes-delivered"]) == 2
    assert s1[b"nodes-confirmed"] == []
    copies = [show(c, jid) for c in clients[1:] if c.execute_command("SHOW", jid)]
    assert len(copies) == 1 and copies[0][b"nodes-confirmed"] == []
    jid = c1.execute_command("ADDJOB", "sq", "body", 0, "REPLICATE", 3, "ASYNC")
    wait_for(lambda: all(c.execute_command("SHOW", jid) for c in clients),
             what="the async copies")
    assert [show(c, jid)[b"nodes-confirmed"] for c in clients] == [[], [], []]


# --------------------------------------------------- 6. a lone node refusing
def test_a_lone_leaving_node_refuses_new_jobs(server_factory):
    c = server_factory().client()
    jid = c.execute_command("ADDJOB", "q", "b", 0)
    assert c.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command("ADDJOB", "q", "b", 0)
    assert str(e.value) == NOREPL_WHY + "I'm leaving the cluster"
    with pytest.raises(redis.ResponseError, match="^LEAVING This node is leaving"):
        c.execute_command("GETJOB", "TIMEOUT", 100, "FROM", "empty")
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "q") == [[b"q", jid, b"b"]]
    assert c.execute_command("CLUSTER", "LEAVING", "no") == b"OK"
    assert c.execute_command("ADDJOB", "q", "b", 0)


def test_a_lone_node_short_of_memory_refuses_new_jobs(server_factory):
    """C: past 75% of maxmemory a node holds no new job, a lone one has no other node
    to hold it: NOREPL out of memory (C refused at 3143768 bytes of 4 MB)."""
    c = server_factory("--maxmemory", "4mb").client()
    added = 0
    with pytest.raises(redis.ResponseError) as e:
        for _ in range(1000):
            c.execute_command("ADDJOB", "q", "x" * 10_000, 0)
            added += 1
    assert str(e.value) == NOREPL_WHY + "I'm out of memory"
    used = c.info("memory")["used_memory"]
    assert 0.75 * 4 * 2**20 < used < 0.78 * 4 * 2**20
    assert c.execute_command("QLEN", "q") == added


# ----------------------------------------------------------------- 7. MONITOR
MONITOR_LINE = re.compile(rb'^\+(\d+)\.(\d{6}) \[([0-9.]+:\d+)\] (.*)$')


def test_monitor_streams_commands_in_disques_format(server):
    m1, m2, c = Conn(server.port), Conn(server.port), Conn(server.port)
    assert m1.ask(b"MONITOR\r\n") == b"+OK\r\n"
    assert m2.ask(b"MONITOR\r\n") == b"+OK\r\n"
    assert m2.read() == b""  # its own MONITOR is not in its feed...
    line = m1.read()  # ...but in the feed of the monitors before it
    assert line == b'+%s [%s] "MONITOR"\r\n' % (MONITOR_LINE.match(line).group(1) + b"."
                                                   + MONITOR_LINE.match(line).group(2),
                                                   m2.addr.encode())
    t0 = time.time()
    c.ask(b'PING\r\nNOSUCH x\r\nADDJOB q "a\\x01\\"b\\\\" 0\r\nAUTH secret\r\n'
          b"GETJOB foo\r\nCONFIG GET port\r\nQUIT\r\n")
    lines = m1.read().splitlines()
    assert m2.read().splitlines() == lines
    parsed = [MONITOR_LINE.match(x).groups() for x in lines]
    assert all(abs(int(sec) - t0) <= 2 and addr == c.addr.encode()
               for sec, _, addr, _ in parsed)
    # as sent (no unknown command, no QUIT), quoted like redis-cli; AUTH redacted
    assert [p[3] for p in parsed] == [
        b'"PING"', b'"ADDJOB" "q" "a\\x01\\"b\\\\" "0"', b'"AUTH" "(redacted)"',
        b'"GETJOB" "foo"', b'"CONFIG" "GET" "port"']
    # a monitor may run commands; a second MONITOR gets no reply
    assert b"+PONG\r\n" in m1.ask(b"PING\r\n")
    again = m1.ask(b"MONITOR\r\n")  # its own feed line, no reply
    assert MONITOR_LINE.match(again).groups()[2:] == (m1.addr.encode(), b'"MONITOR"\r')
    assert again.count(b"\r\n") == 1
    for x in (m1, m2, c):
        x.close()


@pytest.mark.timeout(90)
def test_a_monitor_that_does_not_read_is_closed_not_buffered(server_factory):
    """A slow monitor cannot grow the node's memory without bound: past 32 MB held
    (Redis's limit for its pubsub clients) it is closed, with a log line."""
    s = server_factory()
    m = socket.create_connection(("127.0.0.1", s.port))
    m.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    m.sendall(b"MONITOR\r\n")
    c = s.client()
    wait_for(lambda: "flags=O" in c.execute_command("CLIENT", "LIST").decode(),
             what="the monitor")
    body = "y" * (1 << 20)
    for _ in range(80):  # 80 MB of feed; the monitor reads none of it
        c.execute_command("ECHO", body)
    wait_for(lambda: "closed for overcoming of output buffer limits" in s.log(),
             what="the log line")
    assert "flags=O" not in c.execute_command("CLIENT", "LIST").decode()
    assert c.ping()
    m.close()


# --------------------------------------------------------------- CLIENT ...
def test_client_list_fields_as_disque(server):
    c = server.client()
    c.execute_command("PING")
    line = c.execute_command("CLIENT", "LIST").decode().splitlines()[-1]
    keys = [kv.split("=", 1)[0] for kv in line.split(" ")]
    # C Disque's fields, in its order, then ours
    assert keys == ["id", "addr", "fd", "name", "age", "idle", "flags", "qbuf", "qbuf-free",
                    "obl", "oll", "omem", "events", "cmd", "user", "lib-name", "lib-ver"]
    fields = dict(kv.split("=", 1) for kv in line.split(" "))
    assert fields["cmd"] == "client" and fields["flags"] == "N" and int(fields["fd"]) > 2
    assert fields["events"] == "r" and fields["omem"] == "0"


def test_client_kill_as_disque(server):
    admin = Conn(server.port)
    for cmd, want in [
        (b"CLIENT KILL", b"-ERR syntax error"),
        (b"CLIENT KILL 1.2.3.4:5", b"-ERR No such client"),
        (b"CLIENT KILL a b c", b"-ERR syntax error"),
        (b"CLIENT KILL ID x", b"-ERR value is not an integer or out of range"),
        (b"CLIENT KILL ID 999999", b":0"),
        (b"CLIENT KILL ADDR 1.1.1.1:1", b":0"),
        (b"CLIENT KILL TYPE master", b"-ERR Unknown client type 'master'"),
        (b"CLIENT KILL SKIPME maybe", b"-ERR syntax error"),
        (b"CLIENT KILL LADDR 1.1.1.1:1", b"-ERR syntax error"),
    ]:
        assert admin.ask(cmd + b"\r\n") == want + b"\r\n", cmd
    victim = Conn(server.port)
    victim.ask(b"CLIENT SETNAME victim\r\n")
    assert admin.ask(b"CLIENT KILL %s\r\n" % victim.addr.encode()) == b"+OK\r\n"
    assert victim.read(timeout=2) == b"<EOF>"
    victim = Conn(server.port)
    victim.ask(b"PING\r\n")
    assert admin.ask(b"CLIENT KILL ADDR %s\r\n" % victim.addr.encode()) == b":1\r\n"
    assert victim.read(timeout=2) == b"<EOF>"
    victim = Conn(server.port)
    victim.ask(b"PING\r\n")
    vid = int(re.search(rb"id=(\d+) addr=" + victim.addr.encode(),
                        admin.ask(b"CLIENT LIST\r\n")).group(1))
    assert admin.ask(b"CLIENT KILL ID %d\r\n" % vid) == b":1\r\n"
    assert victim.read(timeout=2) == b"<EOF>"
    # USER (Redis 6): everyone here is the default user; SKIPME yes by default
    others = [Conn(server.port) for _ in range(2)]
    for o in others:
        o.ask(b"PING\r\n")
    n = int(admin.ask(b"CLIENT KILL USER default\r\n")[1:-2])
    assert n >= 2 and all(o.read(timeout=2) == b"<EOF>" for o in others)
    assert admin.ask(b"PING\r\n") == b"+PONG\r\n"
    # killing itself: the reply, then the close; nothing of its pipeline after it runs
    assert admin.ask(b"CLIENT KILL %s\r\nPING\r\n" % admin.addr.encode(), timeout=2) \
        == b"+OK\r\n<EOF>"
    me = Conn(server.port)
    assert me.ask(b"CLIENT KILL ADDR %s SKIPME no\r\nPING\r\n" % me.addr.encode(),
                  timeout=2) == b":1\r\n<EOF>"


@pytest.mark.timeout(60)
def test_client_pause_holds_every_clients_commands(server_factory):
    s = server_factory()
    a, b = Conn(s.port, timeout=5), Conn(s.port, timeout=5)

    def timed(conn, data):
        t = time.monotonic()
        conn.sock.sendall(data)
        reply = conn.sock.recv(1000)
        return reply, time.monotonic() - t

    for cmd, want in [(b"CLIENT PAUSE x", b"-ERR timeout is not an integer or out of range"),
                      (b"CLIENT PAUSE -1", b"-ERR timeout is negative"),
                      (b"CLIENT PAUSE 0", b"+OK"),
                      (b"CLIENT PAUSE 10 WRITE", b"-ERR Syntax error, try CLIENT (LIST | KILL "
                                                 b"ip:port | GETNAME | SETNAME "
                                                 b"connection-name)")]:
        assert a.ask(cmd + b"\r\n") == want + b"\r\n", cmd
    reply, took = timed(a, b"CLIENT PAUSE 1000\r\n")
    assert reply == b"+OK\r\n" and took < 0.5
    reply, took = timed(b, b"PING\r\n")  # another client waits
    assert reply == b"+PONG\r\n" and 0.7 < took < 2.5
    assert timed(a, b"CLIENT PAUSE 1000\r\n")[0] == b"+OK\r\n"
    reply, took = timed(a, b"PING\r\n")  # the pausing one too
    assert reply == b"+PONG\r\n" and 0.7 < took < 2.5
    # what follows CLIENT PAUSE in the same pipeline waits as well
    a.sock.sendall(b"CLIENT PAUSE 1000\r\nPING\r\n")
    t = time.monotonic()
    assert a.sock.recv(100) == b"+OK\r\n"
    assert a.sock.recv(100) == b"+PONG\r\n" and time.monotonic() - t > 0.7
    # UNPAUSE (Redis 6.2) ends it at once
    a.ask(b"CLIENT PAUSE 5000\r\n")
    b.sock.sendall(b"PING\r\n")
    time.sleep(0.3)
    c = s.client()  # a new connection is held too...
    assert a.ask(b"CLIENT UNPAUSE\r\n") == b"+OK\r\n"  # (a's own command waits? no:)
    assert b.read(timeout=1) == b"+PONG\r\n"
    assert c.ping()


def test_client_reply_as_disque(server):
    c = Conn(server.port)
    for cmd, want in [
        (b"CLIENT REPLY", b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
                          b"SETNAME connection-name)\r\n"),
        (b"CLIENT REPLY FOO", b"-ERR syntax error\r\n"),
        (b"CLIENT REPLY ON", b"+OK\r\n"),
        (b"CLIENT REPLY SKIP\r\nPING\r\nPING 2", b"$1\r\n2\r\n"),
        (b"CLIENT REPLY OFF\r\nPING\r\nCLIENT REPLY SKIP\r\nPING 3\r\nCLIENT REPLY ON\r\n"
         b"PING 4", b"+OK\r\n$1\r\n4\r\n"),
        (b"CLIENT REPLY OFF\r\nGETJOB NOHANG FROM x\r\nNOSUCH\r\nCLIENT REPLY ON", b"+OK\r\n"),
    ]:
        assert c.ask(cmd + b"\r\n") == want, cmd


# -------------------------------------------------- LATENCY, DEBUG, COMMAND
def test_latency_doctor_and_graph(server_factory):
    s = server_factory()
    c = s.client()
    assert c.execute_command("LATENCY", "DOCTOR") == (
        b"I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Disque "
        b'instance. You may use "CONFIG SET latency-monitor-threshold <milliseconds>." in '
        b"order to enable it. If we weren't in a deep space mission I'd suggest to take a "
        b"look at http://disque.io/topics/latency-monitor.\n")
    c.config_set("latency-monitor-threshold", 1)
    assert c.execute_command("LATENCY", "DOCTOR") == (
        b"Dave, no latency spike was observed during the lifetime of this Disque instance, "
        b"not in the slightest bit. I honestly think you ought to sit down calmly, take a "
        b"stress pill, and think things over.\n")
    with pytest.raises(redis.ResponseError, match="^No samples available for event 'command'$"):
        c.execute_command("LATENCY", "GRAPH", "command")
    for args in (["GRAPH"], ["GRAPH", "a", "b"], ["DOCTOR", "x"]):
        with pytest.raises(redis.ResponseError, match="^syntax error$"):
            c.execute_command("LATENCY", *args)
    c.config_set("latency-monitor-threshold", 0)
    p = c.pipeline(transaction=False)
    for i in range(40_000):
        p.execute_command("ADDJOB", "q", f"job {i}", 0)
    p.execute()
    c.config_set("latency-monitor-threshold", 1)
    c.execute_command("QPEEK", "q", 40_000)  # a reply well over 1 ms to build
    history = c.execute_command("LATENCY", "HISTORY", "command")
    doctor = c.execute_command("LATENCY", "DOCTOR").decode()
    graph = c.execute_command("LATENCY", "GRAPH", "command").decode()
    # (on a busy machine another command may take 1 ms too: the figures from the samples)
    values = [ms for _, ms in history]
    n, avg = len(values), sum(values) // len(values)
    mad = sum(abs(v - avg) for v in values) // n
    assert doctor.startswith(
        "Dave, I have observed latency spikes in this Disque instance. You don't mind "
        f"talking about it, do you Dave?\n\n1. command: {n} latency spikes (average "
        f"{avg}ms, mean deviation {mad}ms, period ")
    assert doctor.endswith(
        f"Worst all time event {max(values)}ms.\n\nI have a few advices for you:\n\n"
        "- Your current Slow Log configuration only logs events that are slower than your "
        "configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than "
        "1000'.\n- Check your Slow Log to understand what are the commands you are running "
        "which are too slow to execute. Please check http://disque.io/commands/slowlog for "
        "more information.\n- Deleting, expiring or evicting (because of maxmemory policy) "
        "large objects is a blocking operation. If you have very large objects that are "
        "often deleted, expired, or evicted, try to fragment those objects into multiple "
        "smaller objects.\n")
    lines = graph.split("\n")
    assert lines[:2] == [f"command - high {max(values)} ms, low {min(values)} ms (all time "
                         f"high {max(values)} ms)", "-" * 80]
    # 4 lines of bars (the lowest sample '_' on the bottom one), a blank one, the ages
    bars = lines[2:6]
    assert all(len(x) == n for x in bars) and bars[3][values.index(min(values))] == "_"
    assert lines[6] == " " * n and lines[-1] == ""
    ages = ["".join(row[j] for row in lines[7:-1]).rstrip() for j in range(n)]  # downwards
    assert all(re.fullmatch(r"\d+s", a) for a in ages), ages


def test_debug_structsize_and_loadjob(server):
    c = server.client()
    sizes = c.execute_command("DEBUG", "STRUCTSIZE").decode()
    assert re.fullmatch(r"bits:64 (\w+:\d+ )+", sizes)
    assert "job:" in sizes and "queue:" in sizes
    with pytest.raises(redis.ResponseError,
                       match="^LOADJOB is a special command only processed from AOF$"):
        c.execute_command("LOADJOB", "x")
    with pytest.raises(redis.ResponseError,
                       match="^wrong number of arguments for 'loadjob' command$"):
        c.execute_command("LOADJOB", "x", "y")


# COMMAND's rows of C Disque 1.0-rc1: name -> (arity, flags)
C_COMMANDS = {
    "ackjob": (-1, ["write", "fast"]), "addjob": (-4, ["write", "denyoom", "fast"]),
    "auth": (2, ["readonly", "loading", "fast"]), "bgrewriteaof": (1, ["readonly", "admin"]),
    "client": (-2, ["readonly", "admin"]), "cluster": (-2, ["readonly", "admin"]),
    "command": (0, ["readonly", "loading"]), "config": (-2, ["readonly", "admin"]),
    "debug": (-2, ["admin"]), "deljob": (-1, ["write", "fast"]),
    "dequeue": (-1, ["write", "fast"]), "enqueue": (-1, ["write", "denyoom", "fast"]),
    "fastack": (-1, ["write", "fast"]), "getjob": (-2, ["write", "fast"]),
    "hello": (1, ["readonly", "fast"]), "info": (-1, ["readonly", "loading"]),
    "jscan": (-1, ["readonly"]), "latency": (-2, ["readonly", "admin", "loading"]),
    "loadjob": (2, ["write"]), "monitor": (1, ["readonly", "admin"]),
    "nack": (-1, ["write", "denyoom", "fast"]), "pause": (-3, ["readonly", "fast"]),
    "ping": (-1, ["readonly", "fast"]), "qlen": (2, ["readonly", "fast"]),
    "qpeek": (3, ["readonly"]), "qscan": (-1, ["readonly"]),
    "qstat": (2, ["readonly", "fast"]), "show": (2, ["readonly", "fast"]),
    "shutdown": (-1, ["readonly", "admin", "loading"]), "slowlog": (-2, ["readonly"]),
    "time": (1, ["readonly", "fast"]), "working": (2, ["write", "fast"]),
}
# deliberate: AUTH user pass (Redis 6) and HELLO protover (Redis's handshake) take more
OURS = {"auth": -2, "hello": -1}


def test_command_rows_as_disque(server):
    c = server.client()
    c.response_callbacks.pop("COMMAND", None)  # the rows as sent, not redis-py's dict
    rows = {r[0].decode(): (r[1], [f.decode() for f in r[2]], r[3:])
            for r in c.execute_command("COMMAND")}
    for name, (arity, flags) in C_COMMANDS.items():
        assert rows[name] == (OURS.get(name, arity), flags, [0, 0, 0]), name
    assert raw(server.port, b"COMMAND INFO nosuch\r\n", until=b"$-1\r\n") == b"*1\r\n$-1\r\n"
    assert raw(server.port, b"COMMAND INFO nosuch ping\r\n", until=b":0\r\n:0\r\n:0\r\n") == (
        b"*2\r\n$-1\r\n*6\r\n$4\r\nping\r\n:-1\r\n*2\r\n+readonly\r\n+fast\r\n:0\r\n:0\r\n"
        b":0\r\n")
