"""LC managers: dataset counting and monitoring, path safety, models, snapshots, resume."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from lc import dispatch
from lc.errors import DatasetError, PathEscapeError, ReportError, ResourceError
from lc.managers.base import Outgoing
from lc.managers.dataset import count_samples, scan
from lc.managers.forward import ReportForwarder
from lc.managers.jointinference import JointInferenceManager
from lc.managers.model import ModelInfo, model_info
from lc.report import WorkerReport
from lc.rootfs import host_to_local, local_to_host
from tests.conftest import eventually
from tests.unit.test_lc_support import running_lc


def _write(path: Path, text: str) -> None:
    """Replace a file atomically, as a monitor may be reading it at any moment."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _dataset(name: str, url: str, fmt: str = "txt") -> dict:
    return {"kind": "Dataset", "metadata": {"name": name, "namespace": "default"},
            "spec": {"url": url, "format": fmt, "nodeName": "edge-1"}}


@pytest.mark.parametrize(("content", "fmt", "count"), [
    pytest.param(b"", "txt", 0, id="txt-empty"),
    pytest.param(b"a.jpg 1\nb.jpg 0\n", "txt", 2, id="txt-final-newline"),
    pytest.param(b"a.jpg 1\nb.jpg 0", "txt", 2, id="txt-no-final-newline"),
    pytest.param(b"a\n\nb\n", "txt", 3, id="txt-empty-line-counts"),
    pytest.param(b"a\r\nb\r\n", "txt", 2, id="txt-crlf"),
    pytest.param(b"x" * 200_000 + b"\nshort\n", "txt", 2, id="txt-line-over-64KiB"),
    pytest.param(b"path,label\na.jpg,1\nb.jpg,0\n", "csv", 2, id="csv-header"),
    pytest.param(b"path,label\n", "csv", 0, id="csv-header-only"),
    pytest.param(b"a\nb\n", "TXT", 2, id="format-case-insensitive"),
])
def test_count_samples(tmp_path: Path, content: bytes, fmt: str, count: int) -> None:
    index = tmp_path / "index"
    index.write_bytes(content)
    assert count_samples(str(index), fmt) == count


@pytest.mark.parametrize(("content", "fmt", "message"), [
    pytest.param(b"", "csv", "csv index file {path} is empty: it needs a header line", id="csv-empty"),
    pytest.param(b"a\n", "json", "dataset format 'json' is not supported (txt or csv)", id="format"),
    pytest.param(None, "txt", "index file {path} does not exist", id="missing"),
])
def test_count_errors(tmp_path: Path, content: bytes | None, fmt: str, message: str) -> None:
    index = tmp_path / "index"
    if content is not None:
        index.write_bytes(content)
    with pytest.raises(DatasetError) as info:
        count_samples(str(index), fmt)
    assert str(info.value) == message.format(path=index)


@pytest.mark.parametrize(("url", "message"), [
    pytest.param("s3://Bucket/index.txt", "'s3://Bucket/index.txt': bucket name 'Bucket' is not "
                 "valid (3-63 lowercase letters, digits, dots or hyphens)", id="bad-s3-url"),
    pytest.param("http://host/index.txt", "dataset URL scheme 'http' is not supported (local path "
                 "or s3)", id="http"),
    pytest.param("", "spec.url must be a non-empty string", id="empty"),
])
def test_dataset_url_errors(tmp_path: Path, url: str, message: str) -> None:
    with pytest.raises(DatasetError) as info:
        scan(_dataset("d", url), str(tmp_path))
    assert str(info.value) == message


