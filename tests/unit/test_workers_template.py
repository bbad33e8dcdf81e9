"""gm/workers/template.py: resource quantities the API server would refuse are spec errors,
and no worker may run as the GM's own ServiceAccount."""

from __future__ import annotations

import pytest

from gm.workers.specerrors import ForbiddenSpec, InvalidSpec
from gm.workers.template import ServiceAccountRef, checked_template, refuse_service_account


def template(resources):
    return {"spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}


@pytest.mark.parametrize("value", ["2Gi", "500m", "1", "1.5", ".5", "1e3", "1E", "100Ki", "+1k", 2, 0.5])
def test_valid_quantities_pass(value):
    checked_template(template({"limits": {"memory": value}, "requests": {"cpu": value}}), where="w")


@pytest.mark.parametrize("value", ["lots", "", "2GB", "1.2.3", "Gi", "1 Gi", True, None, [], "nan"])
def test_invalid_quantities_name_the_field(value):
    with pytest.raises(InvalidSpec) as err:
        checked_template(template({"limits": {"memory": value}}), where="spec.trainingWorkers[0].template")
    assert err.value.reason == "InvalidTemplate"
    assert err.value.message.startswith(
        f"spec.trainingWorkers[0].template.spec.containers[0].resources.limits.memory: {value!r} is not a quantity")


@pytest.mark.parametrize("resources", ["2Gi", {"limits": ["memory"]}])
def test_malformed_resources_are_refused(resources):
    with pytest.raises(InvalidSpec):
        checked_template(template(resources), where="w")


# ---- the GM's own ServiceAccount -------------------------------------------------------------

GM = ServiceAccountRef("sedna", "sedna")


def pod(**spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-trainworker-0"},
            "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


def deployment(**spec) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ji-deployment-edge"},
            "spec": {"selector": {}, "template": {"metadata": {}, "spec": {
                "containers": [{"name": "c", "image": "i"}], **spec}}}}


SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}, "spec": {"ports": []}}


@pytest.mark.parametrize("child, field", [
    pytest.param(pod(serviceAccountName="sedna"), "serviceAccountName", id="pod"),
    pytest.param(deployment(serviceAccountName="sedna"), "serviceAccountName", id="deployment-template"),
    pytest.param(pod(serviceAccount="sedna"), "serviceAccount", id="deprecated-alias"),
    pytest.param(pod(serviceAccountName="", serviceAccount="sedna"), "serviceAccount", id="alias-behind-empty"),
])
def test_the_gms_own_account_in_its_namespace_is_refused(child, field):
    with pytest.raises(ForbiddenSpec) as err:
        refuse_service_account([SERVICE, child], namespace="sedna", forbidden=GM)
    assert isinstance(err.value, InvalidSpec) and not err.value.retryable
    assert err.value.reason == "ServiceAccountForbidden"
    kind, name = child["kind"].lower(), child["metadata"]["name"]
    assert err.value.message.startswith(
        f"worker {kind} {name} would run as ServiceAccount sedna/sedna, the GlobalManager's own ({field} in "
        "its template)")


@pytest.mark.parametrize("children, namespace, forbidden", [
    pytest.param([pod(serviceAccountName="sedna")], "team-a", GM, id="same-name-in-another-namespace"),
    pytest.param([pod(serviceAccountName="workers"), deployment()], "sedna", GM, id="another-account"),
    pytest.param([pod()], "sedna", GM, id="default-account"),
    pytest.param([SERVICE, {"kind": "Pod", "metadata": {"name": "p"}}], "sedna", GM, id="no-pod-spec"),
    pytest.param([pod(serviceAccountName="sedna")], "sedna", None, id="gm-identity-unknown"),
])
def test_other_accounts_pass(children, namespace, forbidden):
    refuse_service_account(children, namespace=namespace, forbidden=forbidden)


def test_an_account_the_gm_admits_as_an_lc_is_refused_in_its_namespace():
    lc = ServiceAccountRef("sedna-lc", "sedna-lc")
    with pytest.raises(ForbiddenSpec) as err:
        refuse_service_account([pod(serviceAccountName="sedna-lc")], namespace="sedna-lc", forbidden=GM,
                               edge_accounts=[lc])
    assert "ServiceAccount sedna-lc/sedna-lc, one whose token the GM accepts as a LocalController's node " \
           "identity (serviceAccountName in its template): a worker may not speak for its node" in err.value.message
    refuse_service_account([pod(serviceAccountName="sedna-lc")], namespace="team-a", forbidden=GM,
                           edge_accounts=[lc])  # another namespace's account of that name passes


def test_edge_identity_accounts_come_from_the_token_review_allow_list():
    from gm.config import parse_config
    from gm.reconcile.reconciler import _edge_identity_accounts

    cfg = parse_config("websocket: {tokenReview: {enabled: true, serviceAccounts: "
                       "'system:serviceaccount:sedna-lc:sedna-lc, alice'}}")
    assert _edge_identity_accounts(cfg) == (ServiceAccountRef("sedna-lc", "sedna-lc"),)
    off = parse_config("websocket: {tokenReview: {serviceAccounts: 'system:serviceaccount:a:b'}}")
    assert _edge_identity_accounts(off) == ()
