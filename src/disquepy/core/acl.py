"""Users and what each may run: Redis's ACL users, simplified for a job queue.

A user is declared by a ``user`` config line, Redis's rules read left to right::

    user <name> [on|off] [>password | #sha256-hex | nopass | resetpass]...
                [+@category | -@category | +command | -command | +cmd|sub | -cmd|sub
                 | allcommands | nocommands]...

Each line starts from nothing (off, no password, no command), as Redis's ``reset``.
The categories are the roles:

* ``@admin`` (also ``@all``, ``allcommands``): every command;
* ``@producer``: ``@read`` plus ADDJOB and CANCEL;
* ``@consumer``: ``@read`` plus GETJOB, ACKJOB, FASTACK, ACKTOKEN, NACK, WORKING, FAILJOB;
* ``@read``: the commands that change nothing (SHOW, QLEN, QSTAT, QPEEK, QSCAN, JSCAN,
  JOBSTATUS, INFO, HELLO, PING, ...), and the connection's own business (CLIENT
  SETNAME, ACL WHOAMI, ...).

CLUSTER, CONFIG, DEBUG, SHUTDOWN, BGREWRITEAOF, MONITOR, DELJOB, ENQUEUE, DEQUEUE,
PAUSE, CLIENT LIST, KILL, PAUSE and UNPAUSE, and the ACL subcommands that show users
are in ``@admin`` only.

The ``default`` user is ``on nopass +@all`` unless a ``user default`` line says
otherwise; ``requirepass`` replaces its passwords (empty: ``nopass``), as in Redis.
A connection starts as ``default`` when that user is on and has ``nopass``, else it
must AUTH first.

What a connection may run is computed once, at AUTH: ``allowed(user)`` is ``None``
(everything) or a frozenset of command names (``cmd|sub`` for the subcommands that
are allowed one by one), so the check per command is one set lookup.

Failed AUTH attempts: ``auth_failed`` returns how long the shell waits before
answering (per connection, doubling from 100 ms to 5 s) and logs at most one line
a second, with the count of failures it did not log.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Final

from .authlimit import AuthThrottle
from .ids import is_valid_job_id

READ: Final = frozenset({
    "show", "qlen", "qstat", "qpeek", "qscan", "jscan", "jobstatus", "info", "hello",
    "ping", "echo", "time", "command", "select", "quit", "auth",
    "qstatus", "qinfo",
    "client|setname", "client|getname", "client|setinfo", "client|id", "client|reply",
    "acl|whoami", "acl|cat",
})
# a producer adds (jobs, group events); cancelling or deleting is not producing (a
# user may be given ``+cancel`` on its own queues: ``+@producer +cancel ~orders:*``)
PRODUCE: Final = frozenset({"addjob", "qadd"})
CONSUME: Final = frozenset({"getjob", "ackjob", "fastack", "acktoken", "nack", "working", "failjob",
                            "qget", "qack", "qworking", "qnotify", "qdead"})

# the arguments of each command that name queues or jobs: checked against the user's
# queue patterns (``~pattern``); a job's queue is the one this node knows it by.
# "q1": the first argument is a queue; "ids": every argument shaped as a job ID;
# "from": the queues after FROM (GETJOB); "q3+": the queues from the third (QNOTIFY);
# "qs": the queues before GROUPS (QSTATUS, QINFO); "opt": the queue of a QUEUE option
QUEUE_ARGS: Final[dict[str, str]] = {
    "addjob": "q1", "qlen": "q1", "qstat": "q1", "qpeek": "q1", "pause": "q1",
    "qadd": "q1", "qget": "q1", "qack": "q1", "qworking": "q1", "qdead": "q1",
    "qflush": "q1", "getjob": "from", "qnotify": "q3+", "qstatus": "qs", "qinfo": "qs",
    "jscan": "opt", "joboutcomes": "opt", "jobmetrics": "q1",
    "show": "ids", "jobstatus": "ids", "ackjob": "ids", "fastack": "ids", "nack": "ids",
    "working": "ids", "failjob": "ids", "cancel": "ids", "deljob": "ids",
    "enqueue": "ids", "dequeue": "ids",
}
# job commands that change the job: one this node does not know (so neither its
# queue) is refused to a user with queue patterns (an ACKJOB of an unknown ID would
# otherwise make a dummy ack that deletes the copies on the other nodes)
JOB_CHANGES: Final = frozenset({"ackjob", "fastack", "nack", "working", "failjob", "cancel",
                                "deljob", "enqueue", "dequeue"})

# subcommands checked one by one: the command's name -> the subcommands it has
SUBCOMMANDS: Final[dict[str, frozenset[str]]] = {
    "client": frozenset({"setname", "getname", "setinfo", "id", "list", "kill", "pause",
                         "unpause", "reply"}),
    "acl": frozenset({"whoami", "cat", "list", "users", "getuser"}),
}

CATEGORIES: Final[dict[str, frozenset[str]]] = {
    "read": READ,
    "readonly": READ,
    "producer": READ | PRODUCE,
    "consumer": READ | CONSUME,
}
ALL_NAMES: Final = ("all", "admin")

AUTH_DELAY_MIN_MS: Final = 100
AUTH_DELAY_MAX_MS: Final = 5000


class AclError(Exception):
    """A ``user`` line that cannot be read."""


def password_hash(password: str) -> str:
    """Redis's form: the SHA-256 of the password, in lower-case hex."""
    return hashlib.sha256(password.encode("utf-8", "surrogateescape")).hexdigest()


