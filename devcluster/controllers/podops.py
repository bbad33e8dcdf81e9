"""Creating and deleting the pods a workload controller owns, with the events a real one records.

ReplicaSet, DaemonSet and Job controllers all create pods from their template and delete
surplus ones the same way: a failed create is a Warning `FailedCreate` event and the error
propagates (the key is retried); a delete is guarded by the pod's uid, so a pod replaced
under the same name is never deleted by mistake, and a pod already gone (404) or replaced
(409) is not an error.
"""

from __future__ import annotations

from typing import Any

from devcluster.controllers.meta import is_deleting
from devcluster.machinery.errors import ApiError


def create_pod(store: Any, pod_rt: Any, owner: dict[str, Any], pod: dict[str, Any], *,
               component: str) -> dict[str, Any]:
    """Create `pod` for `owner`; records SuccessfulCreate or FailedCreate on the owner."""
    try:
        created = store.create(pod_rt, owner["metadata"]["namespace"], pod)
    except ApiError as err:
        store.record_event(owner, reason="FailedCreate", message=f"Error creating: {err.message}",
                           type="Warning", component=component)
        raise
    store.record_event(owner, reason="SuccessfulCreate", message=f"Created pod: {created['metadata']['name']}",
                       component=component)
    return created


def delete_pod(store: Any, pod_rt: Any, owner: dict[str, Any], pod: dict[str, Any], *,
               component: str) -> bool:
    """Delete `pod` (this very uid) for `owner`; False when it was already going or gone."""
    meta = pod["metadata"]
    if is_deleting(pod):
        return False
    try:
        store.delete(pod_rt, meta["namespace"], meta["name"], preconditions={"uid": meta["uid"]})
    except ApiError as err:
        if err.code in (404, 409):
            return False
        raise
    store.record_event(owner, reason="SuccessfulDelete", message=f"Deleted pod: {meta['name']}",
                       component=component)
    return True
