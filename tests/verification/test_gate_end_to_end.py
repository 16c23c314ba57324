"""The gate program end to end, in its own process, against a deployment on loopback (fake_cluster).

One pass and the failures the issue lists, each failing for its own reason: not ready in time,
a probe failing, the backend not LIBFABRIC on efa (TCP fallback, an agent with no backend, UCX on
EFA), a transfer failure, EFA counters that did not move, and pods that do not match the spec.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from fake_cluster import EFA_LINES, TCP_LINES, FakeDeployment, Scenario, program_env, run_gate

from ray_llm_eks.base import wire
from ray_llm_eks.cdk8s_charts.verification import PROGRAM_DIR
from ray_llm_eks.verification import evidence

pytestmark = pytest.mark.integration

OWN_NAMESPACE = "RayLlmEks/RayLlmEks/inference/ray-llm"
"""The reference deployment's own metric namespace (``RayLlmServing.metric_namespace``), as its CronJob passes it."""


UCX_ON_EFA = [
    "W1130 21:03:46.080000     412 nixl_agent.cpp:274] 1 Amazon EFA(s) were detected, but the UCX backend was "
    "configured. For best performance, it's recommended to use the LIBFABRIC backend instead.",
    "2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend UCX was instantiated",
]
"""NIXL 1.3.1's lines, each in its emitter's format (nixl_agent.cpp:274, C++; _api.py:390, Python)."""
TCP_FALLBACK = [TCP_LINES[3], TCP_LINES[1]]
"""LIBFABRIC instantiated, on the tcp provider."""


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
    # Predicted = sum over probes of the prompt less the token a hybrid's prefill withholds, in whole
    # blocks of bytes/token, + the hybrid model's state (the planner's formula, wire.kv_transfer_bytes).
    prompts = [p["prompt_tokens"] for p in report["probes"]["results"]]
    block, withheld = kv["kv_block_tokens"], kv["kv_tokens_withheld"]
    assert (block, withheld) == (528, 1)  # Qwen3.5-9B on one L4: vLLM's hybrid block size; P keeps the last token
    assert kv["predicted_bytes"] == sum(-(-(t - withheld) // block) * block * kv["kv_bytes_per_token"]
                                        + kv["kv_bytes_per_sequence"] for t in prompts)
    assert kv["efa_moved_bytes"] == kv["predicted_bytes"] and kv["efa_fraction_of_predicted"] == 1.0
    assert kv["nixl"]["bytes_transferred"] == kv["predicted_bytes"]
    assert kv["nixl"]["transfers"] == 3 and kv["nixl"]["mean_xfer_time_ms"] == pytest.approx(31.0)
    assert kv["nixl"]["failed_transfers"] == 0
    assert fake.requests_served == 3


def test_the_reference_prompt_predicts_the_planners_bytes(disaggregated):
    # 4096 tokens of Qwen3.5-9B: the figure the planner prints (docs/plan.md).
    settings = disaggregated.settings
    # 4,095 tokens sent (P withholds the last) in 8 whole 528-token blocks of 32,768 B/token, + 51,511,296 B of state.
    assert wire.kv_transfer_bytes(4096, bytes_per_token=settings["kv_bytes_per_token"],
                                  bytes_per_sequence=settings["kv_bytes_per_sequence"],
                                  block_tokens=settings["kv_block_tokens"],
                                  tokens_withheld=settings["kv_tokens_withheld"]) == 189_923_328


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        (Scenario(ready=False), "was not ready within"),
        (Scenario(completion_status=500), "probe 1 failed: HTTP 500"),
        (Scenario(worker_log=TCP_FALLBACK),
         "libfabric fell back to TCP"),
        (Scenario(worker_log=["2026-11-30 21:03:46 NIXL INFO    _api.py:268 Initialized NIXL agent: 3f9c2a"]),
         "a NIXL agent was initialized but no backend was instantiated"),
        (Scenario(worker_log=UCX_ON_EFA), "UCX backend on EFA nodes"),
        (Scenario(worker_log=[*EFA_LINES, "(EngineCore pid=412) ERROR 11-30 21:04:02 [base_worker.py:888] NIXL "
                              "transfer failure: handshake_failed | "
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


def _every_card(settings: dict, efa_per_node: int) -> dict:
    # A multi-card type (p5.48xlarge: 32 EFA interfaces, one per network card).
    return {**settings, "roles": {role: {**spec, "efa_per_node": efa_per_node}
                                  for role, spec in settings["roles"].items()}}


@pytest.mark.parametrize(("allocatable", "passes"), [("32", True), ("4", False)])
def test_each_node_must_advertise_every_efa_device_of_its_launch_template(in_cluster_copy, fake: FakeDeployment,
                                                                        allocatable: str, passes: bool):
    fake.scenario = Scenario(efa_allocatable=allocatable)
    result = run_gate(in_cluster_copy, fake, _every_card(fake.gate_settings(), 32))
    report = _report(result)
    assert {n["role"]: n["efa_allocatable"] for n in report["nodes"]} == {"prefill": int(allocatable),
                                                                          "decode": int(allocatable)}
    if passes:
        assert result.returncode == 0, report["reasons"]
    else:
        assert result.returncode == 1
        assert "prefill node" in " ".join(report["reasons"])
        assert any("has 4 allocatable vpc.amazonaws.com/efa, expected 32" in r for r in report["reasons"]), \
            report["reasons"]


def test_stale_pods_are_recreated_from_the_deployed_spec(in_cluster_copy, fake: FakeDeployment):
    # KubeRay 1.4.0 keeps naming the deleted cluster as active for a while: deleted once, waited on.
    fake.scenario = Scenario(promote_after_polls=4)
    fake.pod_hash = "0ld0ld0ld0ld"
    result = run_gate(in_cluster_copy, fake, fake.gate_settings())
    report = _report(result)
    assert result.returncode == 0, report["reasons"]
    assert fake.deleted == ["ray-llm-abcde"]
    assert report["service"]["rollout"]["recreated"] == ["ray-llm-abcde"]
    assert report["service"]["active_cluster"] == "ray-llm-fghij"
    assert {p["cluster_spec_hash"] for p in report["pods"]} == {fake.hash}


def test_a_serve_config_change_is_waited_for_until_the_new_config_runs(in_cluster_copy, fake: FakeDeployment):
    """In place (model, engine settings, topology): the cluster stays Ready while Serve redeploys."""
    fake.scenario = Scenario(serve_states=[("RUNNING", False), ("DEPLOYING", True), ("DEPLOYING", True)])
    result = run_gate(in_cluster_copy, fake, fake.gate_settings())
    report = _report(result)
    assert result.returncode == 0, report["reasons"]
    assert report["engine"]["matches_spec"] is True and fake.scenario.serve_states == []


def test_a_failed_serve_deploy_fails_at_once_with_its_message(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(serve_final=("DEPLOY_FAILED", True))
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(deadline_seconds=60)))
    assert report["duration_s"] < 30
    assert any("failed to deploy the spec's config: engine died: CUDA out of memory" in r for r in report["reasons"])


def test_a_failed_serve_deploy_leads_with_the_root_cause_in_the_worker_logs(in_cluster_copy, fake: FakeDeployment):
    # FI_PROVIDER=efa on a node without the device, as NIXL 1.3.1 prints it (the local twin's trap).
    fake.scenario = Scenario(serve_final=("DEPLOY_FAILED", True), worker_log=[
        "E1201 21:03:46.100000 412 libfabric_common.cpp:68] fi_getinfo failed No data available",
        "E1201 21:03:46.100100 412 libfabric_topology.cpp:139] No network devices found",
        "E1201 21:03:46.100200 412 backend_plugin.h:100] Failed to create engine: Failed to discover system topology",
        "E1201 21:03:46.100300 412 nixl_agent.cpp:330] createBackend: backend creation failed for 'LIBFABRIC'",
    ])
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(deadline_seconds=60)))
    assert report["verdict"] == "fail"
    assert "fi_getinfo failed No data available" in report["reasons"][0], report["reasons"]
    assert "failed to deploy the spec's config" in report["reasons"][-1]


def test_a_transport_root_cause_leads_the_probe_failures_it_caused(in_cluster_copy, fake: FakeDeployment):
    # The twin's UCX trap on a loaded machine: a probe outran the deadline before the logs were read.
    # The probes are checked first, but the first reason a person reads is why they failed.
    fake.scenario = Scenario(worker_log=UCX_ON_EFA, completion_status=500)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "fail"
    assert "UCX backend on EFA nodes" in report["reasons"][0], report["reasons"]
    assert any(r.startswith("probe 1 failed: HTTP 500") for r in report["reasons"][1:]), report["reasons"]


def test_lines_of_replaced_replicas_are_not_evidence(in_cluster_copy, fake: FakeDeployment):
    # An old UCX warning from before the redeploy does not fail the new LIBFABRIC replicas ...
    fake.scenario = Scenario(old_log=UCX_ON_EFA)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "pass", report["reasons"]
    assert report["transport"]["log_since"] is not None


def test_old_efa_lines_do_not_vouch_for_new_replicas(in_cluster_copy, fake: FakeDeployment):
    # ... and old EFA lines do not vouch for new replicas that printed no backend.
    fake.scenario = Scenario(old_log=list(EFA_LINES), worker_log=["2026-11-30 21:03:46 NIXL INFO    _api.py:268 Initialized NIXL agent: 9a"])
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert any("no backend was instantiated" in r for r in report["reasons"]), report["reasons"]


def test_a_counter_read_only_after_the_probes_is_not_a_delta(in_cluster_copy, fake: FakeDeployment):
    """Counting from zero would credit every byte since boot: a missing first reading fails."""
    fake.scenario = Scenario(efa_fraction=0.0)
    fake.break_counters_until = 1  # the first read of each node fails
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert any("no EFA counter reading before and after the probes" in r for r in report["reasons"]), report["reasons"]


def test_the_deadline_counts_from_the_jobs_creation(in_cluster_copy, fake: FakeDeployment):
    """CloudFormation's wait began when the Job was created, not when the gate's image was pulled."""
    fake.scenario = Scenario(ready=False, job_age_seconds=55)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(deadline_seconds=60)))
    assert report["duration_s"] < 20
    assert any("was not ready within" in r for r in report["reasons"])


