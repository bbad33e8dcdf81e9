"""`make test-cluster`: the cluster tier alone (tests/cluster on the dev cluster and on the real
control plane), what `make test` runs with the rest of the suite.

The real half starts a control plane of its own (tests/cluster/plugin.py; `make kube-build` first),
or uses the cluster of KUBECONFIG when it is set (passed on as SEDNA_REAL_KUBECONFIG; for instance
.kube-real/kubeconfig of `make kube-up`, or k3s/kind). Extra arguments go to pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    if env.get("KUBECONFIG") and not env.get("SEDNA_REAL_KUBECONFIG"):
        env["SEDNA_REAL_KUBECONFIG"] = env["KUBECONFIG"].split(os.pathsep)[0]
        print(f"make test-cluster: the real half on the cluster of KUBECONFIG={env['SEDNA_REAL_KUBECONFIG']}",
              flush=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "cluster"), *argv]
    return subprocess.call(cmd, env=env, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
