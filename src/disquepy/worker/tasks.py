"""Decorated tasks: ``app = Tasks(nodes)``, ``@app.task("queue")``, ``f.delay(payload)``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from ..client import Disque
from ..client.nodes import NodeSpec
from .backoff import Backoff
from .core import Route, Worker, max_attempts


class _Defaults(TypedDict):
    """The app's retry policy and body kind: what a task leaves unset."""

    body: str
    backoff: Backoff | None
    dead_letter_after: int | None
    dead_letter_deliveries: int | None


class Task:
    """A function bound to a queue. Calling it runs the function; :meth:`delay` enqueues
    a job for a worker instead."""

    def __init__(self, app: Tasks, queue: str, fn: Callable[[Any], Any], route: Route,
                 priority: int) -> None:
        self.app = app
        self.queue = queue
        self.fn = fn
        self.route = route
        self.priority = priority
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "task")

    def __call__(self, payload: Any) -> Any:
        return self.fn(payload)

    def delay(self, payload: Any, **add_job_options: Any) -> str:
        """Add a job for this task (JSON-encoded unless ``payload`` is bytes); returns its
        ID. ``add_job_options`` go to :meth:`Disque.add_job` (``delay=``, ``retry=``...)."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload)
        opts = dict(self.route.add_options)
        opts.update(add_job_options)
        return self.app.client.add_job(self.queue, body, **opts)


class Tasks:
    """A set of tasks sharing a client and defaults; builds their :class:`Worker`.

    ```python
    app = Tasks(["127.0.0.1:7711"], dead_letter_after=5)

    @app.task("emails", backoff=Backoff.exponential(base=2, max=300))
    def send_email(payload):
        ...

    send_email.delay({"to": "tom@example.net"})   # producer side
    app.run(concurrency=4)                          # worker side (blocks; SIGTERM drains)
    ```

    Queues are fetched in ``priority`` order (lower first; then definition order), each
    with its high, medium and low levels (see :class:`Worker`).
    """

    def __init__(self, client_or_nodes: Disque | NodeSpec | Sequence[NodeSpec] | None = None,
                 *, body: str = "json", backoff: Backoff | None = None,
                 dead_letter_after: int | None = None,
                 dead_letter_deliveries: int | None = None, max_retries: int | None = None,
                 **worker_options: Any) -> None:
        dead_letter_after = max_attempts(dead_letter_after, max_retries)
        self._client_arg = client_or_nodes  # (what a worker of these tasks connects with)
        self._client: Disque | None = None
        self._nodes: NodeSpec | Sequence[NodeSpec] | None = None
        if isinstance(client_or_nodes, Disque):
            self._client = client_or_nodes
        else:
            self._nodes = client_or_nodes
        self.defaults: _Defaults = {"body": body, "backoff": backoff,
                                    "dead_letter_after": dead_letter_after,
                                    "dead_letter_deliveries": dead_letter_deliveries}
        self.worker_options = worker_options
        self.tasks: dict[str, Task] = {}

    @property
    def client(self) -> Disque:
        """The producer-side client (created on first use)."""
        if self._client is None:
            self._client = Disque(self._nodes)
        return self._client

    def task(self, queue: str, *, body: str | None = None, backoff: Backoff | None = None,
             dead_letter_after: int | None = None,
             dead_letter_deliveries: int | None = None, max_retries: int | None = None,
             priority: int = 0,
             **add_job_options: Any) -> Callable[[Callable[[Any], Any]], Task]:
        """Register the decorated function as the handler of ``queue``.
        ``backoff`` and ``max_retries`` (or ``dead_letter_after``, attempts) are the
        queue's retry policy (unset: the app's, else the worker's, else the default: 3
        retries, exponential from 1 s). ``add_job_options`` (``retry=``, ``ttl=``,
        ``replicate=``...) are used by :meth:`Task.delay`."""
        dead_letter_after = max_attempts(dead_letter_after, max_retries)

        def deco(fn: Callable[[Any], Any]) -> Task:
            if queue in self.tasks:
                raise ValueError(f"queue {queue!r} already has a task")
            d = self.defaults
            route = Route(
                fn,
                body or d["body"],
                backoff if backoff is not None else d["backoff"],
                dead_letter_after if dead_letter_after is not None else d["dead_letter_after"],
                dead_letter_deliveries if dead_letter_deliveries is not None
                else d["dead_letter_deliveries"],
                dict(add_job_options),
            )
            t = Task(self, queue, fn, route, priority)
            self.tasks[queue] = t
            return t

        return deco

    def queues(self) -> list[str]:
        """The tasks' queues in fetch order."""
        order = list(self.tasks)
        return sorted(order, key=lambda q: (self.tasks[q].priority, order.index(q)))

    def worker(self, concurrency: int = 1, queues: Sequence[str] | None = None,
               client_or_nodes: Disque | NodeSpec | Sequence[NodeSpec] | None = None,
               **options: Any) -> Worker:
        """A :class:`Worker` for these tasks (all, or ``queues`` in that order)."""
        opts = dict(self.worker_options)
        opts.update(options)
        qs = list(queues) if queues else self.queues()
        routes = {q: self.tasks[q].route for q in qs}
        target = client_or_nodes if client_or_nodes is not None else self._client_arg
        return Worker(target, qs, concurrency, routes=routes, **opts)

    def run(self, concurrency: int = 1, **options: Any) -> bool:
        """Run a worker for every task until SIGTERM/SIGINT (see :meth:`Worker.run`)."""
        return self.worker(concurrency, **options).run()
