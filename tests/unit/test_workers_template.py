"""gm/workers/template.py: resource quantities the API server would refuse are spec errors."""

from __future__ import annotations

import pytest

from gm.workers import InvalidSpec
from gm.workers.template import checked_template


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
