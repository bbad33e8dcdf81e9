"""The GM side of the GM<->LC link end to end: the dev cluster, a real GM, and websocket
clients that speak the wire protocol with the proto encoders (native msgpack and
upstream's JSON envelope), standing in for LCs on edge-node-1 and edge-node-2."""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from gm.edge.objects import CREDENTIAL_ANNOTATION
from gm.kube.resources import DATASETS, FL, GVR, JI, MODELS, SECRETS
from proto import (
    BARE_HEADER,
    SUBPROTOCOL,
    Message,
    Op,
    decode_native,
    decode_upstream,
    encode_native,
    encode_upstream,
    hello,
)
from shared import apis
from shared.websocket import ServerWebSocket
from tests.conftest import eventually
from tests.e2e.conftest import load_example
from tests.scrape import value

NS = "default"
JOB = "surface-defect-detection"
MODEL = "surface-defect-detection-model"
DS1 = "edge1-surface-defect-detection-dataset"
DS2 = "edge2-surface-defect-detection-dataset"
FRAME_WAIT = 5.0
PLURALS = {"Dataset": DATASETS, "Model": MODELS, "FederatedLearningJob": FL, "JointInferenceService": JI}


class NativeLC:
    """A native LC's side of the socket: hello, snapshot, then frames on demand."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, node: str):
        self.ws, self.node = ws, node
        self.snapshot: dict[tuple[str, str, str], dict] = {}

    async def recv(self) -> Message:
        msg = await self.ws.receive(timeout=FRAME_WAIT)
        assert msg.type is aiohttp.WSMsgType.BINARY, (msg.type, msg.data)
        return decode_native(msg.data)

    async def handshake(self) -> None:
        await self.ws.send_bytes(encode_native(hello(self.node, acked=0)))
        assert (await self.recv()).op is Op.HELLO
        begin = await self.recv()
        assert (begin.op, begin.body) == (Op.SNAPSHOT, {"phase": "begin"})
        while (msg := await self.recv()).op is Op.UPSERT:
            self.snapshot[msg.key] = dict(msg.body)
        assert (msg.op, msg.body) == (Op.SNAPSHOT, {"phase": "end", "count": len(self.snapshot)})

    async def until(self, pred: Callable[[Message], bool]) -> Message:
        """The first frame matching `pred` (object frames in between are skipped)."""
        while True:
            msg = await self.recv()
            if pred(msg):
                return msg

    async def report(self, seq: int, kind: str, name: str, body: dict) -> Message:
        """Send a status report and return the GM's ack for it."""
        await self.ws.send_bytes(encode_native(Message(Op.STATUS, seq, kind, NS, name, body)))
        return await self.until(lambda m: m.op is Op.ACK and m.seq == seq)


@pytest.fixture
async def connect(gm):
    session = aiohttp.ClientSession()
    sockets: list[aiohttp.ClientWebSocketResponse] = []

    async def dial(node: str, *, native: bool = True) -> aiohttp.ClientWebSocketResponse:
        ws = await session.ws_connect(f"http://127.0.0.1:{gm.port}/", headers={"Node-Name": node},
                                      protocols=(SUBPROTOCOL,) if native else (), autoping=True)
        sockets.append(ws)
        return ws

    async def native(node: str) -> NativeLC:
        lc = NativeLC(await dial(node), node)
        await lc.handshake()
        return lc

    dial.native = native  # type: ignore[attr-defined]
    yield dial
    for ws in sockets:
        await ws.close()
    await session.close()


async def create_fl_example(api, gm) -> None:
    for obj in load_example("federated-learning-surface-defect.yaml"):
        await api.create(PLURALS[obj["kind"]], obj, namespace=NS)
    await eventually(lambda: gm.edge.nodes_of("Model", NS, MODEL) == {"edge-node-1", "edge-node-2"},
                   message="the example assigned to both edge nodes")


async def status_of(api, gvr: GVR, name: str) -> tuple[dict, str]:
    obj = await api.get(gvr, name, namespace=NS)
    return obj.get("status") or {}, obj["metadata"]["resourceVersion"]


def round_report(round_: int, *, metrics: dict[str, Any] | None = None) -> dict:
    return {"phase": "train", "status": "running",
            "output": {"models": [{"format": "pb", "url": "/model", "metrics": metrics}] if metrics else None,
                       "ownerInfo": {"currentRound": round_, "sampleCount": 1200,
                                     "startTime": "2025-03-01 10:00:00",
                                     "updateTime": f"2025-03-01 10:0{round_}:10"}}}


