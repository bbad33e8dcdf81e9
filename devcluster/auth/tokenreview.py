"""The cluster's one ServiceAccount token authority: TokenRequest, token Secrets, TokenReview and
request authentication all ask it.

A real API server signs ServiceAccount tokens as JWTs and, whenever one is presented (a
TokenReview, or a request's bearer token), checks signature, expiry, audience and that what
the token is bound to still exists: the ServiceAccount (same uid) and, for a bound token,
the Pod or Secret (same uid). Here tokens are random opaque strings remembered by the
authority (nobody here verifies them offline), issued three ways:

- `request_token(namespace, sa, body)`: `POST .../serviceaccounts/<sa>/token` (TokenRequest),
  optionally bound to a Pod or Secret with `spec.boundObjectRef`;
- `issue_for_pod(pod, audiences, expiration)` (and `issue(namespace, pod, ...)`): what the
  kubelet's TokenRequest gives a pod's projected token volume;
- `issue_for_secret(secret, sa)`: the token controller filling a
  `kubernetes.io/service-account-token` Secret (no expiry; valid while the Secret holds it).

`authenticate(token)` answers who a bearer token is (the user `system:serviceaccount:<ns>:<sa>`,
groups `system:serviceaccounts`, `system:serviceaccounts:<ns>`, `system:authenticated`, and for
pod-bound tokens the pod and node in `extra`) or why it is refused; `review(body)` is the
TokenReview answer built from the same check.
"""

from __future__ import annotations

import base64
import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from devcluster.auth.authz import UserInfo
from devcluster.machinery.errors import ApiError, FieldError, bad_request, conflict, invalid
from devcluster.machinery.objmeta import rfc3339
from devcluster.machinery.resource import ResourceType
from devcluster.storage.store import Store

DEFAULT_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)  # the API server's own
PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
SECRET_TYPE = "kubernetes.io/service-account-token"
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
SA_UID_ANNOTATION = "kubernetes.io/service-account.uid"
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32
# The cluster CA that token Secrets and projected volumes carry as `ca.crt`. The dev cluster
# serves plain HTTP, so nothing is verified against it; it is a real certificate (its key was
# thrown away) so clients that load the file into an SSL context at start-up accept it.
CA_CERT = """-----BEGIN CERTIFICATE-----
MIIBiDCCAS2gAwIBAgIUVYEDi5Q0MWKFfm9L2J3AqphJBvgwCgYIKoZIzj0EAwIw
GDEWMBQGA1UEAwwNZGV2Y2x1c3Rlci1jYTAgFw0yNjEyMDExMjQxMDNaGA8yMTI2
MTEwNzEyNDEwM1owGDEWMBQGA1UEAwwNZGV2Y2x1c3Rlci1jYTBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABMkm77pKC14dJNh1CD0rTk5kWGN9pwZPU8wjxbwur1go
xsScKA/jcZk1Qb44AqRVjN8mVylxs+84seLKvKLQmTijUzBRMB0GA1UdDgQWBBQ6
bJFmZPWmGjwVqp2gKvSFfKWtjDAfBgNVHSMEGDAWgBQ6bJFmZPWmGjwVqp2gKvSF
fKWtjDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQDjRq3ZBRTb
ZqeVhrbvFjkUgevktqCcDIiU7iHQsRdZ5wIhAOZc9EuIBl7rgA2ioaOMkmTZyxzg
8im9+ybY9pnd/x6L
-----END CERTIFICATE-----
"""


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """What the authority remembers about one issued token."""

    namespace: str
    service_account: str
    sa_uid: str  # "" when the ServiceAccount object need not exist (pod tokens issued by the kubelet)
    audiences: tuple[str, ...]
    expires: float | None  # None: never (token Secrets)
    credential_id: str
    bound_kind: str = ""  # "Pod" | "Secret" | ""
    bound_name: str = ""
    bound_uid: str = ""
    node: str = ""


