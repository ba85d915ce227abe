"""kombu's own transport integration tests (``t/integration/common.py``), from the sdist
of the kombu version installed here.

kombu's wheel does not ship its tests, its sdist does: ``pip download`` fetches the
sdist of exactly the installed version (from pip's cache after the first time) and the
``t/`` package is unpacked under ``.venv/kombu-tests/<version>/``. Nothing of kombu's is
kept in this repository. When the fetch fails the tests fail with pip's output (they
never skip): `make test` needs PyPI or pip's cache once per kombu version.

    python tests/celery/kombu_suite.py      # fetch now (make's bootstrap runs this)
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = ("t/__init__.py", "t/integration/__init__.py", "t/integration/common.py")


def suite_dir(kombu_version: str | None = None) -> Path:
    return ROOT / ".venv" / "kombu-tests" / (kombu_version or version("kombu"))


def fetch(kombu_version: str | None = None) -> Path:
    """The directory holding kombu's ``t`` package (fetched if missing); RuntimeError
    with pip's output when it cannot be had."""
    ver = kombu_version or version("kombu")
    dest = suite_dir(ver)
    if all((dest / m).is_file() for m in MEMBERS):
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", tmp, f"kombu=={ver}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        sdists = list(Path(tmp).glob("kombu-*.tar.gz"))
        if proc.returncode != 0 or not sdists:
            raise RuntimeError(
                f"cannot fetch kombu {ver}'s sdist for its integration tests "
                f"({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
        with tarfile.open(sdists[0]) as tar:
            prefix = tar.getnames()[0].split("/", 1)[0]
            for m in MEMBERS:
                member = tar.getmember(f"{prefix}/{m}")
                data = tar.extractfile(member).read()
                out = dest / m
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data)
    return dest


if __name__ == "__main__":
    print(fetch())
