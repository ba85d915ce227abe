"""Redis-style one-line logs: ``pid:M 22 Nov 2026 02:05:27.123 * message``.

Levels map to Redis's marks: debug ``.``, verbose ``-``, notice ``*``, warning ``#``.
"""

from __future__ import annotations

import logging
import os
import sys
import time

VERBOSE = 15
logging.addLevelName(VERBOSE, "VERBOSE")

LEVELS = {
    "debug": logging.DEBUG,
    "verbose": VERBOSE,
    "notice": logging.INFO,
    "warning": logging.WARNING,
}
_MARKS = {logging.DEBUG: ".", VERBOSE: "-", logging.INFO: "*", logging.WARNING: "#"}

log = logging.getLogger("disquepy")


class _RedisFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        t = record.created
        stamp = time.strftime("%d %b %Y %H:%M:%S", time.localtime(t))
        mark = _MARKS.get(record.levelno, "#")
        msg = record.getMessage()
        if record.exc_info:
            msg += " " + self.formatException(record.exc_info).replace("\n", " | ")
        return f"{os.getpid()}:M {stamp}.{int(t * 1000) % 1000:03d} {mark} {msg}"


def setup(level: str = "notice", logfile: str = "") -> None:
    handler: logging.Handler
    handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stdout)
    handler.setFormatter(_RedisFormatter())
    log.handlers[:] = [handler]
    log.propagate = False
    set_level(level)


def set_level(level: str) -> None:
    log.setLevel(LEVELS.get(level, logging.INFO))
