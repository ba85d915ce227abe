"""The run's fingerprint: a hash over every delivered frame, reply and fault.

Two runs of the same config must produce the same hash; a difference means some
nondeterminism crept in (an unseeded RNG, set iteration order, the wall clock).
"""

from __future__ import annotations

import hashlib


class Trace:
    __slots__ = ("_h", "frames", "replies", "notes")

    def __init__(self) -> None:
        self._h = hashlib.blake2b(digest_size=16)
        self.frames = 0
        self.replies = 0
        self.notes = 0

    def frame(self, t: int, src: int, dst: int, frame: bytes) -> None:
        self.frames += 1
        self._h.update(b"F%d %d %d %d|" % (t, src, dst, len(frame)))
        self._h.update(frame)

    def reply(self, t: int, node: int, agent: int, data: bytes) -> None:
        self.replies += 1
        self._h.update(b"R%d %d %d %d|" % (t, node, agent, len(data)))
        self._h.update(data)

    def note(self, tag: bytes, t: int, a: int, b: int, payload: bytes = b"") -> None:
        self.notes += 1
        self._h.update(b"%b%d %d %d %d|" % (tag, t, a, b, len(payload)))
        self._h.update(payload)

    def hexdigest(self) -> str:
        return self._h.hexdigest()
