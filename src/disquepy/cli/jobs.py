"""``disque jobs QUEUE``: peek at queued jobs with their bodies and counters."""

from __future__ import annotations

import json
import time

import click
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from .conn import Target
from .reply import quote
from .ui import console, human_age


def show_body(body: bytes, limit: int = 2000) -> str:
    """A body for display: JSON objects and arrays pretty-printed, other printable UTF-8
    as is, anything else quoted like redis-cli; cut at ``limit`` characters."""
    try:
        s = body.decode("utf-8")
    except UnicodeDecodeError:
        s = quote(body)
    else:
        if not s.replace("\n", "").replace("\t", "").isprintable():
            s = quote(body)
        try:
            doc = json.loads(s)
        except ValueError:
            doc = None
        if isinstance(doc, (dict, list)):
            s = json.dumps(doc, indent=2, ensure_ascii=False)
    if len(s) > limit:
        s = s[:limit] + f"... ({len(s) - limit} more characters)"
    return s


def age_of(show: dict[str, object], now_s: float) -> str:
    """A job's age from SHOW's ``ctime`` (nanoseconds since the epoch)."""
    ctime = show.get("ctime")
    if not isinstance(ctime, int):
        return "-"
    return human_age(now_s - ctime / 1e9)


@click.command("jobs")
@click.argument("queue")
@click.option("-c", "--count", default=10, show_default=True, type=click.IntRange(1),
              help="How many jobs to show.")
@click.option("--newest", is_flag=True, help="The newest jobs instead of the oldest.")
@click.option("--max-body", default=2000, show_default=True, type=click.IntRange(10),
              help="Cut bodies longer than this many characters.")
@click.pass_obj
def command(target: Target, queue: str, count: int, newest: bool, max_body: int) -> None:
    """Peek at QUEUE on the connected node (QPEEK, nothing is consumed): IDs, ages,
    counters (SHOW) and bodies, JSON pretty-printed."""
    c = target.client()
    peeked = c.qpeek(queue, -count if newest else count)
    qlen = c.qlen(queue)
    now = time.time()
    table = Table(title=Text(f"{queue} on {c.node}: {qlen} queued, showing {len(peeked)}"),
                  title_justify="left", show_lines=True)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("ID", "left"), ("Age", "right"), ("Nacks", "right"), ("Add. deliveries", "right"),
        ("Retry", "right"), ("Body", "left"))
    for col, just in columns:
        table.add_column(col, justify=just, no_wrap=(col == "ID"))
    for job in peeked:
        info = c.show(job.id) or {}  # acked or expired since the peek: no counters
        table.add_row(Text(job.id), age_of(info, now), str(info.get("nacks", "-")),
                      str(info.get("additional-deliveries", "-")),
                      f"{info['retry']}s" if "retry" in info else "-",
                      Text(show_body(job.body, max_body)))
    console().print(table)
