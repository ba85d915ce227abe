"""Real-process fault runs (see docs/RELIABILITY.md): a Jepsen-like check of Disque's
guarantees against real ``disque-server`` processes.

``run(ChaosConfig(seed=..., duration=...))`` starts a cluster on loopback behind a
fault-injecting bus proxy (``proxy.BusProxy``), drives producers and consumers
(``workload``) while a seeded nemesis (``nemesis``) kills, pauses and partitions
nodes, then heals, drains and checks the history (``checker``). ``python -m
disquepy.chaos`` is the command line.
"""

from .checker import History, Report, check
from .run import ChaosConfig, ChaosResult, run

__all__ = ["ChaosConfig", "ChaosResult", "History", "Report", "check", "run"]
