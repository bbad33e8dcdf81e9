"""A real Kubernetes control plane for the cluster test tier, built from the Go module proxy.

    kube_real.py build    kube-apiserver, kube-controller-manager, kube-scheduler (hack/kube),
                          etcd (hack/kube/etcd) and kwok into .tools/kube/bin; a no-op while
                          .tools/kube/stamp matches what would be built
    kube_real.py up       start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
                          kwok on free loopback ports, state and logs in .kube-real/; returns once
                          /readyz is ok and the nodes edge-node-1, edge-node-2, cloud-node are Ready
    kube_real.py down     stop what `up` started (pidfiles in .kube-real/pids)
    kube_real.py status   what runs, /readyz, the nodes; exit 0 only when all is up

`up` writes .kube-real/kubeconfig (user `admin` in group system:masters, a static token, the CA
embedded). Every `up` starts a fresh cluster (new etcd data, certificates and tokens). The API
server is HTTPS with a CA made here (openssl), authorization Node,RBAC, service-account tokens
signed with a key made here; the controller manager and scheduler use their own users
(system:kube-controller-manager, system:kube-scheduler) as kubeadm sets them up. kwok plays the
kubelet of the three nodes with hack/kube/kwok-stages.yaml.

KUBE_REAL_STATE moves .kube-real (the test tier's own cluster lives in .kube-test/<pid>).

Anything that fails exits non-zero with what failed and the end of that component's log.
Only the standard library and the openssl CLI are used: it runs before the venv has anything.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from shared.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
HACK = ROOT / "hack" / "kube"
# where the binaries go: .tools/kube unless KUBE_REAL_TOOLS says otherwise (a CI cache, a cold-build test)
TOOLS = Path(os.environ.get("KUBE_REAL_TOOLS") or ROOT / ".tools" / "kube").resolve()
BIN = TOOLS / "bin"
STAMP = TOOLS / "stamp"
# the running cluster's state, logs and kubeconfig: .kube-real unless KUBE_REAL_STATE says otherwise
# (the test tier starts a cluster of its own there, so `make test` never touches a `make kube-up` one)
STATE = Path(os.environ.get("KUBE_REAL_STATE") or ROOT / ".kube-real").resolve()
PIDS = STATE / "pids"
LOGS = STATE / "logs"
PKI = STATE / "pki"
KUBECONFIG = STATE / "kubeconfig"
STAGES = HACK / "kwok-stages.yaml"
AUDIT_LOG = LOGS / "audit.log"
# at Metadata level (verb, user, user agent, object, response code): every request of `admin` (the
# tests, kubectl and a GM run with .kube-real/kubeconfig) and every write of the cluster's own
# components but node heartbeats; .kube-real/logs/audit.log says which request the server refused and why
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "Metadata", "users": ["admin"]},
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "None", "users": ["kwok"], "resources": [{"group": "", "resources": ["nodes/status"]}]},
        {"level": "Metadata"},
    ],
}

KWOK_MODULE, KWOK_VERSION = "sigs.k8s.io/kwok", "v0.7.0"
ETCD_VERSION_FILE = HACK / "etcd" / "go.mod"
# bump when the build recipe below changes in a way the stamp cannot see
RECIPE = "1"

ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
NODES = ("edge-node-1", "edge-node-2", "cloud-node")
SERVICE_CIDR, SERVICE_IP = "10.96.0.0/16", "10.96.0.1"
POD_CIDR = "10.244.0.1/16"
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
EDGE_ROLE = "node-role.kubernetes.io/edge"
# kube-controller-manager --controllers: what the GM's children and the chart's LC DaemonSet need,
# plus what keeps namespaces, service accounts and nodes working (node-lifecycle lifts the
# not-ready taint the TaintNodesByCondition admission puts on every new node)
CONTROLLERS = (
    "garbage-collector-controller", "deployment-controller", "replicaset-controller", "job-controller",
    "daemonset-controller", "namespace-controller", "serviceaccount-controller",
    "serviceaccount-token-controller", "root-ca-certificate-publisher-controller", "node-lifecycle-controller",
)

START_TIMEOUT = float(os.environ.get("KUBE_REAL_START_TIMEOUT", "120"))


class Failure(Exception):
    """A step that failed; the message says which and why."""


def say(msg: str) -> None:
    print(f"kube-real: {msg}", flush=True)


# -- build ------------------------------------------------------------------------------------


def kube_version() -> str:
    """The k8s.io/kubernetes version hack/kube/go.mod requires, e.g. v1.34.4."""
    text = (HACK / "go.mod").read_text()
    m = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v1\.\d+\.\d+)\s*$", text, re.M)
    if not m:
        raise Failure(f"{HACK / 'go.mod'} requires no k8s.io/kubernetes v1.x.y")
    return m.group(1)


def ldflags(version: str) -> str:
    major, minor = version[1:].split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean",
                  f"-X {pkg}.buildDate=1970-01-01T00:00:00Z"]
    return " ".join(flags)


def go() -> str:
    path = shutil.which("go")
    if not path:
        raise Failure("`go` is not on PATH: the control plane is built from source with Go >= 1.26 "
                      "(https://go.dev/dl/); GOPROXY must reach proxy.golang.org")
    return path


def build_inputs(gobin: str) -> str:
    """Everything the binaries depend on, hashed: the stamp."""
    h = hashlib.sha256()
    h.update(subprocess.run([gobin, "version"], capture_output=True, text=True, check=True).stdout.encode())
    for f in ("go.mod", "go.sum", "etcd/go.mod", "etcd/go.sum", "etcd/main.go",
              "cmd/kube-apiserver/main.go", "cmd/kube-controller-manager/main.go", "cmd/kube-scheduler/main.go"):
        lines = (HACK / f).read_bytes().splitlines()
        if f.endswith("go.mod"):  # a comment edit needs no rebuild
            lines = [line for line in lines if not line.lstrip().startswith(b"//")]
        h.update(f.encode() + b"\0" + b"\n".join(lines) + b"\0")
    h.update(f"{KWOK_MODULE}@{KWOK_VERSION} recipe {RECIPE}".encode())
    return h.hexdigest()


def binaries() -> list[Path]:
    return [BIN / n for n in ORDER]


def built(gobin: str | None = None) -> bool:
    try:
        return (all(b.is_file() for b in binaries()) and STAMP.is_file()
                and STAMP.read_text().split()[0] == build_inputs(gobin or go()))
    except (OSError, IndexError, subprocess.CalledProcessError):
        return False


def run_go(args: list[str], cwd: Path, what: str, env: dict[str, str]) -> float:
    say(f"building {what}: go {' '.join(a if len(a) < 80 else a[:77] + '...' for a in args)}")
    start = time.monotonic()
    cmd = ["nice", "-n", "10", go(), *args] if shutil.which("nice") else [go(), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env)
    took = time.monotonic() - start
    if proc.returncode:
        raise Failure(f"building {what} failed (go exited {proc.returncode} after {took:.0f}s; output above)")
    say(f"built {what} in {took:.0f}s")
    return took


def cmd_build(args: argparse.Namespace) -> int:
    gobin = go()
    if not args.force and built(gobin):
        say(f"binaries in {BIN} are up to date ({kube_version()}, {KWOK_MODULE} {KWOK_VERSION})")
        return 0
    version = kube_version()
    BIN.mkdir(parents=True, exist_ok=True)
    STAMP.unlink(missing_ok=True)
    jobs = str(args.jobs or os.environ.get("KUBE_BUILD_JOBS") or os.cpu_count() or 2)
    env = {**os.environ, "GOBIN": str(BIN), "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -buildvcs=false".strip()}
    common = ["-p", jobs, "-trimpath"]
    start = time.monotonic()
    times = {
        "kubernetes": run_go(["build", *common, f"-ldflags={ldflags(version)}", "-o", f"{BIN}/", "./cmd/..."],
                             HACK, f"kube-apiserver, kube-controller-manager, kube-scheduler {version}", env),
        "etcd": run_go(["build", *common, "-ldflags=-s -w", "-o", str(BIN / "etcd"), "."], HACK / "etcd", "etcd", env),
        "kwok": run_go(["install", *common, "-ldflags=-s -w", f"{KWOK_MODULE}/cmd/kwok@{KWOK_VERSION}"],
                       ROOT, f"kwok {KWOK_VERSION}", env),
    }
    missing = [str(b) for b in binaries() if not b.is_file()]
    if missing:
        raise Failure(f"the build finished but these are missing: {', '.join(missing)}")
    out = subprocess.run([str(BIN / "kube-apiserver"), "--version"], capture_output=True, text=True)
    if version not in out.stdout:
        raise Failure(f"kube-apiserver --version says {out.stdout.strip()!r}, not {version}: the ldflags did not stick")
    STAMP.write_text(f"{build_inputs(gobin)}\n{version} {KWOK_MODULE}@{KWOK_VERSION}\n"
                     + "".join(f"{k} {v:.0f}s\n" for k, v in times.items()))
    say(f"built everything in {time.monotonic() - start:.0f}s into {BIN}")
    return 0


# -- certificates, tokens, kubeconfigs ---------------------------------------------------------


def openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if not exe:
        raise Failure("the `openssl` CLI is needed to make the cluster's CA and certificates (apt-get install openssl)")
    proc = subprocess.run([exe, *args], cwd=PKI, capture_output=True, text=True)
    if proc.returncode:
        raise Failure(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def make_pki() -> None:
    PKI.mkdir(parents=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "3650", "-subj", "/CN=sedna-kube-real-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    sans = ",".join(["DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                     "DNS:kubernetes.default.svc.cluster.local", "IP:127.0.0.1", f"IP:{SERVICE_IP}"])
    (PKI / "serving.ext").write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n"
                                     "keyUsage=critical,digitalSignature,keyEncipherment\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
            "-subj", "/CN=kube-apiserver")
    openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "apiserver.crt", "-days", "3650", "-extfile", "serving.ext")
    openssl("genrsa", "-out", "sa.key", "2048")
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    for f in PKI.iterdir():
        f.chmod(0o600)


def kubeconfig(server: str, user: str, token: str) -> str:
    ca = base64.b64encode((PKI / "ca.crt").read_bytes()).decode()
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "kube-real", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "kube-real", "context": {"cluster": "kube-real", "user": user}}],
        "current-context": "kube-real",
    }, indent=2) + "\n"


# -- processes --------------------------------------------------------------------------------


def pidfile(name: str) -> Path:
    return PIDS / f"{name}.pid"


def our_pid(name: str) -> int | None:
    """The pid in `name`'s pidfile when that process is still the binary we started."""
    try:
        pid = int(pidfile(name).read_text().split()[0])
        exe = os.readlink(f"/proc/{pid}/exe")
    except (OSError, ValueError, IndexError):
        return None
    return pid if Path(exe.removesuffix(" (deleted)")).name == name else None


