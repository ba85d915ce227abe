"""Users with roles (core/acl.py) in-process: the rules, AUTH, the per-client sets."""

from __future__ import annotations

import hashlib

import pytest
from nodeharness import Harness
from test_node import ID_RE

from disquepy.core.acl import AclError, parse_user
from disquepy.core.commands import COMMANDS
from disquepy.core.config import Config, ConfigError

KNOWN = frozenset(c.name for c in COMMANDS.values())
USERS = [
    ["admin", "on", ">adminpw", "+@admin"],
    ["prod", "on", ">prodpw", "+@producer"],
    ["cons", "on", "#" + hashlib.sha256(b"conspw").hexdigest(), "+@consumer"],
    ["ro", "on", ">ropw", "+@read"],
    ["off", "off", ">offpw", "+@all"],
]


def harness(**kw) -> Harness:
    return Harness(user=[list(u) for u in USERS], **kw)


def login(h, user, pw):
    c = h.new_client()
    assert h("AUTH", user, pw, client=c) == b"OK"
    return c


def test_default_user_is_everything_without_a_password():
    h = harness()
    assert h("ACL", "WHOAMI") == b"default"
    assert h("CONFIG", "GET", "port")  # admin commands too
    assert h.client.allowed is None  # no set to look into on the hot path


def test_each_role_runs_exactly_its_commands():
    h = harness(requirepass="defpw")
    c = h.new_client()
    assert h("ADDJOB", "q", "b", 0, client=c) == "NOAUTH Authentication required."
    admin, prod, cons, ro = (login(h, u, p) for u, p in
                             [("admin", "adminpw"), ("prod", "prodpw"), ("cons", "conspw"),
                              ("ro", "ropw")])
    assert admin.allowed is None
    jid = h("ADDJOB", "q", "body", 0, client=prod)
    assert ID_RE.match(jid)
    for c in (cons, ro):
        assert h("ADDJOB", "q", "x", 0, client=c) == (
            f"NOPERM User {c.user} has no permissions to run the 'addjob' command")
    for c in (prod, cons, ro, admin):  # reads: everyone
        assert h("QLEN", "q", client=c) == 1
        assert h("SHOW", jid, client=c) is not None
    for c in (prod, ro):
        assert h("GETJOB", "NOHANG", "FROM", "q", client=c) == (
            f"NOPERM User {c.user} has no permissions to run the 'getjob' command")
        assert h("ACKJOB", jid, client=c).startswith("NOPERM")
    got = h("GETJOB", "NOHANG", "FROM", "q", client=cons)
    assert got[0][1] == jid
    assert h("NACK", jid, client=cons) == 1
    assert h("ACKJOB", jid, client=cons) == 1
    for cmd in (["CLUSTER", "NODES"], ["CONFIG", "GET", "port"], ["DEBUG", "JOBS"],
                ["SHUTDOWN"], ["DELJOB", jid], ["CLIENT", "LIST"], ["ACL", "LIST"]):
        for c in (prod, cons, ro):
            name = cmd[0].lower() + ("|list" if cmd[0] in ("CLIENT", "ACL") else "")
            assert h(*cmd, client=c) == (
                f"NOPERM User {c.user} has no permissions to run the '{name}' command")
    assert h("CLIENT", "SETNAME", "x", client=ro) == b"OK"
    assert h("ACL", "WHOAMI", client=ro) == b"ro"
    assert isinstance(h("CLIENT", "LIST", client=admin), bytes)
    assert h.node.acl.denied > 0


def test_auth_forms_and_failures():
    h = harness(requirepass="defpw")
    c = h.new_client()
    assert h("AUTH", "nope", client=c) == "ERR invalid password"
    assert h("AUTH", "admin", "nope", client=c) == (
        "WRONGPASS invalid username-password pair or user is disabled.")
    assert h("AUTH", "ghost", "x", client=c).startswith("WRONGPASS")
    assert h("AUTH", "off", "offpw", client=c).startswith("WRONGPASS")  # disabled
    assert c.auth_fails == 4 and not c.authed
    assert h("AUTH", "defpw", client=c) == b"OK"  # AUTH <password>: the default user
    assert c.user == "default" and c.allowed is None and c.auth_fails == 0
    # HELLO 3 AUTH user pass switches user and protocol
    assert h("HELLO", 3, "AUTH", "cons", "conspw", client=c)
    assert c.proto == 3
    assert c.user == "cons" and "getjob" in c.allowed and "addjob" not in c.allowed
    assert h("HELLO", 2, "AUTH", "cons", "bad", client=c).startswith("WRONGPASS")
    assert c.user == "cons"  # a failed AUTH leaves the connection as it was (Redis 6)


def test_failed_auth_is_slowed_per_connection_and_logged_at_most_once_a_second():
    h = harness(requirepass="defpw")
    c = h.new_client()
    delays = []
    for _ in range(8):
        h.node.execute(c, [b"AUTH", b"admin", b"bad"], h.now)
        (_, req), = h.node.requests
        h.node.requests.clear()
        delays.append(req.delay_ms)
    assert delays == [100, 200, 400, 800, 1600, 3200, 5000, 5000]
    logs = [line for _, line in h.node.take_outputs().logs]
    assert logs == [f"Failed AUTH as 'admin' from {c.addr}"]
    h.now += 1000
    h.node.execute(c, [b"AUTH", b"x", b"y"], h.now)
    logs = [line for _, line in h.node.take_outputs().logs]
    assert logs == [f"Failed AUTH as 'x' from {c.addr} (7 more since the last report)"]
    assert h.node.acl.fails == 9


