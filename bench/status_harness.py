"""Pieces for measuring the status path from outside: processes, load, watches, bookkeeping.

The dev cluster, the GM and every LC run as their own processes (`sedna-devcluster`,
`sedna-gm`, `sedna-lc`, started with PYTHONPATH set to this checkout so the code measured is
the code next to this file); this process plays the workers (HTTP POSTs to an LC) and the
observer (a list+watch on the dev cluster, as `kubectl get -w` would do). Nothing here reads
the services' internals: what counts is what a watch of the API server shows.

Used by bench/status_path.py (figures) and tests/e2e/test_status_soak.py (correctness only).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import os
import random
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = ROOT / "charts" / "sedna" / "crds"
NS = "default"
GROUP = "/apis/sedna.io/v1alpha1"
JI_PLURAL = "jointinferenceservices"
DS_PLURAL = "datasets"
HEADERS = {"Content-Type": "application/json"}


_HANDED_OUT: set[int] = set()  # ports free_port gave out in this process


def free_port() -> int:
    """A port that binds now and that this process has not handed out before, below the kernel's
    ephemeral range when it can be: the kernel offers the same port 0 twice over a hundred calls,
    and takes ports of that range for every outgoing connection, so a service started later
    with a port from it may find it taken (or, worse, another service answering on it)."""
    low = _ephemeral_low()
    for _ in range(1000):
        if low > 11_000:
            port = random.randrange(10_000, low)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port found")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _program(name: str, module: str) -> list[str]:
    """The console script next to this interpreter (as installed), else `python -m`."""
    script = Path(sys.executable).parent / name
    return [str(script)] if os.access(script, os.X_OK) else [sys.executable, "-m", module]


def _open_log(path: Path):
    return open(path, "ab")  # handed to the child; closed by Proc.start


def _write(path: Path, text: str, mode: str = "w") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8") as f:
        f.write(text)


def _access_of(kubeconfig: Path) -> tuple[str, ssl.SSLContext | None, dict[str, str]]:
    """Server URL, TLS context (its CA) and auth header from the dev cluster's kubeconfig."""
    with open(kubeconfig, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cluster, user = cfg["clusters"][0]["cluster"], (cfg.get("users") or [{}])[0].get("user") or {}
    ctx = None
    if cluster["server"].startswith("https://"):
        if cluster.get("certificate-authority-data"):
            ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        else:
            ctx = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
    headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
    return cluster["server"], ctx, headers


def _tail(log: Path, lines: int = 5) -> str:
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


# ---- processes ----------------------------------------------------------------------------


class Proc:
    """One service process: started, SIGKILLed and restarted with the same command and env."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log: Path):
        self.name, self.cmd, self.env, self.log = name, cmd, env, log
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.held = False  # being killed and restarted on purpose: the supervisor leaves it alone

    async def start(self) -> None:
        out = _open_log(self.log)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.cmd, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                env={**os.environ, "PYTHONPATH": str(ROOT), **self.env}, cwd=str(ROOT))
        finally:
            out.close()
        self.starts += 1

    async def kill(self) -> None:
        """SIGKILL this process (only the one this object started) and reap it."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def stop(self, within: float = 10.0) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            await self.kill()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


@dataclass
class LCInfo:
    node: str
    port: int
    rootfs: Path
    db: Path
    proc: Proc


class Stack:
    """sedna-devcluster + sedna-gm + one sedna-lc per node, each its own process."""

    def __init__(self, nodes: Iterable[str] = ("edge-node-1",), *, faults: Iterable[str] = (),
                 watch_drop_seconds: float = 0.0, gm_config: str = "", lc_env: dict[str, str] | None = None,
                 workdir: Path | None = None, keep: bool = False, with_gm: bool = True):
        """`workdir`: where state and logs go (kept); else a temporary one, removed at stop
        unless `keep`; `with_gm=False`: no GM process (the caller runs one)."""
        self.with_gm = with_gm
        self.remove = workdir is None and not keep
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="status-path-"))
        self.gm_port = free_port()
        self.kubeconfig = self.dir / "kubeconfig"
        self.cluster_url = ""  # known once the dev cluster wrote its kubeconfig (it picks its port)
        self.cluster_headers: dict[str, str] = {}
        self.gm_url = f"http://127.0.0.1:{self.gm_port}"
        self.crashes: list[str] = []  # service processes that exited on their own and were restarted
        dc_cmd = [*_program("sedna-devcluster", "devcluster.cli"), "--port", "0",
                  "--kubeconfig", str(self.kubeconfig), "--start-delay", "0.05", "--termination-delay", "0",
                  "--apply", str(CRD_DIR), "--log-level", "WARNING"]
        for rule in faults:
            dc_cmd += ["--fault-error-rate", rule]
        if watch_drop_seconds:
            dc_cmd += ["--fault-watch-drop-seconds", str(watch_drop_seconds)]
        self.devcluster = Proc("devcluster", dc_cmd, {}, self.dir / "devcluster.log")
        # The GM's own defaults (gm/config.py), only the addresses set.
        _write(self.dir / "gm.yaml", f"kubeConfig: {self.kubeconfig}\n"
                                     f"websocket: {{address: 127.0.0.1, port: {self.gm_port}}}\n{gm_config}")
        self.gm = Proc("gm", [*_program("sedna-gm", "gm.cli"), "--config", str(self.dir / "gm.yaml")], {},
                       self.dir / "gm.log")
        self.lcs: dict[str, LCInfo] = {}
        for node in nodes:
            port, rootfs = free_port(), self.dir / f"rootfs-{node}"
            rootfs.mkdir(parents=True, exist_ok=True)
            env = {"GM_ADDRESS": f"127.0.0.1:{self.gm_port}", "NODENAME": node, "BIND_ADDRESS": "127.0.0.1",
                   "BIND_PORT": str(port), "ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(self.dir / f"lc-{node}.db"),
                   "LC_DATASET_PERIOD": "1", **(lc_env or {})}
            self.lcs[node] = LCInfo(node, port, rootfs, self.dir / f"lc-{node}.db",
                                    Proc(f"lc-{node}", [*_program("sedna-lc", "lc.cli")], env, self.dir / f"lc-{node}.log"))
        self.session: aiohttp.ClientSession | None = None

    # -- lifecycle

    async def start(self, *, within: float = 60.0) -> Stack:
        await self.devcluster.start()
        deadline = time.monotonic() + within
        tls = None
        while not self.cluster_url:
            if self.kubeconfig.exists():
                with contextlib.suppress(OSError, yaml.YAMLError, KeyError, IndexError, TypeError, ValueError):
                    self.cluster_url, tls, self.cluster_headers = _access_of(self.kubeconfig)
            if not self.devcluster.running or time.monotonic() > deadline:
                raise RuntimeError(f"dev cluster did not start: {_tail(self.devcluster.log)}")
            await asyncio.sleep(0.05)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=tls or True),
                                             read_bufsize=1 << 20)
        await self._wait_ok(f"{self.cluster_url}/readyz", within, self.devcluster, restart=False)
        if self.with_gm:
            await self.start_gm(within=within)
        for lc in self.lcs.values():
            await self.start_lc(lc.node, within=within)
        self._profile()
        return self

    def _profile(self) -> None:
        """BENCH_PYSPY=gm,lc-edge-node-1,devcluster (and BENCH_PYSPY_SECONDS, default 20): sample
        those services with py-spy from now on, raw stacks into the stack's directory."""
        wanted = [w for w in os.environ.get("BENCH_PYSPY", "").split(",") if w]
        spy = Path(sys.executable).parent / "py-spy"
        procs = {p.name: p for p in (self.devcluster, self.gm, *(lc.proc for lc in self.lcs.values()))}
        for name in wanted:
            proc = procs.get(name)
            if proc is None or proc.proc is None or not spy.exists():
                continue
            out = self.dir / f"pyspy-{name}.txt"
            subprocess.Popen([str(spy), "record", "-p", str(proc.proc.pid), "-r", "100", "-f", "raw", "-o", str(out),
                              "-d", os.environ.get("BENCH_PYSPY_SECONDS", "20")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"# py-spy {name} -> {out}", flush=True)

    async def start_gm(self, *, within: float = 60.0) -> None:
        await self.gm.start()
        await self._wait_ok(f"{self.gm_url}/readyz", within, self.gm)

    async def start_lc(self, node: str, *, within: float = 60.0) -> None:
        lc = self.lcs[node]
        await lc.proc.start()
        await self._wait_ok(f"http://127.0.0.1:{lc.port}/readyz", within, lc.proc)

    async def supervise(self) -> None:
        """Restart the GM or an LC that exited on its own (as Kubernetes would); run as a task."""
        while True:
            await asyncio.sleep(0.5)
            for proc in (self.gm, *(lc.proc for lc in self.lcs.values())):
                if proc.proc is not None and not proc.running and not proc.held:
                    self.crashes.append(f"{proc.name} exited with {proc.proc.returncode}: {_tail(proc.log, 1)}")
                    await proc.start()

    async def kill_and_restart(self, target: str, delay: float) -> None:
        """SIGKILL `gm` or `lc:<node>`, wait `delay` s, start it again and wait until it serves."""
        proc = self.gm if target == "gm" else self.lcs[target.split(":", 1)[1]].proc
        proc.held = True
        try:
            await proc.kill()
            await asyncio.sleep(delay)
            if target == "gm":
                await self.start_gm()
            else:
                await self.start_lc(target.split(":", 1)[1])
        finally:
            proc.held = False

    async def wait_linked(self, within: float = 60.0) -> None:
        """Every LC reports its link to the GM connected."""
        deadline = time.monotonic() + within
        for lc in self.lcs.values():
            while True:
                with contextlib.suppress(aiohttp.ClientError, ValueError, TimeoutError):
                    async with self.session.get(f"http://127.0.0.1:{lc.port}/readyz") as r:
                        body = await r.json()
                        if body.get("link") == "connected":
                            break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"LC {lc.node} not linked to the GM within {within}s")
                await asyncio.sleep(0.1)

    @contextlib.asynccontextmanager
    async def running(self, watches: list[Watch]) -> AsyncIterator[Stack]:
        """Started and supervised (a service that exits is started again) for the block;
        then the supervisor, the `watches` the block added and every process stopped. A
        block that fails keeps the state folder and its logs."""
        supervisor: asyncio.Task | None = None
        try:
            await self.start()
            supervisor = asyncio.create_task(self.supervise())
            yield self
        except BaseException:
            self.remove = False
            raise
        finally:
            if supervisor is not None:
                supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await supervisor
            for w in watches:
                await w.stop()
            await self.stop()

    async def stop(self) -> None:
        for lc in self.lcs.values():
            await lc.proc.stop()
        await self.gm.stop()
        await self.devcluster.stop()
        if self.session is not None:
            await self.session.close()
        if self.remove:
            shutil.rmtree(self.dir, ignore_errors=True)

    async def _wait_ok(self, url: str, within: float, proc: Proc, *, restart: bool = True) -> None:
        """Until `url` answers 200. A service that exits meanwhile is started again, as its
        Deployment or DaemonSet would (each restart is recorded in `crashes`)."""
        deadline = time.monotonic() + within
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=2),
                                            headers=self._auth(url)) as r:
                    if r.status == 200:
                        return
            if not proc.running:
                if not restart:
                    raise RuntimeError(f"{proc.name} exited: {_tail(proc.log)}")
                self.crashes.append(f"{proc.name} exited with {proc.proc.returncode}: {_tail(proc.log, 1)}")
                await proc.start()
            if time.monotonic() > deadline:
                self.remove = False
                raise RuntimeError(f"{proc.name} not ready within {within}s (logs in {self.dir})")
            await asyncio.sleep(0.05)

    # -- API objects (retrying what an injected fault fails)

    async def api(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201),
                  tries: int = 50) -> Any:
        data = None if body is None else orjson.dumps(body)
        for _ in range(tries):
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.session.request(method, f"{self.cluster_url}{path}", data=data,
                                                headers={**HEADERS, **self.cluster_headers}) as r:
                    raw = await r.read()
                    if r.status in ok:
                        return orjson.loads(raw) if raw else None
                    if r.status < 500 and r.status != 429:
                        raise RuntimeError(f"{method} {path}: {r.status} {raw[:300]!r}")
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{method} {path}: no success after {tries} tries")

    async def create(self, obj: dict) -> None:
        plural = {"JointInferenceService": JI_PLURAL, "Dataset": DS_PLURAL, "Model": "models"}[obj["kind"]]
        await self.api("POST", f"{GROUP}/namespaces/{NS}/{plural}", obj, ok=(200, 201, 409))

    async def set_faults(self, settings: dict) -> None:
        """The same fault rules as the CLI flags, set over the dev cluster's admin endpoint."""
        await self.api("POST", "/devcluster/faults", settings)

    # -- observation of the services

    async def gm_requests(self) -> dict[tuple[str, ...], float]:
        """`sedna_gm_api_requests_total` by (verb, code) and `sedna_gm_hub_status_reports_total` by
        ("hub", result), from the GM's /metrics."""
        text = await self._text(f"{self.gm_url}/metrics")
        out: dict[tuple[str, ...], float] = {}
        for m in re.finditer(r'^(sedna_gm_api_requests_total|sedna_gm_hub_status_reports_total)\{([^}]*)\}\s+([0-9.e+]+)$',
                             text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            key = ((labels.get("verb", ""), labels.get("code", "")) if m.group(1) == "sedna_gm_api_requests_total"
                   else ("hub", labels.get("result", "")))
            out[key] = float(m.group(3))
        return out

    async def outbox_size(self, node: str) -> int | None:
        """The LC's `sedna_lc_outbox_size`; None while it does not answer."""
        try:
            text = await self._text(f"http://127.0.0.1:{self.lcs[node].port}/metrics")
        except (aiohttp.ClientError, TimeoutError):
            return None
        m = re.search(r"^sedna_lc_outbox_size\s+([0-9.e+]+)$", text, re.M)
        return None if m is None else int(float(m.group(1)))

    def _auth(self, url: str) -> dict[str, str]:
        """The dev cluster's credentials, for its URLs only."""
        return self.cluster_headers if self.cluster_url and url.startswith(self.cluster_url) else {}

    async def _text(self, url: str) -> str:
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            return await r.text()


# ---- objects ---------------------------------------------------------------------------------


def example_docs(name: str) -> list[dict]:
    with open(ROOT / "examples" / "upstream" / name, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def ji_models() -> list[dict]:
    return [d for d in example_docs("joint-inference-helmet-detection.yaml") if d["kind"] == "Model"]


def ji_object(name: str, node: str) -> dict:
    """The upstream helmet-detection JointInferenceService, renamed, its edge worker on `node`."""
    [ji] = [d for d in example_docs("joint-inference-helmet-detection.yaml") if d["kind"] == "JointInferenceService"]
    ji = copy.deepcopy(ji)
    ji["metadata"]["name"] = name
    ji["spec"]["edgeWorker"]["template"]["spec"]["nodeName"] = node
    return ji


def dataset_object(name: str, node: str, url: str) -> dict:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": name, "namespace": NS},
            "spec": {"url": url, "format": "txt", "nodeName": node}}


def ji_body(worker: str, ji: str, value: int) -> dict:
    """Upstream's joint-inference stats report; `inferenceNumber` tells which report it is."""
    return {"name": worker, "namespace": NS, "ownerName": ji, "ownerKind": "jointinferenceservice",
            "kind": "inference", "results": [],
            "ownerInfo": {"startTime": "2026-01-01 10:00:00", "updateTime": "2026-01-01 10:00:30",
                          "inferenceNumber": value, "hardExampleNumber": value // 10, "uploadCloudRatio": 0.1}}


def ji_value(obj: dict) -> int | None:
    for m in (obj.get("status") or {}).get("metrics") or []:
        if m.get("key") == "inferenceNumber":
            try:
                return int(float(m.get("value")))
            except (TypeError, ValueError):
                return None
    return None


def ds_value(obj: dict) -> int | None:
    v = (obj.get("status") or {}).get("numberOfSamples")
    return v if isinstance(v, int) else None


# ---- bookkeeping ------------------------------------------------------------------------------


@dataclass(slots=True)
class Report:
    value: int
    t_post: float
    ok: bool | None = None  # answered 200 (None while in flight)
    t_ok: float | None = None  # when the 200 came
    t_visible: float | None = None  # a watch showed this value or a later one


@dataclass
class Track:
    """One object's reports (values increasing in posting order) and what a watch showed."""

    reports: list[Report] = field(default_factory=list)
    pending: deque = field(default_factory=deque)
    seen: set = field(default_factory=set)
    last: int | None = None  # value in the last event seen
    high: int | None = None
    regressions: list[tuple[int, int]] = field(default_factory=list)  # (newer seen, older shown after)
    events: int = 0

    def posted(self, value: int, t: float) -> Report:
        r = Report(value, t)
        self.reports.append(r)
        self.pending.append(r)
        return r

    def observe(self, value: int, t: float) -> None:
        self.events += 1
        if self.last is not None and value < self.last:
            self.regressions.append((self.last, value))
        self.last = value
        self.seen.add(value)
        if self.high is None or value > self.high:
            self.high = value
        self._settle(t)

    def _settle(self, t: float) -> None:
        while self.pending and self.pending[0].value <= self.high:
            self.pending.popleft().t_visible = t

    def ok_reports(self) -> list[Report]:
        return [r for r in self.reports if r.ok]


class Tracker:
    """Tracks per object key; fed by a Watch."""

    def __init__(self) -> None:
        self.tracks: dict[str, Track] = {}
        self.changed = asyncio.Event()
        self.event_writes: dict[str, int] = {}  # watch events of Events about the objects, by type

    def track(self, key: str) -> Track:
        t = self.tracks.get(key)
        if t is None:
            t = self.tracks[key] = Track()
        return t

    def observe(self, key: str, value: int | None, t: float) -> None:
        if value is None:
            return
        self.track(key).observe(value, t)
        self.changed.set()
        self.changed = asyncio.Event()

    def visible(self, key: str, value: int) -> bool:
        high = self.track(key).high
        return high is not None and high >= value

    async def wait_visible(self, want: dict[str, int], within: float) -> float | None:
        """Until every key shows at least its value: the time it happened, or None after `within` s."""
        deadline = time.monotonic() + within
        while True:
            if all(self.visible(k, v) for k, v in want.items()):
                return time.perf_counter()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))

    def all_reports(self) -> list[Report]:
        return [r for t in self.tracks.values() for r in t.reports]

    def regressions(self) -> int:
        return sum(len(t.regressions) for t in self.tracks.values())


class Watch:
    """list+watch of one plural in NS on the dev cluster, resumed after drops, errors and 410."""

    def __init__(self, stack: Stack, plural: str, on_object: Callable[[dict, float], None], *,
                 on_event: Callable[[str, dict], None] | None = None, api: str = GROUP):
        """`api`: the group path (`/api/v1` for core kinds); `on_event(type, obj)` sees every
        watch event (not the relists)."""
        self.stack, self.plural, self.on_object, self.on_event = stack, plural, on_object, on_event
        self.api = api
        self.task: asyncio.Task | None = None
        self.relists = self.rewatches = 0
        self.synced = asyncio.Event()

    def start(self) -> Watch:
        self.task = asyncio.create_task(self._run(), name=f"watch-{self.plural}")
        return self

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        base = f"{self.stack.cluster_url}{self.api}/namespaces/{NS}/{self.plural}"
        session = self.stack.session
        rv: str | None = None
        no_timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        while True:
            try:
                if rv is None:
                    async with session.get(base, headers=self.stack.cluster_headers) as r:
                        if r.status != 200:
                            await asyncio.sleep(0.05)
                            continue
                        body = orjson.loads(await r.read())
                    now = time.perf_counter()
                    for obj in body.get("items") or []:
                        self.on_object(obj, now)
                    rv = body["metadata"]["resourceVersion"]
                    self.relists += 1
                    self.synced.set()
                url = f"{base}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
                async with session.get(url, timeout=no_timeout, headers=self.stack.cluster_headers) as r:
                    if r.status == 410:
                        rv = None
                        continue
                    if r.status != 200:
                        await asyncio.sleep(0.05)
                        continue
                    self.rewatches += 1
                    async for line in r.content:
                        if not line.strip():
                            continue
                        ev = orjson.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                rv = None
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if ev.get("type") in ("ADDED", "MODIFIED"):
                            self.on_object(obj, time.perf_counter())
                        if self.on_event is not None:
                            self.on_event(ev.get("type", ""), obj)
            except (aiohttp.ClientError, TimeoutError, ValueError):
                await asyncio.sleep(0.05)


# ---- workers ----------------------------------------------------------------------------------


class Worker:
    """A worker reporting one JI to its LC; every report carries the next inferenceNumber."""

    def __init__(self, stack: Stack, node: str, name: str, ji: str, tracker: Tracker, *, first: int = 1):
        self.stack, self.node, self.name, self.ji, self.tracker = stack, node, name, ji, tracker
        self.url = f"http://127.0.0.1:{stack.lcs[node].port}/sedna/workers/{name}/info"
        self.next = first
        self.failed_posts = 0
        self.last_ok: int | None = None

    async def report(self, *, retry_for: float = 0.0) -> Report:
        """POST the next report (retrying the same value on failure for up to `retry_for` s)."""
        value = self.next
        self.next += 1
        rec = self.tracker.track(self.ji).posted(value, time.perf_counter())
        deadline = time.monotonic() + retry_for
        body = orjson.dumps(ji_body(self.name, self.ji, value))
        while True:
            try:
                async with self.stack.session.post(self.url, data=body, headers=HEADERS,
                                                   timeout=aiohttp.ClientTimeout(total=10)) as r:
                    await r.read()
                    if r.status == 200:
                        rec.ok, rec.t_ok = True, time.perf_counter()
                        self.last_ok = value
                        return rec
            except (aiohttp.ClientError, TimeoutError):
                pass
            self.failed_posts += 1
            if time.monotonic() >= deadline:
                rec.ok = False
                return rec
            await asyncio.sleep(0.2)

    async def paced(self, rate: float, duration: float, *, retry_for: float = 0.0,
                    start: float | None = None) -> int:
        """Report sequentially at `rate`/s for `duration` s (a late report goes at once); count sent."""
        t0 = time.perf_counter() if start is None else start
        n = 0
        while True:
            due = t0 + n / rate
            if due - t0 >= duration:
                return n
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.report(retry_for=retry_for)
            n += 1


# ---- figures ----------------------------------------------------------------------------------


def quantiles(values: list[float]) -> tuple[float, float]:
    """(p50, p99); NaN for no values."""
    if not values:
        return float("nan"), float("nan")
    if len(values) == 1:
        return values[0], values[0]
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49], q[98]


