"""An example handler, the one ``make run`` starts::

    disque-worker disquepy.worker.example:handle --queues default

It does what Disqueue's example worker does: it processes a job's payload, and fails
when the payload says ``"fail": true`` — so such a job is retried with back-off and ends
``failed`` in the dead letters (``default:dead``) once its retries are used up. A payload
with ``"sleep": SECONDS`` takes that long (at most a minute), to watch a job
``in_progress`` or cancel one that waits behind it.

Replace it with your own handler: any function of the payload, e.g.
``disque-worker myworker:handle --queues default`` for ``handle`` in ``myworker.py``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("disquepy.worker.example")

MAX_SLEEP = 60.0


class SimulatedFailure(Exception):
    """What a payload with ``"fail": true`` raises."""


def handle(payload: Any) -> dict[str, Any]:
    """Process ``payload`` (any JSON value): fail if it says ``"fail": true``, wait
    ``"sleep"`` seconds if it says so; the result is kept as the job's result."""
    if isinstance(payload, dict):
        if payload.get("fail") is True:
            raise SimulatedFailure('the payload says "fail": true')
        pause = payload.get("sleep")
        if isinstance(pause, int | float) and not isinstance(pause, bool) and pause > 0:
            time.sleep(min(float(pause), MAX_SLEEP))
    log.debug("processed %r", payload)
    return {"processed": True}