def test_requirepass_is_the_default_users_password_and_config_set_changes_it():
    h = harness(requirepass="defpw")
    c = h.new_client()
    assert h("AUTH", "default", "defpw", client=c) == b"OK"
    assert h("CONFIG", "SET", "requirepass", "newpw", client=c) == b"OK"
    d = h.new_client()
    assert h("AUTH", "defpw", client=d) == "ERR invalid password"
    assert h("AUTH", "newpw", client=d) == b"OK"
    e = h.new_client()
    assert h("CONFIG", "SET", "requirepass", "", client=c) == b"OK"
    assert e.authed and h("PING", client=e) == b"PONG"


def test_a_default_user_line_locks_new_connections():
    h = Harness(user=[["default", "on", ">pw", "+@read"]])
    c = h.new_client()
    assert h("QLEN", "q", client=c) == "NOAUTH Authentication required."
    assert h("AUTH", "pw", client=c) == b"OK"
    assert h("QLEN", "q", client=c) == 0
    assert h("ADDJOB", "q", "x", 0, client=c).startswith("NOPERM User default ")


def test_rules_left_to_right_and_subcommands():
    u = parse_user(["u", "on", "nopass", "+@all", "-debug", "-client|list"], KNOWN)
    h = Harness(user=[["u", "on", "nopass", "+@all", "-debug", "-client|list"],
                      ["v", "on", "nopass", "+@read", "+client", "-client|setname"]])
    assert u.all and u.commands == {"debug", "client|list"}
    c = login(h, "u", "any")
    assert h("DEBUG", "JOBS", client=c).startswith("NOPERM")
    assert h("CLIENT", "LIST", client=c) == (
        "NOPERM User u has no permissions to run the 'client|list' command")
    assert h("CLIENT", "ID", client=c) == c.id
    assert h("CONFIG", "GET", "port", client=c)
    v = login(h, "v", "any")
    assert isinstance(h("CLIENT", "LIST", client=v), bytes)
    assert h("CLIENT", "SETNAME", "n", client=v).startswith("NOPERM")


def test_acl_introspection():
    h = harness()
    assert h("ACL", "USERS") == [b"admin", b"cons", b"default", b"off", b"prod", b"ro"]
    lines = h("ACL", "LIST")
    sha = hashlib.sha256(b"prodpw").hexdigest()
    assert f"user prod on #{sha} +@producer".encode() in lines
    assert b"user default on nopass +@all" in lines
    # ACL LIST's lines are valid user lines, hashes included
    for line in lines:
        parse_user(line.decode().split()[1:], KNOWN)
    assert b"addjob" in h("ACL", "CAT", "producer")
    assert h("ACL", "CAT", "nope") == "ERR Unknown category 'nope'"
    assert b"consumer" in h("ACL", "CAT")
    assert h("ACL", "GETUSER", "ro")[-2:] == [b"commands", b"+@read"]
    assert h("ACL", "NOPE").startswith("ERR unknown subcommand")


@pytest.mark.parametrize("rules, why", [
    (["u", "on", "+@nope"], "Unknown command category 'nope'"),
    (["u", "on", "+nope"], "Unknown command 'nope'"),
    (["u", "on", "+client|nope"], "Unknown subcommand 'client|nope'"),
    (["u", "on", "#abc"], "The password hash must be exactly 64 characters"),
    (["u", "on", "bogus"], "Syntax error in ACL rule 'bogus'"),
])
def test_bad_rules_are_refused(rules, why):
    with pytest.raises(AclError, match=why.replace("|", r"\|")):
        parse_user(rules, KNOWN)


def test_user_lines_in_the_config():
    cfg = Config.from_text("user alice on >pw +@consumer\nuser bob off\n")
    assert cfg.user == [["alice", "on", ">pw", "+@consumer"], ["bob", "off"]]
    assert Config.from_text(cfg.to_text()) == cfg
    with pytest.raises(ConfigError, match="Error in user declaration: Syntax error"):
        Config.from_text("user alice on what\n")
    # a password-protected default user satisfies protected mode like requirepass
    assert Config.from_text("bind 10.0.0.1\nuser default on >pw +@all\n") \
        .protected_mode_violations() == []
    assert Config.from_text("bind 10.0.0.1\n").protected_mode_violations() == ["10.0.0.1"]
    with pytest.raises(ConfigError, match="Duplicate user 'a'"):
        Harness(user=[["a", "on"], ["a", "off"]])
    with pytest.raises(ConfigError, match="Unknown command 'nope'"):
        Harness(user=[["a", "on", "+nope"]])


def test_rename_command_table():
    h = Harness(rename_command=[("debug", ""), ("config", "cfg")])
    assert h("DEBUG", "JOBS") == "ERR unknown command 'DEBUG'"
    assert h("CONFIG", "GET", "port") == "ERR unknown command 'CONFIG'"
    assert h("CFG", "GET", "port") == [b"port", b"7711"]
    assert h("cfg", "GET", "port") == [b"port", b"7711"]
    with pytest.raises(ConfigError, match="No such command in rename-command: 'nope'"):
        Harness(rename_command=[("nope", "x")])
    with pytest.raises(ConfigError, match="Target command name already exists"):
        Harness(rename_command=[("debug", "ping")])
