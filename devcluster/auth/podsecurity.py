"""The Pod Security Standards as kube-apiserver v1.33's PodSecurity admission checks and words them. Pure.

A namespace chooses a level per mode with labels (`pod-security.kubernetes.io/<mode>` and
`<mode>-version`, mode `enforce`, `audit` or `warn`); unlabelled is `privileged`, which checks
nothing. `baseline` forbids the known privilege escalations, `restricted` adds the hardening
rules and replaces three baseline checks with stricter ones (capabilities, volume types,
seccomp). A check answers with a reason and a detail, and the answer to a pod is the list of
the failed checks, baseline ones first, each level in the order of its check ids, joined as
`reason (detail), reason (detail)` after `violates PodSecurity "restricted:latest": `.

Every message here is the real server's (recorded in tests/devcluster/podsecurity_cases.yaml).
Versions other than `latest` are checked as `latest` (the answer still names the version the
namespace asked for): the standards have only grown stricter since v1.22, and nothing in this
project pins an older one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from devcluster.machinery.errors import FieldError

PRIVILEGED, BASELINE, RESTRICTED = "privileged", "baseline", "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
MODES = ("enforce", "audit", "warn")
LABEL_PREFIX = "pod-security.kubernetes.io/"
LATEST = "latest"
_VERSION = re.compile(r"^v1\.([0-9]+)$")

APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
# capabilities a container runtime grants by default: baseline lets a container add these back
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"})
RESTRICTED_VOLUME_SOURCES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"})


# -- namespace policy -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LevelVersion:
    """A level at a version, printed as the real server prints it: `restricted:latest`."""

    level: str
    version: str = LATEST

    def __str__(self) -> str:
        return f"{self.level}:{self.version}"

    @property
    def privileged(self) -> bool:
        return self.level == PRIVILEGED


@dataclass(frozen=True, slots=True)
class Policy:
    """What a namespace's labels ask for, per mode."""

    enforce: LevelVersion
    audit: LevelVersion
    warn: LevelVersion


def namespace_policy(labels: dict[str, str] | None) -> tuple[Policy, list[FieldError]]:
    """The policy of a namespace's labels and the label errors (422 on the namespace's write).

    `audit` and `warn` without a level label take the enforce level (and its version unless
    their own version label is set), so `enforce: restricted` alone also warns about workloads."""
    labels = labels or {}
    errors: list[FieldError] = []
    enforce = _mode(labels, "enforce", None, errors)
    audit = _mode(labels, "audit", enforce, errors)
    warn = _mode(labels, "warn", enforce, errors)
    return Policy(enforce=enforce, audit=audit, warn=warn), errors


def _mode(labels: dict[str, str], mode: str, fallback: LevelVersion | None, errors: list[FieldError]) -> LevelVersion:
    level_key, version_key = LABEL_PREFIX + mode, LABEL_PREFIX + mode + "-version"
    level = labels.get(level_key)
    if level is not None and level not in LEVELS:
        errors.append(_label_error(level_key, level, "must be one of privileged, baseline, restricted"))
        level = RESTRICTED  # an unreadable level is the strictest (only reachable for stored objects)
    version = labels.get(version_key)
    parsed = _version(version) if version is not None else None
    if version is not None and parsed is None:
        errors.append(_label_error(version_key, version, 'must be "latest" or "v1.x"'))
    if level is None and fallback is not None:
        return LevelVersion(fallback.level, parsed or fallback.version)
    return LevelVersion(level or PRIVILEGED, parsed or LATEST)


def _version(value: str) -> str | None:
    if value == LATEST:
        return LATEST
    m = _VERSION.match(value)
    return f"v1.{int(m.group(1))}" if m else None


def _label_error(key: str, value: str, detail: str) -> FieldError:
    return FieldError(f"metadata.labels[{key}]", "Invalid value", detail, value, True)


