"""The example disque.conf at the repository root and `disque-server --help`: both
generated from the directive table, so neither can drift from what the server does."""

from __future__ import annotations

import subprocess

import pytest
from support import ROOT, SERVER, Server

from disquepy.core.config import DIRECTIVES, Config
from disquepy.server.main import example_config

EXAMPLE = ROOT / "disque.conf"


def test_committed_example_is_the_generated_one():
    assert EXAMPLE.read_text() == example_config(), (
        "disque.conf is out of date: regenerate it with "
        "`disque-server --print-example-config > disque.conf`")


def test_example_lists_every_directive_with_its_default():
    text = EXAMPLE.read_text()
    for d in DIRECTIVES:
        lines = [ln for ln in text.splitlines() if ln.lstrip("# ").split(" ")[0] == d.name]
        assert lines, f"{d.name} is missing from disque.conf"
        assert d.doc and f"# {d.doc.split()[0]}" in text
    # read back, the example sets every directive to exactly its default
    assert Config.from_text(text, origin="disque.conf") == Config()


def test_cli_prints_the_example_and_lists_directives_in_help():
    out = subprocess.run([*SERVER, "--print-example-config"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert out == EXAMPLE.read_text()
    helptext = subprocess.run([*SERVER, "--help"], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    assert "disque.conf" in helptext and "--print-example-config" in helptext
    for d in DIRECTIVES:
        assert f"  --{d.name} " in helptext, d.name


@pytest.mark.timeout(30)
def test_a_node_starts_from_the_example(tmp_path):
    s = Server(tmp_path, conf=EXAMPLE.read_text()).start()
    try:
        c = s.client()
        assert c.config_get("maxmemory") == {"maxmemory": str(1 << 30)}
        assert c.ping()
    finally:
        s.kill()


def test_license_is_bsd_3_clause_as_pyproject_says():
    text = (ROOT / "LICENSE").read_text()
    assert 'license = "BSD-3-Clause"' in (ROOT / "pyproject.toml").read_text()
    assert "Copyright (c)" in text and "the disquepy authors" in text
    assert "Neither the name of the copyright holder" in text  # the third clause


@pytest.mark.parametrize(("typo", "meant"), [("--hlep", "--help"), ("--verison", "--version"),
                                             ("--print-exmaple-config",
                                              "--print-example-config")])
def test_a_typo_of_an_option_is_not_read_as_a_directive(typo, meant):
    """issue #24: `disque-server --hlep` was read as a directive named hlep."""
    res = subprocess.run([*SERVER, typo], capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == (f"Unknown option {typo}: did you mean {meant}? "
                          "(disque-server --help lists the options)\n")


def test_a_mistyped_directive_names_the_right_one(tmp_path):
    """issue #24: `disque-server --maxmemroy 1gb` suggests maxmemory, on the command line
    and in a config file."""
    res = subprocess.run([*SERVER, "--port", "7000", "--maxmemroy", "1gb"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert ">>> 'maxmemroy 1gb'\nBad directive or wrong number of arguments (did you mean " \
           "--maxmemory?)" in res.stderr
    conf = tmp_path / "disque.conf"
    conf.write_text("port 7000\nmaxmemroy 1gb\n")
    res = subprocess.run([*SERVER, str(conf)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and "at line 2" in res.stderr
    assert "Bad directive or wrong number of arguments (did you mean maxmemory?)" in res.stderr
