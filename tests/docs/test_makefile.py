"""`make run` installs only what a node and disque-web need; `make test` installs
everything the tests need. Checked on make's own plan (`make -n`) for a fresh virtualenv."""

from __future__ import annotations

import subprocess

import pytest
from support import ROOT


def make_plan(target: str, tmp_path) -> str:
    """What `make <target>` would run with no virtualenv yet (`make -n`)."""
    return subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=True).stdout


def plan(target: str, tmp_path) -> list[str]:
    """The pip installs `make <target>` would run with no virtualenv yet."""
    return [line for line in make_plan(target, tmp_path).splitlines() if "pip install" in line]


@pytest.mark.parametrize("target", ["run", "cluster"])
def test_run_installs_the_package_and_only_the_web_extra(tmp_path, target):
    installs = plan(target, tmp_path)
    assert any(line.endswith("pip install -q -e '.[web]'") for line in installs), installs
    # no dev or spark extra (pyspark alone is ~750 MB)
    assert not any("dev" in line or "spark" in line for line in installs), installs


def test_run_starts_a_node_and_the_web_process(tmp_path):
    out = subprocess.run(["make", "-n", "run", f"VENV={tmp_path / 'venv'}", "PORT=7800",
                          "WEB_PORT=8100"], cwd=ROOT, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    assert "scripts/cluster.py --nodes 1 --port 7800" in out and "--web 8100" in out
    # and a worker, running the example handler unless HANDLER names the user's own
    assert "--worker disquepy.worker.example:handle" in out
    own = subprocess.run(["make", "-n", "run", f"VENV={tmp_path / 'venv'}",
                          "HANDLER=myworker:handle"], cwd=ROOT, capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert "--worker myworker:handle" in own


@pytest.mark.parametrize("target", ["test", "lint", "bench"])
def test_test_installs_the_dev_and_spark_extras(tmp_path, target):
    installs = plan(target, tmp_path)
    assert any("-e '.[web,dev,spark,celery]'" in line for line in installs), installs
    # one install of the package (each builds the compiled core: ~2 min), not the light
    # one and then the full one
    assert sum(line.endswith("-e '.[web]'") or "-e '.[web,dev,spark,celery]'" in line
               for line in installs) == 1, installs


def test_test_installs_java_and_run_does_not(tmp_path):
    """Spark needs Java 17+: `make test` checks for it and installs Debian's headless JRE
    when it is missing (the CI runs `make test`); `make run` starts a node without it."""
    test = make_plan("test", tmp_path)
    assert "spark/java.py" in test and "apt-get install -y -qq openjdk-17-jre-headless" in test
    run = make_plan("run", tmp_path)
    assert "openjdk" not in run and "java.py" not in run
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_test_fast_runs_the_fast_tier_only_and_installs_no_system_packages(tmp_path):
    """`make test-fast`: tests/unit and tests/sim, marked fast, over pytest-xdist
    workers; no apt packages, no Java, no compat venv (no Spark, no browser)."""
    out = make_plan("test-fast", tmp_path)
    [run] = [ln for ln in out.splitlines() if "-m pytest" in ln]
    assert run.endswith("-m fast tests/unit tests/sim") and " -n " in run
    assert "chromium" not in out and "redis-server" not in out and "java.py" not in out
    assert ".venv-compat" not in out


def test_test_runs_everything_spread_over_workers(tmp_path):
    out = make_plan("test", tmp_path)
    [run] = [ln for ln in out.splitlines() if "-m pytest" in ln]
    # every tier; the Spark and the browser tests grouped on one worker each
    assert run.endswith(" tests") and "--dist loadgroup" in run and " -m fast" not in run
    assert "lint-imports" in out and "mypy --strict" in out