async def test_snapshot_holds_exactly_what_each_node_needs(gm, api, connect):
    await create_fl_example(api, gm)
    lc1, lc2 = await connect.native("edge-node-1"), await connect.native("edge-node-2")
    assert sorted(lc1.snapshot) == [("Dataset", NS, DS1), ("FederatedLearningJob", NS, JOB), ("Model", NS, MODEL)]
    assert sorted(lc2.snapshot) == [("Dataset", NS, DS2), ("FederatedLearningJob", NS, JOB), ("Model", NS, MODEL)]
    ds = lc1.snapshot[("Dataset", NS, DS1)]
    assert (ds["kind"], ds["apiVersion"], ds["spec"]["nodeName"]) == ("Dataset", "sedna.io/v1alpha1", "edge-node-1")
    assert lc2.snapshot[("FederatedLearningJob", NS, JOB)]["spec"]["trainingWorkers"][1]["dataset"] == {"name": DS2}
    cloud = await connect.native("cloud-node")  # the aggregator's node gets nothing
    assert cloud.snapshot == {}
    # the GM carries LC sessions on its websocket lane, not on aiohttp's websocket
    assert {type(s.ws) for s in gm.hub._sessions.values()} == {ServerWebSocket}
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{gm.port}/metrics") as resp:
        metrics = await resp.text()
    assert value(metrics, "sedna_gm_hub_sessions_total", event="opened") == 3
    assert value(metrics, "sedna_gm_hub_sessions_active") == 3
    assert value(metrics, "sedna_gm_edge_objects") == 4  # two Datasets, the job and its Model
    assert value(metrics, "sedna_gm_edge_changes_total", op="delete") == 0


async def test_edits_and_deletes_reach_the_nodes(gm, api, connect):
    await create_fl_example(api, gm)
    lc1, lc2 = await connect.native("edge-node-1"), await connect.native("edge-node-2")
    patch = [{"op": "replace", "path": "/spec/trainingWorkers/0/template/spec/containers/0/env/0/value",
              "value": "16"}]
    await api.patch(FL, JOB, patch, namespace=NS, patch_type="json")
    for lc in (lc1, lc2):
        msg = await lc.until(lambda m: m.op is Op.UPSERT and m.key == ("FederatedLearningJob", NS, JOB)
                             and m.body["metadata"]["generation"] == 2)
        env = msg.body["spec"]["trainingWorkers"][0]["template"]["spec"]["containers"][0]["env"]
        assert env[0] == {"name": "batch_size", "value": "16"}
    await api.delete(DATASETS, DS1, namespace=NS)
    gone = await lc1.until(lambda m: m.op is Op.DELETE)
    assert gone.key == ("Dataset", NS, DS1) and gone.body is None
    assert not gm.edge.is_assigned("edge-node-1", "Dataset", NS, DS1)
    await api.delete(FL, JOB, namespace=NS)
    deleted = set()
    while len(deleted) < 2:
        deleted.add((await lc2.until(lambda m: m.op is Op.DELETE)).key)
    assert deleted == {("FederatedLearningJob", NS, JOB), ("Model", NS, MODEL)}  # the Model had no other user


async def test_dataset_report_is_applied_once_and_acked(gm, api, connect):
    await create_fl_example(api, gm)
    lc1 = await connect.native("edge-node-1")
    ack = await lc1.report(7, "Dataset", DS1, {"numberOfSamples": 500})
    assert ack.body is None
    status, rv = await status_of(api, DATASETS, DS1)
    assert status["numberOfSamples"] == 500 and status["updateTime"].endswith("Z")
    await eventually(lambda: (gm.informers.get_cached(DATASETS, NS, DS1) or {}).get("status", {}).get(
        "numberOfSamples") == 500, message="the GM cache to see the count")
    replay = await lc1.report(7, "Dataset", DS1, {"numberOfSamples": 500})
    assert replay.body is None
    assert await status_of(api, DATASETS, DS1) == (status, rv)


async def test_reports_for_other_nodes_and_bad_reports_are_refused(gm, api, connect):
    await create_fl_example(api, gm)
    lc1 = await connect.native("edge-node-1")
    before = await status_of(api, DATASETS, DS2)
    refused = await lc1.report(1, "Dataset", DS2, {"numberOfSamples": 9})
    assert refused.body == {"error": f"Dataset {NS}/{DS2} is not assigned to node edge-node-1"}
    invalid = await lc1.report(2, "Dataset", DS1, {"numberOfSamples": "many"})
    assert invalid.body == {"error": "numberOfSamples must be an integer, got str"}
    unknown = await lc1.report(3, "Model", MODEL, {"metrics": {}})
    assert unknown.body == {"error": "the GM takes no status reports for kind 'Model'"}
    assert await status_of(api, DATASETS, DS2) == before
    assert (await status_of(api, DATASETS, DS1))[0] == {}


