"""`make run CLUSTER=real` on the tier's real control plane: examples/devrun.py --cluster real as a
process, for a few seconds, then Ctrl-C.

devrun finds the cluster through KUBE_REAL_STATE (the tier's cluster is one of scripts/kube_real.py),
so `kube_real.py status` says it is up and devrun reuses it; its GM and LCs take free ports. The
examples go to the namespace `default` as `make run` applies them, and are deleted at the end (on an
existing cluster, SEDNA_REAL_KUBECONFIG, objects of the same names there are replaced, then deleted).
The dev cluster's `make run` is tested by tests/e2e/test_examples.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import BinaryIO

import pytest

from tests.cluster.conftest import WITHIN
from tests.cluster.plugin import KUBE_REAL, REAL_MARK, ROOT, Cluster
from tests.conftest import eventually
from tests.e2e.test_examples import devrun

pytestmark = pytest.mark.parametrize("target", [pytest.param("real", marks=getattr(pytest.mark, REAL_MARK))],
                                     indirect=True)

NS = "default"
# the examples' CRs whose children come at once; the learning jobs' wait for their train trigger
WITH_CHILDREN = {"JointInferenceService", "FederatedLearningJob", "FeatureExtractionService", "ReidJob",
                 "VideoAnalyticsJob", "ObjectSearchService", "ObjectTrackingService"}
LEARNING = {"IncrementalLearningJob", "LifelongLearningJob"}
# what the LCs count in the index files devrun writes (devrun.write_datasets)
SAMPLES = {"edge1-surface-defect-detection-dataset": 50, "edge2-surface-defect-detection-dataset": 80,
           "incremental-dataset": devrun.LEARNING_SAMPLES, "lifelong-dataset": devrun.LEARNING_SAMPLES}
BANNER_END = "Ctrl-C stops the GM and the LCs"
STOP_TIMEOUT = 30.0


def kube_real_state(target: Cluster) -> Path:
    """The scripts/kube_real.py directory of the target (pids, kubeconfig), or a skip."""
    state = target.kubeconfig.resolve().parent
    if not (state / "pids").is_dir():
        pytest.skip(f"make run CLUSTER=real runs on a cluster of scripts/kube_real.py; {target.kubeconfig} "
                    "is another's")
    return state


def open_log(path: Path) -> BinaryIO:
    return open(path, "wb")  # the process writes to it; this one only hands it over


def tail(log: Path) -> str:
    return f"the end of {log}:\n" + log.read_text(errors="replace")[-3000:]


async def banner(proc: asyncio.subprocess.Process, log: Path) -> str:
    """What devrun prints, up to the end of its banner."""
    lines: list[str] = []
    assert proc.stdout is not None
    async with asyncio.timeout(WITHIN):
        while not lines or BANNER_END not in lines[-1]:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise AssertionError(f"devrun exited {await proc.wait()} before its banner: {''.join(lines)}\n"
                                     + tail(log))
            lines.append(line)
    return "".join(lines)


async def example_objects(target: Cluster) -> dict[str, list[dict]]:
    """kind -> the example objects of that kind in `default`."""
    out: dict[str, list[dict]] = {}
    for doc in (await target.get_json("ji,fl,fe,reid,va,objs,objt,il,ll,datasets", "-n", NS))["items"]:
        out.setdefault(doc["kind"], []).append(doc)
    return out


async def controlled(target: Cluster) -> dict[str, set[str]]:
    """uid of a controller -> names of the Deployments and Pods it controls."""
    out: dict[str, set[str]] = {}
    for child in (await target.get_json("deployments,pods", "-n", NS))["items"]:
        for ref in child["metadata"].get("ownerReferences") or ():
            if ref.get("controller"):
                out.setdefault(ref["uid"], set()).add(f"{child['kind']}/{child['metadata']['name']}")
    return out


async def test_make_run_on_the_real_cluster(target: Cluster, tmp_path: Path):
    state = kube_real_state(target)
    log = tmp_path / "devrun.log"
    with open_log(log) as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "examples" / "devrun.py"), "--cluster", "real", "--gm-port", "0",
            "--lc-port", "0", cwd=ROOT, env={**os.environ, "KUBE_REAL_STATE": str(state)},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=err)
    try:
        text = await banner(proc, log)
        assert f"export KUBECONFIG={state / 'kubeconfig'}\n" in text, text
        assert "(already up, reused;" in text, text
        assert "kwok only simulates the worker pods" in text and "devcluster.sedna.io/phase=Succeeded" in text
        assert "the cluster stays up (`make kube-down` stops it)" in text
        await _every_example_reconciled(target, log)
        proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(STOP_TIMEOUT):
            assert await proc.wait() == 0, tail(log)
        # the GM and the LCs stopped, the cluster did not
        status = await asyncio.create_subprocess_exec(
            sys.executable, str(KUBE_REAL), "status", env={**os.environ, "KUBE_REAL_STATE": str(state)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(status.communicate(), STOP_TIMEOUT)
        assert status.returncode == 0, out.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for name in devrun.EXAMPLES:
            await target.kubectl("delete", "-n", NS, "-f", str(ROOT / "examples" / "upstream" / name),
                                 "--wait=false", "--ignore-not-found", check=False)


async def _every_example_reconciled(target: Cluster, log: Path) -> None:
    """Every example CR with its children (a controller ownerReference to it), the learning jobs
    with a status, and every Dataset with the samples its LC counted."""
    async def missing() -> list[str]:
        objects, children = await example_objects(target), await controlled(target)
        out = [f"no {kind}" for kind in sorted(WITH_CHILDREN | LEARNING) if not objects.get(kind)]
        out += [f"{kind}/{o['metadata']['name']}: no children" for kind in sorted(WITH_CHILDREN)
                for o in objects.get(kind) or () if not children.get(o["metadata"]["uid"])]
        out += [f"{kind}/{o['metadata']['name']}: no status" for kind in sorted(LEARNING)
                for o in objects.get(kind) or () if not (o.get("status") or {}).get("conditions")]
        counted = {d["metadata"]["name"]: (d.get("status") or {}).get("numberOfSamples")
                   for d in objects.get("Dataset") or ()}
        if counted != SAMPLES:
            out.append(f"the Datasets' samples: {counted}")
        return out

    async def none_missing() -> bool:
        return not await missing()
    try:
        await eventually(none_missing, "every example reconciled", within=WITHIN, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {await missing()}\n" + tail(log)) from None
