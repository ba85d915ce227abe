"""The core and the codecs stay pure: their C sources include no clock, socket, file or
thread headers."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "disquepy"
PURE_DIRS = ["core", "codec"]

# the Python modules' imports are checked by lint-imports (pyproject.toml's contract "the
# core is pure"; tests/unit/test_layers.py plants a clock import to show it)
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
