"""The services' metrics registries (shared/metrics.py) and the LC's /metrics page: every family
docs/metrics.md lists is on a fresh LC's page, the page parses, and registries keep apart."""

from __future__ import annotations

import platform
import re
from importlib import metadata
from pathlib import Path

from lc.app import LocalController
from lc.config import load
from lc.link.dialer import link_factory
from lc.link.state import BACKOFF, CONNECTED, LinkInfo, LinkMetrics
from lc.metrics import LCMetrics
from shared.metrics import CONTENT_TYPE, render, sample, service_registry
from tests.scrape import families, labelled, samples, value
from tests.unit.test_lc_managers import _dataset as dataset
from tests.unit.test_lc_support import running_lc, session

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented(prefix: str) -> dict[str, str]:
    """The families docs/metrics.md lists whose names start with `prefix`: name -> type."""
    rows = re.findall(r"^\| `([a-z_]+)` \| (\w+) \|", DOC.read_text(encoding="utf-8"), re.M)
    return {name: kind for name, kind in rows if name.startswith(prefix)}


def test_a_service_registry_has_the_process_platform_and_build_info_families() -> None:
    text = render(service_registry("gm")).decode()
    found = families(text)
    assert {name: found.get(name) for name in documented("process_")} == documented("process_")
    assert found["python_info"] == "gauge"
    assert value(text, "sedna_build_info", service="gm", version=metadata.version("sedna-py"),
                 python=platform.python_version()) == 1


def test_each_lc_has_its_own_registry() -> None:
    one, other = LCMetrics(), LCMetrics()
    one.reports_accepted.labels("forwarded").inc()
    assert sample(one.registry, "sedna_lc_reports_accepted_total", route="forwarded") == 1
    assert sample(other.registry, "sedna_lc_reports_accepted_total", route="forwarded") == 0


