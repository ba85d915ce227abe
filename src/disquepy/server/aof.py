"""The append-only file: appends, fsync policies, loading, and rewrites.

The node emits records (``node.aof.out``); the driver hands them here after each
event. Policies:

Records of one loop iteration are written with a single ``write()`` at its end, and
the replies of the commands that produced them are held until then, so a process
crash never loses a job whose ADDJOB got an ID, whatever the policy. Then:

- ``always``: the write is followed by ``fdatasync`` before the replies leave: every
  client served in one loop iteration shares one fsync (group commit).
- ``everysec``: ``fdatasync`` runs in a worker thread about once a second, so an OS
  crash or power loss loses at most about a second of writes.
- ``no``: the kernel flushes when it likes.

A rewrite (BGREWRITEAOF, automatic growth, CONFIG SET appendonly yes) writes the live
jobs, then the consumer groups' flushes and events held, then the kept job outcomes,
to a temporary file a slice at a time between events, while new records go both
to the old file and to a rewrite buffer; at the end the buffer is appended, the file
fsynced and renamed over the AOF. ``SHUTDOWN REWRITE-AOF`` does the same in one go,
recording which jobs are queued, for the controlled restart.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..core import aofrecords as codec
from .log import log

if TYPE_CHECKING:
    from ..core.node import Node
    from .driver import Driver
    from .protocol import ClientProtocol

REWRITE_SLICE = 1000  # jobs serialized per loop iteration during a rewrite (~5 ms)
REWRITE_SYNC_BYTES = 32 << 20  # aof-rewrite-incremental-fsync: as Redis, every 32 MB


class AofError(Exception):
    pass


def write_all(fd: int, data: bytes) -> int:
    """os.write until everything is written (regular files may take less at once)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    return len(data)


