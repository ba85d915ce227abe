"""``disque groups [QUEUE...]``: the consumer groups of event queues (QSTATUS) as a
table, and a group's dead letters (``--dead``, requeued with ``--requeue``)."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from .conn import CliError, Target
from .jobs import show_body
from .ui import console, human_age

_COLUMNS = ("total", "inprogress", "redo", "done", "available", "consumers", "dead", "lag",
            "pending")


@click.command("groups")
@click.argument("queues", nargs=-1)
@click.option("-g", "--group", "groups", multiple=True,
              help="Only this consumer group (repeatable); shown even if it never consumed.")
@click.option("--dead", is_flag=True,
              help="List the dead letters of QUEUE for --group (one of each).")
@click.option("--requeue", "requeue", multiple=True, metavar="ID",
              help="With --dead: give these dead letters back to the group (repeatable).")
@click.pass_obj
def command(target: Target, queues: tuple[str, ...], groups: tuple[str, ...], dead: bool,
            requeue: tuple[str, ...]) -> None:
    """Per event queue and consumer group, on the connected node: events in total, in
    progress, to redo, done, available, waiting consumers, dead letters, lag (waiting
    to be delivered), pending (delivered, not acked) and the oldest pending age."""
    c = target.client()
    out = console()
    if requeue and not dead:
        raise CliError("--requeue is only taken with --dead")
    if dead:
        if len(queues) != 1 or len(groups) != 1:
            raise CliError("--dead needs one QUEUE and one --group")
        q, g = queues[0], groups[0]
        if requeue:
            n = c.qrequeue(q, g, *requeue)
            out.print(f"Requeued {n} of {len(requeue)} dead letters of {q} for {g}",
                      markup=False)
            raise SystemExit(0 if n == len(requeue) else 1)
        table = Table(title=Text(f"Dead letters of {q} for group {g} on {c.node}"),
                      title_justify="left", show_lines=True)
        for col in ("Event ID", "Deliveries", "Contents"):
            table.add_column(col, no_wrap=col == "Event ID")
        for e in c.qdead(q, g):
            table.add_row(e.id, str(e.deliveries), show_body(e.body))
        out.print(table)
        return
    status = c.qstatus(*queues, groups=list(groups) or None)
    table = Table(title=Text(f"Consumer groups on {c.node}"), title_justify="left")
    for col in ("Queue", "Group", *_COLUMNS, "oldest pending"):
        table.add_column(col, justify="left" if col in ("Queue", "Group") else "right")
    for qname, per in status.items():
        if not per:
            table.add_row(qname, "-", *[""] * (len(_COLUMNS) + 1))
        for g, st in per.items():
            ms = st.get("oldest-pending-ms", 0)
            table.add_row(qname, g, *(str(st.get(k, "")) for k in _COLUMNS),
                          human_age(ms / 1000) if ms else "-")
    out.print(table)
