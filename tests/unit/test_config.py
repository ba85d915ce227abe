"""Tests for disquepy.core.config: directive table, parsing, CONFIG GET/SET/REWRITE."""

from __future__ import annotations

import ast
import pathlib
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disquepy.codec.resp import split_text as split_args
from disquepy.core import config as config_module
from disquepy.core import configlex, configtypes, directives
from disquepy.core.config import (
    DIRECTIVES,
    REWRITE_SIGNATURE,
    Config,
    ConfigError,
    OutputBufferLimit,
    directive,
    format_memory,
    glob_match,
    parse_memory,
    quote_arg,
)

GB = 1024**3
MB = 1024**2

# A config file in the style of Disque's example disque.conf: section banners,
# prose comments, commented-out examples, quoted values, odd spacing.
SAMPLE_CONF = """\
# disquepy test configuration
#
# Memory sizes may use units: 1k = 1000 bytes, 1kb = 1024 bytes, and so on.

################################ GENERAL #####################################

daemonize no
pidfile "/var/run/disque-7712.pid"

# TCP port (0 disables TCP).
port 7712
tcp-backlog 511

# Listen on two interfaces.
bind 127.0.0.1 10.0.0.5

# unixsocket /tmp/disque.sock
# unixsocketperm 700

timeout 0
tcp-keepalive 60
loglevel Notice
logfile ""
# syslog-enabled no
syslog-ident 'disque node'
dir ./

################################ SECURITY ####################################

requirepass "s3cr\\"et pass"
rename-command CONFIG ""
rename-command DEBUG dbg

################################# LIMITS #####################################

maxclients 5000
maxmemory 2gb
maxmemory-policy ACKS

############################ APPEND ONLY MODE ################################

appendonly yes
appendfilename "disque-7712.aof"

# appendfsync always
appendfsync everysec
# appendfsync no

no-appendfsync-on-rewrite no
auto-aof-rewrite-percentage 100
auto-aof-rewrite-min-size 64mb
aof-load-truncated yes
aof-enqueue-jobs-once no

################################# CLUSTER ####################################

cluster-config-file nodes-7712.conf
cluster-node-timeout 5000

################################ SLOW LOG ####################################

slowlog-log-slower-than 10000
slowlog-max-len 128
latency-monitor-threshold 0

############################# ADVANCED CONFIG ################################

client-output-buffer-limit normal 0 0 0
   hz 20
aof-rewrite-incremental-fsync yes
"""


def lines_of(text: str) -> list[str]:
    return text.split("\n")


# ---------------------------------------------------------------------------
# Table and defaults
# ---------------------------------------------------------------------------


def test_spec_defaults():
    cfg = Config()
    assert cfg.port == 7711
    assert cfg.bind == ["127.0.0.1"]
    assert cfg.maxmemory == 1073741824
    assert cfg.appendfsync == "everysec"
    assert cfg.cluster_node_timeout == 15000
    assert cfg.hz == 10


def test_other_defaults():
    cfg = Config()
    assert cfg.tcp_backlog == 511
    assert cfg.timeout == 0
    assert cfg.tcp_keepalive == 0
    assert cfg.loglevel == "notice"
    assert cfg.logfile == ""
    assert cfg.daemonize is False
    assert cfg.pidfile == "/var/run/disque.pid"
    assert cfg.dir == "./"
    assert cfg.appendonly is False
    assert cfg.appendfilename == "disque.aof"
    assert cfg.no_appendfsync_on_rewrite is False
    assert cfg.auto_aof_rewrite_percentage == 100
    assert cfg.auto_aof_rewrite_min_size == 64 * MB
    assert cfg.aof_load_truncated is True
    assert cfg.aof_enqueue_jobs_once is False
    assert cfg.aof_rewrite_incremental_fsync is True
    assert cfg.cluster_config_file == "nodes.conf"
    assert cfg.maxmemory_policy == "acks"
    assert cfg.maxclients == 10000
    assert cfg.slowlog_log_slower_than == 10000
    assert cfg.slowlog_max_len == 128
    assert cfg.latency_monitor_threshold == 0
    assert cfg.requirepass == ""
    assert cfg.rename_command == []
    assert cfg.client_output_buffer_limit == OutputBufferLimit(0, 0, 0)
    assert cfg.syslog_enabled is False
    assert cfg.syslog_ident == "disque"
    assert cfg.syslog_facility == "local0"
    assert cfg.unixsocket == ""
    assert cfg.unixsocketperm == 0
    assert cfg.watchdog_period == 0
    # disquepy extensions
    assert cfg.cluster_port_offset == 10000
    assert cfg.client_query_buffer_limit == GB
    assert cfg.proto_max_bulk_len == 512 * MB
    assert cfg.protected_mode is True
    assert cfg.event_log is False
    assert cfg.event_log_max_size == 64 * MB


def test_table_is_consistent_with_attributes():
    names = [d.name for d in DIRECTIVES]
    assert len(names) == len(set(names))
    assert all(n == n.lower() for n in names)
    cfg = Config()
    for d in DIRECTIVES:
        assert d.attr == d.name.replace("-", "_")
        assert getattr(cfg, d.attr) == d.default
        assert directive(d.name.upper()) is d
    assert set(Config.__annotations__) == {d.attr for d in DIRECTIVES}
    assert cfg.changed_from_default() == {}
    assert directive("nope") is None


def test_defaults_are_not_shared_between_instances():
    a, b = Config(), Config()
    a.bind.append("10.0.0.1")
    a.rename_command.append(("x", "y"))
    assert b.bind == ["127.0.0.1"]
    assert b.rename_command == []
    assert directive("bind").default == ["127.0.0.1"]