def load(path: str, truncate_torn: bool) -> list[tuple[int, str, Any]]:
    """Read and check the AOF. Returns the records; a torn tail is cut off (logged) when
    ``truncate_torn``; anything else wrong raises AofError naming the offset."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    res = codec.scan(data)
    if res.status == "truncated":
        if not truncate_torn:
            raise AofError(
                f"Bad file format reading the append only file {path}: incomplete record at "
                f"offset {res.error_offset} (aof-load-truncated is no; use disque-check-aof "
                "--fix)")
        log.warning("!!! Warning: short read while loading the AOF file %s: the last record "
                    "(offset %d, %d bytes) is incomplete. Truncating the AOF at offset %d.",
                    path, res.error_offset, len(data) - res.valid_end, res.valid_end)
        with open(path, "r+b") as f:
            f.truncate(res.valid_end)
            os.fsync(f.fileno())
    elif res.status == "corrupt":
        raise AofError(f"Bad file format reading the append only file {path} at offset "
                       f"{res.error_offset}: {res.reason}. Use disque-check-aof to inspect it.")
    return res.records


class AofFile:
    def __init__(self, driver: Driver, path: str, fsync: str) -> None:
        self.driver = driver
        self.node = driver.node
        self.loop = driver.loop
        self.path = path
        self.fsync = fsync
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.base_size = self.size
        # (write function, bytes) waiting for the write (and fsync): replies to clients
        # and cluster bus frames (a replica's GOTJOB must not promise an unsynced copy)
        self.held: list[tuple[Callable[[bytes], object], bytes]] = []
        self.pending: list[bytes] = []  # records of this loop iteration
        self._flush_scheduled = False
        self._fsync_running = False
        self._last_fsync = time.monotonic()
        self.last_write_ok = True
        self.rewrite: Rewrite | None = None
        self.last_rewrite_ok = True
        self.last_rewrite_secs = -1
        self.longest_slice_ms = 0.0

    # ----------------------------------------------------------------- writes
    def append(self, records: list[bytes]) -> None:
        """Queue records; they are written (and synced, per policy) at the end of this
        loop iteration, before the replies that depend on them are released."""
        self.pending.extend(records)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush_soon)

    @property
    def holding(self) -> bool:
        """True while replies must wait for the records to be written (and synced)."""
        return self._flush_scheduled

    def hold(self, conn: ClientProtocol, data: bytes) -> None:
        self.held.append((conn.write, data))

    def hold_call(self, write: Callable[[bytes], object], data: bytes) -> None:
        self.held.append((write, data))

    def flush_now(self) -> None:
        """Write the queued records now, not at the end of the iteration: a client
        batch calls it once its commands ran, so that the replies the AOF holds are
        released into that same batch's writes (no loop round of their own); so does
        a connection closing, before what it is sent last."""
        if self._flush_scheduled:
            self._flush()

    def _flush_soon(self) -> None:
        if self._flush_scheduled:  # (not flushed already by flush_now)
            self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        data = b"".join(self.pending)
        self.pending.clear()
        try:
            write_all(self.fd, data)
            if self.fsync == "always" and self.may_sync():
                os.fdatasync(self.fd)
            self.last_write_ok = True
        except OSError as e:
            self.last_write_ok = False
            log.warning("Error writing to the AOF file: %s", e.strerror)
        self.size += len(data)
        if self.rewrite is not None:
            self.rewrite.buffer.append(data)
        if self.fsync == "everysec":
            self._maybe_background_fsync()
        held, self.held = self.held, []
        for write, data in held:
            write(data)
        self._maybe_auto_rewrite()

    def may_sync(self) -> bool:
        """False while a rewrite runs with no-appendfsync-on-rewrite yes (Redis's trade:
        no fsync stalls behind the rewrite's writes, at the risk of losing what was
        written meanwhile if the OS crashes); the first sync after it covers the rest."""
        return self.rewrite is None or not self.driver.config.no_appendfsync_on_rewrite

    def _maybe_background_fsync(self) -> None:
        now = time.monotonic()
        if self._fsync_running or now - self._last_fsync < 1.0 or not self.may_sync():
            return
        self._fsync_running = True
        self._last_fsync = now
        # the thread gets its own descriptor: a rewrite may close and replace self.fd
        fut = self.loop.run_in_executor(None, _sync_and_close, os.dup(self.fd))
        fut.add_done_callback(self._fsync_done)

    def _fsync_done(self, fut: asyncio.Future[None]) -> None:
        self._fsync_running = False
        if fut.exception() is not None:
            self.last_write_ok = False
            log.warning("Background AOF fsync failed: %s", fut.exception())

    def tick(self) -> None:
        """Called once a second: makes sure everysec data is synced when idle."""
        if self.fsync == "everysec" and not self._fsync_running and \
                time.monotonic() - self._last_fsync >= 1.0:
            self._maybe_background_fsync()

    def close(self) -> None:
        if self.pending:
            self._flush()
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            finally:
                os.close(self.fd)
                self.fd = -1

    # --------------------------------------------------------------- rewrites
    def _maybe_auto_rewrite(self) -> None:
        cfg = self.driver.config
        pct = cfg.auto_aof_rewrite_percentage
        if (pct and self.rewrite is None and self.size >= cfg.auto_aof_rewrite_min_size
                and self.size >= self.base_size * (100 + pct) // 100):
            log.info("Starting automatic rewriting of AOF on %d%% growth",
                     (self.size - self.base_size) * 100 // max(1, self.base_size))
            self.start_rewrite()

    def start_rewrite(self) -> bool:
        if self.rewrite is not None:
            return False
        self.rewrite = Rewrite(self)
        self.loop.call_soon(self.rewrite.step)
        return True

    def rewrite_done(self, ok: bool, secs: float) -> None:
        self.last_rewrite_ok = ok
        self.last_rewrite_secs = int(secs)
        self.rewrite = None

    def info(self) -> list[tuple[str, int | str]]:
        return [
            ("aof_rewrite_in_progress", int(self.rewrite is not None)),
            ("aof_rewrite_scheduled", 0),  # a BGREWRITEAOF during one is refused
            ("aof_last_rewrite_time_sec", self.last_rewrite_secs),
            ("aof_current_rewrite_time_sec", -1 if self.rewrite is None
             else int(time.monotonic() - self.rewrite.started)),
            ("aof_last_bgrewrite_status", "ok" if self.last_rewrite_ok else "err"),
            ("aof_last_write_status", "ok" if self.last_write_ok else "err"),
            ("aof_current_size", self.size),
            ("aof_base_size", self.base_size),
            ("aof_pending_rewrite", 0),
            ("aof_buffer_length", sum(map(len, self.pending))),
            ("aof_rewrite_buffer_length", 0 if self.rewrite is None
             else sum(map(len, self.rewrite.buffer))),
            ("aof_pending_bio_fsync", int(self._fsync_running)),
            ("aof_delayed_fsync", 0),
            ("aof_rewrite_longest_slice_ms", f"{self.longest_slice_ms:.2f}"),
        ]


class Rewrite:
    """An incremental rewrite: slices of jobs between events, then a buffer and a rename."""

    def __init__(self, aof: AofFile) -> None:
        self.aof = aof
        self.started = time.monotonic()
        self.tmp = os.path.join(os.path.dirname(aof.path) or ".",
                                f"temp-rewriteaof-{os.getpid()}.aof")
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.jobs = list(aof.node.jobs.values())  # the snapshot: 8 bytes a job
        self.pos = 0
        self.events = aof.node.groups.log.snapshot_list()  # then the events, the same way
        self.epos = -1  # (-1: the flushes first)
        # then the outcomes, a chunk of the store per step
        self.outcomes: Iterator[list[bytes]] | None = None
        self.buffer: list[bytes] = []
        self.unsynced = 0  # bytes written since the last incremental fsync
        log.info("Background append only file rewriting started (%d jobs)", len(self.jobs))

    def step(self) -> None:
        aof, node = self.aof, self.aof.node
        t0 = time.perf_counter()
        try:
            end = min(self.pos + REWRITE_SLICE, len(self.jobs))
            out = []
            for job in self.jobs[self.pos:end]:
                if node.jobs.get(job.id) is job:  # deleted since: its DELJOB is buffered
                    rec = node.aof.snapshot(job)
                    if rec is not None:
                        out.append(rec)
            if out:
                self.write(b"".join(out))
            self.pos = end
            if self.pos < len(self.jobs):
                aof.loop.call_soon(self.step)
                return
            if self.step_events():
                aof.loop.call_soon(self.step)
                return
            if self.outcomes is None:
                self.outcomes = node.aof.outcome_snapshots(int(time.time() * 1000))
            recs = next(self.outcomes, None)  # one chunk: at most 4096 records
            if recs is not None:
                self.write(b"".join(recs))
                aof.loop.call_soon(self.step)
                return
            keys = node.aof.retained_keys(int(time.time() * 1000))
            if keys:
                write_all(self.fd, b"".join(keys))
            # the snapshot is written: sync it off the loop, then finish in the loop
            fut = aof.loop.run_in_executor(None, os.fsync, self.fd)
            fut.add_done_callback(self._synced)
        except OSError as e:
            log.warning("Background AOF rewrite failed: %s", e.strerror)
            self.abort()
        finally:
            aof.longest_slice_ms = max(aof.longest_slice_ms, (time.perf_counter() - t0) * 1000)

    def step_events(self) -> bool:
        """One slice of the consumer groups' part; False once it is all written."""
        log_ = self.aof.node.groups.log
        if self.epos < 0:
            self.epos = 0
            tombs = log_.tombstones()
            if tombs:
                self.write(b"".join(tombs))
        if self.epos >= len(self.events):
            return False
        end = min(self.epos + REWRITE_SLICE, len(self.events))
        out = [r for r in map(log_.snapshot, self.events[self.epos:end]) if r is not None]
        if out:
            self.write(b"".join(out))
        self.epos = end
        return True

    def write(self, data: bytes) -> None:
        """Write to the new file; with aof-rewrite-incremental-fsync yes, sync it off the
        loop every REWRITE_SYNC_BYTES, so the final fsync has little left to flush."""
        write_all(self.fd, data)
        self.unsynced += len(data)
        if self.unsynced >= REWRITE_SYNC_BYTES and \
                self.aof.driver.config.aof_rewrite_incremental_fsync:
            self.unsynced = 0
            fut = self.aof.loop.run_in_executor(None, _sync_and_close, os.dup(self.fd))
            fut.add_done_callback(_log_sync_failure)

    def _synced(self, fut: asyncio.Future[None]) -> None:
        t0 = time.perf_counter()
        try:
            exc = fut.exception()
            if exc is not None:
                raise exc
            self.finish()
        except OSError as e:
            log.warning("Background AOF rewrite failed: %s", e.strerror)
            self.abort()
        finally:
            self.aof.longest_slice_ms = max(self.aof.longest_slice_ms,
                                            (time.perf_counter() - t0) * 1000)

    def finish(self) -> None:
        """Append what changed during the rewrite (small), sync, rename over the AOF."""
        aof = self.aof
        if aof.pending:
            aof._flush()  # records not yet written go through the buffer too
        if self.buffer:
            write_all(self.fd, b"".join(self.buffer))
        os.fdatasync(self.fd)
        os.close(self.fd)
        os.replace(self.tmp, aof.path)
        _fsync_dir(aof.path)
        os.close(aof.fd)
        aof.fd = os.open(aof.path, os.O_WRONLY | os.O_APPEND)
        aof.size = aof.base_size = os.fstat(aof.fd).st_size
        secs = time.monotonic() - self.started
        log.info("Background AOF rewrite terminated with success (%d bytes, %.2f s)", aof.size,
                 secs)
        aof.rewrite_done(True, secs)

    def abort(self) -> None:
        try:
            os.close(self.fd)
            os.unlink(self.tmp)
        except OSError:
            pass
        self.aof.rewrite_done(False, time.monotonic() - self.started)


