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


def convert_error(e: rexc.ResponseError) -> ResponseError:
    """A redis-py ``ResponseError`` as the matching :class:`ResponseError` subclass."""
    if isinstance(e, ResponseError):
        return e
    msg = str(e)
    word = msg.split(" ", 1)[0]
    code = word if word in ERROR_CODES else "ERR"  # redis-py strips a leading "ERR "
    if isinstance(e, rexc.NoPermissionError):  # ... and "NOPERM "
        code = "NOPERM"
    cls = _CODE_CLASSES.get(code, ResponseError)
    err = cls(msg, code)
    err.__cause__ = e
    return err

