"""LeaderElector decisions that the dev cluster cannot produce (it has no RBAC)."""

from __future__ import annotations

import asyncio

import pytest

from gm.kube.apierrors import Forbidden
from gm.kube.leader import LeaderElector, LeaderSettings
from gm.kube.metrics import KubeMetrics
from tests.conftest import eventually


class ForbiddingClient:
    """Answers every lease request 403, as a real API server does without the Role."""

    def __init__(self) -> None:
        self.requests = 0

    async def get(self, gvr, name, *, namespace=None):
        self.requests += 1
        raise Forbidden(403, "Forbidden", f'leases.coordination.k8s.io "{name}" is forbidden: '
                        f'User "system:serviceaccount:sedna:gm" cannot get resource "leases"')


@pytest.mark.expect_log_errors(r"leader election blocked")
async def test_forbidden_lease_is_one_clear_error_and_never_leads(caplog):
    client = ForbiddingClient()
    elector = LeaderElector(client, LeaderSettings(namespace="sedna", name="sedna-gm", identity="gm-a",  # type: ignore[arg-type]
                                                   lease_duration=2, renew_deadline=1, retry_period=0.01),
                            metrics=KubeMetrics())
    task = asyncio.create_task(elector.run())
    try:
        await eventually(lambda: client.requests >= 5, message="several attempts")
        assert elector.blocked is not None
        assert elector.blocked.startswith("not allowed to get lease sedna/sedna-gm (check the GM's RBAC): 403")
        assert [r.getMessage() for r in caplog.records].count("leader election blocked") == 1
        assert not elector.is_leader
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
