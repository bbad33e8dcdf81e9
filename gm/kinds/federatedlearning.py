"""FederatedLearningJob: an aggregation pod and Service, one pod per trainer.

Training pods are one-shot, so they are `recreate` children: an edit deletes the outdated
pod and creates it again from the new spec under the same name once it is gone (or, with
`federatedLearning.specEditPolicy: reject`, leaves it running and says so in a condition
and a Warning event). A finished job whose spec was not edited since gets no pod back.

What the workers wait on (a pod stuck terminating, a node that does not exist, no node
that fits) is the `Waiting` condition, and a trainer bound to a missing node is not counted
as active. Round reports are gm/edge/status.py's.

The children: env, ports and labels follow upstream (spec/upstream-gm.md §3.3). Departures:
- Pod names are deterministic (`<job>-aggworker`, `<job>-trainworker-<i>`) and each
  pod's `WORKER_NAME` is its own name, so a reconcile can tell which worker is missing.
- `AGG_IP` is computed per job, never shared: the aggregator's node address when the
  aggregation template pins a node and uses the host network (reachable without cluster
  DNS), otherwise the Service host `<job>-aggregation.<namespace>` as upstream. Trainers
  run on the host network, so in the second case they get dnsPolicy
  `ClusterFirstWithHostNet` (unless their template sets one) for that name to resolve.
- A trainer without a nodeName is placed on its Dataset's node: the data lives there.
Each pod's spec-hash covers only what reaches that pod, so editing one trainer
replaces that trainer alone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gm.config import GMConfig, WorkerConfig
from gm.kindlib.conditions import clear_true, exclusive, pod_counts, waiting_condition
from gm.kindlib.waiting import stranded, summary, waits
from gm.kube.resources import DATASETS, MODELS, NODES, PODS, SERVICES
from gm.reconcile.declaration import (
    Children,
    Dependencies,
    KindDeclaration,
    Observed,
    Owns,
    Watches,
    uses_datasets,
    uses_models,
)
from gm.reports import after_round, round_of
from gm.workers.inputs import Secrets, credential, mount_of, object_list, ref_name, required
from gm.workers.owned import Owner, build_pod, build_service, check_dns_label, owner_of
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import MountURL, StoragePlan, WorkerMount, plan_storage
from gm.workers.template import PodKnobs, env_value, render_template
from shared import apis
from shared.objects import deep_get, find_condition, set_condition

KIND = "FederatedLearningJob"
AGG_PORT = 7363
AGGREGATION, TRAIN = "Aggregation", "train"


@dataclass(frozen=True, slots=True)
class FLChildren:
    """The desired children of one FederatedLearningJob."""

    aggregation_pod: dict[str, Any]
    aggregation_service: dict[str, Any]
    training_pods: tuple[dict[str, Any], ...]
    aggregator_host: str

    def objects(self) -> tuple[dict[str, Any], ...]:
        """Every child, aggregator first (trainers connect to it)."""
        return (self.aggregation_pod, self.aggregation_service, *self.training_pods)

    @property
    def train_nodes(self) -> tuple[str, ...]:
        """Distinct nodes the trainers are pinned to, in worker order (LCs to inform)."""
        nodes = (p["spec"].get("nodeName") for p in self.training_pods)
        return tuple(dict.fromkeys(n for n in nodes if n))


def aggregation_pod_name(job: str) -> str:
    return f"{job}-aggworker"


def training_pod_name(job: str, index: int) -> str:
    return f"{job}-trainworker-{index}"


def aggregation_service_name(job: str) -> str:
    return f"{job}-aggregation"


@dataclass(frozen=True, slots=True)
class _Job:
    """Job-level inputs shared by the pods, resolved once."""

    owner: Owner
    model_name: str
    model: MountURL
    pretrained: MountURL | None
    transmitter: str
    agg_data: MountURL | None
    participants: int
    agg_host: str
    agg_by_address: bool
    config: WorkerConfig


def build_fl_children(
    fl: Mapping[str, Any],
    *,
    models: Mapping[str, Mapping[str, Any]],
    datasets: Mapping[str, Mapping[str, Any]],
    config: WorkerConfig,
    node_addresses: Mapping[str, str] | None = None,
    secrets: Secrets | None = None,
) -> FLChildren:
    """Desired children of `fl`. `models`/`datasets`/`secrets` map names to the objects
    found in the job's namespace (absent names raise MissingDependency);
    `node_addresses` maps node name -> address (used for a host-network aggregator)."""
    owner = owner_of(fl, kind=KIND)
    check_dns_label(aggregation_service_name(owner.name), what="Service name")
    spec = fl["spec"]
    trainers = object_list(spec, "trainingWorkers", what="worker")
    job = _resolve_job(owner, spec, models=models, secrets=secrets, config=config,
                       participants=len(trainers), node_addresses=node_addresses or {})
    return FLChildren(
        aggregation_pod=_aggregation_pod(job, spec["aggregationWorker"]),
        aggregation_service=build_service(owner, name=aggregation_service_name(owner.name),
                                          worker_type=AGGREGATION, port=AGG_PORT),
        training_pods=tuple(_training_pod(job, i, w, datasets=datasets, secrets=secrets)
                            for i, w in enumerate(trainers)),
        aggregator_host=job.agg_host,
    )


def _resolve_job(owner: Owner, spec, *, models, secrets, config, participants,
                 node_addresses) -> _Job:
    agg = spec.get("aggregationWorker")
    if not isinstance(agg, Mapping):
        raise InvalidSpec("InvalidSpec", "spec.aggregationWorker is required")
    name = ref_name(agg, "model", where="spec.aggregationWorker.model")
    transmitter, agg_data = _transmitter(spec, owner=owner, secrets=secrets)
    host = _aggregator_host(owner, agg.get("template"), node_addresses)
    return _Job(owner=owner, model_name=name,
                model=_model(models, name, owner=owner, secrets=secrets),
                pretrained=_pretrained(spec, models, owner=owner, secrets=secrets),
                transmitter=transmitter, agg_data=agg_data, participants=participants,
                agg_host=host, agg_by_address=host != _service_host(owner), config=config)


def _model(models, name: str, *, owner: Owner, secrets) -> MountURL:
    found = required(models.get(name), kind="Model", name=name, namespace=owner.namespace)
    return mount_of(found, kind="Model", secrets=secrets, namespace=owner.namespace)


def _pretrained(spec, models, *, owner: Owner, secrets) -> MountURL | None:
    if spec.get("pretrainedModel") is None:
        return None
    name = ref_name(spec, "pretrainedModel", where="spec.pretrainedModel")
    return _model(models, name, owner=owner, secrets=secrets)


def _transmitter(spec, *, owner: Owner, secrets) -> tuple[str, MountURL | None]:
    """`s3` (with the aggregation data path, not downloaded) when configured, else `ws`."""
    s3 = deep_get(spec, "transmitter", "s3")
    if s3 is None:
        return "ws", None
    path = s3.get("aggDataPath") if isinstance(s3, Mapping) else None
    if not isinstance(path, str) or not path:
        raise InvalidSpec("InvalidSpec", "spec.transmitter.s3.aggDataPath is required")
    secret = credential(s3.get("credentialName"), secrets=secrets, namespace=owner.namespace)
    return "s3", MountURL(url=path, download=False, secret=secret)


def _aggregator_host(owner: Owner, template: Any, node_addresses: Mapping[str, str]) -> str:
    node = deep_get(template, "spec", "nodeName")
    if deep_get(template, "spec", "hostNetwork") is True and isinstance(node, str) and node:
        address = node_addresses.get(node)
        if not address:
            raise InvalidSpec("NodeWithoutAddress",
                              f"node {node} of the host-network aggregation worker has no "
                              "known address")
        return address
    return _service_host(owner)


def _service_host(owner: Owner) -> str:
    return f"{aggregation_service_name(owner.name)}.{owner.namespace}"


def _plan(job: _Job, mounts: list[tuple[str, MountURL | None]]) -> StoragePlan:
    wanted = [WorkerMount(env_name=n, urls=(u,)) for n, u in mounts if u is not None]
    return plan_storage(wanted, image=job.config.storage_initializer_image,
                        pull_policy=job.config.image_pull_policy)


def _mount_env(plan: StoragePlan) -> list[dict[str, Any]]:
    return [env_value(name, value) for name, value in plan.env]


def _aggregation_pod(job: _Job, agg: Mapping[str, Any]) -> dict[str, Any]:
    name = aggregation_pod_name(job.owner.name)
    plan = _plan(job, [("AGG_DATA_PATH", job.agg_data), ("MODEL_URL", job.model),
                       ("PRETRAINED_MODEL_URL", job.pretrained)])
    env = [
        env_value("NAMESPACE", job.owner.namespace),
        env_value("JOB_NAME", job.owner.name),
        env_value("WORKER_NAME", name),
        env_value("AGG_BIND_PORT", str(AGG_PORT)),
        env_value("PARTICIPANTS_COUNT", str(job.participants)),
        env_value("TRANSMITTER", job.transmitter),
        *_mount_env(plan),
    ]
    rendered = render_template(agg.get("template"), where="spec.aggregationWorker.template",
                               env=env, storage=plan, knobs=PodKnobs(restart_policy="OnFailure"))
    return build_pod(job.owner, name=name, worker_type=AGGREGATION, rendered=rendered)


def _training_pod(job: _Job, index: int, worker: Mapping[str, Any], *, datasets,
                  secrets) -> dict[str, Any]:
    where = f"spec.trainingWorkers[{index}]"
    ds_name = ref_name(worker, "dataset", where=f"{where}.dataset")
    dataset = required(datasets.get(ds_name), kind="Dataset", name=ds_name,
                       namespace=job.owner.namespace)
    data = mount_of(dataset, kind="Dataset", secrets=secrets, namespace=job.owner.namespace)
    name = training_pod_name(job.owner.name, index)
    plan = _plan(job, [("AGG_DATA_PATH", job.agg_data), ("MODEL_URL", job.model),
                       ("PRETRAINED_MODEL_URL", job.pretrained), ("TRAIN_DATASET_URL", data)])
    env = [
        env_value("NAMESPACE", job.owner.namespace),
        env_value("JOB_NAME", job.owner.name),
        env_value("WORKER_NAME", name),
        env_value("LC_SERVER", job.config.lc_server),
        env_value("AGG_IP", job.agg_host),
        env_value("AGG_PORT", str(AGG_PORT)),
        env_value("PARTICIPANTS_COUNT", str(job.participants)),
        env_value("TRANSMITTER", job.transmitter),
        env_value("MODEL_NAME", job.model_name),
        env_value("DATASET_NAME", ds_name),
        *_mount_env(plan),
    ]
    knobs = PodKnobs(host_network=True, restart_policy="OnFailure",
                     dns_policy=None if job.agg_by_address else "ClusterFirstWithHostNet",
                     node_name=_dataset_node(dataset))
    rendered = render_template(worker.get("template"), where=f"{where}.template", env=env,
                               storage=plan, knobs=knobs)
    return build_pod(job.owner, name=name, worker_type=TRAIN, rendered=rendered)


def _dataset_node(dataset: Mapping[str, Any]) -> str | None:
    node = deep_get(dataset, "spec", "nodeName")
    return node if isinstance(node, str) and node else None


CONDITION_TYPES = ("Training", "Complete", "Failed")
FINISHED = ("Succeeded", "Failed")


def build(job: dict, deps: Dependencies) -> Children:
    children = build_fl_children(job, models=deps.all(MODELS), datasets=deps.all(DATASETS),
                                 config=deps.config, node_addresses=node_addresses(deps.all(NODES).values()),
                                 secrets=deps.secrets)
    return {PODS: [children.aggregation_pod, *children.training_pods],
            SERVICES: [children.aggregation_service]}


def node_addresses(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> its InternalIP (else ExternalIP), for a host-network aggregator."""
    out: dict[str, str] = {}
    for node in nodes:
        addrs = {a.get("type"): a.get("address") for a in deep_get(node, "status", "addresses", default=[]) or []}
        address = addrs.get("InternalIP") or addrs.get("ExternalIP")
        if address:
            out[node["metadata"]["name"]] = address
    return out


