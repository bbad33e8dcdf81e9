"""The admission steps of kube-apiserver v1.33 that the dev cluster runs on writes: ServiceAccount
(mutating) and PodSecurity (validating).

The store calls `mutate` after defaulting and before validation (a refusal there is 403 before any
422, as on the real server) and `validate` after validation and before the object is stored (a
PodSecurity refusal comes after a 422, before a 409 AlreadyExists). Every writer goes through them:
HTTP requests, and the dev cluster's own controllers, whose refused pod creates become FailedCreate
events as a real controller's do. Warnings are appended to the list a request passes in (the HTTP
layer sends each as a `Warning: 299 - "..."` header); a writer that passes none gets none computed.

- **ServiceAccount**, pod creates: `spec.serviceAccountName` (else the deprecated `serviceAccount`,
  else `default`) must name a ServiceAccount of the namespace, whatever `automountServiceAccountToken`
  says: 403 `pods "<name>" is forbidden: error looking up service account <ns>/<sa>: serviceaccount
  "<sa>" not found`, naming the pod as the request did (its `generateName` when it has no name). Both
  fields are set to that name; unless the pod or else the ServiceAccount turns automount off, the pod
  gets the `kube-api-access-<suffix>` projected volume (token, `kube-root-ca.crt`, namespace) mounted
  read-only at /var/run/secrets/kubernetes.io/serviceaccount in each container that mounts nothing
  there; with no `imagePullSecrets` of its own it gets the ServiceAccount's. The real plugin waits up
  to about 2 s for a namespace's `default` ServiceAccount, which the controller manager makes; here
  the namespace-defaults controller's own step (`default_service_account`) makes it at once.
- **PodSecurity** (podsecurity.py): the namespace's labels choose the levels; no exemptions (as a
  kube-apiserver without an admission configuration file). A pod create, or a pod update that changes
  a container image or the number of containers, violating the enforce level is 403 `pods "<name>" is
  forbidden: violates PodSecurity "<level>:<version>": ...`; one admitted that violates the warn level
  earns `would violate PodSecurity ...`. A workload (Deployment, ReplicaSet, DaemonSet, StatefulSet,
  Job, CronJob, ReplicationController, PodTemplate) is never refused: each create or update of the
  object itself earns the warn level's warning for its pod template. Namespace labels are validated
  (422 on `metadata.labels[...]`), and a namespace update that changes the enforce level warns about
  the namespace's pods that violate the new one, grouped by their reasons.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from devcluster.auth import podsecurity
from devcluster.machinery.errors import ApiError, forbidden_object, invalid
from devcluster.machinery.objmeta import generated_name
from devcluster.machinery.resource import ResourceType
from devcluster.storage.objects import get_or_none

POD_KEY = ("", "pods")
NS_KEY = ("", "namespaces")
SA_KEY = ("", "serviceaccounts")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
API_ACCESS_PREFIX = "kube-api-access-"
# where each workload kind keeps its pod template
TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "deployments"): ("spec", "template"),
    ("apps", "replicasets"): ("spec", "template"),
    ("apps", "daemonsets"): ("spec", "template"),
    ("apps", "statefulsets"): ("spec", "template"),
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
    ("", "replicationcontrollers"): ("spec", "template"),
    ("", "podtemplates"): ("template",),
}

Warnings = list[str] | None


def admission_forbidden(rt: ResourceType, name: str, detail: str) -> ApiError:
    """An admission plugin's 403: `<resource>[.<group>] "<name>" is forbidden: <detail>`."""
    return forbidden_object(rt.resource, rt.group, name, detail)


