"""Worker builders: a CR plus the objects it names -> the child objects the GM maintains.

Pure functions (no I/O): the reconcilers diff the result against the cluster by the
`sedna.io/spec-hash` annotation and act. One module per CR kind; the shared parts are
`template` (user PodTemplateSpec + env/knobs), `storage` (URLs -> mounts, initializer),
`children` (owned Pod/Deployment/Service/HPA objects) and `inputs` (Model/Dataset/Secret).
"""

from gm.workers.children import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MANAGED_SELECTOR,
    Owner,
    hpa_name,
    owner_of,
)
from gm.workers.config import WorkerConfig
from gm.workers.errors import InvalidSpec, MissingDependency, SpecError
from gm.workers.federated import (
    FLChildren,
    aggregation_pod_name,
    aggregation_service_name,
    build_fl_children,
    training_pod_name,
)
from gm.workers.jointinference import (
    JIChildren,
    build_ji_children,
    cloud_service_name,
    deployment_name,
    hpa_names,
)
from gm.workers.storage import MountURL, StoragePlan, WorkerMount, plan_storage

__all__ = [
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "MANAGED_SELECTOR",
    "FLChildren",
    "InvalidSpec",
    "JIChildren",
    "MissingDependency",
    "MountURL",
    "Owner",
    "SpecError",
    "StoragePlan",
    "WorkerConfig",
    "WorkerMount",
    "aggregation_pod_name",
    "aggregation_service_name",
    "build_fl_children",
    "build_ji_children",
    "cloud_service_name",
    "deployment_name",
    "hpa_name",
    "hpa_names",
    "owner_of",
    "plan_storage",
    "training_pod_name",
]
