"""A real S3 server for the dev environment and the tests: SeaweedFS (`weed server -s3`) on
loopback, built by `make s3-server`; what `make run S3=1` and the S3 tests run.

SeaweedFS is an Apache-2.0 object store run in production; its S3 gateway signs and checks
requests like AWS (V4 signatures, 403 SignatureDoesNotMatch / InvalidAccessKeyId, 404
NoSuchBucket / NoSuchKey, ranged GETs, multipart uploads, server-side copies). One process
runs its master, volume server, filer and S3 gateway, each on a free loopback port, with its
data in a temporary directory and one identity (access key and secret key, admin rights)
from an S3 config file. Telemetry, the Iceberg and Lance ports and bucket creation on upload
are off, so the server talks to nothing but its users and a missing bucket stays missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shared.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
WEED = Path(os.environ.get("SEDNA_WEED") or ROOT / ".tools" / "seaweedfs" / "weed")
START_TIMEOUT = 60.0  # seconds until the gateway stores an object (about 3 s on an idle machine)
REGION = "us-east-1"
STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL


class S3ServerUnavailable(RuntimeError):
    """The server binary is missing or the server did not come up."""


@dataclass(frozen=True)
class S3Endpoint:
    """Where the server listens and the one identity it accepts."""

    host: str
    port: int
    access_key: str
    secret_key: str = field(repr=False)

    @property
    def endpoint(self) -> str:  # host:port, as the `s3-endpoint` of a credential
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def credential_map(self) -> dict[str, str]:
        """The `sedna.io/credential` annotation's map for this server (plain HTTP)."""
        return {"s3-endpoint": self.endpoint, "s3-usehttps": "0",
                "ACCESS_KEY_ID": self.access_key, "SECRET_ACCESS_KEY": self.secret_key}


@contextlib.contextmanager
def seaweedfs(*, keep_logs: bool = False) -> Iterator[S3Endpoint]:
    """A running SeaweedFS S3 server until the block ends; its data and logs removed then."""
    if not os.access(WEED, os.X_OK):
        raise S3ServerUnavailable(f"{WEED} is missing: build it with `make s3-server`")
    home = Path(tempfile.mkdtemp(prefix="sedna-s3-"))
    ident = S3Endpoint("127.0.0.1", free_port(), "sedna-" + secrets.token_hex(6), secrets.token_hex(20))
    config = home / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "sedna-test", "credentials": [{"accessKey": ident.access_key, "secretKey": ident.secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    config.chmod(0o600)
    (home / "data").mkdir()
    log = (home / "weed.log").open("wb")
    proc = subprocess.Popen(_command(home, ident, config), cwd=home, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_ready(proc, ident, home / "weed.log")
        yield ident
    finally:
        _stop(proc)
        log.close()
        if not keep_logs:
            shutil.rmtree(home, ignore_errors=True)


def _command(home: Path, ident: S3Endpoint, config: Path) -> list[str]:
    ports = {name: free_port() for name in ("master", "master.grpc", "volume", "volume.grpc",
                                            "filer", "filer.grpc", "s3.grpc")}
    return [str(WEED), "server", f"-dir={home / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}", f"-master.port.grpc={ports['master.grpc']}",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume.grpc']}",
            "-filer", f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer.grpc']}",
            "-s3", f"-s3.port={ident.port}", f"-s3.port.grpc={ports['s3.grpc']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}",
            "-s3.autoCreateBucket=false", "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64", "-volume.max=0", "-volume.preStopSeconds=0"]


def _wait_ready(proc: subprocess.Popen, ident: S3Endpoint, log: Path) -> None:
    """Until a bucket can be created and an object stored in it (the gateway answers before
    its filer and volume server can store anything)."""
    import botocore.session
    from botocore.config import Config

    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=ident.url, region_name=REGION, aws_access_key_id=ident.access_key,
        aws_secret_access_key=ident.secret_key,
        config=Config(connect_timeout=1, read_timeout=5, retries={"total_max_attempts": 1},
                      s3={"addressing_style": "path"}))
    deadline = time.monotonic() + START_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise S3ServerUnavailable(f"weed exited {proc.returncode}: {_tail(log)}")
        try:
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou,
                                     client.exceptions.BucketAlreadyExists):
                client.create_bucket(Bucket="sedna-ready")
            client.put_object(Bucket="sedna-ready", Key="probe", Body=b"ok")
            client.delete_object(Bucket="sedna-ready", Key="probe")
            client.delete_bucket(Bucket="sedna-ready")
            return
        except Exception as exc:  # any failure means not ready yet; the last one is reported
            last = exc
            time.sleep(0.2)
    raise S3ServerUnavailable(f"weed did not store an object within {START_TIMEOUT}s "
                              f"(last: {last}): {_tail(log)}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE: weed's own graceful stop takes some 15 s of
    internal retries, and its data is thrown away anyway."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"
