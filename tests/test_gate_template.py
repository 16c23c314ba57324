"""The deployment gate in the CloudFormation template: ordered after the RayService, bounded, and
run again whenever the serving spec changes (a wait condition cannot be updated, so it is renamed)."""

from __future__ import annotations

import json

import pytest

from ray_llm_eks.cdk8s_charts import RAYSERVICE_CHART_ID, VERIFICATION_CHART_ID

WAIT = "AWS::CloudFormation::WaitCondition"
HANDLE = "AWS::CloudFormation::WaitConditionHandle"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def changed(synth):
    """Another image digest (a pod-template change) and a longer bound."""
    return synth({"image": {"digest": DIGEST}, "verification": {"timeout_minutes": 90}})


def _only(synthesized, resource_type):
    [(logical_id, resource)] = synthesized.resources(resource_type).items()
    return logical_id, resource


def test_the_wait_condition_waits_for_the_gate_job_after_the_rayservice(default):
    stack = default.stack
    resources = default.template_json["Resources"]
    handle_id, _ = _only(default, HANDLE)
    wait_id, wait = _only(default, WAIT)
    verification_id = default.logical_id(stack.serving.manifests[VERIFICATION_CHART_ID])
    rayservice_id = default.logical_id(stack.serving.manifests[RAYSERVICE_CHART_ID])
    assert wait["Properties"] == {"Count": 1, "Handle": {"Ref": handle_id}, "Timeout": "3600"}
    assert verification_id in wait["DependsOn"]
    assert rayservice_id in resources[verification_id]["DependsOn"]
    assert wait_id == default.logical_id(stack.serving.gate_wait_condition)
    run_id = stack.serving.gate.run_id
    assert run_id in wait_id and run_id in handle_id


def test_the_job_gets_the_handles_url_through_its_secret(default):
    manifest = default.template_json["Resources"][default.logical_id(default.stack.serving.manifests[VERIFICATION_CHART_ID])]
    handle_id, _ = _only(default, HANDLE)
    parts = manifest["Properties"]["Manifest"]["Fn::Join"][1]
    assert {"Ref": handle_id} in parts
    text = "".join(p if isinstance(p, str) else "<url>" for p in parts)
    secret = next(o for o in json.loads(text) if o["kind"] == "Secret")
    assert secret["stringData"] == {"url": "<url>"}


def test_a_changed_serving_spec_runs_the_gate_again(default, changed):
    assert _only(changed, WAIT)[0] != _only(default, WAIT)[0]
    assert _only(changed, HANDLE)[0] != _only(default, HANDLE)[0]
    assert changed.stack.serving.gate_job_name != default.stack.serving.gate_job_name
    # The manifest resource keeps its logical id: CloudFormation updates it, and the kubectl
    # provider's `kubectl apply --prune` replaces the old Job with the new one.
    assert default.logical_id(default.stack.serving.manifests[VERIFICATION_CHART_ID]) == \
        changed.logical_id(changed.stack.serving.manifests[VERIFICATION_CHART_ID])


def test_the_bound_is_the_configured_timeout(changed):
    assert _only(changed, WAIT)[1]["Properties"]["Timeout"] == "5400"


def test_without_wait_the_gate_still_runs_but_the_deploy_does_not_hold(synth):
    relaxed = synth({"verification": {"wait": False}})
    assert not relaxed.resources(WAIT) and not relaxed.resources(HANDLE)
    assert VERIFICATION_CHART_ID in relaxed.stack.serving.manifests
    assert relaxed.stack.serving.gate_wait_condition is None


def test_the_report_command_is_a_stack_output(default):
    output = default.template_json["Outputs"]["GateReportCommand"]
    job = default.stack.serving.gate_job_name
    assert output["Value"] == f"kubectl -n inference get configmap {job}-report -o jsonpath='{{.data.report\\.json}}'"


def test_the_rayservice_and_so_the_gate_wait_for_the_node_groups(default):
    """A node-group update that replaces nodes finishes before the RayService manifest is applied,
    and so before the gate runs: the gate cannot pass minutes before a drain. What CloudFormation
    re-applies first on a rollback is not documented; the template states the forward order only
    (gate after RayService after node groups), and the gate is right under either rollback order
    (tests/verification/test_gate_rollback.py)."""
    stack = default.stack
    resources = default.template_json["Resources"]
    rayservice_id = default.logical_id(stack.serving.manifests[RAYSERVICE_CHART_ID])
    verification_id = default.logical_id(stack.serving.manifests[VERIFICATION_CHART_ID])
    groups = {default.logical_id(group.nodegroup) for group in (*stack.gpu_node_groups.values(), stack.system_nodes)}
    assert len(groups) == 3 and groups <= set(resources[rayservice_id]["DependsOn"])
    assert rayservice_id in resources[verification_id]["DependsOn"]