def start(name: str, args: list[str]) -> subprocess.Popen:
    LOGS.mkdir(parents=True, exist_ok=True)
    PIDS.mkdir(parents=True, exist_ok=True)
    log = open(LOGS / f"{name}.log", "ab")
    # a session of its own: the cluster outlives this script and a ^C of the make that started it
    proc = subprocess.Popen([str(BIN / name), *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            cwd=STATE, start_new_session=True)
    log.close()
    pidfile(name).write_text(f"{proc.pid}\n")
    return proc


def log_tail(name: str, lines: int = 25) -> str:
    try:
        text = (LOGS / f"{name}.log").read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text[-lines:])


def stop(name: str, timeout: float = 15.0) -> bool:
    pid = our_pid(name)
    if pid is None:
        pidfile(name).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and our_pid(name) == pid:
        time.sleep(0.1)
    if our_pid(name) == pid:
        os.kill(pid, signal.SIGKILL)
        while our_pid(name) == pid:
            time.sleep(0.05)
    pidfile(name).unlink(missing_ok=True)
    return True


# -- HTTP -------------------------------------------------------------------------------------


def state() -> dict:
    try:
        return json.loads((STATE / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def api(st: dict, method: str, path: str, body: dict | None = None, *, timeout: float = 10.0) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    req = urllib.request.Request(f"https://127.0.0.1:{st['ports']['kube-apiserver']}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {st['tokens']['admin']}",
                                          "Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except (OSError, ssl.SSLError) as err:
        return 0, str(err)


def healthz(port: int, path: str = "/healthz") -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # self-signed serving certs of kcm/scheduler
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=5) as resp:
            return resp.status == 200
    except (OSError, ssl.SSLError):
        return False


def wait(what: str, check, procs: dict[str, subprocess.Popen], timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise Failure(f"{name} exited with {proc.returncode} while waiting for {what}; "
                              f"the end of {LOGS / (name + '.log')}:\n{log_tail(name)}")
        ok, last = check()
        if ok:
            return
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not there after {timeout:.0f}s (last: {last})")
        time.sleep(0.25)


def node_ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def node_manifest(name: str, index: int, version: str) -> dict:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "type": "kwok"}
    spec: dict = {}  # no podCIDR: kwok gives pod IPs from --cidr (from a node's podCIDR it hands out x.x.x.0)
    if name.startswith("edge"):  # as KubeEdge's edgecore registers its node
        labels[EDGE_ROLE] = ""
        labels["node-role.kubernetes.io/agent"] = ""
        spec["taints"] = [{"key": EDGE_ROLE, "effect": "NoSchedule"}]
    resources = {"cpu": "8", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]}},
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": f"10.0.0.{index + 1}"}, {"type": "Hostname", "address": name}],
            "capacity": resources, "allocatable": resources,
            "nodeInfo": {"kubeletVersion": version, "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": f"kwok://{KWOK_VERSION}",
                         "osImage": "kwok", "kernelVersion": "kwok", "machineID": "", "systemUUID": "", "bootID": ""},
        },
    }


