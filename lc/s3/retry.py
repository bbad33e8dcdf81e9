"""Which S3 failures are worth another request, and how long to wait before it (pure).

Transient: the server could not be reached or did not answer in time, dropped the
connection, answered 5xx, or throttled (429, 503 SlowDown and the throttling codes).
Permanent: everything else the server said: 401/403 (wrong key pair, clock skew, no right),
404 (no such bucket or key), other 4xx (bad name, bad range), and TLS failures (a
certificate that does not verify does not start to verify on the next request). A permanent
error is raised at once: a wrong secret costs one request, not a retry storm.

`classify` turns any failure of a request into the LC's error class with a message that
names the action, the object and the endpoint, and quotes the server's code and message
(clipped); it never sees the credential, so it cannot quote the secret key.
"""

from __future__ import annotations

import random
import ssl

import aiohttp
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    HTTPClientError,
    IncompleteReadError,
    ReadTimeoutError,
    SSLError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from lc.errors import (
    StorageChanged,
    StorageDenied,
    StorageError,
    StorageNotFound,
    StorageUnavailable,
)
from shared.text import clip

# what a request to S3 may raise, as far as `classify` knows it
REQUEST_ERRORS = (ClientError, BotoCoreError, aiohttp.ClientError, TimeoutError, OSError)

THROTTLED = frozenset({"SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
                       "RequestThrottled", "RequestLimitExceeded", "TooManyRequests",
                       "RequestTimeout", "InternalError", "ServiceUnavailable"})
NOT_FOUND = frozenset({"NoSuchBucket", "NoSuchKey", "NoSuchUpload", "NotFound", "404"})


def classify(exc: BaseException, *, action: str, target: str, attempts: int) -> StorageError:
    """The LC's error for one failed request: StorageUnavailable when another may succeed."""
    where = f"{action} {target}"
    if isinstance(exc, ClientError):
        return _client_error(exc, where=where, attempts=attempts)
    if isinstance(exc, SSLError | ssl.SSLError | aiohttp.ClientSSLError):
        return StorageError(f"{where}: TLS failed: {_text(exc)}", attempts=attempts)
    if isinstance(exc, TimeoutError | ReadTimeoutError | ConnectTimeoutError):
        return StorageUnavailable(f"{where}: timed out ({_text(exc)})", attempts=attempts)
    if isinstance(exc, HTTPClientError | BotoConnectionError | IncompleteReadError
                  | aiohttp.ClientError | OSError):
        return StorageUnavailable(f"{where}: {_text(exc)}", attempts=attempts)
    return StorageError(f"{where}: {_text(exc)}", attempts=attempts)


def transient(error: StorageError) -> bool:
    """Whether another request may succeed (a changed object is read again by its caller)."""
    return isinstance(error, StorageUnavailable) and not isinstance(error, StorageChanged)


def backoff(attempt: int, *, base: float, cap: float, rand: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based): `base * 2**(attempt-1)` up to
    `cap`, jittered down by at most half so that LCs that failed together do not retry together."""
    delay = min(cap, base * (2 ** (attempt - 1)))
    return delay * (0.5 + 0.5 * (rand or random).random())


def _client_error(exc: ClientError, *, where: str, attempts: int) -> StorageError:
    error = exc.response.get("Error", {})
    meta = exc.response.get("ResponseMetadata", {})
    code = str(error.get("Code") or "")
    status = int(meta.get("HTTPStatusCode") or 0)
    said = f"{status} {code}: {error.get('Message') or 'no message'}" if code else f"HTTP {status}"
    text = f"{where}: the server answered {clip(said)}"
    if status in (401, 403) and code not in THROTTLED:
        return StorageDenied(f"{text} (check the credential's ACCESS_KEY_ID and SECRET_ACCESS_KEY, "
                             "and its rights on the bucket)", attempts=attempts)
    if status == 404 or code in NOT_FOUND:
        return StorageNotFound(text, attempts=attempts)
    if status == 412 or code == "PreconditionFailed":
        return StorageChanged(f"{where}: the object changed while it was read", attempts=attempts)
    if status >= 500 or status == 429 or code in THROTTLED:
        return StorageUnavailable(text, attempts=attempts)
    return StorageError(text, attempts=attempts)


def _text(exc: BaseException) -> str:
    return clip(str(exc) or type(exc).__name__)


