"""Fixtures for the S3 tests: one real SeaweedFS server for the session (tests/s3server.py),
started at collection in the background and stopped at the end of the run, a fresh bucket per
test, and the LC's client signed with the server's identity."""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import AsyncIterator

import pytest
from aiobotocore.session import get_session

from lc.s3 import S3Client, S3Credential, S3Settings
from tests.s3server import REGION, S3Endpoint, S3ServerUnavailable, seaweedfs

# short timeouts and backoff so that failure tests end in seconds; small parts so that a few
# hundred KiB already take several ranged GETs (multipart uploads need 5 MiB parts)
FAST = S3Settings(connect_timeout=2, read_timeout=2, request_timeout=5, attempts=3,
                  backoff_base=0.05, backoff_max=0.2, part_bytes=64 * 1024)


class _Starting:
    """The server started in a thread of its own at collection (it takes some 3 s idle, over 10 s
    on a busy machine), so that its start overlaps the tests that run before the first S3 test."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._endpoint: S3Endpoint | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="start-s3-server", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._endpoint = self._stack.enter_context(seaweedfs(keep_logs=bool(os.environ.get("SEDNA_KEEP_S3_LOGS"))))
        except BaseException as err:  # handed to the first test that needs the server
            self._error = err

    def get(self) -> S3Endpoint:
        self._thread.join()
        if isinstance(self._error, S3ServerUnavailable):
            pytest.fail(f"the S3 test server is not available: {self._error}", pytrace=False)
        if self._error is not None:
            raise self._error
        assert self._endpoint is not None
        return self._endpoint

    def close(self) -> None:
        self._thread.join()
        self._stack.close()


_STARTED = pytest.StashKey[_Starting]()


def _start(config: pytest.Config) -> _Starting:
    if _STARTED not in config.stash:
        config.stash[_STARTED] = _Starting()
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
