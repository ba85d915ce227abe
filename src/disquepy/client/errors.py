"""The errors the client raises: the server's error codes as exception classes."""

from __future__ import annotations

import redis.exceptions as rexc

# errors the server answers that mean "this node cannot serve you, use another one"
FAILOVER_CODES = frozenset({"LEAVING"})


class DisqueError(rexc.RedisError):
    """Base of every error the client raises; ``code`` is the server's error code
    (``"NOJOB"``, ``"LEAVING"``, ``"ERR"``...) or ``None`` for connection problems."""

    code: str | None = None

    def __init__(self, message: str = "", code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class ResponseError(DisqueError, rexc.ResponseError):
    """An error reply from the server (also a ``redis.ResponseError``)."""


class NoJobError(ResponseError):
    """``-NOJOB``: the node does not know the job (WORKING, ENQUEUE... of an unknown ID)."""

    code = "NOJOB"


class LeavingError(ResponseError):
    """``-LEAVING``: the node is leaving the cluster; the client moves to another node."""

    code = "LEAVING"


class PausedError(ResponseError):
    """``-PAUSED``: the queue is paused in input."""

    code = "PAUSED"


class NoReplError(ResponseError):
    """``-NOREPL``: not enough reachable nodes for the requested replication level."""

    code = "NOREPL"


class TryAgainError(ResponseError):
    """``-TRYAGAIN``: a job with the same IDEMPOTENT key is still being replicated."""

    code = "TRYAGAIN"


class NoPermissionError(ResponseError, rexc.NoPermissionError):
    """``-NOPERM``: the client's ACL user may not run that command (its role)."""

    code = "NOPERM"


class NoNodesError(DisqueError, rexc.ConnectionError):
    """No node of the seed list (or learned through HELLO) accepts connections."""


# the error codes Disque (and disquepy's Redis compatibility) answer besides ERR
ERROR_CODES = frozenset({
    "NOJOB", "LEAVING", "PAUSED", "NOREPL", "TRYAGAIN", "BADID", "MAXLEN", "OOM", "NOAUTH",
    "WRONGPASS", "TOOLATE", "NOPROTO", "NOPERM", "LOADING", "READONLY", "EXECABORT",
})


_CODE_CLASSES: dict[str, type[ResponseError]] = {
    "NOJOB": NoJobError,
    "LEAVING": LeavingError,
    "PAUSED": PausedError,
    "NOREPL": NoReplError,
    "TRYAGAIN": TryAgainError,
    "NOPERM": NoPermissionError,
}


#: redis-py raises a class of its own for these codes, their code cut off the message
_REDIS_CLASSES: tuple[tuple[type[Exception], str], ...] = (
    (rexc.TryAgainError, "TRYAGAIN"),
    (rexc.NoPermissionError, "NOPERM"),
    (rexc.BusyLoadingError, "LOADING"),
    (rexc.ReadOnlyError, "READONLY"),
    (rexc.ExecAbortError, "EXECABORT"),
)
_CUT = frozenset({"ERR", *(code for _, code in _REDIS_CLASSES)})


def _error(code: str, message: str) -> ResponseError:
    return _CODE_CLASSES.get(code, ResponseError)(message, code)


def convert_error(e: rexc.ResponseError) -> ResponseError:
    """A redis-py ``ResponseError`` as the matching :class:`ResponseError` subclass."""
    if isinstance(e, ResponseError):
        return e
    msg = str(e)
    code = next((c for cls, c in _REDIS_CLASSES if isinstance(e, cls)), None)
    if code is None:
        word = msg.split(" ", 1)[0]
        code = word if word in ERROR_CODES else "ERR"  # redis-py strips a leading "ERR "
    err = _error(code, msg)
    err.__cause__ = e
    return err


def reply_error(message: str) -> ResponseError:
    """An error reply read off the wire (``"PAUSED Queue paused in input"``, without the
    ``-``) as the matching :class:`ResponseError`, with the text redis-py would show
    for it (``ERR``, and the codes redis-py has a class for, cut off), so an error
    reads the same whichever way its command went."""
    word = message.split(" ", 1)[0]
    if word in _CUT:
        return _error(word, message[len(word) + 1:])
    return _error(word if word in ERROR_CODES else "ERR", message)