def status(job: dict, observed: Observed) -> dict:
    nodes = observed.nodes or frozenset()
    pods = observed.wanted(PODS)
    new = fl_status(job, pods, all_present=observed.all_present(PODS), converged_generation=None,
                    problem=observed.problem, now=observed.now, stranded=stranded(pods, nodes=nodes),
                    waiting=summary(waits(observed.of(PODS), nodes=nodes)), retrying=observed.retrying)
    if observed.rejected is not None:
        new["conditions"] = set_condition(new.get("conditions"), "Training", "True",
                                          reason="SpecEditRejected", message=observed.rejected,
                                          now=observed.now)
    return new


def finished(job: Mapping[str, Any]) -> bool:
    """A finished job whose spec was not edited since is left alone (no pod comes back)."""
    status_ = job.get("status") or {}
    return status_.get("phase") in FINISHED and \
        status_.get("observedGeneration") == (job.get("metadata") or {}).get("generation")


def reject_edits(config: GMConfig) -> str | None:
    if config.federatedLearning.specEditPolicy == "reject":
        return "federatedLearning.specEditPolicy is reject"
    return None


def addresses_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return deep_get(old, "status", "addresses") != deep_get(new, "status", "addresses")


def fl_phase(pods: list[Mapping[str, Any]], *, all_present: bool, stranded: Collection[str] = ()) -> str:
    active, succeeded, failed = pod_counts(pods, stranded=stranded)
    if failed:
        return "Failed"
    if all_present and succeeded and not active and succeeded == len(pods):
        return "Succeeded"
    return "Running" if active or succeeded else "Pending"


