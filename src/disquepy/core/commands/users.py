"""Who a connection is: AUTH, HELLO (Disque's and Redis's handshake) and ACL.

The users and what each may run live in ``core/acl.py``; here a connection logs in
(``AUTH``, ``HELLO 3 AUTH``), which sets the set of commands it may run once, and a
failed attempt is answered later by the shell (``AuthFailed``: the delay).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import __version__
from ...codec import resp
from .. import acl as aclmod
from .. import errors
from ..authlimit import source
from ..errors import ReplyError
from ..outputs import AuthFailed, AuthWait, ShellRequest
from .args import to_int

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node


def auth(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    """AUTH password (the default user's), or AUTH username password."""
    n = len(argv)
    if n > 3:
        raise ReplyError(errors.SYNTAX)
    if n == 2:
        if not node.acl.needs_password():
            raise ReplyError(errors.AUTH_NOT_SET)
        name = "default"
    else:
        name = argv[1].decode("utf-8", "surrogateescape")
    wait = node.acl.throttle.wait(source(client.addr), now)
    if wait:  # too many failures from this address: checked later (authlimit.py)
        return AuthWait(wait, tuple(argv))
    if login(node, client, name, argv[-1]):
        return resp.OK
    if n == 2:  # Disque's form, as Disque: a wrong password logs the connection out
        client.authed, client.allowed = node.acl.default_state
        client.user = "default"
    return auth_failed(node, client, name,
                       errors.INVALID_PASSWORD if n == 2 else errors.WRONGPASS, now)


def login(node: Node, client: Client, name: str, password: bytes) -> bool:
    """Authenticate the connection as ``name``; what it may run is set here, once."""
    acl = node.acl
    if acl.authenticate(name, password.decode("utf-8", "surrogateescape")) is None:
        return False
    client.authed = True
    client.user = name
    client.allowed = acl.allowed(name)
    client.queues = acl.queue_access(name)
    client.auth_fails = 0
    return True


def auth_failed(node: Node, client: Client, name: str, error: str, now: int) -> ShellRequest:
    """The error comes after a delay that doubles with each failure on the connection
    (the shell waits without blocking anyone else; later commands of this client
    wait too); the attempt is logged, at most one line a second. A failed ``AUTH user
    pass`` or ``HELLO ... AUTH`` leaves the connection as it was (Redis 6); a failed
    one-argument ``AUTH pass`` logged it out already (Disque)."""
    client.auth_fails += 1
    node.acl.throttle.failed(source(client.addr), now)
    delay, line = node.acl.auth_failed(name, client.addr, client.auth_fails, now)
    if line is not None:
        node.logs_out.append(("warning", line))
    return AuthFailed(delay, resp.error(error))


def require(node: Node, client: Client, name: str) -> None:
    """A subcommand allowed one by one (``client|list``): NOPERM unless the user may."""
    allowed = client.allowed
    if allowed is not None and name not in allowed:
        node.acl.denied += 1
        raise ReplyError(errors.noperm(client.user, name))


def acl(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """ACL WHOAMI | CAT [category] | USERS | LIST | GETUSER name (users come from the
    ``user`` config lines; see core/acl.py)."""
    sub = argv[1].lower().decode("utf-8", "replace")
    n = len(argv)
    lo, hi = {"cat": (2, 3), "getuser": (3, 3)}.get(sub, (2, 2))
    if sub not in aclmod.SUBCOMMANDS["acl"] or not lo <= n <= hi:
        raise ReplyError(f"ERR unknown subcommand or wrong number of arguments for "
                         f"'{argv[1].decode(errors='replace')}'. Try ACL HELP.")
    require(node, client, "acl|" + sub)
    users = node.acl.users
    if sub == "whoami":
        return resp.bulk(client.user.encode())
    if sub == "users":
        return resp.bulk_array([u.encode() for u in sorted(users)])
    if sub == "list":
        return resp.bulk_array([users[u].describe().encode() for u in sorted(users)])
    if sub == "getuser":
        u = users.get(argv[2].decode("utf-8", "surrogateescape"))
        if u is None:
            return resp.null_bulk(client.proto)
        return resp.encode({
            "flags": ["on" if u.enabled else "off", *(["nopass"] if u.nopass else [])],
            "passwords": list(u.hashes),
            "commands": " ".join(u.rules or ["nocommands"]),
        }, client.proto)
    if n == 2:  # cat
        return resp.bulk_array([c.encode() for c in aclmod.category_names()])
    names = aclmod.category_commands(argv[2].lower().decode("utf-8", "replace"),
                                     node.acl.known)
    if names is None:
        raise ReplyError(f"ERR Unknown category '{argv[2].decode(errors='replace')}'")
    return resp.bulk_array([c.encode() for c in names])


def hello(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    """Plain HELLO is Disque's node list; HELLO <protover> ... is Redis's handshake."""
    if len(argv) == 1:
        if not client.authed:
            return resp.error(errors.NOAUTH)
        return disque_hello(node)
    return redis_hello(node, client, argv, now)


def disque_hello(node: Node) -> bytes:
    nodes = [resp.bulk_array([n[0], n[1], b"%d" % n[2], b"%d" % n[3]])
             for n in node.members.hello_nodes()]
    return resp.array([resp.ONE, resp.bulk(node.myid_b), *nodes])


def redis_hello(node: Node, client: Client, argv: list[bytes], now: int) -> bytes | ShellRequest:
    ver = to_int(argv[1])
    if ver is None:
        raise ReplyError("ERR Protocol version is not an integer or out of range")
    if ver not in (2, 3):
        raise ReplyError("NOPROTO unsupported protocol version")
    j = 2
    n = len(argv)
    name = None
    creds: tuple[str, bytes] | None = None
    while j < n:
        opt = argv[j].lower()
        if opt == b"auth" and j + 2 < n:
            creds = (argv[j + 1].decode("utf-8", "surrogateescape"), argv[j + 2])
            j += 3
        elif opt == b"setname" and j + 1 < n:
            name = argv[j + 1]
            j += 2
        else:
            raise ReplyError(f"ERR Syntax error in HELLO option '{argv[j].decode(errors='replace')}'")
    if creds is not None and (wait := node.acl.throttle.wait(source(client.addr), now)):
        return AuthWait(wait, tuple(argv))
    if creds is not None and not login(node, client, *creds):
        return auth_failed(node, client, creds[0], errors.WRONGPASS, now)
    if not client.authed:
        raise ReplyError(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
            "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client "
            "and select the RESP protocol version at the same time"
        )
    client.proto = ver
    if name is not None:
        client.name = name
    return resp.encode({
        "server": "disque",
        "version": __version__,
        "proto": ver,
        "id": client.id,
        "mode": "cluster" if node.size > 1 else "standalone",
        "role": "master",
        "modules": [],
    }, ver)
