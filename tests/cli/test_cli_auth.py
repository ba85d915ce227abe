"""``disque --user NAME -a PASSWORD`` (and over TLS) against a node with users per role."""

from __future__ import annotations

import re
import subprocess

from cli_support import CLI, cli_env


def tls_args(s) -> list[str]:
    return ["--tls", "--cacert", s.tls["cacert"], "--cert", s.tls["cert"], "--key", s.tls["key"],
            "-p", str(s.tls_port)]


def test_cli_as_each_user_over_tls(run_cli, secure_server):
    s = secure_server
    res = run_cli(*tls_args(s), "--user", "producer", "-a", "prodpw", "ADDJOB", "q", "x", 0)
    assert res.rc == 0 and re.match(r"^D-[0-9a-f]{8}-", res.out), res
    res = run_cli(*tls_args(s), "--user", "viewer", "--pass", "viewpw", "ADDJOB", "q", "y", 0)
    assert res.rc == 1
    assert res.out == ("(error) NOPERM User viewer has no permissions to run the 'addjob' "
                       "command\n")
    res = run_cli(*tls_args(s), "--user", "viewer", "-a", "viewpw", "ACL", "WHOAMI")
    assert (res.rc, res.out) == (0, '"viewer"\n')
    res = run_cli(*tls_args(s), "--user", "viewer", "-a", "wrong", "QLEN", "q")
    assert res.rc == 1 and "Traceback" not in res.err
    assert "invalid username-password pair" in res.out + res.err
    # a friendly command, the options after it, the user from the environment
    res = run_cli("jobs", "q", "-p", s.port, "--user", "consumer", "-a", "conspw")
    assert res.rc == 0 and "x" in res.out, res


def test_cli_user_from_the_environment(tmp_path, secure_server):
    env = dict(cli_env(tmp_path), DISQUE_USER="consumer", DISQUE_AUTH="conspw")
    p = subprocess.run([*CLI, "-p", str(secure_server.port), "ACL", "WHOAMI"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, '"consumer"\n')
