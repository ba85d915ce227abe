"""Shared output helpers for the friendly commands (rich consoles and small formatters)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

WIDE = 200  # width when the output is not a terminal: tables never squeeze IDs in files


def console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); wide and colourless when not a terminal."""
    file = sys.stderr if stderr else sys.stdout
    c = Console(file=file, highlight=False)
    if not c.is_terminal:
        c = Console(file=file, highlight=False, width=WIDE, no_color=True)
    return c


def human_bytes(n: float | int | None) -> str:
    """``1536`` -> ``1.5K`` (binary units, like INFO's ``*_human`` fields)."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"  # pragma: no cover


def human_age(seconds: float) -> str:
    """``3725`` -> ``1h2m``; ``42`` -> ``42s``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def text(value: object) -> str:
    """A reply value as text (UTF-8, undecodable bytes replaced)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def pairs(reply: list[Any] | None) -> dict[str, object]:
    """A flat ``[key, value, ...]`` reply (SHOW, QSTAT) as a dict with str keys (values
    of every reply type, hence Any)."""
    if not reply:
        return {}
    return {text(k): v for k, v in zip(reply[::2], reply[1::2], strict=False)}