class QueueAccess:
    """The queues a user may touch: glob patterns (Redis's key patterns: ``*``, ``?``,
    ``[...]``), matched against Disque queue names; each name's answer is cached."""

    __slots__ = ("patterns", "cache")

    MAX_CACHE = 4096

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        self.cache: dict[bytes, bool] = {}

    def allows(self, queue: bytes) -> bool:
        ok = self.cache.get(queue)
        if ok is None:
            name = queue.decode("utf-8", "surrogateescape")
            ok = any(fnmatchcase(name, p) for p in self.patterns)
            if len(self.cache) >= self.MAX_CACHE:
                self.cache.clear()
            self.cache[queue] = ok
        return ok


class User:
    """One user: enabled, its password hashes (or nopass), its command rules, and the
    queue patterns it is limited to (None: every queue)."""

    __slots__ = ("name", "enabled", "nopass", "hashes", "rules", "all", "commands",
                 "patterns")

    def __init__(self, name: str) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        self.hashes: list[str] = []
        self.rules: list[str] = []  # the command rules as given, for ACL LIST
        self.all = False  # every command (then ``commands`` holds the ones taken away)
        self.commands: set[str] = set()
        # ``~pattern`` rules; None (no such rule, or ``allkeys``): every queue
        self.patterns: list[str] | None = None

    def check(self, password: str) -> bool:
        if not self.enabled:
            return False
        if self.nopass:
            return True
        h = password_hash(password)
        ok = False
        for stored in self.hashes:  # no early exit: the time does not tell which matched
            ok |= hmac.compare_digest(stored, h)
        return ok

    def set_password(self, password: str | None) -> None:
        """``requirepass``: one password, or ``nopass`` for None."""
        if password is None:
            self.hashes = []
            self.nopass = True
        else:
            self.hashes = [password_hash(password)]
            self.nopass = False

    def describe(self) -> str:
        """ACL LIST's line (a valid ``user`` config line)."""
        parts = ["user", self.name, "on" if self.enabled else "off"]
        if self.nopass:
            parts.append("nopass")
        parts.extend("#" + h for h in self.hashes)
        if self.patterns is not None:
            parts.extend(["resetkeys", *("~" + p for p in self.patterns)])
        parts.extend(self.rules or ["nocommands"])
        return " ".join(parts)


def _command_rule(user: User, rule: str, known: frozenset[str] | None) -> None:
    sign, what = rule[0], rule[1:]
    add = sign == "+"
    if what.startswith("@"):
        cat = what[1:]
        if cat in ALL_NAMES:
            user.all = add
            user.commands = set()
            return
        names = CATEGORIES.get(cat)
        if names is None:
            raise AclError(f"Unknown command category '{cat}'")
    else:
        base = what.split("|", 1)[0]
        if known is not None and base not in known:
            raise AclError(f"Unknown command '{what}'")
        if "|" in what and what.split("|", 1)[1] not in SUBCOMMANDS.get(base, frozenset()):
            raise AclError(f"Unknown subcommand '{what}'")
        names = frozenset(_expand(what))
    if user.all:  # with every command, ``commands`` lists the ones taken away
        if add:
            user.commands -= names
        else:
            user.commands |= names
    elif add:
        user.commands |= names
    else:
        user.commands -= names


