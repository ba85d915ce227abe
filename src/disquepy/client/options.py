"""The connection options the command-line tools share (``disque-worker``, ``disque-web``):
whom to AUTH as and TLS, with the names the ``disque`` command line uses (redis-cli's)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--user``, ``--password`` (defaults from ``$DISQUE_USER`` and ``$DISQUE_PASSWORD``),
    ``--tls``, ``--cacert``, ``--cert``, ``--key``."""
    g = p.add_argument_group("connection")
    g.add_argument("--user", default=None,
                   help="ACL user to AUTH as, with --password (default: $DISQUE_USER, else "
                        "the default user)")
    g.add_argument("--password", default=None,
                   help="password for AUTH (default: $DISQUE_PASSWORD, else none)")
    g.add_argument("--tls", action="store_true",
                   help="connect over TLS (the servers' tls-port)")
    g.add_argument("--cacert", default=None, metavar="FILE",
                   help="CA certificate that verifies the servers (default: the system's)")
    g.add_argument("--cert", default=None, metavar="FILE",
                   help="client certificate, for servers with tls-auth-clients yes")
    g.add_argument("--key", default=None, metavar="FILE", help="private key of --cert")


def client_kwargs(p: argparse.ArgumentParser, a: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~disquepy.client.Disque` keyword arguments the options give (an error
    through ``p`` for TLS files without ``--tls``, or a certificate without its key)."""
    if not a.tls and (a.cacert or a.cert or a.key):
        p.error("--cacert, --cert and --key need --tls")
    if bool(a.cert) != bool(a.key):
        p.error("--cert and --key go together")
    password = a.password if a.password is not None else os.environ.get("DISQUE_PASSWORD")
    return {"username": a.user or os.environ.get("DISQUE_USER") or None, "password": password,
            "ssl": a.tls, "ssl_ca_certs": a.cacert, "ssl_certfile": a.cert,
            "ssl_keyfile": a.key}
