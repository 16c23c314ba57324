"""Scaling facts both halves read: how long a new GPU node takes to serve, and what may scale to zero.

A leg is **autoscaled** when its node group's ``min_size`` is below its ``max_size``. Then three
autoscalers act in a chain (Ray docs, "KubeRay autoscaling": three levels): Ray Serve adds a
model replica when the leg's ongoing requests per replica exceed ``target_ongoing_requests``;
the replica's GPU bundles do not fit, so the Ray autoscaler (a sidecar of the head pod, KubeRay
in-tree autoscaling) raises the worker group's ``replicas``; KubeRay creates a pod that stays
Pending; Cluster Autoscaler sees it and raises the node group's Auto Scaling group. Scaling down
runs the other way, each step after its own delay (Serve ``downscale_delay_s`` 600 s, Ray
``idleTimeoutSeconds`` 60 s, Cluster Autoscaler ``--scale-down-unneeded-time`` 10 min).

Every figure below that is not a published fact is an assumption, named and explained; the
planner prints them, and docs/scaling.md says how to measure each on your own cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from .sizing import PodResources

from .units import MIB

SERVE_LLM_REQUEST_TIMEOUT_SECONDS = 600
"""Ray Serve LLM's OpenAI ingress answers HTTP 408 when a request has waited this long for its
first chunk (Ray 2.58 ``llm/_internal/serve/constants.py``, ``RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT``,
default 600; ``core/ingress/ingress.py``). A request that arrives at a leg with no replica waits
in Serve's router for one, bounded by this."""

NODE_READY_SECONDS = 120
"""Assumption: from the Auto Scaling group's launch to a Ready Kubernetes node (EC2 boot, the
EKS AMI's nodeadm, the VPC CNI, the device plugins advertising ``nvidia.com/gpu`` and
``vpc.amazonaws.com/efa``). Not a published figure: measure it as a node's ``creationTimestamp``
and its Ready condition's ``lastTransitionTime`` against the instance's ``LaunchTime``."""
IMAGE_BYTES = 20 * 10**9
"""Assumption: the Ray LLM image's size on disk, about 20 GB (the CUDA, PyTorch and vLLM layers
of the AWS DLC); a new node pulls it before the worker starts."""
IMAGE_PULL_MIBPS = 100
"""Assumption: containerd's effective pull rate, bound by decompressing each layer on one core
rather than by ECR or the network. Measure: the kubelet's ``Successfully pulled image ... in``
event."""
MODEL_DOWNLOAD_MIBPS = 100
"""Assumption: a new node's model cache is empty, so the checkpoint comes from Hugging Face
through the NAT gateway at this rate. Measure: the time between vLLM's ``Starting to load
model`` and ``Loading weights took`` lines on a fresh node."""
ENGINE_START_SECONDS = 60
"""Assumption: vLLM's engine start after the weights are read (memory profiling, KV cache
allocation, NIXL registration); ``enforce_eager`` skips CUDA graph capture."""
SCALE_TO_ZERO_MARGIN = 0.8
"""A leg may scale to zero only if a new node serves within this share of the request timeout."""


@dataclass(frozen=True)
class NodeStart:
    """Seconds from a scale-up decision to a new replica serving, by step."""

    node_ready: float
    image_pull: float
    model_download: float
    model_load: float
    engine_start: float

    @property
    def seconds(self) -> float:
        return self.node_ready + self.image_pull + self.model_download + self.model_load + self.engine_start


def node_start(checkpoint_bytes: int, root_volume_mibps: int) -> NodeStart:
    """How long a new GPU node takes to serve: the burst figure of docs/scaling.md."""
    return NodeStart(
        node_ready=float(NODE_READY_SECONDS),
        image_pull=IMAGE_BYTES / (IMAGE_PULL_MIBPS * MIB),
        model_download=checkpoint_bytes / (MODEL_DOWNLOAD_MIBPS * MIB),
        model_load=checkpoint_bytes / (root_volume_mibps * MIB),
        engine_start=float(ENGINE_START_SECONDS),
    )


RAY_AUTOSCALER = PodResources(cpu_millis=200, memory_mib=512)
"""The Ray autoscaler sidecar KubeRay adds to the head pod (``autoscalerOptions.resources``;
KubeRay's default is 500m/512Mi, more CPU than a few-node cluster's reconcile loop uses)."""
CLUSTER_AUTOSCALER = PodResources(cpu_millis=100, memory_mib=600)
"""Cluster Autoscaler on the system node (the chart sets no requests; these hold a small
cluster's node-group cache with room)."""
AUTOSCALING_SYSTEM_BUDGET = PodResources(
    cpu_millis=RAY_AUTOSCALER.cpu_millis + CLUSTER_AUTOSCALER.cpu_millis,
    memory_mib=RAY_AUTOSCALER.memory_mib + CLUSTER_AUTOSCALER.memory_mib)
"""Taken from the Ray head's share of the system node when any leg is autoscaled, so what the head
left for the bench Job stays the same."""

RAY_IDLE_TIMEOUT_SECONDS = 60
"""KubeRay ``autoscalerOptions.idleTimeoutSeconds`` (its default): a worker pod with no replica
this long is removed, and Cluster Autoscaler removes its empty node 10 minutes later."""


EFA_TEMPLATE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa"
GPU_TEMPLATE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"


def node_template_tags(gpus: int, efa_interfaces: int = 1) -> dict[str, str]:
    """The node group tags that let Cluster Autoscaler scale a GPU group from zero: it infers
    ``nvidia.com/gpu`` from the instance type anyway (stated here too, so a template never
    differs from a node), and cannot infer ``vpc.amazonaws.com/efa`` (one per EFA interface the
    launch template attaches: one per network card, ``WorkerPool.efa_per_node``). cluster-autoscaler ``cloudprovider/aws/README.md`` (v1.35.2),
    "Auto-Discovery Setup"; read from the managed node group's tags since 1.28."""
    return {GPU_TEMPLATE_TAG: str(gpus), EFA_TEMPLATE_TAG: str(efa_interfaces)}
