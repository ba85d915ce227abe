"""CLUSTER: MEET, NODES, INFO, MYID, FORGET, LEAVING, RESET, SAVECONFIG."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Final

from ...codec import resp
from ..errors import ReplyError
from ..outputs import ClusterMeet, ClusterSaveConfig, ShellRequest

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node

_WRONG: Final = "ERR Wrong CLUSTER subcommand or number of arguments"


def cluster(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    sub = argv[1].lower()
    n = len(argv)
    if sub == b"meet" and n == 4:
        ip = argv[2].decode("utf-8", "replace")
        port = argv[3].decode("utf-8", "replace")
        if not port.isdigit() or not 0 < int(port) < 65536 - node.config.cluster_port_offset:
            raise ReplyError(f"ERR Invalid TCP port specified: {port}")
        if ip != "localhost":
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ReplyError(f"ERR Invalid node address specified: {ip}:{port}") from None
        if node.probe_meet:  # the shell checks the bus first (cluster-secret, TLS)
            return ClusterMeet(ip, int(port))
        node.members.meet(ip, int(port), now)
        return resp.OK
    if sub == b"nodes" and n == 2:
        return resp.bulk(node.members.nodes_text(now).encode())
    if sub == b"info" and n == 2:
        return resp.bulk(node.members.info().encode())
    if sub == b"myid" and n == 2:
        return resp.bulk(node.myid_b)
    if sub == b"forget" and n == 3:
        nid = argv[2].decode("utf-8", "replace")
        if len(nid) != 40:
            raise ReplyError("ERR Invalid node identifier")
        if nid == node.myid:
            raise ReplyError("ERR I tried hard but I can't forget myself...")
        if nid not in node.members.peers:
            raise ReplyError(f"ERR Unknown node {nid}")
        node.members.forget(nid)
        return resp.OK
    if sub == b"leaving" and n == 2:
        return resp.simple(b"yes" if node.leaving else b"no")
    if sub == b"leaving" and n == 3:
        v = argv[2].lower()
        if v not in (b"yes", b"no"):
            raise ReplyError("ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
        node.set_leaving(v == b"yes", now)
        return resp.OK
    if sub == b"reset" and n in (2, 3):
        how = argv[2].lower() if n == 3 else b"soft"
        if how not in (b"soft", b"hard"):
            raise ReplyError("ERR syntax error")
        node.cluster_reset(how == b"hard", now)
        return resp.OK
    if sub == b"saveconfig" and n == 2:
        return ClusterSaveConfig()
    raise ReplyError(_WRONG)