# -- up / down / status -----------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    if not built():
        raise Failure(f"the binaries in {BIN} are missing or stale: run `make kube-build` first")
    if all(our_pid(n) for n in ORDER) and ready(state()):
        say(f"already up; KUBECONFIG={KUBECONFIG}")
        return 0
    if any(our_pid(n) for n in ORDER):
        say("a partly running cluster is left over: stopping it first")
        down()
    shutil.rmtree(STATE, ignore_errors=True)
    STATE.mkdir(parents=True)
    (STATE / ".gitignore").write_text("*\n")
    started = time.monotonic()
    try:
        up()
    except BaseException:
        say("start failed: stopping what was started (logs stay in .kube-real/logs)")
        down(quiet=True)
        raise
    say(f"up in {time.monotonic() - started:.0f}s: {kube_version()}, nodes {', '.join(NODES)}")
    say(f"export KUBECONFIG={KUBECONFIG}")
    return 0


def up() -> None:
    version = kube_version()
    make_pki()
    ports = {n: free_port() for n in ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager",
                                       "kube-scheduler")}
    tokens = {u: secrets.token_hex(16) for u in ("admin", "kube-controller-manager", "kube-scheduler", "kwok")}
    (PKI / "tokens.csv").write_text(
        f'{tokens["admin"]},admin,admin,"system:masters"\n'
        f'{tokens["kube-controller-manager"]},system:kube-controller-manager,system:kube-controller-manager\n'
        f'{tokens["kube-scheduler"]},system:kube-scheduler,system:kube-scheduler\n'
        f'{tokens["kwok"]},kwok,kwok,"system:masters"\n')
    st = {"version": version, "ports": ports, "tokens": tokens}
    (STATE / "state.json").write_text(json.dumps(st, indent=2))
    (STATE / "state.json").chmod(0o600)
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    KUBECONFIG.write_text(kubeconfig(server, "admin", tokens["admin"]))
    for user in ("kube-controller-manager", "kube-scheduler", "kwok"):
        (STATE / f"{user}.kubeconfig").write_text(kubeconfig(server, user, tokens[user]))
    for f in STATE.glob("*kubeconfig"):
        f.chmod(0o600)
    (STATE / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY, indent=2))
    procs: dict[str, subprocess.Popen] = {}

    etcd = f"http://127.0.0.1:{ports['etcd']}"
    peer = f"http://127.0.0.1:{ports['etcd-peer']}"
    procs["etcd"] = start("etcd", [
        "--name=kube-real", f"--data-dir={STATE / 'etcd'}", f"--listen-client-urls={etcd}",
        f"--advertise-client-urls={etcd}", f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=kube-real={peer}", "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",  # a throwaway test cluster: speed over durability
        "--log-level=warn"])

    def etcd_ok():
        try:
            with urllib.request.urlopen(f"{etcd}/health", timeout=3) as r:
                body = json.loads(r.read())
            return body.get("health") == "true", body
        except (OSError, ValueError) as err:
            return False, err
    wait("etcd /health", etcd_ok, procs)
    say(f"etcd up on {etcd}")

    procs["kube-apiserver"] = start("kube-apiserver", [
        f"--etcd-servers={etcd}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={ports['kube-apiserver']}", f"--cert-dir={PKI}",
        f"--tls-cert-file={PKI / 'apiserver.crt'}", f"--tls-private-key-file={PKI / 'apiserver.key'}",
        f"--client-ca-file={PKI / 'ca.crt'}", f"--token-auth-file={PKI / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={PKI / 'sa.pub'}", f"--service-account-signing-key-file={PKI / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
        # the `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints validation refuses
        "--endpoint-reconciler-type=none", "--profiling=false", "--v=1",
        f"--audit-policy-file={STATE / 'audit-policy.json'}", f"--audit-log-path={AUDIT_LOG}",
        "--audit-log-maxsize=100", "--audit-log-maxbackup=1"])

    def readyz():
        code, body = api(st, "GET", "/readyz")
        return code == 200, f"{code} {body[:300]}"
    wait("kube-apiserver /readyz", readyz, procs)
    say(f"kube-apiserver {version} ready on {server}")

    kcm_conf = STATE / "kube-controller-manager.kubeconfig"
    procs["kube-controller-manager"] = start("kube-controller-manager", [
        f"--kubeconfig={kcm_conf}", f"--authentication-kubeconfig={kcm_conf}", f"--authorization-kubeconfig={kcm_conf}",
        "--bind-address=127.0.0.1", f"--secure-port={ports['kube-controller-manager']}",
        f"--cert-dir={STATE / 'kcm-certs'}", "--leader-elect=false",
        f"--controllers={','.join(CONTROLLERS)}", "--use-service-account-credentials=true",
        f"--root-ca-file={PKI / 'ca.crt'}", f"--service-account-private-key-file={PKI / 'sa.key'}",
        "--profiling=false", "--v=1"])
    sched_conf = STATE / "kube-scheduler.kubeconfig"
    procs["kube-scheduler"] = start("kube-scheduler", [
        f"--kubeconfig={sched_conf}", f"--authentication-kubeconfig={sched_conf}",
        f"--authorization-kubeconfig={sched_conf}", "--bind-address=127.0.0.1",
        f"--secure-port={ports['kube-scheduler']}", f"--cert-dir={STATE / 'scheduler-certs'}",
        "--leader-elect=false", "--profiling=false", "--v=1"])
    procs["kwok"] = start("kwok", [
        f"--kubeconfig={STATE / 'kwok.kubeconfig'}", f"--config={STAGES}", "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION[0]}={KWOK_ANNOTATION[1]}",
        f"--cidr={POD_CIDR}", "--node-lease-duration-seconds=40", "--v=INFO"])

    for i, name in enumerate(NODES):
        code, body = api(st, "POST", "/api/v1/nodes", node_manifest(name, i, version))
        if code not in (201, 409):
            raise Failure(f"creating node {name}: {code} {body[:500]}")

    def nodes_ready():
        code, body = api(st, "GET", "/api/v1/nodes")
        if code != 200:
            return False, f"{code} {body[:300]}"
        nodes = {n["metadata"]["name"]: n for n in json.loads(body)["items"]}
        pending = [n for n in NODES if n not in nodes or not node_ready(nodes[n])
                   or any(t.get("key") == "node.kubernetes.io/not-ready" for t in nodes[n]["spec"].get("taints") or [])]
        return not pending, f"not Ready (or still tainted not-ready): {pending}"
    wait("the nodes Ready", nodes_ready, procs)

    def components():
        bad = [n for n in ("kube-controller-manager", "kube-scheduler") if not healthz(ports[n])]
        return not bad, f"/healthz not ok: {bad}"
    wait("kube-controller-manager and kube-scheduler /healthz", components, procs)

    def default_sa():  # the serviceaccount controller works: pods can be created in a namespace
        code, body = api(st, "GET", "/api/v1/namespaces/default/serviceaccounts/default")
        return code == 200, f"{code} {body[:200]}"
    wait("the default ServiceAccount", default_sa, procs)


