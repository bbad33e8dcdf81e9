"""Process runtime: run a pod's container as a local subprocess (`--process-runtime`).

The image map (YAML or JSON) says which images run locally and how:

    sedna/sim-worker:v1: ["python", "-m", "examples.workers.sim"]
    sedna/other:v2:
      command: ["python", "-m", "examples.workers.other"]
      args: append        # append (default) | ignore
      cwd: /path/to/dir   # default: the dev cluster's working directory
      env: {EXTRA: "1"}
    sedna-py:0.1.0:
      command: ["python", "-m", "gm.cli"]
      programs:           # programs inside the image a container's `command` may name
        sedna-gm: ["python", "-m", "gm.cli"]
        sedna-lc: ["python", "-m", "lc.cli"]

How a container becomes a command line: the mapped command plays the image's entrypoint.
A container's `command` names a program inside the image, which does not exist locally: if
the entry maps that program (`programs`), the local command replaces it and the rest of the
container's `command` follows; otherwise the `command` is ignored. The container's `args`
are appended (unless the entry says `args: ignore`), as a container runtime appends `args`
to the entrypoint.

With a `Projector` (devcluster/runtime/projection.py) the runtime also gives the process what the
kubelet gives a container: its volumes as per-pod directories, the service-account mount,
KUBERNETES_SERVICE_HOST/PORT, and paths and Service names in its env and arguments
rewritten to what exists on this host. The process gets the dev cluster's
own environment (so PATH and PYTHONPATH work), then the entry's `env`, then the
container's resolved env (which includes NODE_NAME, POD_NAME, POD_NAMESPACE).

Only the first container of a pod is run; restarts follow `restartPolicy` with
exponential backoff; output (stdout and stderr together) is kept per pod, bounded.

Each pod's loop is a one-shot task under the dev cluster's `Supervisor` (component
`process-runtime`): a bug that ends it is logged and recorded as a crash, and the pod's
container shows as terminated with an Error (the process is killed), as a container
runtime failure would; it is not restarted, since restarts are the pod's restartPolicy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devcluster.controllers.meta import now_time
from devcluster.controllers.podstatus import ContainerRun
from devcluster.runtime.projection import Projector
from devcluster.supervisor import Supervised, Supervisor

log = logging.getLogger("devcluster.runtime")

DEFAULT_LOG_LIMIT = 1 << 20
MAX_RETIRED = 256  # finished pods whose logs stay readable


class ImageMapError(ValueError):
    """The image map file is unreadable or has a malformed entry."""


@dataclass(frozen=True, slots=True)
class ImageEntry:
    command: tuple[str, ...]
    append_args: bool = True
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    programs: dict[str, tuple[str, ...]] = field(default_factory=dict)


def parse_image_map(data: Any) -> dict[str, ImageEntry]:
    """Validate a decoded image map: image -> command list or entry mapping."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ImageMapError("image map must be a mapping of image -> command")
    return {str(image): _entry(str(image), raw) for image, raw in data.items()}


def _entry(image: str, raw: Any) -> ImageEntry:
    if isinstance(raw, list):
        raw = {"command": raw}
    if not isinstance(raw, dict):
        raise ImageMapError(f"{image}: expected a command list or a mapping")
    cmd = raw.get("command")
    if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
        raise ImageMapError(f"{image}: command must be a non-empty list of strings")
    mode = raw.get("args", "append")
    if mode not in ("append", "ignore"):
        raise ImageMapError(f"{image}: args must be 'append' or 'ignore', not {mode!r}")
    env = raw.get("env") or {}
    if not isinstance(env, dict):
        raise ImageMapError(f"{image}: env must be a mapping")
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ImageMapError(f"{image}: cwd must be a string")
    return ImageEntry(tuple(cmd), mode == "append", cwd, {str(k): str(v) for k, v in env.items()},
                      _programs(image, raw.get("programs")))


