"""CPU and memory requests for the Ray pods, computed from the instance table.

A Ray worker owns its GPU node (one worker pod per node, pinned by label and taint), so it
should ask for everything the node can give after what Kubernetes keeps for itself; asking for
more leaves it Pending forever, asking for much less wastes host memory that vLLM, NIXL's
host-staged KV transfers and the page cache (model load) can use.

What a node can give pods is estimated, since it is only known once the node runs
(:func:`node_budget` holds every line; ``ray-llm-eks plan`` prints it):

``allocatable = capacity - kube-reserved - eviction threshold - huge pages``, then minus the DaemonSets.

- capacity: the kernel sees less memory than the instance's nominal size (firmware and kernel
  reservations); the kubelet's capacity is cAdvisor's machine memory (kubernetes/kubernetes
  ``pkg/kubelet/nodestatus/setters.go``, ``MachineInfo``: ``cadvisor.CapacityFromMachineInfo``).
  :data:`KERNEL_VISIBLE_MEMORY_FRACTION` is a conservative 96 % (a 16 GiB ``m5.xlarge`` reports
  about 15.4 GiB, 96.5 %); no EC2 or EKS document states the fraction per type, so it stays an
  estimate, set low.
- kube-reserved, as the EKS AL2023 AMI's ``nodeadm`` sets it (awslabs/amazon-eks-ami
  ``nodeadm/internal/kubelet/config.go:283-287,410-444``@v20260724): CPU 6 % of the first
  core, 1 % of the second, 0.5 % of the third and fourth, 0.25 % of the rest, each range's
  millicores rounded down (:func:`kube_reserved_cpu_millis`); memory ``11 MiB * maxPods + 255 MiB``.
  maxPods (:func:`max_pods`): nodeadm's ``ENIs of the default card * (IPv4 per ENI - 1) + 2``
  (``nodeadm/internal/kubelet/eni_max_pods.go:75-77``@v20260724), which managed node groups cap
  at 110 below 30 vCPUs and 250 above (EKS user guide ``create-managed-node-group``: "managed
  node groups enforce a maximum number on the value of ``maxPods``").
- eviction threshold: nodeadm's ``evictionHard`` ``memory.available: 100Mi``
  (``config.go:110-114``@v20260724); the kubelet subtracts it from allocatable.
- huge pages: the kubelet removes every huge-page pool from allocatable memory ("for every huge
  page reservation, we need to remove it from allocatable memory", the last loop of
  ``MachineInfo`` in ``pkg/kubelet/nodestatus/setters.go``, read at kubernetes/kubernetes@00267ac8;
  unchanged since huge pages became a resource in 1.10), whether a pod uses them or not. EC2
  instances "with the EFA driver installed pre-allocate 5128 2MiB Huge Pages" (EKS user guide,
  awsdocs/amazon-eks-user-guide ``latest/ug/ml/node-efa.adoc:55``@4d52b4d0); the AL2023 AMIs
  install that driver with ``efa_installer.sh --minimal -y`` (amazon-eks-ami
  ``templates/al2023/provisioners/install-efa.sh:53``@v20260724; the AMI sets no huge pages
  itself). The AMI's sources do not show whether ``--minimal`` reserves them, so the pool is
  subtracted on every EFA type: an estimate 10 GiB low leaves memory unused, one 10 GiB high
  leaves the worker Pending. Non-EFA types (the system node) have none.
- DaemonSets on every node: aws-node (VPC CNI), kube-proxy, eks-pod-identity-agent, and on GPU
  nodes the NVIDIA and EFA device plugins; with ``observability``, the CloudWatch agent and
  Fluent Bit (and DCGM on GPU nodes). :data:`DAEMONSET_BUDGET` (GPU nodes) and
  :data:`SYSTEM_DAEMONSET_BUDGET` cover their requests with room to spare.

The worker then keeps :data:`WORKER_MARGIN` free and is rounded down to whole CPUs (Ray's
``num-cpus`` is an integer) and whole GiB, so what the node has left after it is at least the
margin. Requests equal limits, so the pods get the Guaranteed QoS class (last to be OOM-killed or
evicted) and Ray's memory monitor, which reads the cgroup limit, sees the real budget; this is
what the KubeRay documentation recommends for Ray pods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .instance_types import InstanceType
from .errors import problem

MIB_PER_GIB = 1024

KERNEL_VISIBLE_MEMORY_FRACTION = 0.96
EVICTION_HARD_MEMORY_MIB = 100
"""nodeadm's ``evictionHard`` ``memory.available`` (config.go:111@v20260724)."""
MAX_PODS_SMALL, MAX_PODS_LARGE, MAX_PODS_VCPU_THRESHOLD = 110, 250, 30
"""The managed node groups' cap on ``maxPods``: 110 below 30 vCPUs, 250 above."""
KUBE_RESERVED_CPU_RANGES = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, None, 25))
"""nodeadm's ``getCPUMillicoresToReserve`` (config.go:410-440@v20260724): per range of the node's
millicores (start, end, basis points reserved); None is the node's total."""
KUBE_RESERVED_MEMORY_MIB_PER_POD, KUBE_RESERVED_MEMORY_BASE_MIB = 11, 255
"""nodeadm's ``getMemoryMebibytesToReserve``: ``11*maxPods + 255`` MiB (config.go:442-444@v20260724)."""
HUGEPAGE_2MI_MIB = 2
EFA_HUGEPAGES_2MI = 5128
"""2 MiB huge pages an EFA node pre-allocates (EKS user guide node-efa.adoc:55@4d52b4d0): 10,256 MiB."""


