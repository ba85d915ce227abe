"""The directive table: everything known about a configuration directive (its type,
default, limits, whether CONFIG SET may change it, the reason printed when a config
file gives it a bad value, its one-line doc) in exactly one place, its entry in
:data:`DIRECTIVES`; and the directives refused with a reason (:data:`UNSUPPORTED`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from difflib import get_close_matches
from typing import Any

from .configlex import GB, INT_MAX, LLONG_MAX, LLONG_MIN, MB, UINT_MAX
from .configtypes import (
    AddressListType,
    BoolType,
    EnumType,
    IntType,
    Invalid,
    MaxmemoryPolicyType,
    MemoryType,
    OctalType,
    OutputBufferLimit,
    OutputBufferLimitType,
    RenameType,
    SecretType,
    StringType,
    TlsProtocolsType,
    UserType,
    ValueType,
)

__all__ = [
    "BAD_DIRECTIVE", "DIRECTIVES", "UNSUPPORTED", "Directive", "close_names", "directive",
    "suggest",
]

BAD_DIRECTIVE = "Bad directive or wrong number of arguments"
# directives Disque or Redis know that disquepy refuses, with the reason (a directive
# either works or is refused: none is accepted and ignored)
UNSUPPORTED = {
    "include": "The include directive is not supported",
    "maxmemory-samples": (
        "maxmemory-samples is not supported: disquepy does not sample, it evicts exactly, "
        "oldest first (acknowledged jobs, delivered at-most-once jobs, then empty idle "
        "queues); remove the line"),
    "databases": (
        "databases is not supported: disquepy has one keyspace, as Disque (SELECT accepts "
        "only 0); remove the line"),
    "activerehashing": (
        "activerehashing is not supported: disquepy's tables are Python dicts, which "
        "resize as they grow; there is no rehashing to run in the cron or to turn off; "
        "remove the line"),
}


class Directive:
    """One configuration directive.

    ``name`` is the lower-case directive name, ``attr`` the :class:`Config`
    attribute (``name`` with ``-`` -> ``_``), ``default`` its default value
    (in attribute form), ``mutable`` whether CONFIG SET may change it,
    ``gettable`` whether CONFIG GET shows it, ``rewritable`` whether CONFIG
    REWRITE manages its lines, ``repeatable`` whether each occurrence adds to
    a list instead of replacing the value, ``error`` the reason reported for
    a bad value in a config file, ``doc`` a one-line description.
    """

    __slots__ = (
        "name",
        "attr",
        "type",
        "default",
        "mutable",
        "gettable",
        "rewritable",
        "repeatable",
        "error",
        "doc",
    )

    def __init__(
        self,
        name: str,
        type_: ValueType,
        default: Any,
        *,
        mutable: bool = False,
        gettable: bool = True,
        rewritable: bool = True,
        repeatable: bool = False,
        error: str | None = None,
        doc: str = "",
    ) -> None:
        self.name = name
        self.attr = name.replace("-", "_")
        self.type = type_
        self.default = default
        self.mutable = mutable
        self.gettable = gettable
        self.rewritable = rewritable
        self.repeatable = repeatable
        self.error = error
        self.doc = doc

    def __repr__(self) -> str:
        return f"Directive({self.name!r}, default={self.render(self.default)!r})"

    def parse(self, args: Sequence[str]) -> Any:
        """Parse config-line arguments; raises ``Invalid`` with the reason."""
        try:
            return self.type.parse(args)
        except Invalid as exc:
            raise Invalid(
                exc.reason or self.error or self.type.fallback_reason(self.name)
            ) from None

    def render(self, value: Any) -> str:
        return self.type.render(value)


_BOOL = BoolType()

DIRECTIVES: tuple[Directive, ...] = (
    # --- general --------------------------------------------------------
    Directive("daemonize", _BOOL, False, doc="Run in the background."),
    Directive("pidfile", StringType(), "/var/run/disque.pid",
              doc="Pid file written when daemonized."),
    Directive(
        "port",
        IntType(0, 65535),
        7711,
        error="Invalid port",
        doc="TCP port for clients; 0 disables the TCP listener.",
    ),
    Directive(
        "cluster-port-offset",
        IntType(1, 65535),
        10000,
        error="Invalid cluster port offset",
        doc="disquepy: the cluster bus listens on port + this offset.",
    ),
    Directive(
        "tcp-backlog",
        IntType(0, INT_MAX),
        511,
        error="Invalid backlog value",
        doc="listen() backlog.",
    ),
    Directive(
        "bind",
        AddressListType(16),
        ["127.0.0.1"],
        error="Invalid bind address",
        doc="Addresses to listen on (disquepy default: loopback only).",
    ),
    Directive(
        "protected-mode",
        _BOOL,
        True,
        mutable=True,
        doc="disquepy: without requirepass, refuse to listen on non-loopback addresses.",
    ),
    Directive(
        "unixsocket",
        StringType(omit_empty=True),
        "",
        doc="Unix socket path; empty means no Unix socket.",
    ),
    Directive(
        "unixsocketperm",
        OctalType(0o777),
        0,
        error="Invalid socket file permissions",
        doc="Octal permissions of the Unix socket (0 = default).",
    ),
    Directive(
        "timeout",
        IntType(0, LLONG_MAX),
        0,
        mutable=True,
        error="Invalid timeout value",
        doc="Close clients idle for this many seconds (0 = never).",
    ),
    Directive(
        "tcp-keepalive",
        IntType(0, INT_MAX),
        0,
        mutable=True,
        error="Invalid tcp-keepalive value",
        doc="SO_KEEPALIVE period in seconds (0 = off).",
    ),
    Directive(
        "loglevel",
        EnumType("debug", "verbose", "notice", "warning"),
        "notice",
        mutable=True,
        error="Invalid log level. Must be one of debug, verbose, notice, warning",
        doc="Log verbosity.",
    ),
    Directive("logfile", StringType(), "", doc="Log file; empty logs to standard output."),
    Directive("syslog-enabled", _BOOL, False, doc="Also log to syslog."),
    Directive("syslog-ident", StringType(), "disque", doc="Syslog identity."),
    Directive(
        "syslog-facility",
        EnumType("user", *(f"local{n}" for n in range(8))),
        "local0",
        error="Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7",
        doc="Syslog facility.",
    ),
    Directive("dir", StringType(), "./", mutable=True, doc="Working directory (AOF lives here)."),
    # --- security -------------------------------------------------------
    Directive(
        "requirepass",
        StringType(max_len=512, omit_empty=True),
        "",
        mutable=True,
        error="Password is longer than CONFIG_AUTHPASS_MAX_LEN (512)",
        doc="Password clients must AUTH with; empty means none.",
    ),
    Directive(
        "rename-command",
        RenameType(),
        [],
        gettable=False,
        rewritable=False,
        repeatable=True,
        doc="Rename (or, with an empty name, remove) a command.",
    ),
    Directive(
        "user",
        UserType(),
        [],
        gettable=False,
        rewritable=False,
        repeatable=True,
        doc=("A user, as Redis's: user <name> [on|off] [>password|#sha256-hex|nopass]... "
             "[+@admin|+@producer|+@consumer|+@read|+command|-command]... (docs/SECURITY.md)."),
    ),
    # --- TLS (Redis's directives) ----------------------------------------
    Directive(
        "tls-port",
        IntType(0, 65535),
        0,
        error="Invalid tls-port",
        doc="TLS port for clients, beside the plain one (0 = no TLS listener; port 0 "
        "with a tls-port serves TLS only).",
    ),
    Directive(
        "tls-cert-file",
        StringType(omit_empty=True),
        "",
        doc="PEM certificate this node shows to clients and, with tls-cluster, to peers "
        "(and as a client certificate to the peers it connects to).",
    ),
    Directive("tls-key-file", StringType(omit_empty=True), "",
              doc="PEM private key of tls-cert-file."),
    Directive(
        "tls-ca-cert-file",
        StringType(omit_empty=True),
        "",
        doc="PEM bundle of the CA certificates that client and peer certificates must "
        "chain to.",
    ),
    Directive(
        "tls-auth-clients",
        EnumType("yes", "no", "optional"),
        "yes",
        error="argument must be 'yes', 'no' or 'optional'",
        doc="TLS clients must show a certificate signed by tls-ca-cert-file (yes, as "
        "Redis: mutual TLS), need not (no), or may (optional: checked when shown).",
    ),
    Directive(
        "tls-cluster",
        _BOOL,
        False,
        doc="The cluster bus over mutual TLS (every peer shows a certificate signed by "
        "tls-ca-cert-file); the node then announces tls-port as its port.",
    ),
    Directive(
        "tls-cluster-peer-name",
        StringType(omit_empty=True),
        "",
        doc="disquepy: which certificates are cluster nodes' with tls-cluster: glob "
        "patterns, one quoted argument, one of which a peer certificate's common name or "
        "a DNS name of its subjectAltName must match (e.g. \"node-*\"); empty = any "
        "certificate signed by tls-ca-cert-file, clients' included.",
    ),
    Directive(
        "tls-protocols",
        TlsProtocolsType(),
        "TLSv1.2 TLSv1.3",
        doc="TLS versions accepted, one quoted argument: a contiguous range of TLSv1 "
        "TLSv1.1 TLSv1.2 TLSv1.3.",
    ),
    Directive(
        "tls-ciphers",
        StringType(omit_empty=True),
        "",
        doc="OpenSSL cipher list for TLSv1.2 and below (empty = OpenSSL's default).",
    ),
    # --- cluster bus authentication -------------------------------------
    Directive(
        "cluster-secret",
        SecretType(),
        "",
        gettable=False,
        doc="disquepy: secret shared by the nodes; every bus link proves it knows it "
        "(HMAC-SHA256 challenge-response) before a message is accepted. At least 16 "
        "characters; empty = an unauthenticated bus. Hidden from CONFIG GET.",
    ),
    Directive(
        "cluster-allow-unauthenticated-bus",
        _BOOL,
        False,
        doc="disquepy: let a node bound beyond loopback start with neither "
        "cluster-secret nor tls-cluster (anyone who reaches its bus port is then a peer).",
    ),
    # --- limits ---------------------------------------------------------
    Directive(
        "maxclients",
        IntType(1, INT_MAX),
        10000,
        mutable=True,
        error="Invalid max clients limit",
        doc="Maximum simultaneous clients.",
    ),
    Directive(
        "maxmemory",
        MemoryType(1),
        1 * GB,
        mutable=True,
        error="You need to specify a memory limit greater than zero",
        doc="Memory limit for jobs and acks.",
    ),
    Directive(
        "maxmemory-policy",
        MaxmemoryPolicyType(),
        "acks",
        mutable=True,
        error="Invalid maxmemory policy",
        doc="What to evict above 95% of maxmemory: acks, the only policy (acknowledged "
        "jobs, delivered at-most-once jobs, empty idle queues; nothing a guarantee "
        "needs). Disque's noeviction is refused.",
    ),
    Directive(
        "client-query-buffer-limit",
        MemoryType(1 * MB),
        1 * GB,
        mutable=True,
        doc="disquepy: close clients whose unparsed input exceeds this.",
    ),
    Directive(
        "proto-max-bulk-len",
        MemoryType(1 * MB),
        512 * MB,
        mutable=True,
        doc="disquepy: largest bulk string accepted from clients.",
    ),
    Directive(
        "job-max-body-size",
        MemoryType(0),
        64 * MB,
        mutable=True,
        error="Invalid job-max-body-size value",
        doc="disquepy: the largest job body ADDJOB accepts; a larger one is refused with "
        "an error before anything is stored or replicated (every copy of a job holds its "
        "body; the HTTP API refuses bodies over 4 MiB itself). 0: no limit but "
        "proto-max-bulk-len.",
    ),
    Directive(
        "proto-max-multibulk-len",
        IntType(1, INT_MAX),
        1024 * 1024,
        mutable=True,
        error="Invalid proto-max-multibulk-len value",
        doc="disquepy: most arguments one request may have (Disque's fixed 1048576); "
        "past it the client gets a protocol error and is closed. New connections only.",
    ),
    Directive(
        "cluster-bus-max-frame",
        MemoryType(1 * MB, 1 * GB),
        576 * MB,
        error="Invalid cluster-bus-max-frame value",
        doc="disquepy: largest cluster bus frame a node accepts (and sends: batches are "
        "split below it); room for one job of proto-max-bulk-len.",
    ),
    Directive(
        "cluster-bus-max-connections",
        IntType(1, INT_MAX),
        1024,
        error="Invalid cluster-bus-max-connections value",
        doc="disquepy: most inbound cluster bus connections at once (a peer opens one).",
    ),
    Directive(
        "cluster-bus-max-unauthenticated",
        IntType(1, INT_MAX),
        32,
        error="Invalid cluster-bus-max-unauthenticated value",
        doc="disquepy: most inbound bus connections still in their cluster-secret or "
        "TLS handshake at once; one more closes the oldest.",
    ),
    Directive(
        "cluster-bus-max-unauthenticated-per-ip",
        IntType(1, INT_MAX),
        16,
        error="Invalid cluster-bus-max-unauthenticated-per-ip value",
        doc="disquepy: most inbound bus connections from one address still in their "
        "handshakes; one more closes that address's oldest.",
    ),
    Directive(
        "client-max-unauthenticated",
        IntType(1, INT_MAX),
        512,
        mutable=True,
        error="Invalid client-max-unauthenticated value",
        doc="disquepy: most client connections at once still in their TLS handshake or, "
        "when a password is required, not authenticated yet; one more closes the oldest.",
    ),
    Directive(
        "client-max-unauthenticated-per-ip",
        IntType(1, INT_MAX),
        64,
        mutable=True,
        error="Invalid client-max-unauthenticated-per-ip value",
        doc="disquepy: the same per source address; one more closes that address's "
        "oldest.",
    ),
    Directive(
        "client-auth-timeout",
        IntType(1, 3600),
        10,
        mutable=True,
        error="Invalid client-auth-timeout value",
        doc="disquepy: seconds a client connection has for its TLS handshake and, when a "
        "password is required, its AUTH; then it is closed.",
    ),
    # --- append only file -----------------------------------------------
    Directive("appendonly", _BOOL, False, mutable=True, doc="Log jobs to the AOF."),
    Directive(
        "appendfilename",
        StringType(basename=True),
        "disque.aof",
        error="appendfilename can't be a path, just a filename",
        doc="AOF file name, inside dir.",
    ),
    Directive(
        "appendfsync",
        EnumType("everysec", "always", "no"),
        "everysec",
        mutable=True,
        error="argument must be 'no', 'always' or 'everysec'",
        doc="AOF fsync policy.",
    ),
    Directive(
        "no-appendfsync-on-rewrite",
        _BOOL,
        False,
        mutable=True,
        doc="Skip fsync while an AOF rewrite runs.",
    ),
    Directive(
        "auto-aof-rewrite-percentage",
        IntType(0, INT_MAX),
        100,
        mutable=True,
        error="Invalid negative percentage for AOF auto rewrite",
        doc="Rewrite the AOF when it grew by this percentage (0 = never).",
    ),
    Directive(
        "auto-aof-rewrite-min-size",
        MemoryType(0),
        64 * MB,
        mutable=True,
        doc="Do not auto-rewrite an AOF smaller than this.",
    ),
    Directive(
        "aof-rewrite-incremental-fsync",
        _BOOL,
        True,
        mutable=True,
        doc="fsync the rewritten AOF every 32 MB.",
    ),
    Directive(
        "aof-load-truncated",
        _BOOL,
        True,
        mutable=True,
        doc="Load a truncated AOF instead of refusing to start.",
    ),
    Directive(
        "aof-enqueue-jobs-once",
        _BOOL,
        False,
        mutable=True,
        doc="Next start: load the AOF with queue state, then turn this off.",
    ),
    # --- disquepy extensions -------------------------------------------
    Directive(
        "delivery-token-ttl",
        IntType(1, INT_MAX),
        3600,
        mutable=True,
        error="delivery-token-ttl must be 1 or greater",
        doc="disquepy: seconds a GETJOB TOKEN remembers the jobs it delivered.",
    ),
    Directive(
        "job-outcome-retention",
        IntType(0, INT_MAX),
        3600,
        mutable=True,
        error="job-outcome-retention must be 0 or greater",
        doc="disquepy: seconds a node remembers how a job ended (completed, failed, "
            "cancelled, expired) for JOBSTATUS; 0 keeps none.",
    ),
    Directive(
        "job-outcome-max-memory",
        MemoryType(1),
        64 * MB,
        mutable=True,
        error="job-outcome-max-memory must be greater than zero",
        doc="disquepy: memory for job outcomes; past it the oldest are dropped first.",
    ),
    Directive(
        "event-log",
        _BOOL,
        False,
        mutable=True,
        doc="disquepy: write the job-lifecycle event log (JSON lines).",
    ),
    Directive(
        "event-log-dir",
        StringType(),
        "events",
        mutable=True,
        doc="disquepy: directory of the event log files, relative to dir.",
    ),
    Directive(
        "event-log-max-size",
        MemoryType(0),
        64 * MB,
        mutable=True,
        doc="disquepy: start a new event log file past this size (0 = never).",
    ),
    # --- cluster --------------------------------------------------------
    Directive(
        "cluster-config-file",
        StringType(),
        "nodes.conf",
        doc="Cluster state file, maintained by the node.",
    ),
    Directive(
        "cluster-node-timeout",
        IntType(1, LLONG_MAX),
        15000,
        mutable=True,
        error="cluster node timeout must be 1 or greater",
        doc="Milliseconds of unreachability before a node is suspected failing.",
    ),
    # --- slow log, latency monitor --------------------------------------
    Directive(
        "slowlog-log-slower-than",
        IntType(LLONG_MIN, LLONG_MAX),
        10000,
        mutable=True,
        doc="Log commands slower than this many microseconds (<0 = off).",
    ),
    Directive(
        "slowlog-max-len",
        IntType(0, UINT_MAX),
        128,
        mutable=True,
        doc="Slow log length.",
    ),
    Directive(
        "latency-monitor-threshold",
        IntType(0, LLONG_MAX),
        0,
        mutable=True,
        error="The latency threshold can't be negative",
        doc="Record events slower than this many milliseconds (0 = off).",
    ),
    # --- advanced -------------------------------------------------------
    Directive(
        "client-output-buffer-limit",
        OutputBufferLimitType(),
        OutputBufferLimit(0, 0, 0),
        mutable=True,
        doc="normal <hard> <soft> <soft-seconds> output buffer limits.",
    ),
    Directive(
        "hz",
        IntType(0, LLONG_MAX, clamp=(1, 500)),
        10,
        mutable=True,
        doc="Cron frequency; clamped to 1..500.",
    ),
    Directive(
        "watchdog-period",
        IntType(0, INT_MAX),
        0,
        mutable=True,
        doc="Software watchdog period in milliseconds (0 = off).",
    ),
)

_BY_NAME: dict[str, Directive] = {d.name: d for d in DIRECTIVES}
if len(_BY_NAME) != len(DIRECTIVES):
    raise RuntimeError("a directive is listed twice in DIRECTIVES")


def directive(name: str) -> Directive | None:
    """The directive called ``name`` (case-insensitive), or ``None``."""
    return _BY_NAME.get(name.lower())


def close_names(name: str, names: Iterable[str]) -> list[str]:
    """The names a mistyped ``name`` most likely meant, best first (``maxmemroy``:
    ``maxmemory``), or none: difflib's ratio of at least 0.75, as a typo keeps."""
    return get_close_matches(name.lower(), list(names), n=3, cutoff=0.75)


def suggest(name: str) -> str | None:
    """The directive a mistyped ``name`` most likely meant, or None."""
    found = close_names(name, _BY_NAME)
    return found[0] if found else None
