"""RayLlmServing in the full stack: Pod Identity role and association, manifests and their order.

Uses the session's shared stack synthesis (tests/conftest.py ``synth``), so each scenario is
synthesized once for all test files.
"""

from __future__ import annotations

import json

import pytest

from ray_llm_eks.cdk8s_charts import (ADMISSION_POLICY_CHART_ID, NAMESPACE_CHART_ID, NETWORK_POLICY_CHART_ID,
                                     RAYSERVICE_CHART_ID, VERIFICATION_CHART_ID)
from ray_llm_eks.manifests import chart_file_name, write_manifests

MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"


@pytest.fixture(scope="session")
def stack_disaggregated(synth):
    return synth()


@pytest.fixture(scope="session")
def stack_colocated(synth):
    return synth({"topology": "colocated"})


def test_pod_role_is_trusted_by_eks_pod_identity_and_has_no_permissions(stack_disaggregated):
    serving = stack_disaggregated.stack.serving
    role = stack_disaggregated.template_json["Resources"][stack_disaggregated.logical_id(serving.pod_role)]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert (statement["Effect"], statement["Principal"]) == ("Allow", {"Service": "pods.eks.amazonaws.com"})
    # Only for its own service account, namespace and cluster (the session tags EKS Pod Identity sets).
    tags = statement["Condition"]["StringEquals"]
    assert tags["aws:RequestTag/kubernetes-namespace"] == "inference"
    assert tags["aws:RequestTag/kubernetes-service-account"] == "ray-llm"
    assert tags["aws:RequestTag/eks-cluster-arn"] == {"Fn::GetAtt": [stack_disaggregated.logical_id(
        stack_disaggregated.stack.cluster.cluster.node.default_child), "Arn"]}
    assert "ManagedPolicyArns" not in role["Properties"]
    role_id = stack_disaggregated.logical_id(serving.pod_role)
    policies = stack_disaggregated.resources("AWS::IAM::Policy")
    assert not [p for p in policies.values() if {"Ref": role_id} in p["Properties"].get("Roles", [])]


