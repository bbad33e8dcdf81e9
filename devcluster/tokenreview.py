"""TokenReview (authentication.k8s.io/v1) and the pod-bound ServiceAccount tokens it knows.

A real API server signs projected ServiceAccount tokens (the kubelet asks for one per pod
with TokenRequest) and, on a TokenReview, checks signature, expiry, audience and that the
pod the token is bound to still exists with the same uid. The answer names the service
account and, in `extra`, the bound pod and its node (`authentication.kubernetes.io/
node-name`, Kubernetes >= 1.30). Here `issue()` plays the kubelet's TokenRequest: tokens
are random opaque strings rather than JWTs (nobody here verifies them offline), bound to a
pod of the store that is scheduled to a node. Everything a reviewer can observe follows the
real server: 201 with the review echoed back, `authenticated: false` plus an `error` for a
token that is unknown, expired, for other audiences or whose pod is gone, 400 for an empty
token.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from devcluster.errors import ApiError, bad_request
from devcluster.registry import ResourceType
from devcluster.store import Store

DEFAULT_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)  # the API server's own
PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


@dataclass(frozen=True, slots=True)
class BoundToken:
    """What the authority remembers about one issued token."""

    namespace: str
    service_account: str
    pod: str
    pod_uid: str
    node: str
    audiences: tuple[str, ...]
    expires: float
    credential_id: str


class TokenAuthority:
    """Issues pod-bound ServiceAccount tokens and answers TokenReviews about them."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._tokens: dict[str, BoundToken] = {}

    def issue(self, namespace: str, pod: str, *, audiences: Iterable[str] = DEFAULT_AUDIENCES,
              expiration_seconds: int = 3600) -> str:
        """A token bound to `namespace/pod`, which must exist and be scheduled to a node."""
        obj = self._store.get(self._pods(), namespace, pod)
        node = (obj.get("spec") or {}).get("nodeName")
        if not node:
            raise bad_request(f"pod {namespace}/{pod} is not scheduled to a node yet")
        if expiration_seconds <= 0:
            raise bad_request("expirationSeconds must be positive")
        token = secrets.token_urlsafe(32)
        self._tokens[token] = BoundToken(
            namespace=namespace, service_account=(obj.get("spec") or {}).get("serviceAccountName") or "default",
            pod=pod, pod_uid=obj["metadata"]["uid"], node=node, audiences=tuple(audiences),
            expires=self._clock() + expiration_seconds, credential_id=f"JTI={uuid.uuid4()}")
        return token

    def revoke(self, token: str) -> None:
        self._tokens.pop(token, None)

    def review(self, body: Any) -> dict[str, Any]:
        """The TokenReview answer for a request body (ApiError 400 for a malformed one)."""
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict) or body.get("kind") not in (None, "TokenReview"):
            raise bad_request("the body must be a TokenReview")
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise bad_request("token is required for TokenReview in authentication")
        wanted = spec.get("audiences") or list(DEFAULT_AUDIENCES)
        if not isinstance(wanted, list) or not all(isinstance(a, str) for a in wanted):
            raise bad_request("spec.audiences must be a list of strings")
        status = self._status(token, wanted)
        return {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}

    def _status(self, token: str, wanted: list[str]) -> dict[str, Any]:
        bound = self._tokens.get(token)
        if bound is None:
            return _refused("invalid bearer token, token lookup failed")
        if self._clock() >= bound.expires:
            return _refused("invalid bearer token, service account token has expired")
        granted = [a for a in wanted if a in bound.audiences]
        if not granted:
            return _refused(f"invalid bearer token, token audiences {list(bound.audiences)} is "
                            f"invalid for the target audiences {wanted}")
        error = self._pod_error(bound)
        if error:
            return _refused(f"invalid bearer token, {error}")
        return {"authenticated": True, "user": _user(bound), "audiences": granted}

    def _pod_error(self, bound: BoundToken) -> str:
        try:
            pod = self._store.get(self._pods(), bound.namespace, bound.pod)
        except ApiError:
            return f'pods "{bound.pod}" not found'
        if pod["metadata"]["uid"] != bound.pod_uid:
            return f"pod {bound.pod} has uid {pod['metadata']['uid']}, the token was issued for {bound.pod_uid}"
        return ""

    def _pods(self) -> ResourceType:
        return self._store.registry.lookup(group="", version="v1", resource="pods")


def _refused(error: str) -> dict[str, Any]:
    return {"authenticated": False, "user": {}, "error": error}


def _user(bound: BoundToken) -> dict[str, Any]:
    return {
        "username": f"system:serviceaccount:{bound.namespace}:{bound.service_account}",
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"sa/{bound.namespace}/{bound.service_account}")),
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{bound.namespace}",
                   "system:authenticated"],
        "extra": {
            "authentication.kubernetes.io/credential-id": [bound.credential_id],
            "authentication.kubernetes.io/node-name": [bound.node],
            "authentication.kubernetes.io/pod-name": [bound.pod],
            "authentication.kubernetes.io/pod-uid": [bound.pod_uid],
        },
    }