async def test_fl_rounds_keep_one_training_condition_and_set_model_metrics(gm, api, connect):
    await create_fl_example(api, gm)
    await eventually(lambda: (gm.informers.get_cached(FL, NS, JOB) or {}).get("status", {}).get("phase") == "Running",
                   within=10, message="the job Running")
    lc1 = await connect.native("edge-node-1")
    ack = await lc1.report(1, "FederatedLearningJob", JOB, round_report(3, metrics={"accuracy": [0.86, 0.9],
                                                                                     "loss": 0.41}))
    assert ack.body is None

    async def training() -> list[dict]:
        status, _ = await status_of(api, FL, JOB)
        return [c for c in status["conditions"] if c["type"] == "Training"]

    assert [(c["status"], c["reason"], c["message"]) for c in await training()] == [
        ("True", "DoTraining", "Round 3 reaches at 2025-03-01 10:03:10")]
    model_status, _ = await status_of(api, MODELS, MODEL)
    assert model_status["metrics"] == [{"key": "accuracy", "value": "[0.86,0.9]"}, {"key": "loss", "value": "0.41"}]
    assert model_status["updateTime"].endswith("Z")
    assert (await lc1.report(2, "FederatedLearningJob", JOB, round_report(2))).body is None
    assert [c["message"] for c in await training()] == ["Round 3 reaches at 2025-03-01 10:03:10"]
    assert (await lc1.report(3, "FederatedLearningJob", JOB, round_report(4))).body is None
    assert [c["message"] for c in await training()] == ["Round 4 reaches at 2025-03-01 10:04:10"]


async def test_upstream_lc_gets_inserts_and_its_status_is_applied(gm, api, connect):
    await create_fl_example(api, gm)
    ws = await connect("edge-node-2", native=False)
    assert ws.protocol is None
    await ws.send_str(BARE_HEADER)
    got = {}
    while len(got) < 3:
        frame = await ws.receive(timeout=FRAME_WAIT)
        assert frame.type is aiohttp.WSMsgType.TEXT
        assert '"operation":"insert"' in frame.data
        msg = decode_upstream(frame.data, canonical_kind=apis.canonical_kind)  # as our LC decodes
        got[msg.key] = msg.body
    assert sorted(got) == [("Dataset", NS, DS2), ("FederatedLearningJob", NS, JOB), ("Model", NS, MODEL)]
    await ws.send_str(encode_upstream(Message(Op.STATUS, kind="dataset", namespace=NS, name=DS2,
                                              body={"numberOfSamples": 42})))

    async def samples() -> Any:
        return (await status_of(api, DATASETS, DS2))[0].get("numberOfSamples")

    await eventually(lambda: gm.hub.stats.status_applied == 1, message="the upstream report applied")
    assert await samples() == 42


async def test_an_upstream_lc_is_sent_only_the_kinds_upstream_sends(gm, api, connect):
    await create_fl_example(api, gm)
    reid = {"apiVersion": apis.API_VERSION, "kind": "ReidJob", "metadata": {"name": "reid"},
            "spec": {"template": {"spec": {"nodeName": "edge-node-2",
                                           "containers": [{"name": "reid", "image": "reid:v1"}]}}}}
    await api.create(GVR("sedna.io", "v1alpha1", "reidjobs"), reid, namespace=NS)
    await eventually(lambda: gm.edge.is_assigned("edge-node-2", "ReidJob", NS, "reid"), message="assigned")
    ws = await connect("edge-node-2", native=False)
    await ws.send_str(BARE_HEADER)
    got = set()
    while len(got) < 3:
        msg = decode_upstream((await ws.receive(timeout=FRAME_WAIT)).data, canonical_kind=apis.canonical_kind)
        got.add(msg.key)
    # frames go out in order: a delete made now comes after anything the snapshot still held
    await api.delete(DATASETS, DS2, namespace=NS)
    while (msg := decode_upstream((await ws.receive(timeout=FRAME_WAIT)).data,
                                  canonical_kind=apis.canonical_kind)).op is not Op.DELETE:
        got.add(msg.key)
    assert msg.key == ("Dataset", NS, DS2)
    assert ("ReidJob", NS, "reid") not in got
    lc = await connect.native("edge-node-2")  # a native LC of that node gets it
    assert ("ReidJob", NS, "reid") in lc.snapshot