def fl_status(job: Mapping[str, Any], pods: list[Mapping[str, Any]], *, all_present: bool,
              converged_generation: int | None, problem: tuple[str, str] | None, now: str,
              stranded: Collection[str] = (), waiting: tuple[str, str] | None = None,
              retrying: bool = False) -> dict:
    """The FL job's new status. `problem` = (reason, message) of a bad spec, if any (with
    `retrying`, of something missing the GM waits for: the `Waiting` condition, not Failed);
    `converged_generation` = the generation the pods now run, when they all match it;
    `stranded` = pods that cannot run (not counted active); `waiting` = (reason, message)
    of what the workers wait on (waiting.summary), if anything."""
    if problem is not None and retrying:
        problem, waiting = None, problem
    status = dict(job.get("status") or {})
    active, succeeded, failed = pod_counts(pods, stranded=stranded)
    phase = fl_phase(pods, all_present=all_present, stranded=stranded)
    status.update(active=active, succeeded=succeeded, failed=failed, phase=phase)
    if pods and not status.get("startTime"):
        status["startTime"] = now
    if phase == "Succeeded" and not status.get("completionTime"):
        status["completionTime"] = now
    conditions = _fl_conditions(list(status.get("conditions") or []), phase, problem, now)
    status["conditions"] = waiting_condition(conditions, waiting, now=now)
    if converged_generation is not None:
        status["observedGeneration"] = converged_generation
    return status


