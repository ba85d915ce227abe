"""The core and the codecs stay pure: no clock, randomness, sockets, threads or OS."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "disquepy"
FORBIDDEN = {"asyncio", "socket", "time", "random", "threading", "selectors", "uvloop", "os",
             "subprocess", "signal", "datetime"}
PURE_DIRS = ["core", "codec"]


def pure_modules():
    for d in PURE_DIRS:
        yield from sorted((SRC / d).rglob("*.py"))


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            roots.add("__import__")
    return roots


@pytest.mark.parametrize("path", list(pure_modules()), ids=lambda p: str(p.relative_to(SRC)))
def test_module_is_pure(path):
    bad = imported_roots(path) & (FORBIDDEN | {"__import__"})
    assert not bad, f"{path} imports {bad}"


def test_checker_catches_an_impure_module(tmp_path):
    f = tmp_path / "impure.py"
    f.write_text("import json\nfrom time import monotonic\n")
    assert "time" in imported_roots(f)


C_ALLOWED = {"Python.h", "string.h"}


def test_c_sources_are_pure():
    # C sources in the core and codec (the request reader) follow the same rule:
    # no headers that bring clocks, sockets, files or threads
    sources = [p for d in PURE_DIRS for p in sorted((SRC / d).rglob("*.c"))]
    assert sources, "the C sources moved: update this test"
    for path in sources:
        for line in path.read_text().splitlines():
            if line.startswith("#include"):
                header = line.split()[1].strip('<>"')
                assert header in C_ALLOWED, f"{path.name} includes {header}"
