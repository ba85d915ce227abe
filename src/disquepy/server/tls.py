"""TLS contexts from the ``tls-*`` directives, as Redis reads them.

``tls-port`` adds a TLS listener beside the plain ``port`` (``port 0`` leaves TLS
only); its context shows ``tls-cert-file``/``tls-key-file`` and, following
``tls-auth-clients``, requires (``yes``, Redis's default: mutual TLS), accepts
(``optional``: verified when shown) or ignores (``no``) client certificates signed by
``tls-ca-cert-file``. ``tls-cluster yes`` puts the cluster bus over mutual TLS: the
listener requires a peer certificate from the CA and outbound links show the same
certificate and verify the peer's. Peers are reached by IP address, so, as in Redis,
the chain is verified but no host name is checked. ``tls-protocols`` bounds the
versions, ``tls-ciphers`` sets the TLSv1.2 cipher list.
"""

from __future__ import annotations

import ssl

from ..core.config import Config

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


class TlsConfigError(Exception):
    """The TLS directives do not make a usable configuration (one line, ready to log)."""


def enabled(cfg: Config) -> bool:
    return bool(cfg.tls_port or cfg.tls_cluster)


def announced_port(cfg: Config) -> int:
    """The port this node gives in gossip and HELLO (its bus is that + the offset):
    ``tls-port`` when the bus is over TLS or there is no plain port, as in Redis."""
    if cfg.tls_port and (cfg.tls_cluster or not cfg.port):
        return cfg.tls_port
    return cfg.port


def describe(e: Exception) -> str:
    """An SSL or OS error in one short line (``CERTIFICATE_VERIFY_FAILED: unable to get
    local issuer certificate``)."""
    why = getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e)
    detail = getattr(e, "verify_message", None)
    return f"{why}: {detail}" if detail else why


def _context(cfg: Config, side: ssl._SSLMethod) -> ssl.SSLContext:
    ctx = ssl.SSLContext(side)
    versions = cfg.tls_protocols.split()
    ctx.minimum_version = _VERSIONS[versions[0]]
    ctx.maximum_version = _VERSIONS[versions[-1]]
    if cfg.tls_ciphers:
        try:
            ctx.set_ciphers(cfg.tls_ciphers)
        except ssl.SSLError as e:
            raise TlsConfigError(f"Invalid tls-ciphers '{cfg.tls_ciphers}': {describe(e)}") from None
    try:
        ctx.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(
            f"Failed to load tls-cert-file {cfg.tls_cert_file} / tls-key-file "
            f"{cfg.tls_key_file}: {describe(e)}"
        ) from None
    if cfg.tls_ca_cert_file:
        try:
            ctx.load_verify_locations(cfg.tls_ca_cert_file)
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(
                f"Failed to load tls-ca-cert-file {cfg.tls_ca_cert_file}: "
                f"{describe(e)}"
            ) from None
    return ctx


def check(cfg: Config) -> None:
    """Raise ``TlsConfigError`` if the directives contradict each other."""
    if not enabled(cfg):
        return
    what = "tls-port" if cfg.tls_port else "tls-cluster yes"
    if not cfg.tls_cert_file or not cfg.tls_key_file:
        raise TlsConfigError(f"{what} needs tls-cert-file and tls-key-file")
    if cfg.tls_cluster and not cfg.tls_ca_cert_file:
        raise TlsConfigError("tls-cluster yes needs tls-ca-cert-file (peers are verified "
                             "against it)")
    if cfg.tls_port and cfg.tls_auth_clients != "no" and not cfg.tls_ca_cert_file:
        raise TlsConfigError(f"tls-auth-clients {cfg.tls_auth_clients} needs "
                             "tls-ca-cert-file (or tls-auth-clients no)")
    if cfg.tls_port and cfg.tls_port == cfg.port:
        raise TlsConfigError("tls-port and port must differ")


def client_context(cfg: Config) -> ssl.SSLContext | None:
    """The context of the ``tls-port`` listener, or None without one."""
    if not cfg.tls_port:
        return None
    ctx = _context(cfg, ssl.PROTOCOL_TLS_SERVER)
    ctx.verify_mode = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                       "no": ssl.CERT_NONE}[cfg.tls_auth_clients]
    return ctx


def bus_contexts(cfg: Config) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """(listener, outbound) contexts of the cluster bus; (None, None) without
    ``tls-cluster``."""
    if not cfg.tls_cluster:
        return None, None
    server = _context(cfg, ssl.PROTOCOL_TLS_SERVER)
    server.verify_mode = ssl.CERT_REQUIRED
    client = _context(cfg, ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False  # peers are addressed by IP; the CA is the trust
    client.verify_mode = ssl.CERT_REQUIRED
    return server, client
