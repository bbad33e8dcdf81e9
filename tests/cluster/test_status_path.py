"""The status path on both clusters: a worker's report to the LocalController of its node reaches
the CR status on the cluster, through the GM (both in this process, the LC linked to the GM over
its websocket as in production), and `kubectl get` shows it."""

from __future__ import annotations

import json

import aiohttp

from gm.kube.resources import sedna_gvr
from shared import apis
from tests.cluster.conftest import WITHIN, in_namespace
from tests.cluster.plugin import Cluster
from tests.conftest import eventually
from tests.e2e.conftest import load_example
from tests.e2e.test_system import lc_env, local_controller, post_report, round_report

JOB = "surface-defect-detection"
TRAINER = f"{JOB}-trainworker-0"
DATASET = "edge1-surface-defect-detection-dataset"


async def test_a_worker_report_reaches_the_cr_status(target: Cluster, ns: str, gm, api, tmp_path):
    for obj in load_example("federated-learning-surface-defect.yaml"):
        await api.create(sedna_gvr(apis.require(obj["kind"])), in_namespace(obj, ns), namespace=ns)
    # the edge node's dataset file, which the LC's dataset monitor counts
    data = tmp_path / "rootfs-edge-node-1" / "data"
    data.mkdir(parents=True)
    (data / "1.txt").write_text("a.jpg 1\nb.jpg 0\nc.jpg 1\n")
    async with local_controller(lc_env(tmp_path, "edge-node-1", gm.port)) as (lc, base):
        await eventually(lambda: "edge-node-1" in gm.hub.connected_nodes(), "the LC linked to the GM", within=WITHIN)
        await eventually(lambda: lc.store.get_resource("FederatedLearningJob", ns, JOB), "the job on the LC",
                         within=WITHIN, interval=0.05)
        report = round_report(2)
        report["namespace"] = ns
        async with aiohttp.ClientSession() as session:
            assert await post_report(session, base, report) == (200, {"Status": 200, "Message": "OK"})

        async def training() -> dict | None:
            status = (await api.get(sedna_gvr(apis.FEDERATED_LEARNING), JOB, namespace=ns)).get("status") or {}
            return next((c for c in status.get("conditions") or ()
                         if c["type"] == "Training" and "Round 2" in c.get("message", "")), None)
        cond = await eventually(training, "the round in the job's status", within=WITHIN, interval=0.1)
        assert cond["reason"] == "DoTraining"

        async def samples() -> bool:
            status = (await api.get(sedna_gvr(apis.DATASET), DATASET, namespace=ns)).get("status") or {}
            return status.get("numberOfSamples") == 3
        await eventually(samples, "numberOfSamples counted on the edge", within=WITHIN, interval=0.1)

    shown = json.loads(await target.kubectl("get", "fl", JOB, "-n", ns, "-o", "json"))
    assert any(c["type"] == "Training" and c["message"].startswith("Round 2 reaches at")
               for c in shown["status"]["conditions"])
    assert await target.kubectl("get", "dataset", DATASET, "-n", ns, "-o", "jsonpath={.status.numberOfSamples}") == "3"
    model = await target.get_json("model", "surface-defect-detection-model", "-n", ns)
    assert {m["key"] for m in model["status"]["metrics"]} == {"accuracy", "loss"}
