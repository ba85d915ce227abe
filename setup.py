"""Build of the compiled parts; everything else is in pyproject.toml. Both are optional:
without a C compiler (or with ``DISQUEPY_NO_MYPYC=1``) the package installs as pure
Python and behaves the same, only slower.

- ``disquepy.codec._creader``, the client request reader (C). Without it the server uses
  the hiredis-backed reader, with the same results.
- The hot path compiled with mypyc (``MYPYC_MODULES``): the same ``.py`` files, which stay
  beside their extension modules. ``DISQUEPY_INTERPRETED=1`` at run time imports the
  ``.py`` files instead (see ``disquepy/__init__.py``). mypyc needs mypy (a build
  requirement in pyproject.toml) and a working compiler; without either, or when mypyc
  refuses the code, the build warns and goes on without them, unless
  ``DISQUEPY_REQUIRE_MYPYC=1`` (set by ``make``), which makes that an error.
"""

import os
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

# the request and job paths: one command from the reader to the reply
MYPYC_MODULES = [
    "src/disquepy/codec/resp.py",
    "src/disquepy/core/awake.py",
    "src/disquepy/core/client.py",
    "src/disquepy/core/errors.py",
    "src/disquepy/core/ids.py",
    "src/disquepy/core/job.py",
    "src/disquepy/core/jobtable.py",
    "src/disquepy/core/queue.py",
    "src/disquepy/core/node.py",
    "src/disquepy/core/commands/__init__.py",
    "src/disquepy/core/commands/acks.py",
    "src/disquepy/core/commands/args.py",
    "src/disquepy/core/commands/cluster.py",
    "src/disquepy/core/commands/jobs.py",
    "src/disquepy/core/commands/queues.py",
    "src/disquepy/core/commands/server.py",
]


def note(msg: str) -> None:
    print(f"disquepy setup: {msg}", file=sys.stderr)


def compiler_works() -> bool:
    """A C compiler and Python's headers are there (a tiny extension compiles)."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler, get_python_inc

    cc = new_compiler()
    customize_compiler(cc)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write("#include <Python.h>\nint probe(void) { return 0; }\n")
        try:
            cc.compile([src], output_dir=tmp, include_dirs=[get_python_inc()])
        except Exception:  # CompileError, a missing cc: both mean no compiler
            return False
    return True


def mypyc_extensions() -> list[Extension]:
    required = os.environ.get("DISQUEPY_REQUIRE_MYPYC") == "1"

    def skip(why: str) -> list[Extension]:
        if required:
            raise SystemExit(f"disquepy setup: DISQUEPY_REQUIRE_MYPYC=1 but {why}")
        note(f"{why}: the core stays interpreted")
        return []

    if os.environ.get("DISQUEPY_NO_MYPYC") == "1":
        return skip("DISQUEPY_NO_MYPYC=1")
    try:
        from mypyc.build import mypycify
    except ImportError:
        return skip("mypyc (from mypy) is not installed")
    if not compiler_works():
        return skip("no working C compiler")
    try:
        exts = mypycify(MYPYC_MODULES, opt_level="3", group_name="disquepy")
    except SystemExit as e:  # mypyc reports type errors and exits
        return skip(f"mypyc refused the code ({e})")
    for ext in exts:
        ext.optional = True  # a failure is handled as one, in BuildExt
    return exts


class BuildExt(build_ext):
    """The mypyc modules import one shared library: they are built all or none, so a
    half-built set never shadows the .py files."""

    def run(self):
        super().run()
        mypyc = [e for e in self.extensions if e.name != "disquepy.codec._creader"]
        missing = [e for e in mypyc if not os.path.exists(self.get_ext_fullpath(e.name))]
        if mypyc and missing:
            for e in mypyc:
                path = self.get_ext_fullpath(e.name)
                if os.path.exists(path):
                    os.remove(path)
            if os.environ.get("DISQUEPY_REQUIRE_MYPYC") == "1":
                raise SystemExit("disquepy setup: compiling the mypyc modules failed")
            note("compiling the mypyc modules failed: the core stays interpreted")

    def build_extension(self, ext):
        # an optional extension that fails is reported and skipped by build_ext; drop a
        # stale file from an earlier build so it cannot be imported instead
        path = self.get_ext_fullpath(ext.name)
        if os.path.exists(path):
            os.remove(path)
        super().build_extension(ext)


setup(
    ext_modules=[
        Extension("disquepy.codec._creader", sources=["src/disquepy/codec/_creader.c"],
                  extra_compile_args=FLAGS, optional=True),
        *mypyc_extensions(),
    ],
    cmdclass={"build_ext": BuildExt},
)
