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

pytestmark = pytest.mark.skipif(not TWIN_PYTHON.exists(), reason="needs .venv-twin (make twin)")


def run_check(name: str, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(TWIN_PYTHON), str(CHECKS), name, *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == f"ok {name}"


@pytest.mark.parametrize("name", ["route_boundary", "threshold_key", "chat_tokenize_request_carries_the_template_inputs",
                                  "completion_prompts", "local_path_is_the_orchestrators_own_local_call"])
def test_conditional_server(name):
    run_check(name)


def test_the_rendered_application_builds_rays_graph_with_the_conditional_decode_server():
    args = render(SCENARIOS["conditional"]).application["args"]
    run_check("the_graph_is_rays_with_the_decode_class_swapped", json.dumps(args))
