"""disquepy's HTTP side: the jobs API, the dashboard and Prometheus metrics, in one
FastAPI app (:func:`create_app`), served by ``disque-web`` behind the fast ``POST /jobs``
layer (:func:`asgi_app`). It talks to the nodes only through the client library
(:mod:`disquepy.client`). Needs the ``web`` extra."""

from __future__ import annotations

from typing import Any

__all__ = ["asgi_app", "create_app"]


def __getattr__(name: str) -> Any:
    # imported on use: `disque-web` without the web extra says so in one line
    # (disquepy.web.__main__) instead of failing here on `import fastapi`
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
