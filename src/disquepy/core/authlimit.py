"""Failed AUTH attempts per source address, across its connections.

The delay before a failed AUTH is answered doubles per failure *on the connection*
(commands/users.py), which a client defeats by reconnecting: 1,875 tries a second.
Here the failures are counted per address (the client's IP: every connection from it
shares the count): past ``FREE_FAILS`` of them, an AUTH from that address is checked
only ``delay`` after its last failure (100 ms doubling to 5 s); one arriving sooner
waits for it (the shell runs it again then: ``outputs.AuthWait``), whatever connection it
came on, so an address gets about one password checked every 5 s. An address with no
failure for ``FORGET_MS`` starts afresh; at most ``MAX_ADDRESSES`` are remembered
(the oldest forgotten first).

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

FREE_FAILS = 10  # failures an address may have before its AUTHs wait
DELAY_MIN_MS = 100
DELAY_MAX_MS = 5000
FORGET_MS = 60_000
MAX_ADDRESSES = 4096


def source(addr: str) -> str:
    """The address part of a client's ``ip:port``."""
    host, sep, _ = addr.rpartition(":")
    return host if sep else addr


class AuthThrottle:
    __slots__ = ("addrs",)

    def __init__(self) -> None:
        self.addrs: dict[str, tuple[int, int]] = {}  # address -> (failures, last one, ms)

    @staticmethod
    def delay(fails: int) -> int:
        """How long after its last failure an address with ``fails`` waits."""
        if fails < FREE_FAILS:
            return 0
        return min(DELAY_MIN_MS << min(fails - FREE_FAILS, 16), DELAY_MAX_MS)

    def wait(self, addr: str, now: int) -> int:
        """Milliseconds before an AUTH from ``addr`` may be checked (0: now)."""
        entry = self.addrs.get(addr)
        if entry is None:
            return 0
        fails, last = entry
        if now - last >= FORGET_MS:
            del self.addrs[addr]
            return 0
        return max(0, last + self.delay(fails) - now)

    def failed(self, addr: str, now: int) -> None:
        """An AUTH from ``addr`` failed."""
        addrs = self.addrs
        entry = addrs.pop(addr, None)
        fails = 0 if entry is None or now - entry[1] >= FORGET_MS else entry[0]
        if len(addrs) >= MAX_ADDRESSES:
            del addrs[next(iter(addrs))]
        addrs[addr] = (fails + 1, now)


__all__ = ["AuthThrottle", "source"]
