"""The real kubectl against the dev cluster's OpenAPI and field validation.

`kubectl explain` reads the OpenAPI v3 documents; `kubectl apply` asks the server to
validate fields (`fieldValidation=Strict` by default, `Warn` with `--validate=warn`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DEPLOYMENT_WITH_TYPO = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx
        imagePullPolicy: IfNotPresent
        resoures: {limits: {cpu: 100m}}
"""


@pytest.fixture
async def with_crds(kubectl):
    rc, _, err = await kubectl("apply", "-f", str(REPO / "charts" / "sedna" / "crds"))
    assert rc == 0, err
    return kubectl


async def test_explain_a_custom_resource_field(with_crds) -> None:
    rc, out, err = await with_crds("explain", "jointinferenceservices.spec")
    assert rc == 0, err
    assert "KIND:       JointInferenceService" in out
    assert "FIELD: spec <Object>" in out
    assert "cloudWorker\t<Object> -required-" in out


async def test_explain_pod_containers(kubectl) -> None:
    rc, out, err = await kubectl("explain", "pods.spec.containers")
    assert rc == 0, err
    assert "KIND:       Pod" in out
    assert "FIELD: containers <[]Container>" in out
    assert "image\t<string>" in out
    assert "resources\t<ResourceRequirements>" in out


async def test_explain_deployment_recursive(kubectl) -> None:
    rc, out, err = await kubectl("explain", "deploy", "--recursive")
    assert rc == 0, err
    assert "GROUP:      apps" in out and "KIND:       Deployment" in out
    assert "      containers\t<[]Container>" in out
    assert "  replicas\t<integer>" in out


async def test_apply_unknown_field_fails_under_strict(kubectl) -> None:
    rc, _, err = await kubectl("apply", "-f", "-", stdin=DEPLOYMENT_WITH_TYPO)
    assert rc != 0
    assert ('Error from server (BadRequest): error when creating "STDIN": Deployment in version "v1" cannot be '
            'handled as a Deployment: strict decoding error: unknown field '
            '"spec.template.spec.containers[0].resoures"') in err
    rc, _, err = await kubectl("get", "deployment", "web")
    assert rc != 0 and "NotFound" in err


async def test_apply_unknown_field_warns_under_warn_and_is_not_stored(kubectl) -> None:
    rc, out, err = await kubectl("apply", "--validate=warn", "-f", "-", stdin=DEPLOYMENT_WITH_TYPO)
    assert rc == 0, err
    assert 'Warning: unknown field "spec.template.spec.containers[0].resoures"' in err
    assert "deployment.apps/web created" in out
    rc, out, err = await kubectl("get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0]}")
    assert rc == 0, err
    assert '"image":"nginx"' in out and "resoures" not in out


async def test_apply_unknown_field_dropped_silently_under_ignore(kubectl) -> None:
    rc, out, err = await kubectl("apply", "--validate=false", "-f", "-", stdin=DEPLOYMENT_WITH_TYPO)
    assert rc == 0, err
    assert "Warning" not in err and "deployment.apps/web created" in out


async def test_server_side_apply_unknown_field_fails_naming_it(kubectl) -> None:
    rc, _, err = await kubectl("apply", "--server-side", "-f", "-", stdin=DEPLOYMENT_WITH_TYPO)
    assert rc != 0
    assert ("failed to create typed patch object (default/web; apps/v1, Kind=Deployment): "
            ".spec.template.spec.containers[0].resoures: field not declared in schema") in err
    fixed = DEPLOYMENT_WITH_TYPO.replace("resoures", "resources")
    rc, out, err = await kubectl("apply", "--server-side", "-f", "-", stdin=fixed)
    assert rc == 0, err
    rc, out, err = await kubectl("get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].resources}")
    assert rc == 0 and out == '{"limits":{"cpu":"100m"}}', (out, err)