def latencies_ms(reports: Iterable[Report]) -> list[float]:
    return [(r.t_visible - r.t_post) * 1000 for r in reports if r.ok and r.t_visible is not None]


# ---- soak ---------------------------------------------------------------------------------------


SOAK_NODES = ("edge-node-1", "edge-node-2")


@dataclass
class SoakResult:
    seconds: float
    workers: int
    reports_ok: int
    reports_failed_posts: int
    lag_p50_ms: float
    lag_p99_ms: float
    lost: int  # answered 200, never visible and never superseded
    never_seen: int  # answered 200, superseded before a watch saw its own value
    regressions: int  # a watch showed an older value after a newer one (same object)
    drain_seconds: float | None  # load stop -> every outbox empty (None: not within the wait)
    outboxes_left: dict[str, int | None]
    visible_seconds: float | None  # load stop -> every JI shows its last report
    datasets_exact_seconds: float | None  # load stop -> every Dataset count exact
    datasets_wrong: dict[str, tuple[int | None, int]]  # name -> (shown, lines in the file)
    kills: list[str]
    crashes: list[str]  # services that exited on their own and were restarted
    dataset_changes: int
    watch_resumes: int
    log_dir: str

    @property
    def correct(self) -> bool:
        return (self.lost == 0 and self.regressions == 0 and self.drain_seconds is not None
                and self.datasets_exact_seconds is not None)


