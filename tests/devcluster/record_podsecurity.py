"""Record what kube-apiserver answers to the pods of podsecurity_cases.yaml (the data the unit tests of
devcluster/podsecurity.py hold the dev cluster to).

    SEDNA_REAL_KUBECONFIG=.kube-real/kubeconfig .venv/bin/python -m tests.devcluster.record_podsecurity

Each case's pod is sent with `dryRun=All` to two fresh namespaces, labelled `enforce: baseline` and
`enforce: restricted`; `baseline` and `restricted` become what followed `pods "<name>" is forbidden: `
(or "" when admitted). The file is rewritten in place; a case the server refuses otherwise (422...)
stops the run: the cases must be valid pods.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

CASES = Path(__file__).with_name("podsecurity_cases.yaml")
HEADER = """\
# Pods and what kube-apiserver v1.33 answered when each was created (dry run) in a namespace labelled
# pod-security.kubernetes.io/enforce: baseline, then restricted: "" = admitted, else the text after
# `pods "<name>" is forbidden: `. The server applied its create-time AppArmor sync (annotation <-> field)
# before checking. Recorded by tests/devcluster/record_podsecurity.py; read by test_podsecurity.py.
"""


class Real:
    """The admin of a kubeconfig's first cluster, over HTTPS with its CA."""

    def __init__(self, kubeconfig: Path):
        conf = yaml.safe_load(kubeconfig.read_text())
        cluster = conf["clusters"][0]["cluster"]
        self.base = cluster["server"]
        self.token = conf["users"][0]["user"]["token"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.ctx = ssl.create_default_context(cadata=ca)

    def send(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")


def answer(real: Real, ns: str, case: dict[str, Any]) -> str:
    meta: dict[str, Any] = {"name": "p"}
    if case.get("annotations"):
        meta["annotations"] = case["annotations"]
    code, body = real.send("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All",
                           {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": case["spec"]})
    if code == 201:
        return ""
    prefix = 'pods "p" is forbidden: '
    if code != 403 or not body.get("message", "").startswith(prefix):
        raise SystemExit(f"{case['id']}: {code} {body.get('message')}")
    return body["message"][len(prefix):]


def dump(cases: list[dict[str, Any]]) -> str:
    def flow(value: Any) -> str:
        return yaml.safe_dump(value, default_flow_style=True, width=1 << 20, sort_keys=False).strip()

    out = [HEADER]
    for case in cases:
        out.append(f"- id: {case['id']}\n")
        for key in ("annotations", "spec", "baseline", "restricted"):
            if key in case:
                out.append(f"  {key}: {flow(case[key])}\n")
    return "".join(out)


def main() -> None:
    real = Real(Path(os.environ.get("SEDNA_REAL_KUBECONFIG", ".kube-real/kubeconfig")))
    cases = yaml.safe_load(CASES.read_text())
    suffix = uuid.uuid4().hex[:6]
    namespaces = {level: f"psa-{level}-{suffix}" for level in ("baseline", "restricted")}
    for level, ns in namespaces.items():
        real.send("POST", "/api/v1/namespaces", {"metadata": {
            "name": ns, "labels": {"pod-security.kubernetes.io/enforce": level}}})
    time.sleep(2)  # the namespace's default ServiceAccount
    try:
        for case in cases:
            for level, ns in namespaces.items():
                case[level] = answer(real, ns, case)
    finally:
        for ns in namespaces.values():
            real.send("DELETE", f"/api/v1/namespaces/{ns}")
    CASES.write_text(dump(cases))
    print(f"{CASES}: {len(cases)} cases recorded", file=sys.stderr)


if __name__ == "__main__":
    main()
