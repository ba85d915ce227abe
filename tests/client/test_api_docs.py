"""docs/API.md is generated from the docstrings: it must match what the script renders."""

from __future__ import annotations

import subprocess
import sys

from support import ROOT


def test_api_reference_is_current():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_api_docs.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    text = (ROOT / "docs" / "API.md").read_text()
    for name in ("class Disque", "wait_for_ack", "class Worker", "requeue_dead", "Backoff"):
        assert name in text