def test_slots_reject_unknown_attributes():
    with pytest.raises(AttributeError):
        Config().no_such_directive = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("module", [config_module, configlex, configtypes, directives],
                         ids=lambda m: m.__name__)
def test_module_is_pure(module):
    source = pathlib.Path(module.__file__.replace(".so", ".py")).read_text()
    tree = ast.parse(source)
    forbidden = {"asyncio", "socket", "time", "random", "threading", "selectors", "os", "io"}
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id != "open"
    assert not imported & forbidden


# ---------------------------------------------------------------------------
# Parsing config text
# ---------------------------------------------------------------------------


def test_parse_sample_conf():
    cfg = Config.from_text(SAMPLE_CONF, origin="disque.conf")
    assert cfg.port == 7712
    assert cfg.pidfile == "/var/run/disque-7712.pid"
    assert cfg.bind == ["127.0.0.1", "10.0.0.5"]
    assert cfg.tcp_keepalive == 60
    assert cfg.loglevel == "notice"
    assert cfg.logfile == ""
    assert cfg.syslog_ident == "disque node"
    assert cfg.requirepass == 's3cr"et pass'
    assert cfg.rename_command == [("config", ""), ("debug", "dbg")]
    assert cfg.maxclients == 5000
    assert cfg.maxmemory == 2 * GB
    assert cfg.maxmemory_policy == "acks"
    assert cfg.appendonly is True
    assert cfg.appendfilename == "disque-7712.aof"
    assert cfg.appendfsync == "everysec"
    assert cfg.cluster_config_file == "nodes-7712.conf"
    assert cfg.cluster_node_timeout == 5000
    assert cfg.hz == 20
    assert cfg.unixsocket == ""
    assert set(cfg.changed_from_default()) == {
        "pidfile",
        "port",
        "bind",
        "tcp-keepalive",
        "syslog-ident",
        "requirepass",
        "rename-command",
        "maxclients",
        "maxmemory",
        "appendonly",
        "appendfilename",
        "cluster-config-file",
        "cluster-node-timeout",
        "hz",
    }


def test_parse_returns_seen_directives_and_last_one_wins():
    cfg = Config()
    seen = cfg.apply_text("port 1\nPORT 2\nhz 5\n")
    assert seen == ["port", "hz"]
    assert cfg.port == 2


def test_parse_case_insensitive_names_and_values():
    cfg = Config.from_text("APPENDONLY YES\nAppendFsync ALWAYS\nmaxmemory-policy Acks\n")
    assert cfg.appendonly is True
    assert cfg.appendfsync == "always"
    assert cfg.maxmemory_policy == "acks"


def test_parse_whitespace_crlf_and_empty_text():
    cfg = Config.from_text("\r\n  \t\n\tport 7713  \r\n# port 1\n  # indented comment\n")
    assert cfg.port == 7713
    assert Config.from_text("") == Config()


def test_parse_quoted_values():
    cfg = Config.from_text(
        'logfile "/tmp/a b.log"\n'
        "pidfile '/tmp/it\\'s.pid'\n"
        'requirepass "tab\\there\\x41\\\\"\n'
        'dir C:"/x y"\n'  # a quote may open in the middle of an argument
    )
    assert cfg.logfile == "/tmp/a b.log"
    assert cfg.pidfile == "/tmp/it's.pid"
    assert cfg.requirepass == "tab\there" + "A\\"
    assert cfg.dir == "C:/x y"


def test_split_args():
    """The splitter of config lines (and the command line's): codec.resp.split_text."""
    assert split_args("") == []
    assert split_args("   ") == []
    assert split_args("a b\tc") == ["a", "b", "c"]
    assert split_args('a "b c" d') == ["a", "b c", "d"]
    assert split_args('"" x') == ["", "x"]
    assert split_args("'a\\'b'") == ["a'b"]
    assert split_args("'a\\nb'") == ["a\\nb"]
    assert split_args('"\\n\\r\\t\\b\\a\\q\\x4a\\x4"') == ["\n\r\t\b\aqJx4"]
    assert split_args('foo"bar baz"') == ["foobar baz"]
    for bad in ['"abc', "'abc", '"a"b', "'a'b", '"abc\\"', 'x "', "a \ud800"]:
        assert split_args(bad) is None


@given(st.text(max_size=40))
def test_quote_arg_round_trips(s):
    assert split_args(quote_arg(s)) == [s]
    assert split_args("x " + quote_arg(s) + " y") == ["x", s, "y"]


def test_hex_escapes_are_bytes():
    assert split_args('"\\xc3\\xa9"') == ["\u00e9"]
    assert split_args('"a\\xff"') == ["a\udcff"]
    assert quote_arg("a\udcff\x01") == '"a\\xff\\x01"'


@given(st.binary(max_size=40))
def test_quote_arg_round_trips_undecodable_bytes(raw):
    # the shell decodes client bytes with surrogateescape
    s = raw.decode("utf-8", "surrogateescape")
    quoted = quote_arg(s)
    quoted.encode("utf-8")  # always writable as strict UTF-8
    assert split_args(quoted) == [s]


def test_rewrite_of_undecodable_values_is_valid_utf8():
    cfg = Config()
    password = b"p\xff\xfe\xc3\xa9".decode("utf-8", "surrogateescape")
    cfg.set("requirepass", password)
    cfg.apply_args(["--bind", b"\xffhost".decode("utf-8", "surrogateescape")])
    out = cfg.rewrite("port 7711\n")
    out.encode("utf-8")
    assert Config.from_text(out) == cfg


# ---------------------------------------------------------------------------
# Error paths
# ---------------------------------------------------------------------------


def parse_error(text: str, origin: str = "") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        Config.from_text(text, origin=origin)
    assert info.value.kind == "file"
    return info.value


