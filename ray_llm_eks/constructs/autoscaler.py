"""Cluster Autoscaler for the GPU node groups, on its own EKS Pod Identity role.

Why Cluster Autoscaler and not Karpenter: the GPU capacity here is EKS managed node groups on a
launch template that sets the EFA interface and the cluster placement group, in the data-plane
AZ's one subnet. Cluster Autoscaler scales exactly those Auto Scaling groups (it only calls
``SetDesiredCapacity`` and ``TerminateInstanceInAutoScalingGroup``), so every node it adds has
the launch template's EFA interface, joins the same placement group and subnet, and carries the
node group's labels and taints. Karpenter launches instances from its own ``EC2NodeClass``
instead; its EFA interface layout and placement groups (``networkInterfaces``,
``placementGroupSelector``) arrived only in v1.11.0 (aws/karpenter-provider-aws #9027, #9030,
April 2026), and adopting it would re-implement the fabric this library already tests.

Scale from zero needs Cluster Autoscaler to know what a node of an empty group would offer
(cluster-autoscaler ``cloudprovider/aws/README.md``, v1.35.2): ``nvidia.com/gpu`` it infers from
the instance type (``ec2:DescribeInstanceTypes``); labels and taints it reads from the node group
(``eks:DescribeNodegroup``, since 1.24); ``vpc.amazonaws.com/efa`` it cannot infer, so each
autoscaled node group carries the tag ``k8s.io/cluster-autoscaler/node-template/resources/
vpc.amazonaws.com/efa``, which Cluster Autoscaler reads from the node group's own tags (since
1.28, PR #5596; node group tags do not reach the Auto Scaling group, EKS user guide). EKS tags
managed node groups' Auto Scaling groups for auto-discovery itself.
"""

from __future__ import annotations

from aws_cdk import Stack, aws_iam as iam
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ..base import scaling
from ..base.infrastructure import KubernetesOwner
from ..base.placement import SYSTEM_LABELS
from .addons import HELM_WAIT_MINUTES, HelmValues, merge_helm_values
from .cluster import ClusterLike, eks_cluster_of
from .identity import pod_identity
from .kubernetes_side import HelmRelease, ObjectSet, kubernetes_owner_of
from .nag import acknowledge_cluster_autoscaler
from .nodegroups import SystemNodeGroup
from .validation import validated

REPOSITORY = "https://kubernetes.github.io/autoscaler"
CHART = "cluster-autoscaler"
DEFAULT_CHART_VERSION = "9.59.0"
"""kubernetes/autoscaler tag ``cluster-autoscaler-chart-9.59.0`` (2026-07-21), the newest chart;
its ``appVersion`` is 1.35.0, the Cluster Autoscaler minor that matches Kubernetes 1.35 (the
project versions it with the Kubernetes minor and advises the newest patch)."""
DEFAULT_IMAGE_TAG = "v1.35.0"
"""The chart's own image (``registry.k8s.io/autoscaling/cluster-autoscaler``); 1.35.2
(2026-07-22) is tagged in git, but its image was not confirmed here."""
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
DESCRIBE_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
    "ec2:DescribeImages", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements", "eks:DescribeNodegroup",
)
"""The README's "Full Cluster Autoscaler Features Policy (Recommended)", first statement; these
support no resource-level permissions."""
SCALING_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")
"""The README's second statement, which it advises to restrict: here to the Auto Scaling groups
EKS tags ``eks:cluster-name`` with this cluster's name (its managed node groups')."""
EXTRA_ARGS = {
    # Stated rather than left to the chart, because the scaling timeline (docs/scaling.md) rests on them.
    "scale-down-unneeded-time": "10m",
    "scale-down-delay-after-add": "10m",
    "max-node-provision-time": "15m",
    "expander": "least-waste",
    # Prefill and decode groups look alike (same type, same sizes) but serve different legs.
    "balance-similar-node-groups": "false",
}