def _programs(image: str, raw: Any) -> dict[str, tuple[str, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ImageMapError(f"{image}: programs must map a program name to a command list")
    out = {}
    for name, cmd in raw.items():
        if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise ImageMapError(f"{image}: programs.{name} must be a non-empty list of strings")
        out[str(name)] = tuple(cmd)
    return out


def load_image_map(path: str | os.PathLike[str]) -> dict[str, ImageEntry]:
    """Read an image map from a YAML or JSON file."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ImageMapError(f"cannot read image map {path}: {err}") from err
    try:
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        raise ImageMapError(f"cannot parse image map {path}: {err}") from err
    return parse_image_map(data)


def command_line(entry: ImageEntry, container: dict[str, Any]) -> list[str]:
    """The local argv for a container (see the module docstring)."""
    command = [str(a) for a in container.get("command") or []]
    program = entry.programs.get(command[0]) if command else None
    argv = [*program, *command[1:]] if program is not None else list(entry.command)
    if entry.append_args:
        argv += [str(a) for a in container.get("args") or []]
    return argv


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


class LogBuffer:
    """The last `limit` bytes of a process's output."""

    __slots__ = ("_buf", "_limit")

    def __init__(self, limit: int = DEFAULT_LOG_LIMIT):
        self._buf = bytearray()
        self._limit = limit

    def write(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) > self._limit:
            del self._buf[: len(self._buf) - self._limit]

    def getvalue(self) -> bytes:
        return bytes(self._buf)


@dataclass
class _PodProcess:
    uid: str
    namespace: str
    name: str
    container: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    restart_policy: str
    run: ContainerRun = field(default_factory=lambda: ContainerRun(state="waiting"))
    log: LogBuffer = field(default_factory=LogBuffer)
    proc: asyncio.subprocess.Process | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    kill_timer: asyncio.TimerHandle | None = None
    supervised: Supervised | None = None

    @property
    def task(self) -> asyncio.Task | None:
        return self.supervised.task if self.supervised is not None else None


class ProcessRuntime:
    """Runs mapped images as local processes and reports their state to the kubelet."""

    def __init__(self, image_map: dict[str, ImageEntry], *, supervisor: Supervisor,
                 on_change: Callable[[str, str], None] | None = None,
                 log_limit: int = DEFAULT_LOG_LIMIT, backoff_base: float = 0.5, backoff_max: float = 10.0,
                 projector: Projector | None = None):
        self.image_map = image_map
        self.projector = projector  # volumes, service-account mount, API address; None = env only
        self.supervisor = supervisor
        self.on_change = on_change or (lambda ns, name: None)
        self.log_limit = log_limit
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._pods: dict[str, _PodProcess] = {}  # pod uid -> process record
        self._by_name: dict[tuple[str, str], str] = {}  # (ns, name) -> latest uid, for logs
        # finished pods by name, so `kubectl logs` works after the process ended; bounded
        self._retired: dict[tuple[str, str], _PodProcess] = {}

    def handles(self, pod: dict[str, Any]) -> bool:
        containers = pod.get("spec", {}).get("containers") or []
        return bool(containers) and containers[0].get("image") in self.image_map

    def state(self, uid: str) -> ContainerRun | None:
        pp = self._pods.get(uid)
        return pp.run if pp else None

    def running(self, uid: str) -> bool:
        pp = self._pods.get(uid)
        return pp is not None and pp.task is not None and not pp.task.done()

    def uids(self) -> list[str]:
        return list(self._pods)

    def start(self, pod: dict[str, Any], env: dict[str, str]) -> None:
        """Start the pod's first container; a no-op if it was started before.

        Raises `ProjectionError` (an `EnvError`) when a volume cannot be projected."""
        meta = pod["metadata"]
        if meta["uid"] in self._pods:
            return
        c = pod["spec"]["containers"][0]
        entry = self.image_map[c["image"]]
        argv, full_env = self._process_view(pod, c, command_line(entry, c), {**entry.env, **env})
        pp = _PodProcess(
            uid=meta["uid"], namespace=meta["namespace"], name=meta["name"], container=c.get("name", ""),
            argv=argv, env=full_env, cwd=entry.cwd,
            restart_policy=pod["spec"].get("restartPolicy", "Always"), log=LogBuffer(self.log_limit),
        )
        self._pods[pp.uid] = pp
        self._by_name[(pp.namespace, pp.name)] = pp.uid
        pp.supervised = self.supervisor.spawn(
            f"pod:{pp.namespace}/{pp.name}@{pp.uid}", lambda: self._supervise(pp), component="process-runtime",
            restart=False, on_exit=lambda error, pp=pp: self._task_done(pp, error))

    def _process_view(self, pod: dict[str, Any], container: dict[str, Any], argv: list[str],
                      env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """argv and the full environment as the process must see them (see projection.py)."""
        if self.projector is None:
            return argv, {**os.environ, **env}
        projection = self.projector.prepare(pod, container)
        ns = pod["metadata"]["namespace"]

        def local(value: str) -> str:
            return projection.rewrite(self.projector.resolve(ns, value))  # type: ignore[union-attr]

        argv = [argv[0], *(local(a) for a in argv[1:])] if argv else argv
        own = {**projection.env, **{k: local(v) for k, v in env.items()}}
        return argv, {**os.environ, **own, **projection.process_env()}

    def node_root(self, node: str) -> str | None:
        """The host directory playing `node`'s root filesystem (None without a projector)."""
        return str(self.projector.node_root(node)) if self.projector is not None else None

    def stop(self, uid: str, grace: float) -> None:
        """SIGTERM the process now and SIGKILL it after `grace` seconds; no more restarts."""
        pp = self._pods.get(uid)
        if pp is None or pp.stop.is_set():
            return
        pp.stop.set()
        if pp.proc is not None and pp.proc.returncode is None:
            _signal(pp.proc, signal.SIGTERM)
            pp.kill_timer = asyncio.get_running_loop().call_later(
                max(0.0, grace), _signal, pp.proc, signal.SIGKILL)

    def forget(self, uid: str) -> None:
        """Drop a finished pod's record (its logs stay until the name is reused)."""
        pp = self._pods.get(uid)
        if pp is not None and (pp.task is None or pp.task.done()):
            del self._pods[uid]
            if self.projector is not None:
                self.projector.release(uid)

    def logs(self, namespace: str, name: str, container: str | None = None) -> bytes | None:
        """Output of the pod's process, or None if this runtime never ran that pod."""
        uid = self._by_name.get((namespace, name))
        pp = self._pods.get(uid or "") or self._retired.get((namespace, name))
        if pp is None or (container and container != pp.container):
            return None
        return pp.log.getvalue()

    async def close(self, wait: float = 5.0) -> None:
        """Kill every process and wait for the supervisors."""
        for uid in list(self._pods):
            self.stop(uid, 0)
        tasks = [pp.task for pp in self._pods.values() if pp.task is not None and not pp.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=wait)
        for pp in list(self._pods.values()):
            if pp.supervised is not None:
                await pp.supervised.stop()

    # -- internals ------------------------------------------------------------------

    def _task_done(self, pp: _PodProcess, error: BaseException | None) -> None:
        """The pod's loop is over (the supervisor already logged and recorded a crash)."""
        if error is not None:
            if pp.proc is not None:
                _signal(pp.proc, signal.SIGKILL)  # nothing watches it any more
            pp.run = ContainerRun(state="terminated", exit_code=128, reason="Error",
                                  message=str(error), restart_count=pp.run.restart_count)
        if pp.kill_timer is not None:
            pp.kill_timer.cancel()
        self._retired.pop((pp.namespace, pp.name), None)
        self._retired[(pp.namespace, pp.name)] = pp
        while len(self._retired) > MAX_RETIRED:
            del self._retired[next(iter(self._retired))]
        self.on_change(pp.namespace, pp.name)

    def _set(self, pp: _PodProcess, run: ContainerRun) -> None:
        pp.run = run
        self.on_change(pp.namespace, pp.name)

    async def _supervise(self, pp: _PodProcess) -> None:
        restarts = 0
        last: ContainerRun | None = None
        while True:
            started = now_time()
            code, message = await self._run_once(pp, restarts, last, started)
            finished = now_time()
            if pp.stop.is_set() or not should_restart(pp.restart_policy, code):
                self._set(pp, ContainerRun(
                    state="terminated", exit_code=code, reason="Completed" if code == 0 else "Error",
                    started_at=started, finished_at=finished, restart_count=restarts, message=message))
                return
            delay = min(self.backoff_max, self.backoff_base * (2**restarts))
            last = ContainerRun(state="terminated", exit_code=code, started_at=started, finished_at=finished)
            restarts += 1
            self._set(pp, ContainerRun(
                state="waiting", reason="CrashLoopBackOff", restart_count=restarts, last_exit_code=code,
                last_started_at=started, last_finished_at=finished,
                message=f"back-off {delay:g}s restarting failed container={pp.container} pod={pp.name}"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pp.stop.wait(), delay)

    async def _run_once(self, pp: _PodProcess, restarts: int, last: ContainerRun | None,
                        started: str) -> tuple[int, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *pp.argv, env=pp.env, cwd=pp.cwd, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as err:
            pp.log.write(f"failed to start {pp.argv!r}: {err}\n".encode())
            return 128, f"failed to start container process: {err}"
        pp.proc = proc
        self._set(pp, ContainerRun(
            state="running", started_at=started, restart_count=restarts,
            last_exit_code=last.exit_code if last else None,
            last_started_at=last.started_at if last else None,
            last_finished_at=last.finished_at if last else None))
        if pp.stop.is_set():  # deleted while starting
            _signal(proc, signal.SIGTERM)
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            pp.log.write(chunk)
        code = await proc.wait()
        return (128 - code if code < 0 else code), ""


def _signal(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    """Signal the process group (the process started its own session)."""
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
