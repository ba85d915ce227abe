"""disquepy's worker framework: handler threads with heartbeats, back-off, dead letters and
graceful shutdown, for plain handlers or decorated tasks.

```python
from disquepy.worker import Worker

def handle(payload):          # the job body, decoded from JSON
    print(payload)

Worker(["127.0.0.1:7711"], queues=["high", "low"], concurrency=4, handler=handle,
       dead_letter_after=5).run()          # until SIGTERM/SIGINT
```

From the shell: ``python -m disquepy.worker mymodule:handle --queues high,low -c 4``;
with ``--group G`` the queues' events are consumed as consumer group G (GroupWorker).
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
