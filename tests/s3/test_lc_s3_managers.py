"""The LC's managers on S3, against a real S3 server (SeaweedFS, devcluster/s3server.py).

A running LC (SQLite store, no GM) is given the objects the GM sends, with the credential
annotation the GM builds from a Secret, and what it does is read back from its outbox (the
reports the GM is sent) and from the bucket: a Dataset's index counted and recounted; every
S3 failure (wrong key, missing bucket, endpoint down, an index over the cap, no credential
at all) reported once on the Dataset with its reason, never a crash nor a retry storm; an
IL job's sample files and `dataIndex.txt` written to an s3 outputDir; the IL deploy's copy
of the trained model over an s3 deploy Model, server-side or uploaded or downloaded.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from devcluster.s3server import S3Endpoint
from lc.s3 import S3Clients, S3Credential
from tests.conftest import eventually
from tests.learningjobs import IL, LINES, NS, _cond, _il_job, _node_objects, _obj
from tests.tcpproxy import TcpProxy
from tests.unit.test_lc_support import running_lc

MiB = 1 << 20
RETRIED = "s3 request retried"
FAST = {"LC_S3_CONNECT_TIMEOUT": "2", "LC_S3_READ_TIMEOUT": "2", "LC_S3_REQUEST_TIMEOUT": "5",
        "LC_S3_ATTEMPTS": "2", "LC_DATASET_PERIOD": "0.2"}


def annotation(server: S3Endpoint, **override: str) -> dict[str, str]:
    """The `sedna.io/credential` annotation the GM sends for a Secret of `server`."""
    return {"sedna.io/credential": json.dumps({**server.credential_map(), **override}, sort_keys=True)}


def s3_dataset(url: str, notes: dict[str, str] | None, *, name: str = "ds", fmt: str = "txt",
               uid: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid or f"uid-{name}"}
    if notes is not None:
        meta["annotations"] = notes
    return _obj("Dataset", name, {"url": url, "format": fmt, "nodeName": "edge-1"}, **meta)


def index(n: int) -> bytes:
    return "".join(f"{line}\n" for line in (LINES * (n // len(LINES) + 1))[:n]).encode()


async def body_of(admin, bucket: str, key: str) -> bytes:
    response = await admin.get_object(Bucket=bucket, Key=key)
    async with response["Body"] as body:
        return await body.read()


async def dataset_reports(lc) -> list[dict[str, Any]]:
    return [e.body for e in await lc.store.pending() if e.kind == "Dataset"]


async def reported(lc, count: int) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        bodies = await dataset_reports(lc)
        assert len(bodies) <= count, bodies
        return bodies if len(bodies) == count else None
    return await eventually(enough, f"{count} Dataset reports", within=15)


def no_secret(caplog, secret: str, bodies: list[Any]) -> bool:
    """Neither a log line (message and fields) nor a report quotes `secret`."""
    return all(secret not in str(r.__dict__) for r in caplog.records) and secret not in json.dumps(bodies)


# ---- Datasets -----------------------------------------------------------------------------


async def test_an_s3_dataset_is_counted_and_recounted(s3_server, admin, bucket, tmp_path):
    await admin.put_object(Bucket=bucket, Key="ds/index.txt", Body=index(7))
    url = f"s3://{bucket}/ds/index.txt"
    async with running_lc(tmp_path, **FAST) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(url, annotation(s3_server)))
        assert await reported(lc, 1) == [{"numberOfSamples": 7}]
        await admin.put_object(Bucket=bucket, Key="ds/index.txt", Body=index(12))  # counted each period
        assert (await reported(lc, 2))[-1] == {"numberOfSamples": 12}
        await admin.put_object(Bucket=bucket, Key="ds/other.csv", Body=b"path,label\n" + index(3))
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(f"s3://{bucket}/ds/other.csv",
                                                              annotation(s3_server), fmt="csv"))
        assert (await reported(lc, 3))[-1] == {"numberOfSamples": 3}
        monitor = lc.dispatcher.manager("Dataset").monitor(NS, "ds")
        clients = monitor._s3
        assert len(clients) == 1  # one client while the credential stays the same
        await lc.apply_delete("Dataset", NS, "ds")
        assert len(clients) == 0  # closed with the Dataset


async def test_a_rotated_credential_replaces_the_client_at_once(s3_server, admin, bucket, tmp_path):
    await admin.put_object(Bucket=bucket, Key="i.txt", Body=index(4))
    url = f"s3://{bucket}/i.txt"
    async with running_lc(tmp_path, **{**FAST, "LC_DATASET_PERIOD": "3600"}) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(url, annotation(s3_server, **{
            "SECRET_ACCESS_KEY": "wrong-secret"})))
        [denied] = await reported(lc, 1)
        assert denied["error"]["reason"] == "AccessDenied"
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(url, annotation(s3_server)))
        assert (await reported(lc, 2))[-1] == {"numberOfSamples": 4}  # the problem cleared
        assert len(lc.dispatcher.manager("Dataset").monitor(NS, "ds")._s3) == 1


async def test_wrong_credentials_are_reported_once_without_retries(s3_server, admin, bucket, tmp_path,
                                                                   caplog):
    await admin.put_object(Bucket=bucket, Key="i.txt", Body=index(4))
    caplog.set_level(logging.INFO)
    async with running_lc(tmp_path, **FAST) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(f"s3://{bucket}/i.txt", annotation(
            s3_server, SECRET_ACCESS_KEY="not-the-secret-0123456789")))
        monitor = lc.dispatcher.manager("Dataset").monitor(NS, "ds")
        await eventually(lambda: monitor.scans >= 5, "five scans", within=15)
        bodies = await dataset_reports(lc)
    assert len(bodies) == 1, bodies  # one report, not one per scan
    assert bodies[0]["numberOfSamples"] == 0
    assert bodies[0]["error"]["reason"] == "AccessDenied"
    assert f"s3://{bucket}/i.txt at {s3_server.endpoint}" in bodies[0]["error"]["message"]
    assert not [r for r in caplog.records if r.getMessage() == RETRIED]  # one request per scan
    assert no_secret(caplog, "not-the-secret-0123456789", bodies)


@pytest.mark.parametrize(("case", "reason", "message"), [
    pytest.param("no-bucket", "NotFound", "s3://no-such-bucket-here/i.txt at", id="missing-bucket"),
    pytest.param("no-credential", "CredentialMissing",
                 "carries no sedna.io/credential annotation: set its spec.credentialName", id="no-credential"),
    pytest.param("refused", "StorageUnavailable", "(gave up after 2 attempts)", id="endpoint-unreachable"),
    pytest.param("bad-credential", "InvalidStorage", "s3-endpoint 'http://x' must be host[:port]",
                 id="malformed-credential"),
])
async def test_s3_dataset_problems_are_reported_on_the_dataset(s3_server, bucket, tmp_path, caplog,
                                                              case, reason, message):
    url, notes = f"s3://{bucket}/i.txt", annotation(s3_server)
    if case == "no-bucket":
        url = "s3://no-such-bucket-here/i.txt"
    elif case == "no-credential":
        notes = None
    elif case == "bad-credential":
        notes = annotation(s3_server, **{"s3-endpoint": "http://x"})
    elif case == "refused":
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            notes = annotation(s3_server, **{"s3-endpoint": f"127.0.0.1:{s.getsockname()[1]}"})
    async with running_lc(tmp_path, **FAST) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(url, notes))
        [body] = await reported(lc, 1)
        monitor = lc.dispatcher.manager("Dataset").monitor(NS, "ds")
        scans = monitor.scans
        await eventually(lambda: monitor.scans >= scans + 2, "two more scans", within=20)
        assert len(await dataset_reports(lc)) == 1  # the same problem is not reported again
    assert body["numberOfSamples"] == 0 and body["error"]["reason"] == reason
    assert message in body["error"]["message"]
    assert no_secret(caplog, s3_server.secret_key, [body])


async def test_an_index_over_the_cap_is_refused_by_its_size(s3_server, admin, bucket, tmp_path):
    huge = index(60_000)  # 900 KB
    await admin.put_object(Bucket=bucket, Key="huge.txt", Body=huge)
    async with TcpProxy((s3_server.host, s3_server.port)) as proxy, \
            running_lc(tmp_path, LC_INDEX_MAX_BYTES="4096", **FAST) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(
            f"s3://{bucket}/huge.txt", annotation(s3_server, **{"s3-endpoint": proxy.endpoint})))
        [body] = await reported(lc, 1)
    assert body["error"]["reason"] == "TooLarge"
    assert body["error"]["message"] == (f"index file s3://{bucket}/huge.txt is {len(huge)} bytes, "
                                        "over the limit of 4096 bytes")
    assert proxy.bytes_down < 64 * 1024  # never the body beyond the cap


async def test_an_index_over_the_line_cap_is_refused(s3_server, admin, bucket, tmp_path):
    await admin.put_object(Bucket=bucket, Key="long.txt", Body=index(30))
    async with running_lc(tmp_path, LC_INDEX_MAX_LINES="20", **FAST) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(f"s3://{bucket}/long.txt",
                                                              annotation(s3_server)))
        [body] = await reported(lc, 1)
    assert body["error"] == {"reason": "TooManyLines",
                             "message": f"index file s3://{bucket}/long.txt has more than 20 lines"}


# ---- incremental learning -----------------------------------------------------------------


def s3_job(conditions: list[dict], server: S3Endpoint, out: str, **job: Any) -> dict[str, Any]:
    obj = _il_job(conditions, **job)
    obj["spec"]["outputDir"] = out
    obj["metadata"]["annotations"] = annotation(server)
    return obj


async def job_bodies(lc, count: int) -> list[Any]:
    async def enough() -> list[Any] | None:
        bodies = [e.body for e in await lc.store.pending() if e.kind == IL]
        assert len(bodies) <= count, bodies
        return bodies if len(bodies) == count else None
    return await eventually(enough, f"{count} job reports", within=15)


async def test_il_samples_and_their_index_go_to_an_s3_output_dir(s3_server, admin, bucket, tmp_path):
    await admin.put_object(Bucket=bucket, Key="ds/index.txt", Body=index(10))
    out = f"s3://{bucket}/il-out/"
    async with running_lc(tmp_path, **FAST) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(f"s3://{bucket}/ds/index.txt",
                                                              annotation(s3_server)))
        await _node_objects(lc, tmp_path / "rootfs")  # the Models (and a local index, replaced)
        await lc.apply_upsert("Dataset", NS, "ds", s3_dataset(f"s3://{bucket}/ds/index.txt",
                                                              annotation(s3_server)))
        await lc.apply_upsert(IL, NS, "il", s3_job([_cond("Train", "Waiting", 0)], s3_server, out))
        [body] = await job_bodies(lc, 1)
        job = lc.dispatcher.manager(IL).job(NS, "il")
        clients = job._s3
        await lc.apply_delete(IL, NS, "il")
        assert len(clients) == 0
    assert body["input"] == {
        "models": [{"format": "pb", "url": "/models/base/model.pb", "classes": None}],
        "dataURL": f"s3://{bucket}/il-out/data/train/1/data.txt",
        "dataIndexURL": f"s3://{bucket}/il-out/data/train/1/dataIndex.txt",
        "outputDir": f"s3://{bucket}/il-out/train/1"}
    data = await body_of(admin, bucket, "il-out/data/train/1/data.txt")
    assert data.decode().splitlines() == LINES[:8]
    listed = (await body_of(admin, bucket, "il-out/data/train/1/dataIndex.txt")).decode().splitlines()
    assert listed == [f"s3://{bucket}/ds/"] + [line.split(" ")[0] for line in LINES[:8]]


EVALUATED = {"precision": [0.7, 0.6], "recall": [0.5, 0.5]}, {"precision": [0.6, 0.6], "recall": [0.6, 0.5]}


def deploy_conditions(trained_url: str, deploy_url: str) -> list[dict]:
    trained = [{"format": "pb", "url": trained_url, "metrics": {"loss": 0.8}}]
    evaluated = [{"format": "pb", "url": trained_url, "metrics": EVALUATED[0]},
                 {"format": "pb", "url": deploy_url, "metrics": EVALUATED[1]}]
    return [_cond("Train", "Waiting", 0), _cond("Train", "Completed", 2, trained),
            _cond("Eval", "Waiting", 3), _cond("Eval", "Completed", 4, evaluated),
            _cond("Deploy", "Waiting", 5)]


@pytest.mark.parametrize(("trained_on", "deployed_on"), [
    pytest.param("s3", "s3", id="server-side-copy"),
    pytest.param("local", "s3", id="upload"),
    pytest.param("s3", "local", id="download"),
])
async def test_il_deploy_copies_the_trained_model_over_the_deploy_model(
        s3_server, admin, bucket, tmp_path, trained_on, deployed_on):
    rootfs = tmp_path / "rootfs"
    model = os.urandom(2 * MiB)
    trained_url = f"s3://{bucket}/out/train/1/model.pb" if trained_on == "s3" else "/output/train/1/model.pb"
    deploy_url = f"s3://{bucket}/models/deploy/model.pb" if deployed_on == "s3" else "/models/deploy/model.pb"
    if trained_on == "s3":
        await admin.put_object(Bucket=bucket, Key="out/train/1/model.pb", Body=model)
    else:
        (rootfs / "output/train/1").mkdir(parents=True)
        (rootfs / "output/train/1/model.pb").write_bytes(model)
    async with TcpProxy((s3_server.host, s3_server.port)) as proxy:
        via_proxy = annotation(s3_server, **{"s3-endpoint": proxy.endpoint})
        async with running_lc(tmp_path, **FAST) as (lc, _):
            await _node_objects(lc, rootfs)
            await lc.apply_upsert("Model", NS, "deployed", _obj("Model", "deployed", {
                "format": "pb", "url": deploy_url}, annotations=via_proxy))
            job = s3_job(deploy_conditions(trained_url, deploy_url), s3_server, f"s3://{bucket}/out")
            job["metadata"]["annotations"] = via_proxy
            await lc.apply_upsert(IL, NS, "il", job)
            [body] = await job_bodies(lc, 1)
    assert (body["status"], body["reason"]) == ("Ready", "DeployTriggerFired"), body
    if deployed_on == "s3":
        assert await body_of(admin, bucket, "models/deploy/model.pb") == model
    else:
        assert (rootfs / "models/deploy/model.pb").read_bytes() == model
    if (trained_on, deployed_on) == ("s3", "s3"):
        assert proxy.bytes_down < 64 * 1024  # copied on the server: the model never came down


async def test_an_il_job_without_a_credential_says_so(s3_server, bucket, tmp_path, caplog):
    async with running_lc(tmp_path, **FAST) as (lc, _):
        await _node_objects(lc, tmp_path / "rootfs")
        job = s3_job([_cond("Train", "Waiting", 0)], s3_server, f"s3://{bucket}/out")
        del job["metadata"]["annotations"]
        await lc.apply_upsert(IL, NS, "il", job)
        await lc.dispatcher.manager(IL).job(NS, "il").tick()
        assert [e for e in await lc.store.pending() if e.kind == IL] == []
    errors = [r.__dict__.get("error", "") for r in caplog.records
              if r.getMessage() == "learning job cannot proceed"]
    assert errors and all("carries no sedna.io/credential annotation" in e for e in errors)


async def test_clients_close_and_scratch_goes(s3_server):
    clients = S3Clients()
    scratch = clients.scratch()
    _touch(Path(scratch) / "partial")
    await clients.get(S3Credential.from_map(s3_server.credential_map()))
    assert len(clients) == 1
    await clients.close()
    assert len(clients) == 0 and not _exists(Path(scratch))


def _touch(path: Path) -> None:
    path.write_bytes(b"a partial download")


def _exists(path: Path) -> bool:
    return path.exists()
