"""The API server's front door: authenticate every request, authorize it, and answer the
access reviews (SelfSubjectAccessReview, SubjectAccessReview, SelfSubjectRulesReview,
SelfSubjectReview) from the same authorizer.

Authentication: a request without an `Authorization` header, or with the token authority's
`admin_token`, is the cluster admin (the dev cluster's plain-HTTP kubeconfig has an empty
user, its HTTPS one the admin token; the admin is in `system:masters`, so RBAC never
restricts it). A bearer token must be one the token authority issued and still honours,
for the API server's audience; anything else is 401 `Unauthorized`, as on a real server.
`Impersonate-User` / `Impersonate-Group` headers switch to another user when the requester
may `impersonate` it (the admin may), which is what `kubectl --as` sends.

Authorization: `authz.authorize` over the stored RBAC objects; a denial is the real
server's 403. The decision is pure; this module only maps HTTP to it.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from aiohttp import web

from devcluster.auth import authz
from devcluster.auth.authz import Attributes, StorePolicy, UserInfo
from devcluster.auth.tokenreview import TokenAuthority
from devcluster.machinery.errors import ApiError, FieldError, bad_request, invalid
from devcluster.machinery.objmeta import rfc3339

log = logging.getLogger("devcluster.access")

ADMIN = UserInfo("devcluster-admin", groups=(authz.MASTERS, "system:authenticated"))
USER_KEY: web.RequestKey[UserInfo] = web.RequestKey("user", UserInfo)  # whom a request was authorized as
AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
REVIEW_PATHS = {
    f"/apis/{AUTHORIZATION}/v1/selfsubjectaccessreviews": "SelfSubjectAccessReview",
    f"/apis/{AUTHORIZATION}/v1/subjectaccessreviews": "SubjectAccessReview",
    f"/apis/{AUTHORIZATION}/v1/selfsubjectrulesreviews": "SelfSubjectRulesReview",
    f"/apis/{AUTHENTICATION}/v1/selfsubjectreviews": "SelfSubjectReview",
}


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


class Access:
    """Authentication and authorization of HTTP requests, and the access-review answers."""

    def __init__(self, store: Any, tokens: TokenAuthority) -> None:
        self.tokens = tokens
        self.policy = StorePolicy(store)

    # -- the gate -------------------------------------------------------------------------------

    def admit(self, request: web.Request) -> UserInfo:
        """The user a request acts as; ApiError 401 (who?) or 403 (not allowed)."""
        user = self.authenticate(request.headers.get("Authorization"))
        user = self._impersonated(user, request)
        if authz.MASTERS in user.groups:
            return user  # the admin's requests skip request parsing: they are never denied
        attrs = authz.request_attributes(request.method, request.path, request.query)
        decision = authz.authorize(user, attrs, self.policy)
        if not decision.allowed:
            log.info("forbidden user=%s verb=%s path=%s", user.name, attrs.verb, request.path)
            raise authz.forbidden(user, attrs, decision.reason)
        return user

    def authenticate(self, header: str | None) -> UserInfo:
        if header is None:
            return ADMIN
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized()
        if secrets.compare_digest(token.encode(), self.tokens.admin_token.encode()):
            return ADMIN
        who = self.tokens.authenticate(token)
        if isinstance(who, str):
            log.info("unauthorized: %s", who)
            raise unauthorized()
        return who

    def _impersonated(self, user: UserInfo, request: web.Request) -> UserInfo:
        name = request.headers.get("Impersonate-User")
        groups = tuple(request.headers.getall("Impersonate-Group", ()))
        if name is None:
            if groups:
                raise bad_request("requested impersonation of groups without impersonating a user")
            return user
        self._may_impersonate(user, _impersonation_attributes("users", name))
        for group in groups:
            self._may_impersonate(user, Attributes(verb="impersonate", resource="groups", name=group))
        return impersonation_target(name, groups)

    def _may_impersonate(self, user: UserInfo, attrs: Attributes) -> None:
        decision = authz.authorize(user, attrs, self.policy)
        if not decision.allowed:
            raise authz.forbidden(user, attrs, decision.reason)

    # -- access reviews -------------------------------------------------------------------------

    def review(self, path: str, user: UserInfo, body: Any) -> dict[str, Any]:
        """The answer to a POST of `body` to one of REVIEW_PATHS by `user` (201, never stored)."""
        kind = REVIEW_PATHS[path]
        if not isinstance(body, dict) or body.get("kind") not in (None, kind):
            raise bad_request(f"the body must be a {kind}")
        return self._answer(kind, user, body)

    def _answer(self, kind: str, user: UserInfo, body: dict[str, Any]) -> dict[str, Any]:
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        group = AUTHENTICATION if kind == "SelfSubjectReview" else AUTHORIZATION
        out: dict[str, Any] = {"kind": kind, "apiVersion": f"{group}/v1",
                               "metadata": {"creationTimestamp": rfc3339(time.time())
                                            if kind == "SelfSubjectReview" else None}}
        if kind == "SelfSubjectReview":
            return {**out, "status": {"userInfo": user.to_json()}}
        if kind == "SelfSubjectRulesReview":
            return {**out, "spec": spec, "status": self._rules(user, spec.get("namespace") or "")}
        if kind == "SubjectAccessReview":
            user = _subject(spec)
        attrs = review_attributes(kind, spec)
        decision = authz.authorize(user, attrs, self.policy)
        status: dict[str, Any] = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        return {**out, "spec": spec, "status": status}

    def _rules(self, user: UserInfo, namespace: str) -> dict[str, Any]:
        resource, non_resource = [], []
        for rule in authz.rules_for(user, namespace, self.policy):
            if rule.get("nonResourceURLs"):
                non_resource.append({"verbs": rule.get("verbs") or [], "nonResourceURLs": rule["nonResourceURLs"]})
            else:
                resource.append({k: rule[k] for k in ("verbs", "apiGroups", "resources", "resourceNames")
                                 if k in rule})
        return {"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": False}


def _impersonation_attributes(resource: str, name: str) -> Attributes:
    parts = name.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return Attributes(verb="impersonate", resource="serviceaccounts", namespace=parts[2], name=parts[3])
    return Attributes(verb="impersonate", resource=resource, name=name)


def impersonation_target(name: str, groups: tuple[str, ...]) -> UserInfo:
    """The impersonated user: its groups, ServiceAccount groups when none are given, authenticated."""
    parts = name.split(":")
    out = list(groups)
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and not groups:
        out += ["system:serviceaccounts", f"system:serviceaccounts:{parts[2]}"]
    if "system:authenticated" not in out and name != "system:anonymous":
        out.append("system:authenticated")
    return UserInfo(name, groups=tuple(out))


def _subject(spec: dict[str, Any]) -> UserInfo:
    user, groups = spec.get("user") or "", spec.get("groups") or []
    if not user and not groups:
        raise invalid("SubjectAccessReview", AUTHORIZATION, "", [FieldError(
            "spec.user", "Invalid value", "at least one of user or group must be specified", "", True)])
    return UserInfo(user, uid=spec.get("uid") or "", groups=tuple(groups),
                    extra={k: tuple(v) for k, v in (spec.get("extra") or {}).items()})


def review_attributes(kind: str, spec: dict[str, Any]) -> Attributes:
    """The attributes an access review asks about; 422 unless exactly one kind of attributes is given."""
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (res is None) == (non is None):
        raise invalid(kind, AUTHORIZATION, "", [FieldError(
            "spec.resourceAttributes", "Invalid value",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified", "null", True)])
    if non is not None:
        return Attributes(verb=non.get("verb") or "", resource_request=False, path=non.get("path") or "")
    return Attributes(verb=res.get("verb") or "", namespace=res.get("namespace") or "",
                      api_group=res.get("group") or "", api_version=res.get("version") or "",
                      resource=res.get("resource") or "", subresource=res.get("subresource") or "",
                      name=res.get("name") or "")
