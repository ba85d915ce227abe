"""disquepy: a distributed in-memory job queue compatible with Disque.

The hot path may be compiled with mypyc at install (setup.py): its modules are then
extension modules beside the ``.py`` files they were built from, and Python imports
the extension. ``DISQUEPY_INTERPRETED=1`` in the environment imports the ``.py`` files
instead (the same code, interpreted), for what compiled classes do not allow:
monkeypatching a method (the simulator's sabotage tests), a debugger, a profiler that
sees inside the core. It must be set before disquepy is first imported, and it is
inherited by the processes started from this one.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec

__version__ = "0.1.0"

INTERPRETED = _os.environ.get("DISQUEPY_INTERPRETED", "") not in ("", "0")


class _SourcesFirst:
    """Finds ``disquepy.*`` modules as their ``.py`` sources when there is one, ahead
    of an extension module of the same name (C-only modules, such as the request
    reader, have no ``.py`` and are left to the normal import)."""

    @staticmethod
    def find_spec(fullname: str, path: Sequence[str] | None,
                  target: object = None) -> ModuleSpec | None:
        if path is None or not fullname.startswith(__name__ + "."):
            return None
        from importlib.util import spec_from_file_location

        name = fullname.rpartition(".")[2]
        for entry in path:
            init = _os.path.join(entry, name, "__init__.py")
            if _os.path.isfile(init):
                return spec_from_file_location(
                    fullname, init, submodule_search_locations=[_os.path.join(entry, name)])
            source = _os.path.join(entry, name + ".py")
            if _os.path.isfile(source):
                return spec_from_file_location(fullname, source)
        return None


def _stale_source() -> str | None:
    """The first compiled module whose .py changed since the build (setup.py lists the
    sources it compiled, with their SHA1), or None. An edited tree built in place must
    run its edits, not the extension of the previous version."""
    here = _os.path.dirname(__file__)
    try:
        with open(_os.path.join(here, "_mypyc_sources.txt")) as f:
            lines = f.read().split("\n")
    except OSError:
        return None  # nothing compiled
    from hashlib import sha1

    for line in lines:
        digest, _, rel = line.partition(" ")
        if rel:
            try:
                with open(_os.path.join(here, rel), "rb") as src:
                    if sha1(src.read()).hexdigest() != digest:
                        return rel
            except OSError:
                return rel
    return None


if not INTERPRETED:
    _stale = _stale_source()
    if _stale is not None:
        import warnings

        warnings.warn(f"disquepy: {_stale} changed since the core was compiled: running "
                      "the .py sources (rebuild: pip install -e ., or setup.py build_ext "
                      "--inplace)", RuntimeWarning, stacklevel=2)
        INTERPRETED = True

if INTERPRETED and not any(isinstance(f, _SourcesFirst) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _SourcesFirst())


def compiled_modules() -> list[str]:
    """The disquepy modules imported so far that run compiled (extension modules built
    from a ``.py``), sorted: empty when interpreted or not built."""
    from importlib.machinery import EXTENSION_SUFFIXES

    out = []
    for name, mod in list(_sys.modules.items()):
        f = getattr(mod, "__file__", None) or ""
        if name.startswith(__name__ + "."):
            for suffix in EXTENSION_SUFFIXES:
                if f.endswith(suffix) and _os.path.isfile(f[: -len(suffix)] + ".py"):
                    out.append(name)
    return sorted(out)
