"""The core's view of a connected client: protocol, auth, and a pending GETJOB.

The I/O shell owns the socket and stores its own handle in ``conn``; the core only
reads and writes the fields here and queues replies for the client in the node's
outbox, so the same code runs under the asyncio server and the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .acl import QueueAccess

# CLIENT REPLY: what happens to this client's replies
REPLY_ON: Final = 0
REPLY_OFF: Final = 1  # none is sent
REPLY_SKIP: Final = 2  # the reply of the command running now is not sent
REPLY_SKIP_NEXT: Final = 3  # the next command's reply is not sent (CLIENT REPLY SKIP ran)


class BlockedGet:
    """A GETJOB waiting for jobs: its queues, options, and when it gives up (ms)."""

    __slots__ = ("queues", "count", "withcounters", "deadline", "token")

    def __init__(self, queues: list[bytes], count: int, withcounters: bool, deadline: int,
                 token: bytes | None = None) -> None:
        self.queues = queues
        self.count = count
        self.withcounters = withcounters
        self.deadline = deadline  # 0 = forever
        self.token = token  # GETJOB TOKEN: remember the job this delivers


class Client:
    __slots__ = (
        "id",
        "conn",
        "addr",
        "proto",
        "authed",
        "user",
        "allowed",
        "queues",
        "auth_fails",
        "name",
        "lib_name",
        "lib_ver",
        "blocked",
        "blocked_add",
        "ctime",
        "last_cmd_time",
        "qbuf",
        "closed",
        "fd",
        "last_cmd",
        "noreply",
        "out_probe",
    )

    def __init__(self, cid: int, conn: Any = None, addr: str = "", now: int = 0) -> None:
        self.id = cid
        # the shell's own handle (a protocol, a simulated agent), opaque to the core:
        # each shell reads it back as its own type, hence Any
        self.conn = conn
        self.addr = addr
        self.proto = 2
        self.authed = False
        self.user = "default"  # the ACL user (core/acl.py)
        # the command names it may run, None for all: set at AUTH (Acl.allowed)
        self.allowed: frozenset[str] | None = None
        # the queues its user may touch, None for all: set at AUTH (Acl.queue_access)
        self.queues: QueueAccess | None = None
        self.auth_fails = 0  # failed AUTH attempts on this connection (their delay)
        self.name = b""
        self.lib_name = b""
        self.lib_ver = b""
        self.blocked: BlockedGet | None = None
        self.blocked_add: bytes | None = None  # an ADDJOB waiting for replication
        self.ctime = now
        self.last_cmd_time = now
        self.qbuf = 0  # bytes buffered by the shell, for memory accounting
        self.closed = False
        self.fd = -1  # the shell's socket descriptor (CLIENT LIST)
        self.last_cmd = "NULL"  # the last command's name (CLIENT LIST cmd=)
        self.noreply = REPLY_ON  # CLIENT REPLY
        # the shell's count of this client's replies not sent yet, (chunks, bytes), for
        # CLIENT LIST (oll, omem); None: nothing held
        self.out_probe: Callable[[], tuple[int, int]] | None = None

    def __repr__(self) -> str:
        return f"<Client id={self.id} addr={self.addr}>"
