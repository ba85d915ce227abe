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
5. ``pause``: CLIENT PAUSE / UNPAUSE changed when clients' commands may run again:
   the time (ms) until which the shell runs none (0: run them now); None: unchanged.
   Before the replies: a reply that resumes a client's pipeline must find it set.
6. ``replies``: ``(client, bytes)`` for clients other than the one whose command
   returned its reply (a blocked GETJOB served, a timed out one, a replicated ADDJOB).
7. ``events``: job-lifecycle events ``(ms, kind, job id, queue, extra)`` for the event
   log (only while ``event-log`` is on); before the requests, one of which may close or
   move that log (CONFIG SET event-log-dir, SHUTDOWN).
8. ``requests``: ``(client, ShellRequest)``: commands only the shell can finish (file
   I/O, exit, sleeping, INFO's process facts, CONFIG SET's effects on the shell), one
   frozen dataclass per kind (below). ``execute`` returned None for them: the shell
   sends their reply (``Shell.finish``), and the client's later commands wait.
9. ``kills``: ``(client, bytes)``: connections to close (CLIENT KILL) after sending
   those bytes (the reply of a client that killed itself, else empty).
10. ``monitor``: ``(client, bytes)``: the MONITOR feed of the commands run since the
    last take, for each monitor (the same bytes for all); the shell bounds what a slow
    one may hold.
11. ``logs``: ``(level, line)`` for the server log ("warning", "notice", "verbose").
12. ``wake``: the earliest timer added since the last take (``NEVER`` if none): a shell
    that keeps one timer re-arms it at ``Node.next_wake()`` when this is earlier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from ..codec import resp

if TYPE_CHECKING:
    from .client import Client
    from .messages import Outgoing

# (ms, kind, job id, queue, extra): extra is None, (nacks, additional deliveries) for
# "delivered", (ttl, retry, delay, replicate, body length) for "added"
Event = tuple[int, str, bytes, bytes, tuple[int, ...] | None]


class ShellRequest:
    """A command only the shell can finish (file I/O, exit, sleeping, the process's
    facts); the shell sends its reply. One frozen dataclass per kind, below; a shell
    carries one out in :meth:`Shell.finish`."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Info(ShellRequest):
    """INFO [section]: the shell reads the process's facts and hands them to
    ``Node.info`` (core/info.py), which answers."""

    section: str


@dataclass(frozen=True, slots=True)
class ConfigChanged(ShellRequest):
    """CONFIG SET changed these directives (the core applied its part already): the
    shell applies its own (log level, AOF, event log, idle timeout...), then answers."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ConfigRewrite(ShellRequest):
    """CONFIG REWRITE: the config file, rewritten with the live values."""


@dataclass(frozen=True, slots=True)
class BgRewriteAof(ShellRequest):
    """BGREWRITEAOF."""


@dataclass(frozen=True, slots=True)
class ClusterSaveConfig(ShellRequest):
    """CLUSTER SAVECONFIG: nodes.conf, written now."""


@dataclass(frozen=True, slots=True)
class ClusterMeet(ShellRequest):
    """CLUSTER MEET with ``Node.probe_meet``: the shell checks the peer's bus first
    (cluster-secret, TLS), then meets it (``Membership.meet``) or says why not."""

    ip: str
    port: int


@dataclass(frozen=True, slots=True)
class Shutdown(ShellRequest):
    """SHUTDOWN [REWRITE-AOF]: ``how`` is "" or "rewrite-aof"."""

    how: str


@dataclass(frozen=True, slots=True)
class Quit(ShellRequest):
    """QUIT: +OK, then the connection closes."""


@dataclass(frozen=True, slots=True)
class SecurityAbort(ShellRequest):
    """An HTTP request line on the Disque port (cross-protocol scripting): the
    connection closes before anything else it sent runs."""


@dataclass(frozen=True, slots=True)
class AuthFailed(ShellRequest):
    """A failed AUTH: ``error`` (a RESP error) is the reply, after ``delay_ms``."""

    delay_ms: int
    error: bytes


