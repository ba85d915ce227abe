"""Redis-style log lines, for the server and the programs around it (the worker):
``pid:M 22 Nov 2026 02:05:27.123 * message``.

Levels map to Redis's marks: debug ``.``, verbose ``-``, notice (INFO) ``*``,
warning and above ``#``.
"""

from __future__ import annotations

import logging
import os
import time

VERBOSE = 15
logging.addLevelName(VERBOSE, "VERBOSE")
MARKS = {logging.DEBUG: ".", VERBOSE: "-", logging.INFO: "*", logging.WARNING: "#"}


class RedisFormatter(logging.Formatter):
    """One line per record. An exception's traceback is folded into the line (``|``
    between its lines: the server's log stays one line an event), or, with
    ``fold_tracebacks=False``, printed on the lines after it (a worker's handler
    failures, read by people)."""

    def __init__(self, fold_tracebacks: bool = True) -> None:
        super().__init__()
        self.fold = fold_tracebacks

    def format(self, record: logging.LogRecord) -> str:
        t = record.created
        stamp = time.strftime("%d %b %Y %H:%M:%S", time.localtime(t))
        mark = MARKS.get(record.levelno, "#")
        line = f"{os.getpid()}:M {stamp}.{int(t * 1000) % 1000:03d} {mark} {record.getMessage()}"
        if not record.exc_info:
            return line
        trace = self.formatException(record.exc_info)
        return f"{line} {trace.replace(chr(10), ' | ')}" if self.fold else f"{line}\n{trace}"