def test_the_report_outlives_the_job(in_cluster_copy, fake: FakeDeployment):
    result = run_gate(in_cluster_copy, fake, fake.gate_settings(job_name="ray-llm-gate-1a2b3c4d"))
    [config_map] = fake.created_config_maps
    assert config_map["metadata"]["name"] == "ray-llm-gate-1a2b3c4d-report"
    assert config_map["metadata"]["labels"] == {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/component": "gate-report"}
    assert json.loads(config_map["data"]["report.json"]) == json.loads(result.stdout)


def test_a_long_failure_still_fits_the_signal(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(worker_log=[f"ERROR 11-30 21:04:02 [base_worker.py:888] NIXL transfer failure: kind{i} | Context: {{}}"
                                         for i in range(60)],
                             efa_fraction=0.0)
    run_gate(in_cluster_copy, fake, fake.gate_settings(), env={"GATE_SIGNAL_URL": fake.signal_url})
    signal = json.loads(fake.signals[0][1])
    assert len(signal["Data"].encode()) <= 4096 and len(signal["Reason"]) <= 1000
    assert json.loads(signal["Data"])["reasons"]


def test_unreadable_settings_still_signal_failure(in_cluster_copy, fake: FakeDeployment):
    config = fake.tmp / "broken.json"
    config.write_text("{not json")
    done = subprocess.run([sys.executable, "-S", "-m", "rayllmeks_gate", "run", "--config", str(config)],
                          cwd=fake.tmp, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "GATE_SIGNAL_URL": fake.signal_url,
                               **program_env(in_cluster_copy)})
    assert done.returncode == 1
    signal = json.loads(fake.signals[0][1])
    assert signal["Status"] == "FAILURE" and "cannot read the gate settings" in signal["Reason"]


def test_without_rollout_stale_pods_fail_at_once_instead_of_being_deleted(in_cluster_copy, fake: FakeDeployment):
    fake.pod_hash = "0ld0ld0ld0ld"
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(rollout=False, deadline_seconds=60,
                                                                         as_deploy_job=False)))
    assert fake.deleted == []
    assert report["duration_s"] < 30
    assert any("carry cluster spec 0ld0ld0ld0ld" in r and "were not rolled out" in r for r in report["reasons"]), \
        report["reasons"]