def test_error_block_format():
    err = parse_error("# comment\n\nport   notaport  \n", origin="disque.conf")
    assert err.lineno == 3
    assert err.line == "port   notaport"
    assert err.reason == "Invalid port"
    assert err.origin == "disque.conf"
    assert str(err) == (
        "*** FATAL CONFIG FILE ERROR ***\n"
        "Reading the configuration file, at line 3 (disque.conf)\n"
        ">>> 'port   notaport'\n"
        "Invalid port"
    )
    assert "(disque.conf)" not in str(parse_error("port x"))


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("nosuchdirective 1", "Bad directive or wrong number of arguments"),
        ("port", "Bad directive or wrong number of arguments"),
        ("port 1 2", "Bad directive or wrong number of arguments"),
        ("bind", "Bad directive or wrong number of arguments"),
        ("client-output-buffer-limit normal 0 0", "Bad directive or wrong number of arguments"),
        ("rename-command CONFIG", "Bad directive or wrong number of arguments"),
        (
            "port 7711 # trailing comments are not comments",
            "Bad directive or wrong number of arguments",
        ),
        ("include /etc/other.conf", "The include directive is not supported"),
        ('logfile "unterminated', "Unbalanced quotes in configuration line"),
        ('logfile "a"b', "Unbalanced quotes in configuration line"),
        ("port 65536", "Invalid port"),
        ("port -1", "Invalid port"),
        ("port 12ab", "Invalid port"),
        ("port 0x10", "Invalid port"),
        ("port 07711", "Invalid port"),
        ("cluster-port-offset 0", "Invalid cluster port offset"),
        ("tcp-backlog -1", "Invalid backlog value"),
        ("timeout -1", "Invalid timeout value"),
        ("tcp-keepalive -5", "Invalid tcp-keepalive value"),
        ("bind " + " ".join(f"10.0.0.{n}" for n in range(17)), "Too many bind addresses specified"),
        ('bind ""', "Invalid bind address"),
        ("unixsocketperm 800", "Invalid socket file permissions"),
        ("unixsocketperm 1777", "Invalid socket file permissions"),
        ("loglevel loud", "Invalid log level. Must be one of debug, verbose, notice, warning"),
        ("syslog-enabled maybe", "argument must be 'yes' or 'no'"),
        ("daemonize 1", "argument must be 'yes' or 'no'"),
        (
            "syslog-facility local8",
            "Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7",
        ),
        ("databases 16", "databases is not supported: disquepy has one keyspace, as Disque "
         "(SELECT accepts only 0); remove the line"),
        ("activerehashing yes", "activerehashing is not supported: disquepy's tables are "
         "Python dicts, which resize as they grow; there is no rehashing to run in the cron "
         "or to turn off; remove the line"),
        ("maxclients 0", "Invalid max clients limit"),
        ("maxmemory 0", "You need to specify a memory limit greater than zero"),
        ("maxmemory lots", "You need to specify a memory limit greater than zero"),
        ("maxmemory-policy lru", "Invalid maxmemory policy"),
        ("maxmemory-samples 5", "maxmemory-samples is not supported: disquepy does not "
         "sample, it evicts exactly, oldest first (acknowledged jobs, delivered at-most-once "
         "jobs, then empty idle queues); remove the line"),
        ("client-query-buffer-limit 1kb", "Invalid client-query-buffer-limit value"),
        ("proto-max-bulk-len 12xb", "Invalid proto-max-bulk-len value"),
        ("appendonly on", "argument must be 'yes' or 'no'"),
        ("appendfilename /var/lib/disque.aof", "appendfilename can't be a path, just a filename"),
        ("appendfsync sometimes", "argument must be 'no', 'always' or 'everysec'"),
        ("auto-aof-rewrite-percentage -1", "Invalid negative percentage for AOF auto rewrite"),
        ("auto-aof-rewrite-min-size -1", "Invalid auto-aof-rewrite-min-size value"),
        ("requirepass " + "x" * 513, "Password is longer than CONFIG_AUTHPASS_MAX_LEN (512)"),
        ('rename-command "" foo', "Invalid rename-command value"),
        ("cluster-node-timeout 0", "cluster node timeout must be 1 or greater"),
        ("slowlog-max-len -1", "Invalid slowlog-max-len value"),
        ("slowlog-log-slower-than fast", "Invalid slowlog-log-slower-than value"),
        ("latency-monitor-threshold -1", "The latency threshold can't be negative"),
        ("client-output-buffer-limit slave 0 0 0", "Unrecognized client limit class"),
        (
            "client-output-buffer-limit normal 0 0 -1",
            "Negative number of seconds in soft limit is invalid",
        ),
        ("client-output-buffer-limit normal 1x 0 0", "Invalid client-output-buffer-limit value"),
        ("hz fast", "Invalid hz value"),
        ("watchdog-period -1", "Invalid watchdog-period value"),
        ("event-log-max-size -1", "Invalid event-log-max-size value"),
    ],
)
def test_parse_errors(line, reason):
    err = parse_error(f"# first line\n{line}\n")
    assert err.reason == reason
    assert err.lineno == 2
    assert err.line == line
    assert str(err).endswith("\n" + reason)


def test_maxmemory_policy_noeviction_is_refused_with_the_reason():
    # Disque accepts noeviction and behaves as with acks; accepting a policy that does
    # nothing would mislead, so the file, the command line and CONFIG SET refuse it
    err = parse_error("maxmemory-policy NoEviction\n")
    assert err.reason.startswith("maxmemory-policy noeviction is not supported: the only "
                                 "policy is acks"), err.reason
    cfg = Config()
    with pytest.raises(ConfigError):
        cfg.set("maxmemory-policy", "noeviction")
    assert cfg.maxmemory_policy == "acks"


