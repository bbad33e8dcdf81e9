"""The pure parts of `make demo` (examples/demo.py): where it finds the run, what it changes in each
example, and the table it prints. The run itself is tests/e2e/test_demo.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples import demokinds
from examples.demo import table
from examples.democluster import parse_banner
from examples.demokinds import EDIT_ENV, KINDS, KindDemo, Worker, resolve

BANNER = """dev cluster  https://127.0.0.1:6444
GM           http://127.0.0.1:45229 (/metrics, /sessions, /healthz, /readyz)
LCs          edge-node-1 http://127.0.0.1:34809, edge-node-2 http://127.0.0.1:43809, cloud-node http://127.0.0.1:42729
examples     none

  export KUBECONFIG=/tmp/run/kubeconfig
  kubectl get ji,fl,il,ll,fe,reid,va,objs,objt,datasets,pods

Ctrl-C to stop.
"""


def test_the_banner_names_the_kubeconfig_and_every_lc():
    found = parse_banner(BANNER)
    assert found.kubeconfig == Path("/tmp/run/kubeconfig")
    assert found.lcs == {"edge-node-1": "http://127.0.0.1:34809", "edge-node-2": "http://127.0.0.1:43809",
                         "cloud-node": "http://127.0.0.1:42729"}


def test_a_banner_without_them_is_an_error():
    with pytest.raises(OSError, match="no kubeconfig"):
        parse_banner("dev cluster  https://127.0.0.1:6443\n")


@pytest.mark.parametrize("kd", [pytest.param(k, id=k.short) for k in KINDS])
def test_each_kind_edits_a_template_of_its_example(kd: KindDemo):
    docs = kd.docs()
    assert [d["kind"] for d in docs].count(kd.kind) == 1
    assert all("namespace" not in d["metadata"] for d in docs)
    [op] = kd.edit_patch(docs)
    cr = next(d for d in docs if d["kind"] == kd.kind)
    env = resolve(cr, op["path"].removesuffix("/-"))
    assert op["value"] in (EDIT_ENV, [EDIT_ENV]) and isinstance(env, list)


def test_the_learning_jobs_are_fast_and_clock_free_and_the_deploy_trigger_as_shipped():
    [il] = [d for d in demokinds.il_cycle_docs() if d["kind"] == "IncrementalLearningJob"]
    trigger = il["spec"]["trainSpec"]["trigger"]
    assert trigger["checkPeriodSeconds"] == 1 and "timer" not in trigger
    assert il["spec"]["deploySpec"]["trigger"]["condition"]["metric"] == "precision_delta"


def test_workers_match_by_name_deployment_or_prefix():
    pod = {"metadata": {"name": "ji-deployment-edge-5db9b568c9-chcnl"}}
    assert Worker("ji-deployment-edge", deployment=True).matches(pod)
    assert not Worker("ji-deployment-edge").matches(pod)
    assert Worker("job-train-", prefix=True).matches({"metadata": {"name": "job-train-1"}})


def test_the_table_lists_kinds_down_and_the_failures_below():
    results = {(k.kind, s): (True, "ok") for k in KINDS for s in ("create", "reports", "edit", "self-heal", "delete")}
    results[("ReidJob", "edit")] = (False, "no reid-reid-0 running with the edit within 60s")
    results[("IncrementalLearningJob", "IL cycle")] = (True, "ok")
    lines = table(results).splitlines()
    assert lines[0].split() == ["kind", "create", "reports", "edit", "self-heal", "delete", "IL", "cycle"]
    assert lines[1 + [k.kind for k in KINDS].index("ReidJob")].split() == [
        "ReidJob", "held", "held", "FAILED", "held", "held", "-"]
    assert lines[-2:] == ["failed:", "  ReidJob / edit: no reid-reid-0 running with the edit within 60s"]
