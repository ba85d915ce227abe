"""What a node replicates synchronously: a job (ADDJOB) or a consumer group's event
(QADD). Both go through one mechanism (replication.py): copies sent to ``repl - 1``
reachable peers (one more every 50 ms while short), the producer's reply held until
``repl`` nodes confirmed a copy, NOREPL past the deadline, and the copies made then
told to drop theirs.
"""

from __future__ import annotations

from typing import Final

from .awake import Timer

_NONE: Final[tuple[str, ...]] = ()


class Record(Timer):
    """``repl``: the copies wanted (this node's included); ``delivered``: the nodes
    sent a copy (this node first when it keeps one); ``confirmed``: those known to
    hold one. Tuples of node IDs, shared (``Node.shared``) once settled."""

    __slots__ = ("repl", "delivered", "confirmed")

    def __init__(self, rid: bytes, ctime: int, repl: int) -> None:
        self.id = rid
        self.ctime = ctime
        self.awake = 0
        self.repl = repl
        self.delivered = _NONE
        self.confirmed = _NONE

    def expiry(self) -> int:
        """When the record ends (ms): replication gives up by then."""
        raise NotImplementedError
