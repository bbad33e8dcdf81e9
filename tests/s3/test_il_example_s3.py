"""Upstream's incremental learning example with everything on S3, through a deploy.

The helmet detection example (examples/upstream/) with its Dataset, outputDir and Models on
`s3://` URLs of the test server and one Secret naming it (examples/s3example.py, what
`make run S3=1` runs), run as tests/e2e/test_examples.py
runs the examples: the dev cluster, the GM, an LC per node and the simulated workers of
examples/workers/sim.py. The LC of edge-node-1 counts the Dataset in the bucket, writes the
round's samples and `dataIndex.txt` there, the simulated train worker PUTs its model there
(with the credential the GM gives it), and the hot update puts the trained model over the
deploy Model in the bucket (a server-side copy) and next to the config the inference worker
polls (a download), which the worker reports as the deploy's end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from examples import s3example
from tests.conftest import eventually
from tests.e2e.conftest import sedna_cluster, start_gm  # noqa: F401 (fixtures)
from tests.e2e.test_examples import (
    NS,
    _cycled,
    _fast_il,
    _node_file,
    _pods,
    _status,
    local_controllers,
    simulated_images,
)
from tests.learningjobs import SIM

JOB = "helmet-detection-demo"
SAMPLES = s3example.SAMPLES
WITHIN = 90.0


async def body_of(admin, bucket: str, key: str) -> bytes:
    response = await admin.get_object(Bucket=bucket, Key=key)
    async with response["Body"] as body:
        return await body.read()


async def test_the_il_example_on_s3_trains_evaluates_and_deploys(
        s3_server, admin, bucket, start_gm, sedna_cluster, tmp_path: Path) -> None:  # noqa: F811
    dc = sedna_cluster
    await s3example.fill(s3_server, bucket)
    docs = [d for d in yaml.safe_load_all(s3example.EXAMPLE.read_text(encoding="utf-8")) if d]
    _fast_il(docs)
    docs = s3example.on_s3(docs, s3_server, bucket)
    manifest = tmp_path / "il-s3.yaml"
    manifest.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    gm = await start_gm()
    async with local_controllers(dc, tmp_path, gm.port) as ports:
        await eventually(lambda: set(gm.hub.connected_nodes()) == set(ports), within=10,
                         message="every LC connected")
        dc.runtime.image_map.update(simulated_images(ports))
        dc.apply_manifests(manifest)
        try:
            await eventually(lambda: _cycled(_status(dc, "IncrementalLearningJob", JOB)), within=WITHIN,
                             message="trained, evaluated, hot-updated, and waiting for the next round")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its status: {json.dumps(_status(dc, 'IncrementalLearningJob', JOB))}; "
                                 f"dataset: {json.dumps(_status(dc, 'Dataset', 'incremental-dataset'))}; "
                                 f"pods: {_pods(dc)}") from None
    assert _status(dc, "Dataset", "incremental-dataset").get("numberOfSamples") == SAMPLES
    samples = (await body_of(admin, bucket, "output/data/train/1/data.txt")).decode().splitlines()
    assert len(samples) == int(SAMPLES * 0.8) and samples[0] == "images/0.jpg labels/0.txt"
    index = (await body_of(admin, bucket, "output/data/train/1/dataIndex.txt")).decode().splitlines()
    assert index[:3] == [f"s3://{bucket}/helmet_detection/train_data/", "images/0.jpg", "labels/0.txt"]
    trained = await body_of(admin, bucket, "output/train/1/model.pb")
    assert trained.startswith(f"trained by {JOB}-train-1".encode())
    assert await body_of(admin, bucket, "models/deploy_model/saved_model.pb") == trained
    config = _node_file(dc, "edge-node-1", "/var/lib/sedna/model-hot-update/default/incrementallearningjob/"
                                           f"{JOB}/model_config.json")
    assert json.loads(config.read_text())["model_config"]["model_path"] == "/model-hot-update/model.pb"
    assert (config.parent / "model.pb").read_bytes() == trained


async def test_the_simulated_train_worker_puts_its_model_in_the_bucket(s3_server, admin, bucket, monkeypatch):
    for name, value in (("S3_ENDPOINT_URL", s3_server.url), ("ACCESS_KEY_ID", s3_server.access_key),
                        ("SECRET_ACCESS_KEY", s3_server.secret_key)):
        monkeypatch.setenv(name, value)
    url = f"s3://{bucket}/out/train/1/model.pb"
    assert SIM.put_s3(url, b"a model\n") == url
    assert await body_of(admin, bucket, "out/train/1/model.pb") == b"a model\n"


async def test_an_s3_dataset_without_a_credential_is_a_condition_and_an_event(
        s3_server, bucket, start_gm, sedna_cluster, tmp_path: Path) -> None:  # noqa: F811
    """Upstream's LC crashes on it (B-8): here the GM shows why the Dataset is not counted."""
    dc = sedna_cluster
    dataset = {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "no-secret"},
               "spec": {"url": f"s3://{bucket}/index.txt", "format": "txt", "nodeName": "edge-node-1"}}
    manifest = tmp_path / "dataset.yaml"
    manifest.write_text(yaml.safe_dump(dataset), encoding="utf-8")
    gm = await start_gm()
    async with local_controllers(dc, tmp_path, gm.port) as ports:
        await eventually(lambda: set(gm.hub.connected_nodes()) == set(ports), within=10,
                         message="every LC connected")
        dc.apply_manifests(manifest)

        def condition() -> dict[str, Any] | None:
            conds = _status(dc, "Dataset", "no-secret").get("conditions") or ()
            return next((c for c in conds if c.get("type") == "IndexReadable"), None)
        cond = await eventually(condition, within=15, message="the IndexReadable condition")
        events = dc.store.registry.lookup(group="", version="v1", resource="events")
        await eventually(lambda: any(e.get("reason") == "CredentialMissing" and e.get("type") == "Warning"
                                     for e in dc.store.list(events, NS)[0]), within=10, message="a Warning Event")
    assert (cond["status"], cond["reason"]) == ("False", "CredentialMissing")
    assert "carries no sedna.io/credential annotation: set its spec.credentialName" in cond["message"]
