"""disquepy's worker framework: handler threads fed by batched fetches, heartbeats, retries
with back-off, dead letters and graceful shutdown, for plain handlers or decorated tasks.

```python
from disquepy.worker import Worker

def handle(payload):          # the job body, decoded from JSON
    print(payload)

Worker(["127.0.0.1:7711"], queues=["emails"], concurrency=4, handler=handle,
       max_retries=5).run()               # until SIGTERM/SIGINT
```

``queues=["emails"]`` serves ``emails:high``, ``emails`` and ``emails:low``, high first
(``priorities=False``: exactly the queues named). A failing job is retried with back-off
(``NACK ... DELAY``) and dead-lettered after its retries: 3, 1, 2 then 4 s apart, unless
the job, its queue or the worker says otherwise (``disquepy.client.envelope``).

From the shell: ``disque-worker mymodule:handle --queues emails -c 4`` (the same as
``python -m disquepy.worker ...``); with ``--group G`` the queues' events are consumed as
consumer group G (GroupWorker); ``disquepy.worker.example:handle`` is an example handler.
"""

from ..client.deadletter import DeadLetter
from ..client.deadqueue import delete_dead, list_dead, requeue_dead
from .backoff import Backoff
from .core import RetryLater, Route, Worker, current_attempt, current_job
from .groups import GroupWorker
from .tasks import Task, Tasks

__all__ = [
    "Worker",
    "GroupWorker",
    "Tasks",
    "Task",
    "Route",
    "Backoff",
    "RetryLater",
    "current_job",
    "current_attempt",
    "DeadLetter",
    "list_dead",
    "requeue_dead",
    "delete_dead",
]