async def test_ji_follows_its_edge_pods_and_reports_become_sorted_metrics(gm, api, connect):
    objs = load_example("joint-inference-helmet-detection.yaml")
    ji = objs[-1]
    del ji["spec"]["edgeWorker"]["template"]["spec"]["nodeName"]
    ji["spec"]["edgeWorker"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "edge-node-2"}
    for obj in objs:
        await api.create(PLURALS[obj["kind"]], obj, namespace=NS)
    name = ji["metadata"]["name"]
    await eventually(lambda: gm.edge.nodes_of("JointInferenceService", NS, name) == {"edge-node-2"}, within=10,
                   message="the JI placed by its edge pod's node")
    lc2 = await connect.native("edge-node-2")
    assert sorted(lc2.snapshot) == [("JointInferenceService", NS, name),
                                    ("Model", NS, "helmet-detection-inference-big-model"),
                                    ("Model", NS, "helmet-detection-inference-little-model")]
    body = {"phase": "inference", "status": "", "output": {"models": None, "ownerInfo": {
        "startTime": "2025-03-01 10:00:00", "updateTime": "2025-03-01 10:00:30", "uploadCloudRatio": 0.125,
        "inferenceNumber": 240, "hardExampleNumber": 31}}}
    assert (await lc2.report(1, "JointInferenceService", name, body)).body is None
    status, _ = await status_of(api, JI, name)
    assert status["metrics"] == [{"key": "hardExampleNumber", "value": "31"},
                                 {"key": "inferenceNumber", "value": "240"},
                                 {"key": "uploadCloudRatio", "value": "0.125"}]


async def test_credential_annotation_only_on_the_copy_sent(gm, api, connect):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "annotations": {
        "s3-endpoint": "minio:9000", "s3-usehttps": "0"}},
        "data": {"ACCESS_KEY_ID": base64.b64encode(b"AK").decode(),
                 "SECRET_ACCESS_KEY": base64.b64encode(b"SK").decode()}}
    await api.create(SECRETS, secret, namespace=NS)
    with_secret = {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "d-s3"},
                   "spec": {"url": "s3://b/d.txt", "format": "txt", "nodeName": "edge-node-1",
                            "credentialName": "s3"}}
    missing = copy.deepcopy(with_secret)
    missing["metadata"]["name"], missing["spec"]["credentialName"] = "d-nosecret", "absent"
    for obj in (with_secret, missing):
        await api.create(DATASETS, obj, namespace=NS)
    await eventually(lambda: gm.edge.is_assigned("edge-node-1", "Dataset", NS, "d-nosecret"), message="assigned")
    lc1 = await connect.native("edge-node-1")
    sent = lc1.snapshot[("Dataset", NS, "d-s3")]["metadata"]["annotations"]
    assert sent == {CREDENTIAL_ANNOTATION: '{"ACCESS_KEY_ID":"AK","SECRET_ACCESS_KEY":"SK",'
                                           '"s3-endpoint":"minio:9000","s3-usehttps":"0"}'}
    assert "annotations" not in lc1.snapshot[("Dataset", NS, "d-nosecret")]["metadata"]
    cached = gm.informers.get_cached(DATASETS, NS, "d-s3")
    assert CREDENTIAL_ANNOTATION not in (cached["metadata"].get("annotations") or {})


async def test_a_rotated_or_late_secret_reaches_the_node_at_once(gm, api, connect):
    dataset = {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "d-late"},
               "spec": {"url": "s3://b/d.txt", "format": "txt", "nodeName": "edge-node-1",
                        "credentialName": "late"}}
    await api.create(DATASETS, dataset, namespace=NS)
    lc1 = await connect.native("edge-node-1")
    assert "annotations" not in lc1.snapshot[("Dataset", NS, "d-late")]["metadata"]  # no Secret yet

    def credential_frame(key_id: str):
        return lambda m: (m.op is Op.UPSERT and m.key == ("Dataset", NS, "d-late") and key_id in
                          (m.body["metadata"].get("annotations") or {}).get(CREDENTIAL_ANNOTATION, ""))

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late", "annotations": {
        "s3-endpoint": "minio:9000"}}, "data": {"ACCESS_KEY_ID": base64.b64encode(b"FIRST").decode()}}
    await api.create(SECRETS, secret, namespace=NS)
    await lc1.until(credential_frame('"ACCESS_KEY_ID":"FIRST"'))  # the Secret's add, no resync
    await api.patch(SECRETS, "late", {"data": {"ACCESS_KEY_ID": base64.b64encode(b"ROTATED").decode()}},
                    namespace=NS)
    await lc1.until(credential_frame('"ACCESS_KEY_ID":"ROTATED"'))  # the rotation, at once


