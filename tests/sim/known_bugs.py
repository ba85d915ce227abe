"""Core bugs the simulator found that are still open, and how to recognise them.

The CI seed set (test_sim_ci.py) must fail only through these; each one also has a
strict xfail test there that passes once the bug is gone, turning into a failure
that says: delete the entry. Replay any seed with the line the failure prints.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownBug:
    name: str
    summary: str
    replay: str  # one seed that shows it

    def matches(self, failure) -> bool:
        return MATCHERS[self.name](failure)


MATCHERS: dict = {}  # bug name -> failure -> bool

# None open. Found and since fixed in the core (c53e594, e4d3f54, a665356): dummy acks
# never collected; a synchronous ADDJOB left unanswered once a replica re-queued the job
# before the origin had its GOTJOBs. Add an entry (and a strict xfail test in
# test_sim_ci.py) for a bug that cannot be fixed at once.
OPEN: list = []


def explain(failure):
    """The open bug a failure comes from, or None."""
    for bug in OPEN:
        if bug.matches(failure):
            return bug
    return None