def test_error_stops_at_first_bad_line():
    err = parse_error("port 1\nport bad\nhz bad\n")
    assert err.lineno == 2


# ---------------------------------------------------------------------------
# Memory sizes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("123", 123),
        ("10b", 10),
        ("1k", 1000),
        ("1kb", 1024),
        ("1K", 1000),
        ("1KB", 1024),
        ("1Kb", 1024),
        ("1m", 1000**2),
        ("1mb", 1024**2),
        ("5MB", 5 * 1024**2),
        ("1g", 1000**3),
        ("1gb", 1024**3),
        ("1gB", 1024**3),
        ("3GB", 3 * 1024**3),
        ("-1", -1),
    ],
)
def test_parse_memory(text, value):
    assert parse_memory(text) == value


@pytest.mark.parametrize("text", ["", "gb", "1.5gb", "1 gb", "1tb", "1kbb", "+1", "1_000", "١"])
def test_parse_memory_rejects(text):
    with pytest.raises(ValueError):
        parse_memory(text)


def test_format_memory():
    assert format_memory(0) == "0"
    assert format_memory(1000) == "1000"
    assert format_memory(1024) == "1kb"
    assert format_memory(1536 * 1024) == "1536kb"
    assert format_memory(64 * MB) == "64mb"
    assert format_memory(GB) == "1gb"
    assert format_memory(3 * GB + 1) == str(3 * GB + 1)


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_memory_round_trip(n):
    assert parse_memory(format_memory(n)) == n


def test_memory_directives_accept_units_in_file():
    cfg = Config.from_text("maxmemory 100mb\nauto-aof-rewrite-min-size 1g\nevent-log-max-size 0\n")
    assert cfg.maxmemory == 100 * MB
    assert cfg.auto_aof_rewrite_min_size == 10**9
    assert cfg.event_log_max_size == 0


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def test_apply_args():
    cfg = Config.from_text("port 7711\nappendonly no\n")
    seen = cfg.apply_args(["--port", "7712", "--appendonly", "yes", "--bind", "::1", "127.0.0.1"])
    assert seen == ["port", "appendonly", "bind"]
    assert cfg.port == 7712
    assert cfg.appendonly is True
    assert cfg.bind == ["::1", "127.0.0.1"]


def test_apply_args_values_are_taken_literally():
    cfg = Config()
    cfg.apply_args(["--requirepass", 'with space "and quotes"', "--LOGFILE", ""])
    assert cfg.requirepass == 'with space "and quotes"'
    assert cfg.logfile == ""
    cfg.apply_args(["--rename-command", "flushall", ""])
    assert cfg.rename_command == [("flushall", "")]
    assert cfg.apply_args([]) == []


@pytest.mark.parametrize(
    ("args", "lineno", "line", "reason"),
    [
        (["--port", "x"], 1, "port x", "Invalid port"),
        (["--hz", "5", "--port"], 2, "port", "Bad directive or wrong number of arguments"),
        (["7712"], 1, " 7712", "Bad directive or wrong number of arguments"),
        (["--nope", "1"], 1, "nope 1", "Bad directive or wrong number of arguments"),
        (["--port", "1", "2"], 1, "port 1 2", "Bad directive or wrong number of arguments"),
        (
            ["--logfile", "a", "b c"],
            1,
            'logfile a "b c"',
            "Bad directive or wrong number of arguments",
        ),
    ],
)
def test_apply_args_errors(args, lineno, line, reason):
    with pytest.raises(ConfigError) as info:
        Config().apply_args(args)
    err = info.value
    assert (err.lineno, err.line, err.reason, err.origin) == (lineno, line, reason, "command line")
    assert f"at line {lineno} (command line)" in str(err)


@pytest.mark.parametrize(("typo", "meant"), [("maxmemroy", "maxmemory"),
                                             ("appendonyl", "appendonly"),
                                             ("cluster-node-timout", "cluster-node-timeout"),
                                             ("LogLevle", "loglevel")])
def test_a_mistyped_directive_names_the_one_it_resembles(typo, meant):
    """issue #24: `disque-server --maxmemroy 1gb` said only "Bad directive"."""
    with pytest.raises(ConfigError) as info:
        Config().apply_args([f"--{typo}", "1"])
    assert info.value.reason == f"Bad directive or wrong number of arguments (did you mean --{meant}?)"
    with pytest.raises(ConfigError) as info:
        Config.from_text(f"port 7000\n{typo} 1\n", origin="disque.conf")
    assert info.value.reason == f"Bad directive or wrong number of arguments (did you mean {meant}?)"
    assert info.value.lineno == 2


def test_no_suggestion_for_what_resembles_nothing_or_a_right_name_with_wrong_arguments():
    for argv in (["--nosuchthing", "1"], ["--port"], ["--maxmemory", "1gb", "2gb"]):
        with pytest.raises(ConfigError) as info:
            Config().apply_args(argv)
        assert info.value.reason == "Bad directive or wrong number of arguments"


# ---------------------------------------------------------------------------
# Glob matching and CONFIG GET
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "string", "expected"),
    [
        ("*", "port", True),
        ("port", "port", True),
        ("por", "port", False),
        ("p*t", "port", True),
        ("p*", "p", True),
        ("*t", "port", True),
        ("**t", "port", True),
        ("p?rt", "port", True),
        ("p?rt", "prt", False),
        ("p[aeiou]rt", "port", True),
        ("p[^o]rt", "port", False),
        ("p[^a]rt", "port", True),
        ("p[a-z]rt", "port", True),
        ("p[z-a]rt", "port", True),  # reversed range
        ("p[0-9]rt", "port", False),
        ("p[\\o]rt", "port", True),
        ("p[o", "po", True),  # unterminated class
        ("\\*", "*", True),
        ("\\*", "x", False),
        ("a\\", "a\\", True),
        ("PORT", "port", True),
        ("P[O]RT", "port", True),
        ("*-*-*", "auto-aof-rewrite-percentage", True),
        ("", "port", False),
    ],
)
def test_glob_match(pattern, string, expected):
    assert glob_match(pattern, string) is expected


