"""Drills on the twin: the real serving stack under a fault, measured as ``ray-llm-eks drill`` measures it.

:class:`ray_llm_eks.drill.Drill` runs here exactly as the CLI runs it, but from the client
namespace (no API-server proxy) and with the rendered gate program as its gate. The faults go
through the twin's API stand-in, whose kubelet and KubeRay stand-in (``TwinRun.kubelet``) end the
deleted pod's Ray node and start its replacement; everything after that is Ray, Serve, vLLM and
NIXL recovering on their own. The figures are printed (``-s``) and written to ``drills.json`` in
the twin's folder, and to ``RAY_LLM_EKS_TWIN_CAPTURE`` when it is set; docs/verification.md
("Drills") holds a run's.

After the modules that want the nodes as started (``MODULE_ORDER`` in tests/twin/conftest.py): a
drill leaves new pods and restarted nodes behind.
"""

from __future__ import annotations

import json

import pytest

from helpers.twin import CAPTURE, capture
from ray_llm_eks.base.wire import GateSettings, read_only_run
from ray_llm_eks.drill import SCENARIOS, Drill, DrillResult
from ray_llm_eks.twin import page_cache
from ray_llm_eks.verification.kube import Endpoints, Kube, KubeAccess

pytestmark = [pytest.mark.twin, pytest.mark.faults]
RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def faults(twin):
    twin.use("disaggregated")
    with twin.kubelet():
        yield twin
    (twin.workdir / "drills.json").write_text(json.dumps(RESULTS, indent=2))
    if CAPTURE:
        capture("drills.json", json.dumps(RESULTS, indent=2))


def drill(run, scenario: str, label: str, **context) -> DrillResult:
    settings = run.settings(**read_only_run(600.0))
    kube = Kube(KubeAccess.with_token_file(run.api_url, str(run.workdir / "token")))
    result = Drill(GateSettings.from_json(settings), kube, Endpoints(kube), gate=lambda: run.gate(settings),
                   interval_s=1.0, timeout_s=900.0, log=lambda line: print(f"[drill] {line}", flush=True)
                   ).run(SCENARIOS[scenario])
    RESULTS[label] = {**result.to_json(), **context}
    print(f"[drill] {label}: {json.dumps(RESULTS[label])}", flush=True)
    return result


def recovered(result: DrillResult) -> None:
    # Not asserted: no failure before the fault. On two cores a request may fail while the previous
    # drill's recovery settles (the drill starts once one succeeds); the count is in the figures.
    assert result.first_success_s is not None, result.errors
    assert result.gate_pass_s is not None, result.gate_reasons


def held_until_replaced(result: DrillResult) -> None:
    """What losing the decode replica cost: failed requests, or none answered until its replacement pod
    ran. Serve's router holds a request while its deployment has no running replica ("No replicas are
    currently available", ``ray/serve/_private/request_router/request_router.py:1160-1168`` of Ray
    2.58.0), so with every answer text (twin/tiny_model.py ``answer_in_text``) and no other fault
    left running, the drills of 2026-12-07 failed no request: the first one sent after the fault was
    answered 54 s later, by the replacement."""
    assert result.pod_replaced_s is not None, "no replacement pod: was the fault applied?"
    assert result.failed > 0 or result.first_success_s > result.pod_replaced_s, result.timeline[:5]


def test_a_deleted_decode_worker_is_replaced_and_reloads_from_a_warm_page_cache(faults):
    weights = page_cache.model_files(faults.environment.model)
    assert page_cache.warm(weights) == pytest.approx(1.0)
    old_pod = faults.pod_of["decode"]
    result = drill(faults, "delete-decode-worker", "delete-decode-worker (warm page cache)",
                   page_cache_before=page_cache.resident_fraction(weights))
    recovered(result)
    held_until_replaced(result)
    assert result.target == old_pod
    assert faults.pod_of["decode"] != old_pod
    assert result.pod_replaced_s is not None and result.pod_replaced_s <= result.first_success_s
    reloaded = {r.pod: r for r in result.reloads}
    assert faults.pod_of["decode"] in reloaded, result.reloads
    assert reloaded[faults.pod_of["decode"]].weights_load_s is not None
    assert reloaded[faults.pod_of["decode"]].engine_init_s is not None


def test_the_same_drill_from_a_cold_page_cache_reads_the_weights_from_disk(faults):
    weights = page_cache.model_files(faults.environment.model)
    resident = page_cache.evict(weights)
    assert resident == pytest.approx(0.0, abs=0.01), "the kernel kept the checkpoint in the page cache"
    result = drill(faults, "delete-decode-worker", "delete-decode-worker (cold page cache)",
                   page_cache_before=resident, page_cache_after=None)
    RESULTS["delete-decode-worker (cold page cache)"]["page_cache_after"] = page_cache.resident_fraction(weights)
    recovered(result)
    held_until_replaced(result)
    assert result.model_reload_s is not None
    # The reload read the checkpoint: it is in the page cache now.
    assert page_cache.resident_fraction(weights) > 0.5


def test_a_deleted_head_restarts_the_workers_and_kuberay_resubmits_the_serve_config(faults):
    old_head = faults.pod_of["head"]
    since = len(faults.kubelet_log)
    result = drill(faults, "delete-head", "delete-head (no GCS fault tolerance)")
    recovered(result)
    assert result.failed > 0, "the head's proxy was lost, and no request failed: was the fault applied?"
    assert result.target == old_head and faults.pod_of["head"] != old_head
    events = [what for _, what in faults.kubelet_log[since:]]
    assert "serve config resubmitted (the head had no application)" in events, events
    # Without GCS fault tolerance both workers' raylets exit once their GCS is gone, and both engines reload.
    assert {r.role for r in result.reloads} == {"prefill", "decode"}, result.reloads