def test_paths_resolve_under_rootfs(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "data" / "real").mkdir(parents=True)
    (root / "data" / "real" / "index.txt").write_text("a\n")
    os.symlink("/data/real", root / "data" / "abs-link")  # a host-absolute link
    os.symlink("real/index.txt", root / "data" / "rel-link")
    r = str(root)
    assert host_to_local(r, "/data/real/index.txt") == f"{r}/data/real/index.txt"
    assert host_to_local(r, "/data/../data/real/./index.txt") == f"{r}/data/real/index.txt"
    assert host_to_local(r, "/data/abs-link/index.txt") == f"{r}/data/real/index.txt"
    assert host_to_local(r, "/data/rel-link") == f"{r}/data/real/index.txt"
    assert host_to_local("", "/data/x/../y") == "/data/y"
    assert local_to_host(r, f"{r}/data/y") == "/data/y"
    assert local_to_host(r, "/elsewhere") == "/elsewhere"


@pytest.mark.parametrize("url", [
    pytest.param("/../etc/passwd", id="dotdot"),
    pytest.param("/data/../../etc/passwd", id="dotdot-deeper"),
    pytest.param("/data/out/passwd", id="relative-symlink-out"),
])
def test_paths_escaping_rootfs_are_refused(tmp_path: Path, url: str) -> None:
    root = tmp_path / "rootfs"
    (root / "data").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("secret\n")
    os.symlink("../../etc", root / "data" / "out")
    with pytest.raises(PathEscapeError) as info:
        host_to_local(str(root), url)
    assert str(info.value) == f"path {url!r} escapes {root}"


async def test_monitor_reports_counts_only_when_they_change(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        index = tmp_path / "rootfs" / "data" / "index.txt"
        index.parent.mkdir(parents=True)
        index.write_text("a\nb\nc\n")
        await lc.apply_upsert("dataset", "default", "ds", _dataset("ds", "/data/index.txt"))
        assert await lc.store.wait_outbox(0, within=5)
        monitor = lc.dispatcher.manager("Dataset").monitor("default", "ds")
        await monitor.scan_once()  # unchanged: nothing new
        entries = await lc.store.pending()
        assert [(e.kind, e.namespace, e.name, e.body) for e in entries] == [
            ("Dataset", "default", "ds", {"numberOfSamples": 3})]
        _write(index, "a\nb\nc\nd\n")
        await monitor.scan_once()
        assert [e.body for e in await lc.store.pending()] == [
            {"numberOfSamples": 3}, {"numberOfSamples": 4}]


async def test_monitor_period_and_spec_change(tmp_path: Path) -> None:
    async with running_lc(tmp_path, LC_DATASET_PERIOD="0.05") as (lc, _):
        data = tmp_path / "rootfs" / "data"
        data.mkdir(parents=True)
        (data / "a.txt").write_text("1\n")
        (data / "b.csv").write_text("h\n1\n2\n3\n")
        await lc.apply_upsert("Dataset", "default", "ds", _dataset("ds", "/data/a.txt"))
        assert await lc.store.wait_outbox(0, within=5)
        _write(data / "a.txt", "1\n2\n")  # picked up by the periodic re-count
        assert await lc.store.wait_outbox(1, within=5)
        await lc.apply_upsert("Dataset", "default", "ds", _dataset("ds", "/data/b.csv", "csv"))
        assert await lc.store.wait_outbox(2, within=5)
        assert [e.body["numberOfSamples"] for e in await lc.store.pending()] == [1, 2, 3]


async def test_monitor_refuses_escaping_path(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="lc.managers.dataset")
    (tmp_path / "secret.txt").write_text("x\ny\n")
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("Dataset", "default", "ds", _dataset("ds", "/../secret.txt"))
        monitor = lc.dispatcher.manager("Dataset").monitor("default", "ds")
        await monitor.scan_once()
        assert await lc.store.pending() == []
    errors = [r for r in caplog.records if r.getMessage() == "dataset scan failed"]
    assert errors and errors[0].error == f"path '/../secret.txt' escapes {tmp_path / 'rootfs'}"
    assert errors[0].key == "default/ds"
    assert [r.levelno for r in errors] == [logging.WARNING]  # user data, reported once


def _with_uid(obj: dict, uid: str) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "uid": uid}}


async def _counts(lc) -> list[int]:
    return [e.body["numberOfSamples"] for e in await lc.store.pending()]


