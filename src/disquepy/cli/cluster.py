"""``disque cluster create`` and ``disque cluster nodes``."""

from __future__ import annotations

import time
from dataclasses import replace

import click
import redis
from rich.table import Table

from ..codec.nodes import NodeInfo, parse_hello
from . import RawFallbackGroup
from .conn import CliError, Target, connection_reason, parse_addr
from .ui import console, text


def hello(client: redis.Redis, reached: tuple[str, int]) -> tuple[str, list[NodeInfo]]:
    """HELLO on one node: its ID and the nodes it knows (codec.nodes.parse_hello; an
    empty host is the one ``reached``)."""
    h = parse_hello(client.execute_command("HELLO"), reached)
    return h.my_id, h.nodes


def discover(target: Target) -> list[NodeInfo]:
    """Every node the target node knows (HELLO), the target itself first."""
    my_id, nodes = hello(target.redis(), (target.host, target.port))
    nodes.sort(key=lambda n: (n.id != my_id, n.address))
    if nodes and nodes[0].id == my_id:  # the address we reached it at, not the one it learnt
        nodes[0] = replace(nodes[0], host=target.host, port=target.port)
    return nodes


class ClusterGroup(RawFallbackGroup):
    """``disque cluster`` sub-commands; others (``info``, ``meet``...) go to CLUSTER."""

    raw_prefix = ("CLUSTER",)


@click.group("cluster", cls=ClusterGroup)
def command() -> None:
    """Create a cluster or show its nodes (other sub-commands are sent as CLUSTER ...)."""


def _connect_all(target: Target, addrs: list[tuple[str, int]]) -> list[redis.Redis]:
    clients = []
    for host, port in addrs:
        c = target.redis(host, port, socket_timeout=5)
        try:
            c.ping()
        except redis.ConnectionError as e:
            raise CliError(f"Could not connect to Disque at {host}:{port}: "
                           f"{connection_reason(e)}") from None
        clients.append(c)
    return clients


def _converged(clients: list[redis.Redis], addrs: list[tuple[str, int]],
               ids: list[str]) -> tuple[bool, list[list[NodeInfo]]]:
    views: list[list[NodeInfo]] = []
    ok = True
    for c, addr in zip(clients, addrs, strict=True):
        try:
            _, nodes = hello(c, addr)
        except redis.RedisError:
            views.append([])
            ok = False
            continue
        views.append(nodes)
        seen = {n.id: n.priority for n in nodes}
        if not all(seen.get(i) == 1 for i in ids):
            ok = False
    return ok, views


@command.command("create")
@click.argument("nodes", nargs=-1, required=True)
@click.option("--timeout", default=30.0, show_default=True,
              help="Seconds to wait for every node to see every other one.")
@click.pass_obj
def create(target: Target, nodes: tuple[str, ...], timeout: float) -> None:
    """Join NODES (HOST:PORT ...) into one cluster: MEET each with the first, then wait
    until HELLO on every node shows every node reachable."""
    addrs = [parse_addr(n, target.host) for n in nodes]
    if len(set(addrs)) != len(addrs):
        raise CliError("The same node is listed twice")
    clients = _connect_all(target, addrs)
    ids = [text(c.execute_command("CLUSTER", "MYID")) for c in clients]
    if len(set(ids)) != len(ids):
        raise CliError("Two addresses reach the same node (same node ID)")
    first = clients[0]
    for host, port in addrs[1:]:
        first.execute_command("CLUSTER", "MEET", host, port)
    err = console(stderr=True)
    deadline = time.monotonic() + timeout
    with err.status(f"Waiting for {len(ids)} nodes to see each other..."):
        while True:
            ok, views = _converged(clients, addrs, ids)
            if ok or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    table = Table(title="Disque cluster", title_justify="left")
    for col in ("Address", "Node ID", "Knows", "Reachable"):
        table.add_column(col)
    for (host, port), nid, view in zip(addrs, ids, views, strict=True):
        reachable = sum(1 for n in view if n.id in ids and n.priority == 1)
        table.add_row(f"{host}:{port}", nid, str(len(view)), f"{reachable}/{len(ids)}")
    out = console()
    out.print(table)
    if not ok:
        raise CliError(f"The cluster did not converge within {timeout:g}s "
                       "(see the Reachable column)")
    out.print(f"[green]OK[/green]: {len(ids)} nodes, every node sees every node.")


@command.command("nodes")
@click.pass_obj
def nodes_cmd(target: Target) -> None:
    """The nodes the connected node knows: ID, address, flags, link and priority."""
    c = target.redis()
    listing = text(c.execute_command("CLUSTER", "NODES"))
    _, known = hello(c, (target.host, target.port))
    prio = {n.id: n.priority for n in known}
    table = Table(title=f"Nodes known by {target.addr}", title_justify="left")
    for col in ("Node ID", "Address", "Flags", "Link", "Priority"):
        table.add_column(col)
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        nid, addr, flags = parts[0], parts[1], parts[2]
        if addr.startswith(":"):
            addr = (target.host if "myself" in flags.split(",") else "?") + addr
        link = parts[5] if len(parts) > 5 else "-"
        table.add_row(nid, addr, flags, link, str(prio.get(nid, "-")))
    console().print(table)
