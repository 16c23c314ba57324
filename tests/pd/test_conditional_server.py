"""ray_llm_eks.pd.conditional against Ray Serve LLM 2.58's own classes (tests/pd/conditional_checks.py),
under the twin's Python: Ray Serve LLM's request models import vLLM, which only .venv-twin has."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers.charts import SCENARIOS, render

ROOT = Path(__file__).resolve().parents[2]
TWIN_PYTHON = ROOT / ".venv-twin" / "bin" / "python"
CHECKS = Path(__file__).with_name("conditional_checks.py")

# The twin's environment exists only once `make twin-install` ran: `make test-twin` runs these (CI
# installs it first); `make test`, which runs before that install in CI, never collects them.
pytestmark = [pytest.mark.twin,
              pytest.mark.skipif(not TWIN_PYTHON.exists(), reason="needs .venv-twin (make twin-install)")]

CHECKS_NAMED = ["route_boundary", "threshold_key", "chat_tokenize_request_carries_the_template_inputs",
                "completion_prompts", "local_path_is_the_orchestrators_own_local_call",
                "the_graph_is_rays_with_the_decode_class_swapped"]


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    """Every check's outcome from one run of the twin's Python (its imports take most of a minute)."""
    args = render(SCENARIOS["conditional"]).application["args"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(TWIN_PYTHON), str(CHECKS), ",".join(CHECKS_NAMED), json.dumps(args)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("ok ", "failed "))]
    return {line.split()[1].rstrip(":"): line for line in lines}


@pytest.mark.parametrize("name", CHECKS_NAMED)
def test_conditional_server(name, outcomes):
    assert outcomes.get(name) == f"ok {name}", outcomes.get(name, "not run")
