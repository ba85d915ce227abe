"""The job-lifecycle event log: JSON lines appended once per loop iteration.

The core queues ``(ms, kind, job id, queue, extra)`` tuples in ``node.events_out``
while ``event-log`` is on; this file turns them into one JSON object per line in
``<dir>/<event-log-dir>/events-<node8>-<YYYYmmddTHHMMSS>-<seq>.jsonl`` and starts a
new file past ``event-log-max-size``. Files are only ever appended to and never
renamed, so readers (``disquepy.spark.analytics``) can read them while the server
runs; the last line of the newest file may be partial.

Cost when on: one tuple per event in the core, one formatted line per event and one
``write`` per loop iteration here (no fsync: the log is an analytics trail, not a
durability mechanism; a crash may lose the last few events).
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from .aof import write_all
from .log import log

# fields carried in ``extra`` by the events that have one
_ADDED = '"ttl":%d,"retry":%d,"delay":%d,"replicate":%d,"size":%d'
_DELIVERED = '"nacks":%d,"additional_deliveries":%d'
_dumps = json.dumps


class EventLog:
    __slots__ = ("dir", "node_id", "max_size", "fd", "size", "seq", "_queue_names", "path",
                 "failed")

    def __init__(self, directory: str, node_id: str, max_size: int) -> None:
        self.dir = directory
        self.node_id = node_id
        self.max_size = max_size
        self.fd: int | None = None
        self.size = 0
        self.seq = 0
        self.path = ""
        self.failed = False
        self._queue_names: dict[bytes, str] = {}  # queue -> its JSON string, cached

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

    def write(self, events: list) -> None:
        """Append the events of one loop iteration (one write call)."""
        qnames = self._queue_names
        head = f'"node":"{self.node_id}"'
        lines = []
        for ms, kind, jid, queue, extra in events:
            q = qnames.get(queue)
            if q is None:
                q = _dumps(queue.decode("utf-8", "replace"))
                if len(qnames) > 10_000:
                    qnames.clear()
                qnames[queue] = q
            line = (f'{{"ts":{ms},"event":"{kind}",{head},'
                    f'"job":"{jid.decode("ascii", "replace")}","queue":{q}')
            if extra is not None:
                line += "," + ((_ADDED if kind == "added" else _DELIVERED) % extra)
            lines.append(line + "}\n")
        data = "".join(lines).encode()
        try:
            if self.fd is None or (self.max_size and self.size >= self.max_size):
                self.close()
                self._open()
            self.size += write_all(self.fd, data)  # O_APPEND: one batch, whole lines
            self.failed = False
        except OSError as e:
            if not self.failed:  # say it once, not once per loop iteration
                log.warning("Event log write failed (%s): events dropped", e.strerror)
            self.failed = True
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
