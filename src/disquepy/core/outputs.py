"""What a node asks of the world. It all comes out through one call: ``Node.take_outputs()``.

The core performs no I/O. While it runs a command, a bus message or a timer it collects
what must happen outside (cheap appends on the hot path); a shell — the server's
driver, the simulator, the test harnesses — takes everything at once as one
:class:`Outputs` and carries it out in the order of the fields below:

1. ``records``: AOF records, in order. Persist them before anything else leaves, so
   nothing a client or a peer learns can be lost by a crash.
2. ``nodes_conf``: the cluster config text to save (``nodes.conf``), when it changed.
3. ``links``: the peers to keep bus links to, ``{node id: (ip, bus port)}``, when the
   set changed; links going up or down come back as ``Node.link_state``.
4. ``messages``: one bus message per peer, ``{node id: message}`` (a BATCH of several
   when the node sent that peer more than one; see ``messages.py``), or a tuple of
   BATCHes, sent in order, past the ``MAX_ITEMS`` messages one BATCH may hold
   (``codec.bus.encode_frame`` encodes either).
5. ``replies``: ``(client, bytes)`` for clients other than the one whose command
   returned its reply (a blocked GETJOB served, a timed out one, a replicated ADDJOB).
6. ``events``: job-lifecycle events ``(ms, kind, job id, queue, extra)`` for the event
   log (only while ``event-log`` is on); before the requests, one of which may close or
   move that log (CONFIG SET event-log-dir, SHUTDOWN).
7. ``requests``: ``(client, ShellRequest)``: commands only the shell can finish (file
   I/O, exit, sleeping, CONFIG SET's effects on the shell). ``execute`` returned None
   for them: the shell sends their reply, and the client's later commands wait.
8. ``logs``: ``(level, line)`` for the server log ("warning", "notice", "verbose").
9. ``wake``: the earliest timer added since the last take (``NEVER`` if none): a shell
   that keeps one timer re-arms it at ``Node.next_wake()`` when this is earlier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .client import Client
    from .messages import Outgoing

# (ms, kind, job id, queue, extra): extra is None, (nacks, additional deliveries) for
# "delivered", (ttl, retry, delay, replicate, body length) for "added"
Event = tuple[int, str, bytes, bytes, tuple[int, ...] | None]


class ShellRequest:
    """A command the shell must finish (file I/O, exit); the shell sends its reply."""

    __slots__ = ("kind", "args")

    def __init__(self, kind: str, *args: object) -> None:
        self.kind = kind
        self.args = args

    def __repr__(self) -> str:
        return f"ShellRequest({self.kind!r}, *{self.args!r})"


# What a command returns (``Node.execute``): its RESP reply; a ShellRequest the shell
# finishes; or None when the reply comes later through take_outputs() (a blocked
# GETJOB, an ADDJOB waiting for its copies).
Reply = bytes | ShellRequest | None


@dataclass(slots=True)
class Outputs:
    records: list[bytes]
    nodes_conf: str | None
    links: dict[str, tuple[str, int]] | None
    messages: dict[str, Outgoing]
    replies: list[tuple[Client, bytes]]
    requests: list[tuple[Client | None, ShellRequest]]
    events: list[Event]
    logs: list[tuple[str, str]]
    wake: float

    def __bool__(self) -> bool:
        """Anything to carry out (``wake`` aside)."""
        return bool(self.records or self.nodes_conf is not None or self.links is not None
                    or self.messages or self.replies or self.requests or self.events
                    or self.logs)


class Shell:
    """The one path from a node's outputs to the world, shared by the server's driver,
    the simulator and the test harnesses: ``deliver`` carries out an Outputs in the
    order above, through the methods a shell overrides. A shell that has no use for
    an output (a harness with no disk) inherits a method that drops it."""

    def deliver(self, out: Outputs) -> None:
        if out.records:
            self.persist(out.records)
        if out.nodes_conf is not None:
            self.save_nodes_conf(out.nodes_conf)
        if out.links is not None:
            self.sync_links(out.links)
        if out.messages:
            self.send_messages(out.messages)
        for client, data in out.replies:
            if not client.closed:
                self.reply(client, data)
        if out.events:
            self.record_events(out.events)
        for requester, req in out.requests:
            self.finish(requester, req)
        for level, line in out.logs:
            self.log(level, line)

    def persist(self, records: list[bytes]) -> None:
        pass

    def save_nodes_conf(self, text: str) -> None:
        pass

    def sync_links(self, links: dict[str, tuple[str, int]]) -> None:
        pass

    def send_messages(self, messages: dict[str, Outgoing]) -> None:
        pass

    def reply(self, client: Client, data: bytes) -> None:
        pass

    def finish(self, client: Client | None, req: ShellRequest) -> None:
        pass

    def record_events(self, events: list[Event]) -> None:
        pass

    def log(self, level: str, line: str) -> None:
        pass
