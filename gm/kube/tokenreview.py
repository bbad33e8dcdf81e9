"""TokenReview: ask the API server who a bearer token belongs to (authentication.k8s.io/v1).

The GM uses it to prove an LC's node: an LC presents its projected ServiceAccount token,
the API server checks signature, expiry, audience and that the bound pod still exists,
and answers with the user plus the bound pod's `extra` (`authentication.kubernetes.io/
node-name` names the pod's node, Kubernetes >= 1.30). TokenReview is create-only and never
stored; the caller needs RBAC `create` on `tokenreviews`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gm.kube.apierrors import Unavailable
from gm.kube.client import KubeClient
from gm.kube.resources import GVR

TOKENREVIEWS = GVR("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
REVIEW_TIMEOUT = 5.0  # below an LC's connect timeout (10 s): a slow review refuses, never hangs


@dataclass(frozen=True, slots=True)
class TokenReviewResult:
    """What the API server said about one token."""

    authenticated: bool
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    audiences: tuple[str, ...] = ()
    error: str = ""

    def extra_value(self, key: str) -> str | None:
        """The single value of an `extra` key, None when absent or ambiguous."""
        values = self.extra.get(key, ())
        return values[0] if len(values) == 1 else None

    @property
    def node(self) -> str | None:
        return self.extra_value(NODE_NAME_EXTRA)


def review_body(token: str, audiences: Sequence[str] = ()) -> dict[str, Any]:
    """The TokenReview to create; empty `audiences` means the API server's own audiences."""
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    return {"apiVersion": TOKENREVIEWS.api_version, "kind": "TokenReview", "spec": spec}


def parse_review(obj: Mapping[str, Any]) -> TokenReviewResult:
    """The status of a TokenReview answer; anything malformed counts as not authenticated."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return TokenReviewResult(False, error="answer has no status")
    user = status.get("user") if isinstance(status.get("user"), Mapping) else {}
    extra_raw = user.get("extra") if isinstance(user.get("extra"), Mapping) else {}
    extra = {str(k): tuple(str(v) for v in vs) for k, vs in extra_raw.items() if isinstance(vs, list)}
    return TokenReviewResult(
        authenticated=status.get("authenticated") is True,
        username=str(user.get("username") or ""),
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or () if isinstance(g, str)),
        extra=extra,
        audiences=tuple(str(a) for a in status.get("audiences") or () if isinstance(a, str)),
        error=str(status.get("error") or ""),
    )


async def review_token(client: KubeClient, token: str, *, audiences: Sequence[str] = (),
                       within: float = REVIEW_TIMEOUT) -> TokenReviewResult:
    """POST a TokenReview and parse its status; raises the client's typed ApiError on failure."""
    try:
        async with asyncio.timeout(within):
            answer = await client.create(TOKENREVIEWS, review_body(token, audiences))
    except TimeoutError as exc:
        raise Unavailable(0, "Timeout", f"TokenReview took longer than {within:g}s") from exc
    return parse_review(answer)
