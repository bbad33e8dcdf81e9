"""What `make run` starts: the dev cluster, the Sedna CRDs, the GM and the example jobs.

Everything runs in this one process until Ctrl-C (the dev cluster stands in for a real
API server, and the GM talks to it over HTTP exactly as it would to a real one). The
kubeconfig for kubectl is written to .devcluster/kubeconfig.

    .venv/bin/python examples/devrun.py [--no-examples]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.devrun import KUBECONFIG, start_cluster  # noqa: E402
from gm.app import GlobalManager  # noqa: E402
from gm.config import parse_config  # noqa: E402
from shared import apis, logs  # noqa: E402

EXAMPLES = ("joint-inference-helmet-detection.yaml", "federated-learning-surface-defect.yaml")
GM_PORT = 9000

log = logging.getLogger("devrun")


def install_crds(dc) -> None:
    rt = dc.store.registry.lookup(group="apiextensions.k8s.io", version="v1",
                                  resource="customresourcedefinitions")
    for crd in apis.crd_manifests():
        dc.store.create(rt, None, crd)


def apply_examples(dc) -> list[str]:
    applied = []
    for name in EXAMPLES:
        with open(ROOT / "examples" / "upstream" / name, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                kind = apis.by_kind(doc["kind"])
                rt = dc.store.registry.lookup(group=apis.GROUP, version=apis.VERSION, resource=kind.plural)
                dc.store.create(rt, doc.get("metadata", {}).get("namespace", "default"), doc)
                applied.append(f"{kind.short_names[0] if kind.short_names else kind.plural}/{doc['metadata']['name']}")
    return applied


async def run(with_examples: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    dc = await start_cluster()
    gm = None
    try:
        kubeconfig = dc.write_kubeconfig(ROOT / KUBECONFIG).resolve()
        install_crds(dc)
        gm = GlobalManager(parse_config(f"kubeConfig: {kubeconfig}\n"
                                        f"websocket: {{address: 127.0.0.1, port: {GM_PORT}}}\n"))
        await gm.start()
        applied = apply_examples(dc) if with_examples else []
        print(f"dev cluster  {dc.url}\n"
              f"GM           http://127.0.0.1:{gm.port} (/metrics, /healthz, /readyz)\n"
              f"examples     {', '.join(applied) or 'none'}\n\n"
              f"  export KUBECONFIG={kubeconfig}\n"
              f"  kubectl get ji,fl,pods,deployments\n\n"
              f"Ctrl-C to stop.", flush=True)
        waiter = asyncio.create_task(gm.wait())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        stopper.cancel()
    finally:
        if gm is not None:
            await gm.stop()
        await dc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-examples", action="store_true", help="do not apply the example jobs")
    args = parser.parse_args()
    logs.setup("info", "text")
    with contextlib.suppress(ImportError):
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(run(not args.no_examples))
    except OSError as err:
        print(f"devrun: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
