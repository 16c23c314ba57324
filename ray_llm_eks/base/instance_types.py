"""The EC2 instance types the library knows, with the facts that drive validation and sizing.

Sources: EC2 DescribeInstanceTypes (tests/test_instance_types.py checks every row against the
snapshot of that API that moto ships), the Amazon EC2 instance type pages for accelerated
computing (G5, G6, G6e) and general purpose (M7i), and the EFA supported-instance list
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types).
G-series has no GPUDirect RDMA (aws-ofi-nccl #547: only P-series from p4d), so
``gpudirect_rdma`` is False for every type listed here.

An instance type missing from this table is refused (``ray_llm_eks.base.pools``): a wrong guess
about EFA or GPU memory costs a failed deploy, so unknown types must be added here with their facts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str | None = None
    """NVIDIA model name, which is also Ray's ``accelerator_type`` for it (L4, A10G, L40S)."""
    gpu_memory_mib: int = 0
    """Memory of ONE GPU as EC2 reports it (DescribeInstanceTypes ``GpuInfo.Gpus[].MemoryInfo.SizeInMiB``):
    what the driver exposes, not the marketing figure (an "L4 24 GB" offers 22,888 MiB = 22.35 GiB)."""
    network_gbps: float = 0.0
    """Sustained bandwidth ("up to" figures are given as their burst value and marked below)."""
    network_burst_only: bool = False
    efa: bool = False
    network_cards: int = 1
    nvme_gb: int = 0
    """Total local NVMe instance store, in GB as AWS states it."""
    gpudirect_rdma: bool = False
    gpu_dense_bf16_tflops: float = 0.0
    """Peak dense (no 2:4 sparsity) BF16 tensor TFLOPS of ONE GPU, for the planner's prefill model."""
    gpu_memory_bandwidth_gbps: float = 0.0
    """Peak memory bandwidth of ONE GPU in GB/s (10^9 bytes), for the planner's decode model."""

    @property
    def gpu_memory_gib(self) -> float:
        return self.gpu_memory_mib / 1024

    @property
    def has_gpu(self) -> bool:
        return self.gpus > 0


# GPU peak figures (datasheets; the planner's throughput model, ``ray_llm_eks.planning``):
# L4: 242 TFLOPS FP16/BF16 tensor "with sparsity", so 121 dense; 300 GB/s (NVIDIA L4 datasheet,
#     https://www.nvidia.com/en-us/data-center/l4/).
# L40S: 362.05 BF16 tensor TFLOPS dense (733 with sparsity); 864 GB/s (NVIDIA L40S datasheet,
#     https://www.nvidia.com/en-us/data-center/l40s/).
# A10G: no NVIDIA or AWS datasheet gives its TFLOPS; 70 dense BF16 TFLOPS and 600 GB/s are
#     Baseten's figures (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/),
#     a third-party number.
_L4 = dict(gpu_model="L4", gpu_memory_mib=22_888, gpu_dense_bf16_tflops=121.0, gpu_memory_bandwidth_gbps=300.0)
_L40S = dict(gpu_model="L40S", gpu_memory_mib=45_776, gpu_dense_bf16_tflops=362.05, gpu_memory_bandwidth_gbps=864.0)
_A10G = dict(gpu_model="A10G", gpu_memory_mib=22_888, gpu_dense_bf16_tflops=70.0, gpu_memory_bandwidth_gbps=600.0)

_TYPES = [
    # General purpose, for the system node (CoreDNS, KubeRay operator, Ray head).
    InstanceType("m7i.large", vcpus=2, memory_gib=8, network_gbps=12.5, network_burst_only=True),
    InstanceType("m7i.xlarge", vcpus=4, memory_gib=16, network_gbps=12.5, network_burst_only=True),
    InstanceType("m7i.2xlarge", vcpus=8, memory_gib=32, network_gbps=12.5, network_burst_only=True),
    InstanceType("m7i.4xlarge", vcpus=16, memory_gib=64, network_gbps=12.5, network_burst_only=True),
    # NVIDIA L4 (24 GB). EFA from 8xlarge up.
    InstanceType("g6.xlarge", vcpus=4, memory_gib=16, gpus=1, **_L4,
                 network_gbps=10, network_burst_only=True, nvme_gb=250),
    InstanceType("g6.4xlarge", vcpus=16, memory_gib=64, gpus=1, **_L4,
                 network_gbps=25, network_burst_only=True, nvme_gb=600),
    InstanceType("g6.8xlarge", vcpus=32, memory_gib=128, gpus=1, **_L4,
                 network_gbps=25, efa=True, nvme_gb=900),
    InstanceType("g6.12xlarge", vcpus=48, memory_gib=192, gpus=4, **_L4,
                 network_gbps=40, efa=True, nvme_gb=3760),
    InstanceType("g6.16xlarge", vcpus=64, memory_gib=256, gpus=1, **_L4,
                 network_gbps=25, efa=True, nvme_gb=1880),
    # NVIDIA L40S (48 GB).
    InstanceType("g6e.8xlarge", vcpus=32, memory_gib=256, gpus=1, **_L40S,
                 network_gbps=25, efa=True, nvme_gb=900),
    InstanceType("g6e.12xlarge", vcpus=48, memory_gib=384, gpus=4, **_L40S,
                 network_gbps=100, efa=True, nvme_gb=3800),
    # NVIDIA A10G (24 GB).
    InstanceType("g5.8xlarge", vcpus=32, memory_gib=128, gpus=1, **_A10G,
                 network_gbps=25, efa=True, nvme_gb=900),
    InstanceType("g5.12xlarge", vcpus=48, memory_gib=192, gpus=4, **_A10G,
                 network_gbps=40, efa=True, nvme_gb=3800),
]

INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in _TYPES}


def known_names() -> list[str]:
    return sorted(INSTANCE_TYPES)


def efa_gpu_names() -> list[str]:
    return sorted(n for n, t in INSTANCE_TYPES.items() if t.has_gpu and t.efa)


def cpu_only_names() -> list[str]:
    return sorted(n for n, t in INSTANCE_TYPES.items() if not t.has_gpu)


OFFERINGS_FILE = Path(__file__).resolve().parent.parent / "data" / "generated" / "ec2_offerings.json"
"""Each region's availability zones and which of the types above EC2 offers there: moto's snapshots
of EC2 DescribeAvailabilityZones and DescribeInstanceTypeOfferings (``make generate``,
tools/generate_ec2_offerings.py, which names the moto version). The library's one table of
offerings: every entry point (``make synth``, ``plan``, the constructs) and ``plan``'s prices read it."""


@lru_cache(maxsize=1)
def offerings() -> dict:
    return json.loads(OFFERINGS_FILE.read_text())


def offered_in(region_name: str) -> frozenset[str] | None:
    """The types of this table EC2 offers in the region; None for a region the table does not know
    (the snapshot has no record of it), which the checks then accept."""
    offered = offerings()["instance_types"].get(region_name)
    return None if offered is None else frozenset(offered)
