#!/usr/bin/env python3
"""Generate docs/API.md from the docstrings of disquepy's client and worker packages.

    .venv/bin/python scripts/gen_api_docs.py            # write docs/API.md
    .venv/bin/python scripts/gen_api_docs.py --check    # exit 1 if docs/API.md is stale

Only the standard library (inspect): each module's public names (``__all__``) in order,
classes with their public methods and properties, functions with their signatures.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

MODULES = [
    "disquepy.client",
    "disquepy.worker",
    "disquepy.client.deadletter",
    "disquepy.client.deadqueue",
]
OUT = ROOT / "docs" / "API.md"
QUALIFIED = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+([A-Za-z_]\w*)")  # a.b.Name -> Name


def doc(obj) -> str:
    d = inspect.getdoc(obj)
    return d.strip() if d else ""


def sig(obj, name: str) -> str:
    try:
        s = str(inspect.signature(obj, eval_str=True))
    except NameError:
        s = str(inspect.signature(obj))
    except (TypeError, ValueError):
        s = "(...)"
    return name + QUALIFIED.sub(r"\1", s)


def own_members(cls, skip: tuple = ()) -> list[tuple[str, object]]:
    """Public methods/properties defined by ``cls`` or its disquepy bases (but not the
    classes in ``skip``), in source order."""
    seen: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("disquepy") or klass in skip:
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") and name not in ("__call__",):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if inspect.isfunction(member) or isinstance(member, property):
                seen[name] = member
    return list(seen.items())


def _commands_class():
    from disquepy.client._commands import Commands

    return Commands


def render_class(name: str, cls, lines: list[str]) -> None:
    kind = "dataclass" if dataclasses.is_dataclass(cls) else "class"
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    head = f"{kind} {name}" + (f"({', '.join(bases)})" if bases else "")
    lines.append(f"### `{head}`\n")
    if dataclasses.is_dataclass(cls):
        fields = ", ".join(f"{f.name}: {f.type}" for f in dataclasses.fields(cls))
        lines.append(f"Fields: `{fields}`\n")
    elif not issubclass(cls, BaseException):
        lines.append(f"```python\n{sig(cls.__init__, name).replace('(self, ', '(')}\n```\n")
    d = doc(cls)
    if d:
        lines.append(d + "\n")
    if issubclass(cls, BaseException):
        return
    skip: tuple = ()
    commands = _commands_class()
    if issubclass(cls, commands) and cls.__name__ != "Disque":
        skip = (commands,)
        names = ", ".join(f"`{n}`" for n, _ in own_members(commands))
        how = "awaitable" if cls.__name__ == "AsyncDisque" else "queued, chainable"
        lines.append(f"- Every command method of `Disque` ({how}): {names}.\n")
    for mname, member in own_members(cls, skip):
        if mname == "__init__":
            continue
        if isinstance(member, property):
            lines.append(f"- **`{mname}`** (property) — {doc(member) or ''}".rstrip(" —"))
            continue
        prefix = "async " if inspect.iscoroutinefunction(member) or \
            inspect.isasyncgenfunction(member) else ""
        s = sig(member, mname).replace("(self, ", "(").replace("(self)", "()")
        lines.append(f"- **`{prefix}{s}`**")
        d = doc(member)
        if d:
            lines.append("")
            lines.extend("  " + ln if ln else "" for ln in d.splitlines())
        lines.append("")
    lines.append("")


def render() -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `scripts/gen_api_docs.py`; do not edit by hand.",
        "The asyncio client's commands are the sync client's, awaited (see `AsyncDisque`).",
        "",
    ]
    documented: set[int] = set()
    for modname in MODULES:
        mod = importlib.import_module(modname)
        lines.append(f"## `{modname}`\n")
        d = doc(mod)
        if d:
            lines.append(d + "\n")
        names = getattr(mod, "__all__", None) or [
            n for n, v in vars(mod).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == modname
            and (inspect.isclass(v) or inspect.isfunction(v))]
        for name in names:
            obj = getattr(mod, name)
            if id(obj) in documented:
                lines.append(f"- `{name}`: see above.\n")
                continue
            documented.add(id(obj))
            if inspect.isclass(obj):
                render_class(name, obj, lines)
            elif callable(obj):
                lines.append(f"### `{sig(obj, name)}`\n")
                d = doc(obj)
                if d:
                    lines.append(d + "\n")
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description="Generate docs/API.md from docstrings.")
    ap.add_argument("--check", action="store_true", help="fail if docs/API.md is stale")
    a = ap.parse_args()
    text = render()
    if a.check:
        if not OUT.exists() or OUT.read_text() != text:
            print("docs/API.md is out of date: run scripts/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
