"""``disque dead QUEUE``: list dead letters, ``--requeue`` them.

The dead-letter format is the worker's (``disquepy.worker.deadletter``): the dead letters of
``Q`` are jobs in ``Q:dead`` whose body is JSON with the original queue, job ID, body
(text, or ``{"base64": ...}``), the error, counters and ``failed_at`` (unix ms).
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass

import click
from rich.table import Table
from rich.text import Text

from .conn import CliError, Target
from .jobs import show_body
from .ui import console, human_age, text


@dataclass
class Letter:
    """One dead letter as the command line shows it."""

    dead_id: str
    queue: str
    original_id: str
    body: bytes
    error: str
    nacks: int | None
    additional_deliveries: int | None
    failed_at: int | None


def dead_queue(queue: str) -> str:
    """The default dead-letter queue of ``queue``."""
    return f"{queue}:dead"


def decode_letter(dead_id: str, raw_body: bytes) -> Letter | None:
    """A dead letter from its job body, or None if the body is not in the format."""
    try:
        doc = json.loads(raw_body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "queue" not in doc:
        return None
    body = doc.get("body")
    if isinstance(body, dict) and "base64" in body:
        data = base64.b64decode(body["base64"])
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = json.dumps(body).encode()
    return Letter(dead_id, str(doc["queue"]), str(doc.get("id", "")), data,
                  str(doc.get("error", "")), doc.get("nacks"),
                  doc.get("additional_deliveries"), doc.get("failed_at"))


def list_letters(target: Target, queue: str, count: int) -> tuple[list[Letter], int]:
    """Dead letters of ``queue`` (non-consuming) and the number that are not in the
    format."""
    c = target.redis()
    letters, bad = [], 0
    for entry in c.execute_command("QPEEK", dead_queue(queue), count):
        letter = decode_letter(text(entry[1]), entry[2])
        if letter is None:
            bad += 1
        else:
            letters.append(letter)
    return letters, bad


def requeue_letters(target: Target, queue: str, ids: list[str] | None) -> int:
    """Add the original bodies back to ``queue`` and acknowledge their dead letters.

    ``ids`` selects dead letters by dead-letter job ID or by original job ID; None means
    all.
    """
    c = target.redis()
    n = int(c.execute_command("QLEN", dead_queue(queue)))
    letters, _ = list_letters(target, queue, max(n, 1))
    wanted = None if ids is None else set(ids)
    done = 0
    for letter in letters:
        if wanted is not None and not ({letter.dead_id, letter.original_id} & wanted):
            continue
        c.execute_command("ADDJOB", letter.queue or queue, letter.body, 0)
        c.execute_command("ACKJOB", letter.dead_id)
        done += 1
    return done


@click.command("dead")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--requeue", is_flag=True,
              help="Put dead letters back in QUEUE (all, or only the IDs given).")
@click.option("-c", "--count", default=100, show_default=True, type=click.IntRange(1),
              help="How many dead letters to list.")
@click.pass_obj
def command(target: Target, queue: str, ids: tuple[str, ...], requeue: bool,
            count: int) -> None:
    """List the dead letters of QUEUE (jobs in QUEUE:dead), or re-queue them with
    --requeue [ID...] (dead-letter or original job IDs)."""
    if ids and not requeue:
        raise CliError("Job IDs are only taken with --requeue")
    if requeue:
        n = requeue_letters(target, queue, list(ids) or None)
        if ids and n < len(ids):
            console().print(f"Re-queued {n} of {len(ids)} dead letters into "
                            f"{queue} (the others were not found)", markup=False)
            raise SystemExit(1)
        console().print(f"Re-queued {n} dead letters into {queue}", markup=False)
        return
    letters, bad = list_letters(target, queue, count)
    now_ms = time.time() * 1000
    table = Table(title=Text(f"Dead letters of {queue} ({dead_queue(queue)} on "
                             f"{target.addr}): {len(letters)}"),
                  title_justify="left", show_lines=True)
    for col in ("Dead-letter ID", "Original ID", "Failed", "Nacks", "Add. deliveries",
                "Error", "Body"):
        table.add_column(col, no_wrap=col.endswith("ID"))
    for d in letters:
        ago = human_age((now_ms - d.failed_at) / 1000) + " ago" if d.failed_at else "-"
        table.add_row(Text(d.dead_id), Text(d.original_id), ago, str(d.nacks),
                      str(d.additional_deliveries), Text(d.error),
                      Text(show_body(d.body, 500)))
    out = console()
    out.print(table)
    if bad:
        out.print(f"{bad} jobs in {dead_queue(queue)} are not dead letters (not shown)",
                  markup=False)
