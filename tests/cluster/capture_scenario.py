"""The scripted scenario the capture test runs through a `CaptureProxy`, once per cluster.

What the project's users and components send: kubectl as the tests and docs use it (create,
apply client- and server-side, get in every output, selectors, describe, the three patch types,
replace, label/annotate, scale, rollout status, wait, delete with each cascade mode, create token,
auth can-i, api-resources, explain, events), Helm installing, upgrading and uninstalling the chart
(a server dry run first), kubernetes_asyncio's typed calls and the GM's own client (list, watch
with bookmarks, status and event writes). Every step runs in namespaces named from one random
token (`Driver.ns`), which the diff replaces with `{ns}`.

The same kubectl binary talks to both clusters (the dispatcher on PATH would pick one per server
version, and the two would not send the same requests); it is started through a `kubectl` link,
so the field manager it derives from its name is the one users get.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.cluster.capture import CaptureProxy
from tests.cluster.capture_diff import Policy, Recording
from tests.cluster.plugin import KUBECTL, ROOT

CHART = ROOT / "charts" / "sedna"
COMMAND_TIMEOUT = 90.0
# the kubectl of every capture: a fixed minor, whichever server answers
KUBECTL_MINOR = os.environ.get("SEDNA_CAPTURE_KUBECTL_MINOR", "1.32")


def kubectl_binary() -> Path:
    """kubectl of KUBECTL_MINOR beside the dispatcher when there is one, else KUBECTL itself."""
    real = Path(KUBECTL).resolve()
    pinned = real.with_name(f"{real.name}.{KUBECTL_MINOR}")
    return pinned if pinned.is_file() else real


@dataclass
class Outcome:
    """What a client command ended with (kubectl, helm): its exit code and its warnings."""

    step: str
    command: str  # "kubectl get ...", without the kubeconfig and cache arguments
    rc: int
    warnings: list[str]
    stderr: str


@dataclass
class Driver:
    """The clients of one side of the capture, all through `proxy`."""

    proxy: CaptureProxy
    home: Path
    helm: Path | None
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def ns(self) -> str:
        return f"cap-{self.token}"

    @property
    def chart_ns(self) -> str:
        return f"cap-{self.token}-helm"

    @property
    def kubeconfig(self) -> Path:
        return self.home / "kubeconfig"

    def prepare(self) -> None:
        (self.home / "bin").mkdir(parents=True, exist_ok=True)
        link = self.home / "bin" / "kubectl"
        if not link.exists():
            link.symlink_to(kubectl_binary())
        self.proxy.write_kubeconfig(self.kubeconfig)

    async def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return await self._run(["kubectl", *args], str(self.home / "bin" / "kubectl"), f"--kubeconfig={self.kubeconfig}",
                               f"--cache-dir={self.home / 'kube-cache'}", *args, stdin=stdin, check=check)

    async def helm_cmd(self, *args: str, check: bool = True) -> str:
        assert self.helm is not None
        return await self._run(["helm", *args], str(self.helm), "--kubeconfig", str(self.kubeconfig), *args,
                               check=check)

    async def _run(self, command: list[str], *argv: str, stdin: str | None = None, check: bool = True) -> str:
        env = {**os.environ, "HOME": str(self.home), "KUBECONFIG": str(self.kubeconfig),
               "HELM_CACHE_HOME": str(self.home / "helm-cache"), "HELM_CONFIG_HOME": str(self.home / "helm-config"),
               "HELM_DATA_HOME": str(self.home / "helm-data")}
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None),
                                              COMMAND_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"{self.proxy.step}: {' '.join(command)} did not finish in {COMMAND_TIMEOUT}s") from None
        text = err.decode()
        self.outcomes.append(Outcome(self.proxy.step, " ".join(command), proc.returncode or 0,
                                     [line for line in text.splitlines() if line.startswith("Warning:")], text))
        if check and proc.returncode:
            raise AssertionError(f"{self.proxy.step}: {' '.join(command)} exited {proc.returncode}: {text[-2000:]}")
        return out.decode()


@dataclass(frozen=True)
class Step:
    """One step of the scenario: its name (the tag of its exchanges), what it runs, and how its
    exchanges are compared."""

    name: str
    run: Callable[[Driver], Awaitable[object]]
    policy: Policy = Policy()


def _docs(*objs: dict) -> str:
    return "---\n".join(yaml.safe_dump(o) for o in objs)


def _deployment(name: str, *, replicas: int = 2, image: str = "nginx:1.27") -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "main", "image": image,
                                                           "ports": [{"containerPort": 80}],
                                                           "resources": {"limits": {"cpu": "100m",
                                                                                    "memory": "64Mi"}}}]}}}}


def _service(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 80}]}}


def _dataset(name: str) -> dict:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": name},
            "spec": {"url": "/data/train.txt", "format": "txt", "nodeName": "edge-node-1"}}


# -- kubectl ----------------------------------------------------------------------------------------


async def create_namespace(d: Driver) -> None:
    await d.kubectl("create", "namespace", d.ns)


async def wait_namespace(d: Driver) -> None:
    await d.kubectl("wait", "--for=create", "--timeout=60s", "serviceaccount/default", "-n", d.ns)


async def create_typed(d: Driver) -> None:
    n = ("-n", d.ns)
    await d.kubectl("create", "configmap", "cm", "--from-literal=a=1", *n, "-o", "json")
    await d.kubectl("create", "secret", "generic", "s", "--from-literal=k=v", *n)
    await d.kubectl("create", "serviceaccount", "bot", *n)
    await d.kubectl("create", "role", "reader", "--verb=get,list", "--resource=pods", *n)
    await d.kubectl("create", "rolebinding", "bot-reader", "--role=reader", f"--serviceaccount={d.ns}:bot", *n)
    await d.kubectl("create", "deployment", "typed", "--image=nginx:1.27", "--replicas=1", *n, "-o", "yaml")


async def apply_client_side(d: Driver) -> None:
    manifest = _docs(_deployment("web"), _service("web"), {"apiVersion": "v1", "kind": "ConfigMap",
                                                          "metadata": {"name": "applied"}, "data": {"x": "1"}})
    await d.kubectl("apply", "-n", d.ns, "-f", "-", stdin=manifest)
    changed = _deployment("web")
    changed["metadata"]["annotations"] = {"note": "second"}
    await d.kubectl("apply", "-n", d.ns, "-f", "-", stdin=_docs(changed))


async def apply_server_side(d: Driver) -> None:
    await d.kubectl("apply", "--server-side", "--field-manager=capture", "-n", d.ns, "-f", "-",
                    stdin=_docs(_deployment("ssa", replicas=1), _dataset("ds1")))


async def rollout(d: Driver) -> None:
    for name in ("web", "ssa", "typed"):
        await d.kubectl("rollout", "status", f"deployment/{name}", "-n", d.ns, "--timeout=60s")
    await d.kubectl("wait", "--for=condition=Available", "deployment/web", "-n", d.ns, "--timeout=60s")


async def rollout_web(d: Driver) -> None:
    await d.kubectl("rollout", "status", "deployment/web", "-n", d.ns, "--timeout=60s")


async def get_outputs(d: Driver) -> None:
    n = ("-n", d.ns)
    for output in ("json", "yaml", "wide", "name"):
        await d.kubectl("get", "deployment", "web", *n, "-o", output)
    await d.kubectl("get", "pods", *n, "-l", "app=web")
    await d.kubectl("get", "pods", *n, "--field-selector=status.phase=Running", "-o", "wide")
    await d.kubectl("get", "svc,cm,sa", *n)
    await d.kubectl("get", "replicasets", *n, "-o", "json")
    await d.kubectl("get", "datasets", *n, "-o", "wide")
    await d.kubectl("get", "all", *n)
    await d.kubectl("get", "nodes", "-o", "name")


async def describe(d: Driver) -> None:
    await d.kubectl("describe", "deployment", "web", "-n", d.ns)
    await d.kubectl("describe", "pods", "-n", d.ns, "-l", "app=web")
    await d.kubectl("describe", "service", "web", "-n", d.ns)
    await d.kubectl("describe", "dataset", "ds1", "-n", d.ns)


async def patch(d: Driver) -> None:
    n = ("-n", d.ns)
    await d.kubectl("patch", "deployment", "web", *n, "--type=merge", "-p", '{"metadata":{"labels":{"m":"1"}}}')
    await d.kubectl("patch", "deployment", "web", *n, "--type=json",
                    "-p", '[{"op":"add","path":"/metadata/annotations/j","value":"1"}]')
    await d.kubectl("patch", "deployment", "web", *n,
                    "-p", '{"spec":{"template":{"spec":{"containers":[{"name":"main","env":[{"name":"E","value":"1"}]}]}}}}')
    await d.kubectl("patch", "dataset", "ds1", *n, "--type=merge", "-p", '{"spec":{"format":"csv"}}')
    await d.kubectl("patch", "configmap", "cm", *n, "--type=merge", "-p", '{"data":{"b":"2"}}', "--dry-run=server",
                    "-o", "json")


async def replace(d: Driver) -> None:
    cm = json.loads(await d.kubectl("get", "configmap", "cm", "-n", d.ns, "-o", "json"))
    cm["data"]["c"] = "3"
    await d.kubectl("replace", "-f", "-", stdin=json.dumps(cm))


async def label_annotate(d: Driver) -> None:
    n = ("-n", d.ns)
    await d.kubectl("label", "configmap", "cm", "tier=web", *n)
    await d.kubectl("label", "configmap", "cm", "tier=db", "--overwrite", *n)
    await d.kubectl("annotate", "configmap", "cm", "owner=team", *n)
    await d.kubectl("label", "configmap", "cm", "tier-", *n)
    await d.kubectl("get", "configmap", *n, "-l", "!tier", "-o", "name")


async def scale(d: Driver) -> None:
    await d.kubectl("scale", "deployment", "web", "--replicas=1", "-n", d.ns)


async def get_rolled_out(d: Driver) -> None:
    """After two rollouts and a scale: an old ReplicaSet with no pods, counters that are zero."""
    await d.kubectl("get", "deployment", "web", "-n", d.ns, "-o", "json")
    await d.kubectl("get", "replicasets", "-n", d.ns, "-l", "app=web", "-o", "json")
    await d.kubectl("get", "pods", "-n", d.ns, "-l", "app=web", "-o", "yaml")


async def tokens_and_access(d: Driver) -> None:
    await d.kubectl("create", "token", "bot", "-n", d.ns, "--duration=10m")
    await d.kubectl("auth", "can-i", "create", "pods", "-n", d.ns)
    await d.kubectl("auth", "can-i", "list", "pods", "-n", d.ns, f"--as=system:serviceaccount:{d.ns}:bot")
    await d.kubectl("auth", "can-i", "delete", "pods", "-n", d.ns, f"--as=system:serviceaccount:{d.ns}:bot",
                    check=False)
    await d.kubectl("auth", "whoami", "-o", "json")


async def discovery(d: Driver) -> None:
    await d.kubectl("api-resources")
    await d.kubectl("api-resources", "--api-group=sedna.io", "-o", "name")
    await d.kubectl("api-versions")
    await d.kubectl("version", "-o", "json")


async def explain(d: Driver) -> None:
    await d.kubectl("explain", "deployment.spec.replicas")
    await d.kubectl("explain", "pods.spec.containers")


async def events(d: Driver) -> None:
    await d.kubectl("events", "-n", d.ns, "--for=deployment/web")
    await d.kubectl("get", "events", "-n", d.ns, "--field-selector=type=Normal", "-o", "name")


async def errors(d: Driver) -> None:
    n = ("-n", d.ns)
    await d.kubectl("get", "configmap", "nope", *n, check=False)
    await d.kubectl("create", "configmap", "cm", "--from-literal=a=1", *n, check=False)
    await d.kubectl("create", "-n", d.ns, "-f", "-", check=False, stdin=_docs(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}))
    await d.kubectl("apply", "-n", d.ns, "--validate=strict", "-f", "-", check=False, stdin=_docs(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "strict"}, "dataa": {"x": "1"}}))
    await d.kubectl("apply", "-n", d.ns, "--validate=warn", "-f", "-", check=False, stdin=_docs(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "warned"}, "dataa": {"x": "1"}}))


async def delete(d: Driver) -> None:
    n = ("-n", d.ns, "--wait=false")
    await d.kubectl("delete", "configmap", "cm", *n)
    await d.kubectl("delete", "deployment", "typed", "--cascade=orphan", *n)
    await d.kubectl("delete", "deployment", "ssa", "--cascade=foreground", *n)
    await d.kubectl("delete", "deployment", "web", "--cascade=background", *n)
    await d.kubectl("delete", "dataset", "ds1", *n)


async def wait_deleted(d: Driver) -> None:
    await d.kubectl("wait", "--for=delete", "deployment/typed", "deployment/ssa", "deployment/web", "-n", d.ns,
                    "--timeout=60s")
    await d.kubectl("delete", "replicasets", "--all", "-n", d.ns, "--timeout=60s")


# -- Helm -------------------------------------------------------------------------------------------


async def helm_chart(d: Driver) -> None:
    if d.helm is None:
        return
    release = ("sedna", str(CHART), "--namespace", d.chart_ns, "--skip-crds")
    await d.helm_cmd("install", *release, "--create-namespace", "--dry-run=server")
    await d.helm_cmd("install", *release, "--create-namespace")
    await d.helm_cmd("upgrade", *release, "--set", "gm.replicas=2", "--dry-run=server")
    await d.helm_cmd("upgrade", *release, "--set", "image.tag=0.1.1")
    await d.helm_cmd("list", "--namespace", d.chart_ns)


async def helm_uninstall(d: Driver) -> None:
    if d.helm is not None:
        await d.helm_cmd("uninstall", "sedna", "--namespace", d.chart_ns, "--wait", "--timeout=60s")


# -- kubernetes_asyncio -----------------------------------------------------------------------------


async def asyncio_client(d: Driver) -> None:
    from kubernetes_asyncio import client, config, watch

    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(d.kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        pod = client.V1Pod(metadata=client.V1ObjectMeta(name="typed-pod", labels={"app": "typed-pod"}),
                           spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))
        created = await core.create_namespaced_pod(d.ns, pod)
        await core.read_namespaced_pod("typed-pod", d.ns)
        await core.list_namespaced_pod(d.ns, label_selector="app=typed-pod")
        await core.patch_namespaced_pod("typed-pod", d.ns, {"metadata": {"labels": {"b": "2"}}})
        async with watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_pod, d.ns, resource_version=created.metadata.resource_version,
                                    label_selector="app=none", timeout_seconds=1):
                pass
        dep = await apps.create_namespaced_deployment(d.ns, _deployment("typed-dep", replicas=1))
        await apps.read_namespaced_deployment(dep.metadata.name, d.ns)
        await apps.read_namespaced_deployment_scale(dep.metadata.name, d.ns)
        await apps.list_namespaced_deployment(d.ns)
        await core.delete_namespaced_pod("typed-pod", d.ns, grace_period_seconds=0)
        await apps.delete_namespaced_deployment("typed-dep", d.ns, propagation_policy="Foreground")


# -- the GM's client --------------------------------------------------------------------------------


async def gm_client(d: Driver) -> None:
    from gm.kube.client import KubeClient
    from gm.kube.kubeconfig import ClientSettings
    from gm.kube.resources import CONFIGMAPS, EVENTS, GVR

    datasets = GVR("sedna.io", "v1alpha1", "datasets")
    async with await KubeClient.connect(ClientSettings(kubeconfig=str(d.kubeconfig), qps=0, timeout=30)) as api:
        ds = await api.create(datasets, {**_dataset("gm-ds"), "metadata": {"name": "gm-ds"}}, namespace=d.ns)
        items, rv = await api.list_all(datasets, namespace=d.ns)
        async with api.watch(datasets, namespace=d.ns, resource_version=rv, timeout_seconds=1) as w:
            async for _ in w:
                pass
        await api.patch(datasets, "gm-ds", {"status": {"numberOfSamples": 3}}, namespace=d.ns, subresource="status")
        await api.create(EVENTS, {
            "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "gm-ds."},
            "involvedObject": {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "name": "gm-ds",
                               "namespace": d.ns, "uid": ds["metadata"]["uid"]},
            "reason": "Synced", "message": "synced", "type": "Normal", "source": {"component": "sedna-gm"},
            "count": 1, "reportingComponent": "sedna-gm", "reportingInstance": "gm-0"}, namespace=d.ns)
        await api.list(EVENTS, namespace=d.ns, field_selector=f"involvedObject.uid={ds['metadata']['uid']}")
        await api.list(CONFIGMAPS, namespace=d.ns, limit=1)
        await api.delete(datasets, "gm-ds", namespace=d.ns, propagation_policy="Background")


async def clean_up(d: Driver) -> None:
    await d.kubectl("delete", "namespace", d.ns, d.chart_ns, f"{d.chart_ns}-lc", "--wait=false",
                    "--ignore-not-found")


# the steps in order; a step's name tags the exchanges it makes
SCENARIO: tuple[Step, ...] = (
    Step("create-namespace", create_namespace),
    Step("wait-namespace", wait_namespace, Policy(waits=True)),
    Step("create-typed", create_typed),
    Step("apply-client-side", apply_client_side),
    Step("apply-server-side", apply_server_side),
    Step("rollout", rollout, Policy(waits=True)),
    Step("get-outputs", get_outputs, Policy(settled=True)),
    Step("describe", describe, Policy(settled=True)),
    Step("patch", patch, Policy(settled=True)),
    Step("rollout-patched", rollout_web, Policy(waits=True)),
    Step("replace", replace, Policy(settled=True)),
    Step("label-annotate", label_annotate, Policy(settled=True)),
    Step("scale", scale, Policy(settled=True)),
    Step("rollout-scaled", rollout_web, Policy(waits=True)),
    Step("get-rolled-out", get_rolled_out, Policy(settled=True)),
    Step("tokens-and-access", tokens_and_access, Policy(settled=True)),
    Step("discovery", discovery, Policy(settled=True)),
    Step("explain", explain, Policy(settled=True)),
    Step("events", events, Policy(settled=True)),
    Step("errors", errors, Policy(settled=True)),
    Step("asyncio-client", asyncio_client),
    Step("gm-client", gm_client),
    Step("delete", delete),
    Step("wait-deleted", wait_deleted, Policy(waits=True)),
    Step("helm", helm_chart),
    Step("helm-uninstall", helm_uninstall, Policy(waits=True)),
)
POLICIES = {step.name: step.policy for step in SCENARIO} | {"clean-up": Policy(waits=True)}


async def run(driver: Driver, steps: tuple[Step, ...] = SCENARIO) -> None:
    """Every step in order through the driver's proxy, each tagging its exchanges."""
    driver.prepare()
    try:
        for step in steps:
            driver.proxy.step = step.name
            await step.run(driver)
    finally:
        driver.proxy.step = "clean-up"
        await clean_up(driver)


