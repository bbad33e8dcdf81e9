"""Placement declared with each kind in shared/apis.py: which nodes need an object, per kind
and, for the learning kinds, per stage; unknown kinds are errors; proto and shared agree."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

import proto
from gm.edge.pipeline import StatusPipeline
from gm.edge.status import UpstreamStatus
from gm.kube.statuswriter import StatusWriter
from gm.reports import ReportRefused
from shared import apis

NS = "default"
UID = "u1"


class View:
    """A PlacementView over plain dicts: Datasets by name, pods, and Model users' nodes."""

    def __init__(self, *, datasets: Mapping[str, str] | None = None, pods: Iterable[dict] = (),
                 users: Mapping[str, frozenset[str]] | None = None):
        self.datasets = {name: {"spec": {"nodeName": node}} for name, node in (datasets or {}).items()}
        self.pods = list(pods)
        self.users = users or {}
        self.asked: list[tuple[str, str, str]] = []

    def dataset(self, namespace: str, name: str) -> dict | None:
        assert namespace == NS
        return self.datasets.get(name)

    def worker_pods(self, kind: str, uid: str, worker_type: str) -> list[dict]:
        self.asked.append((kind, uid, worker_type))
        label = f"{kind.lower()}.sedna.io/worker-type"
        return [p for p in self.pods if p["metadata"]["labels"].get(label) == worker_type]

    def user_nodes(self, kind: str, namespace: str, name: str) -> frozenset[str]:
        assert (kind, namespace) == ("Model", NS)
        return self.users.get(name, frozenset())