class Admission:
    """ServiceAccount and PodSecurity admission over one store (see the module docstring)."""

    def __init__(self, store: Any, *, default_service_account: Callable[[str], dict[str, Any] | None] | None = None,
                 seed: int | None = None):
        """`default_service_account(namespace)`: makes (or finds) a namespace's `default` ServiceAccount,
        None when it cannot (a terminating namespace); without it a missing `default` is refused."""
        self.store = store
        self._default_sa = default_service_account
        self._rng = random.Random(seed)
        reg = store.registry
        self._ns_rt = reg.for_resource(*NS_KEY)
        self._sa_rt = reg.for_resource(*SA_KEY)
        self._pod_rt = reg.for_resource(*POD_KEY)

    # -- the two phases -------------------------------------------------------------------------

    def mutate(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, *, name: str) -> None:
        """Mutating admission, after defaulting: `name` is the object's name as the request gave it."""
        if rt.key == POD_KEY and old is None:
            self._service_account(rt, obj, name)

    def validate(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, *,
                 subresource: str | None = None, warnings: Warnings = None) -> None:
        """Validating admission, after validation: PodSecurity."""
        if subresource is not None:
            return  # status, scale, binding...: nothing PodSecurity looks at
        if rt.key == POD_KEY:
            self._pod_security(rt, obj, old, warnings)
        elif rt.key == NS_KEY:
            self._namespace(rt, obj, old, warnings)
        elif rt.key in TEMPLATES and warnings is not None:
            self._template(rt, obj, warnings)

    # -- ServiceAccount -------------------------------------------------------------------------

    def _service_account(self, rt: ResourceType, pod: dict[str, Any], name: str) -> None:
        spec = pod.setdefault("spec", {})
        ns = pod["metadata"]["namespace"]
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = spec["serviceAccount"] = account
        sa = self._find_service_account(ns, account)
        if sa is None:
            raise admission_forbidden(rt, name, f'error looking up service account {ns}/{account}: '
                                                f'serviceaccount "{account}" not found')
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            automount = sa.get("automountServiceAccountToken")
        if automount is not False:
            self._mount_token(spec)
        if not spec.get("imagePullSecrets") and sa.get("imagePullSecrets"):
            spec["imagePullSecrets"] = [{"name": s.get("name", "")} for s in sa["imagePullSecrets"]
                                        if isinstance(s, dict)]

    def _find_service_account(self, ns: str, account: str) -> dict[str, Any] | None:
        found = self._get(self._sa_rt, ns, account)
        if found is None and account == "default" and self._default_sa is not None:
            return self._default_sa(ns)
        return found

    def _mount_token(self, spec: dict[str, Any]) -> None:
        volumes = spec.get("volumes") or []
        name = next((v["name"] for v in volumes if isinstance(v, dict)
                     and str(v.get("name", "")).startswith(API_ACCESS_PREFIX)), None)
        needed = False
        for key in ("initContainers", "containers"):
            for c in spec.get(key) or []:
                if not isinstance(c, dict) or any(isinstance(m, dict) and m.get("mountPath") == SA_DIR
                                                  for m in c.get("volumeMounts") or []):
                    continue
                if name is None:
                    name = generated_name(API_ACCESS_PREFIX, self._rng)
                c.setdefault("volumeMounts", []).append({"name": name, "readOnly": True, "mountPath": SA_DIR})
                needed = True
        if needed and not any(isinstance(v, dict) and v.get("name") == name for v in volumes):
            spec["volumes"] = [*volumes, api_access_volume(name)]

    # -- PodSecurity ----------------------------------------------------------------------------

    def _policy(self, ns: str) -> podsecurity.Policy:
        obj = self._get(self._ns_rt, None, ns)
        policy, _ = podsecurity.namespace_policy((obj or {}).get("metadata", {}).get("labels"))
        return policy

    def _pod_security(self, rt: ResourceType, pod: dict[str, Any], old: dict[str, Any] | None,
                      warnings: Warnings) -> None:
        if old is not None and not significant_pod_update(pod.get("spec") or {}, old.get("spec") or {}):
            return
        meta = pod["metadata"]
        policy = self._policy(meta.get("namespace", ""))
        if not policy.enforce.privileged:
            found = podsecurity.check_pod(meta, pod.get("spec"), policy.enforce.level)
            if found:
                raise admission_forbidden(rt, meta.get("name", ""), violates(policy.enforce, found))
        stricter = podsecurity.LEVELS.index(policy.warn.level) > podsecurity.LEVELS.index(policy.enforce.level)
        if warnings is not None and stricter:  # a pod that passed enforce passes any level up to it
            found = podsecurity.check_pod(meta, pod.get("spec"), policy.warn.level)
            if found:
                warnings.append(violates(policy.warn, found, would=True))

    def _template(self, rt: ResourceType, obj: dict[str, Any], warnings: list[str]) -> None:
        policy = self._policy(obj["metadata"].get("namespace", ""))
        if policy.warn.privileged:
            return
        template: Any = obj
        for key in TEMPLATES[rt.key]:
            template = template.get(key) if isinstance(template, dict) else None
        if not isinstance(template, dict):
            return
        found = podsecurity.check_pod(template.get("metadata"), template.get("spec"), policy.warn.level)
        if found:
            warnings.append(violates(policy.warn, found, would=True))

    def _namespace(self, rt: ResourceType, ns: dict[str, Any], old: dict[str, Any] | None, warnings: Warnings) -> None:
        meta = ns["metadata"]
        policy, errors = podsecurity.namespace_policy(meta.get("labels"))
        if errors:
            raise invalid(rt.kind, rt.group, meta.get("name", ""), errors)
        if old is None or warnings is None or policy.enforce.privileged:
            return
        before, before_errors = podsecurity.namespace_policy(old["metadata"].get("labels"))
        if not before_errors and before.enforce == policy.enforce:
            return
        pods, _ = self.store.list(self._pod_rt, meta["name"])
        warnings.extend(existing_pod_warnings(meta["name"], policy.enforce, pods))

    def _get(self, rt: ResourceType | None, ns: str | None, name: str) -> dict[str, Any] | None:
        if rt is None:
            return None
        return get_or_none(self.store, rt, ns, name)


