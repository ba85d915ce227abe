"""disquepy: a distributed in-memory job queue compatible with Disque.

The hot path may be compiled with mypyc at install (setup.py): its modules are then
extension modules beside the ``.py`` files they were built from, and Python imports
the extension. ``DISQUEPY_INTERPRETED=1`` in the environment imports the ``.py`` files
instead (the same code, interpreted), for what compiled classes do not allow:
monkeypatching a method (the simulator's sabotage tests), a debugger, a profiler that
sees inside the core. It must be set before disquepy is first imported, and it is
inherited by the processes started from this one.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"

INTERPRETED = _os.environ.get("DISQUEPY_INTERPRETED", "") not in ("", "0")


class _SourcesFirst:
    """Finds ``disquepy.*`` modules as their ``.py`` sources when there is one, ahead
    of an extension module of the same name (C-only modules, such as the request
    reader, have no ``.py`` and are left to the normal import)."""

    @staticmethod
    def find_spec(fullname, path, target=None):
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
