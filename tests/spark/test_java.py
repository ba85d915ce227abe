"""Without Java 17+ the Spark tests fail in CI (never a silent skip) and `disque analytics`
says in one line what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# a test that needs the SparkSession (and a node, started after it)
NEEDS_SPARK = "tests/spark/test_connector.py::test_binary_bodies_round_trip"


def no_java_env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "CI")}
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env["PATH"] = str(empty)  # no java on it
    env.update(extra)
    return env


def run_pytest(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", NEEDS_SPARK],
        cwd=ROOT, env=no_java_env(tmp_path, **extra), capture_output=True, text=True,
        timeout=240)


@pytest.mark.timeout(300)
def test_spark_tests_fail_without_java_in_ci_and_skip_saying_why_outside(tmp_path):
    ci = run_pytest(tmp_path, CI="true")
    out = ci.stdout + ci.stderr
    assert ci.returncode == 1, out
    assert "ERROR at setup of test_binary_bodies_round_trip" in out, out
    assert "skipped" not in out.lower(), out
    assert "Spark needs Java 17+ (no java on PATH and JAVA_HOME unset)" in out
    local = run_pytest(tmp_path)
    out = local.stdout + local.stderr
    assert local.returncode == 0, out
    assert "SKIPPED [1]" in out and "apt-get install openjdk-17" in out, out


def test_analytics_without_java_is_one_line_saying_what_to_install(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    (events / "events-x.jsonl").write_text("")
    res = subprocess.run([sys.executable, "-m", "disquepy.cli", "analytics", str(events),
                          "--out", str(tmp_path / "out")],
                         env=no_java_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Spark needs Java 17+" in lines[0] and "apt-get install openjdk-17-jre-headless" \
        in lines[0]
    assert not (tmp_path / "out").exists()