async def test_recreated_dataset_gets_its_count_again_after_a_restart(tmp_path: Path) -> None:
    index = tmp_path / "rootfs" / "index.txt"
    index.parent.mkdir(parents=True)
    index.write_text("a\nb\n")
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("Dataset", "default", "ds", _with_uid(_dataset("ds", "/index.txt"), "u1"))
        assert await lc.store.wait_outbox(0, within=5)
        await lc.store.ack(lc.store.last_seq)  # the GM took the count
    async with running_lc(tmp_path) as (lc, _):  # same object: nothing to report
        await lc.apply_upsert("Dataset", "default", "ds", _with_uid(_dataset("ds", "/index.txt"), "u1"))
        await lc.dispatcher.manager("Dataset").monitor("default", "ds").scan_once()
        assert await _counts(lc) == []
    async with running_lc(tmp_path) as (lc, _):  # deleted and recreated while the LC was away
        await lc.apply_upsert("Dataset", "default", "ds", _with_uid(_dataset("ds", "/index.txt"), "u2"))
        await eventually(lambda: _counts_are(lc, [2]), message="count for the new object")


async def test_dataset_replaced_in_place_is_counted_again(tmp_path: Path) -> None:
    index = tmp_path / "rootfs" / "index.txt"
    index.parent.mkdir(parents=True)
    index.write_text("a\n")
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("Dataset", "default", "ds", _with_uid(_dataset("ds", "/index.txt"), "u1"))
        await eventually(lambda: _counts_are(lc, [1]), message="first count")
        await lc.apply_upsert("Dataset", "default", "ds", _with_uid(_dataset("ds", "/index.txt"), "u2"))
        await eventually(lambda: _counts_are(lc, [1, 1]), message="count for the new object")
        # the state is written right after the report, in its own transaction
        await eventually(lambda: _state_is(lc, {"reported": 1, "uid": "u2"}), message="state")


async def _state_is(lc, expected: dict) -> bool:
    return await lc.store.get_state("Dataset", "default", "ds") == expected


async def _counts_are(lc, expected: list[int]) -> bool:
    return await _counts(lc) == expected


async def test_restart_resumes_without_the_gm(tmp_path: Path) -> None:
    index = tmp_path / "rootfs" / "index.txt"
    index.parent.mkdir(parents=True)
    index.write_text("a\n")
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("Dataset", "default", "ds", _dataset("ds", "/index.txt"))
        await lc.apply_upsert("Model", "default", "m", {"spec": {"url": "/m.pb", "format": "pb"}})
        assert await lc.store.wait_outbox(0, within=5)
    async with running_lc(tmp_path) as (lc, _):
        model = lc.dispatcher.manager("Model").get("default", "m")
        assert model == ModelInfo("pb", "/m.pb", ())
        monitor = lc.dispatcher.manager("Dataset").monitor("default", "ds")
        assert monitor is not None and monitor.reported == 1
        _write(index, "a\nb\n")
        await monitor.scan_once()
        assert [e.body for e in await lc.store.pending()] == [
            {"numberOfSamples": 1}, {"numberOfSamples": 2}]


