"""lc/s3's pure parts: s3:// URLs, the `sedna.io/credential` annotation, which failures are
retried and how long the client waits between attempts."""

from __future__ import annotations

import json
import random

import aiohttp
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from lc.errors import (
    StorageChanged,
    StorageConfigError,
    StorageDenied,
    StorageError,
    StorageNotFound,
    StorageUnavailable,
)
from lc.s3 import ANNOTATION, S3Credential, S3Url, is_s3
from lc.s3.retry import backoff, classify, transient

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GOOD = {"s3-endpoint": "minio.example:9000", "s3-usehttps": "0",
        "ACCESS_KEY_ID": "AKIDEXAMPLE", "SECRET_ACCESS_KEY": SECRET}


# ---- URLs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "bucket", "key"), [
    pytest.param("s3://data/ds/train.txt", "data", "ds/train.txt", id="object"),
    pytest.param("S3://data/a b/c?d#e", "data", "a b/c?d#e", id="key-as-written"),
    pytest.param("s3://my.bucket-1/", "my.bucket-1", "", id="bucket-root"),
    pytest.param("s3://data", "data", "", id="no-slash"),
])
def test_s3_url_parts(url, bucket, key):
    assert S3Url.parse(url) == S3Url(bucket, key)
    assert is_s3(url)


@pytest.mark.parametrize(("url", "says"), [
    pytest.param("/data/train.txt", "is not an s3://bucket/key URL", id="local"),
    pytest.param("https://data/x", "is not an s3://bucket/key URL", id="https"),
    pytest.param("s3:///x", "bucket name '' is not valid", id="no-bucket"),
    pytest.param("s3://Data/x", "bucket name 'Data' is not valid", id="uppercase"),
    pytest.param("s3://ab/x", "bucket name 'ab' is not valid", id="short"),
    pytest.param("s3://user@data/x", "is not valid", id="userinfo"),
    pytest.param("s3://a..b/x", "is not valid", id="double-dot"),
    pytest.param("s3://data/" + "k" * 1025, "longer than 1024 bytes", id="long-key"),
    pytest.param("s3://data/a\x00b", "NUL", id="nul"),
])
def test_s3_url_refused(url, says):
    with pytest.raises(StorageConfigError, match=says):
        S3Url.parse(url)


def test_s3_url_children_and_text():
    prefix = S3Url.parse("s3://out/job/1")
    assert prefix.child("data.txt") == S3Url("out", "job/1/data.txt")
    assert S3Url("out", "job/").child("a") == S3Url("out", "job/a")
    assert S3Url("out", "").child("a") == S3Url("out", "a")
    assert str(prefix) == "s3://out/job/1" and prefix.basename == "1"


# ---- credentials ----------------------------------------------------------------------------


def test_credential_from_the_annotation():
    cred = S3Credential.from_annotations({ANNOTATION: json.dumps(GOOD), "other": "x"})
    assert cred is not None
    assert cred.endpoint_url == "http://minio.example:9000"
    assert (cred.access_key, cred.secret_key, cred.region) == ("AKIDEXAMPLE", SECRET, "us-east-1")
    assert SECRET not in repr(cred) and "AKIDEXAMPLE" not in repr(cred)


@pytest.mark.parametrize(("usehttps", "scheme"), [
    pytest.param("0", "http", id="zero"), pytest.param("1", "https", id="one"),
    pytest.param("false", "https", id="anything-else"), pytest.param(None, "https", id="missing"),
])
def test_usehttps_as_upstream(usehttps, scheme):
    data = {k: v for k, v in GOOD.items() if k != "s3-usehttps"}
    if usehttps is not None:
        data["s3-usehttps"] = usehttps
    assert S3Credential.from_map(data).endpoint_url == f"{scheme}://minio.example:9000"


def test_no_annotation_is_no_credential():
    assert S3Credential.from_annotations(None) is None
    assert S3Credential.from_annotations({ANNOTATION: ""}) is None


@pytest.mark.parametrize(("change", "says"), [
    pytest.param({"s3-endpoint": None}, "has no s3-endpoint", id="no-endpoint"),
    pytest.param({"ACCESS_KEY_ID": ""}, "has no ACCESS_KEY_ID", id="empty-access-key"),
    pytest.param({"SECRET_ACCESS_KEY": 5}, "has no SECRET_ACCESS_KEY", id="secret-not-a-string"),
    pytest.param({"s3-endpoint": "https://minio.example"}, "without a scheme", id="scheme"),
    pytest.param({"s3-endpoint": "minio.example/path"}, "must be host", id="path"),
    pytest.param({"s3-usehttps": 0}, "must be strings", id="usehttps-number"),
])
def test_credential_refused_without_its_secret(change, says):
    data = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(StorageConfigError, match=says) as caught:
        S3Credential.from_map(data)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("text", [
    pytest.param('{"SECRET_ACCESS_KEY": "' + SECRET + '"', id="truncated-json"),
    pytest.param(json.dumps([SECRET]), id="not-a-map"),
])
def test_malformed_annotation_never_quoted(text):
    with pytest.raises(StorageConfigError) as caught:
        S3Credential.from_annotations({ANNOTATION: text})
    assert SECRET not in str(caught.value)


# ---- retries --------------------------------------------------------------------------------


def client_error(status: int, code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} said"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


@pytest.mark.parametrize(("exc", "kind", "retried"), [
    pytest.param(client_error(500, "InternalError"), StorageUnavailable, True, id="500"),
    pytest.param(client_error(503, "SlowDown"), StorageUnavailable, True, id="slow-down"),
    pytest.param(client_error(429, "TooManyRequests"), StorageUnavailable, True, id="429"),
    pytest.param(client_error(400, "RequestTimeout"), StorageUnavailable, True, id="request-timeout"),
    pytest.param(client_error(403, "SignatureDoesNotMatch"), StorageDenied, False, id="bad-secret"),
    pytest.param(client_error(403, "InvalidAccessKeyId"), StorageDenied, False, id="bad-key"),
    pytest.param(client_error(404, "NoSuchBucket"), StorageNotFound, False, id="no-bucket"),
    pytest.param(client_error(404, "404"), StorageNotFound, False, id="head-404"),
    pytest.param(client_error(412, "PreconditionFailed"), StorageChanged, False, id="changed"),
    pytest.param(client_error(400, "InvalidBucketName"), StorageError, False, id="other-4xx"),
    pytest.param(EndpointConnectionError(endpoint_url="http://x"), StorageUnavailable, True, id="refused"),
    pytest.param(ReadTimeoutError(endpoint_url="http://x"), StorageUnavailable, True, id="read-timeout"),
    pytest.param(TimeoutError(), StorageUnavailable, True, id="deadline"),
    pytest.param(aiohttp.ServerDisconnectedError(), StorageUnavailable, True, id="disconnected"),
    pytest.param(ConnectionResetError(), StorageUnavailable, True, id="reset"),
])
def test_classify(exc, kind, retried):
    error = classify(exc, action="download", target="s3://b/k at h:1", attempts=2)
    assert type(error) is kind
    assert transient(error) is retried
    assert error.attempts == 2 and str(error).startswith("download s3://b/k at h:1: ")


def test_backoff_grows_to_its_cap_with_jitter():
    rand = random.Random(7)
    delays = [backoff(n, base=0.5, cap=4.0, rand=rand) for n in range(1, 8)]
    for n, delay in enumerate(delays, 1):
        full = min(4.0, 0.5 * 2 ** (n - 1))
        assert full / 2 <= delay <= full
