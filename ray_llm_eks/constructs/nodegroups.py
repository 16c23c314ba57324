"""Managed node groups: one CPU system node, and EFA GPU nodes for prefill and decode.

Facts (eksctl ``efaEnabled``: ``buildNetworkInterfaces``, ``pkg/cfn/builder/network_interfaces.go:28``@v0.230.0;
terraform-aws-eks ``enable_efa_support``; the EKS user guide pages named below):
- EFA needs launch template network interfaces (``InstanceType.network_interfaces``): on a
  single-card type (g6.8xlarge, g6e.12xlarge) one ``efa`` interface at card 0 device 0, as eksctl's
  ``efaEnabled`` renders it; on a multi-card type (g6e.24xlarge/48xlarge, p4d, p5) the EC2 guide's
  layout, the primary ENA interface at card 0 device 0, then an ``efa-only`` interface at card 0
  device 1 and at device 0 of every further card. Security groups go
  in each interface's ``Groups``, no ``SubnetId`` (EKS places the node in the node group's subnet:
  "Do not specify SubnetId in the launch template when using EKS managed node groups", EKS user
  guide device-management-efa) and no top-level ``SecurityGroupIds``. EFA-only interfaces need
  VPC CNI v1.18.5 or later (EKS user guide, node-efa).
- A launch template that names any security group stops EKS from attaching the cluster security
  group ("Amazon EKS doesn't add the cluster security group", EKS user guide
  ``latest/ug/nodes/launch-templates.adoc:105``@4d52b4d0), so the interface carries both the
  cluster security group and the EFA security group.
- The EFA security group allows all traffic in from and out to itself (terraform-aws-eks's "Node to
  node EFA" rules: protocol -1, self): EFA's SRD transport is not IP, so CIDR rules do not admit it.
- With a launch template the root volume is sized in its block-device mappings, not ``disk_size``
  ("You must specify this in the launch template", ``launch-templates.adoc:74``@4d52b4d0).
- AMI ``AL2023_x86_64_NVIDIA`` ships the NVIDIA driver, container toolkit and the EFA kernel
  module, but neither device plugin (see ``addons.GpuDevicePlugins``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, cast

from aws_cdk import Stack, Tags, Token, aws_ec2 as ec2, aws_eks_v2 as eks, aws_iam as iam
from constructs import Construct

from ..base import infrastructure as infra
from ..base.errors import SpecError, SpecErrors, problem
from ..base.placement import Taint
from ..base.scaling import node_template_tags
from ..base.wire import LABEL_PREFIX
from ..base.pools import Capacity, RootVolume, SystemPool, WorkerPool
from .cluster import ClusterLike, InferenceCluster, eks_cluster_of
from .nag import acknowledge_node_role
from .validation import ConstructValidationError, part_or_props, validated

ROLE_TAG = f"{LABEL_PREFIX}role"
"""The AWS tag naming a node group's role (prefill, decode, system) on everything it makes."""

ROOT_DEVICE_NAME = "/dev/xvda"  # AL2023 EKS-optimized AMIs boot from /dev/xvda.

# EKS managed policies every worker node role needs. Image pulls use the narrower PullOnly
# policy (pull, no listing or describing of repositories) instead of ReadOnly.
NODE_MANAGED_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryPullOnly",
)
CNI_POLICY = "AmazonEKS_CNI_Policy"
"""Needed on the node role only when the VPC CNI has no role of its own. ``InferenceCluster``
gives it one (EKS Pod Identity on ``kube-system/aws-node``), so its nodes go without: a process
that reaches the node role can no longer attach ENIs or assign addresses."""

InstanceTypeLike = str | ec2.InstanceType
"""An instance type by name (``"g6.8xlarge"``) or as ``ec2.InstanceType("g6.8xlarge")``."""

CapacityTypeLike = eks.CapacityType | str
"""``eks.CapacityType.SPOT``, or its name (``"SPOT"``)."""

