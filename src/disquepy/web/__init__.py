"""disquepy's HTTP side: the jobs API, the dashboard and Prometheus metrics, in one
FastAPI app (:func:`create_app`) served by ``disque-web``. It talks to the nodes only
through the client library (:mod:`disquepy.client`)."""

from .app import create_app

__all__ = ["create_app"]
