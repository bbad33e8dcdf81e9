"""A self-signed serving certificate, for serving the dev cluster over HTTPS.

Go clients (kubectl, Helm, client-go) read a kubeconfig's bearer token only when the server
URL is HTTPS: over plain HTTP they silently send no credentials. Testing RBAC with those
clients therefore needs TLS. The certificate is made with the `openssl` command line (no
Python crypto package is a dependency), valid for 127.0.0.1 and localhost, and is its own
CA: the kubeconfig carries it as `certificate-authority-data`.
"""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


class TLSUnavailable(RuntimeError):
    """No `openssl` binary to make a certificate with."""


@dataclass(frozen=True, slots=True)
class ServingCert:
    cert_file: Path
    key_file: Path

    @property
    def ca_data(self) -> str:
        """The certificate, base64 of its PEM, as a kubeconfig's `certificate-authority-data`."""
        return base64.b64encode(self.cert_file.read_bytes()).decode()

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this certificate (for aiohttp/kubernetes_asyncio)."""
        return ssl.create_default_context(cafile=str(self.cert_file))


def self_signed(directory: str | Path, *, days: int = 30, timeout: float = 30.0) -> ServingCert:
    """Write `tls.crt` and `tls.key` for 127.0.0.1/localhost into `directory`."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TLSUnavailable("openssl is not installed")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    cert, key = out / "tls.crt", out / "tls.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", str(days), "-subj", "/CN=devcluster",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=timeout)
    return ServingCert(cert, key)