async def soak(seconds: float, *, workers: int = 40, rate: float = 10.0, datasets_per_node: int = 2,
               error_rate: float = 0.05, watch_drop_seconds: float = 60.0, kill_every: float = 20.0,
               kill_order: tuple[str, ...] = ("lc:edge-node-1", "gm", "lc:edge-node-2"),
               restart_delay: float = 1.0, wait: float = 120.0, workdir: Path | None = None,
               keep: bool = False, say: Callable[[str], None] = lambda _: None) -> SoakResult:
    """Two LCs, `workers` JI workers reporting `rate`/s in all (one JI each, half per node),
    Datasets whose index files grow, `error_rate` of every API request failing, watches cut every
    `watch_drop_seconds`, and every `kill_every` s the next of `kill_order` SIGKILLed and
    restarted; then up to `wait` s for the outboxes, JIs and Datasets to settle."""
    faults = [f"*:*={error_rate}"] if error_rate else []
    stack = Stack(SOAK_NODES, faults=faults, watch_drop_seconds=watch_drop_seconds, workdir=workdir, keep=keep)
    jis, dss = Tracker(), Tracker()
    watches: list[Watch] = []
    kills: list[str] = []
    async with stack.running(watches):
        await stack.wait_linked()
        for m in ji_models():
            await stack.create(m)
        files: dict[str, Path] = {}
        for node in SOAK_NODES:
            for i in range(datasets_per_node):
                name = f"ds-{node}-{i}"
                path = stack.lcs[node].rootfs / "data" / f"{name}.txt"
                _write(path, "".join(f"images/{k}.jpg {k % 2}\n" for k in range(100)))
                files[name] = path
                await stack.create(dataset_object(name, node, f"/data/{name}.txt"))
        team: list[Worker] = []
        for i in range(workers):
            node = SOAK_NODES[i % len(SOAK_NODES)]
            ji = f"soak-{i}"
            await stack.create(ji_object(ji, node))
            team.append(Worker(stack, node, f"{ji}-edge", ji, jis))
        watches = [Watch(stack, JI_PLURAL, lambda o, t: jis.observe(o["metadata"]["name"], ji_value(o), t)).start(),
                   Watch(stack, DS_PLURAL, lambda o, t: dss.observe(o["metadata"]["name"], ds_value(o), t)).start()]
        say(f"soak: {workers} workers, {len(files)} Datasets, {seconds:g} s, logs in {stack.dir}")

        start = time.perf_counter()
        each = rate / workers

        async def work(i: int, w: Worker) -> None:
            await asyncio.sleep(i / rate)  # spread the workers' phases
            await w.paced(each, seconds - i / rate, retry_for=30.0)

        async def grow() -> int:
            changes, k = 0, 0
            while time.perf_counter() - start < seconds - 1:
                await asyncio.sleep(1.0)
                name = sorted(files)[k % len(files)]
                k += 1
                _write(files[name], "".join(f"images/x{k}-{j}.jpg 0\n" for j in range(1 + k % 5)), "a")
                changes += 1
            return changes

        async def chaos() -> None:
            n = 0
            while True:  # the n-th kill at (n+1) * kill_every s, or as soon as the previous one is back
                await asyncio.sleep(max(0.0, (n + 1) * kill_every - (time.perf_counter() - start)))
                if time.perf_counter() - start >= seconds - 2:
                    return
                target = kill_order[n % len(kill_order)]
                n += 1
                at = time.perf_counter() - start
                await stack.kill_and_restart(target, restart_delay)
                kills.append(f"{target} at {at:.0f}s (back after {time.perf_counter() - start - at:.1f}s)")
                say(f"soak: killed and restarted {kills[-1]}")

        chaos_task = asyncio.create_task(chaos()) if kill_every else None
        results = await asyncio.gather(grow(), *(work(i, w) for i, w in enumerate(team)))
        if chaos_task is not None:
            chaos_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await chaos_task
            for proc in (stack.gm, *(lc.proc for lc in stack.lcs.values())):
                proc.held = False  # the supervisor starts what the cancelled restart left down
        stopped = time.perf_counter()
        say(f"soak: load stopped after {stopped - start:.0f} s; waiting up to {wait:g} s for it to settle")

        async def drained() -> float | None:
            while time.perf_counter() - stopped < wait:
                sizes = [await stack.outbox_size(n) for n in SOAK_NODES]
                if all(s == 0 for s in sizes):
                    return time.perf_counter() - stopped
                await asyncio.sleep(0.2)
            return None

        async def datasets_exact() -> float | None:
            while time.perf_counter() - stopped < wait:
                if all(dss.track(n).last == count_lines(p) for n, p in files.items()):
                    return time.perf_counter() - stopped
                await asyncio.sleep(0.2)
            return None

        async def all_visible() -> float | None:
            want = {w.ji: w.last_ok for w in team if w.last_ok is not None}
            done = await jis.wait_visible(want, wait)
            return None if done is None else done - stopped

        drain_s, ds_s, vis_s = await asyncio.gather(drained(), datasets_exact(), all_visible())
        await asyncio.sleep(1.0)  # a last look for late regressions
        ok = [r for r in jis.all_reports() if r.ok]
        seen = {k: t.seen for k, t in jis.tracks.items()}
        by_report = {id(r): k for k, t in jis.tracks.items() for r in t.reports}
        p50, p99 = quantiles(latencies_ms(ok))
        return SoakResult(
            seconds=seconds, workers=workers, reports_ok=len(ok),
            reports_failed_posts=sum(w.failed_posts for w in team), lag_p50_ms=p50, lag_p99_ms=p99,
            lost=sum(1 for r in ok if r.t_visible is None),
            never_seen=sum(1 for r in ok if r.value not in seen[by_report[id(r)]]),
            regressions=jis.regressions() + dss.regressions(), drain_seconds=drain_s,
            outboxes_left={n: await stack.outbox_size(n) for n in SOAK_NODES}, visible_seconds=vis_s,
            datasets_exact_seconds=ds_s,
            datasets_wrong={n: (dss.track(n).last, count_lines(p)) for n, p in files.items()
                            if dss.track(n).last != count_lines(p)},
            kills=kills, crashes=list(stack.crashes), dataset_changes=results[0],
            watch_resumes=sum(w.rewatches + w.relists for w in watches) - len(watches), log_dir=str(stack.dir))