async def test_a_fresh_lc_shows_every_documented_family(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    config = load({"ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(tmp_path / "lc.db"),
                   "BIND_PORT": "0", "BIND_ADDRESS": "127.0.0.1", "NODENAME": "edge-1",
                   "GM_ADDRESS": "127.0.0.1:9"})  # nobody there: the link keeps dialing
    lc = LocalController(config, link_factory=link_factory)
    await lc.start()
    try:
        async with session() as http, http.get(f"http://127.0.0.1:{lc.port}/metrics") as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            text = await resp.text()
    finally:
        await lc.stop()
    found = families(text)
    ours = {name: kind for name, kind in found.items() if name.startswith("sedna_lc_")}
    assert ours == documented("sedna_lc_")
    assert labelled(text, "sedna_lc_reports_accepted_total", "route") == {
        "forwarded": 0, "ignored": 0, "unrouted": 0}
    assert labelled(text, "sedna_lc_store_dropped_total", "record") == {
        "unknown_owner": 0, "worker": 0, "dead_letter": 0, "outbox_covered": 0}
    assert labelled(text, "sedna_lc_dead_letters", "reason") == {
        "refused": 0, "unsendable": 0, "protocol": 0}
    assert labelled(text, "sedna_lc_link_reports_total", "outcome") == dict.fromkeys(
        ("sent", "resent", "acked", "refused", "dropped", "covered"), 0)
    assert value(text, "sedna_lc_outbox_size") == 0
    assert value(text, "sedna_lc_link_connected") == 0
    assert value(text, "sedna_lc_outbox_oldest_age_seconds") == 0
    assert labelled(text, "sedna_lc_dataset_scans_total", "result") == {"counted": 0, "failed": 0}
    assert labelled(text, "sedna_lc_link_state", "state")["stopped"] == 0
    assert sum(labelled(text, "sedna_lc_link_state", "state").values()) == 1
    assert value(text, "sedna_lc_report_seconds_count") == 0
    assert value(text, "sedna_build_info", service="lc", version=metadata.version("sedna-py"),
                 python=platform.python_version()) == 1
    assert not [s for s in samples(text) if s.name.endswith("_created")]


async def test_lc_state_on_the_page_outbox_age_dead_letters_and_dataset_scans(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, base):
        index = tmp_path / "rootfs" / "data" / "index.txt"
        index.parent.mkdir(parents=True)
        index.write_text("a\nb\n")
        await lc.apply_upsert("dataset", "default", "ds", dataset("ds", "/data/index.txt"))
        await lc.apply_upsert("dataset", "default", "gone", dataset("gone", "/data/none.txt"))
        assert await lc.store.wait_outbox(0, within=5)
        monitors = lc.dispatcher.manager("Dataset")
        await monitors.monitor("default", "gone").scan_once()
        [entry] = await lc.store.pending()
        async with session() as http, http.get(f"{base}/metrics") as resp:
            text = await resp.text()
        assert lc.store.outbox_size == 1 and value(text, "sedna_lc_outbox_oldest_age_seconds") > 0
        assert value(text, "sedna_lc_datasets_monitored") == 2
        scans = labelled(text, "sedna_lc_dataset_scans_total", "result")
        assert scans["counted"] >= 1 and scans["failed"] >= 1
        assert labelled(text, "sedna_lc_dead_letters_by_kind", "kind") == {}

        assert await lc.store.dead_letter(entry.seq, reason="unsendable", error="too big")
        async with session() as http, http.get(f"{base}/metrics") as resp:
            text = await resp.text()
        assert labelled(text, "sedna_lc_dead_letters_by_kind", "kind") == {"Dataset": 1}
        assert value(text, "sedna_lc_outbox_oldest_age_seconds") == 0


def test_the_links_state_and_settled_reports_by_kind() -> None:
    info = LinkInfo(state=BACKOFF)
    metrics = LinkMetrics(info)
    text = render(metrics.registry).decode()
    assert labelled(text, "sedna_lc_link_state", "state") == {
        "idle": 0, "connecting": 0, "connected": 0, "backoff": 1, "stopped": 0}
    assert not [s for s in samples(text) if s.name == "sedna_lc_link_kind_reports_total"]
    info.state = CONNECTED
    for kind, outcome in (("Dataset", "acked"), ("Dataset", "acked"), ("JointInferenceService", "refused"),
                          ("Dataset", "unsendable")):
        info.settled(kind, outcome)
    text = render(metrics.registry).decode()
    assert value(text, "sedna_lc_link_state", state="connected") == 1
    assert {(s.labels["kind"], s.labels["outcome"]): s.value for s in samples(text)
            if s.name == "sedna_lc_link_kind_reports_total"} == {
        ("Dataset", "acked"): 2, ("JointInferenceService", "refused"): 1, ("Dataset", "unsendable"): 1}
    assert "by_kind" not in info.as_dict()  # /readyz shows the totals only


async def test_worker_reports_are_counted_by_the_kind_of_their_job(tmp_path: Path) -> None:
    body = {"name": "w-0", "namespace": "default", "ownerName": "ji", "ownerKind": "jointinferenceservice",
            "kind": "inference", "status": "running", "results": [],
            "ownerInfo": {"inferenceNumber": 3, "hardExampleNumber": 1, "uploadCloudRatio": 0.3}}
    async with running_lc(tmp_path) as (lc, url), session() as http:
        async with http.post(f"{url}/sedna/workers/w-0/info", json={**body, "ownerKind": "default"}) as resp:
            assert resp.status == 200  # no job held under that name yet: kept, its kind unknown
        await lc.apply_upsert("JointInferenceService", "default", "ji", {
            "metadata": {"name": "ji", "namespace": "default", "uid": "u1"}, "spec": {}})
        async with http.post(f"{url}/sedna/workers/w-0/info", json=body) as resp:
            assert resp.status == 200
        async with http.post(f"{url}/sedna/workers/w-0/info", json={**body, "name": "other"}) as resp:
            assert resp.status == 400  # name mismatch: refused, its kind known
        async with http.post(f"{url}/sedna/workers/w-0/info", data=b"{not json",
                             headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 400  # not decoded: kind unknown
        async with http.get(f"{url}/metrics") as resp:
            text = await resp.text()
    counted = {(s.labels["kind"], s.labels["outcome"]): s.value for s in samples(text)
               if s.name == "sedna_lc_kind_reports_total"}
    assert counted == {("unknown", "accepted"): 1, ("JointInferenceService", "accepted"): 1,
                       ("JointInferenceService", "refused"): 1, ("unknown", "refused"): 1}
