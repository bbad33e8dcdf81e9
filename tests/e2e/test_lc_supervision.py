"""The LC's long-lived tasks restart after they are killed: the link (cancelled from
outside, or raising) reconnects and relays what was stored meanwhile; a dataset monitor
(raising, or cancelled) scans again; and the LC's stop is bounded even when the link hangs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lc.app
import lc.managers.base
import lc.managers.dataset
from lc.app import LocalController
from lc.link.dialer import GMLink
from lc.managers.dataset import DatasetManager
from lc.store.facade import Store
from shared.tasks import Restart
from tests.conftest import eventually
from tests.hubfakes import MemSource
from tests.linkrig import (
    NODE,
    TIMEOUT,
    HubServer,
    MemHandler,
    fast_settings,
    lc_config,
    model,
)

FAST_RESTART = Restart(initial=0.02, cap=0.05, stable_after=60)


@pytest.fixture(autouse=True)
def fast_restarts(monkeypatch):
    monkeypatch.setattr(lc.app, "LINK_RESTART", FAST_RESTART)
    monkeypatch.setattr(lc.managers.base, "MONITOR_RESTART", FAST_RESTART)


@pytest.fixture
async def hub() -> AsyncIterator[HubServer]:
    source = MemSource()
    source.put(NODE, "Model", "m", model("m"))
    server = HubServer(source, MemHandler())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def linked(tmp_path: Path, hub: HubServer) -> AsyncIterator[LocalController]:
    """A started LC whose link (short timings) is run and supervised by the LC itself."""
    def factory(controller: LocalController) -> GMLink:
        assert controller.store is not None
        return GMLink(fast_settings(hub.address), store=controller.store, sink=controller)

    controller = LocalController(lc_config(tmp_path, hub.address), link_factory=factory)
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop()


async def kill_by_cancel(controller: LocalController, hub: HubServer) -> None:
    assert controller.link_task is not None and controller.link_task.current is not None
    controller.link_task.current.cancel()


async def kill_by_raise(controller: LocalController, hub: HubServer) -> None:
    """A bug in the dial loop: the next attempt raises (once); the GM going away triggers it."""
    link = controller.link
    assert isinstance(link, GMLink)
    original = link._attempt

    async def broken_once(http):
        link._attempt = original  # type: ignore[method-assign]
        raise RuntimeError("dial loop bug")

    link._attempt = broken_once  # type: ignore[method-assign]
    await hub.stop()
    await eventually(lambda: link.state != "connected", within=TIMEOUT, message="session over")
    await hub.start()


@pytest.mark.parametrize("kill", [
    pytest.param(kill_by_cancel, id="cancelled"),
    pytest.param(kill_by_raise, id="raised", marks=pytest.mark.expect_log_errors(r"task ended, restarting")),
])
async def test_a_killed_link_comes_back_and_relays_what_was_stored(linked: LocalController, hub: HubServer,
                                                                   kill) -> None:
    link, store, handler = linked.link, linked.store, hub.handler
    assert isinstance(link, GMLink) and store is not None
    await link.wait_connected(TIMEOUT)
    first = await store.append_report("Model", "default", "m", {"n": 1})
    await eventually(lambda: handler.seqs("m") == [first], within=TIMEOUT, message="first report relayed")

    await kill(linked, hub)
    await eventually(lambda: linked.link_task.restarts == 1, within=TIMEOUT, message="link restarted")
    second = await store.append_report("Model", "default", "m", {"n": 2})
    await eventually(lambda: handler.seqs("m") == [first, second], within=TIMEOUT,
                     message="report stored after the kill relayed")
    assert link.info.sessions == 2 and link.state == "connected"
    await eventually(lambda: store.outbox_size == 0, within=TIMEOUT, message="acked")


class HangingLink:
    """A link whose shutdown never completes (a close that waits on a dead peer)."""

    state = "connecting"

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def run(self) -> None:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await self.release.wait()
            raise


@pytest.mark.expect_log_errors(r"task did not stop in time")
async def test_stop_is_bounded_when_the_link_hangs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(lc.app, "LINK_STOP_TIMEOUT", 0.2)
    hanging = HangingLink()
    controller = LocalController(lc_config(tmp_path, "127.0.0.1:1"), link_factory=lambda _: hanging)
    await controller.start()
    await eventually(hanging.entered.is_set, message="link running")
    supervised = controller.link_task
    try:
        async with asyncio.timeout(5):
            await controller.stop()  # returns although the link has not ended
        assert supervised is not None and supervised.running
        assert controller.link_task is None
    finally:
        hanging.release.set()
        await eventually(lambda: not supervised.running, message="link ends once released")


def dataset(name: str, url: str) -> dict:
    return {"kind": "Dataset", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"url": url, "format": "txt", "nodeName": NODE}}


@pytest.fixture
async def datasets(tmp_path: Path) -> AsyncIterator[tuple[DatasetManager, Store, Path]]:
    rootfs = tmp_path / "rootfs"
    (rootfs / "data").mkdir(parents=True)
    store = await Store.open(str(tmp_path / "lc.db"))
    manager = DatasetManager(store, rootfs=str(rootfs), period=3600.0)  # no periodic re-scan
    try:
        yield manager, store, rootfs
    finally:
        await manager.stop()
        await store.close()


def monitor_run() -> asyncio.Task:
    [task] = [t for t in asyncio.all_tasks() if t.get_name() == "dataset-monitor:default/d1"]
    return task


async def samples_reported(store: Store) -> list[int]:
    return [entry.body["numberOfSamples"] for entry in await store.pending(0, 100)]


@pytest.mark.expect_log_errors(r"task ended, restarting")
async def test_a_dataset_monitor_that_raises_is_restarted_and_scans_again(datasets, monkeypatch) -> None:
    manager, store, rootfs = datasets
    (rootfs / "data" / "d1.txt").write_text("a\nb\nc\n")
    real_scan = lc.managers.dataset.scan
    calls: list[str] = []

    def scan_broken_once(obj, root, **options):
        calls.append(obj["metadata"]["name"])
        if len(calls) == 1:
            raise RuntimeError("scanner bug")  # not a DatasetError: the monitor's run dies
        return real_scan(obj, root, **options)

    monkeypatch.setattr(lc.managers.dataset, "scan", scan_broken_once)
    await manager.upsert("default", "d1", dataset("d1", "/data/d1.txt"))
    await eventually(lambda: _has(samples_reported(store), [3]), message="count reported after restart")
    assert calls == ["d1", "d1"]
    assert manager.monitor("default", "d1").scans == 2


async def test_a_dataset_monitor_cancelled_from_outside_scans_again(datasets) -> None:
    manager, store, rootfs = datasets
    index = rootfs / "data" / "d1.txt"
    index.write_text("a\n")
    await manager.upsert("default", "d1", dataset("d1", "/data/d1.txt"))
    await eventually(lambda: _has(samples_reported(store), [1]), message="first count")
    index.write_text("a\nb\n")  # the period is an hour: only a restarted monitor sees this now
    first = monitor_run()
    first.cancel()
    await eventually(lambda: _has(samples_reported(store), [1, 2]), message="count after restart")
    assert monitor_run() is not first


async def _has(actual, expected) -> bool:
    return await actual == expected
