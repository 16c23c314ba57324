"""ray_llm_eks.pd.conditional against Ray Serve LLM 2.58's own classes (tests/pd/conditional_checks.py),
under the twin's Python: Ray Serve LLM's request models import vLLM, which only .venv-twin has."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers.charts import SCENARIOS, render
from ray_llm_eks.twin.run import Environment

ROOT = Path(__file__).resolve().parents[2]
TWIN = Environment.default()
TWIN_PYTHON = TWIN.venv / "bin" / "python"
CHECKS = Path(__file__).with_name("conditional_checks.py")

# The twin's environment exists only once `make twin-install` ran: `make test-twin` runs these (CI
# installs it first); `make test`, which runs before that install in CI, never collects them.
pytestmark = [pytest.mark.twin,
              pytest.mark.skipif(not (TWIN_PYTHON.exists() and TWIN.model.exists()),
                                 reason="needs .venv-twin and the twin's model (make twin-install)")]

CHECKS_NAMED = ["route_boundary", "threshold_key", "the_count_is_the_prompt_the_engine_renders",
                "rays_tokenize_path_is_still_unusable", "local_path_is_the_orchestrators_own_local_call",
                "the_graph_is_rays_with_the_decode_class_swapped"]


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    """Every check's outcome from one run of the twin's Python (its imports take most of a minute)."""
    args = render(SCENARIOS["conditional"]).application["args"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(TWIN_PYTHON), str(CHECKS), ",".join(CHECKS_NAMED), json.dumps(args),
                           str(TWIN.model)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("ok ", "failed "))]
    return {line.split()[1].rstrip(":"): line for line in lines}


@pytest.mark.parametrize("name", CHECKS_NAMED)
def test_conditional_server(name, outcomes):
    assert outcomes.get(name) == f"ok {name}", outcomes.get(name, "not run")