async def test_an_il_job_goes_down_with_its_credential_and_hot_update_config(gm, api, connect):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "out", "annotations": {
        "s3-endpoint": "minio:9000"}}, "data": {"ACCESS_KEY_ID": base64.b64encode(b"OUT").decode()}}
    await api.create(SECRETS, secret, namespace=NS)
    plurals = {"Dataset": DATASETS, "Model": MODELS,
               "IncrementalLearningJob": GVR("sedna.io", "v1alpha1", "incrementallearningjobs")}
    for obj in load_example("incremental-learning-helmet-detection.yaml"):
        if obj["kind"] == "IncrementalLearningJob":
            obj["spec"]["credentialName"] = "out"
            obj["spec"]["trainSpec"]["trigger"].pop("timer", None)  # PyYAML reads 02:00 as a number
            job = obj["metadata"]["name"]
        await api.create(plurals[obj["kind"]], obj, namespace=NS)
    await eventually(lambda: gm.edge.is_assigned("edge-node-1", "IncrementalLearningJob", NS, job),
                     message="the job assigned to its dataset's node")
    lc1 = await connect.native("edge-node-1")
    sent = lc1.snapshot[("IncrementalLearningJob", NS, job)]["metadata"]["annotations"]
    assert sent[CREDENTIAL_ANNOTATION] == '{"ACCESS_KEY_ID":"OUT","s3-endpoint":"minio:9000"}'
    assert sent["sedna.io/model-hot-update-config"] == (
        f"/var/lib/sedna/model-hot-update/{NS}/incrementallearningjob/{job}/model_config.json")
    cached = gm.informers.get_cached(plurals["IncrementalLearningJob"], NS, job)
    assert not {CREDENTIAL_ANNOTATION, "sedna.io/model-hot-update-config"} & set(
        cached["metadata"].get("annotations") or {})


async def test_token_is_required_when_configured(start_gm):
    gm = await start_gm(websocket="{address: 127.0.0.1, port: 0, token: s3cret}")
    url = f"http://127.0.0.1:{gm.port}/"
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await http.ws_connect(url, headers={"Node-Name": "edge-node-1"}, protocols=(SUBPROTOCOL,))
        assert exc.value.status == 401
        ws = await http.ws_connect(url, headers={"Node-Name": "edge-node-1", "Authorization": "Bearer s3cret"},
                                   protocols=(SUBPROTOCOL,))
        lc = NativeLC(ws, "edge-node-1")
        await lc.handshake()
        assert lc.snapshot == {}
        await ws.close()


async def test_api_failure_is_retried_by_the_gm_and_acked_once_written(gm, api, connect, sedna_cluster):
    await create_fl_example(api, gm)
    lc1 = await connect.native("edge-node-1")
    sedna_cluster.faults.configure({"errors": [{"rate": 1.0, "verb": "patch", "resource": "datasets", "code": 503}]})
    sending = asyncio.ensure_future(lc1.report(5, "Dataset", DS1, {"numberOfSamples": 77}))
    await eventually(lambda: gm.pipeline.stats.retries >= 2, message="the write retried by the GM")
    assert not sending.done()  # no ack before the write commits
    assert (await status_of(api, DATASETS, DS1))[0] == {}
    sedna_cluster.faults.reset()
    ack = await asyncio.wait_for(sending, 10)  # no resend: the GM's own retry wrote it
    assert ack.body is None
    assert (await status_of(api, DATASETS, DS1))[0]["numberOfSamples"] == 77
    assert gm.hub.stats.deferred == 0


async def test_unknown_kinds_are_never_placed(gm, api, caplog):
    # every Sedna kind is reconciled now, so each is placed by its own rule; a name that is
    # no kind is never placed by some other kind's rule
    await create_fl_example(api, gm)
    held = len(gm.edge)
    for _ in range(2):
        gm.edge.refresh(("Widget", NS, JOB))
    assert gm.edge.nodes_of("Widget", NS, JOB) == frozenset()
    assert len(gm.edge) == held
    logged = [(r.kind, r.reason) for r in caplog.records
              if r.name == "sedna.gm.edge" and r.getMessage() == "edge cannot place kind"]
    assert logged == [("Widget", "'Widget' is not a Sedna kind")]  # once per kind
