"""`make test-cluster`: the GM's seed scenarios on the real cluster KUBECONFIG points at.

Without KUBECONFIG it uses .kube-real/kubeconfig, the cluster `make kube-up` starts, when that
file exists. With neither (or a KUBECONFIG that names no file) it says how to get a cluster and
exits 0 without running anything; otherwise it runs tests/cluster with pytest, in a namespace of
its own that it deletes afterwards. It is never part of `make test`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KUBE_REAL = ROOT / ".kube-real" / "kubeconfig"  # written by `make kube-up` (scripts/kube_real.py)
ENABLE = "SEDNA_CLUSTER_TIER"  # tests/cluster/conftest.py collects nothing without it

HOW = """make test-cluster: KUBECONFIG is not set (or names no file), so nothing was run.

It runs the GM's seed scenarios (CRDs, JI/FL children and owner references, cascade, edit,
self-heal, status) on a real cluster, in a namespace of its own, and cleans up. Get one:

  the real control plane built from the Go module proxy (Go >= 1.26; no docker):
    make kube-up                      # writes .kube-real/kubeconfig, which is then the default
    make test-cluster
    make kube-down

  k3s of docker-compose.yml:
    docker compose up -d k3s          # publishes the API server on 127.0.0.1:6443
    docker compose cp k3s:/output/kubeconfig.yaml ./k3s.yaml
    KUBECONFIG=$PWD/k3s.yaml make test-cluster

  kind:
    kind create cluster --name sedna
    KUBECONFIG=$HOME/.kube/config make test-cluster

The user of that kubeconfig must be able to create CRDs and namespaces.
"""


def main(argv: list[str]) -> int:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not kubeconfig and KUBE_REAL.is_file():
        kubeconfig = str(KUBE_REAL)
        print(f"make test-cluster: KUBECONFIG={kubeconfig} (the cluster of `make kube-up`)", flush=True)
    if not kubeconfig or not all(Path(p).is_file() for p in kubeconfig.split(os.pathsep) if p):
        print(HOW)
        return 0
    env = {**os.environ, "KUBECONFIG": kubeconfig, ENABLE: "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "cluster"), *argv]
    return subprocess.call(cmd, env=env, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
