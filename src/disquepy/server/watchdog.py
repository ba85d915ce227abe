"""``watchdog-period``: Disque's software watchdog. While the period is set (in ms, at
least two cron intervals, 2000/hz), a SIGALRM timer is set that far ahead and pushed
back every cron interval by the event loop; when the loop is stuck that long (a slow
command, a blocking call) the alarm fires and the log gets the stack of the code that
is running ("--- WATCHDOG TIMER EXPIRED ---", then the stack, outermost frame first, on
the same line, frames separated by " | ": one log line per event). ``CONFIG SET
watchdog-period 0`` turns it off."""

from __future__ import annotations

import asyncio
import signal
import time
import traceback
from types import FrameType

from ..core.config import Config
from .log import log


def stuck(seconds: float) -> None:
    """DEBUG SLEEP: the loop held on purpose. Here, in a module that stays interpreted,
    so the watchdog's stack ends on this line (the driver is compiled: its frames do
    not show)."""
    time.sleep(seconds)


class Watchdog:
    def __init__(self, config: Config, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        self.armed = False

    def start(self) -> None:
        self._tick()

    def period_s(self) -> float:
        """The period in seconds (0: off), clamped to two cron intervals as Disque."""
        period: int = self.config.watchdog_period
        if period <= 0:
            return 0.0
        return max(period, 2000 // max(self.config.hz, 1)) / 1000.0

    def _tick(self) -> None:
        period = self.period_s()
        if period > 0:
            if not self.armed:
                signal.signal(signal.SIGALRM, self._expired)
                self.armed = True
            signal.setitimer(signal.ITIMER_REAL, period)
        elif self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self.armed = False
        self.loop.call_later(1.0 / max(self.config.hz, 1), self._tick)

    def stop(self) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _expired(self, signum: int, frame: FrameType | None) -> None:
        stack = " | ".join(f"{f.filename}:{f.lineno} in {f.name}: {f.line}"
                           for f in traceback.extract_stack(frame)) if frame else "?"
        log.warning("--- WATCHDOG TIMER EXPIRED (the event loop was stuck over %d ms) --- %s",
                    int(self.period_s() * 1000), stack)