def test_glob_match_case_sensitive_mode():
    assert glob_match("PORT", "port", nocase=False) is False
    assert glob_match("port", "port", nocase=False) is True


def test_glob_match_pathological_pattern_is_fast():
    start = time.perf_counter()
    assert glob_match("*a" * 30 + "b", "a" * 40) is False
    assert time.perf_counter() - start < 1.0


def test_get_renders_values():
    cfg = Config.from_text(
        "bind 127.0.0.1 ::1\nappendonly yes\nunixsocketperm 700\nmaxmemory 2gb\n"
        "client-output-buffer-limit normal 1mb 512kb 30\nrename-command debug x\n"
    )
    got = dict(cfg.get("*"))
    assert got["bind"] == "127.0.0.1 ::1"
    assert got["appendonly"] == "yes"
    assert got["daemonize"] == "no"
    assert got["unixsocketperm"] == "700"
    assert got["maxmemory"] == str(2 * GB)
    assert got["auto-aof-rewrite-min-size"] == str(64 * MB)
    assert got["client-output-buffer-limit"] == f"normal {MB} {512 * 1024} 30"
    assert got["port"] == "7711"
    assert got["requirepass"] == ""
    assert got["appendfsync"] == "everysec"
    assert "rename-command" not in got
    assert "cluster-secret" not in got  # a secret: never shown by CONFIG GET
    assert "user" not in got  # users hold password hashes: ACL LIST shows them
    assert len(got) == len(DIRECTIVES) - 3


def test_get_patterns():
    cfg = Config()
    assert cfg.get("port") == [("port", "7711")]
    assert cfg.get("PORT") == [("port", "7711")]
    assert cfg.get("nomatch") == []
    assert [n for n, _ in cfg.get("maxmemory*")] == [
        "maxmemory",
        "maxmemory-policy",
    ]
    assert [n for n, _ in cfg.get("*fsync*")] == [
        "appendfsync",
        "no-appendfsync-on-rewrite",
        "aof-rewrite-incremental-fsync",
    ]
    assert [n for n, _ in cfg.get("h?")] == ["hz"]
    assert [n for n, _ in cfg.get("[bd]*")] == [
        "daemonize", "bind", "dir", "delivery-token-ttl"]
    assert [n for n, _ in cfg.get("[^a-z]*")] == []


def test_value_and_render():
    cfg = Config()
    assert cfg.value("Maxmemory") == GB
    assert cfg.render("maxmemory") == str(GB)
    assert cfg.render("bind") == "127.0.0.1"
    with pytest.raises(KeyError):
        cfg.value("nope")
    with pytest.raises(KeyError):
        cfg.render("nope")


# ---------------------------------------------------------------------------
# CONFIG SET
# ---------------------------------------------------------------------------


def test_set_changes_and_reports():
    cfg = Config()
    assert cfg.set("appendonly", "yes") == ["appendonly"]
    assert cfg.appendonly is True
    assert cfg.set("appendonly", "YES") == []
    assert cfg.set("MaxMemory", "100mb") == ["maxmemory"]
    assert cfg.maxmemory == 100 * MB
    assert cfg.set("maxmemory", str(100 * MB)) == []
    assert cfg.set("appendfsync", "ALWAYS") == ["appendfsync"]
    assert cfg.appendfsync == "always"
    assert cfg.set("requirepass", "pw") == ["requirepass"]
    assert cfg.set("requirepass", "") == ["requirepass"]
    assert cfg.requirepass == ""
    assert cfg.set("slowlog-log-slower-than", "-1") == ["slowlog-log-slower-than"]
    assert cfg.slowlog_log_slower_than == -1
    assert cfg.set("dir", "/var/lib/disque") == ["dir"]
    assert cfg.set("protected-mode", "no") == ["protected-mode"]
    assert cfg.set("cluster-node-timeout", "3000") == ["cluster-node-timeout"]
    assert cfg.set("event-log-max-size", "1gb") == ["event-log-max-size"]


def test_set_hz_is_clamped():
    cfg = Config()
    assert cfg.set("hz", "1000") == ["hz"]
    assert cfg.hz == 500
    assert cfg.set("hz", "0") == ["hz"]
    assert cfg.hz == 1
    assert Config.from_text("hz 100000\n").hz == 500


def test_set_client_output_buffer_limit():
    cfg = Config()
    assert cfg.set("client-output-buffer-limit", "normal 1048576 1024 10") == [
        "client-output-buffer-limit"
    ]
    assert cfg.client_output_buffer_limit == OutputBufferLimit(MB, 1024, 10)
    cfg.set("client-output-buffer-limit", "normal 1 2 3 NORMAL 4 5 6")
    assert cfg.client_output_buffer_limit == OutputBufferLimit(4, 5, 6)
    cfg.set("client-output-buffer-limit", "normal 1mb 1kb 0")
    assert cfg.client_output_buffer_limit == OutputBufferLimit(MB, 1024, 0)


