"""The driver's delivery rules, with fake transports and a fake AOF (no sockets)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
from pathlib import Path

from disquepy.core.config import Config
from disquepy.core.node import Node
from disquepy.server.driver import Driver
from disquepy.server.protocol import ClientProtocol


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_extra_info(self, key, default=None):
        return ("127.0.0.1", 1) if key == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True


class HoldingAof:
    """Stands for an AofFile whose write/fsync of this iteration is still pending."""

    holding = True

    def __init__(self) -> None:
        self.held: list = []
        self.records: list = []

    def hold(self, conn, data: bytes) -> None:
        self.held.append((conn, data))

    def hold_call(self, write, data: bytes) -> None:
        self.held.append((write, data))

    def append(self, records: list) -> None:
        self.records.extend(records)

    def flush_now(self) -> None:
        """(Its write stays pending: what it holds stays held.)"""


def make(**config):
    loop = asyncio.new_event_loop()
    cfg = Config()
    for k, v in config.items():
        setattr(cfg, k, v)
    node = Node(cfg, "a" * 40, random.Random(1), Driver.now())
    driver = Driver(node, cfg, None, loop)
    return loop, node, driver


def connect(driver):
    p = ClientProtocol(driver)
    t = FakeTransport()
    p.connection_made(t)
    return p, t


def arrive(p, data: bytes) -> None:
    """Bytes for a connection, then the end of the iteration's reads: the client batch
    runs what arrived (the batch's own call_soon finds nothing left later)."""
    p.data_received(data)
    p.driver.batch.run()


def settle(loop) -> None:
    """Run what the driver deferred to the end of the loop iteration."""
    loop.run_until_complete(asyncio.sleep(0))


def test_outbox_replies_wait_behind_held_replies():
    loop, node, driver = make()
    a, ta = connect(driver)
    c, tc = connect(driver)
    arrive(a, b"GETJOB FROM theirs\r\n")  # blocks
    driver.aof = HoldingAof()
    arrive(c, b"ADDJOB theirs y 0\r\n")  # serves A through the outbox, in the batch
    settle(loop)
    assert ta.written == [] and tc.written == []  # not written past what the AOF holds
    assert [conn for conn, _ in driver.aof.held] == [c, a]  # the ADDJOB's reply first
    held_for_a = [d for conn, d in driver.aof.held if conn is a]
    assert len(held_for_a) == 1 and held_for_a[0].startswith(b"*1\r\n*3\r\n$6\r\ntheirs")
    loop.close()


def test_a_batch_delivers_the_outputs_of_its_commands_before_writing_replies():
    """The node's outputs (here the reply to a blocked GETJOB that an ADDJOB served)
    leave in the batch that ran the commands, with its replies: no loop round of
    their own."""
    loop, node, driver = make()
    a, ta = connect(driver)
    c, tc = connect(driver)
    arrive(a, b"GETJOB FROM q\r\n")  # blocks
    assert ta.written == []
    arrive(c, b"ADDJOB q body 0\r\n")
    assert ta.written and ta.written[0].startswith(b"*1\r\n*3\r\n$1\r\nq")
    assert tc.written and tc.written[0].startswith(b"+D-")
    assert not node.has_outputs() and not driver._after_scheduled
    loop.close()


def test_a_batch_writes_its_aof_records_then_its_replies(tmp_path):
    """With appendonly, a batch's records reach the file before its replies are
    written, and those replies leave in the same batch (not a loop round later)."""
    loop, node, driver = make(dir=str(tmp_path))
    driver.start_aof(False)
    c, tc = connect(driver)
    sizes = []  # the AOF's size on disk at each write of a reply
    write = tc.write

    def sized_write(data: bytes) -> None:
        sizes.append(os.path.getsize(driver.aof_path))
        write(data)

    tc.write = sized_write
    arrive(c, b"ADDJOB q body 0\r\nADDJOB q other 0\r\n")
    assert len(tc.written) == 1 and tc.written[0].count(b"+D-") == 2
    assert sizes[0] > 0 and b"other" in Path(driver.aof_path).read_bytes()
    assert not driver.aof.holding and not driver.aof.held
    arrive(c, b"ADDJOB q third 0\r\n")
    assert len(tc.written) == 2 and sizes[1] > sizes[0]
    # a bus frame earlier in the iteration put off the delivery of the node's outputs
    # to its end: the batch's records are written before its replies all the same
    driver.after_event_soon()
    arrive(c, b"ADDJOB q fourth 0\r\n")
    assert len(tc.written) == 3 and sizes[2] > sizes[1]
    assert b"fourth" in Path(driver.aof_path).read_bytes()
    driver.stop_aof()
    loop.close()


def test_a_client_killed_in_the_batch_of_its_commands_gets_replies_after_their_records(
        tmp_path):
    """CLIENT KILL closes a connection whose ADDJOB ran earlier in the same batch: what
    the connection is sent before it closes follows the AOF record of that ADDJOB."""
    loop, node, driver = make(dir=str(tmp_path))
    driver.start_aof(False)
    a, ta = connect(driver)
    k, tk = connect(driver)
    sizes = []
    write = ta.write

    def sized_write(data: bytes) -> None:
        sizes.append(os.path.getsize(driver.aof_path))
        write(data)

    ta.write = sized_write
    assert a.client is not None
    a.data_received(b"ADDJOB q killed 0\r\n")
    k.data_received(b"CLIENT KILL ID %d\r\n" % a.client.id)
    driver.batch.run()  # both in one batch: A's ADDJOB, then the kill
    assert a.closing and tk.written == [b":1\r\n"]
    assert ta.written and ta.written[0].startswith(b"+D-") and sizes[0] > 0
    assert b"killed" in Path(driver.aof_path).read_bytes()
    driver.stop_aof()
    loop.close()


def test_pipelined_replies_before_quit_are_sent():
    loop, node, driver = make()
    a, ta = connect(driver)
    arrive(a, b"PING\r\nECHO hi\r\nQUIT\r\nPING\r\n")
    settle(loop)  # QUIT is finished by the driver, at the end of the loop iteration
    assert b"".join(ta.written) == b"+PONG\r\n$2\r\nhi\r\n+OK\r\n"  # nothing after QUIT
    loop.close()


class FakeEvents:
    def __init__(self) -> None:
        self.events: list = []

    def write(self, events: list) -> None:
        self.events.extend(events)


def test_outputs_of_a_resumed_pipeline_are_delivered():
    """A blocked GETJOB answered through the outbox resumes its client's pipeline;
    what those commands produce besides replies (here event-log records) leaves too,
    not at some later event."""
    loop, node, driver = make()
    node.events_on = True
    driver.events = FakeEvents()
    a, ta = connect(driver)
    c, tc = connect(driver)
    arrive(a, b"GETJOB FROM q\r\nADDJOB later x 0\r\n")
    assert ta.written == []  # blocked, the ADDJOB waits behind it
    arrive(c, b"ADDJOB q body 0\r\n")
    driver._after_soon()  # the end of the iteration (settle() would also run timers)
    driver.batch.run()  # the replies it wrote leave with the next batch
    out = b"".join(ta.written)
    assert out.startswith(b"*1\r\n*3\r\n$1\r\nq")
    assert out.split(b"\r\n")[-2].startswith(b"+D-")  # the resumed ADDJOB ran, after
    assert node.events_out == []
    assert ("added", b"later") in [(e[1], e[3]) for e in driver.events.events]
    loop.close()


def read_events(directory) -> list:
    return [json.loads(line) for f in sorted(directory.glob("events-*.jsonl"))
            for line in f.read_text().splitlines()]


def test_shutdown_delivers_the_pending_outputs_before_the_event_log_closes(tmp_path):
    """SIGTERM runs shutdown() between a batch's commands and the delivery of their
    outputs (deferred to the end of the iteration by a bus frame): the events they produced reach the log before it closes, and the rest
    of those outputs (here a reply to a blocked client) is delivered, not dropped."""
    loop, node, driver = make(dir=str(tmp_path), event_log=True)
    node.events_on = True
    a, ta = connect(driver)
    arrive(a, b"GETJOB FROM q\r\n")  # blocks
    c, tc = connect(driver)
    # a bus frame came earlier in this iteration: the delivery it scheduled, at the
    # iteration's end, carries the batch's outputs too
    driver.after_event_soon()
    arrive(c, b"ADDJOB q body 0\r\n")  # serves A; its outputs wait for the iteration's end
    assert node.has_outputs()
    driver.shutdown("signal")
    driver.batch.run()  # what the replies wrote leaves with the batch
    assert ta.written and ta.written[0].startswith(b"*1\r\n*3\r\n$1\r\nq")
    kinds = [(e["event"], e["queue"]) for e in read_events(tmp_path / node.config.event_log_dir)]
    assert ("added", "q") in kinds and ("delivered", "q") in kinds
    assert driver.events is None and not node.has_outputs()
    loop.close()


def test_events_before_a_config_set_of_the_event_log_go_to_the_old_log(tmp_path):
    """CONFIG SET event-log-dir closes the log: the events of the commands before it
    in the same batch were recorded there first, not in the new directory."""
    loop, node, driver = make(dir=str(tmp_path), event_log=True)
    node.events_on = True
    a, ta = connect(driver)
    arrive(a, b"ADDJOB q first 0\r\n")
    driver._after_soon()  # the log is open
    arrive(a, b"ADDJOB q body 0\r\nCONFIG SET event-log-dir elsewhere\r\n")
    driver._after_soon()
    assert [e["event"] for e in read_events(tmp_path / "events")] == ["added", "queued"] * 2
    assert not (tmp_path / "elsewhere").exists()
    driver.shutdown()
    loop.close()


def test_replies_written_at_once_without_aof():
    loop, node, driver = make()
    a, ta = connect(driver)
    arrive(a, b"PING\r\nECHO hi\r\n")
    assert ta.written == [b"+PONG\r\n$2\r\nhi\r\n"]  # one write for the batch
    loop.close()


def test_commands_wait_for_the_end_of_the_reads_then_run_together():
    loop, node, driver = make()
    conns = [connect(driver) for _ in range(3)]
    for i, (p, _) in enumerate(conns):
        p.data_received(b"ECHO %d\r\n" % i)
    assert all(t.written == [] for _, t in conns)  # only stored so far
    settle(loop)  # one call_soon for the three
    assert [t.written for _, t in conns] == [[b"$1\r\n%d\r\n" % i] for i in range(3)]
    loop.close()


class ExplodingReader:
    """A request reader with a bug: a connection's command path raises. (The protocol
    class is compiled: a test cannot subclass it.)"""

    def feed(self, data: bytes) -> None:
        pass

    def gets(self):
        raise RuntimeError("a bug in the command path")

    def __len__(self) -> int:
        return 0


def test_a_protocol_that_raises_loses_only_its_connection():
    loop, node, driver = make()
    errors: list = []
    loop.set_exception_handler(lambda _, ctx: errors.append(ctx))
    a, ta = connect(driver)
    b = ClientProtocol(driver)
    tb = FakeTransport()
    b.connection_made(tb)
    b.reader = ExplodingReader()
    b.gets, b.feed = b.reader.gets, b.reader.feed  # (the protocol keeps them bound)
    c, tc = connect(driver)
    for p in (a, b, c):
        p.data_received(b"PING\r\n")
    settle(loop)
    assert ta.written == tc.written == [b"+PONG\r\n"]
    assert getattr(tb, "aborted", False) and b.closing and not hasattr(ta, "aborted")
    assert [type(e["exception"]) for e in errors] == [RuntimeError]
    arrive(a, b"PING\r\n")  # the batch goes on
    assert ta.written[-1] == b"+PONG\r\n"
    loop.close()


class FakeBus:
    max_frame = 1 << 20

    def __init__(self) -> None:
        self.sent: list = []
        self.flushes = 0

    def send(self, node_id: str, frame: bytes) -> None:
        self.sent.append((node_id, frame))

    def flush_now(self) -> None:
        self.flushes += 1

    def sync_links(self, links) -> None:
        pass


def test_bus_frames_wait_behind_the_aof_write():
    """A replica's GOTJOB promises a copy: with records of this iteration not yet
    written (and fsynced, under always), the frame is held with the replies."""
    loop, node, driver = make()
    driver.bus = FakeBus()
    node.bus_out.append((["b" * 40], [1, node.myid, node.port, 0]))
    driver.aof = HoldingAof()
    driver.after_event()
    assert driver.bus.sent == [] and driver.bus.flushes == 0
    (write, frame), = driver.aof.held
    write(frame)
    assert driver.bus.sent == [("b" * 40, frame)]
    # nothing pending in the AOF: frames go at once
    driver.aof.holding = False
    node.bus_out.append((["b" * 40], [1, node.myid, node.port, 0]))
    driver.after_event()
    assert len(driver.bus.sent) == 2
    assert driver.bus.flushes == 1  # written at once, not at the next iteration
    loop.close()


def test_a_half_close_on_asyncios_own_loop_gets_its_reply_then_the_close():
    """The protocol class is compiled and has no asyncio base: it answers eof_received
    itself (asyncio's loop calls it and reports a fatal error if it is missing; uvloop
    copes). A socketpair in process, no network."""
    loop, node, driver = make()
    errors: list = []
    loop.set_exception_handler(lambda _, ctx: errors.append(ctx))
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)

    async def talk() -> bytes:
        await loop.connect_accepted_socket(lambda: ClientProtocol(driver), ours)
        await loop.sock_sendall(theirs, b"PING\r\n")
        theirs.shutdown(socket.SHUT_WR)
        buf = b""
        while chunk := await asyncio.wait_for(loop.sock_recv(theirs, 100), 5):
            buf += chunk
        return buf

    try:
        assert loop.run_until_complete(talk()) == b"+PONG\r\n"
        assert not errors, errors
        assert not node.clients  # the connection closed with the half-close
    finally:
        theirs.close()
        loop.close()
