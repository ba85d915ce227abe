"""disquepy's client library: a sync (:class:`Disque`) and an asyncio (:class:`AsyncDisque`)
client for Disque, cluster-aware, built on redis-py's connection pools (RESP2).

```python
from disquepy.client import Disque

with Disque(["127.0.0.1:7711", "127.0.0.1:7712"]) as c:
    jid = c.add_job("emails", b'{"to": "tom@example.net"}', retry=60)
    for job in c.get_jobs("emails", timeout_ms=1000, with_counters=True):
        print(job.json())
        c.ack(job.id)
```
"""

from .aio import AsyncDisque, AsyncPipeline
from .errors import (
    DisqueError,
    LeavingError,
    NoJobError,
    NoNodesError,
    NoPermissionError,
    NoReplError,
    PausedError,
    ResponseError,
    TryAgainError,
)
from .nodes import Affinity, Hello, NodeInfo
from .replies import Event, Job
from .sync import Disque, Pipeline

__all__ = [
    "Disque",
    "AsyncDisque",
    "Job",
    "Event",
    "Hello",
    "NodeInfo",
    "Pipeline",
    "AsyncPipeline",
    "DisqueError",
    "ResponseError",
    "NoJobError",
    "LeavingError",
    "PausedError",
    "NoReplError",
    "TryAgainError",
    "NoNodesError",
    "NoPermissionError",
    "Affinity",
]
