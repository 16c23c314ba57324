"""IAM roles for pods through EKS Pod Identity, trusted only for the one service account they serve.

EKS Pod Identity calls ``sts:AssumeRole`` and ``sts:TagSession`` as ``pods.eks.amazonaws.com``
and tags the session with the pod's cluster, namespace and service account (EKS user guide,
"pod-id-abac": ``eks-cluster-arn``, ``kubernetes-namespace``, ``kubernetes-service-account``).
The trust policy requires those tags, as the EKS user guide's own example does ("Create IAM role
with trust policy required by EKS Pod Identity", "Setting Conditions": ``aws:RequestTag/
kubernetes-namespace`` and ``aws:RequestTag/kubernetes-service-account``; this adds the cluster
ARN), so the role cannot be handed to another service account,
namespace or cluster by a stray association (the issue the audit found: a trust with no source
conditions). The conditions need the session tags, so an association must not disable them.
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks, aws_iam as iam
from constructs import Construct

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_role(scope: Construct, construct_id: str, *, cluster_arn: str, namespace: str,
                      service_account: str, description: str) -> iam.Role:
    """A role that EKS Pod Identity may give to ``namespace/service_account`` of ``cluster_arn`` only."""
    principal = iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL).with_conditions({
        "StringEquals": {
            "aws:RequestTag/eks-cluster-arn": cluster_arn,
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account,
        },
    })
    # SessionTagsPrincipal adds sts:TagSession beside sts:AssumeRole, as Pod Identity needs.
    return iam.Role(scope, construct_id, description=description, assumed_by=iam.SessionTagsPrincipal(principal))


def pod_identity(scope: Construct, role_id: str, association_id: str, *, cluster: eks.ICluster, namespace: str,
                 service_account: str, description: str) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
    """:func:`pod_identity_role` and its association with ``namespace/service_account`` of ``cluster``."""
    role = pod_identity_role(scope, role_id, cluster_arn=cluster.cluster_arn, namespace=namespace,
                             service_account=service_account, description=description)
    association = eks.CfnPodIdentityAssociation(scope, association_id, cluster_name=cluster.cluster_name,
                                                namespace=namespace, service_account=service_account,
                                                role_arn=role.role_arn)
    return role, association


def associate_addon(addon: eks.Addon, role: iam.IRole, service_account: str) -> None:
    """An EKS add-on's own Pod Identity association (the L2 ``Addon`` has no prop for it; the
    association's namespace is the add-on's)."""
    cfn: eks.CfnAddon = addon.node.default_child
    cfn.pod_identity_associations = [eks.CfnAddon.PodIdentityAssociationProperty(
        role_arn=role.role_arn, service_account=service_account)]