def test_a_probe_without_usage_cannot_lower_the_bar(in_cluster_copy, fake: FakeDeployment):
    """Counting a probe without usage.prompt_tokens as 0 tokens would leave only the sequence state to move."""
    fake.scenario = Scenario(efa_fraction=0.3, usage=False)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert any("reported no usage.prompt_tokens" in r for r in report["reasons"]), report["reasons"]


def test_a_rerun_replaces_its_own_report(in_cluster_copy, fake: FakeDeployment):
    settings = fake.gate_settings(job_name="ray-llm-gate-1a2b3c4d")
    run_gate(in_cluster_copy, fake, settings)
    fake.scenario = Scenario(efa_fraction=0.0)
    run_gate(in_cluster_copy, fake, settings)
    assert [c["metadata"]["name"] for c in fake.created_config_maps] == ["ray-llm-gate-1a2b3c4d-report"] * 2
    assert json.loads(fake.created_config_maps[-1]["data"]["report.json"])["verdict"] == "fail"


@pytest.mark.parametrize("run", [{"replaced_grace_seconds": 1}, {"as_deploy_job": False}],
                         ids=["deploy-job-after-its-grace", "verify-at-once"])
def test_a_newer_rayservice_is_not_verified_against_old_settings(in_cluster_copy, fake: FakeDeployment, run):
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(cluster_spec_hash="123456789abc", **run)))
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
    assert data["report"] == ("kubectl -n inference get configmap ray-llm-gate-1a2b3c4d-report "
                              "-o jsonpath='{.data.report\\.json}'")


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


def test_the_jobs_own_command_line_runs_on_a_plain_interpreter(in_cluster_copy, fake: FakeDeployment, disaggregated):
    """The rendered Job's shell line, as the container runs it (python3 or python from PATH), with
    the system interpreter and none of this project's packages."""
    import cdk8s

    from ray_llm_eks.cdk8s_charts import build_serving_charts
    from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart

    spec, verification = disaggregated.config.specs().serving, disaggregated.config.specs().verification
    app = cdk8s.App()
    charts = build_serving_charts(app, spec)
    chart = build_verification_chart(app, spec, verification, GatePlan.of(spec, verification, charts), charts, None,
                                     OWN_NAMESPACE)
    job = next(o for o in chart.to_json() if o["kind"] == "Job")
    [container] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    config = fake.tmp / "gate.json"
    config.write_text(json.dumps(fake.gate_settings()))
    shell, flag, line = container["command"]
    line = line.replace("/etc/rayllmeks-gate/gate.json", str(config))
    line += f" --kube-api {fake.api_url} --kube-token-file {fake.token_file}"
    done = subprocess.run([shell, flag, line], capture_output=True, text=True, timeout=120,
                          env={**env, "PATH": "/usr/bin:/bin",
                               # The chart's own PYTHONPATH, its mount point replaced by the local copy's folder.
                               "PYTHONPATH": env["PYTHONPATH"].replace(PROGRAM_DIR, str(in_cluster_copy))})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["verdict"] == "pass"


