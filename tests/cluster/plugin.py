"""The two clusters of the cluster tier, as one parametrized fixture: `target` is "dev" (a
`sedna-devcluster` process over HTTPS) or "real" (kube-apiserver, kube-controller-manager,
kube-scheduler, etcd and kwok of scripts/kube_real.py), each with the same three nodes:
`edge-node-1` and `edge-node-2` (label and NoSchedule taint `node-role.kubernetes.io/edge`)
and `cloud-node`. The same test body runs on both; a difference fails one of the two ids.

Registered for the whole suite by tests/conftest.py (`pytest_plugins`), so the conformance
suite can use it too. Both clusters start once per pytest session, at collection, in the
background, and stop at the end of the session whatever the outcome (also on Ctrl-C or SIGTERM);
the tests on them run last (the dev cluster's, then those with the `real_cluster` mark), so that
the rest of the run overlaps their start.

The real cluster: `make test` builds the binaries first (`make kube-build`). This fixture starts
a cluster of its own in `.kube-test/<pid>/` (never the `make kube-up` one of `.kube-real/`),
and at start stops any cluster a killed earlier run left behind. `SEDNA_REAL_KUBECONFIG=<file>`
uses an existing cluster instead (for instance `.kube-real/kubeconfig` of `make kube-up`, or a
k3s/kind kubeconfig; its user must be able to create CRDs and namespaces). When the binaries
are missing the real tests fail with one message saying how to build them; deselect them with
`-m "not real_cluster"` to run only the dev half.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.starting import Starting

ROOT = Path(__file__).resolve().parents[2]
KUBE_REAL = ROOT / "scripts" / "kube_real.py"
TIER_STATE = ROOT / ".kube-test"
CRD_DIR = ROOT / "charts" / "sedna" / "crds"
KUBECTL = os.environ.get("KUBECTL", "/usr/bin/kubectl")
NODES = ("edge-node-1", "edge-node-2", "cloud-node")
EDGE_ROLE = "node-role.kubernetes.io/edge"
KUBECTL_TIMEOUT = 120.0
START_TIMEOUT = 180.0
GC_PROBE_TIMEOUT, PROBE_ROUND = 150.0, 10.0
REAL_MARK = "real_cluster"

HOW = """the real control plane of the cluster tier is not built.
`make test` builds it first (make kube-build: Go >= 1.26 and the Go module proxy; about 18 min on
2 cores the first time, then a no-op), or build it yourself and rerun:
    make kube-build