@dataclass(frozen=True, slots=True)
class AuthWait(ShellRequest):
    """An AUTH (or HELLO ... AUTH) from an address with too many recent failures
    (core/authlimit.py): the shell runs ``argv`` again for the client after
    ``delay_ms``; the client's later commands wait."""

    delay_ms: int
    argv: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class DebugSleep(ShellRequest):
    """DEBUG SLEEP: the whole process sleeps (as Redis's does)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class BusDrop(ShellRequest):
    """DEBUG BUS-DROP <node id|*> on|off (fault tests): drop that bus traffic."""

    node_id: str
    on: bool


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
    requests: list[tuple[Client, ShellRequest]]
    events: list[Event]
    logs: list[tuple[str, str]]
    wake: float
    pause: int | None = None
    kills: list[tuple[Client, bytes]] | None = None
    monitor: list[tuple[Client, bytes]] | None = None

    def __bool__(self) -> bool:
        """Anything to carry out (``wake`` aside)."""
        return bool(self.records or self.nodes_conf is not None or self.links is not None
                    or self.messages or self.replies or self.requests or self.events
                    or self.logs or self.pause is not None or self.kills or self.monitor)


@mypyc_attr(allow_interpreted_subclasses=True)  # (the simulator's, the test harnesses')
class Shell:
    """The one path from a node's outputs to the world, shared by the server's driver,
    the simulator and the test harnesses: ``deliver`` carries out an Outputs in the
    order above, and ``finish`` a shell request by its type, through the methods a
    shell overrides. A shell that has no use for an output (a harness with no disk)
    inherits a method that drops it; one that cannot finish a request inherits one
    that answers so (``unsupported``)."""

    def deliver(self, out: Outputs) -> None:
        if out.records:
            self.persist(out.records)
        if out.nodes_conf is not None:
            self.save_nodes_conf(out.nodes_conf)
        if out.links is not None:
            self.sync_links(out.links)
        if out.messages:
            self.send_messages(out.messages)
        if out.pause is not None:
            self.pause_clients(out.pause)
        for client, data in out.replies:
            if not client.closed:
                self.reply(client, data)
        if out.events:
            self.record_events(out.events)
        for requester, req in out.requests:
            self.finish(requester, req)
        if out.kills:
            for client, data in out.kills:
                if not client.closed:
                    self.kill(client, data)
        if out.monitor:
            for client, data in out.monitor:
                if not client.closed:
                    self.feed_monitor(client, data)
        for level, line in out.logs:
            self.log(level, line)

    def finish(self, client: Client, req: ShellRequest) -> None:
        """Carry out a shell request: the method of its kind returns the reply, sent
        here, or None when it answers (or closes) the connection itself."""
        reply: bytes | None
        match req:
            case ConfigChanged(names):
                self.config_changed(names)
                reply = resp.OK
            case Info(section):
                reply = self.info(section)
            case ConfigRewrite():
                reply = self.config_rewrite()
            case BgRewriteAof():
                reply = self.bgrewriteaof()
            case ClusterSaveConfig():
                reply = self.cluster_saveconfig()
            case DebugSleep(seconds):
                reply = self.debug_sleep(seconds)
            case BusDrop(node_id, on):
                reply = self.bus_drop(node_id, on)
            case Quit():
                reply = self.quit(client)
            case SecurityAbort():
                reply = self.security_abort(client)
            case AuthFailed(delay_ms, error):
                reply = self.auth_failed(client, delay_ms, error)
            case AuthWait(delay_ms, argv):
                reply = self.auth_wait(client, delay_ms, argv)
            case ClusterMeet(ip, port):
                reply = self.cluster_meet(client, ip, port)
            case Shutdown(how):
                reply = self.shutdown_requested(client, how)
            case _:
                reply = self.unsupported(req)
        if reply is not None and not client.closed:
            self.answer(client, reply)

    # the outputs
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

    def pause_clients(self, until: int) -> None:
        pass

    def kill(self, client: Client, data: bytes) -> None:
        pass

    def feed_monitor(self, client: Client, data: bytes) -> None:
        pass

    def record_events(self, events: list[Event]) -> None:
        pass

    def log(self, level: str, line: str) -> None:
        pass

    # the requests: each returns the reply for ``answer``, or None
    def answer(self, client: Client, data: bytes) -> None:
        """The reply to a client's shell request (its later commands waited for it)."""

    def unsupported(self, req: ShellRequest) -> bytes:
        return resp.error(f"ERR unsupported request {type(req).__name__}")

    def config_changed(self, names: tuple[str, ...]) -> None:
        pass

    def info(self, section: str) -> bytes | None:
        return self.unsupported(Info(section))

    def config_rewrite(self) -> bytes | None:
        return self.unsupported(ConfigRewrite())

    def bgrewriteaof(self) -> bytes | None:
        return self.unsupported(BgRewriteAof())

    def cluster_saveconfig(self) -> bytes | None:
        return self.unsupported(ClusterSaveConfig())

    def debug_sleep(self, seconds: float) -> bytes | None:
        return self.unsupported(DebugSleep(seconds))

    def bus_drop(self, node_id: str, on: bool) -> bytes | None:
        return self.unsupported(BusDrop(node_id, on))

    def quit(self, client: Client) -> bytes | None:
        return self.unsupported(Quit())

    def security_abort(self, client: Client) -> bytes | None:
        return self.unsupported(SecurityAbort())

    def auth_failed(self, client: Client, delay_ms: int, error: bytes) -> bytes | None:
        return self.unsupported(AuthFailed(delay_ms, error))

    def auth_wait(self, client: Client, delay_ms: int, argv: tuple[bytes, ...]) -> bytes | None:
        return self.unsupported(AuthWait(delay_ms, argv))

    def cluster_meet(self, client: Client, ip: str, port: int) -> bytes | None:
        return self.unsupported(ClusterMeet(ip, port))

    def shutdown_requested(self, client: Client, how: str) -> bytes | None:
        return self.unsupported(Shutdown(how))
