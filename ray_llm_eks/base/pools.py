"""Node pools as both halves see them: what a node group creates, and what its pods may ask for.

``constructs.nodegroups.EfaGpuNodeGroup`` builds a :class:`WorkerPool` from its props and
exposes it as ``.pool``; ``constructs.serving.RayLlmServing`` takes those pools, so the pods'
GPUs, CPU, memory, replicas, node selector and toleration all derive from the nodes they run on.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from . import instance_types
from .digest import canonical_digest
from .instance_types import InstanceType
from .errors import Collector, problem, whole_number
from .placement import SYSTEM_LABELS, Taint, require_worker_role, worker_labels, worker_taint

DEFAULT_GPU_INSTANCE_TYPE = "g6.8xlarge"
"""One L4 (24 GB), 32 vCPU, 128 GiB, 25 Gbps, EFA: the AWS sample's node."""
DEFAULT_SYSTEM_INSTANCE_TYPE = "m7i.xlarge"
MAX_NODES = 100
"""Upper bound of a node group's size here: a guard against typos (EKS allows more)."""


def instance_type_name(value: object) -> str:
    """An instance type given as a string or as anything whose ``to_string()`` names it
    (``aws_ec2.InstanceType``), without importing aws_cdk here."""
    to_string = getattr(value, "to_string", None)
    return to_string() if callable(to_string) else value  # type: ignore[return-value]


def _known(value: object, field: str, accepted: str) -> InstanceType:
    name = instance_type_name(value)
    known = instance_types.INSTANCE_TYPES.get(name) if isinstance(name, str) else None
    if known is None:
        raise problem(field, name, "not in the library's instance table (a wrong guess about EFA or GPU memory "
                      "costs a failed deploy: add the type's facts to ray_llm_eks/base/instance_types.py)", accepted)
    return known


def efa_gpu_instance(value: object, field: str = "instance_type") -> InstanceType:
    accepted = f"a GPU type with EFA: {', '.join(instance_types.efa_gpu_names())}"
    known = _known(value, field, accepted)
    if not known.has_gpu:
        raise problem(field, known.name, "has no GPU", accepted)
    if not known.efa:
        raise problem(field, known.name, "does not support EFA", accepted)
    return known


def cpu_instance(value: object, field: str = "instance_type") -> InstanceType:
    accepted = f"a CPU-only type: {', '.join(instance_types.cpu_only_names())}"
    known = _known(value, field, accepted)
    if known.has_gpu:
        raise problem(field, known.name, "has a GPU; the system node runs CPU-only pods", accepted)
    return known


