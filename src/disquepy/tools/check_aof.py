"""``disque-check-aof``: check, and optionally repair, an append-only file.

Modelled on ``redis-check-aof``::

    disque-check-aof [--fix] [--yes] [--no-backup] <file>

Exit status: 0 if the AOF is valid (or was repaired), 1 if it is not (or the
repair was declined or impossible), 2 if the file cannot be read or on usage errors.

A torn tail (the file ends inside a record, as after a crash during a write) is
what ``--fix`` is for: the file is truncated to its last complete record.  A
corrupt record elsewhere can be repaired the same way, but everything after it
is lost, so ``--fix`` asks first unless ``--yes``.  The original file is copied
to ``<file>.bak`` (or ``<file>.bak.N`` if that exists) unless ``--no-backup``.
The server must not be running: the file is re-checked for changes before it is
truncated.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from disquepy.core.aofrecords import DELJOB, HEADS, LOADJOB, OUTCOME, ScanResult, scan


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="disque-check-aof",
        description="Check a disquepy append-only file and optionally repair it.",
    )
    p.add_argument("--fix", action="store_true", help="truncate the file to its valid prefix")
    p.add_argument(
        "--yes", "-y", action="store_true", help="do not ask before dropping valid data (--fix)"
    )
    p.add_argument(
        "--no-backup", action="store_true", help="do not copy the file to <file>.bak first"
    )
    p.add_argument("file", type=Path)
    return p


def records_after(data: bytes, offset: int) -> tuple[int, int]:
    """Records that start after a bad record at ``offset``: ``(candidates, valid)``.

    ``candidates`` counts the record headers found in the bytes that follow (a job
    body could contain one, so it is an estimate); ``valid`` counts the records
    that parse cleanly when scanning resumes at each of them.
    """
    candidates = valid = 0
    pos = offset + 1
    while True:
        starts = [i for i in (data.find(h, pos) for h in HEADS) if i >= 0]
        if not starts:
            return candidates, valid
        at = min(starts)
        res = scan(data, at, collect=False)
        n = res.loadjobs + res.deljobs + res.outcomes + res.events
        candidates += max(n, 1)
        valid += n
        pos = res.valid_end if n else at + 1


def _report(path: Path, size: int, res: ScanResult) -> None:
    total = res.loadjobs + res.deljobs + res.outcomes + res.events
    events = f", events={res.events}" if res.events else ""  # (consumer groups' records)
    print(
        f"AOF {path}: size={size}, records={total} "
        f"({LOADJOB}={res.loadjobs}, {DELJOB}={res.deljobs}, {OUTCOME}={res.outcomes}{events}) "
        f"up to offset {res.valid_end}"
    )
    if res.status == "ok":
        print("AOF is valid")
        return
    print(f"AOF analyzed: size={size}, ok_up_to={res.valid_end}, diff={size - res.valid_end}")
    if res.status == "truncated":
        print(
            f"AOF has an incomplete record at the end (offset {res.error_offset}): "
            "this happens after a crash during a write; --fix truncates it"
        )
    else:
        print(f"AOF is not valid at offset {res.error_offset}: {res.reason}")


def _confirm(question: str) -> bool:
    print(f"{question} [y/N]: ", end="", flush=True)
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():
        print(answer.strip())  # echo a piped answer, so the transcript reads well
    return answer.strip().lower() in ("y", "yes")


def _backup_path(path: Path) -> Path:
    bak = path.with_name(path.name + ".bak")
    n = 1
    while bak.exists():  # never overwrite an older backup: it may be the only original
        bak = path.with_name(f"{path.name}.bak.{n}")
        n += 1
    return bak


def _truncate(path: Path, data: bytes, valid_end: int, backup: bool) -> None:
    if backup:
        bak = _backup_path(path)
        shutil.copyfile(path, bak)
        with open(bak, "rb+") as f:
            os.fsync(f.fileno())
        print(f"Original copied to {bak}")
    with open(path, "rb+") as f:
        # The file must be what we checked: a running server may be appending.
        st = os.fstat(f.fileno())
        if st.st_size != len(data):
            raise RuntimeError(
                f"the file changed while it was checked (size {len(data)} -> {st.st_size}); "
                "is the server running?"
            )
        f.truncate(valid_end)
        os.fsync(f.fileno())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    path: Path = args.file
    try:
        data = path.read_bytes()
    except OSError as e:
        print(f"Cannot read the AOF {path}: {e.strerror or e}", file=sys.stderr)
        return 2
    size = len(data)
    res = scan(data, collect=False)
    _report(path, size, res)
    if res.status == "ok":
        return 0
    if not args.fix:
        return 1
    lost = size - res.valid_end
    if res.status == "corrupt":
        assert res.error_offset is not None  # scan() sets it with every status but "ok"
        candidates, valid = records_after(data, res.error_offset)
        print(
            f"Truncating at offset {res.valid_end} drops {lost} bytes: the bad record and "
            f"about {candidates} records after it ({valid} of which look valid)."
        )
        if not args.yes and not _confirm("Continue?"):
            print("Aborted: the AOF was not changed")
            return 1
    try:
        _truncate(path, data, res.valid_end, backup=not args.no_backup)
    except (OSError, RuntimeError) as e:
        print(f"Failed to truncate the AOF: {e}", file=sys.stderr)
        return 1
    print(f"Successfully truncated AOF {path} to {res.valid_end} bytes ({lost} bytes removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
