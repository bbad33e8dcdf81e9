"""Running the status path from outside: the dev cluster, the GM and the LCs as processes, and the objects.

The dev cluster, the GM and every LC run as their own processes (`sedna-devcluster`,
`sedna-gm`, `sedna-lc`, started with PYTHONPATH set to this checkout so the code measured is
the code next to this file); this process plays the workers (HTTP POSTs to an LC) and the
observer (a list+watch on the dev cluster, as `kubectl get -w` would do). Nothing here reads
the services' internals: what counts is what a watch of the API server shows.

The bookkeeping, the workers, the watches and the soak are in bench/status_watch.py.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import orjson
import yaml

from shared.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = ROOT / "charts" / "sedna" / "crds"
NS = "default"
GROUP = "/apis/sedna.io/v1alpha1"
JI_PLURAL = "jointinferenceservices"
DS_PLURAL = "datasets"
HEADERS = {"Content-Type": "application/json"}


def _program(name: str, module: str) -> list[str]:
    """The console script next to this interpreter (as installed), else `python -m`."""
    script = Path(sys.executable).parent / name
    return [str(script)] if os.access(script, os.X_OK) else [sys.executable, "-m", module]


def _open_log(path: Path):
    return open(path, "ab")  # handed to the child; closed by Proc.start


def write_text(path: Path, text: str, mode: str = "w") -> None:
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


class Stoppable(Protocol):
    """What `Stack.running` stops on the way out besides the processes (a watch, say)."""

    async def stop(self) -> None: ...


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
        write_text(self.dir / "gm.yaml", f"kubeConfig: {self.kubeconfig}\n"
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
    async def running(self, watches: list[Stoppable]) -> AsyncIterator[Stack]:
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
        """`sedna_gm_api_requests_total` by (verb, code), `sedna_gm_hub_status_reports_total` by
        ("hub", result) and the buckets of `sedna_gm_status_pipeline_apply_seconds` by ("apply",
        le), from the GM's /metrics."""
        text = await self._text(f"{self.gm_url}/metrics")
        out: dict[tuple[str, ...], float] = {}
        for m in re.finditer(r'^(sedna_gm_api_requests_total|sedna_gm_hub_status_reports_total|'
                             r'sedna_gm_status_pipeline_apply_seconds_bucket)\{([^}]*)\}\s+([0-9.e+]+)$',
                             text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            key = ((labels.get("verb", ""), labels.get("code", "")) if m.group(1) == "sedna_gm_api_requests_total"
                   else ("hub", labels.get("result", "")) if m.group(1) == "sedna_gm_hub_status_reports_total"
                   else ("apply", labels.get("le", "")))
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