@dataclass(frozen=True)
class RootVolume:
    """gp3 root volume of a GPU node, sized in its launch template.

    gp3's baseline is 125 MiB/s and 3000 IOPS; at 125 MiB/s the 18 GiB Qwen3.5-9B checkpoint
    takes ~147 s to read, at 1000 MiB/s (gp3's maximum) ~18 s.
    """

    __pydantic_config__ = {"extra": "forbid"}

    size_gib: int = 200
    """Root volume size, 20-16384; holds the image (~20 GB) and the Hugging Face cache (an 18 GiB checkpoint for Qwen3.5-9B)."""
    throughput_mibps: int = 1000
    """gp3 throughput in MiB/s, 125-1000 (as EC2 provisions it); 1000 loads 18 GiB in ~18 s instead of ~147 s at the 125 MiB/s baseline."""
    iops: int = 16000
    """gp3 IOPS, 3000-16000 (gp3 allows 0.25 MiB/s per IOPS, so 1000 MiB/s needs at least 4000; at most 500 per GiB)."""

    def __post_init__(self) -> None:
        found = Collector()
        for name, low, high in (("size_gib", 20, 16384), ("throughput_mibps", 125, 1000), ("iops", 3000, 16000)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                found.add(whole_number(name, value, f"{low} to {high}")
                          or problem(name, value, "outside gp3's range", f"{low} to {high}"))
        if not found.errors:
            # gp3 rules: at most 500 IOPS per GiB, and at most 0.25 MiB/s per provisioned IOPS.
            if self.iops > 500 * self.size_gib:
                found.add(problem("iops", self.iops, f"more than gp3's 500 IOPS per GiB of a {self.size_gib} GiB volume",
                                  f"at most {500 * self.size_gib}"))
            if self.throughput_mibps > self.iops // 4:
                found.add(problem("throughput_mibps", self.throughput_mibps,
                                  f"more than gp3's 0.25 MiB/s per IOPS at {self.iops} IOPS",
                                  f"at most {self.iops // 4}"))
        found.raise_if_any(self)


ON_DEMAND, ODCR, CAPACITY_BLOCK = "on-demand", "odcr", "capacity-block"
CAPACITY_TYPES = (ON_DEMAND, ODCR, CAPACITY_BLOCK)
ODCR_PREFERENCES = ("open", "capacity-reservations-only")
"""``CapacityReservationPreference`` values that use reservations (AWS::EC2::LaunchTemplate
CapacityReservationSpecification also takes ``none``, which is plain On-Demand: ``type: on-demand``)."""
_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
_RESOURCE_GROUP_ARN = re.compile(r"^arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class Capacity:
    """Where a leg's GPU nodes get their capacity: On-Demand, an On-Demand Capacity Reservation
    (ODCR) or a Capacity Block for ML.

    AWS's rules, checked here (the reservation itself is checked by ``ray-llm-eks preflight``):
    - A Capacity Block is targeted by its reservation ID (EKS user guide, capacity-blocks-mng: the
      launch template has ``InstanceMarketOptions.MarketType capacity-block``,
      ``CapacityReservationTarget.CapacityReservationId`` and the ``InstanceType``; the node group's
      capacity type is ``CAPACITY_BLOCK``). It is paid for upfront at its own price, so ``plan``
      needs that price: ``hourly_rate_usd``.
    - An ODCR is targeted by ID, by a Capacity Reservation resource group, or used through a
      preference (``open``: any matching open reservation; ``capacity-reservations-only``: only a
      reservation, else the launch fails). It is billed at the On-Demand rate whether used or not
      (EC2 user guide, "Capacity Reservation pricing and billing"), so it has no rate of its own.
    """

    __pydantic_config__ = {"extra": "forbid"}

    type: str = ON_DEMAND
    """`on-demand` (EC2's default), `odcr` (an On-Demand Capacity Reservation) or `capacity-block` (a Capacity Block for ML); a reserved leg needs `placement_group: false`."""
    reservation_id: str | None = None
    """The reservation's ID (`cr-` and 8 or 17 hex digits): required for a Capacity Block; for an ODCR, one of reservation_id, resource_group_arn or preference."""
    resource_group_arn: str | None = None
    """ODCR only: a Capacity Reservation resource group (`arn:aws:resource-groups:<region>:<account>:group/<name>`); the nodes use any reservation in it that matches."""
    preference: str | None = None
    """ODCR only: `open` (any open reservation that matches) or `capacity-reservations-only` (a reservation or no launch)."""
    hourly_rate_usd: float | None = None
    """Capacity Block only, required: its price per instance-hour in USD (Capacity Blocks are priced per reservation, not at the On-Demand rate); plan prices the leg's nodes at it."""

    def __post_init__(self) -> None:
        found = Collector()
        kind = self.type
        if kind not in CAPACITY_TYPES:
            found.add(problem("type", kind, "not a capacity type", ", ".join(CAPACITY_TYPES)))
            found.raise_if_any(self)
        given = {name: getattr(self, name) for name in ("reservation_id", "resource_group_arn", "preference",
                                                         "hourly_rate_usd") if getattr(self, name) is not None}
        if self.reservation_id is not None and (not isinstance(self.reservation_id, str)
                                                or not _RESERVATION_ID.match(self.reservation_id)):
            found.add(problem("reservation_id", self.reservation_id, "not a Capacity Reservation ID",
                              "cr- and 8 or 17 lowercase hex digits, as `aws ec2 describe-capacity-reservations` prints"))
        if self.resource_group_arn is not None and (not isinstance(self.resource_group_arn, str)
                                                    or not _RESOURCE_GROUP_ARN.match(self.resource_group_arn)):
            found.add(problem("resource_group_arn", self.resource_group_arn, "not a resource group ARN",
                              "arn:aws:resource-groups:<region>:<account>:group/<name>"))
        if self.preference is not None and self.preference not in ODCR_PREFERENCES:
            found.add(problem("preference", self.preference, "not a Capacity Reservation preference that uses "
                              "reservations", f"{', '.join(ODCR_PREFERENCES)} (none is type: on-demand)"))
        rate = self.hourly_rate_usd
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < 10_000):
            found.add(problem("hourly_rate_usd", rate, "not a price per instance-hour",
                              "a number of USD above 0 (the Capacity Block's price / instances / hours)"))
        if kind == ON_DEMAND:
            for name, value in given.items():
                found.add(problem(name, value, "set while type is on-demand",
                                  f"type: odcr or capacity-block with {name}, or leave {name} out"))
        elif kind == ODCR:
            targets = [name for name in ("reservation_id", "resource_group_arn", "preference") if name in given]
            if len(targets) != 1:
                found.add(problem("type", kind, "an ODCR is targeted by exactly one of reservation_id, "
                                  f"resource_group_arn and preference; given: {', '.join(targets) or 'none'}",
                                  "one of them"))
            if "hourly_rate_usd" in given:
                found.add(problem("hourly_rate_usd", rate, "an ODCR is billed at the On-Demand rate whether used or "
                                  "not (EC2 user guide, Capacity Reservation pricing and billing)",
                                  "leave it out: plan prices an ODCR at the On-Demand rate"))
        else:
            if self.reservation_id is None:
                found.add(problem("reservation_id", None, "a Capacity Block node group targets its reservation by ID "
                                  "(EKS user guide, capacity-blocks-mng)", "the block's cr- ID"))
            for name in ("resource_group_arn", "preference"):
                if name in given:
                    found.add(problem(name, given[name], "an EKS Capacity Block node group targets the block by "
                                      "CapacityReservationId only", f"leave {name} out; give reservation_id"))
            if rate is None:
                found.add(problem("hourly_rate_usd", None, "a Capacity Block is priced per reservation, not at the "
                                  "On-Demand rate, so plan needs its price",
                                  "the block's price per instance-hour in USD (its upfront fee / instances / hours)"))
        found.raise_if_any(self)

    @property
    def reserved(self) -> bool:
        """The nodes launch into a reservation (an ODCR or a Capacity Block)."""
        return self.type != ON_DEMAND

    @property
    def capacity_block(self) -> bool:
        return self.type == CAPACITY_BLOCK


def _sizes(found: Collector, min_size: int, desired_size: int, max_size: int) -> None:
    in_range = True
    for name, value, low in (("min_size", min_size, 0), ("desired_size", desired_size, 0), ("max_size", max_size, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_NODES:
            found.add(whole_number(name, value, f"{low} to {MAX_NODES}")
                      or problem(name, value, "node count out of range", f"{low} to {MAX_NODES}"))
            in_range = False
    if in_range and min_size > max_size:
        found.add(problem("min_size", min_size, f"min_size is above max_size ({max_size})",
                          f"0 to {max_size}, or raise max_size to at least {min_size}"))
    elif in_range and not min_size <= desired_size <= max_size:
        found.add(problem("desired_size", desired_size,
                          f"sizes must satisfy min_size <= desired_size <= max_size (min_size {min_size}, "
                          f"max_size {max_size})", f"{min_size} to {max_size}"))


@dataclass(frozen=True)
class WorkerPool:
    """One EFA GPU node group of a role: one Ray worker pod per node, owning every GPU of it.

    Refuses, when built, an instance type without a GPU or without EFA, sizes out of order, and
    GPUDirect RDMA instance types (the worker settings are written for G-series).
    """

    __pydantic_config__ = {"extra": "forbid"}

    role: str
    instance_type: str = DEFAULT_GPU_INSTANCE_TYPE
    """GPU instance type with EFA (one L4 24 GB, 32 vCPU, 25 Gbps on g6.8xlarge); refused if the library does not know it has a GPU and EFA."""
    min_size: int = 1
    """Minimum nodes of this role, 0-100; below max_size the leg autoscales between them (docs/scaling.md); 0 only where a new node serves before Ray Serve LLM's 600 s timeout."""
    desired_size: int = 1
    """Nodes at deploy time (at least 1: each holds one Ray worker pod); the model replicas of the role are desired_size x GPUs per node / tensor_parallel_size."""
    max_size: int = 1
    """Maximum nodes of this role, 1-100; above min_size, Cluster Autoscaler adds nodes up to it."""
    root_volume: RootVolume = field(default_factory=RootVolume)
    """gp3 root volume, sized in the launch template."""
    placement_group: bool = True
    """Join the shared cluster placement group; must be false with capacity.type odcr or capacity-block
    (eksctl #7949, terraform-aws-eks #3730 report insufficient capacity; ParallelCluster refuses it with a Capacity Block)."""
    capacity: Capacity = field(default_factory=Capacity)
    """Where the nodes' capacity comes from: On-Demand, an On-Demand Capacity Reservation or a Capacity Block for ML (docs/deploying.md, Capacity reservations)."""

    def __post_init__(self) -> None:
        found = Collector()
        found.check(require_worker_role, self.role)
        object.__setattr__(self, "instance_type", instance_type_name(self.instance_type))
        # P-series (GPUDirect RDMA) is accepted: libfabric uses the device's RDMA when it has it,
        # with FI_EFA_USE_DEVICE_RDMA left unset (ofiwg/libfabric man/fi_efa.7.md: "If not set, RDMA
        # operations will occur when available"), so the worker settings hold for both series.
        found.check(efa_gpu_instance, self.instance_type)
        _sizes(found, self.min_size, self.desired_size, self.max_size)
        if not isinstance(self.capacity, Capacity):
            found.add(problem("capacity", self.capacity, "not a capacity setting", "a Capacity (type, reservation_id, ...)"))
        elif self.capacity.reserved and self.placement_group:
            # The stack's placement group is new: no reservation was made in it, and EC2 places a
            # reserved instance where the reservation is. eksctl creates none when a reservation is
            # set (eksctl PR #8220 for #7949); AWS ParallelCluster refuses a placement group with a
            # Capacity Block (aws-parallelcluster PR #6311), whose instances are already colocated.
            found.add(problem("placement_group", True, f"capacity.type {self.capacity.type} launches the nodes where "
                              "the reservation is, not in this stack's new cluster placement group (launches fail "
                              "with insufficient capacity: eksctl #7949, terraform-aws-eks #3730)", "false"))
        found.raise_if_any(self)

    @property
    def instance(self) -> InstanceType:
        return instance_types.INSTANCE_TYPES[self.instance_type]

    @property
    def node_identity(self) -> str:
        """What the group's nodes are built from (instance type, root volume, placement group), as 12
        hex digits: a change gives the launch template a new version and rolls every node, so the
        pods' template carries it (``ray-llm-eks/node-pool``) and the deployment gate runs again
        after the roll. Sizes are left out: they change no node."""
        identity = {"instance_type": self.instance_type, "root_volume": asdict(self.root_volume),
                    "placement_group": self.placement_group}
        if self.capacity.reserved:
            # Where the nodes launch changes the launch template; the rate does not (plan only).
            # Left out On-Demand, so a deployment's digest is what it was before reservations existed.
            identity["capacity"] = {k: v for k, v in asdict(self.capacity).items() if k != "hourly_rate_usd"}
        return canonical_digest(identity)

    @property
    def autoscaled(self) -> bool:
        """The group may grow or shrink (``min_size < max_size``): Cluster Autoscaler resizes it and
        Ray Serve autoscales the leg's replicas (docs/scaling.md)."""
        return self.min_size < self.max_size

    @property
    def gpus_per_node(self) -> int:
        return self.instance.gpus

    @property
    def efa_per_node(self) -> int:
        """EFA devices a node of this pool has: one per EFA interface its launch template attaches,
        an interface on every network card (``InstanceType.efa_interfaces``). The worker pod, the
        only one on its node, requests them all."""
        return self.instance.efa_interfaces

    @property
    def labels(self) -> dict[str, str]:
        return worker_labels(self.role)

    @property
    def taint(self) -> Taint:
        return worker_taint(self.role)


@dataclass(frozen=True)
class SystemPool:
    """The CPU node group for CoreDNS, the KubeRay operator and the Ray head."""

    __pydantic_config__ = {"extra": "forbid"}

    instance_type: str = DEFAULT_SYSTEM_INSTANCE_TYPE
    """CPU instance type for system pods, the KubeRay operator and the Ray head (must have no GPU, and leave the head 500m CPU and 2 GiB)."""
    count: int = 1
    """Number of system nodes, 1-10."""
    root_volume_size_gib: int = 50
    """Encrypted gp3 root volume of each system node, 20-16384 GiB."""

    def __post_init__(self) -> None:
        found = Collector()
        object.__setattr__(self, "instance_type", instance_type_name(self.instance_type))
        found.check(cpu_instance, self.instance_type)
        if not isinstance(self.count, int) or isinstance(self.count, bool) or not 1 <= self.count <= 10:
            found.add(whole_number("count", self.count, "1 to 10")
                      or problem("count", self.count, "system node count out of range", "1 to 10"))
        size = self.root_volume_size_gib
        if not isinstance(size, int) or isinstance(size, bool) or not 20 <= size <= 16384:
            found.add(whole_number("root_volume_size_gib", size, "20 to 16384")
                      or problem("root_volume_size_gib", size, "outside gp3's range", "20 to 16384"))
        found.raise_if_any(self)

    @property
    def instance(self) -> InstanceType:
        return instance_types.INSTANCE_TYPES[self.instance_type]

    @property
    def node_identity(self) -> str:
        """What the system nodes are built from (instance type, root volume), as 12 hex digits (see
        :attr:`WorkerPool.node_identity`); the head's pod template carries it."""
        return canonical_digest({"instance_type": self.instance_type, "root_volume_size_gib": self.root_volume_size_gib})

    @property
    def labels(self) -> dict[str, str]:
        return dict(SYSTEM_LABELS)
