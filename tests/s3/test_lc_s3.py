"""The LC's S3 client (lc/s3) against a real S3 server: SeaweedFS on loopback (devcluster/s3server.py).

Reads, downloads, uploads and server-side copies round-trip bytes exactly; wrong credentials
and missing buckets are refused at once with the LC's error classes (one request, no retry);
an endpoint that refuses or never answers fails within its timeouts after a bounded number
of attempts; an object over the cap is refused by its size before its body is read, and one
that grows past the cap while read is refused at its next part.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import socket

import pytest

from lc import files
from lc.errors import (
    StorageChanged,
    StorageDenied,
    StorageError,
    StorageNotFound,
    StorageTooLarge,
    StorageUnavailable,
)
from lc.files import Caps
from lc.s3 import S3Client, S3Credential, S3Url
from tests.conftest import eventually
from tests.s3.conftest import FAST
from tests.tcpproxy import TcpProxy

MiB = 1 << 20
BIG = Caps(64 * MiB)
RETRIED = "s3 request retried"


def index_lines(n: int) -> bytes:
    return b"".join(b"images/%06d.jpg %d\n" % (i, i % 10) for i in range(n))


async def body_of(admin, bucket: str, key: str) -> bytes:
    response = await admin.get_object(Bucket=bucket, Key=key)
    async with response["Body"] as body:
        return await body.read()


def retries(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == RETRIED]


# ---- reading ------------------------------------------------------------------------------


async def test_index_downloaded_in_parts_and_counted(s3: S3Client, admin, bucket, tmp_path):
    data = index_lines(20_000)  # 420 KB: seven ranged GETs of 64 KiB
    await admin.put_object(Bucket=bucket, Key="ds/train.txt", Body=data)
    url = S3Url.parse(f"s3://{bucket}/ds/train.txt")

    target = tmp_path / "train.txt"
    size = await s3.download(url, str(target), files.DEFAULT_LIMITS.index, what="index file")

    assert size == len(data) and target.read_bytes() == data
    assert files.count_lines(str(target), files.DEFAULT_LIMITS.index) == 20_000
    assert await s3.read(url, BIG) == data
    assert sorted(os.listdir(tmp_path)) == ["train.txt"]  # no temporary file left


async def test_empty_object_reads_as_empty(s3: S3Client, admin, bucket):
    await admin.put_object(Bucket=bucket, Key="empty.txt", Body=b"")
    assert await s3.read(S3Url(bucket, "empty.txt"), BIG) == b""


async def test_object_exactly_at_the_cap_is_read(s3: S3Client, admin, bucket):
    data = secrets.token_bytes(3 * 64 * 1024)
    await admin.put_object(Bucket=bucket, Key="edge.bin", Body=data)
    assert await s3.read(S3Url(bucket, "edge.bin"), Caps(len(data))) == data
    with pytest.raises(StorageTooLarge):
        await s3.read(S3Url(bucket, "edge.bin"), Caps(len(data) - 1))


# ---- writing ------------------------------------------------------------------------------


async def test_file_uploaded_in_one_put_and_in_parts(credential, admin, bucket, tmp_path):
    small, large = tmp_path / "small.txt", tmp_path / "model.bin"
    small.write_bytes(b"hello\n")
    large.write_bytes(secrets.token_bytes(11 * MiB))  # 3 parts of 5 MiB, S3's smallest part
    settings = dataclasses.replace(FAST, part_bytes=5 * MiB, request_timeout=30)
    async with S3Client(credential, settings=settings) as s3:
        assert await s3.upload_file(str(small), S3Url(bucket, "out/small.txt"), BIG) == 6
        assert await s3.upload_file(str(large), S3Url(bucket, "out/model.bin"), BIG) == 11 * MiB
        await s3.upload_bytes(b"a/b.jpg 1\n", S3Url(bucket, "out/dataIndex.txt"))

    assert await body_of(admin, bucket, "out/small.txt") == b"hello\n"
    assert await body_of(admin, bucket, "out/model.bin") == large.read_bytes()
    assert await body_of(admin, bucket, "out/dataIndex.txt") == b"a/b.jpg 1\n"
    uploads = await admin.list_multipart_uploads(Bucket=bucket)
    assert not uploads.get("Uploads")  # the multipart upload was completed, none left open


async def test_directory_uploaded_file_by_file(s3: S3Client, admin, bucket, tmp_path):
    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"graph")
    (model / "variables" / "variables.index").write_bytes(b"index")
    (model / "variables" / "variables.data-00000-of-00001").write_bytes(b"weights")
    os.mkfifo(model / "pipe")  # not a regular file: not uploaded (and never opened)

    written = await s3.upload_dir(str(model), S3Url(bucket, "models/v1"), BIG)

    keys = ["models/v1/saved_model.pb", "models/v1/variables/variables.data-00000-of-00001",
            "models/v1/variables/variables.index"]
    assert written == [S3Url(bucket, k) for k in keys]
    listed = await admin.list_objects_v2(Bucket=bucket, Prefix="models/")
    assert sorted(o["Key"] for o in listed["Contents"]) == keys
    assert await body_of(admin, bucket, "models/v1/variables/variables.index") == b"index"


async def test_upload_of_a_file_over_its_cap_is_refused(s3: S3Client, admin, bucket, tmp_path):
    path = tmp_path / "big.bin"
    path.write_bytes(b"x" * 1000)
    with pytest.raises(files.FileTooLarge, match="1000 bytes, over the limit of 999"):
        await s3.upload_file(str(path), S3Url(bucket, "big.bin"), Caps(999))
    listed = await admin.list_objects_v2(Bucket=bucket)
    assert not listed.get("Contents")


# ---- server-side copy ---------------------------------------------------------------------


async def test_server_side_copy(s3: S3Client, admin, bucket):
    await admin.put_object(Bucket=bucket, Key="src/model.bin", Body=b"weights" * 100)
    size = await s3.copy(S3Url(bucket, "src/model.bin"), S3Url(bucket, "dst/model.bin"), BIG)
    assert size == 700
    assert await body_of(admin, bucket, "dst/model.bin") == b"weights" * 100


async def test_large_server_side_copy_goes_part_by_part(credential, admin, bucket):
    data = secrets.token_bytes(11 * MiB)
    await admin.put_object(Bucket=bucket, Key="src/big.bin", Body=data)
    settings = dataclasses.replace(FAST, part_bytes=5 * MiB, single_copy_bytes=MiB, request_timeout=30)
    async with S3Client(credential, settings=settings) as s3:
        assert await s3.copy(S3Url(bucket, "src/big.bin"), S3Url(bucket, "dst/big.bin"), BIG) == len(data)
    assert await body_of(admin, bucket, "dst/big.bin") == data


async def test_copy_of_an_object_over_its_cap_is_refused(s3: S3Client, admin, bucket):
    await admin.put_object(Bucket=bucket, Key="src/big.bin", Body=b"x" * 2000)
    with pytest.raises(StorageTooLarge, match="is 2000 bytes, over the limit of 1000 bytes"):
        await s3.copy(S3Url(bucket, "src/big.bin"), S3Url(bucket, "dst/big.bin"), Caps(1000), what="model")
    listed = await admin.list_objects_v2(Bucket=bucket, Prefix="dst/")
    assert not listed.get("Contents")


# ---- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize("wrong", [
    pytest.param({"SECRET_ACCESS_KEY": "not-the-secret-0123456789"}, id="wrong-secret"),
    pytest.param({"ACCESS_KEY_ID": "NOSUCHKEY"}, id="unknown-access-key"),
])
async def test_wrong_credentials_are_refused_at_once(s3_server, admin, bucket, wrong, caplog):
    await admin.put_object(Bucket=bucket, Key="x.txt", Body=b"x")
    credential = S3Credential.from_map({**s3_server.credential_map(), **wrong})

    async with S3Client(credential, settings=FAST) as s3:
        for attempt in (s3.read(S3Url(bucket, "x.txt"), BIG),
                        s3.upload_bytes(b"y", S3Url(bucket, "y.txt"))):
            with pytest.raises(StorageDenied) as caught:
                await attempt
            error = caught.value
            assert error.attempts == 1 and error.reason == "AccessDenied"
            assert f"s3://{bucket}/" in str(error) and "403" in str(error)
            assert "SECRET_ACCESS_KEY" in str(error)  # the message says what to check ...
            assert credential.secret_key not in str(error)  # ... never its value
            assert s3_server.secret_key not in str(error)
    assert not retries(caplog)
    assert all(credential.secret_key not in r.getMessage() for r in caplog.records)


async def test_missing_bucket_and_key_are_not_found_at_once(s3: S3Client, bucket, tmp_path, caplog):
    cases = [s3.read(S3Url("no-such-bucket-here", "x.txt"), BIG),
             s3.read(S3Url(bucket, "no/such/key.txt"), BIG),
             s3.download(S3Url(bucket, "missing.txt"), str(tmp_path / "m.txt"), BIG),
             s3.upload_bytes(b"x", S3Url("no-such-bucket-here", "x.txt")),
             s3.copy(S3Url(bucket, "missing.txt"), S3Url(bucket, "copy.txt"), BIG)]
    for case in cases:
        with pytest.raises(StorageNotFound) as caught:
            await case
        assert caught.value.attempts == 1 and caught.value.reason == "NotFound"
    assert not retries(caplog)
    assert os.listdir(tmp_path) == []


async def test_refused_endpoint_fails_after_bounded_attempts(s3_server, caplog):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    credential = S3Credential.from_map({**s3_server.credential_map(), "s3-endpoint": f"127.0.0.1:{port}"})
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with S3Client(credential, settings=FAST) as s3:
        with pytest.raises(StorageUnavailable) as caught:
            await s3.read(S3Url("bucket", "x.txt"), BIG)
    assert caught.value.attempts == FAST.attempts
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert len(retries(caplog)) == FAST.attempts - 1
    assert loop.time() - started < FAST.attempts * FAST.backoff_max + 2


async def test_silent_endpoint_times_out_after_bounded_attempts(s3_server, caplog):
    quick = dataclasses.replace(FAST, read_timeout=0.5)  # each attempt waits it out
    async with TcpProxy(None) as silent:  # accepts, never answers
        credential = S3Credential.from_map({**s3_server.credential_map(), "s3-endpoint": silent.endpoint})
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with S3Client(credential, settings=quick) as s3:
            with pytest.raises(StorageUnavailable, match="timed out") as caught:
                await s3.read(S3Url("bucket", "x.txt"), BIG)
        took = loop.time() - started
    assert caught.value.attempts == quick.attempts == silent.connections
    assert len(retries(caplog)) == quick.attempts - 1
    # each attempt waits out the read timeout (0.5 s), never the request deadline (5 s)
    assert quick.attempts * quick.read_timeout <= took < quick.attempts * (quick.read_timeout + quick.backoff_max) + 2


async def test_throttled_requests_are_retried_until_they_pass(s3_server, credential, admin, bucket,
                                                             tmp_path, caplog):
    data = index_lines(1000)
    await admin.put_object(Bucket=bucket, Key="ds/index.txt", Body=data)
    async with TcpProxy(("127.0.0.1", s3_server.port), answer_first=2) as proxy:
        via_proxy = dataclasses.replace(credential, endpoint=proxy.endpoint)
        async with S3Client(via_proxy, settings=FAST) as s3:
            assert await s3.read(S3Url(bucket, "ds/index.txt"), BIG) == data
            await s3.upload_bytes(b"ok", S3Url(bucket, "out.txt"))  # a fresh budget per request
    assert proxy.connections == 3
    assert [r.error.split(": ", 1)[1] for r in retries(caplog)] == [
        "the server answered 503 SlowDown: Please reduce your request rate."] * 2
    assert await body_of(admin, bucket, "out.txt") == b"ok"


async def test_cancelled_download_leaves_nothing(s3_server, credential, tmp_path):
    async with TcpProxy(None) as silent:
        via_silent = dataclasses.replace(credential, endpoint=silent.endpoint)
        async with S3Client(via_silent, settings=FAST) as s3:
            task = asyncio.create_task(s3.download(S3Url("bucket", "x.txt"), str(tmp_path / "x.txt"), BIG))
            await eventually(lambda: silent.connections == 1, "the download's request")
            assert os.listdir(tmp_path) == [".x.txt.tmp"]  # written beside the target, then renamed
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert os.listdir(tmp_path) == []


async def test_huge_object_is_refused_by_its_size_unread(s3_server, credential, admin, bucket, tmp_path):
    size = 32 * MiB
    await admin.put_object(Bucket=bucket, Key="huge.txt", Body=b"\n" * size)
    cap = Caps(MiB)
    async with TcpProxy(("127.0.0.1", s3_server.port)) as proxy:
        via_proxy = dataclasses.replace(credential, endpoint=proxy.endpoint)
        async with S3Client(via_proxy, settings=dataclasses.replace(FAST, part_bytes=8 * MiB)) as s3:
            with pytest.raises(StorageTooLarge) as caught:
                await s3.download(S3Url(bucket, "huge.txt"), str(tmp_path / "huge.txt"), cap,
                                  what="index file")
    assert str(caught.value) == (f"index file s3://{bucket}/huge.txt is {size} bytes, over the "
                                 f"limit of {MiB} bytes")
    assert caught.value.attempts == 1
    # the request asked for the cap and one byte at most, and the body was left unread
    assert proxy.connections == 1 and proxy.bytes_down <= MiB + 1 + 4096
    assert os.listdir(tmp_path) == []


async def test_object_growing_past_the_cap_while_read_is_refused(s3: S3Client, admin, bucket):
    part = FAST.part_bytes
    await admin.put_object(Bucket=bucket, Key="grow.txt", Body=b"a" * (4 * part))
    url = S3Url(bucket, "grow.txt")
    cap = Caps(6 * part)
    got = []
    with pytest.raises(StorageTooLarge, match=f"grew over the limit of {cap.bytes} bytes while read"):
        async for chunk in s3.stream(url, cap):
            got.append(chunk)
            if len(got) == 1:  # replaced by a larger object between two parts
                await admin.put_object(Bucket=bucket, Key="grow.txt", Body=b"b" * (16 * part))
    assert got == [b"a" * part]


async def test_object_replaced_while_read_is_read_again(s3: S3Client, admin, bucket):
    part = FAST.part_bytes
    await admin.put_object(Bucket=bucket, Key="swap.txt", Body=b"a" * (3 * part))
    url = S3Url(bucket, "swap.txt")
    with pytest.raises(StorageChanged):
        async for _chunk in s3.stream(url, BIG):
            await admin.put_object(Bucket=bucket, Key="swap.txt", Body=b"b" * (2 * part))
    # a whole read starts again from the first part and gets the new object only
    assert await s3.read(url, BIG) == b"b" * (2 * part)


async def test_errors_are_the_lc_error_tree(s3: S3Client):
    with pytest.raises(StorageError):
        await s3.read(S3Url("no-such-bucket-here", "x"), BIG)
