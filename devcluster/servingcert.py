"""The dev cluster's CA and HTTPS serving certificate, made at start with the openssl CLI.

`sedna-devcluster` serves HTTPS by default, as a real API server does, with a CA and a
serving certificate kept in its state directory (`make(dir, hosts=[bind host])`, reused across
restarts, the serving certificate re-made when its names or validity no longer fit) and the CA
in the kubeconfig it writes: kubectl and client-go send a bearer token only over HTTPS.

Pods that run in-cluster clients (kubernetes_asyncio's in-cluster loader, client-go) always
talk HTTPS to `KUBERNETES_SERVICE_HOST:PORT` and verify the server against the `ca.crt` of
their service-account volume, as on a real cluster. So when the process runtime is on, pods
use the HTTPS port (the main one when it is HTTPS, else a second port with a certificate of
one CA per process, `shared()`); that CA is what the runtime projects as `ca.crt`. Nothing
here is secret: the keys are for loopback use only.
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import ipaddress
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

OPENSSL_TIMEOUT = 30.0
_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
SANS = "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default," \
       "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
CA_DAYS = 3650
CERT_DAYS = 365
RENEW_BEFORE = 7 * 86400  # a serving certificate this close to its end is made again at start


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


def make(directory: str | os.PathLike[str], *, hosts: Iterable[str] = ()) -> ServingCert:
    """A CA and a server certificate it signs, in `directory`, for 127.0.0.1, localhost, the
    in-cluster names and `hosts` (the bind address: an IP or a DNS name).

    Files present are reused (a kubeconfig written earlier keeps working): the CA always, the
    serving certificate while its names are still these and it is not about to expire. Safe for
    two processes sharing a directory (an exclusive lock on `.lock`).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cert = ServingCert(ca=directory / "ca.crt", cert=directory / "apiserver.crt", key=directory / "apiserver.key")
    ext = f"{subject_alt_names(hosts)}\nextendedKeyUsage=serverAuth\n"
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ((directory / "ca.key").exists() and cert.ca.exists()):
            _openssl("req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", str(CA_DAYS),
                     "-subj", "/CN=devcluster-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
            (directory / "apiserver.crt").unlink(missing_ok=True)  # signed by a CA that is gone
        if not _fits(directory, cert, ext):
            _sign_serving(directory, ext)
    return cert


def subject_alt_names(hosts: Iterable[str]) -> str:
    """The `subjectAltName` extension line: the fixed names plus `hosts` (wildcards skipped)."""
    extra = []
    for host in hosts:
        host = host.strip("[]")
        if not host or host in ("0.0.0.0", "::", "127.0.0.1", "localhost"):
            continue
        try:
            extra.append(f"IP:{ipaddress.ip_address(host)}")
        except ValueError:
            extra.append(f"DNS:{host}")
    return SANS + "".join(f",{name}" for name in dict.fromkeys(extra))


def _fits(directory: Path, cert: ServingCert, ext: str) -> bool:
    """The serving certificate exists, names what `ext` names and has time left."""
    ext_file = directory / "apiserver.ext"
    if not (cert.cert.exists() and cert.key.exists() and ext_file.exists()) or ext_file.read_text() != ext:
        return False
    try:
        _openssl("x509", "-checkend", str(RENEW_BEFORE), "-noout", "-in", "apiserver.crt", cwd=directory)
    except CertError:
        return False
    return True


def _sign_serving(directory: Path, ext: str) -> None:
    (directory / "apiserver.ext").write_text(ext)
    _openssl("req", *_EC, "-keyout", "apiserver.key", "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver",
             cwd=directory)
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "apiserver.crt", "-days", str(CERT_DAYS), "-extfile", "apiserver.ext", cwd=directory)
    for name in ("ca.key", "apiserver.key"):
        (directory / name).chmod(0o600)


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
