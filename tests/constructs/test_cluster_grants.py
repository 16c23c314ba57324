"""Two grants of the default synthesis narrowed (issue 24, smaller items): the VPC flow-log
role's trust policy names this account and its flow logs, and aws-cdk-lib's kubectl handler
(cluster-admin) holds no ECR read."""

from __future__ import annotations

import json

from ray_llm_eks.constructs.cluster import KUBECTL_HANDLER_POLICIES


def _role(default, fragment: str) -> dict:
    (role,) = [r for logical_id, r in default.resources("AWS::IAM::Role").items() if fragment in logical_id]
    return role["Properties"]


def test_the_flow_log_role_trusts_the_service_only_for_this_accounts_flow_logs(default):
    (statement,) = _role(default, "FlowLogIAMRole")["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert statement["Condition"]["ArnLike"] == {"aws:SourceArn": {"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":ec2:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"},
        ":vpc-flow-log/*"]]}}


def test_the_kubectl_handler_keeps_only_its_lambda_execution_policies(default):
    arns = _role(default, "KubectlProviderHandlerServiceRole")["ManagedPolicyArns"]
    assert arns == [{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                       f":iam::aws:policy/service-role/{name}"]]} for name in KUBECTL_HANDLER_POLICIES]
    text = json.dumps(default.template_json)
    assert "ContainerRegistry" not in text.replace("AmazonEC2ContainerRegistryPullOnly", "")  # nodes keep PullOnly
    assert "HasEcrPublic" not in text  # the condition that chose ECR Public read is gone with it
    inline = [p for p in default.resources("AWS::IAM::Policy").values()
              if any("KubectlProviderHandlerServiceRole" in json.dumps(r) for r in p["Properties"]["Roles"])]
    assert not [s for p in inline for s in p["Properties"]["PolicyDocument"]["Statement"]
                if any(str(a).startswith("ecr") for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))]


def test_every_chart_the_library_installs_comes_from_an_https_repository():
    """Why the handler needs no ECR: no chart is an OCI artifact (``oci://``) the handler would pull from ECR."""
    from ray_llm_eks.constructs import addons, autoscaler

    repositories = [addons.NVIDIA_REPOSITORY, addons.EFA_REPOSITORY, addons.KUBERAY_REPOSITORY, autoscaler.REPOSITORY]
    assert all(r.startswith("https://") for r in repositories)


def test_every_helm_chart_in_the_template_comes_from_those_repositories(default):
    charts = default.resources("Custom::AWSCDK-EKS-HelmChart")
    assert charts and all(c["Properties"]["Repository"].startswith("https://") for c in charts.values())
