"""Fixtures for the S3 tests: one real SeaweedFS server for the session (tests/s3server.py),
a fresh bucket per test, and the LC's client signed with the server's identity."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
from aiobotocore.session import get_session

from lc.s3 import S3Client, S3Credential, S3Settings
from tests.s3server import REGION, S3Endpoint, S3ServerUnavailable, seaweedfs

# short timeouts and backoff so that failure tests end in seconds; small parts so that a few
# hundred KiB already take several ranged GETs (multipart uploads need 5 MiB parts)
FAST = S3Settings(connect_timeout=2, read_timeout=2, request_timeout=5, attempts=3,
                  backoff_base=0.05, backoff_max=0.2, part_bytes=64 * 1024)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Endpoint]:
    try:
        with seaweedfs(keep_logs=bool(os.environ.get("SEDNA_KEEP_S3_LOGS"))) as endpoint:
            yield endpoint
    except S3ServerUnavailable as exc:
        pytest.fail(f"the S3 test server is not available: {exc}", pytrace=False)


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