def recording(driver: Driver) -> Recording:
    """What the driver's proxy recorded, for `capture_diff.compare`."""
    return Recording(driver.token, list(driver.proxy.exchanges), list(driver.outcomes))


def save(driver: Driver, path: Path) -> None:
    """The recording as JSON (exchanges and command outcomes), for a look after a failure."""
    path.write_text(json.dumps({"token": driver.token, "exchanges": [e.to_json() for e in driver.proxy.exchanges],
                                "outcomes": [vars(o) for o in driver.outcomes]}, indent=1))


async def capture_both(dev_kubeconfig: Path, real_kubeconfig: Path, home: Path, *,
                       helm: Path | None) -> tuple[Driver, Driver]:
    """The scenario through a proxy in front of each cluster, both at once; the drivers hold the
    recordings (also saved as home/dev.json and home/real.json)."""
    async with CaptureProxy(dev_kubeconfig) as dev_proxy, CaptureProxy(real_kubeconfig) as real_proxy:
        dev, real = Driver(dev_proxy, home / "dev", helm), Driver(real_proxy, home / "real", helm)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(run(dev), name="capture-dev")
                tg.create_task(run(real), name="capture-real")
        finally:
            save(dev, home / "dev.json")
            save(real, home / "real.json")
    return dev, real


def main(argv: list[str] | None = None) -> int:
    """Record the scenario on two running clusters and print what differs (kept ones apart)."""
    import argparse

    from tests.cluster.capture_diff import compare, report, split_kept
    from tests.cluster.test_capture_diff import KEPT
    from tests.helm.helmbin import HELM

    parser = argparse.ArgumentParser(prog="python -m tests.cluster.capture_scenario")
    parser.add_argument("--dev", type=Path, required=True, help="kubeconfig of the dev cluster")
    parser.add_argument("--real", type=Path, required=True, help="kubeconfig of the real cluster")
    parser.add_argument("--out", type=Path, required=True, help="directory for the recordings")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    helm = HELM if os.access(HELM, os.X_OK) else None
    dev, real = asyncio.run(capture_both(args.dev, args.real, args.out, helm=helm))
    new, kept = split_kept(compare(recording(dev), recording(real), POLICIES), KEPT)
    print(f"new ({len(new)}):\n{report(new)}\n\nkept ({len(kept)}):\n{report(kept)}")
    return 1 if new else 0


if __name__ == "__main__":
    raise SystemExit(main())