@pytest.mark.parametrize(
    "name",
    [
        "nosuch",
        "port",
        "Port",
        "bind",
        "daemonize",
        "appendfilename",
        "rename-command",
        "cluster-config-file",
        "logfile",
    ],
)
def test_set_unsupported(name):
    cfg = Config()
    with pytest.raises(ConfigError) as info:
        cfg.set(name, "1")
    assert str(info.value) == f"Unsupported CONFIG parameter: {name}"
    assert info.value.kind == ("unsupported" if name == "nosuch" else "immutable")
    assert cfg == Config()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("maxmemory", "0"),
        ("maxmemory", "-1"),
        ("maxmemory", "lots"),
        ("MaxMemory", "1.5gb"),
        ("appendonly", "on"),
        ("appendfsync", "sometimes"),
        ("loglevel", "loud"),
        ("maxmemory-policy", "volatile-lru"),
        ("maxmemory-policy", "noeviction"),
        ("timeout", "-1"),
        ("timeout", "1.5"),
        ("timeout", " 1"),
        ("timeout", "+1"),
        ("tcp-keepalive", "yes"),
        ("maxclients", "0"),
        ("hz", "-1"),
        ("cluster-node-timeout", "0"),
        ("slowlog-max-len", "-1"),
        ("latency-monitor-threshold", "-1"),
        ("auto-aof-rewrite-percentage", "-1"),
        ("requirepass", "x" * 513),
        ("client-output-buffer-limit", ""),
        ("client-output-buffer-limit", "normal 0 0"),
        ("client-output-buffer-limit", "slave 0 0 0"),
        ("client-output-buffer-limit", "normal 0 0 -1"),
        ("client-output-buffer-limit", "normal  0 0 0"),
        ("client-output-buffer-limit", "normal 1 2 3 normal x 0 0"),
        ("proto-max-bulk-len", "1kb"),
        ("job-max-body-size", "-1"),
        ("job-max-body-size", "lots"),
        ("client-query-buffer-limit", "1000"),
        ("protected-mode", ""),
        ("watchdog-period", "-1"),
    ],
)
def test_set_invalid(name, value):
    cfg = Config()
    with pytest.raises(ConfigError) as info:
        cfg.set(name, value)
    assert str(info.value) == f"Invalid argument '{value}' for CONFIG SET '{name}'"
    assert info.value.kind == "invalid"
    assert cfg == Config()  # nothing applied, not even partially


def test_copy_and_equality():
    cfg = Config.from_text(SAMPLE_CONF)
    clone = cfg.copy()
    assert clone == cfg and clone is not cfg
    clone.bind.append("10.9.9.9")
    assert clone != cfg
    assert cfg != "not a config"
    assert "port=7712" in repr(cfg)
    assert repr(Config()) == "Config()"


def test_protected_mode_violations():
    cfg = Config.from_text("bind 127.0.0.1 ::1 localhost 127.1.2.3 10.0.0.1 0.0.0.0 host.example\n")
    assert cfg.protected_mode_violations() == ["10.0.0.1", "0.0.0.0", "host.example"]
    cfg.set("requirepass", "pw")
    assert cfg.protected_mode_violations() == []
    cfg.set("requirepass", "")
    cfg.set("protected-mode", "no")
    assert cfg.protected_mode_violations() == []
    assert Config().protected_mode_violations() == []


# ---------------------------------------------------------------------------
# CONFIG REWRITE
# ---------------------------------------------------------------------------


def test_rewrite_unchanged_is_identity():
    cfg = Config.from_text(SAMPLE_CONF)
    assert cfg.rewrite(SAMPLE_CONF) == SAMPLE_CONF


def test_rewrite_replaces_changed_lines_in_place():
    cfg = Config.from_text(SAMPLE_CONF)
    cfg.set("maxmemory", "3gb")
    cfg.set("appendfsync", "always")
    cfg.set("hz", "50")
    out = cfg.rewrite(SAMPLE_CONF)
    old, new = lines_of(SAMPLE_CONF), lines_of(out)
    assert len(old) == len(new)
    diff = {(a, b) for a, b in zip(old, new, strict=True) if a != b}
    assert diff == {
        ("maxmemory 2gb", "maxmemory 3gb"),
        ("appendfsync everysec", "appendfsync always"),
        ("   hz 20", "hz 50"),
    }
    assert Config.from_text(out) == cfg


def test_rewrite_appends_non_default_directives_after_signature():
    cfg = Config.from_text(SAMPLE_CONF)
    cfg.set("timeout", "300")  # present in file: in place
    cfg.set("latency-monitor-threshold", "100")  # present: in place
    cfg.set("delivery-token-ttl", "10")  # absent: appended
    cfg.set("event-log-max-size", "1mb")  # absent: appended
    cfg.set("protected-mode", "yes")  # default, absent: not added
    out = cfg.rewrite(SAMPLE_CONF)
    body = SAMPLE_CONF.replace("timeout 0", "timeout 300").replace(
        "latency-monitor-threshold 0", "latency-monitor-threshold 100"
    )
    assert out == body + f"{REWRITE_SIGNATURE}\ndelivery-token-ttl 10\nevent-log-max-size 1mb\n"
    assert Config.from_text(out) == cfg
    # a second rewrite reuses the tail rather than adding another signature
    cfg.set("watchdog-period", "200")
    again = cfg.rewrite(out)
    assert again == out + "watchdog-period 200\n"
    assert again.count(REWRITE_SIGNATURE) == 1


def test_rewrite_does_not_add_defaults():
    cfg = Config()
    assert cfg.rewrite("# only a comment\n") == "# only a comment\n"
    assert cfg.rewrite(None) == ""
    assert cfg.rewrite("") == ""


def test_rewrite_without_original_file():
    cfg = Config()
    cfg.set("appendonly", "yes")
    cfg.set("requirepass", "a b")
    assert cfg.rewrite(None) == f'{REWRITE_SIGNATURE}\nrequirepass "a b"\nappendonly yes\n'


def test_rewrite_collapses_duplicates_to_first_position():
    text = "port 1\n# between\nport 2\nhz 5\nport 3\n"
    cfg = Config.from_text(text)
    assert cfg.port == 3
    assert cfg.rewrite(text) == "port 3\n# between\nhz 5\n"
    cfg.set("hz", "5")
    assert Config.from_text(cfg.rewrite(text)) == cfg