def ready(st: dict) -> bool:
    if not st:
        return False
    code, _ = api(st, "GET", "/readyz", timeout=3)
    return code == 200


def down(quiet: bool = False) -> int:
    stopped = [n for n in reversed(ORDER) if stop(n)]
    if not quiet:
        say(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    return down()


def cmd_status(args: argparse.Namespace) -> int:
    st = state()
    running = {n: our_pid(n) for n in ORDER}
    for n, pid in running.items():
        print(f"{n:24} {'pid ' + str(pid) if pid else 'not running'}")
    if not st or not running["kube-apiserver"]:
        print("cluster: down")
        return 3
    code, body = api(st, "GET", "/readyz", timeout=3)
    print(f"/readyz: {code} {body.strip()[:200]}")
    code, body = api(st, "GET", "/api/v1/nodes", timeout=3)
    nodes = json.loads(body)["items"] if code == 200 else []
    for n in nodes:
        print(f"node {n['metadata']['name']:20} {'Ready' if node_ready(n) else 'NotReady'}")
    print(f"KUBECONFIG={KUBECONFIG}")
    ok = all(running.values()) and ready(st) and sum(node_ready(n) for n in nodes) >= len(NODES)
    return 0 if ok else 3


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kube_real.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the binaries into .tools/kube/bin (a no-op when up to date)")
    b.add_argument("--force", action="store_true", help="build even when the stamp matches")
    b.add_argument("--jobs", type=int, help="go build -p (default: $KUBE_BUILD_JOBS or the CPU count)")
    b.set_defaults(fn=cmd_build)
    sub.add_parser("up", help="start a fresh cluster; .kube-real/kubeconfig").set_defaults(fn=cmd_up)
    sub.add_parser("down", help="stop it").set_defaults(fn=cmd_down)
    sub.add_parser("status", help="what runs; exit 0 when all is up").set_defaults(fn=cmd_status)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except Failure as err:
        print(f"kube-real: error: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