class TokenAuthority:
    """Issues ServiceAccount tokens and says who a presented token is."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._tokens: dict[str, IssuedToken] = {}
        # The cluster admin's bearer token, for kubeconfigs of an HTTPS dev cluster (Go clients
        # send no empty credentials over TLS: they prompt for a password instead).
        self.admin_token = secrets.token_urlsafe(32)

    # -- issuing ----------------------------------------------------------------------------

    def issue(self, namespace: str, pod: str, *, audiences: Iterable[str] = DEFAULT_AUDIENCES,
              expiration_seconds: int = 3600) -> str:
        """A token bound to `namespace/pod`, which must exist and be scheduled to a node."""
        return self.issue_for_pod(self._store.get(self._rt("pods"), namespace, pod), audiences,
                                  expiration_seconds)

    def issue_for_pod(self, pod: dict[str, Any], audiences: Iterable[str] = DEFAULT_AUDIENCES,
                      expiration: int = 3600) -> str:
        """A token for the pod's ServiceAccount bound to the pod (a projected token volume's)."""
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        if not spec.get("nodeName"):
            raise bad_request(f"pod {meta.get('namespace')}/{meta['name']} is not scheduled to a node yet")
        if expiration <= 0:
            raise bad_request("expirationSeconds must be positive")
        return self._remember(IssuedToken(
            namespace=meta["namespace"], service_account=spec.get("serviceAccountName") or "default", sa_uid="",
            audiences=tuple(audiences), expires=self._clock() + expiration, credential_id=_jti(),
            bound_kind="Pod", bound_name=meta["name"], bound_uid=meta["uid"], node=spec["nodeName"]))

    def issue_for_secret(self, secret: dict[str, Any], service_account: dict[str, Any]) -> str:
        """A never-expiring token for a `kubernetes.io/service-account-token` Secret."""
        meta, sa_meta = secret["metadata"], service_account["metadata"]
        return self._remember(IssuedToken(
            namespace=meta["namespace"], service_account=sa_meta["name"], sa_uid=sa_meta["uid"],
            audiences=DEFAULT_AUDIENCES, expires=None, credential_id="", bound_kind="Secret",
            bound_name=meta["name"], bound_uid=meta["uid"]))

    def request_token(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """The TokenRequest answer for `POST .../serviceaccounts/<name>/token`."""
        sa = self._store.get(self._rt("serviceaccounts"), namespace, name)
        spec = _token_request_spec(name, body)
        audiences = tuple(spec.get("audiences") or DEFAULT_AUDIENCES)
        bound = self._bound_object(namespace, name, spec.get("boundObjectRef"))
        expires = self._clock() + spec["expirationSeconds"]
        token = self._remember(IssuedToken(
            namespace=namespace, service_account=name, sa_uid=sa["metadata"]["uid"], audiences=audiences,
            expires=expires, credential_id=_jti(), **bound))
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": rfc3339(self._clock())},
                "spec": {**spec, "audiences": list(audiences)},
                "status": {"token": token, "expirationTimestamp": rfc3339(expires)}}

    def revoke(self, token: str) -> None:
        self._tokens.pop(token, None)

    def _remember(self, issued: IssuedToken) -> str:
        token = secrets.token_urlsafe(32)
        self._tokens[token] = issued
        return token

    def _bound_object(self, namespace: str, sa: str, ref: Any) -> dict[str, str]:
        if not ref:
            return {}
        if not isinstance(ref, dict) or ref.get("kind") not in ("Pod", "Secret"):
            kind = ref.get("kind") if isinstance(ref, dict) else ref
            raise bad_request(f"cannot bind token for object of kind {kind}")
        kind, name = ref["kind"], ref.get("name") or ""
        obj = self._store.get(self._rt("pods" if kind == "Pod" else "secrets"), namespace, name)
        uid = obj["metadata"]["uid"]
        if ref.get("uid") and ref["uid"] != uid:
            raise conflict("serviceaccounts", "", sa, f"the UID in the bound object reference ({ref['uid']}) does "
                           f"not match the UID in record. The object might have been deleted and then recreated")
        node = (obj.get("spec") or {}).get("nodeName", "") if kind == "Pod" else ""
        if kind == "Pod" and ((obj.get("spec") or {}).get("serviceAccountName") or "default") != sa:
            raise bad_request(f"cannot bind token for pod {name}: the pod does not use service account {sa}")
        return {"bound_kind": kind, "bound_name": name, "bound_uid": uid, "node": node}

    # -- checking ---------------------------------------------------------------------------

    def authenticate(self, token: str, audiences: Iterable[str] = DEFAULT_AUDIENCES) -> UserInfo | str:
        """Who `token` is, or why it is refused (a TokenReview's `error` text)."""
        wanted = list(audiences)
        issued = self._lookup(token)
        if issued is None:
            return "invalid bearer token, token lookup failed"
        if issued.expires is not None and self._clock() >= issued.expires:
            return "invalid bearer token, service account token has expired"
        if not any(a in issued.audiences for a in wanted):
            return (f"invalid bearer token, token audiences {list(issued.audiences)} is invalid for the target "
                    f"audiences {wanted}")
        error = self._binding_error(token, issued)
        if error:
            return f"invalid bearer token, {error}"
        return _user(issued)

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
        who = self.authenticate(token, wanted)
        if isinstance(who, str):
            status: dict[str, Any] = {"authenticated": False, "user": {}, "error": who}
        else:
            issued = self._tokens[token]
            status = {"authenticated": True, "user": who.to_json(),
                      "audiences": [a for a in wanted if a in issued.audiences]}
        return {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}

    def _lookup(self, token: str) -> IssuedToken | None:
        """The record of `token`; a token Secret restored from a state file is found by its data."""
        issued = self._tokens.get(token)
        if issued is not None:
            return issued
        encoded = base64.b64encode(token.encode()).decode()
        for secret in self._store.list(self._rt("secrets"), None)[0]:
            if secret.get("type") == SECRET_TYPE and (secret.get("data") or {}).get("token") == encoded:
                sa_uid = (secret["metadata"].get("annotations") or {}).get(SA_UID_ANNOTATION, "")
                sa_name = (secret["metadata"].get("annotations") or {}).get(SA_NAME_ANNOTATION, "")
                return self._tokens.setdefault(token, IssuedToken(
                    namespace=secret["metadata"]["namespace"], service_account=sa_name, sa_uid=sa_uid,
                    audiences=DEFAULT_AUDIENCES, expires=None, credential_id="", bound_kind="Secret",
                    bound_name=secret["metadata"]["name"], bound_uid=secret["metadata"]["uid"]))
        return None

    def _binding_error(self, token: str, issued: IssuedToken) -> str:
        """Why a token no longer holds: its ServiceAccount or bound object is gone or was replaced."""
        if issued.sa_uid:
            error = self._uid_error("serviceaccounts", issued.namespace, issued.service_account, issued.sa_uid)
            if error:
                return error
        if not issued.bound_kind:
            return ""
        resource = "pods" if issued.bound_kind == "Pod" else "secrets"
        error = self._uid_error(resource, issued.namespace, issued.bound_name, issued.bound_uid)
        if error or issued.bound_kind != "Secret" or issued.expires is not None:
            return error
        data = self._store.get(self._rt("secrets"), issued.namespace, issued.bound_name).get("data") or {}
        if data.get("token") != base64.b64encode(token.encode()).decode():
            return f"the token in secret {issued.bound_name} was replaced"
        return ""

    def _uid_error(self, resource: str, namespace: str, name: str, uid: str) -> str:
        try:
            obj = self._store.get(self._rt(resource), namespace, name)
        except ApiError:
            return f'{resource} "{name}" not found'
        if obj["metadata"]["uid"] != uid:
            singular = resource[:-1]
            return f"{singular} {name} has uid {obj['metadata']['uid']}, the token was issued for {uid}"
        return ""

    def _rt(self, resource: str) -> ResourceType:
        return self._store.registry.lookup(group="", version="v1", resource=resource)


def _jti() -> str:
    return f"JTI={uuid.uuid4()}"


def _token_request_spec(name: str, body: Any) -> dict[str, Any]:
    """The TokenRequest spec with defaults; 400 for a malformed body, 422 for a bad duration."""
    if not isinstance(body, dict) or body.get("kind") not in (None, "TokenRequest"):
        raise bad_request("the body must be a TokenRequest")
    given = (body.get("metadata") or {}).get("name") if isinstance(body.get("metadata"), dict) else None
    if given and given != name:
        raise invalid("TokenRequest", "authentication.k8s.io", name, [FieldError(
            "metadata.name", "Invalid value", "must match the service account name if specified", given, True)])
    spec = dict(body.get("spec") or {})
    audiences = spec.get("audiences") or []
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        raise bad_request("spec.audiences must be a list of strings")
    seconds = spec.get("expirationSeconds")
    seconds = 3600 if seconds is None else seconds
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise bad_request("spec.expirationSeconds must be an integer")
    detail = ("may not specify a duration less than 10 minutes" if seconds < MIN_EXPIRATION else
              "may not specify a duration larger than 2^32 seconds" if seconds > MAX_EXPIRATION else "")
    if detail:
        # named as the request body names it (kube-apiserver validates the TokenRequest object)
        raise invalid("TokenRequest", "authentication.k8s.io", given or "",
                      [FieldError("spec.expirationSeconds", "Invalid value", detail, seconds, True)])
    spec["expirationSeconds"] = seconds
    return spec


def _user(issued: IssuedToken) -> UserInfo:
    extra: dict[str, tuple[str, ...]] = {}
    if issued.credential_id:
        extra["authentication.kubernetes.io/credential-id"] = (issued.credential_id,)
    if issued.node:
        extra["authentication.kubernetes.io/node-name"] = (issued.node,)
    if issued.bound_kind == "Pod":
        extra["authentication.kubernetes.io/pod-name"] = (issued.bound_name,)
        extra["authentication.kubernetes.io/pod-uid"] = (issued.bound_uid,)
    ns, sa = issued.namespace, issued.service_account
    return UserInfo(
        name=f"system:serviceaccount:{ns}:{sa}",
        uid=issued.sa_uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"sa/{ns}/{sa}")),
        groups=("system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"),
        extra=extra)
