"""A real S3 server for tests: SeaweedFS (`weed server -s3`) on loopback, built by `make s3-server`.

SeaweedFS is an Apache-2.0 object store run in production; its S3 gateway signs and checks
requests like AWS (V4 signatures, 403 SignatureDoesNotMatch / InvalidAccessKeyId, 404
NoSuchBucket / NoSuchKey, ranged GETs, multipart uploads, server-side copies). One process
runs its master, volume server, filer and S3 gateway, each on a free loopback port, with its
data in a temporary directory and one identity (access key and secret key, admin rights)
from an S3 config file. Telemetry, the Iceberg and Lance ports and bucket creation on upload
are off, so the server talks to nothing but the test and a missing bucket stays missing.
"""

from __future__ import annotations

import asyncio
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

from bench.status_harness import free_port

ROOT = Path(__file__).resolve().parents[1]
WEED = Path(os.environ.get("SEDNA_WEED") or ROOT / ".tools" / "seaweedfs" / "weed")
START_TIMEOUT = 60.0  # seconds until the gateway stores an object (about 3 s on an idle machine)
REGION = "us-east-1"
STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL


class S3ServerUnavailable(RuntimeError):
    """The server binary is missing or the server did not come up."""


@dataclass(frozen=True)
class S3Endpoint:
    """Where the test server listens and the one identity it accepts."""

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


_SLOW_DOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                   b"<Message>Please reduce your request rate.</Message></Error>")
SLOW_DOWN = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
             b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(_SLOW_DOWN_BODY)) + _SLOW_DOWN_BODY


class CountingProxy:
    """A loopback TCP proxy to `upstream` that counts the bytes it relays to the client and the
    connections it accepted; with `upstream=None` it accepts and holds every connection without
    a byte in either direction (a server that takes connections and never answers). The first
    `throttle_first` connections get S3's 503 SlowDown to their first request instead."""

    def __init__(self, upstream: tuple[str, int] | None, *, throttle_first: int = 0) -> None:
        self.upstream = upstream
        self.throttle_first = throttle_first  # connections answered 503 SlowDown, then closed
        self.connections = 0
        self.bytes_down = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> CountingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.create_task(self._serve(reader, writer), name=f"proxy {self.connections}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.upstream is None:
                await asyncio.Event().wait()  # held until the proxy stops
            if self.connections <= self.throttle_first:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(SLOW_DOWN)
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            try:
                await asyncio.gather(self._pipe(reader, up_writer, count=False),
                                     self._pipe(up_reader, writer, count=True))
            finally:
                up_writer.close()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass  # either side went away: the proxied connection ends with it
        finally:
            writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    count: bool) -> None:
        try:
            while data := await reader.read(65536):
                if count:
                    self.bytes_down += len(data)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