def test_with_ray_token_auth_the_gate_reads_neither_a_secret_nor_the_dashboard(in_cluster_copy, fake: FakeDeployment):
    """Serve's state comes from the RayService (KubeRay writes it), so the gate needs no Ray token."""
    fake.ray_auth_token = "s3cr3t-token"
    fake.stored_auth_options = {"mode": "token"}
    report = _report(result := run_gate(in_cluster_copy, fake, fake.gate_settings(ray_auth="token")))
    assert result.returncode == 0, report["reasons"]
    assert (fake.dashboard_calls, fake.secret_reads) == ([], [])
    assert report["engine"]["matches_spec"] is True and report["engine"]["status"] == "RUNNING"


def test_token_auth_pruned_by_an_old_crd_fails_the_gate(in_cluster_copy, fake: FakeDeployment):
    """KubeRay 1.4.0's CRD drops authOptions: the RayService runs, unauthenticated; the gate says so."""
    fake.ray_auth_token = "s3cr3t-token"
    spec = fake.rayservice["spec"]  # shared by the session's tests: replaced, not changed
    fake.rayservice = {**fake.rayservice, "spec": {**spec, "rayClusterConfig": {
        k: v for k, v in spec["rayClusterConfig"].items() if k != "authOptions"}}}  # as the API server prunes it
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(ray_auth="token")))
    assert report["verdict"] == "fail"
    assert any("has no authOptions.mode token" in r and "predates KubeRay 1.5.1" in r for r in report["reasons"])


def test_with_kuberay_1_4_0_and_no_ray_auth_the_gate_passes_the_same_way(in_cluster_copy, fake: FakeDeployment):
    """KubeRay 1.4.0 (ray_auth: disabled): no authOptions rendered, nothing to check about it."""
    spec = fake.rayservice["spec"]  # shared by the session's tests: replaced, not changed
    fake.rayservice = {**fake.rayservice, "spec": {**spec, "rayClusterConfig": {
        k: v for k, v in spec["rayClusterConfig"].items() if k != "authOptions"}}}
    report = _report(result := run_gate(in_cluster_copy, fake, fake.gate_settings(ray_auth="disabled")))
    assert result.returncode == 0, report["reasons"]
    assert (fake.dashboard_calls, fake.secret_reads) == ([], [])


def test_a_status_of_a_generation_kuberay_has_not_observed_is_not_believed(in_cluster_copy, fake: FakeDeployment):
    """A DEPLOY_FAILED written before KubeRay saw this spec is the previous config's, not this one's."""
    fake.scenario = Scenario(serve_states=[("DEPLOY_FAILED", False)] * 4 + [("DEPLOYING", True)] * 3)
    report = _report(result := run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert result.returncode == 0, report["reasons"]
    assert fake.scenario.serve_states == []


def test_a_status_is_believed_only_once_it_has_held(in_cluster_copy, fake: FakeDeployment):
    """KubeRay reads Serve before it submits a changed config: the first status of a new generation
    may be the previous config's RUNNING; the DEPLOY_FAILED that follows is the one that counts."""
    fake.scenario = Scenario(serve_states=[("RUNNING", True)], serve_final=("DEPLOY_FAILED", True))
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(serve_settle_seconds=1.0, deadline_seconds=60)))
    assert any("failed to deploy the spec's config: engine died" in r for r in report["reasons"]), report["reasons"]


def test_a_rayservice_carrying_another_serve_config_is_not_ready(in_cluster_copy, fake: FakeDeployment):
    args = fake.settings["serve_args"]
    first = sorted(args)[0]
    fake.serve_config_text = json.dumps({"applications": [{"name": fake.settings["application"], "args": {
        **args, first: "a previous deploy's"}}]})
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(deadline_seconds=3)))
    assert report["verdict"] == "fail"
    assert any("the RayService carries another Serve config" in r for r in report["reasons"]), report["reasons"]


def test_without_kuberays_event_the_worker_logs_are_read_whole(in_cluster_copy, fake: FakeDeployment):
    """Events expire (an hour by default): with none left, nothing bounds the log, and old lines count."""
    fake.serve_events = False
    fake.scenario = Scenario(old_log=UCX_ON_EFA)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["transport"]["log_since"] is None
    assert report["verdict"] == "fail"