def pod(kind: str, worker_type: str, node: str | None, *, uid: str = UID, phase: str = "Running") -> dict:
    prefix = f"{kind.lower()}.sedna.io/"
    return {"metadata": {"labels": {f"{prefix}uid": uid, f"{prefix}worker-type": worker_type}},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


def template(node: str | None = None) -> dict[str, Any]:
    return {"spec": {"nodeName": node} if node is not None else {}}


def obj(spec: dict) -> dict:
    return {"metadata": {"name": "x", "namespace": NS, "uid": UID}, "spec": spec}


JI = "JointInferenceService"
OS, OT = "ObjectSearchService", "ObjectTrackingService"
FE, REID, VA = "FeatureExtractionService", "ReidJob", "VideoAnalyticsJob"
IL, LL = "IncrementalLearningJob", "LifelongLearningJob"


def learning(train: str | None = None, eval_: str | None = None, deploy: str | None = None,
             dataset: str = "ds") -> dict:
    return obj({"dataset": {"name": dataset}, "trainSpec": {"template": template(train)},
                "evalSpec": {"template": template(eval_)}, "deploySpec": {"template": template(deploy)}})


CASES = [
    pytest.param("Dataset", obj({"nodeName": "e1"}), View(), {"e1"}, id="dataset"),
    pytest.param("Dataset", obj({"nodeName": ""}), View(), set(), id="dataset-blank-node"),
    pytest.param("Model", obj({}), View(users={"x": frozenset({"e1", "e2"})}), {"e1", "e2"},
                 id="model-follows-its-users"),
    pytest.param("Model", obj({}), View(), set(), id="model-without-users"),
    pytest.param(JI, obj({"edgeWorker": {"template": template("e1")}}),
                 View(pods=[pod(JI, "edge", "e2"), pod(JI, "edge", "e3", phase="Succeeded"),
                            pod(JI, "edge", "e4", uid="other"), pod(JI, "edge", None),
                            pod(JI, "cloud", "c1")]),
                 {"e1", "e2"}, id="ji-template-and-live-edge-pods"),
    pytest.param(JI, obj({"edgeWorker": {"template": template()}}), View(), set(), id="ji-selector-only"),
    pytest.param("FederatedLearningJob", obj({"trainingWorkers": [
        {"dataset": {"name": "d1"}, "template": template("e9")},
        {"dataset": {"name": "d2"}, "template": template()},
        {"dataset": {"name": "missing"}, "template": {}},
    ]}), View(datasets={"d1": "e1", "d2": "e2"}), {"e9", "e2"}, id="fl-template-else-dataset-node"),
    pytest.param("FederatedLearningJob", obj({"trainingWorkers": "bad"}), View(), set(), id="fl-bad-workers"),
    pytest.param(IL, learning(), View(datasets={"ds": "e1"}), {"e1"}, id="il-dataset-node"),
    pytest.param(IL, learning(train="e2", eval_="e3", deploy="e4"), View(datasets={"ds": "e1"}),
                 {"e1", "e2", "e3", "e4"}, id="il-stage-templates"),
    pytest.param(IL, learning(), View(datasets={"ds": "e1"}, pods=[pod(IL, "inference", "e5")]),
                 {"e1", "e5"}, id="il-live-deploy-pods"),
    pytest.param(LL, learning(eval_="e3", dataset="missing"), View(), {"e3"}, id="ll-dataset-missing"),
    pytest.param(OS, obj({"userWorker": {"template": template("e1")},
                          "trackingWorkers": [{"template": template("e2")}, {"template": template("e3")}],
                          "reidWorkers": {"template": template()}}),
                 View(pods=[pod(OS, "reidworker", "e4")]), {"e1", "e2", "e3", "e4"}, id="objs"),
    pytest.param(OT, obj({"trackingWorkers": [{"template": template("e2")}],
                          "reidWorkers": {"template": template("e5")}}), View(), {"e2", "e5"}, id="objt"),
    pytest.param(FE, obj({"template": template("e1")}), View(pods=[pod(FE, "fe", "e2")]), {"e1", "e2"},
                 id="fe"),
    pytest.param(REID, obj({"template": template("e1")}), View(pods=[pod(REID, "reid", "e1")]), {"e1"},
                 id="reid"),
    pytest.param(VA, obj({"template": template()}), View(pods=[pod(VA, "videoanalytics", "e3")]), {"e3"},
                 id="va"),
]


@pytest.mark.parametrize(("kind", "item", "view", "nodes"), CASES)
def test_placement_per_kind(kind: str, item: dict, view: View, nodes: set[str]) -> None:
    assert apis.require(kind).placement(item, view) == nodes


def test_every_kind_declares_placement() -> None:
    assert all(callable(api.placement) for api in apis.ALL_KINDS)
    assert {api.kind for api in apis.ALL_KINDS if api.stages} == {IL, LL}


@pytest.mark.parametrize(("stage", "nodes", "worker_type"), [
    pytest.param("Train", {"e2"}, "train", id="train-template"),
    pytest.param("Eval", {"e1"}, "eval", id="eval-falls-back-to-dataset"),
    pytest.param("Deploy", {"e4"}, "inference", id="deploy-template"),
])
def test_placement_per_stage(stage: str, nodes: set[str], worker_type: str) -> None:
    api = apis.INCREMENTAL_LEARNING
    [declared] = [s for s in api.stages if s.name == stage]
    view = View(datasets={"ds": "e1"})
    assert apis.place_stage(api.kind, declared, learning(train="e2", deploy="e4"), view) == nodes
    assert view.asked == [(api.kind, UID, worker_type)]


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(apis.UnknownKind, match="'Widget' is not a Sedna kind") as caught:
        apis.require("Widget")
    assert caught.value.kind == "Widget"
    with pytest.raises(apis.UnknownKind):
        apis.require("federatedlearningjob")  # exact CamelCase only: never a near match
    assert isinstance(caught.value, LookupError)


@pytest.mark.parametrize("api", [pytest.param(k, id=k.kind) for k in apis.ALL_KINDS])
def test_proto_and_shared_agree_on_wire_spellings(api: apis.SednaKind) -> None:
    assert proto.upstream_kind(api.kind) == api.ws_kind
    assert apis.canonical_kind(proto.upstream_kind(api.kind)) == api.kind
    assert apis.canonical_kind(api.kind.upper()) == api.kind


def test_upstream_frames_decode_to_registry_kinds() -> None:
    for api in apis.ALL_KINDS:
        frame = proto.encode_upstream(proto.Message(proto.Op.DELETE, 1, api.kind, NS, "x"))
        assert f'"resourceKind":"{api.ws_kind}"' in frame
        decoded = proto.decode_upstream(frame, canonical_kind=apis.canonical_kind)
        assert decoded is not None and decoded.kind == api.kind
    assert apis.canonical_kind("Widget") == "Widget"  # refusing it is the receiver's decision


@pytest.mark.parametrize(("kind", "reason"), [
    pytest.param("Widget", "no status reports for kind 'Widget': 'Widget' is not a Sedna kind", id="unknown"),
    pytest.param("dataset", "no status reports for kind 'dataset': 'dataset' is not a Sedna kind",
                 id="not-canonical"),
    pytest.param("Model", "no status reports for kind 'Model'$", id="known-without-handler"),
])
async def test_upstream_table_refuses_kinds_without_a_handler(kind: str, reason: str) -> None:
    handler = UpstreamStatus(StatusPipeline(StatusWriter(client=None)))  # type: ignore[arg-type]
    with pytest.raises(ReportRefused, match=reason):
        await handler.handle_status("n1", proto.Message(proto.Op.STATUS, 1, kind, NS, "x", {}))
    assert set(handler.kinds) <= {api.kind for api in apis.ALL_KINDS}


def _imports(package: str) -> set[str]:
    root = Path(__file__).resolve().parents[2] / package
    found: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
    return found


def test_one_list_of_kinds_and_no_import_between_proto_and_shared() -> None:
    assert "shared" not in _imports("proto") and "proto" not in _imports("shared")
    proto_text = "".join(p.read_text() for p in (Path(proto.__file__).parent).glob("*.py"))
    assert [api.kind for api in apis.ALL_KINDS if f'"{api.kind}"' in proto_text] == []
