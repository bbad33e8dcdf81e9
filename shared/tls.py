"""TLS contexts for both services, built from PEM files named in their configuration.

One place decides the protocol floor (TLS 1.2) and turns unreadable or mismatched files
into `TLSConfigError` naming the setting, so a bad certificate is a clear start-up error
instead of a handshake failure later.
"""

from __future__ import annotations

import ssl


class TLSConfigError(ValueError):
    """A certificate, key or CA file that cannot be loaded; the message names the setting."""


def server_context(cert_file: str, key_file: str, *, setting: str) -> ssl.SSLContext:
    """A server-side context serving `cert_file` (chain) with `key_file`."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"{setting}: cannot load {cert_file!r} / {key_file!r}: {exc}") from exc
    return ctx


def client_context(ca_file: str | None, *, setting: str) -> ssl.SSLContext:
    """A client context verifying the server against `ca_file` (None: the system trust store)."""
    try:
        ctx = ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"{setting}: cannot load CA file {ca_file!r}: {exc}") from exc
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx
