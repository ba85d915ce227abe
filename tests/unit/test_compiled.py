"""The compiled core (mypyc, setup.py) and its interpreted twin: DISQUEPY_INTERPRETED=1
imports the .py sources, a source edited since the build is never shadowed by its stale
extension, and both run the simulator to the same trace."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from disquepy.sim import SimConfig
from disquepy.sim.sweep import run_many

SRC = Path(__file__).resolve().parents[2] / "src"
MANIFEST = SRC / "disquepy" / "_mypyc_sources.txt"

# imports the core, then patches JobStore.enqueue as sabotage.py does and counts how
# often ADDJOB on a lone node (JobStore.create_job calls self.enqueue) reaches the patch
PROBE = """
import random, sys, disquepy, disquepy.core.node as node, disquepy.codec.resp
import disquepy.core.jobstore as jobstore
from disquepy.core.config import Config
print(repr((disquepy.INTERPRETED, disquepy.compiled_modules(), node.__file__)))
calls = []
orig = jobstore.JobStore.enqueue
def enqueue(self, job, now, nack=False):
    calls.append(job)
    return orig(self, job, now, nack)
jobstore.JobStore.enqueue = enqueue
n = node.Node(Config(), "a" * 40, random.Random(1), 1000)
n.execute(n.new_client(), [b"ADDJOB", b"q", b"body", b"0"], 1000)
print(len(calls))
"""


def probe(src: Path = SRC, **env: str) -> tuple[tuple, int, str]:
    e = {k: v for k, v in os.environ.items() if k != "DISQUEPY_INTERPRETED"}
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       timeout=60, env={**e, "PYTHONPATH": str(src), **env})
    assert p.returncode == 0, p.stderr
    first, second = p.stdout.splitlines()
    return ast.literal_eval(first), int(second), p.stderr


def built_modules() -> list[str]:
    """The modules the in-place build compiled (empty when it did not run mypyc)."""
    if not MANIFEST.exists():
        return []
    rels = [line.split(" ", 1)[1] for line in MANIFEST.read_text().splitlines() if line]
    return sorted("disquepy." + r.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                  for r in rels)


def need_build() -> list[str]:
    mods = built_modules()
    if not mods:
        if os.environ.get("CI") == "true":
            pytest.fail("the core is not compiled: `make test` builds it with mypyc")
        pytest.skip("the core is not compiled in this tree (setup.py build_ext --inplace)")
    return mods


def test_interpreted_env_imports_the_sources_which_can_be_patched():
    (interpreted, compiled, node_file), patched_calls, _ = probe(DISQUEPY_INTERPRETED="1")
    assert interpreted and compiled == [] and node_file.endswith("node.py")
    assert patched_calls == 1


def test_the_compiled_build_is_what_runs_by_default():
    mods = need_build()
    (interpreted, compiled, node_file), patched_calls, err = probe()
    assert not interpreted and "changed since" not in err
    # every module the probe imported runs compiled, among them the node itself
    assert "disquepy.core.node" in compiled and set(compiled) <= set(mods), compiled
    assert not node_file.endswith(".py")
    # the compiled node calls its own methods natively: a patched method is silently
    # bypassed, which is why the sabotage tests run the sources
    assert patched_calls == 0


def test_a_source_edited_after_the_build_is_run_interpreted(tmp_path):
    need_build()
    tree = tmp_path / "src"
    shutil.copytree(SRC, tree, ignore=shutil.ignore_patterns("__pycache__"))
    node_py = tree / "disquepy" / "core" / "node.py"
    node_py.write_text(node_py.read_text() + "\n# edited after the build\n")
    (interpreted, compiled, node_file), patched_calls, err = probe(tree)
    assert interpreted and compiled == [] and node_file == str(node_py)
    assert "core/node.py changed since the core was compiled" in err and patched_calls == 1


@pytest.mark.timeout(300)
def test_compiled_and_interpreted_cores_run_the_simulator_to_the_same_trace(monkeypatch):
    need_build()
    cfg = SimConfig(seed=3, nodes=3, duration_s=5, steps=200)
    monkeypatch.delenv("DISQUEPY_INTERPRETED", raising=False)
    compiled = run_many([cfg], 1)[0]
    monkeypatch.setenv("DISQUEPY_INTERPRETED", "1")  # the spawned worker imports the .py
    interpreted = run_many([cfg], 1)[0]
    assert compiled.ok and interpreted.ok, compiled.report() + interpreted.report()
    assert compiled.trace_hash == interpreted.trace_hash


def compiled_sources() -> list[Path]:
    """setup.py's MYPYC_MODULES, read from its source (importing it would run setup)."""
    tree = ast.parse((SRC.parent / "setup.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "MYPYC_MODULES"):
            return [SRC.parent / p for p in ast.literal_eval(node.value)]
    raise AssertionError("setup.py has no MYPYC_MODULES list")


def test_a_compiled_modules_constants_are_final():
    """mypyc reads a plain module global through the module's dict at every use; a
    Final one is inlined or a C static (docs/ARCHITECTURE.md). So an UPPER_CASE name
    a compiled module assigns once, at its top level, is declared Final."""
    plain = []
    for path in compiled_sources():
        tree = ast.parse(path.read_text())
        assigned: dict[str, int] = {}
        for node in tree.body:
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
            for t in targets:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name):
                        assigned[name.id] = assigned.get(name.id, 0) + 1
        for node in tree.body:
            if isinstance(node, ast.Assign):
                names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                final = False
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
                final = "Final" in ast.unparse(node.annotation)
            else:
                continue
            value = ast.unparse(node.value) if node.value is not None else ""
            for name in names:
                if (name.lstrip("_").isupper() and assigned[name] == 1 and not final
                        and not value.startswith("TypeVar(")):
                    plain.append(f"{path.relative_to(SRC)}:{node.lineno} {name}")
    assert compiled_sources() and not plain, plain
