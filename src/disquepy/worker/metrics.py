"""The worker's Prometheus metrics: handler durations and job outcomes, per queue.

``disque-worker ... --metrics-port 9101`` serves them at ``http://127.0.0.1:9101/metrics``
(``prometheus-client``, installed with the ``web`` extra):

- ``disquepy_worker_task_duration_seconds{queue,priority,outcome}``: a histogram of the
  time from a job's delivery to its outcome (handler plus ACK/NACK/re-add);
- ``disquepy_worker_jobs_total{queue,priority,outcome}``: a counter per outcome
  (``acked``, ``nacked``, ``retry-later``, ``dead-lettered``, ``ack-failed``...);
- ``disquepy_worker_dead_lettered_total{queue,priority,reason}``: jobs this worker moved
  to the dead letters, by ``reason`` (:data:`~disquepy.worker.core.DEAD_REASONS`:
  ``attempts``, ``deliveries``, ``ttl``);
- ``disquepy_worker_in_progress{queue,priority}``: handlers running now.

``queue`` is the logical queue and ``priority`` its level (see
:mod:`disquepy.client.priority`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..client.priority import split

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
           30.0, 60.0, 300.0)


class WorkerMetrics:
    """Prometheus metrics of one worker process, in their own registry."""

    def __init__(self) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            disable_created_metrics,
        )

        disable_created_metrics()  # no *_created series: they double every counter's lines
        self.registry = CollectorRegistry()
        labels = ("queue", "priority", "outcome")
        self.duration = Histogram("disquepy_worker_task_duration_seconds",
                                  "Time from a job's delivery to its outcome", labels,
                                  buckets=BUCKETS, registry=self.registry)
        self.jobs = Counter("disquepy_worker_jobs", "Jobs handled, by outcome", labels,
                            registry=self.registry)
        self.dead = Counter("disquepy_worker_dead_lettered", "Jobs moved to the dead letters, "
                            "by reason", ("queue", "priority", "reason"),
                            registry=self.registry)
        self.in_progress = Gauge("disquepy_worker_in_progress", "Handlers running now",
                                 ("queue", "priority"), registry=self.registry)

    def observe(self, queue: str, outcome: str, seconds: float | None,
                reason: str | None = None) -> None:
        q, prio = split(queue)
        self.jobs.labels(q, prio, outcome).inc()
        if reason is not None:
            self.dead.labels(q, prio, reason).inc()
        if seconds is not None:
            self.duration.labels(q, prio, outcome).observe(seconds)

    def started(self, queue: str, delta: int) -> None:
        q, prio = split(queue)
        self.in_progress.labels(q, prio).inc(delta)

    def serve(self, port: int, host: str = "127.0.0.1") -> WSGIServer:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread; returns the server."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, host, registry=self.registry)
        return server