def test_rewrite_keeps_equal_lines_verbatim():
    text = "MAXMEMORY 1073741824\nappendonly   YES\npidfile /run/d.pid\nbind  127.0.0.1\n"
    cfg = Config.from_text(text)
    assert cfg.rewrite(text) == text
    cfg.set("maxmemory", "2147483648")
    assert cfg.rewrite(text) == text.replace("MAXMEMORY 1073741824", "maxmemory 2gb")


def test_rewrite_keeps_unknown_and_unmanaged_lines():
    text = (
        "some-future-directive 1 2 3\n"
        "include /etc/disque/common.conf\n"
        "rename-command CONFIG cfg\n"
        "rename-command DEBUG ''\n"
        "port 7711\n"
    )
    cfg = Config.from_text(
        text.replace("include /etc/disque/common.conf\n", "").replace(
            "some-future-directive 1 2 3\n", ""
        )
    )
    cfg.set("timeout", "10")
    out = cfg.rewrite(text)
    assert out == text + f"{REWRITE_SIGNATURE}\ntimeout 10\n"


def test_rewrite_unbalanced_line_becomes_comment():
    text = 'port 7711\nlogfile "oops\n'
    assert Config().rewrite(text) == 'port 7711\n# ??? logfile "oops\n'


def test_rewrite_drops_lines_of_unset_optional_strings():
    text = "# auth\nrequirepass secret\nunixsocket /tmp/d.sock\nport 7711\n"
    cfg = Config.from_text(text)
    cfg.set("requirepass", "")
    out = cfg.rewrite(text)
    assert out == "# auth\nunixsocket /tmp/d.sock\nport 7711\n"
    assert Config.from_text(out) == cfg


def test_rewrite_replaces_bad_lines_of_known_directives():
    cfg = Config()
    cfg.set("hz", "30")
    assert cfg.rewrite("hz lots\nhz 1 2\n") == "hz 30\n"


def test_rewrite_preserves_missing_final_newline_and_crlf():
    cfg = Config.from_text("# c\r\nport 7712\r\n# end")
    assert cfg.port == 7712
    assert cfg.rewrite("# c\r\nport 7712\r\n# end") == "# c\r\nport 7712\r\n# end"
    cfg.set("hz", "11")
    assert cfg.rewrite("# c\nport 7712") == f"# c\nport 7712\n{REWRITE_SIGNATURE}\nhz 11\n"


def test_rewrite_formats_values():
    cfg = Config()
    cfg.apply_args(
        [
            "--bind",
            "0.0.0.0",
            "weird host",
            "--client-output-buffer-limit",
            "normal",
            "1gb",
            "1000",
            "5",
            "--unixsocketperm",
            "755",
            "--logfile",
            'a "quoted"\tname',
            "--auto-aof-rewrite-min-size",
            "1000",
        ]
    )
    out = cfg.rewrite(None)
    assert out == (
        f"{REWRITE_SIGNATURE}\n"
        'bind 0.0.0.0 "weird host"\n'
        "unixsocketperm 755\n"
        'logfile "a \\"quoted\\"\\tname"\n'
        "auto-aof-rewrite-min-size 1000\n"
        "client-output-buffer-limit normal 1gb 1000 5\n"
    )
    assert Config.from_text(out) == cfg


def test_to_text_round_trips():
    cfg = Config.from_text(SAMPLE_CONF)
    assert Config.from_text(cfg.to_text()) == cfg
    assert Config.from_text(cfg.to_text(include_defaults=True)) == cfg
    assert Config().to_text() == ""
    full = Config().to_text(include_defaults=True)
    assert "maxmemory 1gb\n" in full and "port 7711\n" in full
    assert "requirepass" not in full and "rename-command" not in full


# ---------------------------------------------------------------------------
# Properties: random CONFIG SET sequences survive CONFIG REWRITE.
# ---------------------------------------------------------------------------

