"""A run's outcome: verdict, failures, figures, and how to replay it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import SimConfig

if TYPE_CHECKING:
    from .checkers import Failure
    from .world import World


@dataclass(slots=True)
class RunResult:
    config: SimConfig
    trace_hash: str
    failures: list[Failure]  # the first failures (checkers.Failure), up to MAX_KEPT per kind
    fail_counts: dict[str, int]  # kind -> count (all of them)
    faults: dict[str, int]  # kind -> injected
    # figures: counts, and a few dicts of counts (add_errors, the network's...)
    stats: dict[str, Any] = field(default_factory=dict)
    sim_ms: int = 0
    wall_s: float = 0.0
    events: int = 0

    @property
    def ok(self) -> bool:
        return not self.fail_counts

    @classmethod
    def of(cls, world: World, wall_s: float) -> RunResult:
        h = world.history
        ck = world.checker
        net = world.net.stats.as_dict()
        disks = world.disks
        stats = {
            "adds_sent": h.adds_sent,
            "jobs_added": h.adds_ok,
            "add_errors": dict(h.add_errors),
            "deliveries": h.deliveries,
            "jobs_delivered": h.jobs_delivered,
            "alo_delivered": h.first,  # at-least-once jobs delivered
            "redelivered_requested": h.requested,
            "dup_after_ack": h.dup_after_ack,
            "dup_while_held": h.dup_while_held,
            "acks": h.acks,
            "unconfirmed_deliveries": sum(
                len(r.deliveries) for r in h.by_body.values() if r.jid is None
            ),
            "other_errors": dict(world.workload.errors),
            "restarts": world.restarts,
            "aof_records_lost": sum(d.records_lost for d in disks),
            "aof_torn_tails": sum(d.torn_tails for d in disks),
            "faulty_ms": world.active_end - world.active_start,
            "settled_after_ms": world.settled_after_ms,
            "phase": world.phase,
            "fault_episodes": world.faults.episodes,
            "frames": net,
            **ck.stats,
        }
        if world.groups is not None:
            stats.update(world.groups.stats)
            stats["event_errors"] = dict(world.groups.errors)
        return cls(
            world.cfg,
            world.trace.hexdigest(),
            list(ck.failures),
            dict(ck.counts),
            world.faults.finish_counts(world),
            stats,
            world.elapsed(),
            wall_s,
            world.events,
        )

    @property
    def duplicates(self) -> int:
        return int(self.stats.get("dup_after_ack", 0)) + int(self.stats.get("dup_while_held", 0))

    def summary_line(self) -> str:
        s = self.stats
        verdict = (
            "ok"
            if self.ok
            else "FAIL " + ",".join(f"{k}={v}" for k, v in sorted(self.fail_counts.items()))
        )
        return (
            f"seed {self.config.seed}: {verdict} | jobs {s.get('jobs_added', 0)} "
            f"delivered {s.get('jobs_delivered', 0)} dups {self.duplicates} "
            f"lost {s.get('lost', 0)} (crash-excused {s.get('excused_lost', 0)}) | "
            f"{self._groups_text()}"
            f"faults {_faults_text(self.faults)} | sim {self.sim_ms / 1000:.0f}s "
            f"wall {self.wall_s:.2f}s hash {self.trace_hash[:12]}"
        )

    def _groups_text(self) -> str:
        s = self.stats
        if "events_added" not in s:
            return ""
        return (f"events {s['events_added']} (+{s['events_noblock']} noblock) delivered "
                f"{s['event_deliveries']} lost {s['events_lost']} (crash-excused "
                f"{s['events_excused']}) double-leases {s['double_leases']} after-ack "
                f"{s['after_ack']} | ")

    def report(self) -> str:
        lines = [self.summary_line()]
        for f in self.failures[:20]:
            lines.append(f"  {f!r}")
        if len(self.failures) > 20:
            lines.append(f"  ... and {sum(self.fail_counts.values()) - 20} more")
        if not self.ok:
            lines.append(f"  replay: {self.config.replay_command()}")
        return "\n".join(lines)


def _faults_text(faults: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in faults.items() if v) or "none"
