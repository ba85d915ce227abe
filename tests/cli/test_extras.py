"""A program started without its extra says which one to install, in one line, instead
of a traceback (disque-web, disque analytics, the Spark examples)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import ROOT

BLOCKED = "import sys; sys.modules[{mod!r}] = None; "  # as if the module were not installed


@pytest.mark.parametrize("mod", ["fastapi", "uvicorn", "prometheus_client"])
def test_disque_web_without_the_web_extra(mod):
    code = BLOCKED.format(mod=mod) + "from disquepy.web.__main__ import main; main([])"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "disque-web needs the web extra" in lines[0] and repr(mod) in lines[0]
    assert "pip install -e '.[web]'" in lines[0]


@pytest.mark.parametrize("example", ["spark_fanout.py", "spark_stream_worker.py"])
def test_spark_examples_without_the_spark_extra(example):
    code = (BLOCKED.format(mod="pyspark") + f"sys.argv = [{example!r}, '--help']; "
            f"sys.path.insert(0, 'examples'); import runpy; "
            f"runpy.run_path('examples/{example}', run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"examples/{example} needs the spark extra" in lines[0]
    assert "pip install -e '.[spark]'" in lines[0]
