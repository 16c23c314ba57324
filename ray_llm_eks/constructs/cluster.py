"""The EKS cluster: ``aws_eks_v2.Cluster`` with managed node groups only.

``aws_eks_v2.Cluster`` defaults to EKS Auto Mode; this library needs managed node groups
(launch templates with EFA interfaces), so the default capacity type is NODEGROUP with no
default capacity. Anything applied through kubectl (Helm, manifests, cdk8s) runs in a kubectl
Lambda whose layer minor must match the cluster: ``KubectlV35Layer`` for Kubernetes 1.35.
"""

from __future__ import annotations

from typing import Mapping, Sequence, Union

from aws_cdk import Fn, aws_ec2 as ec2, aws_eks_v2 as eks, aws_iam as iam, aws_logs as logs
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct

from ..base import infrastructure as infra
from ..base.errors import problem
from .identity import associate_addon, pod_identity_role
from .nag import acknowledge_cluster, acknowledge_cni_role, acknowledge_log_retention
from .validation import validated

KUBERNETES_VERSIONS = {"1.35": eks.KubernetesVersion.V1_35}

LOG_TYPES = {
    "api": eks.ClusterLoggingTypes.API,
    "audit": eks.ClusterLoggingTypes.AUDIT,
    "authenticator": eks.ClusterLoggingTypes.AUTHENTICATOR,
    "controllerManager": eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    "scheduler": eks.ClusterLoggingTypes.SCHEDULER,
}
ENDPOINT_ACCESS = {
    "public-and-private": eks.EndpointAccess.PUBLIC_AND_PRIVATE,
    "private": eks.EndpointAccess.PRIVATE,
}

# Installed before any node joins: a node is NotReady until the VPC CNI runs on it.
NETWORKING_ADDONS = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
# CoreDNS is a Deployment: it reports healthy only once a node can run it.
DNS_ADDON = "coredns"
VPC_CNI_NAMESPACE, VPC_CNI_SERVICE_ACCOUNT = "kube-system", "aws-node"
VPC_CNI_POLICY = "AmazonEKS_CNI_Policy"
NETWORK_POLICY_ENFORCING_MODE = "strict"
ADDON_CONFIGURATION = {
    # The VPC CNI enforces NetworkPolicy only when asked (its network policy agent, the second
    # container of aws-node; add-on v1.14.0-eksbuild.3 or later, EKS user guide
    # "cni-network-policy-configure"). The value is the string "true".
    # Strict mode (aws-node's NETWORK_POLICY_ENFORCING_MODE, VPC CNI 1.17.1+; the name and its
    # default "standard" are in amazon-vpc-cni-k8s pkg/ipamd/ipamd.go): a new pod starts denied,
    # ingress and egress, until the node agent has programmed the policies that select it (at
    # once when the agent already holds them, as for a replica; else when the controller has
    # reconciled them: aws-network-policy-agent PR #209). In standard mode it starts open until
    # then, so a new Ray pod would be reachable on 8265 for those seconds. Strict mode also
    # denies every pod that no policy ever selects: only host-network pods (aws-node,
    # kube-proxy, the Pod Identity agent) are exempt (amazon-vpc-cni-k8s README,
    # NETWORK_POLICY_ENFORCING_MODE). So each namespace this library puts other pods in carries a
    # policy: the serving namespace its own (serving-network-policy), and kube-system, the
    # operator's and the CloudWatch agent's namespaces one that admits everything
    # (:func:`open_namespace`), as open as standard mode left them, but policed from a pod's start.
    "vpc-cni": {"enableNetworkPolicy": "true", "env": {"NETWORK_POLICY_ENFORCING_MODE": NETWORK_POLICY_ENFORCING_MODE}},
}
OPEN_NAMESPACE_POLICY = "ray-llm-eks-open-namespace"


def open_namespace(scope: Construct, construct_id: str, *, cluster: eks.ICluster, namespace: str,
                   create_namespace: bool) -> eks.KubernetesManifest:
    """A NetworkPolicy admitting all traffic to and from every pod of ``namespace`` (and, with
    ``create_namespace``, the namespace itself, so the policy is there before its first pod).

    Under the VPC CNI's strict mode a pod no policy selects can reach nothing and be reached by
    nothing: a namespace of system components (CoreDNS, the device plugins, Cluster Autoscaler,
    the KubeRay operator, the CloudWatch agent) keeps working with this. Harmless in standard
    mode, where such a namespace is open anyway."""
    return eks.KubernetesManifest(scope, construct_id, cluster=cluster,
                                  manifest=open_namespace_objects(namespace, create_namespace=create_namespace))


def open_namespace_objects(namespace: str, *, create_namespace: bool) -> list[dict]:
    """The objects :func:`open_namespace` applies (what a GitOps tool applies in its place)."""
    objects: list[dict] = []
    if create_namespace:
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    objects.append({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": OPEN_NAMESPACE_POLICY, "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}], "egress": [{}]},
    })
    return objects