async def test_snapshot_replaces_node_objects(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("Dataset", "default", "old", _dataset("old", "/none.txt"))
        await lc.apply_upsert("Model", "default", "m1", {"spec": {"url": "/a", "format": "pb"}})
        await lc.apply_snapshot([("model", "default", "m2", {"spec": {"url": "/b", "format": "pb"}})])
        assert [r[:3] for r in await lc.store.list_resources()] == [("Model", "default", "m2")]
        assert lc.dispatcher.manager("Dataset").monitor("default", "old") is None
        assert lc.dispatcher.manager("Model").get("default", "m1") is None
        with pytest.raises(ResourceError, match="kind 'Pod' is not handled by this LC"):
            await lc.apply_upsert("Pod", "default", "p", {})
        with pytest.raises(ResourceError, match="Model object needs a namespace and a name"):
            await lc.apply_upsert("Model", "", "m", {})


async def test_known_job_routes_default_owner_kind_at_once(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("FederatedLearningJob", "default", "fl", {"spec": {}})
        route = await lc.dispatcher.handle_report(WorkerReport(
            name="w", namespace="default", owner_name="fl", owner_kind="default", kind="train",
            status="completed", owner_info={"currentRound": 1}))
        assert route == ("forwarded", "FederatedLearningJob")
        [entry] = await lc.store.pending()
        assert (entry.kind, entry.name, entry.body["status"]) == ("FederatedLearningJob", "fl",
                                                                 "completed")


@pytest.mark.parametrize(("spec", "result"), [
    pytest.param({"url": "/m.pb", "format": "pb", "device_soc_versions": ["Ascend310"]},
                 ModelInfo("pb", "/m.pb", ("Ascend310",)), id="ok"),
    pytest.param({"format": "pb"}, "spec.url must be a non-empty string", id="no-url"),
    pytest.param({"url": "/m", "device_soc_versions": "x"},
                 "spec.device_soc_versions must be a list of strings", id="devices"),
])
def test_model_info(spec: dict, result: ModelInfo | str) -> None:
    if isinstance(result, ModelInfo):
        assert model_info({"spec": spec}) == result
    else:
        with pytest.raises(ValueError, match=result):
            model_info({"spec": spec})


# ---- the door's checks of a report's entries ---------------------------------------------

def _deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"x": value}
    return value


class _WithStage(ReportForwarder):
    """A forwarder that adds an entry of its own, as the learning managers do."""

    def __init__(self, extra: dict) -> None:
        super().__init__("FederatedLearningJob")
        self.extra = extra

    def report_entries(self, report: WorkerReport, *, namespace: str,
                       name: str) -> list[Outgoing]:
        return [*super().report_entries(report, namespace=namespace, name=name),
                Outgoing(self.kind, namespace, name, self.extra)]


def _walks(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    walked: list[object] = []
    real = dispatch.check_json_like

    def counting(value: object, path: str) -> None:
        walked.append(value)
        real(value, path)

    monkeypatch.setattr(dispatch, "check_json_like", counting)
    return walked


REPORT = WorkerReport(name="w", namespace="default", owner_name="ji",
                      owner_kind="jointinferenceservice", kind="inference",
                      owner_info={"inferenceNumber": 3}, results=[])


@pytest.mark.parametrize("manager", [
    pytest.param(JointInferenceManager(), id="models-null"),
    pytest.param(ReportForwarder("FederatedLearningJob"), id="models"),
])
def test_a_forwarded_status_body_is_walked_once_at_the_door(
        monkeypatch: pytest.MonkeyPatch, manager: ReportForwarder) -> None:
    walked = _walks(monkeypatch)
    dispatch.check_relayable(REPORT)
    [entry] = dispatch._checked_entries(manager, REPORT, namespace="default", name="ji",
                                        door_checked=True)
    assert entry.body["output"]["ownerInfo"] is REPORT.owner_info
    assert len(walked) == 1  # check_relayable's walk, not the entry's again
    dispatch._checked_entries(manager, REPORT, namespace="default", name="ji")
    assert len(walked) == 2  # a report not checked at the door (a waiting one) is walked


def test_an_entry_that_is_not_the_status_body_is_still_walked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    walked = _walks(monkeypatch)
    dispatch.check_relayable(REPORT)
    with pytest.raises(ReportError, match="nested deeper than 100 levels"):
        dispatch._checked_entries(_WithStage({"data": _deep(101)}), REPORT,
                                  namespace="default", name="ji", door_checked=True)
    copy = {"phase": "inference", "status": "", "output": {
        "models": None, "ownerInfo": {"inferenceNumber": 3}}}  # equal, not the report's own
    dispatch._checked_entries(_WithStage(copy), REPORT, namespace="default", name="ji",
                              door_checked=True)
    assert copy in walked
