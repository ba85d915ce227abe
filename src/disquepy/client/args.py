"""Each command's arguments, built once for the sync and asyncio clients (nothing
here does I/O), and the polling back-off of ``wait``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

# one argument of a command, as redis-py sends it
Arg: TypeAlias = str | bytes | int | float


def command_name(args: Sequence[Arg]) -> str:
    """The command's name, for messages."""
    name = args[0]
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def addjob_args(queue: str, body: bytes | str, timeout_ms: int, replicate: int | None,
                delay: int | None, retry: int | None, ttl: int | None, maxlen: int | None,
                async_: bool, idempotent: str | bytes | None) -> list[Arg]:
    args: list[Arg] = ["ADDJOB", queue, body, timeout_ms]
    if replicate is not None:
        args += ("REPLICATE", replicate)
    if delay is not None:
        args += ("DELAY", delay)
    if retry is not None:
        args += ("RETRY", retry)
    if ttl is not None:
        args += ("TTL", ttl)
    if maxlen is not None:
        args += ("MAXLEN", maxlen)
    if async_:
        args.append("ASYNC")
    if idempotent is not None:
        args += ("IDEMPOTENT", idempotent)
    return args


def getjob_args(queues: str | Sequence[str], count: int, timeout_ms: int | None, nohang: bool,
                with_counters: bool, token: str | bytes | None) -> list[Arg]:
    args: list[Arg] = ["GETJOB"]
    if nohang:
        args.append("NOHANG")
    if timeout_ms is not None:
        args += ("TIMEOUT", timeout_ms)
    if count != 1:
        args += ("COUNT", count)
    if with_counters:
        args.append("WITHCOUNTERS")
    if token is not None:
        args += ("TOKEN", token)
    args.append("FROM")
    if isinstance(queues, (str, bytes)):
        args.append(queues)
    else:
        args.extend(queues)
    return args


def qscan_args(cursor: int, count: int | None, busyloop: bool, minlen: int | None,
               maxlen: int | None, importrate: int | None) -> list[Arg]:
    args: list[Arg] = ["QSCAN", cursor]
    if count is not None:
        args += ("COUNT", count)
    if busyloop:
        args.append("BUSYLOOP")
    if minlen is not None:
        args += ("MINLEN", minlen)
    if maxlen is not None:
        args += ("MAXLEN", maxlen)
    if importrate is not None:
        args += ("IMPORTRATE", importrate)
    return args


def jscan_args(cursor: int, count: int | None, busyloop: bool, queue: str | None,
               state: str | Iterable[str] | None, reply: str = "id") -> list[Arg]:
    args: list[Arg] = ["JSCAN", cursor]
    if count is not None:
        args += ("COUNT", count)
    if busyloop:
        args.append("BUSYLOOP")
    if queue is not None:
        args += ("QUEUE", queue)
    if state is not None:
        for s in [state] if isinstance(state, str) else state:
            args += ("STATE", s)
    if reply != "id":
        args += ("REPLY", reply)
    return args


def qget_args(queue: str, group: str, lease: float | None, with_counters: bool,
              max_deliveries: int | None) -> list[Arg]:
    args: list[Arg] = ["QGET", queue, group]
    if lease is not None:
        args += ["EX", seconds_arg(lease)]
    if with_counters:
        args.append("WITHCOUNTERS")
    if max_deliveries is not None:
        args += ["MAXDELIVERIES", max_deliveries]
    return args


def seconds_arg(v: float) -> str:
    """Seconds as the group commands take them: an integer or a plain decimal."""
    if v < 0:
        raise ValueError("seconds must be >= 0")
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}"


def status_args(cmd: str, queues: Sequence[str], groups: Sequence[str] | None) -> list[Arg]:
    return [cmd, *queues, *(["GROUPS", *groups] if groups else [])]


def result_args(result: Any) -> list[Arg]:
    """``["RESULT", data]`` for ACKJOB/FASTACK (none for ``None``): bytes and str as they
    are, anything else as JSON (``default=str`` for what JSON cannot say)."""
    if result is None:
        return []
    if isinstance(result, bytes | str):
        return ["RESULT", result]
    return ["RESULT", json.dumps(result, default=str, separators=(",", ":"))]


def wait_backoff(attempt: int) -> float:
    """Poll interval of wait_for_ack: 5 ms doubling up to 250 ms."""
    return min(0.005 * (2.0 ** min(attempt, 10)), 0.25)

