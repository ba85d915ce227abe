"""The package's layers (pyproject.toml's import-linter contracts, docs/ARCHITECTURE.md)
hold, and each kind of contract fails on a planted back-edge; no module imports another
package's private names."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "disquepy"
LINT = Path(sys.executable).parent / "lint-imports"


def lint(src_parent: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache",
                           *extra], cwd=src_parent, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(src_parent), "PATH": "/usr/bin:/bin"})


def test_the_tree_keeps_every_contract():
    res = lint(ROOT / "src")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


PLANTED = [
    # (module, the line planted in it, the contract that must break)
    ("core/errors.py", "import disquepy.server.log", "server side: server, sim, chaos"),
    ("codec/bus.py", "import disquepy.core.job", "server side: server, sim, chaos"),
    ("client/args.py", "import disquepy.worker.backoff", "application side: cli > web"),
    ("worker/backoff.py", "import disquepy.core.ids", "no server internals"),
    ("server/sockopts.py", "import disquepy.client.args", "never imports the application side"),
    ("server/log.py", "import disquepy.core.commands.server", "never a command module"),
    ("core/ids.py", "import time", "the core is pure"),
    ("web/metrics.py", "import disquepy.client._commands", "private module"),
    ("spark/rows.py", "import disquepy.spark.groups", "no import circles"),
]


@pytest.mark.parametrize("module,line,contract", PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_back_edge_breaks_its_contract(tmp_path, module, line, contract):
    copy = tmp_path / "disquepy"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.c"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # planted\n")
    res = lint(tmp_path)
    assert res.returncode != 0, res.stdout[-2000:]
    broken = res.stdout[res.stdout.index("Broken contracts"):]
    assert contract in broken, broken[:3000]


def private_imports(path: Path, src: Path = SRC) -> list[str]:
    """Names starting with one underscore that ``path`` imports from another of
    disquepy's packages (``from disquepy.server.log import _Formatter``)."""
    rel = path.relative_to(src.parent).with_suffix("").parts
    here = rel[:-1]  # the package a relative import starts from
    own = rel[1] if len(rel) > 2 else ""
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = list(here[:len(here) - (node.level - 1)])
            target = base + (node.module.split(".") if node.module else [])
        else:
            target = (node.module or "").split(".")
        if target[0] != "disquepy" or (target[1] if len(target) > 1 else "") == own:
            continue
        bad += [f"{'.'.join(target)}.{a.name}" for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")]
    return bad


def test_no_module_imports_a_private_name_of_another_package():
    found = {str(p.relative_to(SRC)): private_imports(p) for p in sorted(SRC.rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_private_name_check_sees_one(tmp_path):
    d = tmp_path / "disquepy" / "worker"
    d.mkdir(parents=True)
    f = d / "m.py"
    f.write_text("from ..server.log import _RedisFormatter\nfrom .core import _own\n")
    assert private_imports(f, tmp_path / "disquepy") == ["disquepy.server.log._RedisFormatter"]