def parse_user(args: list[str], known: frozenset[str] | None) -> User:
    """A user from a ``user`` line's arguments (its name first). ``known``: the
    command names, None to check the syntax only (the config file's first pass)."""
    if not args or not args[0] or any(c in args[0] for c in " \t\r\n"):
        raise AclError("a user needs a name (without spaces)")
    user = User(args[0])
    for rule in args[1:]:
        low = rule.lower()
        if low == "on":
            user.enabled = True
        elif low == "off":
            user.enabled = False
        elif low == "nopass":
            user.nopass = True
            user.hashes = []
        elif low == "resetpass":
            user.nopass = False
            user.hashes = []
        elif rule.startswith(">"):
            h = password_hash(rule[1:])
            if h not in user.hashes:
                user.hashes.append(h)
            user.nopass = False
        elif rule.startswith("<"):
            h = password_hash(rule[1:])
            user.hashes = [x for x in user.hashes if x != h]
        elif rule.startswith("#") or rule.startswith("!"):
            h = low[1:]
            if len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
                raise AclError("The password hash must be exactly 64 characters and contain "
                               "only lowercase hexadecimal characters")
            if rule[0] == "!":
                user.hashes = [x for x in user.hashes if x != h]
            elif h not in user.hashes:
                user.hashes.append(h)
                user.nopass = False
        elif rule.startswith("~") and len(rule) > 1:
            if user.patterns is None:
                user.patterns = []
            if rule[1:] == "*":
                user.patterns = None
            elif rule[1:] not in user.patterns:
                user.patterns.append(rule[1:])
        elif low in ("allkeys", "allqueues"):
            user.patterns = None
        elif low == "resetkeys":
            user.patterns = []
        elif low in ("allcommands", "nocommands"):
            user.all = low == "allcommands"
            user.commands = set()
            user.rules.append(low)
        elif low[:1] in ("+", "-") and len(low) > 1:
            _command_rule(user, low, known)
            user.rules.append(low)
        else:
            raise AclError(f"Syntax error in ACL rule '{rule}'")
    return user


class Acl:
    """The users of a node, and the bookkeeping of failed AUTH attempts."""

    __slots__ = ("users", "known", "before_auth", "cache", "queues", "default_state",
                 "fails", "denied", "logged_at", "unlogged", "throttle")

    def __init__(self, known: frozenset[str], before_auth: frozenset[str]) -> None:
        self.known = known  # every command name the node has
        # what a connection may send before it is authenticated (the commands flagged
        # so: AUTH, HELLO, QUIT, and the cross-protocol guards that close the link)
        self.before_auth = before_auth
        self.users: dict[str, User] = {}
        self.cache: dict[str, frozenset[str] | None] = {}  # user name -> allowed()
        self.queues: dict[str, QueueAccess | None] = {}  # user name -> queue_access()
        self.default_state: tuple[bool, frozenset[str] | None] = (True, None)
        self.fails = 0  # failed AUTH attempts since start (INFO)
        self.denied = 0  # commands refused with NOPERM (INFO)
        self.logged_at = -(1 << 62)
        self.unlogged = 0  # failures not logged since the last line
        self.throttle = AuthThrottle()  # failures per source address (core/authlimit.py)
        self.configure([], None)

    def configure(self, lines: list[list[str]], requirepass: str | None) -> None:
        """Build the users from ``user`` lines (each a list of arguments) and
        ``requirepass`` (None or empty: leave the default user's passwords alone
        when a ``user default`` line gave some, else nopass). Raises AclError."""
        users: dict[str, User] = {}
        for args in lines:
            u = parse_user(args, self.known)
            if u.name in users:
                raise AclError(f"Duplicate user '{u.name}' found")
            users[u.name] = u
        if "default" not in users:
            d = User("default")
            d.enabled = d.nopass = d.all = True
            d.rules = ["+@all"]
            users["default"] = d
        if requirepass:
            users["default"].set_password(requirepass)
        self.users = users
        self._changed()

    def _changed(self) -> None:
        self.cache = {name: self._allowed(u) for name, u in self.users.items()}
        self.queues = {name: None if u.patterns is None else QueueAccess(tuple(u.patterns))
                       for name, u in self.users.items()}
        d = self.users["default"]
        if d.enabled and d.nopass:
            self.default_state = (True, self.cache["default"])
        else:
            self.default_state = (False, self.before_auth)

    def set_requirepass(self, requirepass: str) -> None:
        """CONFIG SET requirepass: the default user's one password; empty is nopass."""
        self.users["default"].set_password(requirepass or None)
        self._changed()

    def allowed(self, name: str) -> frozenset[str] | None:
        """What a connection authenticated as user ``name`` may run (see _allowed)."""
        return self.cache[name]

    def queue_access(self, name: str) -> QueueAccess | None:
        """The queues user ``name`` may touch; None: every queue."""
        return self.queues.get(name)

    def _allowed(self, user: User) -> frozenset[str] | None:
        """What a connection authenticated as ``user`` may run: None for everything,
        else the names: a command checked by subcommand is there with ``cmd|sub``
        for each allowed subcommand, and by its name when one of them is."""
        if user.all and not user.commands:
            return None
        if user.all:
            universe = (set(self.known) - SUBCOMMANDS.keys()) | _all_subcommands()
            names: set[str] = universe - user.commands
        else:
            names = set(user.commands)
        for cmd, subs in SUBCOMMANDS.items():
            if any(f"{cmd}|{s}" in names for s in subs):
                names.add(cmd)
        return frozenset(names | self.before_auth)

    def needs_password(self) -> bool:
        """New connections must AUTH (protected mode is then satisfied)."""
        d = self.users["default"]
        return not (d.enabled and d.nopass)

    def authenticate(self, name: str, password: str) -> User | None:
        u = self.users.get(name)
        if u is None:
            password_hash(password)  # an unknown name costs what a known one does
            return None
        return u if u.check(password) else None

    def auth_failed(self, name: str, addr: str, fails: int, now: int) -> tuple[int, str | None]:
        """Count a failed attempt (``fails``: the connection's failures so far, this
        one included). Returns the delay in ms before the error is sent (doubling per
        failure on the connection) and the line to log (at most one a second, with
        the count of those it did not log)."""
        self.fails += 1
        delay = min(AUTH_DELAY_MIN_MS << min(fails - 1, 16), AUTH_DELAY_MAX_MS)
        if now - self.logged_at < 1000:
            self.unlogged += 1
            return delay, None
        more = f" ({self.unlogged} more since the last report)" if self.unlogged else ""
        self.logged_at = now
        self.unlogged = 0
        return delay, f"Failed AUTH as '{name}' from {addr}{more}"


