"""``celery disquepy``: the Celery command line's plugin for disquepy.

Installed as the ``celery.commands`` entry point ``disquepy``: the ``celery`` program
loads it at start-up, which imports :mod:`disquepy.kombu` and so registers the
``disque://`` scheme before ``celery -A app worker`` (or ``inspect``, ``purge``...)
connects. ``celery -A app disquepy find TASK_ID`` finds the job carrying a Celery task
(its ID is in the job's headers) on every node and prints its status.
"""

from __future__ import annotations

import json

import click

from ..client import Disque

# (importing this module imports its package, disquepy.kombu, first: that registers
# disque:// for every celery command)

SCAN_ROUNDS = 10_000  # JSCAN calls per node at most


def find_task_jobs(client: Disque, task_id: str) -> list[str]:
    """IDs of the jobs (queued or in progress, on any node) whose kombu message is
    Celery task ``task_id``: JSCAN over every node HELLO lists."""
    from disquepy.client.nodes import fmt_addr

    needle = json.dumps(task_id).encode()
    found: list[str] = []
    addrs = [fmt_addr((n.host, n.port)) for n in client.hello().nodes if n.host]
    for addr in addrs:
        cursor = 0
        for _ in range(SCAN_ROUNDS):
            cursor, items = client.execute_on(addr, "JSCAN", cursor, "COUNT", 1000,
                                              "REPLY", "all")
            cursor = int(cursor)
            for item in items:
                fields = dict(zip(item[::2], item[1::2], strict=True))
                body = fields.get(b"body") or b""
                if b'"id": ' + needle in body:
                    jid = fields[b"id"].decode()
                    if jid not in found:
                        found.append(jid)
            if cursor == 0:
                break
    return found


@click.group("disquepy", help="disquepy: Celery tasks as Disque jobs.")
def disquepy() -> None:
    pass


@disquepy.command("find")
@click.argument("task_id")
@click.pass_context
def find(ctx: click.Context, task_id: str) -> None:
    """The Disque job(s) of Celery task TASK_ID and their status."""
    from kombu.connection import Connection

    app = ctx.obj.app
    with Connection(app.conf.broker_url, transport_options=app.conf.broker_transport_options) as conn:
        client = conn.transport.disque
        ids = find_task_jobs(client, task_id)
        if not ids:
            raise click.ClickException(f"no queued or running job carries task {task_id}")
        for jid in ids:
            st = client.status(jid)
            click.echo(f"{jid} {st.status} queue={st.queue} priority={st.priority} "
                       f"attempt={st.attempt} nodes={','.join(st.nodes)}")
