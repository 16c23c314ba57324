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


def _references(value, logical_id: str) -> bool:
    """Whether ``value`` (any part of a template) refers to ``logical_id`` by Ref or GetAtt."""
    if isinstance(value, dict):
        if value.get("Ref") == logical_id:
            return True
        attribute = value.get("Fn::GetAtt")
        if attribute is not None and (attribute == logical_id or (isinstance(attribute, list) and attribute[0] == logical_id)):
            return True
        return any(_references(v, logical_id) for v in value.values())
    if isinstance(value, list):
        return any(_references(v, logical_id) for v in value)
    if isinstance(value, str):
        # Fn::Sub's ${LogicalId}
        return "${" + logical_id + "}" in value
    return False


def test_the_handles_url_is_only_in_its_secret_and_the_wait_condition(default):
    """The presigned URL is the deploy's signal: no manifest (which the kubectl handler logs and kubectl
    keeps in last-applied-configuration), no output, no other resource may carry it."""
    template = default.template_json
    handle_id, _ = _only(default, HANDLE)
    holders = {logical_id: resource["Type"] for logical_id, resource in template["Resources"].items()
               if _references(resource, handle_id)}
    secret_id = default.logical_id(default.stack.serving.gate_signal)
    wait_id, _ = _only(default, WAIT)
    assert holders == {secret_id: "AWS::SecretsManager::Secret", wait_id: WAIT}
    assert template["Resources"][secret_id]["Properties"]["SecretString"] == {"Ref": handle_id}
    assert not _references(template.get("Outputs", {}), handle_id)
    assert not [r for r in template["Resources"].values()
                if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and _references(r, handle_id)]


def test_the_job_gets_the_secrets_arn_and_reads_it_with_its_own_role(default):
    serving = default.stack.serving
    template = default.template_json
    manifest = template["Resources"][default.logical_id(serving.manifests[VERIFICATION_CHART_ID])]
    secret_id = default.logical_id(serving.gate_signal)
    parts = manifest["Properties"]["Manifest"]["Fn::Join"][1]
    assert {"Ref": secret_id} in parts  # the secret's ARN
    text = "".join(p if isinstance(p, str) else "<arn>" for p in parts)
    objects = json.loads(text)
    assert not [o for o in objects if o["kind"] == "Secret"]
    job = next(o for o in objects if o["kind"] == "Job")
    assert {"name": "GATE_SIGNAL_SECRET", "value": "<arn>"} in job["spec"]["template"]["spec"]["containers"][0]["env"]
    # The role: trusted by EKS Pod Identity for the gate's account only, allowed to read this secret only.
    role_id = default.logical_id(serving.gate_role)
    trust = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    [statement] = trust
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    conditions = statement["Condition"]["StringEquals"]
    assert conditions["aws:RequestTag/kubernetes-namespace"] == serving.namespace
    assert conditions["aws:RequestTag/kubernetes-service-account"] == f"{serving.ray_service_name}-gate"
    assert "aws:RequestTag/eks-cluster-arn" in conditions
    [policy] = [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"
                and {"Ref": role_id} in r["Properties"]["Roles"]]
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": {"Ref": secret_id}}]
    # The association exists before the gate's chart, so the webhook injects credentials into the Job's pod.
    association_id = default.logical_id(serving.gate_identity)
    association = template["Resources"][association_id]["Properties"]
    assert association["ServiceAccount"] == f"{serving.ray_service_name}-gate"
    assert association["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert association_id in manifest["DependsOn"]
    [policy_id] = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Policy"
                   and {"Ref": role_id} in r["Properties"]["Roles"]]
    assert policy_id in template["Resources"][association_id]["DependsOn"]


def test_each_run_has_its_own_secret(default, changed):
    assert default.logical_id(default.stack.serving.gate_signal) != changed.logical_id(changed.stack.serving.gate_signal)
    assert default.stack.serving.gate.run_id in default.logical_id(default.stack.serving.gate_signal)
    # Its name is CloudFormation's (unique), so a deleted run's secret in its recovery window blocks nothing.
    secret = default.template_json["Resources"][default.logical_id(default.stack.serving.gate_signal)]
    assert "Name" not in secret["Properties"]


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
    # Nothing to signal, so no secret and no role to read it.
    assert not relaxed.resources("AWS::SecretsManager::Secret")
    assert relaxed.stack.serving.gate_role is None and relaxed.stack.serving.gate_identity is None


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