DEFAULT_CAPACITY_TYPE = eks.CapacityType.ON_DEMAND
"""EKS's own default: the node group's ``CapacityType`` is left out of the template for it, so a
stack synthesized before this prop existed is unchanged (``CapacityType`` replaces a node group)."""
MAX_UNAVAILABLE_LIMIT = 100
"""The EKS API's bounds for ``UpdateConfig`` (``maxUnavailable`` 1 to 100 nodes,
``maxUnavailablePercentage`` 1 to 100), which ``aws_eks_v2.Nodegroup`` checks as well."""
_RELEASE_VERSION = re.compile(r"^(?P<kubernetes>\d+\.\d+)\.\d+-\d{8}$")
"""An EKS-optimized AMI release for a managed node group: ``<Kubernetes major.minor.patch>-<YYYYMMDD>``
(amazon-eks-ami release notes; ``aws eks describe-nodegroup`` prints it as ``releaseVersion``)."""


def node_group_options(
    *,
    capacity_type: CapacityTypeLike,
    capacity: Capacity | None = None,
    max_unavailable: int | None,
    max_unavailable_percentage: int | None,
    release_version: str | None,
    max_size: int,
    kubernetes_version: str | None,
) -> dict[str, Any]:
    """The ``aws_eks_v2.Nodegroup`` keyword props these options set, defaults left out.

    Raises ``SpecErrors`` with every problem found. ``kubernetes_version`` is the cluster's when
    known (an ``InferenceCluster`` or ``aws_eks_v2.Cluster``), so a release of another minor is
    refused here rather than by EKS mid-deploy. ``capacity``: the pool's; a Capacity Block makes the
    capacity type ``CAPACITY_BLOCK`` (EKS rejects any other for it), an ODCR refuses ``SPOT``.
    """
    errors: list[SpecError] = []
    options: dict[str, Any] = {}
    names = [member.name for member in eks.CapacityType]
    if isinstance(capacity_type, str) and capacity_type in names:
        capacity_type = eks.CapacityType[capacity_type]
    if not isinstance(capacity_type, eks.CapacityType):
        errors.append(problem("capacity_type", capacity_type, "not an EKS capacity type",
                              "eks.CapacityType.ON_DEMAND or eks.CapacityType.SPOT (or their names)"))
    elif capacity is not None and capacity.capacity_block:
        # EKS user guide, capacity-blocks-mng: "capacity type ... CAPACITY_BLOCK", or the create
        # request is rejected. ON_DEMAND is also the prop's default, so it stands for "not given".
        if capacity_type not in (DEFAULT_CAPACITY_TYPE, eks.CapacityType.CAPACITY_BLOCK):
            errors.append(problem("capacity_type", capacity_type.name, "a Capacity Block's nodes are neither "
                                  "On-Demand nor Spot: EKS requires capacity type CAPACITY_BLOCK for them",
                                  "CAPACITY_BLOCK, or leave capacity_type unset"))
        else:
            options["capacity_type"] = eks.CapacityType.CAPACITY_BLOCK
    elif capacity_type is eks.CapacityType.CAPACITY_BLOCK:
        errors.append(problem(
            "capacity_type", capacity_type.name,
            "a Capacity Block node group needs its launch template to target the reservation "
            "(InstanceMarketOptions MarketType capacity-block, CapacityReservationSpecification with the "
            "reservation's ID; EKS user guide, capacity-blocks-mng)",
            "ON_DEMAND or SPOT, or capacity=Capacity(type='capacity-block', reservation_id=..., hourly_rate_usd=...)"))
    elif capacity is not None and capacity.reserved and capacity_type is eks.CapacityType.SPOT:
        errors.append(problem("capacity_type", capacity_type.name, "an On-Demand Capacity Reservation holds "
                              "On-Demand capacity: Spot Instances do not launch into it", "ON_DEMAND"))
    elif capacity_type is not DEFAULT_CAPACITY_TYPE:
        options["capacity_type"] = capacity_type
    if max_unavailable is not None and max_unavailable_percentage is not None:
        errors.append(problem("max_unavailable", max_unavailable,
                              "give max_unavailable or max_unavailable_percentage, not both",
                              f"one of them (max_unavailable_percentage is {max_unavailable_percentage})"))
    for field, value, bound in (("max_unavailable", max_unavailable, min(max_size, MAX_UNAVAILABLE_LIMIT)),
                                ("max_unavailable_percentage", max_unavailable_percentage, MAX_UNAVAILABLE_LIMIT)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
            why = ("nodes EKS may take down at once in an update, at most max_size"
                   if field == "max_unavailable" else "percent of the nodes EKS may take down at once in an update")
            errors.append(problem(field, value, why, f"a whole number from 1 to {bound}"))
        else:
            options[field] = value
    if release_version is not None:
        # A token (an SSM parameter, say) is taken as given: its value is known only at deploy time.
        match = (None if Token.is_unresolved(release_version) or not isinstance(release_version, str)
                 else _RELEASE_VERSION.match(release_version))
        if match is None and not Token.is_unresolved(release_version):
            errors.append(problem("release_version", release_version, "not an EKS-optimized AMI release version",
                                  "<kubernetes version>-<YYYYMMDD>, as `aws eks describe-nodegroup` prints releaseVersion"))
        elif match is not None and kubernetes_version is not None and match["kubernetes"] != kubernetes_version:
            errors.append(problem("release_version", release_version,
                                  f"an AMI release for Kubernetes {match['kubernetes']}, but the cluster runs "
                                  f"{kubernetes_version}", f"a {kubernetes_version}.x release"))
        else:
            options["release_version"] = release_version
    if errors:
        raise SpecErrors(errors)
    return options


def make_node_role(scope: Construct, construct_id: str, *, cni_policy: bool = True) -> iam.Role:
    """An EC2 role for EKS worker nodes with exactly the managed policies EKS requires.

    ``cni_policy=False`` leaves out ``AmazonEKS_CNI_Policy``, for a cluster whose VPC CNI has its
    own role (``InferenceCluster`` does; the node groups pass the right value themselves).

    The Ray LLM image lives in ECR in the AWS Deep Learning Containers account 763104351884;
    ``AmazonEC2ContainerRegistryPullOnly`` covers pulls from it as from your own account.
    Workloads never use this role: IMDS hop limit 1 keeps pods off it, and they get AWS access
    through EKS Pod Identity.
    """
    policies = NODE_MANAGED_POLICIES + ((CNI_POLICY,) if cni_policy else ())
    role = iam.Role(
        scope,
        construct_id,
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in policies],
    )
    acknowledge_node_role(role, policies)
    return role


