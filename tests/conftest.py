"""Shared fixtures: an in-process dev cluster on a free port, and the real kubectl against it."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

KUBECTL = os.environ.get("KUBECTL", "/usr/bin/kubectl")

# the cluster tier's clusters (`target`: the dev cluster and the real control plane), for tests/cluster
# and the conformance suite
pytest_plugins = ("tests.cluster.plugin",)


async def eventually(predicate: Callable[[], Any], message: str = "condition", *,
                     within: float = 5.0, interval: float = 0.01) -> Any:
    """Poll `predicate` (plain or async) until it returns a truthy value and return that value;
    fail the test after `within` seconds. Write the predicate so that it implies the assertion
    that follows, never a sleep before it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {message}")
        await asyncio.sleep(interval)


# ---- the log guard ----------------------------------------------------------------------
# Any test whose in-process logs hold a traceback, "reconcile crashed" or an ERROR record
# fails, unless it declares what it expects with
# `@pytest.mark.expect_log_errors(r"regex", ...)` (matched against "logger: message").

_CRASH = re.compile(r"reconcile crashed|Traceback")


class _LogGuard(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.bad: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.name}: {record.getMessage()}"
        except Exception as exc:  # a record that cannot even be formatted is itself a defect
            text = f"{record.name}: unformattable record {record.msg!r}: {exc}"
            self.bad.append(text)
            return
        if record.levelno >= logging.ERROR or record.exc_info or _CRASH.search(text):
            if record.exc_info and record.exc_info[1] is not None:
                text += f" [{type(record.exc_info[1]).__name__}: {record.exc_info[1]}]"
            self.bad.append(text)


@pytest.fixture(autouse=True)
def log_guard(request):
    """Fail the test on unexpected error logs (see above)."""
    guard = _LogGuard()
    root = logging.getLogger()
    root.addHandler(guard)
    try:
        yield guard
    finally:
        root.removeHandler(guard)
    marker = request.node.get_closest_marker("expect_log_errors")
    allowed = [re.compile(p) for p in (marker.args if marker else ())]
    unexpected = [t for t in guard.bad if not any(p.search(t) for p in allowed)]
    if unexpected:
        pytest.fail("unexpected error logs:\n  " + "\n  ".join(unexpected[:20]), pytrace=False)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "expect_log_errors(*regex): error log lines this test expects (log guard)")


def assert_no_crashes(dc) -> None:
    """Fail the test if any of the dev cluster's supervised tasks (controllers, pod loops) died
    during it: a restarted controller would otherwise only make the test slow or flaky."""
    if dc.crashes:
        lines = [f"{c.task}: {c.error}\n{c.traceback}" for c in dc.crashes[:5]]
        pytest.fail(f"{len(dc.crashes)} dev cluster task crash(es):\n" + "\n".join(lines), pytrace=False)


@pytest.fixture
async def cluster(tmp_path: Path):
    """A served DevCluster (start delay 0, fast resync); kubeconfig at tmp_path/kubeconfig.
    Fails the test at teardown if any of its controllers crashed."""
    async with served_cluster(tmp_path, image_map={}, restart_backoff=0.05) as dc:
        yield dc


@contextlib.asynccontextmanager
async def served_cluster(tmp_path: Path, **options: Any):
    """A DevCluster served on a free port (start delay 0, fast resync, `options` on top),
    its kubeconfig at tmp_path/kubeconfig; fails the test if a controller crashed."""
    from devcluster.cluster import DevCluster

    dc = DevCluster(**{"start_delay": 0, "termination_delay": 0, "resync": 0.5, "lease_interval": 1.0,
                       "process_runtime": True, **options})
    await dc.start("127.0.0.1", 0)
    dc.write_kubeconfig(tmp_path / "kubeconfig")
    try:
        yield dc
    finally:
        await dc.stop()
    assert_no_crashes(dc)


Kubectl = Callable[..., Awaitable[tuple[int, str, str]]]


async def run_kubectl(kubeconfig: Path, cache: Path, *args: str, stdin: str | None = None,
                      within: float = 30.0) -> tuple[int, str, str]:
    """Run the real kubectl as a subprocess (the event loop keeps serving meanwhile)."""
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}", *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(cache.parent), "KUBECONFIG": str(kubeconfig)},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"kubectl {' '.join(args)} did not finish in {within}s") from None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
def kubectl(cluster, tmp_path: Path) -> Kubectl:
    """Run the real kubectl against `cluster`: `rc, out, err = await kubectl("get", "pods")`."""

    async def run(*args: str, stdin: str | None = None, within: float = 30.0) -> tuple[int, str, str]:
        return await run_kubectl(tmp_path / "kubeconfig", tmp_path / "kube-cache", *args, stdin=stdin,
                                 within=within)

    return run


@pytest.fixture
async def live():
    """A DevCluster whose controllers run but which does not serve HTTP (store-level tests).
    Fails the test at teardown if any of its controllers crashed."""
    from devcluster.cluster import DevCluster

    dc = DevCluster(start_delay=0, termination_delay=0, resync=0.5, lease_interval=1.0,
                    process_runtime=True, image_map={}, restart_backoff=0.05)
    dc.start_controllers()
    try:
        yield dc
    finally:
        await dc.stop()
    assert_no_crashes(dc)
