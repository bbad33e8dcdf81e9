"""The chart's Grafana dashboards: valid dashboard JSON with a unique uid, a job variable built
from the job metrics, every query parsing to documented metric names."""

from __future__ import annotations

import pytest

from tests.dashboards import dashboards, family, metric_names, queries
from tests.unit.test_metrics import documented

BOARDS = dashboards()
EXPECTED = {"sedna-overview.json", "sedna-joint-inference.json", "sedna-federated-learning.json",
            "sedna-incremental-learning.json", "sedna-lifelong-learning.json", "sedna-multi-edge.json"}


def test_the_overview_one_per_paradigm_and_multi_edge_with_unique_uids():
    assert set(BOARDS) == EXPECTED
    uids = [board["uid"] for board in BOARDS.values()]
    assert len(set(uids)) == len(uids) and all(0 < len(uid) <= 40 for uid in uids)
    assert all(board["title"].startswith("Sedna / ") and "sedna" in board["tags"] for board in BOARDS.values())


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_a_dashboard_has_the_job_variable_and_prometheus_panels(name):
    board = BOARDS[name]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    job = variables["job"]
    assert job["type"] == "query" and job["query"]["query"].startswith("label_values(sedna_gm_job_phase")
    assert job["query"]["query"].endswith(", name)") and job["includeAll"] and job["multi"]
    assert variables["datasource"]["query"] == "prometheus"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert panels and len({p["id"] for p in board["panels"]}) == len(board["panels"])
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"]), panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    if name != "sedna-overview.json":
        selectors = [q for q in queries(board) if "sedna_gm_job_" in q or "sedna_gm_ji_" in q]
        assert all('name=~"$job"' in q or "label_values" in q or q.startswith("sedna_gm_job_phase{kind")
                   for q in selectors)


def test_every_query_selects_documented_metrics():
    known = {**documented("sedna_gm_"), **documented("sedna_lc_")}
    used = {family(n) for board in BOARDS.values() for q in queries(board) for n in metric_names(q)}
    assert used and used <= set(known), used - set(known)


@pytest.mark.parametrize(("expr", "names"), [
    pytest.param('sum by (controller, le) (rate(sedna_gm_reconcile_duration_seconds_bucket{a="b"}[5m]))',
                 {"sedna_gm_reconcile_duration_seconds_bucket"}, id="grouping-range-matchers"),
    pytest.param('time() - max by (node) (x_seconds{name=~"$job", y="by (z)"})', {"x_seconds"}, id="function"),
    pytest.param("histogram_quantile(0.95, a_bucket) / on (n) group_left(k) b > bool 1 and c offset 5m",
                 {"a_bucket", "b", "c"}, id="keywords"),
])
def test_the_tokenizer(expr, names):
    assert metric_names(expr) == names
