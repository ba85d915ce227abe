"""The package's optional parts (pyproject.toml's ``[project.optional-dependencies]``),
and the one line a program started without its part says instead of a traceback."""

from __future__ import annotations

import importlib.util
import sys

#: the modules each extra brings, as they are imported
EXTRAS: dict[str, tuple[str, ...]] = {
    "web": ("fastapi", "fastapi_offline", "uvicorn", "prometheus_client"),
    "spark": ("pyspark", "pyarrow", "matplotlib"),
}


def missing(extra: str, what: str) -> str | None:
    """Why ``what`` (a program or a feature) cannot run: the extra to install, naming
    the first of its modules that is not installed; ``None`` when all are."""
    absent = [m for m in EXTRAS[extra] if not _installed(m)]
    if not absent:
        return None
    return (f"{what} needs the {extra} extra, not installed here (no module {absent[0]!r}): "
            f"pip install -e '.[{extra}]' in a checkout, or pip install 'disquepy[{extra}]'")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # None in sys.modules: its import is blocked
        return False


def require(extra: str, what: str) -> None:
    """Exit with status 2 and one line on stderr when ``extra`` is not installed."""
    problem = missing(extra, what)
    if problem:
        print(problem, file=sys.stderr)
        raise SystemExit(2)
