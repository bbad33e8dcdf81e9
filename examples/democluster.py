"""What examples/demo.py drives, as a user reaches it: `make run` as a process, the API server
over HTTPS, kubectl, and the LocalControllers' worker API.

`DevRun` starts examples/devrun.py (the dev cluster, the GM and an LC per node, as `make run`
does) with a state directory of its own and free ports, and reads where everything listens
from the banner it prints. `Api` reads objects with the kubeconfig's token (the demo's polls:
cheaper than a kubectl process per look); `kubectl` runs the real kubectl for what a user
types; `post_report` is a worker's `POST /sedna/workers/<name>/info`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEVRUN = ROOT / "examples" / "devrun.py"
KUBECTL = os.environ.get("KUBECTL", "kubectl")
BANNER_END = "Ctrl-C to stop."
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=10)
KUBECTL_TIMEOUT = 30.0
_LC_LINE = re.compile(r"(\S+) (http://\S+?)(?:,|$)")


class Failed(Exception):
    """A scenario did not hold; the message is the table's short reason (one line)."""

    def __init__(self, reason: str) -> None:
        super().__init__(" ".join(reason.split()))


@dataclass(frozen=True)
class Endpoints:
    """Where the run listens, from devrun's banner."""

    kubeconfig: Path
    lcs: dict[str, str]  # node -> LC base URL


def parse_banner(text: str) -> Endpoints:
    """The kubeconfig and the LCs' URLs from what devrun prints (its `banner`)."""
    kubeconfig = re.search(r"export KUBECONFIG=(\S+)", text)
    lcs = re.search(r"^LCs\s+(.+)$", text, re.MULTILINE)
    if kubeconfig is None or lcs is None:
        raise OSError(f"devrun printed no kubeconfig or LCs:\n{text}")
    return Endpoints(Path(kubeconfig.group(1)), dict(_LC_LINE.findall(lcs.group(1))))


class DevRun:
    """examples/devrun.py --no-examples as a child process, on free ports, its files in `state`."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.log = state / "devrun.log"
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Endpoints:
        self.state.mkdir(parents=True, exist_ok=True)
        with open_log(self.log) as log:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, str(DEVRUN), "--no-examples", "--gm-port", "0", "--lc-port", "0",
                "--state", str(self.state), cwd=ROOT, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=log)
        return parse_banner(await self._banner())

    async def _banner(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        lines: list[str] = []
        try:
            async with asyncio.timeout(START_TIMEOUT):
                while not lines or BANNER_END not in lines[-1]:
                    line = (await self._proc.stdout.readline()).decode()
                    if not line:
                        raise OSError(f"devrun exited ({await self._proc.wait()}) before it was up; see {self.log}")
                    lines.append(line)
        except TimeoutError:
            raise OSError(f"devrun not up within {START_TIMEOUT:.0f}s; see {self.log}") from None
        return "".join(lines)

    async def stop(self) -> int | None:
        """Ctrl-C, as a user stops `make run`; SIGKILL if it does not end in time."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(signal.SIGINT)
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                return await proc.wait()
        except TimeoutError:
            proc.kill()
            return await proc.wait()


def open_log(path: Path) -> BinaryIO:
    return open(path, "wb")  # the child writes to it; this process only hands it over


def _kubeconfig(path: Path) -> tuple[str, ssl.SSLContext, str]:
    """(server, TLS context trusting the cluster's CA, bearer token) of the kubeconfig."""
    config = yaml.safe_load(path.read_text())
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return cluster["server"], context, config["users"][0]["user"].get("token", "")


class Api:
    """GETs against the API server, as the kubeconfig's user."""

    def __init__(self, kubeconfig: Path) -> None:
        self.server, self._tls, token = _kubeconfig(kubeconfig)
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT,
            connector=aiohttp.TCPConnector(ssl=self._tls))

    async def close(self) -> None:
        await self._session.close()

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, or None when there is none (404)."""
        async with self._session.get(self.server + path) as resp:
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise Failed(f"GET {path}: HTTP {resp.status}")
            return await resp.json()

    async def items(self, namespace: str, resource: str) -> list[dict[str, Any]]:
        """Every `resource` (pods, services, deployments, replicasets) in the namespace."""
        group = "/apis/apps/v1" if resource in ("deployments", "replicasets") else "/api/v1"
        found = await self.get(f"{group}/namespaces/{namespace}/{resource}")
        return (found or {}).get("items") or []


async def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    """Run the real kubectl against the run's cluster; its stdout, or Failed with its stderr."""
    cache = kubeconfig.parent / "kubectl-cache"
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(KUBECTL_TIMEOUT):
            out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise Failed(f"kubectl {args[0]} timed out") from None
    if proc.returncode != 0:
        raise Failed(f"kubectl {' '.join(args[:2])}: {err.decode().strip()[:160]}")
    return out.decode()


async def post_report(session: aiohttp.ClientSession, lc: str, body: dict[str, Any]) -> None:
    """A worker's report to the LC of its node; Failed unless the LC answers 200."""
    url = f"{lc}/sedna/workers/{body['name']}/info"
    async with session.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"},
                            timeout=REQUEST_TIMEOUT) as resp:
        if resp.status != 200:
            raise Failed(f"the LC answered {resp.status}: {(await resp.text())[:120]}")


async def poll(probe: Callable[[], Awaitable[Any]], what: str, *, within: float, every: float = 0.3) -> Any:
    """The first truthy value of `probe` within `within` seconds; Failed("no <what> ...") after."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() > deadline:
            raise Failed(f"no {what} within {within:.0f}s")
        await asyncio.sleep(every)


async def quiet(probe: Callable[[], Awaitable[Any]], *, lasting: float, every: float = 0.5) -> Any:
    """Keep looking for `lasting` seconds; the first truthy value of `probe` (something that must
    not happen), or None if it never showed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lasting
    while loop.time() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(every)
    return None

