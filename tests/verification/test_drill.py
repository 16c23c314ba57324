"""``ray-llm-eks drill``: what it reads off a request timeline and a worker's log, and what it refuses.

The drills themselves run on the real stack in ``make test-twin`` (tests/twin/test_twin_under_faults.py);
the log lines here are that stack's output (vLLM 0.27.1 on the twin, a decode engine started twice).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_llm_eks.drill import REQUIRED_RBAC, SCENARIOS, Sample, engine_reloads, recovery

FIXTURES = Path(__file__).parent / "fixtures" / "drill"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "verification.md"


def timeline(*entries: tuple[float, float, bool]) -> list[Sample]:
    return [Sample(start, end, ok, None if ok else "HTTP 503") for start, end, ok in entries]


def test_the_outage_runs_from_the_first_failure_to_the_first_success_sent_after_it():
    samples = timeline((0, 1, True), (9, 10, True), (10.5, 12, False), (13, 40, False), (41, 43, True), (44, 45, True))
    assert recovery(samples, fault_s=10.2) == (1.8, 32.8)


def test_a_lone_success_inside_the_outage_does_not_end_it():
    # The head gone: a worker's proxy still answers once, then everything fails until Serve is back.
    samples = timeline((0, 1, True), (10, 11, False), (11, 12, True), (12, 20, False), (21, 80, False),
                       (81, 82, True), (83, 84, True))
    assert recovery(samples, fault_s=9.5) == (1.5, 72.5)


def test_lone_failures_before_and_after_the_outage_do_not_move_its_end():
    # A request cut as the head goes, the outage, then one failure of a still-loaded deployment.
    samples = timeline((0, 1, True), (10, 11, False), (12, 13, True), (14, 15, True), (16, 20, False),
                       (21, 90, False), (91, 92, True), (93, 94, True), (95, 96, False), (97, 98, True))
    assert recovery(samples, fault_s=9.0) == (2.0, 83.0)


def test_an_outage_still_on_at_the_end_has_no_recovery_even_after_an_earlier_blip():
    samples = timeline((10, 11, False), (12, 13, True), (14, 60, False), (61, 70, False))
    assert recovery(samples, fault_s=9.0) == (2.0, None)


def test_a_success_before_the_first_failure_is_not_the_recovery():
    # An eviction that a budget delays: requests still succeed after the fault, then fail.
    samples = timeline((4, 5, True), (6, 7, True), (8, 9, False), (10, 11, True))
    assert recovery(samples, fault_s=5.5) == (3.5, 5.5)


def test_without_a_failure_the_first_success_is_of_a_request_sent_after_the_fault():
    samples = timeline((4, 6, True), (6, 8, True), (8, 9, True))
    assert recovery(samples, fault_s=5.0) == (None, 3.0)


def test_a_deployment_that_never_serves_again_has_no_recovery():
    assert recovery(timeline((0, 1, True), (2, 3, False), (4, 5, False)), fault_s=1.5) == (1.5, None)


def test_the_reload_figures_are_vllms_own_of_the_newest_engine():
    log = (FIXTURES / "engine-restart-decode.log").read_text()
    assert engine_reloads(log) == (0.01, 0.75)
    assert engine_reloads("") == (None, None)


def test_the_gpu_runner_figure_stands_in_when_the_loader_line_is_missing():
    line = "(RayWorkerWrapper pid=77) INFO [gpu_model_runner.py:5406] Model loading took 15.21 GiB memory and 141.3 seconds"
    assert engine_reloads(line) == (141.3, None)


@pytest.mark.integration
def test_an_unknown_scenario_is_refused_with_the_accepted_ones():
    done = subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", "drill", "kill-everything"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "scenario: 'kill-everything' is not a drill; accepted: " + ", ".join(SCENARIOS) in done.stderr


def test_the_docs_list_every_grant_the_drill_needs():
    section = DOCS.read_text().split("## Drills", 1)[1].split("\n## ", 1)[0]
    for group, resources, verbs in REQUIRED_RBAC:
        for resource in resources.split(", "):
            assert re.search(rf"`{re.escape(resource)}`", section), resource
    for name in SCENARIOS:
        assert f"`{name}`" in section, name