def write_snapshot(node: Node, path: str) -> int:
    """A complete AOF of the live jobs with their queue state (and the events held),
    written atomically (for
    SHUTDOWN REWRITE-AOF and the controlled restart). Returns its size."""
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        batch: list[bytes] = []
        size = 0
        for job in node.jobs.values():
            rec = node.aof.snapshot(job)
            if rec is not None:
                batch.append(rec)
                if len(batch) >= 10_000:
                    size += write_all(fd, b"".join(batch))
                    batch.clear()
        batch += node.groups.log.tombstones()
        for e in node.groups.log.snapshot_list():
            rec = node.groups.log.snapshot(e)
            if rec is not None:
                batch.append(rec)
                if len(batch) >= 10_000:
                    size += write_all(fd, b"".join(batch))
                    batch.clear()
        now = int(time.time() * 1000)
        for recs in node.aof.outcome_snapshots(now):
            batch += recs
            if len(batch) >= 10_000:
                size += write_all(fd, b"".join(batch))
                batch.clear()
        batch += node.aof.retained_keys(now)
        if batch:
            size += write_all(fd, b"".join(batch))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path)
    return size


def _log_sync_failure(fut: asyncio.Future[None]) -> None:
    """An incremental fsync of a rewrite failed: said (the final fsync still decides)."""
    if fut.exception() is not None:
        log.warning("Incremental fsync of the AOF rewrite failed: %s", fut.exception())


def _sync_and_close(fd: int) -> None:
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