# -- pure parts ----------------------------------------------------------------------------------


def api_access_volume(name: str) -> dict[str, Any]:
    """The projected volume the ServiceAccount admission adds, as kube-apiserver v1.33 writes it."""
    return {"name": name, "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ], "defaultMode": 420}}


def violates(level: podsecurity.LevelVersion, found: list[podsecurity.Violation], *, would: bool = False) -> str:
    """The refusal's text (`violates PodSecurity "<level>": ...`), or the warning's (`would violate ...`)."""
    verb = "would violate" if would else "violates"
    return f'{verb} PodSecurity "{level}": {podsecurity.forbidden_detail(found)}'


def significant_pod_update(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Does a pod update change what PodSecurity looks at? Only images and the number of containers
    can change in a pod spec (ephemeral containers can be added); metadata, status and the other
    mutable fields (tolerations, activeDeadlineSeconds) never make a running pod's update refused."""
    for key in ("initContainers", "containers"):
        a, b = new.get(key) or [], old.get(key) or []
        if len(a) != len(b) or any(_image(x) != _image(y) for x, y in zip(a, b, strict=True)):
            return True
    before = {c.get("name"): _image(c) for c in old.get("ephemeralContainers") or [] if isinstance(c, dict)}
    return any(c.get("name") not in before or before[c.get("name")] != _image(c)
               for c in new.get("ephemeralContainers") or [] if isinstance(c, dict))


def _image(c: Any) -> Any:
    return c.get("image") if isinstance(c, dict) else None


def existing_pod_warnings(namespace: str, level: podsecurity.LevelVersion, pods: list[dict[str, Any]]) -> list[str]:
    """The warnings of a namespace update that makes `level` the enforce level: a head line, then one
    line per set of reasons, `<first pod> (and N other pods): reason, reason`, pods in name order."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for pod in pods:
        found = podsecurity.check_pod(pod.get("metadata"), pod.get("spec"), level.level)
        if found:
            groups.setdefault(tuple(v.reason for v in found), []).append(pod["metadata"]["name"])
    if not groups:
        return []
    out = [f'existing pods in namespace "{namespace}" violate the new PodSecurity enforce level "{level}"']
    for reasons, names in groups.items():
        others = len(names) - 1
        head = names[0] if not others else f"{names[0]} (and {others} other pod{'s' if others > 1 else ''})"
        out.append(f"{head}: {', '.join(reasons)}")
    return out