def _node_role_for(scope: Construct, cluster: ClusterLike) -> iam.Role:
    # The CNI policy stays on the node role for a cluster this library did not make: its VPC CNI
    # may have no role of its own, and nodes without the policy would never get pod addresses.
    own_cni_role = isinstance(cluster, InferenceCluster)
    role = make_node_role(scope, "NodeRole", cni_policy=not own_cni_role)
    if own_cni_role:
        # On a stack deployed before the VPC CNI had its own role, this deploy both gives the
        # add-on its Pod Identity association and takes the CNI policy off the node roles. The
        # role waits for the add-on, so running nodes never lose the CNI's permissions before
        # aws-node has its own (EKS user guide, "cni-iam-role": configure the role first, then
        # remove the policy from the node role).
        role.node.add_dependency(cluster.addons["vpc-cni"])
    return role


def _kubernetes_version(cluster: eks.ICluster) -> str | None:
    """The cluster's Kubernetes minor when this app defines the cluster (its ``CfnCluster``), else None."""
    resource = cluster.node.default_child if isinstance(cluster, eks.Cluster) else None
    version = resource.version if isinstance(resource, eks.CfnCluster) else None
    return version if isinstance(version, str) and not Token.is_unresolved(version) else None


def _eks_taint(taint: Taint) -> eks.TaintSpec:
    effects = {"NoSchedule": eks.TaintEffect.NO_SCHEDULE, "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
               "NoExecute": eks.TaintEffect.NO_EXECUTE}
    return eks.TaintSpec(effect=effects[taint.effect], key=taint.key, value=taint.value)


