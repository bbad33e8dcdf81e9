"""Defaulting and validation of DaemonSets, Jobs and CronJobs (what the real server's strategies do).

They build on `defaults.py` (pod templates) and `validation.py` (labels, selectors, pod
specs); `dispatch.py` registers them with the other kinds'. Pure functions over plain dicts; defaulters edit the body in place and
are idempotent, so an update that resends a defaulted object changes nothing.

The one stateful-looking step is a Job's generated selector: on create (the uid is known
by then) a Job without `manualSelector: true` gets `batch.kubernetes.io/controller-uid`
as its selector and the four labels (`batch.kubernetes.io/controller-uid`,
`batch.kubernetes.io/job-name`, `controller-uid`, `job-name`) on its pod template; a Job
without labels of its own then carries the template's labels, as a real server shows it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from devcluster.machinery.errors import FieldError
from devcluster.machinery.fielderrors import (
    as_map,
    go_label_selector,
    invalid_value,
    non_negative,
    required_value,
    unsupported_value,
)
from devcluster.strategy.defaults import default_template, template_metadata
from devcluster.strategy.validation import (
    selector_is_empty,
    template_matches,
    validate_label_selector,
    validate_labels,
    validate_pod_spec,
)

JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_UID_LABEL = "controller-uid"
LEGACY_NAME_LABEL = "job-name"
JOB_RESTART_POLICIES = ("OnFailure", "Never")
POD_RESTART_POLICIES = ("Always", "OnFailure", "Never")
DS_STRATEGIES = ("OnDelete", "RollingUpdate")
CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")


def _d(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    if not isinstance(value, dict):
        value = obj[key] = {}
    return value


# --------------------------------------------------------------------------- defaulting

# a DaemonSet's template generation, which apps/v1 carries as this annotation: 1 on create, one
# more per template change (rules.set_generation keeps it on update); daemon pods are labelled with it
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


def default_daemonset(obj: dict[str, Any]) -> None:
    _d(_d(obj, "metadata"), "annotations").setdefault(TEMPLATE_GENERATION, "1")
    spec = _d(obj, "spec")
    strategy = _d(spec, "updateStrategy")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = _d(strategy, "rollingUpdate")
        ru.setdefault("maxUnavailable", 1)
        ru.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    default_template(spec)


def default_job_spec(spec: dict[str, Any]) -> None:
    """batch/v1 JobSpec defaults: one pod, six retries, NonIndexed."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimitPerIndex") is None:
        spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    default_template(spec)


def generate_job_selector(obj: dict[str, Any]) -> None:
    """The selector and template labels a Job gets unless it asks for a manual selector."""
    spec, meta = _d(obj, "spec"), _d(obj, "metadata")
    uid, name = meta.get("uid"), meta.get("name")
    if spec.get("manualSelector") is True or not uid or spec.get("selector"):
        return
    tmeta = _d(_d(spec, "template"), "metadata")
    labels = _d(tmeta, "labels")
    labels.update({JOB_UID_LABEL: uid, JOB_NAME_LABEL: name, LEGACY_UID_LABEL: uid, LEGACY_NAME_LABEL: name})
    spec["selector"] = {"matchLabels": {JOB_UID_LABEL: uid}}


def default_job(obj: dict[str, Any]) -> None:
    default_job_spec(_d(obj, "spec"))
    generate_job_selector(obj)
    meta = _d(obj, "metadata")
    if not meta.get("labels"):
        tlabels = (obj["spec"].get("template") or {}).get("metadata", {}).get("labels")
        if tlabels:
            meta["labels"] = dict(tlabels)


def default_cronjob(obj: dict[str, Any]) -> None:
    spec = _d(obj, "spec")
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    tmpl = spec.get("jobTemplate")
    if isinstance(tmpl, dict):  # the Job's own defaults come when the Job is made, not here
        template_metadata(tmpl)
        default_template(_d(tmpl, "spec"))


DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    ("apps", "daemonsets"): default_daemonset,
    ("batch", "jobs"): default_job,
    ("batch", "cronjobs"): default_cronjob,
}


def _daemonset_status() -> dict[str, Any]:
    return {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}


INITIAL_STATUS: dict[tuple[str, str], Callable[[], dict[str, Any]]] = {
    ("apps", "daemonsets"): _daemonset_status,
    ("batch", "jobs"): dict,
    ("batch", "cronjobs"): dict,
    # autoscaling/v2 status.desiredReplicas is not omitempty: a new HPA shows 0 (typed clients require it)
    ("autoscaling", "horizontalpodautoscalers"): lambda: {"desiredReplicas": 0},
}


# --------------------------------------------------------------------------- validation

def _selector_and_template(spec: dict[str, Any], path: str, *, restart_policies: tuple[str, ...],
                           kind_word: str) -> list[FieldError]:
    errors: list[FieldError] = []
    sel = spec.get("selector")
    if sel is None:
        errors.append(required_value(f"{path}.selector"))
    else:
        sel_errors = validate_label_selector(sel, f"{path}.selector")
        errors += sel_errors
        if isinstance(sel, dict) and selector_is_empty(sel):
            errors.append(invalid_value(f"{path}.selector", go_label_selector(sel),
                                   f"empty selector is invalid for {kind_word}"))
        elif not sel_errors:
            errors += [FieldError(f"{path}{e.field[4:]}", e.type, e.detail, e.value, e.has_value)
                       for e in template_matches(sel, spec.get("template"))]
    errors += _pod_template(spec.get("template"), f"{path}.template", restart_policies=restart_policies)
    return errors


