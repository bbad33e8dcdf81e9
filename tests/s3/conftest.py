"""Fixtures for the S3 tests: one real SeaweedFS server for the session (devcluster/s3server.py),
started at collection in the background and stopped at the end of the run, a fresh bucket per
test, and the LC's client signed with the server's identity."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator

import pytest
from aiobotocore.session import get_session

from devcluster.s3server import REGION, S3Endpoint, S3ServerUnavailable, seaweedfs
from lc.s3 import S3Client, S3Credential, S3Settings
from tests.starting import Starting

# short timeouts and backoff so that failure tests end in seconds; small parts so that a few
# hundred KiB already take several ranged GETs (multipart uploads need 5 MiB parts)
FAST = S3Settings(connect_timeout=2, read_timeout=2, request_timeout=5, attempts=3,
                  backoff_base=0.05, backoff_max=0.2, part_bytes=64 * 1024)


_STARTED = pytest.StashKey[Starting[S3Endpoint]]()


def _start(config: pytest.Config) -> Starting[S3Endpoint]:
    """The server, started in the background (some 3 s idle, over 10 s on a busy machine)."""
    if _STARTED not in config.stash:
        keep_logs = bool(os.environ.get("SEDNA_KEEP_S3_LOGS"))
        config.stash[_STARTED] = Starting("the S3 test server", lambda: seaweedfs(keep_logs=keep_logs),
                                          S3ServerUnavailable, thread="start-s3-server")
    return config.stash[_STARTED]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the server now when a selected test needs it."""
    if any("s3_server" in getattr(item, "fixturenames", ()) for item in items):
        _start(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop it whatever happened to the run (also when no test came to need it)."""
    if _STARTED in config.stash:
        config.stash[_STARTED].close()
        del config.stash[_STARTED]


@pytest.fixture(scope="session")
def s3_server(request: pytest.FixtureRequest) -> S3Endpoint:
    return _start(request.config).get()


@pytest.fixture
def credential(s3_server: S3Endpoint) -> S3Credential:
    return S3Credential.from_map(s3_server.credential_map())


@pytest.fixture
async def admin(s3_server: S3Endpoint) -> AsyncIterator:
    """A plain aiobotocore client with the server's identity, to set up and inspect objects."""
    async with get_session().create_client(
            "s3", endpoint_url=s3_server.url, region_name=REGION, aws_access_key_id=s3_server.access_key,
            aws_secret_access_key=s3_server.secret_key) as client:
        yield client


@pytest.fixture
async def bucket(admin) -> str:
    name = f"t-{secrets.token_hex(6)}"
    await admin.create_bucket(Bucket=name)
    return name


@pytest.fixture
async def s3(credential: S3Credential) -> AsyncIterator[S3Client]:
    async with S3Client(credential, settings=FAST) as client:
        yield client