class InferenceCluster(Construct):
    """An EKS cluster ready for managed node groups, with the core add-ons as EKS managed add-ons.

    Default settings:
    - Kubernetes 1.35 and the matching kubectl layer (``aws-cdk.lambda-layer-kubectl-v35``).
    - No Auto Mode, no default capacity: node groups are added by ``SystemNodeGroup`` and
      ``EfaGpuNodeGroup``.
    - Control-plane logs: api, audit, authenticator, kept 90 days (``control_plane_log_retention_days``;
      EKS's own log group never expires).
    - Endpoint: private, reachable from the VPC only (the kubectl handler runs in the VPC's private
      subnets); ``public-and-private`` opens a public side to ``public_access_cidrs``, never to
      ``0.0.0.0/0``. The project's nag rule ``RayLlmEks-EKS1`` checks the template for it.
    - ``bootstrap_cluster_creator_admin_permissions`` False: the CloudFormation execution role
      does not become cluster admin (changing it later replaces the cluster).
    - Managed add-ons vpc-cni (with NetworkPolicy enforcement on, in strict mode: see
      ``ADDON_CONFIGURATION``; kube-system gets a policy admitting all, ``open_namespace``), kube-proxy,
      eks-pod-identity-agent and coredns, each at ``addon_versions[name]`` when given (EKS's
      ``AddonVersion``), else at EKS's default for the cluster's Kubernetes version on the day
      the add-on is created. EKS does not also install its
      self-managed copies (``bootstrap_self_managed_addons=False``), so exactly one owner
      manages each.
    - An optional admin IAM role granted cluster admin through an access entry.

    - The VPC CNI on its own role (``AmazonEKS_CNI_Policy``, EKS Pod Identity on
      ``kube-system/aws-node``, trusted for that service account of this cluster only), so node
      groups of this cluster carry no CNI permissions.

    Public attributes: ``cluster`` (the ``aws_eks_v2.Cluster``), ``addons`` (name -> Addon),
    ``vpc_cni_role``, ``admin_access_entry``, ``kube_system_policy``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        kubernetes_version: str = infra.DEFAULT_KUBERNETES_VERSION,
        cluster_name: str | None = None,
        endpoint_access: str = infra.DEFAULT_ENDPOINT_ACCESS,
        public_access_cidrs: Sequence[str] = infra.DEFAULT_PUBLIC_ACCESS_CIDRS,
        control_plane_logs: Sequence[str] = infra.DEFAULT_CONTROL_PLANE_LOGS,
        admin_role_arn: str | None = None,
        bootstrap_cluster_creator_admin_permissions: bool = infra.DEFAULT_BOOTSTRAP_CLUSTER_CREATOR_ADMIN,
        control_plane_log_retention_days: int = infra.DEFAULT_CONTROL_PLANE_LOG_RETENTION_DAYS,
        addon_versions: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        validated(self, infra.kubernetes_version, kubernetes_version, "kubernetes_version")
        validated(self, infra.cluster_name, cluster_name, "cluster_name")
        validated(self, infra.endpoint_access, endpoint_access, "endpoint_access")
        validated(self, infra.public_access_cidrs, public_access_cidrs, endpoint_access, "public_access_cidrs")
        validated(self, infra.control_plane_logs, control_plane_logs, "control_plane_logs")
        validated(self, infra.admin_role_arn, admin_role_arn, "admin_role_arn")
        validated(self, infra.retention_days, control_plane_log_retention_days, "control_plane_log_retention_days")
        self.addon_versions = dict(addon_versions or {})
        for name, version in self.addon_versions.items():
            if name not in infra.CORE_ADDONS:
                validated(self, _unknown_addon, name, "addon_versions")
            check = infra.vpc_cni_version if name == "vpc-cni" else infra.addon_version
            validated(self, check, version, f"addon_versions.{name}")
        access = ENDPOINT_ACCESS[endpoint_access]
        if endpoint_access == "public-and-private":
            access = access.only_from(*public_access_cidrs)
        self.control_plane_logs = tuple(control_plane_logs)

        self.cluster = eks.Cluster(
            self,
            "Cluster",
            version=KUBERNETES_VERSIONS[kubernetes_version],
            cluster_name=cluster_name,
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            bootstrap_self_managed_addons=False,
            bootstrap_cluster_creator_admin_permissions=bootstrap_cluster_creator_admin_permissions,
            endpoint_access=access,
            cluster_logging=[LOG_TYPES[t] for t in control_plane_logs],
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=KubectlV35Layer(self, "KubectlLayer"),
            ),
        )
        without_ecr_read(self.cluster)
        acknowledge_cluster(self.cluster)
        self.control_plane_log_retention: logs.LogRetention | None = None
        if control_plane_logs:
            # EKS creates /aws/eks/<name>/cluster itself, without retention, when the cluster starts
            # logging; a LogGroup resource of that name would collide with it (and, on a stack
            # deployed before, with the group that exists), so aws-cdk-lib's LogRetention custom
            # resource sets the retention on whichever group is there, creating it if need be.
            self.control_plane_log_retention = logs.LogRetention(
                self, "ControlPlaneLogRetention",
                log_group_name=Fn.join("", ["/aws/eks/", self.cluster.cluster_name, "/cluster"]),
                retention=logs.RetentionDays.ONE_MONTH)
            # The custom resource takes the number of days; the enum would need a table kept in
            # step with infra.CLOUDWATCH_RETENTION_DAYS.
            retention_resource = self.control_plane_log_retention.node.default_child
            retention_resource.add_property_override("RetentionInDays", control_plane_log_retention_days)
            acknowledge_log_retention(self.control_plane_log_retention)
        self.addons: dict[str, eks.Addon] = {
            name: eks.Addon(self, f"Addon-{name}", cluster=self.cluster, addon_name=name,
                            addon_version=self.addon_versions.get(name),
                            configuration_values=ADDON_CONFIGURATION.get(name))
            for name in (*NETWORKING_ADDONS, DNS_ADDON)
        }
        # Strict mode: CoreDNS (and every other non-host-network pod of kube-system) needs a policy
        # that selects it, there before it starts (ADDON_CONFIGURATION).
        self.kube_system_policy = open_namespace(self, "KubeSystemNetworkPolicy", cluster=self.cluster,
                                                 namespace="kube-system", create_namespace=False)
        self.addons[DNS_ADDON].node.add_dependency(self.kube_system_policy)
        # The VPC CNI on a role of its own, not the node role (EKS user guide, "cni-iam-role"):
        # the add-on's Pod Identity association on kube-system/aws-node. The node groups of this
        # cluster then leave AmazonEKS_CNI_Policy off their roles.
        self.vpc_cni_role = pod_identity_role(
            self, "VpcCniRole", cluster_arn=self.cluster.cluster_arn, namespace=VPC_CNI_NAMESPACE,
            service_account=VPC_CNI_SERVICE_ACCOUNT, description="Amazon VPC CNI (kube-system/aws-node) via EKS Pod Identity")
        self.vpc_cni_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(VPC_CNI_POLICY))
        acknowledge_cni_role(self.vpc_cni_role, VPC_CNI_POLICY)
        associate_addon(self.addons["vpc-cni"], self.vpc_cni_role, VPC_CNI_SERVICE_ACCOUNT)
        self.admin_access_entry: eks.AccessEntry | None = None
        if admin_role_arn:
            self.admin_access_entry = self.cluster.grant_cluster_admin("AdminAccess", admin_role_arn)

    @property
    def networking_addons(self) -> list[eks.Addon]:
        """The add-ons a node needs before it can become Ready."""
        return [self.addons[name] for name in NETWORKING_ADDONS]

    @property
    def dns_addon(self) -> eks.Addon:
        return self.addons[DNS_ADDON]


def without_ecr_read(cluster: eks.Cluster) -> None:
    """Take ECR read off aws-cdk-lib's kubectl handler, which is cluster-admin.

    aws-cdk-lib 2.275 gives the handler's role AmazonEC2ContainerRegistryReadOnly (every private
    repository in the account) and, where ECR Public exists, AmazonElasticContainerRegistryPublicReadOnly
    (aws-eks-v2/lib/kubectl-provider.js, ``KubectlProvider``), for Helm charts stored as OCI
    artifacts. Every chart this library installs comes from an HTTPS chart repository
    (``constructs/addons.py``, ``constructs/autoscaler.py``), and the handler pulls no image,
    so it keeps only its two Lambda execution policies. A stack that adds an ``oci://`` chart
    grants the handler read on that one repository itself (docs/threat-model.md, Supply chain).
    """
    handler = cluster.node.find_child("KubectlProvider").node.find_child("Handler")
    role = handler.node.find_child("ServiceRole").node.default_child
    # The L1 property itself (not a raw override), so cdk-nag and the template see the same list.
    role.managed_policy_arns = [iam.ManagedPolicy.from_aws_managed_policy_name(f"service-role/{name}").managed_policy_arn
                                for name in KUBECTL_HANDLER_POLICIES]
    handler.node.try_remove_child("HasEcrPublic")  # the condition only chose the ECR Public policy


KUBECTL_HANDLER_POLICIES = ("AWSLambdaBasicExecutionRole", "AWSLambdaVPCAccessExecutionRole")
"""What aws-cdk-lib's kubectl handler keeps: its logs, and its ENIs in the VPC (to reach a
private endpoint)."""


def _unknown_addon(name: str, field: str) -> None:
    raise problem(field, name, "not an add-on this construct installs", ", ".join(infra.CORE_ADDONS))


ClusterLike = Union[InferenceCluster, eks.ICluster]
"""What every construct of the library accepts as ``cluster``: an ``InferenceCluster`` (then node
groups also order themselves after its add-ons) or any ``aws_eks_v2`` cluster."""


def eks_cluster_of(cluster: ClusterLike) -> eks.ICluster:
    return cluster.cluster if isinstance(cluster, InferenceCluster) else cluster
