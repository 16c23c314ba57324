"""cdk-nag AwsSolutions acknowledgments, each scoped to one construct and one finding.

Every acknowledgment here names the exact finding (``RuleId[FindingId]``) on the exact
construct that aws-cdk-lib or EKS makes us create, with the reason a security reviewer
needs. Nothing is acknowledged at stack or app level.
"""

from __future__ import annotations


from aws_cdk import Acknowledgment, Stack, Validations, aws_eks_v2 as eks, aws_iam as iam
from constructs import IConstruct

PACK = "AwsSolutions::AwsSolutions"


def _managed_policy(name: str) -> str:
    return f"{PACK}-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]"


def _acknowledge(construct: IConstruct, finding: str, reason: str) -> None:
    Validations.of(construct).acknowledge(Acknowledgment(id=finding, reason=reason))


def acknowledge_node_role(role: iam.IRole, managed_policies: tuple[str, ...]) -> None:
    """The managed policies that EKS documents as required on worker node roles."""
    reasons = {
        "AmazonEKSWorkerNodePolicy": "EKS requires this AWS managed policy on every worker node role "
        "(EKS user guide, 'Amazon EKS node IAM role') so kubelet can register and describe the cluster.",
        "AmazonEKS_CNI_Policy": "The Amazon VPC CNI add-on needs it to attach ENIs and assign pod IPs; "
        "EKS documents it as required on the node role when the add-on has no role of its own.",
        "AmazonEC2ContainerRegistryPullOnly": "Nodes pull images from ECR (the Ray LLM image lives in the "
        "AWS DLC account 763104351884); PullOnly is the narrowest AWS managed policy that allows it.",
    }
    for name in managed_policies:
        _acknowledge(role, _managed_policy(name), reasons[name])


def acknowledge_cni_role(role: iam.IRole, policy: str) -> None:
    _acknowledge(role, _managed_policy(policy),
                 "The Amazon VPC CNI's own role (EKS Pod Identity on kube-system/aws-node): EKS documents this AWS "
                 "managed policy as what the CNI needs to attach ENIs and assign pod IPs (EKS user guide, 'cni-iam-role').")


def acknowledge_cluster(cluster: eks.Cluster) -> None:
    """Findings on the roles and functions aws-cdk-lib's ``aws_eks_v2.Cluster`` creates itself."""
    _acknowledge(
        cluster.role,
        _managed_policy("AmazonEKSClusterPolicy"),
        "EKS requires this AWS managed policy on the cluster service role (EKS user guide, 'Amazon EKS cluster IAM role').",
    )
    provider = cluster.node.find_child("KubectlProvider")
    handler = provider.node.find_child("Handler")
    handler_role = handler.node.find_child("ServiceRole")
    lambda_basic = (
        "AWS managed policy attached by aws-cdk-lib's kubectl provider to write its Lambda logs; "
        "it grants only CloudWatch Logs writes."
    )
    lambda_vpc = (
        "AWS managed policy attached by aws-cdk-lib's kubectl provider so its Lambda can run in the VPC "
        "and reach a private cluster endpoint (ENI management only)."
    )
    _acknowledge(handler_role, _managed_policy("service-role/AWSLambdaBasicExecutionRole"), lambda_basic)
    _acknowledge(handler_role, _managed_policy("service-role/AWSLambdaVPCAccessExecutionRole"), lambda_vpc)
    _acknowledge(
        handler.node.find_child("Resource"),
        f"{PACK}-L1",
        "The kubectl handler's runtime is chosen by aws-cdk-lib to match the kubectl and awscli layers; "
        "it moves with aws-cdk-lib upgrades, not in this library.",
    )
    on_event_role = provider.node.find_child("Provider").node.find_child("framework-onEvent").node.find_child("ServiceRole")
    _acknowledge(on_event_role, _managed_policy("service-role/AWSLambdaBasicExecutionRole"), lambda_basic)
    _acknowledge(on_event_role, _managed_policy("service-role/AWSLambdaVPCAccessExecutionRole"), lambda_vpc)
    handler_function = Stack.of(cluster).get_logical_id(handler.node.find_child("Resource"))
    _acknowledge(
        on_event_role.node.find_child("DefaultPolicy"),
        f"{PACK}-IAM5[Resource::<{handler_function}.Arn>:*]",
        "The custom-resource framework may invoke any version or alias of the one kubectl handler "
        "function (ARN suffix ':*'); the resource is that single function, not a wildcard over functions.",
    )