@pytest.mark.parametrize(("scenario_lines", "expected"), [(None, 1.0), ("tcp", 0.0)])
def test_continuous_verification_publishes_the_verdict(fake: FakeDeployment, monkeypatch, scenario_lines, expected):
    """The CronJob's command (read-only overrides, --publish), in process, against moto's CloudWatch."""
    import datetime

    import boto3
    from moto import mock_aws

    from ray_llm_eks.verification.__main__ import main

    if scenario_lines == "tcp":
        fake.scenario = Scenario(worker_log=TCP_FALLBACK)
    config = fake.tmp / "gate.json"
    config.write_text(json.dumps(fake.gate_settings()))
    for name, value in {"AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    now = datetime.datetime.now(datetime.timezone.utc)
    with mock_aws():
        code = main(["run", "--config", str(config), "--kube-api", fake.api_url, "--kube-token-file",
                     str(fake.token_file), "--set", '{"rollout":false,"as_deploy_job":false,"deadline_seconds":60}',
                     "--publish", OWN_NAMESPACE])
        client = boto3.client("cloudwatch", region_name="us-west-2")
        (metric,) = client.list_metrics(Namespace=OWN_NAMESPACE, MetricName="TransportVerified")["Metrics"]
        data = client.get_metric_data(
            MetricDataQueries=[{"Id": "v", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Minimum"}}],
            StartTime=now - datetime.timedelta(minutes=5), EndTime=now + datetime.timedelta(minutes=5))
    assert data["MetricDataResults"][0]["Values"] == [expected]
    assert code == (0 if expected else 1)
    assert fake.deleted == []  # read-only


def _continuous(fake: FakeDeployment, monkeypatch, **settings) -> tuple[int, list[float]]:
    """One continuous verification run in process (as the CronJob runs it), and what it published."""
    import datetime

    import boto3
    from moto import mock_aws

    from ray_llm_eks.verification.__main__ import main

    config = fake.tmp / "gate.json"
    config.write_text(json.dumps(fake.gate_settings()))
    for name, value in {"AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    overrides = {"rollout": False, "as_deploy_job": False, "deadline_seconds": 60, **settings}
    now = datetime.datetime.now(datetime.timezone.utc)
    with mock_aws():
        code = main(["run", "--config", str(config), "--kube-api", fake.api_url, "--kube-token-file",
                     str(fake.token_file), "--set", json.dumps(overrides), "--publish", OWN_NAMESPACE])
        client = boto3.client("cloudwatch", region_name="us-west-2")
        metrics = client.list_metrics(Namespace=OWN_NAMESPACE, MetricName="TransportVerified")["Metrics"]
        if not metrics:
            return code, []
        data = client.get_metric_data(
            MetricDataQueries=[{"Id": "v", "MetricStat": {"Metric": metrics[0], "Period": 60, "Stat": "Minimum"}}],
            StartTime=now - datetime.timedelta(minutes=5), EndTime=now + datetime.timedelta(minutes=5))
    return code, data["MetricDataResults"][0]["Values"]


def test_continuous_verification_does_nothing_while_the_deploys_gate_runs(fake: FakeDeployment, monkeypatch):
    """Mid-rollout pods would fail it: it neither checks nor publishes until the deploy's gate Job ends."""
    fake.scenario = Scenario(job_status={})  # the gate Job has not finished
    code, published = _continuous(fake, monkeypatch, wait_for_job="ray-llm-gate-abc")
    assert (code, published) == (0, [])
    assert fake.requests_served == 0
    fake.scenario = Scenario(job_status={"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    code, published = _continuous(fake, monkeypatch, wait_for_job="ray-llm-gate-abc")
    assert (code, published) == (0, [1.0])


def test_continuous_verification_reads_only_its_window_and_only_disqualifying_lines(in_cluster_copy,
                                                                                    fake: FakeDeployment, monkeypatch):
    """Hours after start the kubelet has rotated the startup lines away: their absence is not a
    failure in a window, while a fallback line in the window still is."""
    quiet = ["(ServeReplica:llm:PDDecode pid=412) INFO 11-30 22:10:01 [engine.py:300] Avg generation throughput: 812 tokens/s"]
    fake.scenario = Scenario(worker_log=quiet)
    code, published = _continuous(fake, monkeypatch, log_window_seconds=900)
    assert (code, published) == (0, [1.0])
    fake.scenario = Scenario(worker_log=[*quiet, TCP_LINES[1]])
    code, published = _continuous(fake, monkeypatch, log_window_seconds=900)
    assert (code, published) == (1, [0.0])
    # The deploy's gate (no window) still requires the startup lines.
    fake.scenario = Scenario(worker_log=quiet)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "fail" and any("no NIXL backend evidence" in r for r in report["reasons"])


def _published_figures(fake: FakeDeployment, monkeypatch, runs: int, between,
                       **settings: Any) -> tuple[list[dict], dict[str, list[float]]]:
    """``runs`` continuous verification runs (as the CronJob runs them, with its state ConfigMap),
    ``between()`` after each but the last; every metric they published, from moto's CloudWatch."""
    import datetime

    import boto3
    from moto import mock_aws

    from ray_llm_eks.verification.__main__ import main

    state = "ray-llm-cv-state"
    fake.config_map_store.setdefault(state, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": state, "namespace": fake.namespace, "resourceVersion": "1", "labels": {"from": "the chart"}}})
    config = fake.tmp / "gate.json"
    config.write_text(json.dumps(fake.gate_settings()))
    for name, value in {"AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    overrides = {"rollout": False, "as_deploy_job": False, "deadline_seconds": 60, "log_window_seconds": 900,
                 "state_config_map": state, **settings}
    reports, now = [], datetime.datetime.now(datetime.timezone.utc)
    with mock_aws():
        for run in range(runs):
            report_file = fake.tmp / f"report-{run}.json"
            assert main(["run", "--config", str(config), "--kube-api", fake.api_url, "--kube-token-file",
                         str(fake.token_file), "--set", json.dumps(overrides), "--publish", OWN_NAMESPACE,
                         "--report-file", str(report_file)]) == 0
            reports.append(json.loads(report_file.read_text()))
            if run < runs - 1:
                between()
        client = boto3.client("cloudwatch", region_name="us-west-2")
        values = {}
        for metric in client.list_metrics(Namespace=OWN_NAMESPACE)["Metrics"]:
            data = client.get_metric_data(
                MetricDataQueries=[{"Id": "v", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Maximum"}}],
                StartTime=now - datetime.timedelta(minutes=5), EndTime=now + datetime.timedelta(minutes=5))
            values[metric["MetricName"]] = data["MetricDataResults"][0]["Values"]
    assert fake.config_map_store[state]["metadata"]["labels"] == {"from": "the chart"}  # only data was written
    return reports, values


def _chat(fake: FakeDeployment, words: int = 200) -> None:
    import urllib.request

    body = json.dumps({"model": fake.settings["model"], "stream": True,
                       "messages": [{"role": "user", "content": "word " * words}]}).encode()
    request = urllib.request.Request(f"{fake.api_url}/openai/v1/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def test_continuous_verification_publishes_what_was_served_between_runs(fake: FakeDeployment, monkeypatch):
    """The first run only keeps its reading; the second publishes the window: the first run's 3
    probes and 5 client requests, TTFT as prefill's plus decode's, the KV bytes, each node's EFA."""
    reports, values = _published_figures(fake, monkeypatch, runs=2,
                                         between=lambda: [_chat(fake) for _ in range(5)])
    assert "window" not in reports[0]  # nothing to subtract yet
    window = reports[1]["window"]
    assert window["requests"] == 3 + 5
    # prefill 0.05 s in (0.04, 0.06] and decode 0.03 s in (0.02, 0.04], interpolated as PromQL does.
    assert window["ttft_p50_ms"] == pytest.approx(50.0 + 30.0)
    assert window["ttft_p99_ms"] == pytest.approx(59.8 + 39.8)
    assert window["itl_p50_ms"] == pytest.approx(17.5)  # 24 gaps of 20 ms, all in (0.01, 0.025]
    assert window["nixl_failed_transfers"] == 0
    assert window["kv_transfer_mean_ms"] == pytest.approx(31.0)
    # Every KV byte predicted crossed EFA, per node: the least a node moved is one node's share.
    assert set(window["efa_bytes_by_node"]) == {"ip-10-0-1-11.prefill", "ip-10-0-1-12.decode"}
    assert window["min_node_efa_bytes"] == min(window["efa_bytes_by_node"].values()) > 0
    assert window["kv_transfer_bytes"] == window["efa_bytes_by_node"]["ip-10-0-1-12.decode"]
    assert "local_prefill_requests" not in window and "remote_prefill_requests" not in window  # no threshold
    assert values["TransportVerified"] == [1.0]
    assert values["Requests"] == [8.0]
    assert values["TtftP99"] == [pytest.approx(99.6)]
    assert values["NixlFailedTransfers"] == [0.0]
    assert values["MinNodeEfaBytes"] == [window["min_node_efa_bytes"]]
    assert values["WorkerPodsReplaced"] == [0.0]
    # The p99's certain floor: the larger leg's bucket edge, prefill's 0.04 s.
    assert window["ttft_p99_floor_ms"] == 40.0 and values["TtftP99Floor"] == [40.0]
    assert set(values) == {"TransportVerified", "WorkerPodsReplaced", "Requests", "GeneratedTokensPerSecond", "TtftP50",
                           "TtftP99", "TtftP99Floor",
                           "ItlP50", "ItlP99", "KvTransferBytes", "KvTransferTimeMean", "NixlFailedTransfers",
                           "MinNodeEfaBytes"}


def test_failed_transfers_between_runs_reach_the_alarms_metric(fake: FakeDeployment, monkeypatch):
    def failing_traffic() -> None:
        fake.scenario.failed_transfers = 2
        _chat(fake)
        fake.scenario.failed_transfers = 0

    reports, values = _published_figures(fake, monkeypatch, runs=2, between=failing_traffic)
    assert reports[1]["window"]["nixl_failed_transfers"] == 2
    assert values["NixlFailedTransfers"] == [2.0]


def test_an_autoscaled_deployment_passes_with_any_pod_count_in_its_range(in_cluster_copy, fake: FakeDeployment):
    """Autoscaled roles carry their node groups' bounds: one ready pod each (of 1 to 3) is a
    deployment the gate can prove, and a pod still starting is not waited for."""
    roles = {role: {**spec, "min_nodes": 1, "max_nodes": 3} for role, spec in fake.settings["roles"].items()}
    fake.scenario.autoscaler_running = True
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(roles=roles)))
    assert report["verdict"] == "pass", report["reasons"]
    # KubeRay watches only the Ray container: a dead autoscaler sidecar is the gate's to report.
    fake.scenario.autoscaler_running = False
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(roles=roles)))
    assert any("Ray autoscaler container of the head pod" in r for r in report["reasons"])


def test_role_expectations_fixed_and_autoscaled():
    from ray_llm_eks.base.wire import RoleExpectation

    fixed = RoleExpectation(nodes=2, node_selector={}, gpus_per_node=1)
    assert (fixed.autoscaled, fixed.pod_range, fixed.describe()) == (False, (2, 2), "2")
    ranged = RoleExpectation(nodes=2, node_selector={}, gpus_per_node=1, min_nodes=0, max_nodes=5)
    # At least one pod: the path must be provable.
    assert (ranged.autoscaled, ranged.pod_range, ranged.describe()) == (True, (1, 5), "1 to 5 (autoscaled)")


@pytest.mark.parametrize("garbage", ['{"workers": []}', "not json", '{"at": "x", "workers": {}}'])
def test_an_unusable_previous_reading_is_replaced_not_fatal(fake: FakeDeployment, monkeypatch, garbage):
    fake.config_map_store["ray-llm-cv-state"] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "ray-llm-cv-state", "namespace": fake.namespace, "resourceVersion": "1", "labels": {"from": "the chart"}},
        "data": {"state.json": garbage}}
    reports, values = _published_figures(fake, monkeypatch, runs=2, between=lambda: _chat(fake))
    assert any("replaced an unusable previous reading" in w for w in reports[0]["warnings"])
    assert reports[1]["window"]["requests"] == 3 + 1  # the next run is whole again
    assert values["TransportVerified"] == [1.0]


def test_a_run_that_cannot_keep_its_state_fails(fake: FakeDeployment, monkeypatch):
    """Without its ConfigMap the serving metrics would go quiet: the run fails instead, so
    TransportNotVerified says why."""
    code, published = _continuous(fake, monkeypatch, log_window_seconds=900, state_config_map="missing-state")
    assert code == 1 and published == [0.0]



# --- disaggregation.min_prompt_tokens: the conditional decode server's two paths ------------------------

LONG_PROBE_TOKENS = 2 + 10 + 300 + 12
"""A long probe's tokens on the fake: "Probe <nonce>." and the 10-word request, the 300 filler words of
``gate_settings``, and the fake's 12 of chat template."""
SHORT_PROBE_TOKENS = 4 + 12
"""The short probe's ("Probe <nonce>. Say hi.")."""


def test_both_paths_pass_and_only_the_remote_probes_are_predicted(in_cluster_copy, fake: FakeDeployment):
    from fake_cluster import kv_bytes_moved

    fake.scenario = Scenario(pd_threshold=100)
    result = run_gate(in_cluster_copy, fake, fake.gate_settings(min_prompt_tokens=100))
    report = _report(result)
    assert result.returncode == 0, report["reasons"]
    results = report["probes"]["results"]
    assert [(r["prompt_tokens"], r["prefill"]) for r in results] == [(LONG_PROBE_TOKENS, "remote")] * 3 + [
        (SHORT_PROBE_TOKENS, "local")]
    assert report["probes"]["count"] == 4 and fake.requests_served == 4
    paths = report["paths"]
    assert paths["counter"] == "ray_rayllmeks_pd_requests_total" and paths["min_prompt_tokens"] == 100
    assert paths["probes"] == {"local": [4], "remote": [1, 2, 3]}
    assert paths["counted"] == {"local": 1.0, "remote": 3.0}
    kv = report["kv"]
    # The short probe moved nothing and is not predicted: every predicted byte crossed, no more.
    assert kv["predicted_probes"] == 3
    assert kv["predicted_bytes"] == 3 * kv_bytes_moved(LONG_PROBE_TOKENS)
    assert kv["efa_moved_bytes"] == kv["predicted_bytes"] and kv["efa_fraction_of_predicted"] == 1.0
    assert kv["nixl"]["transfers"] == 3


def test_the_kv_fraction_is_the_same_with_and_without_the_local_probe(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(pd_threshold=100)
    without = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    with_local = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(min_prompt_tokens=100)))
    assert (without["verdict"], with_local["verdict"]) == ("pass", "pass"), with_local["reasons"]
    assert with_local["probes"]["count"] == without["probes"]["count"] + 1
    for key in ("predicted_bytes", "efa_moved_bytes", "efa_fraction_of_predicted"):
        assert with_local["kv"][key] == without["kv"][key], key


def test_without_a_threshold_the_report_is_what_it_was(in_cluster_copy, fake: FakeDeployment):
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "pass"
    assert "paths" not in report and "predicted_probes" not in report["kv"]
    assert report["probes"]["count"] == 3 and all("prefill" not in r for r in report["probes"]["results"])
    assert set(report["probes"]["results"][0]) == {"status", "ok", "ttft_ms", "e2e_ms", "prompt_tokens",
                                                   "completion_tokens", "completion", "error"}


def test_a_short_probe_the_decode_server_sent_to_the_prefill_leg_fails(in_cluster_copy, fake: FakeDeployment):
    # A decode server that miscounts every prompt as long (the twin once found one: every short prompt went remote).
    fake.scenario = Scenario(pd_threshold=0)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(min_prompt_tokens=100)))
    assert report["verdict"] == "fail"
    assert report["paths"]["counted"] == {"local": 0.0, "remote": 4.0}
    assert ('ray_rayllmeks_pd_requests_total{prefill="local"} grew by 0 on the decode workers during the probes, '
            "fewer than the 1 probe(s) of under 100 prompt tokens (disaggregation.min_prompt_tokens)") in report["reasons"]
    assert len(report["reasons"]) == 1  # the extra KV bytes it moved pass the EFA check (a floor, not a ceiling)


def test_a_long_probe_prefilled_on_decode_fails_naming_the_remote_path(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(pd_threshold=1000)  # the server's threshold above the long probes': all local
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(min_prompt_tokens=100)))
    assert report["verdict"] == "fail"
    assert any('{prefill="remote"} grew by 0' in r and "fewer than the 3 probe(s) of at least 100 prompt tokens"
               in r for r in report["reasons"]), report["reasons"]
    assert any("must cross EFA" in r for r in report["reasons"])  # and no KV bytes crossed