_SAFE_TEXT = st.one_of(
    st.text(max_size=12),
    st.binary(max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape")),
)


def _int_values(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.integers(min_value=lo, max_value=hi).map(str)


def _memory_values(lo: int) -> st.SearchStrategy[str]:
    units = st.sampled_from(["", "b", "k", "kb", "m", "mb", "g", "gb", "KB", "Mb", "G"])
    return (
        st.tuples(st.integers(min_value=0, max_value=4096), units)
        .map(lambda t: f"{t[0]}{t[1]}")
        .filter(lambda v: parse_memory(v) >= lo)
    )


def _case(word: str) -> st.SearchStrategy[str]:
    return st.sampled_from([word, word.upper(), word.capitalize()])


SET_VALUES: dict[str, st.SearchStrategy[str]] = {
    "protected-mode": st.sampled_from(["yes", "no"]).flatmap(_case),
    "timeout": _int_values(0, 10**6),
    "tcp-keepalive": _int_values(0, 600),
    "loglevel": st.sampled_from(["debug", "verbose", "notice", "warning"]).flatmap(_case),
    "dir": _SAFE_TEXT,
    "requirepass": _SAFE_TEXT,
    "maxclients": _int_values(1, 100000),
    "maxmemory": _memory_values(1),
    "maxmemory-policy": st.sampled_from(["acks", "ACKS", "Acks"]),
    "client-query-buffer-limit": _memory_values(MB),
    "proto-max-bulk-len": _memory_values(MB),
    "job-max-body-size": _memory_values(0),
    "proto-max-multibulk-len": _int_values(1, 10**7),
    "client-max-unauthenticated": _int_values(1, 10**6),
    "client-max-unauthenticated-per-ip": _int_values(1, 10**6),
    "client-auth-timeout": _int_values(1, 3600),
    "appendonly": st.sampled_from(["yes", "no"]),
    "appendfsync": st.sampled_from(["everysec", "always", "no"]),
    "no-appendfsync-on-rewrite": st.sampled_from(["yes", "no"]),
    "auto-aof-rewrite-percentage": _int_values(0, 1000),
    "auto-aof-rewrite-min-size": _memory_values(0),
    "aof-rewrite-incremental-fsync": st.sampled_from(["yes", "no"]),
    "aof-load-truncated": st.sampled_from(["yes", "no"]),
    "aof-enqueue-jobs-once": st.sampled_from(["yes", "no"]),
    "cluster-node-timeout": _int_values(1, 10**6),
    "slowlog-log-slower-than": _int_values(-10, 10**6),
    "slowlog-max-len": _int_values(0, 10**4),
    "latency-monitor-threshold": _int_values(0, 10**4),
    "client-output-buffer-limit": st.tuples(
        st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 3600)
    ).map(lambda t: f"normal {t[0]} {t[1]} {t[2]}"),
    "hz": _int_values(0, 1000),
    "watchdog-period": _int_values(0, 1000),
    "event-log-max-size": _memory_values(0),
    "event-log": st.sampled_from(["yes", "no"]),
    "event-log-dir": _SAFE_TEXT,
    "delivery-token-ttl": _int_values(1, 10**6),
    "job-outcome-retention": _int_values(0, 10**6),
    "job-outcome-max-memory": _memory_values(1),
}

SET_OPS = st.lists(
    st.sampled_from(sorted(SET_VALUES)).flatmap(lambda n: st.tuples(st.just(n), SET_VALUES[n])),
    max_size=25,
)

ORIGINALS = st.sampled_from(
    [
        SAMPLE_CONF,
        "",
        "# empty but for a comment\n",
        "port 7711\nport 7712\nhz 10\n# tail\n" + REWRITE_SIGNATURE + "\nappendonly yes\n",
        "requirepass secret\nrename-command flushall ''\ndir /tmp\nmaxmemory 10mb",
    ]
)


def test_every_mutable_directive_is_exercised_by_the_property():
    assert set(SET_VALUES) == {d.name for d in DIRECTIVES if d.mutable}


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(ORIGINALS, SET_OPS)
def test_property_rewrite_round_trips_live_config(original, ops):
    live = Config.from_text(original)
    for name, value in ops:
        live.set(name, value)
    rewritten = live.rewrite(original)
    rewritten.encode("utf-8")  # the shell can write it as strict UTF-8
    assert Config.from_text(rewritten) == live
    # rewriting again changes nothing
    assert live.rewrite(rewritten) == rewritten
    # comment lines of the original survive, in order
    comments = [ln for ln in lines_of(original) if ln.strip().startswith("#")]
    kept = [ln for ln in lines_of(rewritten) if ln.strip().startswith("#")]
    assert [c for c in kept if c != REWRITE_SIGNATURE] == [
        c for c in comments if c != REWRITE_SIGNATURE
    ]
    # to_text is an alternative full dump
    assert Config.from_text(live.to_text()) == live


@settings(max_examples=200)
@given(SET_OPS)
def test_property_set_then_get_reflects_value(ops):
    cfg = Config()
    for name, value in ops:
        cfg.set(name, value)
        d = directive(name)
        assert cfg.get(name) == [(d.name, d.render(d.type.parse_set(value)))]


def test_tls_and_bus_secret_directives():
    cfg = Config.from_text(
        'tls-port 7443\ntls-cert-file /c.pem\ntls-key-file /k.pem\ntls-ca-cert-file /ca.pem\n'
        'tls-auth-clients OPTIONAL\ntls-cluster yes\ntls-protocols "tlsv1.3 TLSv1.2"\n'
        'tls-ciphers HIGH\ncluster-secret 0123456789abcdef0123\n'
    )
    assert (cfg.tls_port, cfg.tls_auth_clients, cfg.tls_cluster) == (7443, "optional", True)
    assert cfg.tls_protocols == "TLSv1.2 TLSv1.3"
    assert cfg.cluster_secret == "0123456789abcdef0123"
    assert Config.from_text(cfg.to_text()) == cfg  # round trip, the secret included
    assert Config().tls_auth_clients == "yes"  # Redis's default: mutual TLS
    assert Config().tls_protocols == "TLSv1.2 TLSv1.3"


@pytest.mark.parametrize("line,reason", [
    ("tls-auth-clients maybe", "argument must be 'yes', 'no' or 'optional'"),
    ('tls-protocols "TLSv1 TLSv1.3"', "Invalid tls-protocols: the versions must be contiguous"),
    ("tls-protocols SSLv3", "Invalid tls-protocols: expected some of TLSv1 TLSv1.1 TLSv1.2 "
     "TLSv1.3"),
    ("cluster-secret short", "cluster-secret must be at least 16 characters (or empty for "
     "none)"),
    ("tls-port 70000", "Invalid tls-port"),
])
def test_tls_and_bus_secret_bad_values(line, reason):
    with pytest.raises(ConfigError) as e:
        Config.from_text(line)
    assert e.value.reason == reason


def test_unauthenticated_bus_violations():
    assert Config.from_text("bind 127.0.0.1 ::1").unauthenticated_bus_violations() == []
    exposed = Config.from_text("bind 127.0.0.1 10.0.0.1")
    assert exposed.unauthenticated_bus_violations() == ["10.0.0.1"]
    for fix in ("cluster-secret 0123456789abcdef", "tls-cluster yes",
                "cluster-allow-unauthenticated-bus yes"):
        cfg = Config.from_text("bind 10.0.0.1\n" + fix)
        assert cfg.unauthenticated_bus_violations() == []
