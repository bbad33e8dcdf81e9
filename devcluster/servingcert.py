"""The dev cluster's CA and HTTPS serving certificate, made at start with the openssl CLI.

Pods that run in-cluster clients (kubernetes_asyncio's in-cluster loader, client-go) always
talk HTTPS to `KUBERNETES_SERVICE_HOST:PORT` and verify the server against the `ca.crt` of
their service-account volume, as on a real cluster. So when the process runtime is on, the
dev cluster serves a second, TLS port with a certificate for 127.0.0.1/localhost signed by a
CA of its own; that CA is what the runtime projects as `ca.crt` (and what a
`kube-root-ca.crt` ConfigMap would hold). Nothing here is secret: the keys live in the
cluster's scratch directory and are for loopback use only.
"""

from __future__ import annotations

import atexit
import base64
import shutil
import ssl
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

OPENSSL_TIMEOUT = 30.0
_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
SANS = "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default," \
       "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"


class CertError(RuntimeError):
    """The openssl CLI is missing or failed."""


@dataclass(frozen=True, slots=True)
class ServingCert:
    ca: Path  # PEM of the CA that signed `cert` (a pod's ca.crt)
    cert: Path
    key: Path

    def ssl_context(self) -> ssl.SSLContext:
        """The server side: this certificate and key."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts the CA (aiohttp, kubernetes_asyncio)."""
        return ssl.create_default_context(cafile=str(self.ca))

    @property
    def ca_data(self) -> str:
        """The CA, base64 of its PEM, as a kubeconfig's `certificate-authority-data`."""
        return base64.b64encode(self.ca.read_bytes()).decode()


def available() -> bool:
    return shutil.which("openssl") is not None


def make(directory: Path) -> ServingCert:
    """A CA and a server certificate it signs, in `directory` (reused when present)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = ServingCert(ca=directory / "ca.crt", cert=directory / "apiserver.crt", key=directory / "apiserver.key")
    if cert.ca.exists() and cert.cert.exists() and cert.key.exists():
        return cert
    _openssl("req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "365",
             "-subj", "/CN=devcluster-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    (directory / "apiserver.ext").write_text(f"{SANS}\nextendedKeyUsage=serverAuth\n")
    _openssl("req", *_EC, "-keyout", "apiserver.key", "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver",
             cwd=directory)
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "apiserver.crt", "-days", "365", "-extfile", "apiserver.ext", cwd=directory)
    return cert


_shared: ServingCert | None = None
_shared_lock = threading.Lock()


def shared() -> ServingCert:
    """One CA and certificate per process (every dev cluster of a test run shares them, which
    keeps cluster start-up free of openssl runs); removed when the process exits."""
    global _shared
    with _shared_lock:
        if _shared is None:
            directory = Path(tempfile.mkdtemp(prefix="devcluster-pki-"))
            atexit.register(shutil.rmtree, directory, True)
            _shared = make(directory)
        return _shared


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise CertError("the openssl CLI is needed for the dev cluster's HTTPS port")
    try:
        subprocess.run([exe, *args], cwd=cwd, check=True, capture_output=True, timeout=OPENSSL_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as err:
        raise CertError(f"openssl {args[0]} failed: {err}") from err