def _pod_template(template: Any, path: str, *, restart_policies: tuple[str, ...]) -> list[FieldError]:
    if not isinstance(template, dict):
        return [required_value(path)]
    errors = validate_labels(as_map(template.get("metadata")).get("labels"), f"{path}.metadata.labels")
    return errors + validate_pod_spec(template.get("spec"), f"{path}.spec", restart_policies=restart_policies)


def validate_daemonset(obj: dict) -> list[FieldError]:
    spec = as_map(obj.get("spec"))
    errors = _selector_and_template(spec, "spec", restart_policies=("Always",), kind_word="daemonset")
    errors += non_negative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    errors += non_negative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit")
    strategy = as_map(spec.get("updateStrategy"))
    kind = strategy.get("type")
    if kind is not None and kind not in DS_STRATEGIES:
        errors.append(unsupported_value("spec.updateStrategy.type", kind, DS_STRATEGIES))
    return errors


def _validate_job_spec(spec: dict, path: str, *, need_selector: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    for field in ("parallelism", "completions", "backoffLimit"):
        errors += non_negative(spec.get(field), f"{path}.{field}")
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and (not isinstance(ads, int) or isinstance(ads, bool) or ads <= 0):
        errors.append(invalid_value(f"{path}.activeDeadlineSeconds", ads, "must be greater than or equal to 1"))
    if need_selector:
        errors += _selector_and_template(spec, path, restart_policies=POD_RESTART_POLICIES, kind_word="job")
    else:
        errors += _pod_template(spec.get("template"), f"{path}.template", restart_policies=POD_RESTART_POLICIES)
    return errors + _job_restart_policy(spec.get("template"), f"{path}.template.spec.restartPolicy")


def _job_restart_policy(template: Any, path: str) -> list[FieldError]:
    """A Job's pods must not restart in place: Always (the pod default) is a required change,
    as kube-apiserver words it; any other value a pod takes but a Job does not is unsupported."""
    policy = as_map(as_map(template).get("spec")).get("restartPolicy")
    if policy == "Always":
        listed = ", ".join(f'"{p}"' for p in JOB_RESTART_POLICIES)
        return [FieldError(path, "Required value", f"valid values: {listed}")]
    if isinstance(policy, str) and policy not in JOB_RESTART_POLICIES:
        return [unsupported_value(path, policy, JOB_RESTART_POLICIES)]
    return []


def validate_job(obj: dict) -> list[FieldError]:
    return _validate_job_spec(as_map(obj.get("spec")), "spec", need_selector=True)


def validate_job_update(obj: dict, old: dict) -> list[FieldError]:
    new_spec, old_spec = as_map(obj.get("spec")), as_map(old.get("spec"))
    errors: list[FieldError] = []
    if new_spec.get("selector") != old_spec.get("selector"):
        errors.append(invalid_value("spec.selector", go_label_selector(new_spec.get("selector")), "field is immutable"))
    if new_spec.get("template") != old_spec.get("template") and not old_spec.get("suspend"):
        errors.append(invalid_value("spec.template", "core.PodTemplateSpec{...}", "field is immutable"))
    return errors


def validate_daemonset_update(obj: dict, old: dict) -> list[FieldError]:
    new_sel = as_map(obj.get("spec")).get("selector")
    if new_sel != as_map(old.get("spec")).get("selector"):
        return [invalid_value("spec.selector", go_label_selector(new_sel), "field is immutable")]
    return []


_CRON_FIELD = re.compile(r"^(\*|\?|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?(,(\*|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?)*$")
_CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def schedule_errors(schedule: str) -> str | None:
    """Why a cron schedule does not parse (5 fields or a macro, optional TZ= prefix), or None."""
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        return "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
    if text in _CRON_MACROS or text.startswith("@every "):
        return None
    fields = text.split()
    if len(fields) != 5:
        return f"expected exactly 5 fields, found {len(fields)}: {text}"
    if not all(_CRON_FIELD.match(f) for f in fields):
        return f"unparseable schedule: {text}"
    return None


def validate_cronjob(obj: dict) -> list[FieldError]:
    spec = as_map(obj.get("spec"))
    errors: list[FieldError] = []
    schedule = spec.get("schedule")
    if not schedule:
        errors.append(required_value("spec.schedule"))
    elif not isinstance(schedule, str) or schedule_errors(schedule):
        errors.append(invalid_value("spec.schedule", schedule, schedule_errors(str(schedule)) or "must be a string"))
    policy = spec.get("concurrencyPolicy")
    if policy is not None and policy not in CONCURRENCY_POLICIES:
        errors.append(unsupported_value("spec.concurrencyPolicy", policy, CONCURRENCY_POLICIES))
    for field in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        errors += non_negative(spec.get(field), f"spec.{field}")
    tmpl = spec.get("jobTemplate")
    if not isinstance(tmpl, dict):
        return errors + [required_value("spec.jobTemplate")]
    return errors + _validate_job_spec(as_map(tmpl.get("spec")), "spec.jobTemplate.spec", need_selector=False)


VALIDATORS: dict[tuple[str, str], Callable[[dict], list[FieldError]]] = {
    ("apps", "daemonsets"): validate_daemonset,
    ("batch", "jobs"): validate_job,
    ("batch", "cronjobs"): validate_cronjob,
}
UPDATE_VALIDATORS: dict[tuple[str, str], Callable[[dict, dict], list[FieldError]]] = {
    ("apps", "daemonsets"): validate_daemonset_update,
    ("batch", "jobs"): validate_job_update,
}