def acknowledge_log_retention(retention: IConstruct) -> None:
    """The function aws-cdk-lib's ``LogRetention`` shares across a stack (one singleton per stack)."""
    stack = Stack.of(retention)
    singleton = next(c for c in stack.node.children if c.node.id.startswith("LogRetention")
                     and c.node.try_find_child("ServiceRole") is not None)
    role = singleton.node.find_child("ServiceRole")
    _acknowledge(role, _managed_policy("service-role/AWSLambdaBasicExecutionRole"),
                 "AWS managed policy attached by aws-cdk-lib's LogRetention function to write its own Lambda logs; "
                 "it grants only CloudWatch Logs writes.")
    _acknowledge(role.node.find_child("DefaultPolicy"), f"{PACK}-IAM5[Resource::*]",
                 "aws-cdk-lib's LogRetention function calls logs:PutRetentionPolicy and logs:DeleteRetentionPolicy, "
                 "which it grants on '*': the log groups it serves (EKS's control-plane group, the CloudWatch "
                 "add-on's Container Insights groups) are created by EKS and the add-on, not by this stack, so no "
                 "ARN exists to scope it to at synth time.")


def acknowledge_gcs_redis(cache: IConstruct) -> None:
    """Findings on the Ray GCS cache (``GcsRedisCache``)."""
    _acknowledge(cache.node.find_child("Password"), f"{PACK}-SMG4",
                 "The Ray GCS cache's AUTH token. Rotating it means ElastiCache's ROTATE/SET of the replication "
                 "group, a new copy in the Kubernetes Secret and a head restart in the right order; no rotation "
                 "Lambda does that, so rotation is by redeploy with a new secret (docs/threat-model.md).")


def acknowledge_gate_signal(secret: IConstruct) -> None:
    """Findings on the secret holding the deploy gate's signal URL (``RayLlmServing.gate_signal``)."""
    _acknowledge(secret, f"{PACK}-SMG4",
                 "The wait condition handle's presigned URL: CloudFormation issues it, nothing can rotate it, and "
                 "it lives only as long as its run (each changed spec makes a new handle and a new secret).")


def acknowledge_observability(observability: IConstruct) -> None:
    """Findings on ``InferenceObservability``'s role and topic."""
    role = observability.node.find_child("AgentRole")
    _acknowledge(role, _managed_policy("CloudWatchAgentServerPolicy"),
                 "The CloudWatch Observability add-on's agent role: the AWS managed policy its documentation asks for "
                 "(CloudWatch user guide, 'Install the CloudWatch agent with the Amazon CloudWatch Observability EKS add-on').")


def acknowledge_monitor_role(role: IConstruct) -> None:
    _acknowledge(role.node.find_child("DefaultPolicy"), f"{PACK}-IAM5[Resource::*]",
                 "cloudwatch:PutMetricData supports no resource-level permissions (Service Authorization Reference, "
                 "Amazon CloudWatch: 'Resource types: none'); the cloudwatch:namespace condition keeps the role to "
                 "this deployment's own namespace, RayLlmEks/<stack>/<namespace>/<service>.")


def acknowledge_cluster_autoscaler(role: IConstruct) -> None:
    _acknowledge(role.node.find_child("DefaultPolicy"), f"{PACK}-IAM5[Resource::*]",
                 "Cluster Autoscaler's policy as its AWS README recommends: the Describe actions and "
                 "ec2:GetInstanceTypesFromInstanceRequirements support no resource-level permissions, and the two "
                 "scaling actions are limited by the condition autoscaling:ResourceTag/eks:cluster-name to the Auto "
                 "Scaling groups of this cluster's managed node groups (their names are EKS's, unknown at synth time).")