def _managed_nodegroup(
    scope: Construct,
    *,
    cluster: ClusterLike,
    ami_type: eks.NodegroupAmiType,
    instance_type: str | None,
    sizes: tuple[int, int, int],
    subnet: ec2.ISubnet,
    labels: dict[str, str],
    role: iam.IRole,
    launch_template: ec2.CfnLaunchTemplate,
    taints: list[eks.TaintSpec] | None = None,
    options: Mapping[str, Any] | None = None,
) -> eks.Nodegroup:
    """A managed node group on a launch template, in exactly one subnet.

    Given an ``InferenceCluster``, the node group waits for its networking add-ons: a node is
    NotReady until the VPC CNI runs on it. ``options``: more ``aws_eks_v2.Nodegroup`` props
    (:func:`node_group_options`). ``instance_type`` None: the launch template names it (EKS API,
    CreateNodegroup ``instanceTypes``: "if you specify an instance type in your launch template and
    specify any instanceTypes, the node group deployment will fail").
    """
    min_size, desired_size, max_size = sizes
    nodegroup = eks.Nodegroup(
        scope,
        "Nodegroup",
        cluster=eks_cluster_of(cluster),
        ami_type=ami_type,
        min_size=min_size,
        desired_size=desired_size,
        max_size=max_size,
        subnets=ec2.SubnetSelection(subnets=[subnet]),
        labels=dict(labels),
        taints=taints,
        node_role=role,
        launch_template_spec=eks.LaunchTemplateSpec(
            id=launch_template.ref, version=launch_template.attr_latest_version_number
        ),
        **dict(options or {}),
    )
    # The node group's InstanceTypes, written on the resource itself rather than through the L2's
    # ``instance_types``: aws-cdk-lib 2.275.0 checks the AMI type against its own list of GPU
    # classes (aws-eks-v2/lib/private/nodegroup.js ``isGpuInstanceType``: P2, P3, P3DN, P4D, P4DE,
    # G3, G3S, G4DN, G4AD, G5, G5G, G6, G6E, INF1, INF2), which lacks P5, P5E and P5EN, so it
    # refuses AL2023_x86_64_NVIDIA for p5.48xlarge. The template is what the L2 writes for the
    # types it knows; which AMI fits which type is checked here instead (``ray_llm_eks.base.pools``).
    if instance_type is not None:
        resource = cast(eks.CfnNodegroup, nodegroup.node.default_child)
        resource.instance_types = [ec2.InstanceType(instance_type).to_string()]
    if isinstance(cluster, InferenceCluster):
        for addon in cluster.networking_addons:
            nodegroup.node.add_dependency(addon)
    return nodegroup


def _metadata_options() -> ec2.CfnLaunchTemplate.MetadataOptionsProperty:
    # IMDSv2 only, hop limit 1: a container (one hop further) cannot reach the node role.
    return ec2.CfnLaunchTemplate.MetadataOptionsProperty(
        http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
    )


def _capacity_launch_data(capacity: Capacity, instance_type: str) -> dict[str, Any]:
    """The launch-template fields that put a node into its reservation (none for On-Demand).

    - Capacity Block (EKS user guide, capacity-blocks-mng): ``InstanceMarketOptions.MarketType
      capacity-block``, ``CapacityReservationTarget.CapacityReservationId``, and the ``InstanceType``
      in the launch template (so the node group names none; eksctl does the same,
      managed_nodegroup.go).
    - ODCR: ``CapacityReservationTarget`` (ID or resource group ARN) or ``CapacityReservationPreference``.
    """
    if not capacity.reserved:
        return {}
    target = None
    if capacity.reservation_id is not None or capacity.resource_group_arn is not None:
        target = ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
            capacity_reservation_id=capacity.reservation_id,
            capacity_reservation_resource_group_arn=capacity.resource_group_arn)
    data: dict[str, Any] = {"capacity_reservation_specification": ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
        capacity_reservation_target=target, capacity_reservation_preference=capacity.preference)}
    if capacity.capacity_block:
        data["instance_market_options"] = ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
        data["instance_type"] = instance_type
    return data


def _gp3_root(size_gib: int, throughput_mibps: int | None = None, iops: int | None = None):
    return ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
        device_name=ROOT_DEVICE_NAME,
        ebs=ec2.CfnLaunchTemplate.EbsProperty(
            volume_type="gp3",
            volume_size=size_gib,
            throughput=throughput_mibps,
            iops=iops,
            encrypted=True,
            delete_on_termination=True,
        ),
    )


