"""Spark 4 runs on a Java 17+ JVM: find it the way PySpark does, or say how to get one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

MIN_JAVA = 17
#: the one place that says how to get Java (the Makefile's `java` target installs it)
INSTALL_HINT = ("install it with `sudo apt-get install openjdk-17-jre-headless` (Debian/"
                "Ubuntu; `make test` does this), or point JAVA_HOME at a Java 17+ install")


def java_binary() -> str | None:
    """The ``java`` PySpark would start: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        return path if os.access(path, os.X_OK) else None
    return shutil.which("java")


def java_version(java: str) -> int | None:
    """The major version ``java -version`` reports (8 for "1.8.0_392"), None if unknown."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True,
                             timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def java_problem() -> str | None:
    """None when a Java 17+ is there; otherwise one line saying what is wrong and how to
    fix it."""
    java = java_binary()
    if java is None:
        where = (f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java"
                 if os.environ.get("JAVA_HOME") else "no java on PATH and JAVA_HOME unset")
        return f"Spark needs Java {MIN_JAVA}+ ({where}): {INSTALL_HINT}"
    v = java_version(java)
    if v is None or v < MIN_JAVA:
        found = "an unknown version" if v is None else f"Java {v}"
        return f"Spark needs Java {MIN_JAVA}+ ({java} is {found}): {INSTALL_HINT}"
    return None


if __name__ == "__main__":  # `python -m disquepy.spark.java`: exit 1 when Java is missing
    import sys

    problem = java_problem()
    if problem:
        print(problem, file=sys.stderr)
    sys.exit(1 if problem else 0)
