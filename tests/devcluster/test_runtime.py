"""Process runtime: mapped images run as local processes; phase, env, logs, restarts, kill."""

import os
import re
import sys

import pytest

from devcluster.cluster import DevCluster
from tests.conftest import assert_no_crashes, eventually
from tests.devcluster.helpers import pod, rt

SCRIPT_ENV = ("import os, sys; print('hello from', os.environ['POD_NAME'], os.environ['NODE_NAME'], "
              "os.environ['GREETING'], os.environ['MY_IP'], os.environ['SECRET'], sys.argv[1:]); "
              "sys.exit(int(os.environ.get('EXIT', '0')))")
SCRIPT_SLEEP = "import os, time; print('pid', os.getpid(), flush=True); time.sleep(60)"
SCRIPT_CRASH = "import sys; print('crash'); sys.exit(2)"


@pytest.fixture
async def rdc():
    dc = DevCluster(start_delay=0, termination_delay=0, resync=0.5, process_runtime=True, restart_backoff=0.05,
                    image_map={"sim/env:v1": [sys.executable, "-c", SCRIPT_ENV],
                               "sim/sleep:v1": [sys.executable, "-c", SCRIPT_SLEEP],
                               "sim/crash:v1": [sys.executable, "-c", SCRIPT_CRASH]})
    dc.start_controllers()
    try:
        yield dc
    finally:
        await dc.stop()
    assert_no_crashes(dc)


def _get(store, name):
    try:
        return store.get(rt(store, "pods"), "default", name)
    except Exception as err:
        if getattr(err, "code", None) == 404:
            return None
        raise


def _env_pod(name, exit_code, restart="Never"):
    p = pod(name, image="sim/env:v1", nodeName="edge-node-1", restartPolicy=restart)
    p["spec"]["containers"][0].update(
        command=["/ignored/in/image"], args=["--flag", "x"],
        env=[{"name": "GREETING", "value": "hi"}, {"name": "EXIT", "value": str(exit_code)},
             {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
             {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
    return p


@pytest.mark.parametrize(("code", "phase"), [pytest.param(0, "Succeeded", id="exit-0"),
                                             pytest.param(3, "Failed", id="exit-3")])
async def test_process_exit_code_sets_phase_and_env_and_logs_are_served(rdc, code, phase):
    store = rdc.store
    store.create(rt(store, "secrets"), "default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    store.create(rt(store, "pods"), "default", _env_pod("envy", code))
    await eventually(lambda: (_get(store, "envy") or {}).get("status", {}).get("phase") == phase, message=phase)
    p = _get(store, "envy")
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == code
    assert term["reason"] == ("Completed" if code == 0 else "Error")
    logs = rdc.runtime.logs("default", "envy").decode()
    assert logs == f"hello from envy edge-node-1 hi {p['status']['podIP']} v ['--flag', 'x']\n"
    assert rdc.runtime.logs("default", "envy", container="other") is None
    assert rdc.runtime.logs("default", "nobody") is None


async def test_missing_secret_keeps_pod_pending_with_config_error(rdc):
    store = rdc.store
    store.create(rt(store, "pods"), "default", _env_pod("nosecret", 0))

    def config_error():
        cs = ((_get(store, "nosecret") or {}).get("status", {}).get("containerStatuses") or [{}])[0]
        return (cs.get("state") or {}).get("waiting", {}).get("reason") == "CreateContainerConfigError"

    await eventually(config_error, message="CreateContainerConfigError")
    assert _get(store, "nosecret")["status"]["phase"] == "Pending"
    store.create(rt(store, "secrets"), "default", {"metadata": {"name": "s"}, "stringData": {"k": "late"}})
    await eventually(lambda: _get(store, "nosecret")["status"]["phase"] == "Succeeded", within=5,
                   message="started once the secret exists")


async def test_restart_policy_restarts_with_backoff(rdc):
    store = rdc.store
    store.create(rt(store, "pods"), "default", pod("crashy", image="sim/crash:v1", restartPolicy="OnFailure"))

    def restarted_twice():
        cs = ((_get(store, "crashy") or {}).get("status", {}).get("containerStatuses") or [{}])[0]
        return cs.get("restartCount", 0) >= 2 and cs

    cs = await eventually(restarted_twice, message="restarts")
    assert cs["lastState"]["terminated"]["exitCode"] == 2
    assert _get(store, "crashy")["status"]["phase"] == "Running"
    assert rdc.runtime.logs("default", "crashy").startswith(b"crash\ncrash\n")


async def test_deleting_the_pod_terminates_the_process(rdc):
    store = rdc.store
    store.create(rt(store, "pods"), "default", pod("sleepy", image="sim/sleep:v1"))
    # the whole line, not just "pid": unbuffered output may bring the number in a later write
    m = await eventually(lambda: re.search(rb"^pid (\d+)\n", rdc.runtime.logs("default", "sleepy") or b""),
                         message="process output")
    assert _get(store, "sleepy")["status"]["phase"] == "Running"
    pid = int(m.group(1))
    store.delete(rt(store, "pods"), "default", "sleepy")
    await eventually(lambda: _get(store, "sleepy") is None, message="pod removed")

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    await eventually(gone, message="process terminated")


async def test_unmapped_image_is_simulated(rdc):
    store = rdc.store
    store.create(rt(store, "pods"), "default", pod("plain"))
    await eventually(lambda: (_get(store, "plain") or {}).get("status", {}).get("phase") == "Running",
                   message="running")
    assert rdc.runtime.logs("default", "plain") is None


@pytest.mark.expect_log_errors(r"devcluster\.supervisor: task=pod:default/doomed@\S+ component=process-runtime crashed")
async def test_a_pod_loop_that_dies_is_recorded_and_the_pod_fails_with_its_process_killed(rdc):
    store = rdc.store
    created = store.create(rt(store, "pods"), "default", pod("doomed", image="sim/sleep:v1"))
    m = await eventually(lambda: re.search(rb"^pid (\d+)\n", rdc.runtime.logs("default", "doomed") or b""),
                         message="process output")
    loop_task = rdc.supervisor.get(f"pod:default/doomed@{created['metadata']['uid']}").task
    loop_task.cancel()  # the pod's loop ends without anyone asking: a runtime failure
    p = await eventually(lambda: (_get(store, "doomed") or {}).get("status", {}).get("phase") == "Failed"
                         and _get(store, "doomed"), message="pod Failed")
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 128 and "cancelled from outside" in term["message"]
    assert [(c.task, c.component) for c in rdc.crashes] == [
        (f"pod:default/doomed@{created['metadata']['uid']}", "process-runtime")]
    rdc.crashes.clear()  # expected here; the fixture checks for any other

    def gone():
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            return True
        return False

    await eventually(gone, message="orphaned process killed")