To run only the dev-cluster half: pytest -m "not real_cluster".
scripts/kube_real.py said:
"""


class ClusterUnavailable(Exception):
    """The cluster could not be started; the message says why and how to get one."""


@dataclass
class Cluster:
    """One cluster of the tier: its name ("dev" | "real"), kubeconfig and what the tests may
    assume about it."""

    name: str
    kubeconfig: Path
    home: Path  # a directory of its own: kubectl's cache, logs
    logs: str = ""  # where to look when something failed
    nodes: tuple[str, ...] = NODES
    edge_nodes: tuple[str, ...] = ("edge-node-1", "edge-node-2")
    crds: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.name

    async def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                      within: float = KUBECTL_TIMEOUT) -> str:
        """The real kubectl against this cluster: stdout, or AssertionError with stderr when `check`."""
        rc, out, err = await run_kubectl(self, *args, stdin=stdin, within=within)
        if check and rc:
            raise AssertionError(f"[{self.name}] kubectl {' '.join(args)}: {err.strip()}")
        return out

    async def get_json(self, *args: str) -> dict:
        return json.loads(await self.kubectl("get", *args, "-o", "json"))


async def run_kubectl(c: Cluster, *args: str, stdin: str | None = None,
                      within: float = KUBECTL_TIMEOUT) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, f"--kubeconfig={c.kubeconfig}", f"--cache-dir={c.home / 'kube-cache'}", *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": str(c.kubeconfig), "HOME": str(c.home)})
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"[{c.name}] kubectl {' '.join(args)} did not finish in {within}s") from None
    return proc.returncode or 0, out.decode(), err.decode()


def _kubectl_sync(c: Cluster, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([KUBECTL, f"--kubeconfig={c.kubeconfig}", f"--cache-dir={c.home / 'kube-cache'}", *args],
                          input=stdin, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT,
                          env={**os.environ, "KUBECONFIG": str(c.kubeconfig), "HOME": str(c.home)})
    if proc.returncode:
        raise ClusterUnavailable(f"[{c.name}] kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _apply_crds(c: Cluster) -> None:
    """The chart's CRDs, applied as a user applies them, and Established."""
    _kubectl_sync(c, "apply", "--server-side", "--force-conflicts", "--field-manager=sedna-cluster-tier",
                  "-f", str(CRD_DIR))
    names = [json.loads(_kubectl_sync(c, "create", "--dry-run=client", "-o", "json", "-f", str(f)))["metadata"]["name"]
             for f in sorted(CRD_DIR.glob("*.yaml"))]
    _kubectl_sync(c, "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))
    c.crds = names
    _wait_for_gc_to_know_the_kinds(c)


def _probe_owners() -> list[dict]:
    """One object of every Sedna kind (the kind cases' manifests and their Models and Datasets)."""
    from tests.e2e.test_kinds import _cases

    owners: dict[tuple[str, str], dict] = {}
    for case in _cases():
        for obj in (*case.prerequisites, case.manifest):
            owners.setdefault((obj["kind"], obj["metadata"]["name"]), obj)
    return list(owners.values())


def _yaml_stream(objs: list[dict]) -> str:
    """Documents for `kubectl -f -` (a `kind: List` would make kubectl validate against
    /openapi/v2 in protobuf, which the dev cluster does not serve)."""
    return "---\n".join(yaml.safe_dump(o) for o in objs)


def _json_stream(text: str) -> list[dict]:
    """What `kubectl create -o json` prints for several objects: one JSON document after another."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        obj, at = decoder.raw_decode(text, at)
        out.append(obj)
    return out


def _wait_for_gc_to_know_the_kinds(c: Cluster) -> None:
    """Until the cluster's garbage collector cascades the delete of every Sedna kind at once.

    kube-controller-manager's garbage collector learns resource types from discovery every 30 s:
    for up to that long after the CRDs are created it does not see a CR's delete, and its
    children stay. A probe round creates one CR of each kind (no GM runs, so no children of
    their own) with a ConfigMap each owns, deletes the CRs and waits for the ConfigMaps; rounds
    repeat until one is cascaded within PROBE_ROUND seconds. The dev cluster passes the first."""
    ns = f"gc-probe-{uuid.uuid4().hex[:6]}"
    _kubectl_sync(c, "create", "namespace", ns)
    deadline = time.monotonic() + GC_PROBE_TIMEOUT
    try:
        for round_ in range(1000):
            started = time.monotonic()
            owners = []
            for obj in _probe_owners():
                obj = json.loads(json.dumps(obj))
                obj["metadata"] = {"name": f"{obj['metadata']['name']}-p{round_}", "namespace": ns}
                owners.append(obj)
            created = _json_stream(_kubectl_sync(c, "create", "-o", "json", "-f", "-", stdin=_yaml_stream(owners)))
            deps = [{"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": f"dep-{i}-p{round_}", "namespace": ns, "labels": {"probe": str(round_)},
                                  "ownerReferences": [{"apiVersion": o["apiVersion"], "kind": o["kind"],
                                                       "name": o["metadata"]["name"], "uid": o["metadata"]["uid"],
                                                       "controller": True, "blockOwnerDeletion": True}]}}
                    for i, o in enumerate(created)]
            _kubectl_sync(c, "create", "-f", "-", stdin=_yaml_stream(deps))
            _kubectl_sync(c, "delete", "--wait=false", "-n", ns,
                          *(f"{o['kind'].lower()}.sedna.io/{o['metadata']['name']}" for o in created))
            while True:
                left = _kubectl_sync(c, "get", "configmaps", "-n", ns, "-l", f"probe={round_}", "-o", "name").split()
                if not left:
                    break
                if time.monotonic() > deadline:
                    raise ClusterUnavailable(
                        f"[{c.name}] the garbage collector did not delete the children of deleted Sedna objects "
                        f"within {GC_PROBE_TIMEOUT:.0f}s (left: {left}); see {c.logs}")
                time.sleep(0.2)
            if time.monotonic() - started < PROBE_ROUND:
                return
    finally:
        _kubectl_sync(c, "delete", "namespace", ns, "--wait=false")


# -- the dev cluster ------------------------------------------------------------------------------


@contextlib.contextmanager
def dev_cluster_process(home: Path) -> Iterator[Cluster]:
    """`sedna-devcluster` over HTTPS on a free port, its edge nodes tainted as the real ones are."""
    home.mkdir(parents=True, exist_ok=True)
    kubeconfig, log = home / "kubeconfig", home / "devcluster.log"
    kubeconfig.unlink(missing_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "devcluster.cli", "--port", "0", "--kubeconfig", str(kubeconfig),
             "--pki-dir", str(home / "pki"), "--nodes", ",".join(NODES), "--start-delay", "0",
             "--termination-delay", "0", "--log-level", "WARNING"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (kubeconfig.is_file() and b"devcluster serving" in log.read_bytes()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ClusterUnavailable(f"sedna-devcluster did not come up (exit {proc.poll()}); {log}:\n"
                                         + log.read_text(errors="replace")[-3000:])
            time.sleep(0.05)
        c = Cluster("dev", kubeconfig, home, logs=str(log))
        for node in c.edge_nodes:  # as scripts/kube_real.py registers them (KubeEdge's edge nodes)
            _kubectl_sync(c, "taint", "node", node, f"{EDGE_ROLE}=:NoSchedule", "--overwrite")
        _apply_crds(c)
        yield c
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the real cluster -----------------------------------------------------------------------------


def _kube_real(state: Path, *args: str, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(KUBE_REAL), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "KUBE_REAL_STATE": str(state)}, cwd=ROOT)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_left_over() -> None:
    """Stop the clusters of earlier runs whose pytest is gone (killed before its teardown)."""
    if not TIER_STATE.is_dir():
        return
    for run in TIER_STATE.iterdir():
        if not run.is_dir() or not run.name.isdigit() or _alive(int(run.name)):
            continue
        _kube_real(run, "down", timeout=60)
        shutil.rmtree(run, ignore_errors=True)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) ends the run like Ctrl-C, so the teardown stops the cluster."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def real_cluster_processes() -> Iterator[Cluster]:
    existing = os.environ.get("SEDNA_REAL_KUBECONFIG")
    if existing:
        path = Path(existing).resolve()
        if not path.is_file():
            raise ClusterUnavailable(f"SEDNA_REAL_KUBECONFIG={existing}: no such file")
        home = TIER_STATE / f"external-{os.getpid()}"
        home.mkdir(parents=True, exist_ok=True)
        c = Cluster("real", path, home, logs=f"the cluster of {path}")
        _check_nodes(c)
        _apply_crds(c)
        try:
            yield c
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return
    TIER_STATE.mkdir(exist_ok=True)
    (TIER_STATE / ".gitignore").write_text("*\n")
    reap_left_over()
    state = TIER_STATE / str(os.getpid())
    with _sigterm_as_interrupt():
        started = _kube_real(state, "up")
        try:
            if started.returncode:
                text = (started.stdout + started.stderr).strip()
                if "missing or stale" in text:
                    raise ClusterUnavailable(HOW + text)
                raise ClusterUnavailable(f"scripts/kube_real.py up failed (logs in {state / 'logs'}):\n{text}")
            c = Cluster("real", state / "kubeconfig", state, logs=str(state / "logs"))
            _check_nodes(c)
            _apply_crds(c)
            yield c
        finally:
            _kube_real(state, "down", timeout=60)
            if not os.environ.get("SEDNA_KEEP_CLUSTER_LOGS"):
                shutil.rmtree(state, ignore_errors=True)


def _check_nodes(c: Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in json.loads(_kubectl_sync(c, "get", "nodes", "-o", "json"))["items"]}
    missing = [n for n in NODES if n not in nodes]
    if missing:
        raise ClusterUnavailable(f"the real cluster has no node(s) {missing}: the tier needs {', '.join(NODES)}")


# -- fixtures -------------------------------------------------------------------------------------


_STARTED = pytest.StashKey[dict]()


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", f"{REAL_MARK}: runs on the real control plane (scripts/kube_real.py)")
    config.stash[_STARTED] = {}


def _start(config, name: str, factory) -> Starting[Cluster]:
    started = config.stash[_STARTED]
    if name not in started:
        if name == "real" and "sigterm" not in started:
            started["sigterm"] = _sigterm_as_interrupt()
            started["sigterm"].__enter__()
        # the real one: about 10 s, then up to 30 s until its garbage collector knows the CRDs
        started[name] = Starting(f"the {name} cluster of the cluster tier", factory, ClusterUnavailable,
                                 thread=f"start-{name}-cluster")
    return started[name]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    """Start the clusters now when a selected test needs them (tests/starting.py), and run those
    tests last, so that the rest of the run overlaps their start. A test needs the real one when it
    carries REAL_MARK (`target`'s "real", the conformance suite's "real" server, test_capture_diff),
    the dev one when it runs on `target` "dev" (or asks for `dev_cluster`)."""
    def on_real(item) -> bool:
        return item.get_closest_marker(REAL_MARK) is not None

    def on_dev(item) -> bool:
        on_target = bool(getattr(item, "callspec", None)) and item.callspec.params.get("target") == "dev"
        return not on_real(item) and (on_target or "dev_cluster" in item.fixturenames)
    real = [item for item in items if on_real(item)]
    dev = [item for item in items if on_dev(item)]
    items[:] = [item for item in items if not on_real(item) and not on_dev(item)] + dev + real
    if real:
        _start(config, "real", real_cluster_processes)
    if dev or any("dev_cluster" in item.fixturenames for item in real):
        home = Path(tempfile.mkdtemp(prefix="sedna-tier-dev-"))
        _start(config, "dev", lambda: _removed_after(home, dev_cluster_process(home)))


def pytest_unconfigure(config) -> None:
    """Stop what was started, whatever happened to the run."""
    started = config.stash.get(_STARTED, {})
    for name in ("real", "dev"):
        if name in started:
            started.pop(name).close()
    if "sigterm" in started:
        started.pop("sigterm").__exit__(None, None, None)


@contextlib.contextmanager
def _removed_after(home: Path, cluster: contextlib.AbstractContextManager[Cluster]) -> Iterator[Cluster]:
    """`cluster`, then its home removed (unless SEDNA_KEEP_CLUSTER_LOGS is set, as the real
    cluster's state): a temporary directory, as the cluster starts before any test's tmp_path."""
    try:
        with cluster as c:
            yield c
    finally:
        if not os.environ.get("SEDNA_KEEP_CLUSTER_LOGS"):
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def dev_cluster(request, tmp_path_factory) -> Cluster:
    """The dev cluster, started at collection (pytest_collection_modifyitems) when a test needs it."""
    home = tmp_path_factory.mktemp("devcluster")
    return _start(request.config, "dev", lambda: dev_cluster_process(home)).get()


@pytest.fixture(scope="session")
def real_cluster(request) -> Cluster:
    return _start(request.config, "real", real_cluster_processes).get()


@pytest.fixture(scope="session", params=["dev", pytest.param("real", marks=getattr(pytest.mark, REAL_MARK))])
def target(request) -> Cluster:
    """The cluster under test: the same body runs once on each."""
    return request.getfixturevalue(f"{request.param}_cluster")


@pytest.fixture
async def ns(target: Cluster) -> str:
    """A namespace of its own for the test (deleted at the end, without waiting), with its
    `default` ServiceAccount in place (pods cannot be created before it exists)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    await target.kubectl("create", "namespace", name)
    await target.kubectl("wait", "--for=create", "--timeout=60s", "serviceaccount/default", "-n", name)
    try:
        yield name
    finally:
        await target.kubectl("delete", "namespace", name, "--wait=false", check=False)
