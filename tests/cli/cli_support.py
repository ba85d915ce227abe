"""Helpers for the command line tests (imported by name: tests/cli is on sys.path)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "disquepy.cli"]
NODE_TIMEOUT_MS = 1500


@dataclass
class Result:
    """A finished ``disque`` process."""

    rc: int
    out: str
    err: str


def cli_env(home: Path) -> dict[str, str]:
    """Environment for a CLI process: HOME (history file) in the test's directory."""
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    env.pop("DISQUE_AUTH", None)
    env.pop("DISQUE_USER", None)
    env.pop("DISQUE_HISTFILE", None)
    return env


def table_rows(out: str) -> list[list[str]]:
    """The cells of the body rows of the rich tables in ``out`` (box-drawing borders)."""
    rows = []
    for line in out.splitlines():
        if line.startswith("│") and line.rstrip().endswith("│"):
            rows.append([cell.strip() for cell in line.strip()[1:-1].split("│")])
    return rows
