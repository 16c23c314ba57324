"""CPU and memory requests for the Ray pods, computed from the instance table.

A Ray worker owns its GPU node (one worker pod per node, pinned by label and taint), so it
should ask for everything the node can give after what Kubernetes keeps for itself; asking for
more leaves it Pending forever, asking for much less wastes host memory that vLLM, NIXL's
host-staged KV transfers and the page cache (model load, BRIEF section 1) can use.

What a node can give pods is estimated, since it is only known once the node runs:

``allocatable = capacity - kube-reserved - eviction threshold``, then minus the DaemonSets.

- capacity: the kernel sees less memory than the instance's nominal size (firmware and kernel
  reservations); :data:`KERNEL_VISIBLE_MEMORY_FRACTION` is a conservative 96 % (a 16 GiB
  ``m5.xlarge`` reports about 15.4 GiB, 96.5 %).
- kube-reserved, as the EKS AL2023 AMI's ``nodeadm`` computes it (awslabs/amazon-eks-ami,
  ``nodeadm/internal/kubelet/config.go``): CPU 6 % of the first core, 1 % of the second, 0.5 %
  of the third and fourth, 0.25 % of every further core; memory ``11 MiB * maxPods + 255 MiB``.
  maxPods depends on ENI limits that the instance table does not hold, so the upper bound the
  AMI applies is used: 110 for instances up to 30 vCPUs, 250 above.
- eviction threshold: the kubelet's ``memory.available<100Mi``.
- DaemonSets on every node: aws-node (VPC CNI), kube-proxy, eks-pod-identity-agent, and on GPU
  nodes the NVIDIA and EFA device plugins; with ``observability``, the CloudWatch agent and
  Fluent Bit (and DCGM on GPU nodes). :data:`DAEMONSET_BUDGET` (GPU nodes) and
  :data:`SYSTEM_DAEMONSET_BUDGET` cover their requests with room to spare.

Worker requests are rounded down to whole CPUs (Ray's ``num-cpus`` is an integer) and whole
GiB. Requests equal limits, so the pods get the Guaranteed QoS class (last to be OOM-killed or
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
MAX_PODS_SMALL, MAX_PODS_LARGE, MAX_PODS_VCPU_THRESHOLD = 110, 250, 30


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
on the default m7i.xlarge (620m and 4179 MiB by these estimates, with observability's agents
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


def kube_reserved_cpu_millis(vcpus: int) -> int:
    """nodeadm's CPU reservation: 6 % / 1 % / 0.5 % / 0.5 % / 0.25 % per further core."""
    millis = 0.0
    for core in range(vcpus):
        if core == 0:
            millis += 60
        elif core == 1:
            millis += 10
        elif core < 4:
            millis += 5
        else:
            millis += 2.5
    return math.ceil(millis)


def max_pods_upper_bound(vcpus: int) -> int:
    return MAX_PODS_LARGE if vcpus > MAX_PODS_VCPU_THRESHOLD else MAX_PODS_SMALL


def kube_reserved_memory_mib(vcpus: int) -> int:
    return 11 * max_pods_upper_bound(vcpus) + 255


def estimated_allocatable(instance: InstanceType) -> PodResources:
    """What the kubelet will report as allocatable, estimated low rather than high."""
    capacity_mib = math.floor(instance.memory_gib * MIB_PER_GIB * KERNEL_VISIBLE_MEMORY_FRACTION)
    return PodResources(
        cpu_millis=instance.vcpus * 1000 - kube_reserved_cpu_millis(instance.vcpus),
        memory_mib=capacity_mib - kube_reserved_memory_mib(instance.vcpus) - EVICTION_HARD_MEMORY_MIB,
    )


def worker_resources(instance: InstanceType) -> PodResources:
    """The Ray worker's CPU and memory on a GPU node it has to itself."""
    room = estimated_allocatable(instance) - DAEMONSET_BUDGET
    return PodResources(
        cpu_millis=room.whole_cpus * 1000,
        memory_mib=(room.memory_mib // MIB_PER_GIB) * MIB_PER_GIB,
    )


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
