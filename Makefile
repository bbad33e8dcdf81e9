# Every target bootstraps .venv itself, so a fresh clone needs nothing installed by hand.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test run lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q

run: setup
	$(PY) examples/devrun.py

lint: setup
	$(PY) -m ruff check .

bench: setup
	$(PY) bench/devcluster.py
	$(PY) bench/devcluster_churn.py --gm
	$(PY) bench/gm_converge.py
	$(PY) bench/lc_reports.py
	$(PY) bench/e2e_latency.py

clean:
	rm -rf $(VENV) .pytest_cache .devcluster
