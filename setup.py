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

import hashlib
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
    "src/disquepy/core/jobcodec.py",
    "src/disquepy/core/jobtable.py",
    "src/disquepy/core/probing.py",
    "src/disquepy/core/keys.py",
    "src/disquepy/core/latency.py",
    "src/disquepy/core/memory.py",
    "src/disquepy/core/queue.py",
    "src/disquepy/core/queues.py",
    "src/disquepy/core/slowlog.py",
    "src/disquepy/core/node.py",
    "src/disquepy/core/jobstore.py",
    "src/disquepy/core/commands/__init__.py",
    "src/disquepy/core/commands/acks.py",
    "src/disquepy/core/commands/args.py",
    "src/disquepy/core/commands/cluster.py",
    "src/disquepy/core/commands/jobs.py",
    "src/disquepy/core/commands/queues.py",
    "src/disquepy/core/commands/server.py",
    "src/disquepy/core/info.py",
    "src/disquepy/core/commands/status.py",
    "src/disquepy/core/commands/groups.py",
    "src/disquepy/core/commands/users.py",
    "src/disquepy/core/outcomes.py",
    "src/disquepy/core/jobmetrics.py",
    "src/disquepy/core/persistence.py",
    # the cluster: bus messages and the node's parts by topic
    "src/disquepy/core/messages.py",
    "src/disquepy/core/membership.py",
    "src/disquepy/core/replication.py",
    "src/disquepy/core/acks.py",
    "src/disquepy/core/acl.py",
    "src/disquepy/core/federation.py",
    # consumer groups, by topic (as the job side is)
    "src/disquepy/core/record.py",
    "src/disquepy/core/eventcodec.py",
    "src/disquepy/core/groups/__init__.py",
    "src/disquepy/core/groups/model.py",
    "src/disquepy/core/groups/store.py",
    "src/disquepy/core/groups/replication.py",
    "src/disquepy/core/groups/leases.py",
    "src/disquepy/core/groups/acks.py",
    "src/disquepy/core/groups/notify.py",
    "src/disquepy/core/groups/dead.py",
    "src/disquepy/core/groups/persist.py",
    "src/disquepy/core/groups/sync.py",
    # the shell's per-request loop, and what it does with the node's outputs each batch
    "src/disquepy/server/protocol.py",
    "src/disquepy/core/outputs.py",
    "src/disquepy/server/driver.py",
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


# beside the package's __init__.py: "<sha1> <path>" of each .py the build compiled, so
# that an edited source is never shadowed by its stale extension (disquepy/__init__.py)
MANIFEST = "_mypyc_sources.txt"


class BuildExt(build_ext):
    """The mypyc modules import one shared library: they are built all or none, so a
    half-built set never shadows the .py files; the manifest lists what was built."""

    def mypyc_outputs(self) -> list[str]:
        """Where this build puts (or an earlier build put) the mypyc modules."""
        names = ["disquepy__mypyc"] + [
            src.removeprefix("src/").removesuffix(".py").replace("/", ".")
            for src in MYPYC_MODULES]
        return [self.get_ext_fullpath(n) for n in names]

    def run(self):
        manifest = os.path.join(os.path.dirname(self.get_ext_fullpath("disquepy.x")), MANIFEST)
        if os.path.exists(manifest):
            os.remove(manifest)
        mypyc = [e for e in self.extensions if e.name != "disquepy.codec._creader"]
        if not mypyc:  # not compiled this time: no module of an earlier build may remain
            self.remove(self.mypyc_outputs())
            saved, self.inplace = self.inplace, 0  # and none in build/ to be installed
            self.remove(self.mypyc_outputs())
            self.inplace = saved
        super().run()
        missing = [e for e in mypyc if not os.path.exists(self.get_ext_fullpath(e.name))]
        if mypyc and missing:
            self.remove(self.mypyc_outputs())
            if os.environ.get("DISQUEPY_REQUIRE_MYPYC") == "1":
                raise SystemExit("disquepy setup: compiling the mypyc modules failed")
            note("compiling the mypyc modules failed: the core stays interpreted")
        elif mypyc:
            with open(manifest, "w") as f:
                for src in MYPYC_MODULES:
                    with open(src, "rb") as s:
                        digest = hashlib.sha1(s.read()).hexdigest()
                    f.write(f"{digest} {os.path.relpath(src, 'src/disquepy')}\n")

    @staticmethod
    def remove(paths: list[str]) -> None:
        for path in paths:
            if os.path.exists(path):
                os.remove(path)


setup(
    ext_modules=[
        Extension("disquepy.codec._creader", sources=["src/disquepy/codec/_creader.c"],
                  extra_compile_args=FLAGS, optional=True),
        *mypyc_extensions(),
    ],
    cmdclass={"build_ext": BuildExt},
)
