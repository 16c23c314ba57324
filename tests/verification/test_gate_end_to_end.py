"""The gate program end to end, in its own process, against a deployment on loopback (fake_cluster).

One pass and the failures the issue lists, each failing for its own reason: not ready in time,
a probe failing, the backend not LIBFABRIC on efa (TCP fallback, an agent with no backend, UCX on
EFA), a transfer failure, EFA counters that did not move, and pods that do not match the spec.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_cluster import EFA_LINES, FakeDeployment, Scenario, run_gate

from ray_llm_eks.verification import evidence


UCX_ON_EFA = [
    "W1130 nixl_agent.cpp:242] 1 Amazon EFA(s) were detected, but the UCX backend was configured. For best "
    "performance, it's recommended to use the LIBFABRIC backend instead.",
    "INFO Backend UCX was instantiated",
]


def _report(result: Any) -> dict[str, Any]:
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def test_healthy_disaggregated_deployment_passes(in_cluster_copy, fake: FakeDeployment):
    result = run_gate(in_cluster_copy, fake, fake.gate_settings())
    report = _report(result)
    assert result.returncode == 0, report["reasons"]
    assert report["verdict"] == "pass" and report["reasons"] == []
    assert report["service"]["ready"] is True and report["service"]["rollout"]["recreated"] == []
    assert {n["role"]: n["efa_allocatable"] for n in report["nodes"]} == {"prefill": 1, "decode": 1}
    assert report["engine"]["matches_spec"] is True and report["engine"]["status"] == "RUNNING"
    assert report["probes"]["ok"] == 3 and report["probes"]["ttft_ms_p50"] is not None
    assert report["transport"]["backend"] == "LIBFABRIC" and report["transport"]["provider"] == "efa"
    kv = report["kv"]
    # Predicted = sum over probes of prompt_tokens x bytes/token + the hybrid model's state (planner's formula).
    prompts = [p["prompt_tokens"] for p in report["probes"]["results"]]
    assert kv["predicted_bytes"] == sum(t * kv["kv_bytes_per_token"] + kv["kv_bytes_per_sequence"] for t in prompts)
    assert kv["efa_moved_bytes"] == kv["predicted_bytes"] and kv["efa_fraction_of_predicted"] == 1.0
    assert kv["nixl"]["bytes_transferred"] == kv["predicted_bytes"]
    assert kv["nixl"]["transfers"] == 3 and kv["nixl"]["mean_xfer_time_ms"] == pytest.approx(31.0)
    assert kv["nixl"]["failed_transfers"] == 0
    assert fake.requests_served == 3


def test_the_reference_prompt_predicts_the_planners_bytes(disaggregated):
    # 4096 tokens of Qwen3.5-9B: the figure the planner prints (docs/plan.md).
    settings = disaggregated.settings
    assert 4096 * settings["kv_bytes_per_token"] + settings["kv_bytes_per_sequence"] == 185_729_024


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        (Scenario(ready=False), "was not ready within"),
        (Scenario(completion_status=500), "probe 1 failed: HTTP 500"),
        (Scenario(worker_log=["INFO Backend LIBFABRIC was instantiated",
                              "I1130 libfabric_topology.cpp:97] Discovered 1 tcp devices (TCP fallback)"]),
         "libfabric fell back to TCP"),
        (Scenario(worker_log=["INFO [_api.py:170] Initialized NIXL agent: 3f9c2a"]),
         "a NIXL agent was initialized but no backend was instantiated"),
        (Scenario(worker_log=UCX_ON_EFA), "UCX backend on EFA nodes"),
        (Scenario(worker_log=[*EFA_LINES, "ERROR [base_worker.py:1210] NIXL transfer failure: handshake_failed | "
                              "Context: {'remote_engine': 'abc'}"], failed_transfers=1),
         "NIXL transfer failure(s) of type handshake_failed"),
        (Scenario(efa_fraction=0.1), "at least 50% must cross EFA"),
        (Scenario(image="public.ecr.aws/rayproject/ray:2.58.0-py311-gpu"), "the deployed spec says"),
        (Scenario(efa_allocatable="0"), "has no allocatable vpc.amazonaws.com/efa"),
    ],
    ids=["not-ready", "probe-fails", "tcp-fallback", "agent-without-backend", "ucx-on-efa", "transfer-failure",
         "efa-counters-idle", "wrong-image", "no-efa-device"],
)
def test_each_failure_fails_for_its_reason(in_cluster_copy, fake: FakeDeployment, scenario: Scenario, reason: str):
    fake.scenario = scenario
    settings = fake.gate_settings(deadline_seconds=3) if not scenario.ready else fake.gate_settings()
    result = run_gate(in_cluster_copy, fake, settings)
    report = _report(result)
    assert result.returncode == 1
    assert report["verdict"] == "fail"
    assert any(reason in r for r in report["reasons"]), report["reasons"]


def test_stale_pods_are_recreated_from_the_deployed_spec(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(stale_first=True)
    fake.pod_hash = "0ld0ld0ld0ld"
    result = run_gate(in_cluster_copy, fake, fake.gate_settings())
    report = _report(result)
    assert result.returncode == 0, report["reasons"]
    assert fake.deleted == ["ray-llm-abcde"]
    assert report["service"]["rollout"]["recreated"] == ["ray-llm-abcde"]
    assert report["service"]["active_cluster"] == "ray-llm-fghij"


def test_without_rollout_stale_pods_time_out_instead_of_being_deleted(in_cluster_copy, fake: FakeDeployment):
    fake.pod_hash = "0ld0ld0ld0ld"
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(rollout=False, deadline_seconds=2)))
    assert fake.deleted == []
    assert any("0/3 pods ready on spec" in r for r in report["reasons"]), report["reasons"]


def test_a_newer_rayservice_is_not_verified_against_old_settings(in_cluster_copy, fake: FakeDeployment):
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(cluster_spec_hash="123456789abc")))
    assert any("a newer deploy replaced it" in r for r in report["reasons"]), report["reasons"]
    assert fake.deleted == []


def test_colocated_runs_without_the_transport_checks(in_cluster_copy, tmp_path, colocated):
    fake = FakeDeployment(tmp_path, colocated.rayservice, colocated.settings, Scenario(worker_log=[], efa_fraction=0))
    try:
        result = run_gate(in_cluster_copy, fake, fake.gate_settings())
    finally:
        fake.close()
    report = _report(result)
    assert result.returncode == 0, report["reasons"]
    assert "transport" not in report and "kv" not in report
    assert report["probes"]["ok"] == 3


def test_the_verdict_reaches_cloudformation(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(efa_fraction=0.0)
    result = run_gate(in_cluster_copy, fake, fake.gate_settings(run_id="1a2b3c4d", job_name="ray-llm-gate-1a2b3c4d"),
                      env={"GATE_SIGNAL_URL": fake.signal_url})
    assert result.returncode == 1
    [(headers, body)] = fake.signals
    # CloudFormation's presigned URL covers an empty Content-Type only.
    assert headers.get("Content-Type", "") == ""
    signal = json.loads(body)
    assert signal["Status"] == "FAILURE" and signal["UniqueId"] == "gate-1a2b3c4d"
    assert "must cross EFA" in signal["Reason"]
    data = json.loads(signal["Data"])
    assert len(signal["Data"]) <= 4096
    assert data["verdict"] == "fail" and data["efa_moved_bytes"] == 0
    assert data["report"] == "kubectl -n inference logs job/ray-llm-gate-1a2b3c4d"


def test_a_pass_signals_success(in_cluster_copy, fake: FakeDeployment):
    result = run_gate(in_cluster_copy, fake, fake.gate_settings(), env={"GATE_SIGNAL_URL": fake.signal_url})
    assert result.returncode == 0
    assert json.loads(fake.signals[0][1])["Status"] == "SUCCESS"


def test_no_cluster_access_exits_3_and_still_signals(in_cluster_copy, fake: FakeDeployment):
    fake.token_file.write_text("wrong-token")
    result = run_gate(in_cluster_copy, fake, fake.gate_settings(), env={"GATE_SIGNAL_URL": fake.signal_url})
    assert result.returncode == 3
    assert "no cluster access" in _report(result)["reasons"][0]
    assert json.loads(fake.signals[0][1])["Status"] == "FAILURE"


def test_classifier_constants_match_the_gate(disaggregated):
    assert disaggregated.settings["expected_backend"] == evidence.EXPECTED_BACKEND == "LIBFABRIC"
    assert disaggregated.settings["expected_provider"] == evidence.EXPECTED_PROVIDER == "efa"
