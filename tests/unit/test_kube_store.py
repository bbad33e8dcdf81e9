"""gm/kube/store.py: the informers' indexed cache, and `index_reads` (an index function that
says what it reads is not called for an update that leaves those parts equal)."""

from __future__ import annotations

from typing import Any

from gm.kube.store import INDEX_OWNER, Store, index_reads
from gm.reconcile.credentials import INDEX_CREDENTIAL, credential_refs
from gm.reconcile.declaration import uses_datasets, uses_models
from gm.reconcile.reconciler import _refs_of
from shared import apis


def cr(rv: int, *, secret: str = "s3", owner: str = "", active: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": "job", "resourceVersion": str(rv)}
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True}]
    return {"metadata": meta, "spec": {"storage": {"credentialName": secret}},
            "status": {"active": active}}


def test_a_declared_index_is_kept_when_what_it_reads_is_unchanged() -> None:
    calls: list[str] = []

    @index_reads("spec")
    def counted(obj: dict[str, Any]) -> list[str]:
        calls.append(obj["metadata"]["resourceVersion"])
        return credential_refs(obj)

    store = Store({INDEX_CREDENTIAL: counted})
    store.upsert(cr(1))
    store.upsert(cr(2, active=3))  # a status write: the same spec, a new version
    assert calls == ["1"]
    assert [o["metadata"]["resourceVersion"] for o in store.by_index(INDEX_CREDENTIAL, "ns/s3")] == ["2"]
    store.upsert(cr(3, secret="other"))  # the spec changed: the old value goes, the new one comes
    assert calls == ["1", "2", "3"]  # the old version's values, then the new one's
    assert store.by_index(INDEX_CREDENTIAL, "ns/s3") == []
    assert store.index_keys(INDEX_CREDENTIAL, "ns/other") == ["ns/job"]


def test_an_undeclared_index_runs_on_every_update() -> None:
    calls: list[str] = []

    def counted(obj: dict[str, Any]) -> list[str]:
        calls.append(obj["metadata"]["resourceVersion"])
        return [str(obj["status"]["active"])]

    store = Store({"active": counted})
    store.upsert(cr(1))
    store.upsert(cr(2, active=1))
    assert calls == ["1", "1", "2"]
    assert store.index_keys("active", "0") == [] and store.index_keys("active", "1") == ["ns/job"]


def test_the_default_indexes_follow_what_they_read() -> None:
    store = Store()
    store.upsert(cr(1, owner="a"))
    store.upsert(cr(2, owner="a", active=1))
    assert store.index_keys(INDEX_OWNER, "a") == ["ns/job"]
    store.upsert(cr(3, owner="b"))
    assert store.index_keys(INDEX_OWNER, "a") == [] and store.index_keys(INDEX_OWNER, "b") == ["ns/job"]
    store.remove("ns/job")
    assert store.index_keys(INDEX_OWNER, "b") == [] and store.index_keys("namespace", "ns") == []


def test_the_model_and_dataset_indexes_read_the_spec_their_paths_start_in() -> None:
    for kind in ("JointInferenceService", "FederatedLearningJob", "IncrementalLearningJob"):
        api = apis.by_kind(kind)
        for watch, paths in ((uses_models(api), api.model_paths), (uses_datasets(api), api.dataset_paths)):
            if paths:
                assert watch.refs_read == ("spec",)
                assert _refs_of(watch).index_reads == (("spec",),)  # type: ignore[attr-defined]
