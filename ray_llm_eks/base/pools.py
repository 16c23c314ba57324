"""Node pools as both halves see them: what a node group creates, and what its pods may ask for.

``constructs.nodegroups.EfaGpuNodeGroup`` builds a :class:`WorkerPool` from its props and
exposes it as ``.pool``; ``constructs.serving.RayLlmServing`` takes those pools, so the pods'
GPUs, CPU, memory, replicas, node selector and toleration all derive from the nodes they run on.
"""

from __future__ import annotations

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
    """Join the shared cluster placement group; turn off with capacity reservations
    (eksctl #7949, terraform-aws-eks #3730 report insufficient capacity)."""

    def __post_init__(self) -> None:
        found = Collector()
        found.check(require_worker_role, self.role)
        object.__setattr__(self, "instance_type", instance_type_name(self.instance_type))
        # P-series (GPUDirect RDMA) is accepted: libfabric uses the device's RDMA when it has it,
        # with FI_EFA_USE_DEVICE_RDMA left unset (ofiwg/libfabric man/fi_efa.7.md: "If not set, RDMA
        # operations will occur when available"), so the worker settings hold for both series.
        found.check(efa_gpu_instance, self.instance_type)
        _sizes(found, self.min_size, self.desired_size, self.max_size)
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
        return canonical_digest({"instance_type": self.instance_type, "root_volume": asdict(self.root_volume),
                        "placement_group": self.placement_group})

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
