"""A kombu transport on disquepy, so Celery (and any kombu program) runs on Disque.

```python
import disquepy.kombu                       # registers the "disque" and "disques" schemes
from celery import Celery

app = Celery("tasks", broker="disque://127.0.0.1:7711,127.0.0.1:7712")
```

Importing this package adds ``disque`` (plain TCP) and ``disques`` (TLS) to kombu's
transport aliases: kombu has no plugin registry for transports, so the import is the one
line besides the URL. The ``celery`` command (``celery -A app worker``, ``celery inspect``)
imports it by itself, through the ``celery.commands`` entry point this package installs.
How kombu's and Celery's notions map onto Disque's, and what is refused: the docstring of
:mod:`disquepy.kombu.transport` and README.md ("Celery").
"""

from __future__ import annotations

try:
    from kombu.transport import TRANSPORT_ALIASES
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("disquepy.kombu needs kombu: pip install 'disquepy[celery]'") from e

TRANSPORT = "disquepy.kombu.transport:Transport"


def register() -> None:
    """Make ``disque://`` and ``disques://`` URLs resolve to this transport (idempotent)."""
    TRANSPORT_ALIASES.setdefault("disque", TRANSPORT)
    TRANSPORT_ALIASES.setdefault("disques", TRANSPORT)


register()

__all__ = ["TRANSPORT", "register"]
