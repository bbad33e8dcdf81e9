"""What kubectl, Helm, kubernetes_asyncio and the GM's client see, on the dev cluster and on the
real control plane: the scenario of capture_scenario.py through a recording proxy in front of each
(both at once), compared request by request (capture_diff.py). A difference that is not in KEPT
fails the test, as does a kept one that no longer shows (the list cannot go stale).

The recordings and the full report (kept differences included) are left in the test's tmp_path:
dev.json, real.json, report.txt. By hand, against running clusters:
    python -m tests.cluster.capture_scenario --dev <kubeconfig> --real <kubeconfig> --out <dir>
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.capture_diff import Kept, compare, report, split_kept
from tests.cluster.capture_scenario import POLICIES, capture_both, recording
from tests.cluster.plugin import REAL_MARK, Cluster
from tests.helm.helmbin import helm_path

pytestmark = getattr(pytest.mark, REAL_MARK)

# resources (and subresources) of kube-apiserver the dev cluster does not serve
NOT_SERVED = (
    "admissionregistration.k8s.io/v1/(mutating|validating)webhookconfigurations",
    "admissionregistration.k8s.io/v1/validatingadmissionpolic(ies|ybindings)", "apiregistration.k8s.io/v1/apiservices",
    "apps/v1/(controllerrevisions|statefulsets)", "authentication.k8s.io/v1/(selfsubjectreviews|tokenreviews)",
    "authorization.k8s.io/v1/(local|self|)subject(access|rules)reviews", "certificates.k8s.io/v1/certificatesigningrequests",
    "discovery.k8s.io/v1/endpointslices", "flowcontrol.apiserver.k8s.io/v1/(flowschemas|prioritylevelconfigurations)",
    "networking.k8s.io/v1/(ingressclasses|ipaddresses|networkpolicies|servicecidrs)", "node.k8s.io/v1/runtimeclasses",
    "storage.k8s.io/v1/(csidrivers|csinodes|csistoragecapacities|storageclasses|volumeattachments)",
    "v1/(bindings|componentstatuses|endpoints|limitranges|podtemplates)",
    "v1/(persistentvolumeclaims|persistentvolumes|replicationcontrollers)(/status|/scale)?",
    "v1/pods/(attach|ephemeralcontainers|eviction|exec|portforward|proxy|resize)", "v1/(nodes|services)/proxy",
    "v1/namespaces/finalize",
)
_NOT_SERVED = "|".join(NOT_SERVED)

# Differences kept on purpose (devcluster/README.md, "Held to the real API server", says why): a regex
# searched in "<request>: <what>", and the reason
KEPT: tuple[Kept, ...] = (
    Kept(r"content type: dev=application/json real=application/vnd\.kubernetes\.protobuf",
         "answers are JSON even when Accept offers protobuf first"),
    Kept(rf"resource only on real: ({_NOT_SERVED})$", "resources the dev cluster does not serve"),
    Kept(r"^GET /api(\?timeout=32s)?: v1/(namespaces|nodes|pods|services) subresources: ",
         "subresources the dev cluster does not serve (exec, attach, proxy, eviction, finalize...)"),
    Kept(r"^GET /(apis/discovery\.k8s\.io/v1/namespaces/\{ns\}/endpointslices|api/v1/namespaces/\{ns\}/"
         r"replicationcontrollers|apis/apps/v1/namespaces/\{ns\}/statefulsets)\?.*(status: dev=404 real=200|"
         r"request only on real)", "resources the dev cluster does not serve (kubectl get all, describe service)"),
    Kept(r"^GET /openapi/v2\?timeout=32s: request only on dev",
         "OpenAPI v3 schemas carry no patch strategies: kubectl's client-side apply reads /openapi/v2 for them"),
    Kept(r"^GET /openapi/v3\?timeout=32s: content type: dev=application/json real=text/plain",
         "the real server serves the OpenAPI v3 index as text/plain; here it is JSON"),
    Kept(r"^GET /openapi/v3/.*: (path only on real: |path \S+: operations dev=\['patch'\] |schema only on real: )",
         "OpenAPI v3 documents describe each object path's PATCH operation only (and what it references)"),
    Kept(r"^GET /openapi/v3/.*: (schema only on dev: |schema \S+: property only on dev: )",
         "the field table follows a newer k8s.io/api (1.34+) than the v1.33 server"),
    Kept(r"^GET /version(\?timeout=32s)?: value differs: \.(minor|emulationMinor|minCompatibilityMinor|gitVersion|"
         r"gitCommit|goVersion): ", "the dev cluster reports v1.32 (kubectl's dispatcher picks the client by it)"),
    Kept(r"field only on real: (rows\[\*\]\.object\.|items\[\*\]\.|\.)metadata\.managedFields"
         r"(\[kube-controller-manager/Update/status\])?$",
         "in-process controllers write without a field manager: no kube-controller-manager/kubelet entries"),
    Kept(r"^GET /api/v1/nodes\?limit=500: field only on (dev: items\[\*\]\.spec\.podCIDR|real: items\[\*\]\.("
         r"metadata\.(annotations|labels\.type|managedFields)|spec|status\.conditions\[type=NetworkUnavailable\]|"
         r"status\.phase))$", "the real cluster's nodes are kwok's"),
    Kept(r"field only on dev: items\[\*\]\.status\.containerStatuses\[name=\w+\]\.containerID$",
         "kwok's pods have no container ids; a kubelet's have"),
    Kept(r"datasets\?allowWatchBookmarks=true&resourceVersion=\{rv\}&timeoutSeconds=1&watch=true: "
         r"watch event only on dev: BOOKMARK$",
         "a watch ends with a bookmark here however short; the real server sends none to a watch under 2 s"),
    Kept(r"allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=\{n\}"
         r"&watch=true: status: dev=200 real=422",
         "streaming lists are served (the WatchList feature gate, off in v1.33); clients fall back to list+watch"),
)


async def test_the_dev_cluster_answers_clients_as_the_real_server(dev_cluster: Cluster, real_cluster: Cluster,
                                                                   tmp_path: Path) -> None:
    dev, real = await capture_both(dev_cluster.kubeconfig, real_cluster.kubeconfig, tmp_path, helm=helm_path())
    diffs = compare(recording(dev), recording(real), POLICIES)
    new, kept = split_kept(diffs, KEPT)
    stale = [k for k in KEPT if not any(k.matches(d) for d in diffs)]
    (tmp_path / "report.txt").write_text(f"new:\n{report(new)}\n\nkept:\n{report(kept)}\n")
    assert not new, f"{len(new)} new differences (all in {tmp_path / 'report.txt'}):\n{report(new)}"
    assert not stale, "kept differences that no longer show:\n" + "\n".join(k.pattern for k in stale)