def _fl_conditions(conditions: list[dict], phase: str, problem: tuple[str, str] | None,
                   now: str) -> list[dict]:
    if problem is not None:
        return exclusive(conditions, CONDITION_TYPES, "Failed", reason=problem[0],
                          message=problem[1], now=now)
    last = round_of(find_condition(conditions, "Training"))
    if phase == "Failed":
        return exclusive(conditions, CONDITION_TYPES, "Failed", reason="WorkerFailed",
                          message=after_round("a worker of the FederatedLearningJob failed", last),
                          now=now)
    if phase == "Succeeded":
        return exclusive(conditions, CONDITION_TYPES, "Complete", reason="Completed",
                          message=after_round("all workers succeeded", last), now=now)
    if phase == "Running":
        # upstream round reports refine this condition's message: keep it
        return exclusive(conditions, CONDITION_TYPES, "Training", reason="Training",
                          message="the workers are running", now=now, keep=True)
    return clear_true(conditions, now)


DECLARATION = KindDeclaration(
    api=apis.FEDERATED_LEARNING,
    owns=(Owns(PODS, on_edit="recreate", frozen_when_finished=True), Owns(SERVICES)),
    watches=(uses_models(apis.FEDERATED_LEARNING), uses_datasets(apis.FEDERATED_LEARNING),
             Watches(NODES, matters=addresses_changed, credentials=False)),
    build=build,
    status=status,
    controller="federatedlearningjob",
    component="FederatedLearning-controller",
    finished=finished,
    requeue_after=2.0,
    reject_edits=reject_edits,
)