def test_the_vpc_cni_has_its_own_role_and_the_nodes_none_of_its_permissions(stack_disaggregated):
    resources = stack_disaggregated.template_json["Resources"]
    cluster = stack_disaggregated.stack.cluster
    (addon,) = [r for r in resources.values() if r["Type"] == "AWS::EKS::Addon"
                and r["Properties"]["AddonName"] == "vpc-cni"]
    cni_role_id = stack_disaggregated.logical_id(cluster.vpc_cni_role)
    assert addon["Properties"]["PodIdentityAssociations"] == [
        {"RoleArn": {"Fn::GetAtt": [cni_role_id, "Arn"]}, "ServiceAccount": "aws-node"}]
    cni_role = resources[cni_role_id]["Properties"]
    assert "AmazonEKS_CNI_Policy" in json.dumps(cni_role["ManagedPolicyArns"])
    tags = cni_role["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert (tags["aws:RequestTag/kubernetes-namespace"], tags["aws:RequestTag/kubernetes-service-account"]) == (
        "kube-system", "aws-node")
    node_roles = [r for r in resources.values() if r["Type"] == "AWS::IAM::Role"
                  and "ec2.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    assert len(node_roles) == 3  # system, prefill, decode
    for role in node_roles:
        assert "AmazonEKS_CNI_Policy" not in json.dumps(role["Properties"]["ManagedPolicyArns"])


def test_node_groups_on_a_cluster_the_library_did_not_make_keep_the_cni_policy():
    """Its VPC CNI may have no role of its own: nodes without the policy would get no pod addresses."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2, aws_eks_v2 as eks
    from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer

    from ray_llm_eks.constructs import SystemNodeGroup

    app = cdk.App()
    stack = cdk.Stack(app, "Own", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    own = eks.Cluster(stack, "Cluster", version=eks.KubernetesVersion.V1_35, vpc=vpc, default_capacity=0,
                      default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
                      kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV35Layer(stack, "L")))
    system = SystemNodeGroup(stack, "System", cluster=own, subnet=vpc.private_subnets[0])
    policies = json.dumps(stack.resolve(system.role.node.default_child.managed_policy_arns))
    assert "AmazonEKS_CNI_Policy" in policies


def test_pod_identity_association_binds_the_service_account_to_the_role(stack_disaggregated):
    serving = stack_disaggregated.stack.serving
    association = stack_disaggregated.template_json["Resources"][stack_disaggregated.logical_id(serving.pod_identity)]
    assert association["Type"] == "AWS::EKS::PodIdentityAssociation"
    properties = association["Properties"]
    assert properties["Namespace"] == "inference"
    assert properties["ServiceAccount"] == "ray-llm"
    assert properties["RoleArn"] == {"Fn::GetAtt": [stack_disaggregated.logical_id(serving.pod_role), "Arn"]}
    assert properties["ClusterName"] == {"Ref": stack_disaggregated.logical_id(stack_disaggregated.stack.cluster.cluster)}


def test_charts_are_exposed_in_apply_order(stack_disaggregated):
    serving = stack_disaggregated.stack.serving
    assert [c.node.id for c in serving.charts] == [NAMESPACE_CHART_ID, NETWORK_POLICY_CHART_ID,
                                                   ADMISSION_POLICY_CHART_ID, RAYSERVICE_CHART_ID, VERIFICATION_CHART_ID]
    assert stack_disaggregated.stack.charts == serving.charts
    assert (serving.namespace, serving.service_account_name, serving.openai_service_name) == (
        "inference", "ray-llm", "ray-llm-openai",
    )


def test_manifests_wait_for_kuberay_the_device_plugins_and_the_previous_chart(stack_disaggregated):
    stack = stack_disaggregated.stack
    resources = stack_disaggregated.template_json["Resources"]
    namespace_id = stack_disaggregated.logical_id(stack.serving.manifests[NAMESPACE_CHART_ID])
    policy_id = stack_disaggregated.logical_id(stack.serving.manifests[NETWORK_POLICY_CHART_ID])
    admission_id = stack_disaggregated.logical_id(stack.serving.manifests[ADMISSION_POLICY_CHART_ID])
    rayservice_id = stack_disaggregated.logical_id(stack.serving.manifests[RAYSERVICE_CHART_ID])
    operator_and_plugins = {
        stack_disaggregated.logical_id(stack.kuberay.chart),
        *(stack_disaggregated.logical_id(chart) for chart in stack.device_plugins.charts),
    }
    kuberay_id = stack_disaggregated.logical_id(stack.kuberay.chart)
    for manifest_id in (policy_id, rayservice_id):
        assert resources[manifest_id]["Type"] == MANIFEST_TYPE
        assert operator_and_plugins <= set(resources[manifest_id]["DependsOn"])
    # The operator watches only the serving namespace and installs its Role there: namespace first.
    assert namespace_id in resources[kuberay_id]["DependsOn"]
    assert kuberay_id not in resources[namespace_id]["DependsOn"]
    assert operator_and_plugins - {kuberay_id} <= set(resources[namespace_id]["DependsOn"])
    # The policies exist before any pod: no Ray pod starts in an open namespace.
    assert namespace_id in resources[policy_id]["DependsOn"]
    assert policy_id in resources[admission_id]["DependsOn"]
    assert admission_id in resources[rayservice_id]["DependsOn"]


def test_every_manifest_waits_for_the_pod_identity_association(stack_disaggregated):
    """The Pod Identity webhook injects credentials only into pods created after the association
    exists: no chart is applied before it (CloudFormation DependsOn)."""
    stack = stack_disaggregated.stack
    resources = stack_disaggregated.template_json["Resources"]
    association_id = stack_disaggregated.logical_id(stack.serving.pod_identity)
    assert resources[association_id]["Type"] == "AWS::EKS::PodIdentityAssociation"
    assert set(stack.serving.manifests) == {NAMESPACE_CHART_ID, NETWORK_POLICY_CHART_ID, ADMISSION_POLICY_CHART_ID,
                                            RAYSERVICE_CHART_ID, VERIFICATION_CHART_ID}
    for manifest in stack.serving.manifests.values():
        assert association_id in resources[stack_disaggregated.logical_id(manifest)]["DependsOn"]


def test_the_rayservice_manifest_carries_the_rayservice(stack_disaggregated):
    stack = stack_disaggregated.stack
    manifest = stack_disaggregated.template_json["Resources"][
        stack_disaggregated.logical_id(stack.serving.manifests[RAYSERVICE_CHART_ID])
    ]
    body = manifest["Properties"]["Manifest"]
    text = body if isinstance(body, str) else json.dumps(body)
    assert "RayService" in text and "build_pd_openai_app" in text


GATE_TYPES = ("AWS::CloudFormation::WaitCondition", "AWS::CloudFormation::WaitConditionHandle",
              "AWS::SecretsManager::Secret")
"""The gate's run-scoped resources: the wait condition, its handle and the secret holding the handle's URL."""


def _without_manifest_bodies(template: dict) -> dict:
    """The template without what a serving-spec change is meant to change: manifest bodies, and
    the gate's wait condition pair and signal secret, named after the spec's hash so that it runs
    again (references to the secret, in the gate role's policy, read as one placeholder)."""
    resources = {}
    signal_ids = {i for i, r in template["Resources"].items() if r["Type"] == "AWS::SecretsManager::Secret"}
    for logical_id, resource in template["Resources"].items():
        text = json.dumps(resource)
        for signal_id in signal_ids:
            text = text.replace(json.dumps({"Ref": signal_id}), json.dumps({"Ref": "<gate signal>"}))
        resource = json.loads(text)
        if resource["Type"] in GATE_TYPES:
            continue
        if resource["Type"] == MANIFEST_TYPE:
            resource["Properties"].pop("Manifest")
        resources[logical_id] = resource
    return resources


def _gate_ids(template: dict) -> set[str]:
    return {i for i, r in template["Resources"].items() if r["Type"] in GATE_TYPES}


def _kv_transfer_watch(resources: dict) -> dict:
    """The alarms and dashboard a topology changes: colocated moves no KV cache, so it has no
    NIXL or EFA alarm and no KV widget."""
    return {k: r for k, r in resources.items()
            if k.startswith(("ObservabilityNixlFailedTransfers", "ObservabilityEfaIdleWhileServing",
                             "ObservabilityDashboard"))}


def test_switching_topology_changes_only_kubernetes_manifests(stack_disaggregated, stack_colocated):
    disaggregated = _without_manifest_bodies(stack_disaggregated.template_json)
    colocated = _without_manifest_bodies(stack_colocated.template_json)
    watch = _kv_transfer_watch(disaggregated)
    assert len(watch) == 3 and len(_kv_transfer_watch(colocated)) == 1  # the dashboard stays
    assert {k: r for k, r in disaggregated.items() if k not in watch} == {
        k: r for k, r in colocated.items() if k not in watch}
    # ... and renames the gate's wait condition, so the deploy waits for a new verdict.
    assert len(_gate_ids(stack_disaggregated.template_json)) == 3
    assert not _gate_ids(stack_disaggregated.template_json) & _gate_ids(stack_colocated.template_json)
    rayservice_id = stack_colocated.logical_id(stack_colocated.stack.serving.manifests[RAYSERVICE_CHART_ID])
    assert (
        stack_disaggregated.template_json["Resources"][rayservice_id]["Properties"]["Manifest"]
        != stack_colocated.template_json["Resources"][rayservice_id]["Properties"]["Manifest"]
    )


def test_manifest_files_are_named_after_the_chart_ids(stack_disaggregated, tmp_path):
    written = write_manifests(stack_disaggregated.stack.serving.charts, tmp_path)
    assert [p.name for p in written] == [
        f"{NAMESPACE_CHART_ID}.yaml", f"{NETWORK_POLICY_CHART_ID}.yaml", f"{ADMISSION_POLICY_CHART_ID}.yaml",
        f"{RAYSERVICE_CHART_ID}.yaml", f"{VERIFICATION_CHART_ID}.yaml"]
    assert chart_file_name(stack_disaggregated.stack.serving.charts[3]) == "serving-rayservice.yaml"


def test_the_operator_watches_only_the_serving_namespace(stack_disaggregated):
    chart = next(r for r in stack_disaggregated.template_json["Resources"].values()
                 if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kuberay-operator")
    values = json.loads(chart["Properties"]["Values"])
    assert values["singleNamespaceInstall"] is True and values["watchNamespace"] == ["inference"]


def test_serving_refuses_an_operator_that_does_not_watch_its_namespace():
    from helpers.composition import cluster_stack, serving_nodes
    from ray_llm_eks.constructs import KubeRayOperator, RayLlmServing
    from ray_llm_eks.constructs.validation import ConstructValidationError

    stack, network, cluster = cluster_stack("S")
    system, legs = serving_nodes(stack, network, cluster)
    kuberay = KubeRayOperator(stack, "KubeRay", cluster=cluster, system_nodes=system, watch_namespaces=["elsewhere"])
    with pytest.raises(ConstructValidationError, match=r"S/Serving: kuberay: the operator watches only those "
                                                       r"namespaces.*inference.*accepted: KubeRayOperator"):
        RayLlmServing(stack, "Serving", strict=False, cluster=cluster, system=system, kuberay=kuberay, **legs)
