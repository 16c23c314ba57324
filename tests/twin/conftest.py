"""The twin, once per session: `make test-twin` (root; docs/twin.md). Never part of `make test`.

The session's process moves into the twin's ``client`` namespace while the twin runs, so every
request a test sends (and the gate and bench it starts) crosses the twin's links as a client pod's
would. With ``RAY_LLM_EKS_TWIN_CAPTURE=DIR`` the tests also write what the real stack printed
and exported (worker logs, ``/metrics``) there: the fixtures of the fast tests are made so. What the
tests send and keep is in :mod:`helpers.twin`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

from ray_llm_eks.twin.run import Environment, TwinRun, terminate_gracefully  # noqa: E402


MODULE_ORDER = (
    "test_twin_disaggregated.py",
    "test_twin_ray_auth.py",
    "test_twin_conditional.py",
    "test_twin_topologies.py",
    "test_twin_traps.py",
    "test_twin_under_faults.py",
    "test_twin_prefix_routing.py",
)
"""The order the modules run in, each deploying what it needs. Every change of Serve config is a
deploy of 80 to 340 s on the twin, so the order keeps them few: the modules that serve the
rendered disaggregated config run one after another, then conditional disaggregation (its one
deploy, removed after it; test_twin_topologies deploys colocated first anyway, so it costs nothing
more, and compares the mixed run it leaves with colocated's), the drills (which leave new pods and
restarted nodes behind) after everything that wants the nodes as started, and prefix routing,
which needs two prefill replicas deployed on an empty Serve, last: anywhere else the module after
it would have to deploy from empty again."""


def pytest_collection_modifyitems(config, items):
    slots = [i for i, item in enumerate(items) if item.path.parent == Path(__file__).parent]
    unknown = sorted({items[i].path.name for i in slots} - set(MODULE_ORDER))
    if unknown:
        raise pytest.UsageError(f"tests/twin: {', '.join(unknown)} missing from MODULE_ORDER in {__file__}")
    ordered = sorted((items[i] for i in slots), key=lambda item: MODULE_ORDER.index(item.path.name))
    for i, item in zip(slots, ordered):
        items[i] = item


@pytest.fixture(scope="session")
def twin(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the twin makes network namespaces: run `make test-twin` as root")
    Environment.default().check()
    terminate_gracefully()  # a SIGTERM (CI's timeout, a user) still removes the namespaces and processes
    workdir = tmp_path_factory.mktemp("twin")
    with TwinRun(workdir, log=lambda line: print(f"[twin] {line}", flush=True)) as run:
        yield run


@pytest.fixture(scope="session")
def conditional_config(twin, tmp_path_factory) -> Path:
    """The twin's configuration with ``disaggregation.min_prompt_tokens``, rendered and run through the
    profile as the deployment ``conditional`` (``twin.use("conditional")``); not deployed here."""
    import yaml

    from helpers.twin import THRESHOLD

    config = yaml.safe_load(Path(twin.tiny.path).read_text())
    config["topology"] = "disaggregated"
    config["disaggregation"] = {"min_prompt_tokens": THRESHOLD}
    path = tmp_path_factory.mktemp("conditional") / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    deployment = twin.add("conditional", path)
    assert deployment.serve_config["applications"][0]["import_path"].startswith("rayllmeks_pd.")
    return path


@pytest.fixture(scope="session")
def conditional_mixed_run(twin, conditional_config, tmp_path_factory) -> Path:
    """``bench --mix`` against the conditional deployment: test_twin_conditional asks for it while that
    runs; test_twin_topologies compares it with colocated's run of the same mix. Alone, this deploys
    the conditional application and removes it after (the next deploy starts from an empty Serve)."""
    from helpers.twin import MIX, MIX_CONCURRENCY, bench

    running = twin.topology == "conditional"
    if not running:
        twin.use("conditional", fresh=True)
    try:
        return bench(twin, "conditional", tmp_path_factory.mktemp("mixed") / "conditional", "--mix", MIX,
                     "--agreement-prompts", "0", config=conditional_config, concurrency=MIX_CONCURRENCY)
    finally:
        if not running:
            twin.twin.remove_applications()
