"""Node autoscaling in the template: Cluster Autoscaler, its role, and the node groups' tags;
nothing of it when every node group is fixed; the construct refuses growth without it."""

from __future__ import annotations

import json

import pytest

AUTOSCALED = {"prefill": {"min_size": 1, "desired_size": 1, "max_size": 3},
              "decode": {"min_size": 1, "desired_size": 2, "max_size": 4}}


def props(resource: dict) -> dict:
    return resource["Properties"]


@pytest.fixture(scope="module")
def autoscaled(synth):
    return synth(AUTOSCALED, nag=True)  # cdk-nag passes (its findings fail synthesis)


def test_autoscaled_node_groups_carry_their_range_and_scale_from_zero_tags(autoscaled):
    groups = {props(g)["Tags"].get("ray-llm-eks/role") if props(g).get("Tags") else "system": props(g)
              for g in autoscaled.resources("AWS::EKS::Nodegroup").values()}
    assert groups["prefill"]["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 1, "MaxSize": 3}
    assert groups["decode"]["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 2, "MaxSize": 4}
    for role in ("prefill", "decode"):
        tags = groups[role]["Tags"]
        # What Cluster Autoscaler cannot infer (EFA) and what it infers anyway (GPUs), on the node
        # group, where it reads them with eks:DescribeNodegroup; labels and taints it reads from
        # the node group's own Labels and Taints, which the taint's value makes usable.
        assert tags["k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa"] == "1"
        assert tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "1"
        assert groups[role]["Labels"]["role"] == role
        (taint,) = groups[role]["Taints"]
        assert taint["Value"] == role and taint["Effect"] == "NO_SCHEDULE"
    assert groups["system"]["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 1, "MaxSize": 1}


def test_cluster_autoscaler_may_resize_only_this_clusters_node_groups(autoscaled):
    (role_id,) = [k for k in autoscaled.resources("AWS::IAM::Role") if k.startswith("NodeAutoscalerRole")]
    role = props(autoscaled.template_json["Resources"][role_id])
    trust = role["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert (trust["aws:RequestTag/kubernetes-namespace"], trust["aws:RequestTag/kubernetes-service-account"]) == (
        "kube-system", "cluster-autoscaler")
    (policy,) = [p for k, p in autoscaled.resources("AWS::IAM::Policy").items() if k.startswith("NodeAutoscalerRole")]
    describe, scale = props(policy)["PolicyDocument"]["Statement"]
    assert sorted(describe["Action"]) == sorted([
        "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
        "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities", "ec2:DescribeImages",
        "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
        "ec2:GetInstanceTypesFromInstanceRequirements", "eks:DescribeNodegroup"])
    assert describe["Resource"] == "*" and "Condition" not in describe
    assert sorted(scale["Action"]) == ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]
    assert scale["Condition"] == {"StringEquals": {"autoscaling:ResourceTag/eks:cluster-name": {"Ref": "ClusterC2E21B66"}}}
    (association,) = [a for k, a in autoscaled.resources("AWS::EKS::PodIdentityAssociation").items()
                      if k.startswith("NodeAutoscaler")]
    assert (props(association)["Namespace"], props(association)["ServiceAccount"]) == ("kube-system", "cluster-autoscaler")


def test_the_chart_is_pinned_and_discovers_this_cluster(autoscaled):
    (chart_id, chart), = [(k, c) for k, c in autoscaled.resources("Custom::AWSCDK-EKS-HelmChart").items()
                          if props(c)["Chart"] == "cluster-autoscaler"]
    p = props(chart)
    assert (p["Repository"], p["Version"], p["Namespace"]) == (
        "https://kubernetes.github.io/autoscaler", "9.59.0", "kube-system")
    values = json.loads(json.dumps(p["Values"]))
    text = json.dumps(values)
    assert "ClusterC2E21B66" in text  # autoDiscovery.clusterName is the cluster's name
    for needle in ('\\"tag\\":\\"v1.35.0\\"', '\\"scale-down-unneeded-time\\":\\"10m\\"',
                   '\\"max-node-provision-time\\":\\"15m\\"', '\\"balance-similar-node-groups\\":\\"false\\"',
                   '\\"nodeSelector\\":{\\"role\\":\\"system\\"}', '\\"name\\":\\"cluster-autoscaler\\"',
                   '\\"cpu\\":\\"100m\\"'):
        assert needle in text, needle
    # Credentials before the pod, and a node for it.
    assert any(d.startswith("NodeAutoscalerPodIdentity") for d in chart["DependsOn"])
    assert autoscaled.logical_id(autoscaled.stack.system_nodes.nodegroup) in chart["DependsOn"]


def test_fixed_node_groups_get_no_autoscaler(default):
    assert not [k for k in default.template_json["Resources"] if k.startswith("NodeAutoscaler")]
    assert default.stack.node_autoscaler is None
    for group in default.resources("AWS::EKS::Nodegroup").values():
        assert not any(k.startswith("k8s.io/cluster-autoscaler") for k in (props(group).get("Tags") or {}))


def test_node_not_ready_counts_the_smallest_the_groups_may_be(autoscaled):
    (alarm,) = [a for a in autoscaled.resources("AWS::CloudWatch::Alarm").values()
                if "NodeNotReady" in json.dumps(props(a)["AlarmDescription"])]
    assert props(alarm)["Threshold"] == 1 + 1 + 1  # system + prefill min + decode min


def test_the_head_shares_the_system_node_with_the_autoscalers(autoscaled):
    """The Ray autoscaler sidecar (200m/512Mi) and Cluster Autoscaler (100m/600Mi) come out of the
    head's share, so what the head leaves on the node (the bench Job's room) stays the same."""
    from ray_llm_eks.base import sizing

    spec = autoscaled.stack.serving.spec
    fixed = sizing.head_resources(spec.system.instance)
    assert spec.head_resources == sizing.PodResources(fixed.cpu_millis - 300, ((fixed.memory_mib - 1112) // 256) * 256)


def test_serving_without_a_node_autoscaler_is_refused_when_a_group_may_grow():
    import aws_cdk as cdk

    from ray_llm_eks.constructs.serving import RayLlmServing
    from ray_llm_eks.constructs.validation import ConstructValidationError
    from ray_llm_eks.base.pools import WorkerPool

    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="123456789012", region="us-west-2"))
    with pytest.raises(ConstructValidationError, match=r"node_autoscaler: the node groups may grow \(decode 1 to 4 "
                                                       r"nodes\)[^\n]*stay Pending"):
        # Refused before the cluster is touched: pools stand in for the node groups.
        RayLlmServing(stack, "Serving", strict=False, cluster=None,  # type: ignore[arg-type]
                      prefill=WorkerPool(role="prefill"), decode=WorkerPool(role="decode", max_size=4))


def test_the_autoscaled_template_passes_cfn_lint_and_cdk_nag(autoscaled):
    from test_upstream_checkers_aws import ACCEPTED_CFN_LINT_WARNINGS, AWS_CDK_LIB_W3005, cfn_lint

    findings = cfn_lint(autoscaled.outdir / f"{autoscaled.stack.artifact_id}.template.json")
    assert [f for f in findings if f[0] not in ACCEPTED_CFN_LINT_WARNINGS] == []
    assert [f for f in findings if f[0] == "W3005" and not AWS_CDK_LIB_W3005.match(f[1])] == []
    report = json.loads((autoscaled.outdir / "validation-report.json").read_text())
    (plugin,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    acknowledged = {c["constructPath"] for s in plugin["suppressedViolations"] for c in s["violatingConstructs"]}
    assert any("/NodeAutoscaler/Role/DefaultPolicy/" in path for path in acknowledged)
