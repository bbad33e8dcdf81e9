"""TokenReview against the dev cluster's HTTP API: pod-bound tokens issued the way the kubelet's
TokenRequest would, reviewed the way a real API server answers (shapes from the API reference)."""

from __future__ import annotations

import pytest

from tests.devcluster.conftest import ApiServer, Http
from tests.devcluster.helpers import pod

REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
NODE_EXTRA = "authentication.kubernetes.io/node-name"


def review(token: str, audiences: list[str] | None = None) -> dict:
    spec: dict = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}


async def lc_pod(http: Http, name: str = "lc-abc", node: str = "edge-node-1") -> dict:
    status, obj = await http.post("/api/v1/namespaces/default/pods",
                                  pod(name, nodeName=node, serviceAccountName="sedna-lc"))
    assert status == 201, obj
    return obj


async def issue(http: Http, name: str = "lc-abc", **extra) -> str:
    status, body = await http.post("/devcluster/tokens", {"namespace": "default", "pod": name, **extra})
    assert status == 201, body
    return body["token"]


async def test_bound_token_names_pod_node_and_service_account(apiserver: ApiServer, http: Http) -> None:
    obj = await lc_pod(http)
    token = await issue(http, audiences=["sedna-gm"])
    status, answer = await http.post(REVIEWS, review(token, ["sedna-gm", "other"]))
    assert status == 201
    assert (answer["kind"], answer["apiVersion"]) == ("TokenReview", "authentication.k8s.io/v1")
    assert answer["spec"]["token"] == token
    st = answer["status"]
    assert st["authenticated"] is True and st["audiences"] == ["sedna-gm"]
    assert st["user"]["username"] == "system:serviceaccount:default:sedna-lc"
    assert st["user"]["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default",
                                    "system:authenticated"]
    extra = st["user"]["extra"]
    assert extra[NODE_EXTRA] == ["edge-node-1"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["lc-abc"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [obj["metadata"]["uid"]]


@pytest.mark.parametrize(
    ("audiences", "error"),
    [
        pytest.param(["someone-else"], "is invalid for the target audiences", id="wrong-audience"),
        pytest.param(None, "is invalid for the target audiences", id="default-audience"),
    ],
)
async def test_token_for_other_audiences_is_not_authenticated(apiserver: ApiServer, http: Http,
                                                              audiences: list[str] | None, error: str) -> None:
    await lc_pod(http)
    token = await issue(http, audiences=["sedna-gm"])
    status, answer = await http.post(REVIEWS, review(token, audiences))
    assert status == 201
    assert answer["status"]["authenticated"] is False and error in answer["status"]["error"]


async def test_unknown_token_and_deleted_pod(apiserver: ApiServer, http: Http) -> None:
    await lc_pod(http)
    token = await issue(http)
    status, answer = await http.post(REVIEWS, review("made-up-token"))
    assert (status, answer["status"]["authenticated"]) == (201, False)
    status, answer = await http.post(REVIEWS, review(token))
    assert answer["status"]["authenticated"] is True
    status, _ = await http.delete("/api/v1/namespaces/default/pods/lc-abc", {"gracePeriodSeconds": 0})
    assert status == 200
    status, answer = await http.post(REVIEWS, review(token))
    assert answer["status"] == {"authenticated": False, "user": {},
                                "error": 'invalid bearer token, pods "lc-abc" not found'}


async def test_recreated_pod_does_not_inherit_the_old_token(apiserver: ApiServer, http: Http) -> None:
    await lc_pod(http)
    token = await issue(http)
    await http.delete("/api/v1/namespaces/default/pods/lc-abc", {"gracePeriodSeconds": 0})
    await lc_pod(http)
    _, answer = await http.post(REVIEWS, review(token))
    assert answer["status"]["authenticated"] is False and "uid" in answer["status"]["error"]


async def test_bad_requests(apiserver: ApiServer, http: Http) -> None:
    status, body = await http.post(REVIEWS, review(""))
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == "token is required for TokenReview in authentication"
    status, body = await http.get(REVIEWS)
    assert status == 405
    await http.post("/api/v1/namespaces/default/pods", pod("unscheduled"))
    status, body = await http.post("/devcluster/tokens", {"namespace": "default", "pod": "unscheduled"})
    assert status == 400 and "not scheduled" in body["message"]
    status, body = await http.post("/devcluster/tokens", {"namespace": "default", "pod": "missing"})
    assert status == 404


async def test_issue_validates_audiences(apiserver: ApiServer, http: Http) -> None:
    await lc_pod(http)
    status, body = await http.post("/devcluster/tokens", {"namespace": "default", "pod": "lc-abc",
                                                          "audiences": "sedna-gm"})
    assert status == 400 and "audiences" in body["message"]
