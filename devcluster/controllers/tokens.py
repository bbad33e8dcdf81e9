"""The token controller: fills ServiceAccount token Secrets.

A Secret of type `kubernetes.io/service-account-token` that names a ServiceAccount in the
annotation `kubernetes.io/service-account.name` gets `data.token` (a token of that
ServiceAccount, valid while the Secret holds it), `data["ca.crt"]` and `data.namespace`, and
the ServiceAccount's uid in `kubernetes.io/service-account.uid`, as the real token
controller does. A Secret whose ServiceAccount does not exist yet waits for it (its
creation enqueues the Secrets that name it); a filled Secret whose token the authority
still honours is left alone.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from devcluster.auth.tokenreview import (
    CA_CERT,
    SA_NAME_ANNOTATION,
    SA_UID_ANNOTATION,
    SECRET_TYPE,
    TokenAuthority,
)
from devcluster.controllers.base import Controller
from devcluster.machinery.errors import ApiError

Key = tuple[str, str]  # (namespace, secret name)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _wants_token(secret: dict[str, Any]) -> bool:
    return secret.get("type") == SECRET_TYPE and bool(_sa_name(secret))


def _sa_name(secret: dict[str, Any]) -> str:
    return (secret["metadata"].get("annotations") or {}).get(SA_NAME_ANNOTATION, "")


class TokenController(Controller):
    """Level-triggered: a key is a token Secret; sync makes its token valid for its ServiceAccount."""

    name = "token-controller"

    def __init__(self, store: Any, tokens: TokenAuthority, *, resync: float = 5.0,
                 ca: Callable[[], str | None] = lambda: None) -> None:
        """`ca`: the PEM of the CA the API is served with (None over plain HTTP: a placeholder)."""
        super().__init__(store, resync=resync)
        self.tokens = tokens
        self.ca = ca
        self._secrets = store.registry.lookup(group="", version="v1", resource="secrets")
        self._sas = store.registry.lookup(group="", version="v1", resource="serviceaccounts")

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        if event.rt.key == self._secrets.key and event.type != "DELETED" and _wants_token(event.obj):
            return [(event.obj["metadata"]["namespace"], event.obj["metadata"]["name"])]
        if event.rt.key == self._sas.key and event.type == "ADDED":
            ns, name = event.obj["metadata"]["namespace"], event.obj["metadata"]["name"]
            return [k for k in self._token_secrets(ns) if k[1] and self._names(k) == name]
        return []

    def resync_keys(self) -> Iterable[Hashable]:
        return self._token_secrets(None)

    def _token_secrets(self, namespace: str | None) -> list[Key]:
        items, _ = self.store.list(self._secrets, namespace)
        return [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in items if _wants_token(s)]

    def _names(self, key: Key) -> str:
        try:
            return _sa_name(self.store.get(self._secrets, *key))
        except ApiError:
            return ""

    async def sync(self, key: Hashable) -> float | None:
        namespace, name = key  # type: ignore[misc]
        try:
            secret = self.store.get(self._secrets, namespace, name)
            sa = self.store.get(self._sas, namespace, _sa_name(secret))
        except ApiError:
            return None  # the Secret is gone, or its ServiceAccount's creation will enqueue it
        if self._valid(secret, sa):
            return None
        token = self.tokens.issue_for_secret(secret, sa)
        ca = self.ca() or CA_CERT
        self.store.mutate(self._secrets, namespace, name, lambda s: _fill(s, sa, token, ca))
        return None

    def _valid(self, secret: dict[str, Any], sa: dict[str, Any]) -> bool:
        encoded = (secret.get("data") or {}).get("token")
        if not encoded:
            return False
        try:
            token = base64.b64decode(encoded).decode()
        except ValueError:
            return False
        who = self.tokens.authenticate(token)
        return not isinstance(who, str) and who.uid == sa["metadata"]["uid"]


def _fill(secret: dict[str, Any], sa: dict[str, Any], token: str, ca: str) -> None:
    meta = secret["metadata"]
    meta.setdefault("annotations", {})[SA_UID_ANNOTATION] = sa["metadata"]["uid"]
    data = secret.setdefault("data", {})
    data.update({"token": _b64(token), "ca.crt": _b64(ca), "namespace": _b64(meta["namespace"])})