class NodeAutoscaler(Construct):
    """Cluster Autoscaler (Helm chart ``cluster-autoscaler``) for ``cluster``'s managed node groups.

    Default settings: chart 9.59.0 with image v1.35.0 in ``kube-system``, on the system node,
    requests 100m CPU and 600 MiB (``spec.scaling.CLUSTER_AUTOSCALER``, counted in the system
    node's budget), auto-discovery of this cluster's managed node groups, the flags in
    :data:`EXTRA_ARGS`, and an EKS Pod Identity role allowed to resize only Auto Scaling groups
    tagged ``eks:cluster-name`` = the cluster's name.

    A node group is scaled only between its own ``min_size`` and ``max_size``: fixed groups
    (``min_size == max_size``, the system node's) are discovered but never changed.

    ``values``: your Helm values, deep-merged over the library's
    (:func:`~ray_llm_eks.constructs.addons.merge_helm_values`: mappings merge, anything else
    replaces, yours win; ``extraArgs`` is a mapping, so a flag of yours is added or replaces
    one). Default: none. The library sets (chart 9.59.0 ``values.yaml`` keys):

    - ``cloudProvider: aws`` and ``awsRegion``: the stack's region (the chart's default region
      is ``us-east-1``).
    - ``autoDiscovery.clusterName``: the cluster's name; the chart turns it into
      ``--node-group-auto-discovery`` on the ``k8s.io/cluster-autoscaler/enabled`` and
      ``k8s.io/cluster-autoscaler/<name>`` tags, which EKS puts on managed node groups' Auto
      Scaling groups.
    - ``image.tag``: ``image_tag``; ``rbac.serviceAccount``: ``create: true``, name
      ``cluster-autoscaler``, the service account the Pod Identity association names.
    - ``extraArgs``: :data:`EXTRA_ARGS`; ``resources``: ``spec.scaling.CLUSTER_AUTOSCALER``
      (requests = limits, counted in the system node's budget); ``nodeSelector``: the system
      node's labels.

    Refused in ``values``: ``autoDiscovery.clusterName`` (the role may resize only this cluster's
    groups) and ``rbac.serviceAccount.name`` (the Pod Identity association names the account):
    either would install an autoscaler without the permissions it needs.

    ``kubernetes_owner``: ``cdk`` (default) installs the chart; ``gitops`` keeps the role and its
    Pod Identity association (AWS side) and leaves the chart to a GitOps tool (``gitops_parts``).

    Public attributes: ``role``, ``association``, ``chart`` (None with ``gitops``), ``values``
    (what the chart is installed with), ``release`` (the chart as a :class:`HelmRelease`), ``gitops_parts``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, cluster: ClusterLike,
                 system_nodes: SystemNodeGroup | None = None, chart_version: str = DEFAULT_CHART_VERSION,
                 image_tag: str = DEFAULT_IMAGE_TAG, values: HelmValues | None = None,
                 kubernetes_owner: KubernetesOwner | str = KubernetesOwner.cdk) -> None:
        super().__init__(scope, construct_id)
        self.kubernetes_owner = kubernetes_owner_of(self, kubernetes_owner)
        target = eks_cluster_of(cluster)
        self.role, self.association = pod_identity(
            self, "Role", "PodIdentity", cluster=target, namespace=NAMESPACE, service_account=SERVICE_ACCOUNT,
            description=f"Cluster Autoscaler ({NAMESPACE}/{SERVICE_ACCOUNT}) via EKS Pod Identity")
        self.role.add_to_policy(iam.PolicyStatement(actions=list(DESCRIBE_ACTIONS), resources=["*"]))
        self.role.add_to_policy(iam.PolicyStatement(
            actions=list(SCALING_ACTIONS), resources=["*"],
            conditions={"StringEquals": {"autoscaling:ResourceTag/eks:cluster-name": target.cluster_name}}))
        library = {
            "cloudProvider": "aws",
            "awsRegion": Stack.of(self).region,
            "autoDiscovery": {"clusterName": target.cluster_name},
            "image": {"tag": image_tag},
            "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
            "extraArgs": dict(EXTRA_ARGS),
            "resources": scaling.CLUSTER_AUTOSCALER.guaranteed_json(),
            "nodeSelector": dict(system_nodes.labels if system_nodes is not None else SYSTEM_LABELS),
        }
        self.values = validated(self, merge_helm_values, library, values, "values", {
            "autoDiscovery.clusterName": "the construct: the role may resize only this cluster's node groups",
            "rbac.serviceAccount.name": f"the construct: the Pod Identity association names {NAMESPACE}/{SERVICE_ACCOUNT}",
        })
        self.release = HelmRelease(release=CHART, chart=CHART, repository=REPOSITORY, version=chart_version,
                                   namespace=NAMESPACE, values=self.values, wait=True, timeout_minutes=HELM_WAIT_MINUTES)
        self.chart: eks.HelmChart | None = None
        if self.kubernetes_owner is KubernetesOwner.cdk:
            self.chart = self.release.install(self, "Chart", target)
            # Credentials before the pod starts; a node to run it on.
            self.chart.node.add_dependency(self.association)
            if system_nodes is not None:
                self.chart.node.add_dependency(system_nodes.nodegroup)
        acknowledge_cluster_autoscaler(self.role)

    @property
    def gitops_parts(self) -> list[HelmRelease | ObjectSet]:
        """What a GitOps tool applies in this construct's place (``ray_llm_eks.gitops``)."""
        return [self.release]