class SystemNodeGroup(Construct):
    """The CPU node for CoreDNS, the KubeRay operator and the Ray head (label ``role=system``).

    Default settings: one ``m7i.xlarge``, AMI ``AL2023_x86_64_STANDARD``, encrypted gp3 root
    volume of 50 GiB, IMDSv2 required (hop limit 1), in the data-plane subnet. Given an
    ``InferenceCluster``, it waits for the networking add-ons and CoreDNS waits for it (CoreDNS
    is a Deployment: it reports healthy only once a node can run it).

    The node pool comes whole, ``pool=SystemPool(...)`` (as the stack passes the composed
    deployment's), or as the flat props ``instance_type``, ``count`` and ``root_volume_size_gib``
    (each left None takes :class:`~ray_llm_eks.base.SystemPool`'s default); giving both is refused.

    Public attributes: ``pool`` (the :class:`~ray_llm_eks.base.SystemPool` the Ray head is sized
    from), ``nodegroup``, ``launch_template``, ``role``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterLike,
        subnet: ec2.ISubnet,
        pool: SystemPool | None = None,
        instance_type: InstanceTypeLike | None = None,
        count: int | None = None,
        root_volume_size_gib: int | None = None,
        node_role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.pool: SystemPool = part_or_props(self, "pool", SystemPool, pool, {
            "instance_type": instance_type, "count": count, "root_volume_size_gib": root_volume_size_gib})
        _check_offered(self, self.pool.instance_type, gpu=False)
        self.role = node_role or _node_role_for(self, cluster)
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                block_device_mappings=[_gp3_root(self.pool.root_volume_size_gib)],
                metadata_options=_metadata_options(),
            ),
        )
        self.nodegroup = _managed_nodegroup(
            self,
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            instance_type=self.pool.instance_type,
            sizes=(self.pool.count, self.pool.count, self.pool.count),
            subnet=subnet,
            labels=self.pool.labels,
            role=self.role,
            launch_template=self.launch_template,
        )
        if isinstance(cluster, InferenceCluster):
            cluster.dns_addon.node.add_dependency(self.nodegroup)

    @property
    def labels(self) -> dict[str, str]:
        return self.pool.labels


class EfaFabric(Construct):
    """What every EFA GPU node shares so prefill and decode reach each other over EFA.

    - One EFA security group allowing all traffic in from and out to itself. The KV cache moves
      from prefill nodes to decode nodes, so both roles must be in the SAME group: the cluster
      security group's rules are CIDR-based for egress, and CIDR rules do not admit EFA's SRD
      traffic.
    - One cluster placement group (strategy ``cluster``, single AZ) that both roles join, so
      prefill and decode nodes land close to each other. Optional: with capacity reservations a
      placement group can cause insufficient-capacity errors (eksctl #7949, terraform-aws-eks #3730).

    Public attributes: ``security_group``, ``placement_group`` (or None).
    """

    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc,
                 placement_group: bool = WorkerPool.placement_group) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="EFA traffic between GPU nodes (prefill and decode): all protocols, members only",
            allow_all_outbound=False,
        )
        self.security_group.add_ingress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA: all traffic from members of this group"
        )
        self.security_group.add_egress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA: all traffic to members of this group"
        )
        self.placement_group: ec2.PlacementGroup | None = None
        if placement_group:
            self.placement_group = ec2.PlacementGroup(
                self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
            )


class EfaGpuNodeGroup(Construct):
    """A GPU node group with an EFA interface on every network card, for the ``prefill`` or ``decode`` role.

    Default settings:
    - ``g6.8xlarge`` (one L4, EFA), AMI ``AL2023_x86_64_NVIDIA``, min/desired/max 1.
    - Launch template: on a single-card type one ``efa`` interface at card 0, device 0 (1 EFA
      device on g6.8xlarge); on a multi-card type the primary ENA interface (card 0, device 0), an
      EFA-only interface at card 0 device 1 and at device 0 of every further card (32 EFA devices
      on p5.48xlarge, 4 on p4d.24xlarge and g6e.48xlarge), each with the cluster security group and
      the fabric's EFA security group in its ``Groups``; encrypted gp3 root volume of 200 GiB at 1000 MiB/s and 16000 IOPS
      (gp3's baseline 125 MiB/s makes an 18 GiB checkpoint take ~147 s to read; 1000 MiB/s ~18 s);
      IMDSv2 required, hop limit 1.
    - ``fabric``: the ``EfaFabric`` shared with the other role's node group (pass the same one
      to prefill and decode, or they cannot exchange the KV cache over EFA). Without one, the
      node group makes its own, which suits a single node group only.
    - Joins the fabric's cluster placement group (``placement_group=False`` opts out).
    - Labels ``role=<role>`` and ``nvidia.com/gpu.present=true`` (the NVIDIA device plugin's
      node affinity looks for it); taint ``ray-llm-eks/gpu-role=<role>:NoSchedule`` keeps every
      pod that does not tolerate it off these dedicated nodes (both from ``ray_llm_eks.base.placement``).
    - Exactly one subnet: the data-plane subnet (EFA traffic cannot cross AZs).
    - Given an ``InferenceCluster``, waits for its networking add-ons.

    Node-group options (``aws_eks_v2.NodegroupOptions``' names; at their defaults the template is
    what it was before they existed):

    - ``capacity_type``: ``eks.CapacityType.ON_DEMAND`` (EKS's default, left out of the template)
      or ``SPOT`` (or the name as a string). Spot GPU nodes may be reclaimed at two minutes'
      notice, taking a prefill or decode engine with them; changing it replaces the node group.
      ``CAPACITY_BLOCK`` comes with ``capacity`` of type ``capacity-block`` (and is set by it);
      ``SPOT`` is refused with a reservation.
    - ``capacity``: a :class:`~ray_llm_eks.base.pools.Capacity` (default On-Demand). An ODCR adds
      the launch template's ``CapacityReservationSpecification`` (target or preference); a
      Capacity Block adds ``InstanceMarketOptions`` ``capacity-block``, the reservation ID and the
      ``InstanceType`` to the launch template, names no instance type on the node group, and sets
      capacity type ``CAPACITY_BLOCK`` (EKS user guide, capacity-blocks-mng). Either needs
      ``placement_group=False``. EKS scales a Capacity Block node group to 0 forty minutes before
      the block ends; set ``desired_size`` to 0 before updating it (same guide).
    - ``max_unavailable`` (1 to ``max_size``) or ``max_unavailable_percentage`` (1 to 100), not
      both: how many nodes EKS replaces at once when the AMI release or the launch template
      changes. Default: neither, so EKS replaces one node at a time. With one node per role an
      update takes that role down while its node is replaced, whatever the setting.
    - ``release_version``: the EKS-optimized AMI release, ``<Kubernetes x.y.z>-<YYYYMMDD>`` for
      the cluster's Kubernetes minor (checked when the cluster is an ``InferenceCluster`` or an
      ``aws_eks_v2.Cluster`` of this app, not an imported one; a token is taken as given).
      Default: none, so EKS picks the latest release when the node group is created and
      CloudFormation keeps it; setting or changing it rolls the nodes, ``max_unavailable`` at a
      time.

    The node pool comes whole, ``pool=WorkerPool(...)`` (as the stack passes the composed
    deployment's), or as the flat props ``role``, ``instance_type``, ``min_size``, ``desired_size``,
    ``max_size``, ``root_volume_*``, ``placement_group`` and ``capacity`` (each left None takes
    :class:`~ray_llm_eks.base.WorkerPool`'s default; ``role`` is required); giving both is refused.

    Refuses, at construction, an instance type without a GPU or without EFA support, sizes out
    of order and node-group options out of range, with the construct path and the field in the
    message.

    Public attributes: ``pool`` (the :class:`~ray_llm_eks.base.WorkerPool` that ``RayLlmServing``
    and ``GpuDevicePlugins`` derive their pods from), ``nodegroup``, ``launch_template``,
    ``fabric``, ``efa_security_group``, ``placement_group`` (or None), ``role``, ``instance``,
    ``labels``, ``taint``, ``capacity_type``, ``nodegroup_options`` (the ``aws_eks_v2.Nodegroup``
    props the options set, defaults left out).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterLike,
        subnet: ec2.ISubnet,
        pool: WorkerPool | None = None,
        role: str | None = None,
        fabric: EfaFabric | None = None,
        instance_type: InstanceTypeLike | None = None,
        min_size: int | None = None,
        desired_size: int | None = None,
        max_size: int | None = None,
        root_volume_size_gib: int | None = None,
        root_volume_throughput_mibps: int | None = None,
        root_volume_iops: int | None = None,
        placement_group: bool | None = None,
        node_role: iam.IRole | None = None,
        capacity_type: CapacityTypeLike = DEFAULT_CAPACITY_TYPE,
        max_unavailable: int | None = None,
        max_unavailable_percentage: int | None = None,
        release_version: str | None = None,
        capacity: Capacity | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.pool: WorkerPool = part_or_props(self, "pool", WorkerPool, pool, {
            "role": role, "instance_type": instance_type, "min_size": min_size, "desired_size": desired_size,
            "max_size": max_size, "root_volume_size_gib": root_volume_size_gib,
            "root_volume_throughput_mibps": root_volume_throughput_mibps, "root_volume_iops": root_volume_iops,
            "placement_group": placement_group, "capacity": capacity}, build=_worker_pool)
        root_volume, placement_group = self.pool.root_volume, self.pool.placement_group
        _check_offered(self, self.pool.instance_type, gpu=True)
        eks_cluster = eks_cluster_of(cluster)
        self.nodegroup_options: dict[str, Any] = validated(
            self, node_group_options, capacity_type=capacity_type, capacity=self.pool.capacity,
            max_unavailable=max_unavailable,
            max_unavailable_percentage=max_unavailable_percentage, release_version=release_version,
            max_size=self.pool.max_size,
            kubernetes_version=_kubernetes_version(eks_cluster))
        self.capacity_type: eks.CapacityType = self.nodegroup_options.get("capacity_type", DEFAULT_CAPACITY_TYPE)
        self.fabric = fabric or EfaFabric(self, "Fabric", vpc=eks_cluster.vpc, placement_group=placement_group)
        if placement_group and self.fabric.placement_group is None:
            raise ConstructValidationError(self, [problem(
                "placement_group", True, "the fabric has no placement group",
                "an EfaFabric created with placement_group=True, or placement_group=False")])
        self.efa_security_group = self.fabric.security_group
        self.placement_group = self.fabric.placement_group if placement_group else None
        self.instance = self.pool.instance
        self.labels = self.pool.labels
        self.taint = _eks_taint(self.pool.taint)
        self.role = node_role or _node_role_for(self, cluster)

        placement = None
        if self.placement_group is not None:
            placement = ec2.CfnLaunchTemplate.PlacementProperty(
                group_name=self.placement_group.placement_group_name
            )
        # Every interface carries both groups: the one with an IP (the single ``efa`` one, or the
        # ENA primary) for pod and node traffic (the cluster group, which EKS no longer adds once a
        # launch template names a group), and every EFA device for SRD between prefill and decode
        # (the fabric's group admits only its members).
        groups = [eks_cluster.cluster_security_group_id, self.efa_security_group.security_group_id]
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                network_interfaces=[
                    ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                        device_index=device,
                        network_card_index=card,
                        interface_type=interface_type,
                        groups=groups,
                        delete_on_termination=True,
                    )
                    for card, device, interface_type in self.instance.network_interfaces()
                ],
                block_device_mappings=[
                    _gp3_root(root_volume.size_gib, root_volume.throughput_mibps, root_volume.iops)
                ],
                metadata_options=_metadata_options(),
                placement=placement,
                **_capacity_launch_data(self.pool.capacity, self.pool.instance_type),
            ),
        )
        self.nodegroup = _managed_nodegroup(
            self,
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            instance_type=None if self.pool.capacity.capacity_block else self.pool.instance_type,
            sizes=(self.pool.min_size, self.pool.desired_size, self.pool.max_size),
            subnet=subnet,
            labels=self.labels,
            taints=[self.taint],
            role=self.role,
            launch_template=self.launch_template,
            options=self.nodegroup_options,
        )
        Tags.of(self).add(ROLE_TAG, self.pool.role)
        if self.pool.autoscaled:
            # What a node of this group offers, for Cluster Autoscaler to scale it from zero
            # (constructs/autoscaler.py); read from the node group itself (eks:DescribeNodegroup).
            for key, value in node_template_tags(self.pool.gpus_per_node, self.pool.efa_per_node).items():
                Tags.of(self.nodegroup).add(key, value)


def _check_offered(scope: Construct, instance_type: str, *, gpu: bool) -> None:
    """The type must be one EC2 offers in the stack's region, where the region is known at synth
    time and the library's offerings table knows it (the configuration's check, base.infrastructure)."""
    region_name = Stack.of(scope).region
    if not Token.is_unresolved(region_name):
        validated(scope, infra.instance_type_offered, region_name, instance_type, "instance_type", gpu=gpu)


def _worker_pool(*, role: str | None = None, **props: Any) -> WorkerPool:
    """``WorkerPool`` from ``EfaGpuNodeGroup``'s flat props (those given): the root volume's
    refusals named by this construct's props (``root_volume_size_gib``), as before the pool's."""
    volume = {name: props.pop(f"root_volume_{name}") for name in ("size_gib", "throughput_mibps", "iops")
              if f"root_volume_{name}" in props}
    try:
        root_volume = RootVolume(**volume)
    except SpecErrors as errors:
        raise SpecErrors(type(e)(f"root_volume_{e.field}", e.message) for e in errors) from None
    return WorkerPool(role=role, root_volume=root_volume, **props)  # type: ignore[arg-type]
