"""``disque dead QUEUE``: list dead letters, ``--requeue`` them.

Dead letters are the worker's (:mod:`disquepy.client.deadletter`): the dead letters of
``Q`` are jobs in ``Q:dead`` whose body is JSON with the original queue, job ID, body,
the error, counters and ``failed_at``. Listing and re-queueing use that module's
``list_dead`` and ``requeue_dead`` through the disquepy client.
"""

from __future__ import annotations

import time

import click
from rich.table import Table
from rich.text import Text

from .conn import CliError, Target
from .jobs import show_body
from .ui import console, human_age


@click.command("dead")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--requeue", is_flag=True,
              help="Put dead letters back in their queue (all, or only the IDs given).")
@click.option("-c", "--count", default=100, show_default=True, type=click.IntRange(1),
              help="How many dead letters to list.")
@click.option("--pattern", default="{queue}:dead", show_default=True,
              help="Name of the dead-letter queue ({queue} is QUEUE), as the worker's.")
@click.pass_obj
def command(target: Target, queue: str, ids: tuple[str, ...], requeue: bool, count: int,
            pattern: str) -> None:
    """List the dead letters of QUEUE (jobs in QUEUE:dead on the connected node), or
    re-queue them with --requeue [ID...] (dead-letter or original job IDs)."""
    from disquepy.client.deadletter import dead_queue_name
    from disquepy.client.deadqueue import list_dead, requeue_dead

    if ids and not requeue:
        raise CliError("Job IDs are only taken with --requeue")
    if "{queue}" not in pattern:
        raise CliError("--pattern must contain {queue}")
    c = target.client()
    dq = dead_queue_name(queue, pattern)
    out = console()
    if requeue:
        n = requeue_dead(c, queue, list(ids) or None, pattern=pattern)
        if ids and n < len(ids):
            out.print(f"Re-queued {n} of {len(ids)} dead letters of {queue} "
                      "(the others were not found)", markup=False)
            raise SystemExit(1)
        out.print(f"Re-queued {n} dead letters of {queue}", markup=False)
        return
    letters = list_dead(c, queue, count, pattern=pattern)
    waiting = c.qlen(dq)
    now_ms = time.time() * 1000
    table = Table(title=Text(f"Dead letters of {queue} ({dq} on {c.node}): {waiting}"),
                  title_justify="left", show_lines=True)
    for col in ("Dead-letter ID", "Original ID", "Failed", "Nacks", "Add. deliveries",
                "Error", "Body"):
        table.add_column(col, no_wrap=col.endswith("ID"))
    for d in letters:
        ago = human_age((now_ms - d.failed_at) / 1000) + " ago" if d.failed_at else "-"
        table.add_row(Text(d.id), Text(d.original_id), ago, str(d.nacks),
                      str(d.additional_deliveries), Text(d.error),
                      Text(show_body(d.body, 500)))
    out.print(table)
    other = min(waiting, count) - len(letters)
    if other > 0:
        out.print(f"{other} jobs in {dq} are not dead letters (not shown)", markup=False)
