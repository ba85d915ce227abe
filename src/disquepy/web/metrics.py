"""``/metrics``: the cluster in Prometheus' text format, scraped from the nodes per request.

A custom collector reads the :class:`~disquepy.web.cluster.ClusterView` snapshot (INFO
and QSTAT of every node, cached ``cache_ttl`` seconds, so several scrapers cost the
nodes one round of commands). Labels are ``node`` (``host:port``), ``queue`` (the
logical queue) and ``priority``; never job IDs. Names follow the big brokers'
exporters: ``disquepy_`` prefix, ``_total`` counters, base units (bytes, seconds).

Per queue, the nodes' JOBMETRICS (``core/jobmetrics.py``): counters of what each node
did (added, delivered, acked, nacked, retried, requeued, expired, cancelled, and
dead-lettered by ``reason``; each event counted by one node, so ``sum by (queue)`` is
the cluster's count) and two histograms, ``disquepy_queue_wait_seconds`` (queued ->
delivered) and ``disquepy_queue_processing_seconds`` (delivered -> acked). Consumer
groups per node, event queue and group from QSTATUS (``disquepy_group_*``: events by
state, lag, pending, oldest pending age, consumers). The worker's
own ``/metrics`` has its per-task view (:mod:`disquepy.worker.metrics`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from fastapi import FastAPI, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ..client.jobstatus import dead_letters_of
from ..client.priority import split
from .cluster import GROUP_STATES, ClusterView, Snapshot

NODE_GAUGES = [  # (metric, INFO field, help)
    ("memory_used_bytes", "used_memory", "Memory the node accounts for its jobs and queues"),
    ("memory_rss_bytes", "used_memory_rss", "Resident set size of the node process"),
    ("memory_max_bytes", "maxmemory", "The node's maxmemory"),
    ("connected_clients", "connected_clients", "Client connections"),
    ("blocked_clients", "blocked_clients", "Clients blocked in GETJOB"),
    ("jobs", "registered_jobs", "Jobs the node holds, in every state"),
    ("queues", "registered_queues", "Queues the node holds"),
    ("ops_per_second", "instantaneous_ops_per_sec", "Commands per second"),
    ("uptime_seconds", "uptime_in_seconds", "Seconds since the node started"),
]
NODE_COUNTERS = [
    ("jobs_added", "jobs_added", "Jobs added on the node (ADDJOB)"),
    ("jobs_delivered", "jobs_delivered", "Jobs delivered to consumers (GETJOB)"),
    ("jobs_acked", "jobs_acked", "Jobs acknowledged"),
    ("jobs_expired", "jobs_expired", "Jobs whose TTL ended"),
    ("jobs_evicted", "evicted_jobs", "Jobs evicted under memory pressure"),
    ("commands_processed", "total_commands_processed", "Commands processed"),
    ("connections_received", "total_connections_received", "Connections accepted"),
]


class ClusterCollector:
    """Prometheus collector over a :class:`ClusterView`."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def describe(self) -> list[Metric]:  # no describe-time scrape (would hit the nodes at registration)
        return []

    def collect(self) -> Iterator[Metric]:
        t0 = time.monotonic()
        snap, _ = self.view.snapshot()
        p = "disquepy_"
        up = GaugeMetricFamily(p + "up", "1 if the node answered the last scrape", labels=["node"])
        gauges = {m: GaugeMetricFamily(p + m, h, labels=["node"]) for m, _, h in NODE_GAUGES}
        counters = {m: CounterMetricFamily(p + m, h, labels=["node"])
                    for m, _, h in NODE_COUNTERS}
        for n in snap.nodes:
            up.add_metric([n["address"]], 1 if n["up"] else 0)
            if not n["up"]:
                continue
            info = n["info"]
            for m, field, _ in NODE_GAUGES:
                if isinstance(info.get(field), int | float):
                    gauges[m].add_metric([n["address"]], info[field])
            for m, field, _ in NODE_COUNTERS:
                if isinstance(info.get(field), int | float):
                    counters[m].add_metric([n["address"]], info[field])
        yield up
        yield from gauges.values()
        yield from counters.values()

        ql = ["node", "queue", "priority"]
        depth = GaugeMetricFamily(p + "queue_jobs", "Jobs in a queue by state (queued: waiting "
                                  "in the queue)", labels=ql + ["state"])
        blocked = GaugeMetricFamily(p + "queue_blocked_consumers",
                                    "Consumers blocked in GETJOB on the queue", labels=ql)
        oldest = GaugeMetricFamily(p + "queue_oldest_job_age_seconds",
                                   "Age of the oldest queued job", labels=ql)
        paused = GaugeMetricFamily(p + "queue_paused",
                                   "1 if the queue is paused (in, out or all)", labels=ql)
        enq = CounterMetricFamily(p + "queue_enqueued", "Jobs queued (added, re-queued)",
                                  labels=ql)
        deq = CounterMetricFamily(p + "queue_delivered", "Jobs taken from the queue by "
                                  "consumers", labels=ql)
        dead = GaugeMetricFamily(p + "queue_dead_letters", "Dead letters waiting in the "
                                 "queue's dead-letter queue", labels=["node", "queue"])
        dead_in = CounterMetricFamily(p + "jobs_dead_lettered", "Jobs moved to the dead "
                                      "letters", labels=["node", "queue"])
        for (addr, q), st in sorted(snap.queues.items()):
            name = dead_letters_of(q)
            if name is not None:
                dead.add_metric([addr, name], int(st["len"]))
                dead_in.add_metric([addr, name], int(st["jobs-in"]))
                continue
            name, prio = split(q)
            lab = [addr, name, prio]
            depth.add_metric(lab + ["queued"], int(st["len"]))
            blocked.add_metric(lab, int(st["blocked"]))
            if st.get("oldest_age") is not None:
                oldest.add_metric(lab, st["oldest_age"])
            paused.add_metric(lab, 0 if st.get("pause", "none") == "none" else 1)
            enq.add_metric(lab, int(st["jobs-in"]))
            deq.add_metric(lab, int(st["jobs-out"]))
        yield from (depth, blocked, oldest, paused, enq, deq, dead, dead_in)
        yield from self._job_metrics(snap, p, ql)
        yield from self._group_metrics(snap, p)
        scrape = GaugeMetricFamily(p + "scrape_duration_seconds",
                                   "Time to collect these metrics (cached snapshot or not)")
        scrape.add_metric([], round(time.monotonic() - t0, 6))
        yield scrape


    @staticmethod
    def _group_metrics(snap: Snapshot, p: str) -> Iterator[Metric]:
        """Consumer groups per node, event queue and group, from the node's QSTATUS (its
        own view: complete where every node holds every event, up to 3 nodes)."""
        gl = ["node", "queue", "group"]
        events = GaugeMetricFamily(p + "group_events", "Events of the queue by state for "
                                   "the group (total, available, inprogress, redo, done, "
                                   "dead)", labels=gl + ["state"])
        lag = GaugeMetricFamily(p + "group_lag", "Events waiting to be delivered to the group "
                                "(available + redo)",
                                labels=gl)
        pending = GaugeMetricFamily(p + "group_pending", "Events leased to the group's "
                                    "consumers and not acknowledged", labels=gl)
        oldest = GaugeMetricFamily(p + "group_oldest_pending_seconds", "Age of the "
                                   "group's oldest event not done", labels=gl)
        consumers = GaugeMetricFamily(p + "group_consumers", "Consumers of the group "
                                      "(QSTATUS' consumers field)", labels=gl)
        for (addr, q), per_group in sorted(snap.groups.items()):
            for g, st in sorted(per_group.items()):
                lab = [addr, q, g]
                for state in GROUP_STATES:
                    if state in st:
                        events.add_metric(lab + [state], st[state])
                if "lag" in st:
                    lag.add_metric(lab, st["lag"])
                if "pending" in st:
                    pending.add_metric(lab, st["pending"])
                if "oldest-pending-ms" in st:
                    oldest.add_metric(lab, st["oldest-pending-ms"] / 1000)
                if "consumers" in st:
                    consumers.add_metric(lab, st["consumers"])
        yield from (events, lag, pending, oldest, consumers)

    @staticmethod
    def _job_metrics(snap: Snapshot, p: str, ql: list[str]) -> Iterator[Metric]:
        """The nodes' JOBMETRICS: counters and histograms per node, queue, priority."""
        helps = {
            "added": "Jobs added (ADDJOB on this node)",
            "delivered": "Jobs delivered to consumers (GETJOB on this node)",
            "acked": "Jobs acknowledged on this node (ACKJOB, FASTACK)",
            "nacked": "Jobs put back at once by their consumer (NACK)",
            "retried": "Back-off retries: jobs put back after a delay (NACK ... DELAY)",
            "requeued": "Jobs queued again because their retry time came without an ack",
            "expired": "Jobs whose TTL ended before they were acknowledged",
            "cancelled": "Jobs cancelled (CANCEL)",
        }
        counters = {k: CounterMetricFamily(f"{p}queue_jobs_{k}", h, labels=ql)
                    for k, h in helps.items()}
        dead = CounterMetricFamily(p + "queue_jobs_dead_lettered", "Jobs given up on "
                                   "(FAILJOB: the worker moved them to the dead letters), "
                                   "by reason", labels=ql + ["reason"])
        hists = {
            "wait": HistogramMetricFamily(p + "queue_wait_seconds", "Time jobs waited "
                                          "in the queue (queued -> delivered)", labels=ql),
            "processing": HistogramMetricFamily(p + "queue_processing_seconds", "Time "
                                                "from delivery to acknowledgement",
                                                labels=ql),
        }
        bounds = [b / 1000 for b in snap.bounds_ms]
        for (addr, q), m in sorted(snap.jobmetrics.items()):
            if dead_letters_of(q) is not None:
                continue  # the dead letters themselves: see jobs_dead_lettered
            name, prio = split(q)
            lab = [addr, name, prio]
            for k, fam in counters.items():
                fam.add_metric(lab, m["counts"].get(k, 0))
            for reason, n in m["dead"].items():
                dead.add_metric(lab + [reason], n)
            for k, hist in hists.items():
                count, sum_ms, per = m[k]
                buckets, acc = [], 0
                for b, n in zip([*bounds, float("inf")], per, strict=True):
                    acc += n
                    buckets.append(("+Inf" if b == float("inf") else repr(b), acc))
                hist.add_metric(lab, buckets, sum_ms / 1000)
        yield from counters.values()
        yield dead
        yield from hists.values()


def install_metrics(app: FastAPI, view: ClusterView) -> CollectorRegistry:
    """Add ``GET /metrics`` to ``app``; returns the registry (cluster collector plus this
    process's own counters: ``disquepy_web_jobs_submitted_total``,
    ``disquepy_web_jobs_cancelled_total``)."""
    disable_created_metrics()  # no *_created series: they double every counter's lines
    registry = CollectorRegistry()
    registry.register(ClusterCollector(view))
    own: CollectorRegistry | None = registry
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # disque-web --workers N: summed
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
        own = None  # the counters are read from the shared files, not registered twice
    app.state.submitted = Counter("disquepy_web_jobs_submitted", "Jobs submitted through "
                                  "POST /jobs", ["queue", "priority"], registry=own)
    app.state.cancelled = Counter("disquepy_web_jobs_cancelled", "Jobs cancelled through "
                                  "this process", ["queue", "priority"], registry=own)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return registry
