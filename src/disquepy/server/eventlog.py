"""The job-lifecycle event log: JSON lines, appended in batches.

The core queues ``(ms, kind, job id, queue, extra)`` tuples in ``node.events_out``
while ``event-log`` is on; this file turns them into one JSON object per line in
``<dir>/<event-log-dir>/events-<node8>-<YYYYmmddTHHMMSS>-<seq>.jsonl`` and starts a
new file past ``event-log-max-size``. Files are only ever appended to and never
renamed, so readers (``disquepy.spark.analytics``) can read them while the server
runs; the last line of the newest file may be partial.

Cost when on: one tuple per event in the core, one formatted line per event here, and
one ``write`` per 500 events or 200 ms (no fsync: the log is an analytics trail, not a
durability mechanism; a crash may lose the last 200 ms of events).
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from ..core.outputs import Event
from .aof import write_all
from .log import log

# one line per event, formatted as bytes (job IDs are ASCII; queue names JSON-escaped
# once per queue); fields carried in ``extra`` by the events that have one
_LINE = b'{"ts":%d,"event":"%b",%b,"job":"%b","queue":%b}\n'
_LINE_EXTRA = b'{"ts":%d,"event":"%b",%b,"job":"%b","queue":%b,%b}\n'
_ADDED = b'"ttl":%d,"retry":%d,"delay":%d,"replicate":%d,"size":%d'
_DELIVERED = b'"nacks":%d,"additional_deliveries":%d'
_KINDS = {k: k.encode() for k in
          ("added", "queued", "delivered", "nacked", "acked", "expired", "deleted")}
_dumps = json.dumps
FLUSH_EVENTS = 500  # write at the latest after this many events (or the 200 ms timer)


class EventLog:
    __slots__ = ("dir", "node_id", "max_size", "fd", "size", "seq", "_queue_names", "path",
                 "failed", "_head", "_buf", "_buffered", "_flush_every")

    def __init__(self, directory: str, node_id: str, max_size: int) -> None:
        self.dir = directory
        self.node_id = node_id
        self.max_size = max_size
        self.fd: int | None = None
        self.size = 0
        self.seq = 0
        self.path = ""
        self.failed = False
        self._queue_names: dict[bytes, bytes] = {}  # queue -> its JSON string, cached
        self._head = b'"node":"%b"' % node_id.encode()
        self._buf: list[bytes] = []
        self._buffered = 0
        # small files rotate at their size: flush often enough for that
        self._flush_every = FLUSH_EVENTS if not max_size else max(1, min(
            FLUSH_EVENTS, max_size // 200))

    def _open(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        while True:
            self.seq += 1
            name = f"events-{self.node_id[:8]}-{stamp}-{self.seq:06d}.jsonl"
            path = os.path.join(self.dir, name)
            if not os.path.exists(path):
                break
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.path = path
        self.size = 0
        log.info("Event log: writing %s", path)

    def write(self, events: list[Event]) -> None:
        """Format the events of one loop iteration; they reach the file when a buffer's
        worth has gathered or at the next ``flush`` (the driver calls it every 200 ms)."""
        qnames = self._queue_names
        head = self._head
        buf = self._buf
        for ms, kind, jid, queue, extra in events:
            q = qnames.get(queue)
            if q is None:
                q = _dumps(queue.decode("utf-8", "replace")).encode()
                if len(qnames) > 10_000:
                    qnames.clear()
                qnames[queue] = q
            if extra is None:
                buf.append(_LINE % (ms, _KINDS[kind], head, jid, q))
            else:
                buf.append(_LINE_EXTRA % (ms, _KINDS[kind], head, jid, q,
                                          (_ADDED if kind == "added" else _DELIVERED) % extra))
        self._buffered += len(events)
        if self._buffered >= self._flush_every:
            self.flush()

    def flush(self) -> None:
        """Write what is buffered: one write call, whole lines."""
        if not self._buf:
            return
        data = b"".join(self._buf)
        self._buf.clear()
        self._buffered = 0
        try:
            if self.fd is None or (self.max_size and self.size >= self.max_size):
                self.close()
                self._open()
            assert self.fd is not None  # (opened above)
            self.size += write_all(self.fd, data)  # O_APPEND
            self.failed = False
        except OSError as e:
            if not self.failed:  # say it once, not once per flush
                log.warning("Event log write failed (%s): events dropped", e.strerror)
            self.failed = True
            self.close()

    def close(self) -> None:
        """Flush what is buffered and close the file."""
        if self._buf:
            self.flush()  # (clears the buffer before it may close and reopen the file)
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