def test_no_counter_on_any_decode_worker_says_the_conditional_server_is_not_running(in_cluster_copy,
                                                                                   fake: FakeDeployment):
    fake.scenario = Scenario(pd_threshold=None)  # Ray's own P/D application: every prompt remote, no counter
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(min_prompt_tokens=100)))
    assert report["verdict"] == "fail"
    decode_pod = next(p["name"] for p in report["pods"] if p["role"] == "decode")
    assert report["reasons"] == [
        f"no decode worker exports ray_rayllmeks_pd_requests_total ({decode_pod}) with disaggregation.min_prompt_tokens "
        "100: the conditional decode server is not running (the Serve application must import "
        "rayllmeks_pd.conditional:build_pd_openai_app)"]


@pytest.mark.parametrize(("threshold", "verdict"), [(LONG_PROBE_TOKENS, "pass"), (LONG_PROBE_TOKENS + 1, "fail")])
def test_a_probe_of_exactly_the_threshold_is_remote(in_cluster_copy, fake: FakeDeployment, threshold, verdict):
    """``<`` and not ``<=``: the decode server prefills a prompt of exactly the threshold on the prefill
    leg (ray_llm_eks.pd.conditional.route), and the gate predicts its KV bytes."""
    fake.scenario = Scenario(pd_threshold=threshold)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(min_prompt_tokens=threshold)))
    assert report["verdict"] == verdict, report["reasons"]
    if verdict == "pass":
        assert report["paths"]["probes"] == {"local": [4], "remote": [1, 2, 3]}
        assert report["kv"]["predicted_probes"] == 3 and report["kv"]["efa_fraction_of_predicted"] == 1.0
    else:  # one token short of it: every probe local, no KV path probed
        assert report["paths"]["probes"] == {"local": [1, 2, 3, 4], "remote": []}
        assert (f"no successful probe had {threshold} prompt tokens or more (disaggregation.min_prompt_tokens), so "
                "none took the prefill leg") in report["reasons"]


def test_continuous_verification_counts_the_requests_of_each_path_in_its_window(fake: FakeDeployment, monkeypatch):
    """The window's requests split by path: the first run's 3 long and 1 short probes, 5 long and 2 short
    client requests; only the long ones moved KV bytes."""
    fake.scenario = Scenario(pd_threshold=100)
    reports, values = _published_figures(fake, monkeypatch, runs=2, min_prompt_tokens=100,
                                         between=lambda: [_chat(fake, words) for words in (200,) * 5 + (10,) * 2])
    window = reports[1]["window"]
    assert (window["local_prefill_requests"], window["remote_prefill_requests"]) == (1 + 2, 3 + 5)
    assert window["requests"] == 4 + 7  # every request finishes on decode
    assert window["kv_transfer_bytes"] == window["efa_bytes_by_node"]["ip-10-0-1-12.decode"]
    assert reports[1]["paths"]["counted"] == {"local": 1.0, "remote": 3.0}  # this run's own probes
    assert "LocalPrefillRequests" not in values  # in the report's window, not a CloudWatch metric
