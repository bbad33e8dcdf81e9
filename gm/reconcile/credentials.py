"""The credential index: which cached objects name which Secret.

A CR's Models and Datasets (and an FL job's own spec) name their Secrets by
`credentialName`; the `credential` index on those informers maps a Secret back to them, so a
Secret change enqueues its dependents at once and a rotated credential reaches the workers
without waiting for a resync. The builders read the Secrets from the one Secret cache
(`Context.secrets`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gm.kube.informer import SharedInformer
from gm.kube.store import index_reads
from gm.reconcile.context import Context, own_key

INDEX_CREDENTIAL = "credential"  # `namespace/secret` for each credentialName in an object's spec


def credential_names(*objs: Mapping[str, Any] | None) -> set[str]:
    """Every `credentialName` found anywhere in the given objects' specs."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if k == "credentialName" and isinstance(v, str) and v:
                    names.add(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for obj in objs:
        if obj is not None:
            walk(obj.get("spec"))
    return names


@index_reads("spec")  # and the namespace, the key's
def credential_refs(obj: Mapping[str, Any]) -> list[str]:
    """The `credential` index: `namespace/name` of every Secret the object's spec names."""
    ns = (obj.get("metadata") or {}).get("namespace")
    return [f"{ns}/{name}" for name in sorted(credential_names(obj))]


def index_credentials(*informers: SharedInformer) -> None:
    """Index the informers' objects by the Secrets they name (once, whoever asks first)."""
    for inf in informers:
        inf.ensure_indexer(INDEX_CREDENTIAL, credential_refs)


def using_secret(informer: SharedInformer, secret: Mapping[str, Any]) -> list[dict]:
    """The cached objects of an informer indexed by `index_credentials` that name `secret`."""
    return informer.store.by_index(INDEX_CREDENTIAL, own_key(secret))


def cached_secrets(ctx: Context, namespace: str, names: Iterable[str]) -> dict[str, dict]:
    """The named Secrets in the cache (absent ones are left out: the builders report them,
    and the Secret's add event reconciles the dependents again)."""
    store = ctx.secrets().store
    found = {name: store.get_by_name(namespace, name) for name in sorted(set(names))}
    return {name: secret for name, secret in found.items() if secret is not None}