@dataclass(frozen=True)
class PodResources:
    """CPU in millicores and memory in MiB; rendered as Kubernetes quantities."""

    cpu_millis: int
    memory_mib: int

    def __sub__(self, other: PodResources) -> PodResources:
        return PodResources(self.cpu_millis - other.cpu_millis, self.memory_mib - other.memory_mib)

    @property
    def cpu_quantity(self) -> str:
        if self.cpu_millis % 1000 == 0:
            return str(self.cpu_millis // 1000)
        return f"{self.cpu_millis}m"

    @property
    def memory_quantity(self) -> str:
        if self.memory_mib % MIB_PER_GIB == 0:
            return f"{self.memory_mib // MIB_PER_GIB}Gi"
        return f"{self.memory_mib}Mi"

    def guaranteed_json(self) -> dict[str, dict[str, str]]:
        """Requests equal to limits, as the plain JSON that Helm values and KubeRay's
        ``autoscalerOptions.resources`` take (the charts' own pods use ``cdk8s_charts.containers.guaranteed``)."""
        amounts = {"cpu": self.cpu_quantity, "memory": self.memory_quantity}
        return {"requests": dict(amounts), "limits": dict(amounts)}

    @property
    def whole_cpus(self) -> int:
        return self.cpu_millis // 1000


EFA_COUNTER_READER = PodResources(cpu_millis=50, memory_mib=64)
"""The deployment gate's EFA counter reader on each GPU node (a Python HTTP server reading sysfs)."""
GATE_JOB = PodResources(cpu_millis=100, memory_mib=256)
"""The deployment gate's Job on the system node (stdlib Python: HTTP calls and JSON)."""
TEARDOWN_GUARD = PodResources(cpu_millis=10, memory_mib=48)
"""The teardown guard on the system node: a shell that sleeps, and during ``cdk destroy`` a
preStop hook (stdlib Python polling the API: ~25 MiB resident)."""

BENCH_JOB = PodResources(cpu_millis=600, memory_mib=3 * MIB_PER_GIB)
"""``ray-llm-eks bench --emit-job``: AIPerf on the system node, beside the Ray head. It is not in
:data:`SYSTEM_POD_BUDGET` (it runs only when someone benchmarks): it takes what the head leaves
on the default m7i.xlarge (620m and 4751 MiB by these estimates, with observability's agents
counted; a test keeps it inside). AIPerf's
workers are CPU-bound at high concurrency: watch its ``credit_to_start_latency`` and give the
system node more CPUs before reading latencies past a few hundred concurrent requests."""

DAEMONSET_BUDGET = PodResources(cpu_millis=1100, memory_mib=896)
"""On a GPU node: aws-node asks 25m, kube-proxy 100m, the device plugins and the Pod Identity
agent a few tens of millicores and MiB each, the gate's EFA counter reader
:data:`EFA_COUNTER_READER`; with ``observability`` (the default) the CloudWatch add-on's agent
(250m/128Mi), Fluent Bit (50m/25Mi) and its DCGM exporter (256m/128Mi) (chart
amazon-cloudwatch-observability, values.yaml): 1100m and 896 MiB hold them all with room."""
SYSTEM_DAEMONSET_BUDGET = PodResources(cpu_millis=600, memory_mib=512)
"""On the system node: the same without the device plugins, the EFA counter reader and DCGM
(about 450m and 250 MiB)."""

SYSTEM_POD_BUDGET = PodResources(cpu_millis=700, memory_mib=1280)
"""Besides the Ray head, the system node runs CoreDNS (two replicas of 100m/70Mi), the KubeRay
operator (its chart asks 100m/512Mi), after each deploy the gate Job (:data:`GATE_JOB`), and with
``observability`` the CloudWatch add-on's operator (100m/64Mi) and a continuous verification run
(:data:`GATE_JOB` again, possibly beside the deploy's gate), and the teardown guard
(:data:`TEARDOWN_GUARD`): 610m and 1276 MiB in all."""

HEAD_MINIMUM = PodResources(cpu_millis=500, memory_mib=2 * MIB_PER_GIB)
"""Below this the GCS, dashboard and Serve controller start too slowly to pass their probes."""

HEAD_TARGET = PodResources(cpu_millis=2000, memory_mib=8 * MIB_PER_GIB)
"""The head runs no model (``num-gpus``/``num-cpus`` 0): GCS, dashboard and the Serve controller
fit in 2 CPUs and 8 GiB; the rest of a larger system node stays free for other system pods."""


WORKER_MARGIN = PodResources(cpu_millis=100, memory_mib=512)
"""What the worker leaves free on its node beyond the DaemonSet budget, before rounding down to
whole CPUs and GiB: room for an estimate that is off (the kernel's share of memory is the one
figure not read from a source) and for a small pod added later."""


def kube_reserved_cpu_millis(vcpus: int) -> int:
    """nodeadm's CPU reservation: each range's share, in basis points, rounded down as Go's integer
    division does (``(reserved - start) * percentage / 10000``)."""
    total = vcpus * 1000
    millis = 0
    for start, end, basis_points in KUBE_RESERVED_CPU_RANGES:
        if total > start:
            millis += (min(total, end if end is not None else total) - start) * basis_points // 10000
    return millis


def max_pods(instance: InstanceType) -> int:
    """The kubelet's ``maxPods`` on a managed node group: nodeadm's ENI formula, capped as EKS caps it."""
    eni_limit = instance.default_card_enis * (instance.ipv4_per_interface - 1) + 2
    cap = MAX_PODS_LARGE if instance.vcpus > MAX_PODS_VCPU_THRESHOLD else MAX_PODS_SMALL
    return min(eni_limit, cap)


def kube_reserved_memory_mib(instance: InstanceType) -> int:
    return KUBE_RESERVED_MEMORY_MIB_PER_POD * max_pods(instance) + KUBE_RESERVED_MEMORY_BASE_MIB


def huge_pages_mib(instance: InstanceType) -> int:
    """The huge-page pool the kubelet takes out of allocatable memory: EFA types' 5128 x 2 MiB."""
    return EFA_HUGEPAGES_2MI * HUGEPAGE_2MI_MIB if instance.efa else 0


@dataclass(frozen=True)
class NodeBudget:
    """A node's resources line by line, as the kubelet computes allocatable, then the pods on it.
    Each line is a :class:`PodResources` (CPU millicores, memory MiB); eviction and huge pages take
    memory only. ``margin`` is what the node keeps free after the DaemonSets and ``pod``."""

    instance_type: str
    capacity: PodResources
    kube_reserved: PodResources
    eviction: PodResources
    huge_pages: PodResources
    daemonsets: PodResources
    pod: PodResources

    @property
    def allocatable(self) -> PodResources:
        return self.capacity - self.kube_reserved - self.eviction - self.huge_pages

    @property
    def margin(self) -> PodResources:
        return self.allocatable - self.daemonsets - self.pod

    def lines(self) -> list[tuple[str, PodResources]]:
        return [("capacity", self.capacity), ("kube-reserved", self.kube_reserved), ("eviction threshold", self.eviction),
                ("huge pages", self.huge_pages), ("allocatable", self.allocatable), ("DaemonSets", self.daemonsets),
                ("worker request", self.pod), ("margin", self.margin)]

    def to_dict(self) -> dict[str, object]:
        key = {"capacity": "capacity", "kube-reserved": "kube_reserved", "eviction threshold": "eviction",
               "huge pages": "huge_pages", "allocatable": "allocatable", "DaemonSets": "daemonsets",
               "worker request": "worker", "margin": "margin"}
        return {"instance_type": self.instance_type,
                **{key[name]: {"cpu_millis": r.cpu_millis, "memory_mib": r.memory_mib} for name, r in self.lines()}}


def _kubelet_lines(instance: InstanceType) -> dict[str, PodResources]:
    return {
        "capacity": PodResources(instance.vcpus * 1000,
                                 math.floor(instance.memory_gib * MIB_PER_GIB * KERNEL_VISIBLE_MEMORY_FRACTION)),
        "kube_reserved": PodResources(kube_reserved_cpu_millis(instance.vcpus), kube_reserved_memory_mib(instance)),
        "eviction": PodResources(0, EVICTION_HARD_MEMORY_MIB),
        "huge_pages": PodResources(0, huge_pages_mib(instance)),
    }


def estimated_allocatable(instance: InstanceType) -> PodResources:
    """What the kubelet will report as allocatable, estimated low rather than high."""
    lines = _kubelet_lines(instance)
    return lines["capacity"] - lines["kube_reserved"] - lines["eviction"] - lines["huge_pages"]


def worker_resources(instance: InstanceType) -> PodResources:
    """The Ray worker's CPU and memory on a GPU node it has to itself."""
    room = estimated_allocatable(instance) - DAEMONSET_BUDGET - WORKER_MARGIN
    return PodResources(
        cpu_millis=room.whole_cpus * 1000,
        memory_mib=(room.memory_mib // MIB_PER_GIB) * MIB_PER_GIB,
    )


def node_budget(instance: InstanceType) -> NodeBudget:
    """A GPU node's budget, every line from the figures above, down to the worker and what it leaves."""
    return NodeBudget(instance_type=instance.name, **_kubelet_lines(instance), daemonsets=DAEMONSET_BUDGET,
                      pod=worker_resources(instance))


def head_resources(instance: InstanceType, autoscaling: PodResources | None = None) -> PodResources:
    """The Ray head's share of the system node: :data:`HEAD_TARGET`, or what is left if less,
    rounded down to 100m and 256 MiB steps; with ``autoscaling`` (the Ray autoscaler sidecar and
    Cluster Autoscaler, ``spec.scaling.AUTOSCALING_SYSTEM_BUDGET``) that much less, so the room
    the head leaves on the node stays the same.

    Raises a ``SpecError`` on ``system.instance_type`` when the system node is too small to run the head.
    """
    extra = autoscaling or PodResources(0, 0)
    room = estimated_allocatable(instance) - SYSTEM_DAEMONSET_BUDGET - SYSTEM_POD_BUDGET - extra
    head = PodResources(
        cpu_millis=(min(HEAD_TARGET.cpu_millis - extra.cpu_millis, room.cpu_millis) // 100) * 100,
        memory_mib=(min(HEAD_TARGET.memory_mib - extra.memory_mib, room.memory_mib) // 256) * 256,
    )
    if head.cpu_millis < HEAD_MINIMUM.cpu_millis or head.memory_mib < HEAD_MINIMUM.memory_mib:
        raise problem(
            "system.instance_type", instance.name,
            f"leaves {head.cpu_quantity} CPU and {head.memory_quantity} memory for the Ray head, which needs at "
            f"least {HEAD_MINIMUM.cpu_quantity} CPU and {HEAD_MINIMUM.memory_quantity}",
            "a larger system instance type, such as m7i.xlarge",
        )
    return head