# -- checks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Violation:
    """One failed check: its reason (`privileged`) and detail (`container "c" must not ...`)."""

    reason: str
    detail: str


Check = Callable[[dict[str, Any], dict[str, Any]], Violation | None]  # (pod metadata, pod spec)


def check_pod(meta: dict[str, Any] | None, spec: dict[str, Any] | None, level: str) -> list[Violation]:
    """The checks of `level` that a pod (or a pod template) fails, in the real server's order."""
    if level == PRIVILEGED:
        return []
    meta, spec = meta or {}, spec or {}
    checks = _BASELINE if level == BASELINE else _RESTRICTED
    return [v for check in checks if (v := check(meta, spec)) is not None]


def forbidden_detail(violations: Iterable[Violation]) -> str:
    """`reason (detail), reason (detail)`: what follows `violates PodSecurity "<level>": `."""
    return ", ".join(f"{v.reason} ({v.detail})" for v in violations)


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Init containers, containers, then ephemeral containers: the order names are listed in."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                yield c


def _sc(obj: dict[str, Any]) -> dict[str, Any]:
    sc = obj.get("securityContext")
    return sc if isinstance(sc, dict) else {}


def _sub(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _quoted(values: Iterable[str]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def _who(names: list[str], singular: str = "container", plural: str = "containers") -> str:
    """`container "c"` or `containers "c", "d"`."""
    return f"{singular if len(names) == 1 else plural} {_quoted(names)}"


def _subjects(pod: bool, containers: list[str]) -> str:
    """`pod`, `container "c"`, `pod and containers "c", "d"`."""
    return " and ".join((["pod"] if pod else []) + ([_who(containers)] if containers else []))


def _names(spec: dict[str, Any], bad: Callable[[dict[str, Any]], bool]) -> list[str]:
    return [str(c.get("name", "")) for c in _containers(spec) if bad(c)]


def _windows(spec: dict[str, Any]) -> bool:
    return _sub(spec, "os").get("name") == "windows"


# baseline

def _app_armor(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    def bad_type(profile: dict[str, Any]) -> bool:
        return bool(profile) and profile.get("type") not in ("RuntimeDefault", "Localhost")

    pod = bad_type(_sub(_sc(spec), "appArmorProfile"))
    containers = _names(spec, lambda c: bad_type(_sub(_sc(c), "appArmorProfile")))
    values = {"Unconfined"} if pod or containers else set()
    annotations = sorted((k, v) for k, v in (meta.get("annotations") or {}).items()
                         if k.startswith(APPARMOR_ANNOTATION) and not _allowed_apparmor_annotation(v))
    values.update(f'{k}="{v}"' for k, v in annotations)
    if not values:
        return None
    who = [_subjects(pod, containers)] if pod or containers else []
    if annotations:
        who.append("annotation" if len(annotations) == 1 else "annotations")
    reason = "forbidden AppArmor profile" if len(values) == 1 else "forbidden AppArmor profiles"
    return Violation(reason, f"{' and '.join(who)} must not set AppArmor profile type to {_quoted(sorted(values))}")


def _allowed_apparmor_annotation(value: Any) -> bool:
    return value in ("", "runtime/default") or (isinstance(value, str) and value.startswith("localhost/"))


def _capabilities_baseline(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    caps: set[str] = set()
    names = []
    for c in _containers(spec):
        bad = {str(x) for x in _sub(_sc(c), "capabilities").get("add") or [] if x not in BASELINE_CAPABILITIES}
        if bad:
            names.append(str(c.get("name", "")))
            caps |= bad
    if not names:
        return None
    return Violation("non-default capabilities",
                     f"{_who(names)} must not include {_quoted(sorted(caps))} in securityContext.capabilities.add")


def _host_namespaces(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    used = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k) is True]
    return Violation("host namespaces", ", ".join(used)) if used else None


def _host_path_volumes(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    names = [str(v.get("name", "")) for v in spec.get("volumes") or [] if isinstance(v, dict) and v.get("hostPath")]
    return Violation("hostPath volumes", _who(names, "volume", "volumes")) if names else None


def _host_ports(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    names, ports = [], set()
    for c in _containers(spec):
        used = {str(p["hostPort"]) for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")}
        if used:
            names.append(str(c.get("name", "")))
            ports |= used
    if not names:
        return None
    verb = "uses" if len(names) == 1 else "use"
    noun = "hostPort" if len(ports) == 1 else "hostPorts"
    return Violation("hostPort", f"{_who(names)} {verb} {noun} {', '.join(sorted(ports))}")


def _privileged(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    names = _names(spec, lambda c: _sc(c).get("privileged") is True)
    return Violation("privileged", f"{_who(names)} must not set securityContext.privileged=true") if names else None


def _proc_mount(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    def bad(c: dict[str, Any]) -> bool:
        return _sc(c).get("procMount") not in (None, "", "Default")

    names = _names(spec, bad)
    if not names:
        return None
    values = sorted({str(_sc(c).get("procMount")) for c in _containers(spec) if bad(c)})
    return Violation("procMount", f"{_who(names)} must not set securityContext.procMount to {_quoted(values)}")


def _se_linux_options(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    types: set[str] = set()
    user = role = False

    def bad(opts: dict[str, Any]) -> bool:
        nonlocal user, role
        failed = False
        if opts.get("type", "") not in SELINUX_TYPES:
            types.add(str(opts["type"]))
            failed = True
        if opts.get("user"):
            user = failed = True
        if opts.get("role"):
            role = failed = True
        return failed

    pod = bad(_sub(_sc(spec), "seLinuxOptions"))
    containers = _names(spec, lambda c: bad(_sub(_sc(c), "seLinuxOptions")))
    if not (pod or containers):
        return None
    parts = [f"{'type' if len(types) == 1 else 'types'} {_quoted(sorted(types))}"] if types else []
    parts += ["user may not be set"] if user else []
    parts += ["role may not be set"] if role else []
    return Violation("seLinuxOptions",
                     f"{_subjects(pod, containers)} set forbidden securityContext.seLinuxOptions: {'; '.join(parts)}")


def _seccomp_type(obj: dict[str, Any]) -> str | None:
    return _sub(_sc(obj), "seccompProfile").get("type")


def _seccomp_baseline(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    pod = _seccomp_type(spec) == "Unconfined"
    containers = _names(spec, lambda c: _seccomp_type(c) == "Unconfined")
    if not (pod or containers):
        return None
    return Violation("seccompProfile",
                     f'{_subjects(pod, containers)} must not set securityContext.seccompProfile.type to "Unconfined"')


def _sysctls(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    bad = [str(s.get("name", "")) for s in _sc(spec).get("sysctls") or []
           if isinstance(s, dict) and s.get("name") not in SAFE_SYSCTLS]
    return Violation("forbidden sysctls", ", ".join(bad)) if bad else None


def _host_process(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    def on(obj: dict[str, Any]) -> bool:
        return _sub(_sc(obj), "windowsOptions").get("hostProcess") is True

    pod, containers = on(spec), _names(spec, on)
    if not (pod or containers):
        return None
    return Violation("hostProcess",
                     f"{_subjects(pod, containers)} must not set securityContext.windowsOptions.hostProcess=true")


# restricted

def _allow_privilege_escalation(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    if _windows(spec):
        return None
    names = _names(spec, lambda c: _sc(c).get("allowPrivilegeEscalation") is not False)
    if not names:
        return None
    return Violation("allowPrivilegeEscalation != false",
                     f"{_who(names)} must set securityContext.allowPrivilegeEscalation=false")


def _capabilities_restricted(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    if _windows(spec):
        return None
    no_drop, adders, caps = [], [], set()
    for c in _containers(spec):
        capabilities = _sub(_sc(c), "capabilities")
        if "ALL" not in (capabilities.get("drop") or []):
            no_drop.append(str(c.get("name", "")))
        added = {str(x) for x in capabilities.get("add") or [] if x != "NET_BIND_SERVICE"}
        if added:
            adders.append(str(c.get("name", "")))
            caps |= added
    parts = [f'{_who(no_drop)} must set securityContext.capabilities.drop=["ALL"]'] if no_drop else []
    if adders:
        parts.append(f"{_who(adders)} must not include {_quoted(sorted(caps))} in securityContext.capabilities.add")
    return Violation("unrestricted capabilities", "; ".join(parts)) if parts else None


def _restricted_volumes(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    names, kinds = [], set()
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        source = next((k for k, x in v.items() if k != "name" and x is not None), "")
        if source not in RESTRICTED_VOLUME_SOURCES:
            names.append(str(v.get("name", "")))
            kinds.add(source)
    if not names:
        return None
    verb = "uses" if len(names) == 1 else "use"
    noun = "restricted volume type" if len(kinds) == 1 else "restricted volume types"
    return Violation("restricted volume types",
                     f"{_who(names, 'volume', 'volumes')} {verb} {noun} {_quoted(sorted(kinds))}")


def _run_as_non_root(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    pod_value = _sc(spec).get("runAsNonRoot")
    explicit = _names(spec, lambda c: _sc(c).get("runAsNonRoot") is False)
    if pod_value is False or explicit:
        return Violation("runAsNonRoot != true",
                         f"{_subjects(pod_value is False, explicit)} must not set securityContext.runAsNonRoot=false")
    if pod_value is True:
        return None
    unset = _names(spec, lambda c: _sc(c).get("runAsNonRoot") is None)
    if not unset:
        return None
    return Violation("runAsNonRoot != true", f"pod or {_who(unset)} must set securityContext.runAsNonRoot=true")


def _run_as_user(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    pod = _sc(spec).get("runAsUser") == 0
    containers = _names(spec, lambda c: _sc(c).get("runAsUser") == 0)
    if not (pod or containers):
        return None
    return Violation("runAsUser=0", f"{_subjects(pod, containers)} must not set runAsUser=0")


def _seccomp_restricted(meta: dict[str, Any], spec: dict[str, Any]) -> Violation | None:
    if _windows(spec):
        return None

    def bad(obj: dict[str, Any]) -> bool:
        kind = _seccomp_type(obj)
        return kind is not None and kind not in ("RuntimeDefault", "Localhost")

    pod, containers = bad(spec), _names(spec, bad)
    if pod or containers:
        values = sorted({str(_seccomp_type(o)) for o in [spec, *_containers(spec)] if bad(o)})
        return Violation("seccompProfile", f"{_subjects(pod, containers)} must not set "
                                           f"securityContext.seccompProfile.type to {_quoted(values)}")
    if _seccomp_type(spec) is not None:
        return None
    unset = _names(spec, lambda c: _seccomp_type(c) is None)
    if not unset:
        return None
    return Violation("seccompProfile", f'pod or {_who(unset)} must set securityContext.seccompProfile.type '
                                       f'to "RuntimeDefault" or "Localhost"')


# the order of the real server's check ids; restricted replaces three baseline checks
_BASELINE: tuple[Check, ...] = (
    _app_armor, _capabilities_baseline, _host_namespaces, _host_path_volumes, _host_ports, _privileged,
    _proc_mount, _se_linux_options, _seccomp_baseline, _sysctls, _host_process)
_REPLACED = (_capabilities_baseline, _host_path_volumes, _seccomp_baseline)
_RESTRICTED: tuple[Check, ...] = (
    *(c for c in _BASELINE if c not in _REPLACED),
    _allow_privilege_escalation, _capabilities_restricted, _restricted_volumes, _run_as_non_root, _run_as_user,
    _seccomp_restricted)
