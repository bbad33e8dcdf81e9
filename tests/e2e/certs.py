"""Certificates made at run time with the openssl CLI: a CA and a server certificate it signs."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

OPENSSL = shutil.which("openssl")
_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class ServerCert:
    ca: Path  # the CA certificate that signed it
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    if OPENSSL is None:
        pytest.skip("the openssl CLI is needed to make test certificates")
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_ca(directory: Path, name: str = "test-ca") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return directory / f"{name}.crt"


def make_server_cert(directory: Path, ca: Path, name: str = "server",
                     hosts: tuple[str, ...] = ("IP:127.0.0.1", "DNS:localhost")) -> ServerCert:
    """A serverAuth certificate for `hosts` signed by `ca` (made by make_ca in `directory`)."""
    (directory / f"{name}.ext").write_text(
        f"subjectAltName={','.join(hosts)}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n")
    _openssl("req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
             cwd=directory)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca), "-CAkey", str(ca.with_suffix(".key")),
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
             cwd=directory)
    return ServerCert(ca=ca, cert=directory / f"{name}.crt", key=directory / f"{name}.key")