def _expand(name: str) -> set[str]:
    """A command checked by subcommand stands for all of them."""
    subs = SUBCOMMANDS.get(name)
    return {name} if subs is None else {f"{name}|{s}" for s in subs}


def _all_subcommands() -> set[str]:
    return {f"{cmd}|{s}" for cmd, subs in SUBCOMMANDS.items() for s in subs}


def category_names() -> list[str]:
    return ["admin", "all", *sorted(CATEGORIES)]


def category_commands(cat: str, known: frozenset[str]) -> list[str] | None:
    """ACL CAT <category>: its commands (``cmd|sub`` for a subcommand alone)."""
    if cat in ALL_NAMES:
        return sorted(known)
    names = CATEGORIES.get(cat)
    return None if names is None else sorted(names)


def queue_denied(access: QueueAccess, name: str, argv: list[bytes],
                 queue_of: Callable[[bytes], bytes | None]) -> str | None:
    """The first queue (or job ID) of a command ``name`` that ``access`` does not allow:
    the queue's name, ``"job <id>"`` for a job whose queue is not known here and that
    the command would change, or None when every one is allowed. ``queue_of``: the
    queue of a job this node knows (None: unknown)."""
    kind = QUEUE_ARGS.get(name)
    if kind is None:
        return None
    allows = access.allows
    if kind == "ids":
        for a in argv[1:]:
            if not is_valid_job_id(a):
                continue
            q = queue_of(a)
            if q is None:
                if name in JOB_CHANGES:
                    return "job " + a.decode("latin-1")
                continue  # reading an unknown job shows nothing
            if not allows(q):
                return q.decode("utf-8", "replace")
        return None
    queues: list[bytes]
    if kind == "q1":
        queues = argv[1:2]
    elif kind == "q3+":
        queues = argv[3:]
    elif kind == "from":
        low = [a.lower() for a in argv]
        queues = argv[low.index(b"from") + 1:] if b"from" in low else []
    elif kind == "qs":
        low = [a.lower() for a in argv]
        queues = argv[1:low.index(b"groups")] if b"groups" in low else argv[1:]
    else:  # "opt": QUEUE q (the scan itself keeps to the allowed queues)
        queues = [argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].lower() == b"queue"]
    for q in queues:
        if not allows(q):
            return q.decode("utf-8", "replace")
    return None


def role_table() -> str:
    """docs/SECURITY.md's table of the roles, from the categories above (a test keeps
    the document equal to it)."""
    def names(cmds: frozenset[str]) -> str:
        return ", ".join(f"`{c.upper().replace('|', ' ')}`" for c in sorted(cmds))
    rows = [
        "| category | commands |",
        "|---|---|",
        "| `@admin` (`@all`, `allcommands`) | every command |",
        f"| `@producer` | `@read` and {names(PRODUCE)} |",
        f"| `@consumer` | `@read` and {names(CONSUME)} |",
        f"| `@read` (`@readonly`) | {names(READ)} |",
    ]
    return "\n".join(rows) + "\n"
