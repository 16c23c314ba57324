"""The EC2 instance types the library knows, with the facts that drive validation and sizing.

Sources: EC2 DescribeInstanceTypes (tests/base/test_instance_types.py checks every row against the
snapshot of that API that moto ships: vCPUs, memory, GPUs and their memory, instance store,
network performance, network cards and ``EfaInfo.MaximumEfaInterfaces``), the Amazon EC2
instance type pages for accelerated computing (G5, G6, G6e, P4d, P5) and general purpose (M7i),
and the EFA supported-instance list (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types).
The same figures for the P-series and the larger g6e sizes are in Karpenter's generated table
(aws/karpenter-provider-aws@1d927085 ``website/content/en/docs/reference/instance-types.md``, made
from DescribeInstanceTypes; ``vpc.amazonaws.com/efa`` there is ``MaximumEfaInterfaces``).

GPUDirect RDMA: only the P-series from p4d have it; G-series do not, though the L40S could
(aws-ofi-nccl #547, maintainer, 2025-03-08 and 2025-08-12: "the only instance types in EC2 that
support GPUDirect RDMA are the P-series starting with p4d"; aws/aws-ofi-nccl@2daf7d30
``src/platform-aws.cpp`` sets ``gdr_required = true`` for p4d, p4de, p5/p5e and p5en).

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
    gpu_cuda_visible_gib: float = 0.0
    """Memory of ONE GPU as CUDA reports it to a process (``cudaMemGetInfo``'s total, which PyTorch
    prints as "GPU 0 has a total capacity of ... GiB" and vLLM 0.26.0 multiplies by
    ``gpu_memory_utilization``: ``utils/mem_utils.py:146``, ``v1/worker/utils.py:425-433``): EC2's
    figure less what the driver keeps. Sources beside the GPU figures below; 0: not known (the
    memory check then uses :attr:`gpu_memory_mib`)."""
    network_gbps: float = 0.0
    """Sustained bandwidth ("up to" figures are given as their burst value and marked below)."""
    network_burst_only: bool = False
    efa: bool = False
    network_cards: int = 1
    efa_interfaces: int = 0
    """EFA interfaces the type takes (``NetworkInfo.EfaInfo.MaximumEfaInterfaces``): one per
    network card on every EFA type here. The GPU node group's launch template attaches this many
    (``constructs.nodegroups``), the EFA device plugin advertises one ``vpc.amazonaws.com/efa``
    per interface, and the worker pod requests them all."""
    nvme_gb: int = 0
    """Total local NVMe instance store, in GB as AWS states it."""
    gpudirect_rdma: bool = False
    gpu_dense_bf16_tflops: float = 0.0
    """Peak dense (no 2:4 sparsity) BF16 tensor TFLOPS of ONE GPU, for the planner's prefill model."""
    gpu_memory_bandwidth_gbps: float = 0.0
    """Peak memory bandwidth of ONE GPU in GB/s (10^9 bytes), for the planner's decode model."""
    default_card_enis: int = 0
    """Network interfaces the default network card takes (DescribeInstanceTypes
    ``NetworkCards[DefaultNetworkCardIndex].MaximumNetworkInterfaces``): with
    :attr:`ipv4_per_interface`, what the EKS AMI's ``nodeadm`` computes the kubelet's ``maxPods``
    from (``base.sizing.max_pods``; awslabs/amazon-eks-ami ``nodeadm/internal/util/ec2.go:34-53``
    and its cached ``nodeadm/internal/kubelet/instance-info.jsonl``@v20260724 hold the same figures)."""
    ipv4_per_interface: int = 0
    """IPv4 addresses one network interface takes (DescribeInstanceTypes ``Ipv4AddressesPerInterface``)."""

    @property
    def gpu_memory_gib(self) -> float:
        return self.gpu_memory_mib / 1024

    @property
    def gpu_memory_for_vllm_gib(self) -> float:
        """What vLLM sizes its budget from: :attr:`gpu_cuda_visible_gib`, else EC2's figure."""
        return self.gpu_cuda_visible_gib or self.gpu_memory_gib

    @property
    def has_gpu(self) -> bool:
        return self.gpus > 0

    def network_interfaces(self) -> tuple[tuple[int, int, str], ...]:
        """The launch template's interfaces, as ``(NetworkCardIndex, DeviceIndex, InterfaceType)``,
        one EFA device on every network card. Empty for a type without EFA.

        One network card (g6.8xlarge, g6e.12xlarge, g5.12xlarge ...): a single ``efa`` interface
        (EFA with ENA) at card 0, device 0, which carries both the node's IP traffic and the EFA
        device. This is what eksctl's ``efaEnabled`` renders (eksctl-io/eksctl
        ``pkg/cfn/builder/network_interfaces.go:36,60-61``@v0.230.0: the first interface,
        ``DeviceIndex`` 0 / ``NetworkCardIndex`` 0, gets ``InterfaceType: efa``), what the AWS
        sample's eksctl node groups run, and what the EKS user guide builds its EFA node groups
        with (awsdocs/amazon-eks-user-guide ``latest/ug/ml/node-efa.adoc:39``@4d52b4d0). The
        ENA-plus-EFA-only layout below is the EC2 guide's recommendation for types "that also
        have multiple network cards" (efa-acc-inst-types.html, first paragraph).

        Several network cards (g6e.24xlarge/48xlarge, p4d, p5), by the EC2 User Guide's rules
        ("Maximize network bandwidth on Amazon EC2 instances with multiple network cards",
        efa-acc-inst-types.html, and its P5 section):

        - the primary interface, card 0 device 0, is an ENA interface ("You can't use an EFA-only
          network interface as the primary network interface");
        - "If the network card index 0 supports EFA, create an EFA-only network interface for
          network card index 0, device index 1";
        - every further card: "device index 0, for EFA-only network interface".

        EFA-only interfaces take no IP address, so a p5.48xlarge uses one private IP for 32 EFA
        devices (the same page, P5 use case 1; EKS's p6-b200 launch template in
        device-management-efa has the same layout)."""
        if not self.efa_interfaces:
            return ()
        if self.network_cards == 1:
            return ((0, 0, "efa"),)
        return ((0, 0, "interface"), (0, 1, "efa-only"),
                *((card, 0, "efa-only") for card in range(1, self.efa_interfaces)))

    @property
    def efa_gbps(self) -> float:
        """What all the type's EFA interfaces carry together: its whole network bandwidth, as every
        network card has one (AWS, "EFA configuration for P5 and P5e instances": with an EFA-only
        interface on each of the 32 cards, "up to 3200 Gbps of EFA networking bandwidth"; EC2
        User Guide efa-acc-inst-types.html). 0 without EFA."""
        return self.network_gbps if self.efa_interfaces else 0.0

    @property
    def efa_gbps_per_interface(self) -> float:
        """One EFA interface's share of :attr:`efa_gbps` (the cards of a type are alike: 100 Gbps
        each on p4d and p5, 200 on p5en)."""
        return self.efa_gbps / self.efa_interfaces if self.efa_interfaces else 0.0


# GPU peak figures (datasheets; the planner's throughput model, ``ray_llm_eks.planning``):
# L4: 242 TFLOPS FP16/BF16 tensor "with sparsity", so 121 dense; 300 GB/s (NVIDIA L4 datasheet,
#     https://www.nvidia.com/en-us/data-center/l4/).
# L40S: 362.05 BF16 tensor TFLOPS dense (733 with sparsity); 864 GB/s (NVIDIA L40S datasheet,
#     https://www.nvidia.com/en-us/data-center/l40s/).
# A10G: no NVIDIA or AWS datasheet gives its TFLOPS; 70 dense BF16 TFLOPS and 600 GB/s are
#     Baseten's figures (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/),
#     a third-party number.
# CUDA-visible memory (``gpu_cuda_visible_gib``), as PyTorch prints it in out-of-memory errors ("GPU 0
# has a total capacity of X GiB"), the lowest public figure found for each GPU; drivers differ by a
# few hundredths:
# L4 22.03: many public reports on L4 machines (e.g. a vLLM 0.x engine on an L4 "Overriding
#     num_gpu_blocks=0 ... GPU 0 has a total capacity of 22.03 GiB"), found by text search of public
#     repositories; no GitHub issue with the figure was located.
# A10G 21.98: public reports from g5.12xlarge (4 x A10G), found the same way; nvidia-smi shows
#     23,028 MiB (vllm-project/vllm#9373, g5.12xlarge).
# L40S 44.40: QwenLM/Qwen3-VL#2097 (an L40, the same 48 GB GDDR6 board; nvidia-smi 46,068 MiB on an
#     L40S, ollama/ollama#8597): an inference for the L40S, not a report from one.
# A100 39.50 (40 GB, TianheWu/CoSeR#10, "one A100") and 79.25 (80 GB, levihsu/OOTDiffusion#235).
# H100 79.11: public reports on H100 80GB HBM3 (e.g. a vLLM DeepSeek-V3 run on 2 x 8 H100); an H100
#     this project ran vLLM 0.26.0 on (driver 580) reported 81,079 MiB = 79.18 GiB.
# H200 139.80: public reports on 8 x H200 (139.80 and 139.81 GiB), found by text search.
_L4 = dict(gpu_model="L4", gpu_memory_mib=22_888, gpu_cuda_visible_gib=22.03, gpu_dense_bf16_tflops=121.0, gpu_memory_bandwidth_gbps=300.0)
_L40S = dict(gpu_model="L40S", gpu_memory_mib=45_776, gpu_cuda_visible_gib=44.40, gpu_dense_bf16_tflops=362.05, gpu_memory_bandwidth_gbps=864.0)
_A10G = dict(gpu_model="A10G", gpu_memory_mib=22_888, gpu_cuda_visible_gib=21.98, gpu_dense_bf16_tflops=70.0, gpu_memory_bandwidth_gbps=600.0)
# A100 SXM4: 312 BF16 tensor TFLOPS dense (624 with sparsity); 1,555 GB/s (40 GB) and 2,039 GB/s
#     (80 GB SXM) (NVIDIA A100 datasheet, https://www.nvidia.com/en-us/data-center/a100/).
# H100 SXM5: 1,979 BF16 tensor TFLOPS "with sparsity", so 989.4 dense; 3,350 GB/s (NVIDIA H100
#     datasheet, https://www.nvidia.com/en-us/data-center/h100/; the same table reproduced at
#     archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html, "Specifications 1/2 lower without sparsity").
# H200 SXM: the H100's tensor cores (1,979 sparse, 989.4 dense BF16) with 141 GB HBM3e at
#     4,800 GB/s (NVIDIA H200 page, https://www.nvidia.com/en-us/data-center/h200/).
# A100, H200 datasheet figures were not re-fetched in this session (the datasheets' well-known values).
_A100_40 = dict(gpu_model="A100", gpu_memory_mib=40_960, gpu_cuda_visible_gib=39.50, gpu_dense_bf16_tflops=312.0, gpu_memory_bandwidth_gbps=1555.0)
_A100_80 = dict(gpu_model="A100", gpu_memory_mib=81_920, gpu_cuda_visible_gib=79.25, gpu_dense_bf16_tflops=312.0, gpu_memory_bandwidth_gbps=2039.0)
_H100 = dict(gpu_model="H100", gpu_memory_mib=81_920, gpu_cuda_visible_gib=79.11, gpu_dense_bf16_tflops=989.4, gpu_memory_bandwidth_gbps=3350.0)
_H200 = dict(gpu_model="H200", gpu_memory_mib=144_384, gpu_cuda_visible_gib=139.80, gpu_dense_bf16_tflops=989.4, gpu_memory_bandwidth_gbps=4800.0)
_GDR = dict(gpudirect_rdma=True)

_TYPES = [
    # General purpose, for the system node (CoreDNS, KubeRay operator, Ray head).
    InstanceType("m7i.large", vcpus=2, memory_gib=8, default_card_enis=3, ipv4_per_interface=10, network_gbps=12.5, network_burst_only=True),
    InstanceType("m7i.xlarge", vcpus=4, memory_gib=16, default_card_enis=4, ipv4_per_interface=15, network_gbps=12.5, network_burst_only=True),
    InstanceType("m7i.2xlarge", vcpus=8, memory_gib=32, default_card_enis=4, ipv4_per_interface=15, network_gbps=12.5, network_burst_only=True),
    InstanceType("m7i.4xlarge", vcpus=16, memory_gib=64, default_card_enis=8, ipv4_per_interface=30, network_gbps=12.5, network_burst_only=True),
    # NVIDIA L4 (24 GB). EFA from 8xlarge up.
    InstanceType("g6.xlarge", vcpus=4, memory_gib=16, default_card_enis=4, ipv4_per_interface=15, gpus=1, **_L4,
                 network_gbps=10, network_burst_only=True, nvme_gb=250),
    InstanceType("g6.4xlarge", vcpus=16, memory_gib=64, default_card_enis=8, ipv4_per_interface=30, gpus=1, **_L4,
                 network_gbps=25, network_burst_only=True, nvme_gb=600),
    InstanceType("g6.8xlarge", vcpus=32, memory_gib=128, default_card_enis=8, ipv4_per_interface=30, gpus=1, **_L4,
                 network_gbps=25, efa=True, efa_interfaces=1, nvme_gb=900),
    InstanceType("g6.12xlarge", vcpus=48, memory_gib=192, default_card_enis=8, ipv4_per_interface=30, gpus=4, **_L4,
                 network_gbps=40, efa=True, efa_interfaces=1, nvme_gb=3760),
    InstanceType("g6.16xlarge", vcpus=64, memory_gib=256, default_card_enis=15, ipv4_per_interface=50, gpus=1, **_L4,
                 network_gbps=25, efa=True, efa_interfaces=1, nvme_gb=1880),
    # NVIDIA L40S (48 GB).
    InstanceType("g6e.8xlarge", vcpus=32, memory_gib=256, default_card_enis=8, ipv4_per_interface=30, gpus=1, **_L40S,
                 network_gbps=25, efa=True, efa_interfaces=1, nvme_gb=900),
    InstanceType("g6e.12xlarge", vcpus=48, memory_gib=384, default_card_enis=10, ipv4_per_interface=30, gpus=4, **_L40S,
                 network_gbps=100, efa=True, efa_interfaces=1, nvme_gb=3800),
    InstanceType("g6e.16xlarge", vcpus=64, memory_gib=512, default_card_enis=15, ipv4_per_interface=50, gpus=1, **_L40S,
                 network_gbps=35, efa=True, efa_interfaces=1, nvme_gb=1900),
    # "G6e instances support up to four network cards and can provide up to 400 Gbps" (an older AWS
    # EC2 User Guide page, https://docs.aws.amazon.com/pt_br/AWSEC2/latest/UserGuide/p5-efa.html, in
    # Portuguese): one EFA interface per card, as DescribeInstanceTypes' MaximumEfaInterfaces says.
    InstanceType("g6e.24xlarge", vcpus=96, memory_gib=768, default_card_enis=10, ipv4_per_interface=50, gpus=4, **_L40S,
                 network_gbps=200, efa=True, network_cards=2, efa_interfaces=2, nvme_gb=3800),
    InstanceType("g6e.48xlarge", vcpus=192, memory_gib=1536, default_card_enis=10, ipv4_per_interface=50, gpus=8, **_L40S,
                 network_gbps=400, efa=True, network_cards=4, efa_interfaces=4, nvme_gb=7600),
    # P-series: eight GPUs on NVLink, GPUDirect RDMA, an EFA interface on every network card.
    # p4d/p4de: "4x 100 Gigabit" (DescribeInstanceTypes), 4 cards; p5/p5e: 32 cards of 100 Gbps,
    # "3,200 Gbps, of which up to 800 Gbps can be utilized for IP network traffic" (EC2 User Guide,
    # efa-acc-inst-types.html, P5 and P5e); p5en: 16 cards of 200 Gbps.
    InstanceType("p4d.24xlarge", vcpus=96, memory_gib=1152, default_card_enis=15, ipv4_per_interface=50, gpus=8, **_A100_40, **_GDR,
                 network_gbps=400, efa=True, network_cards=4, efa_interfaces=4, nvme_gb=8000),
    InstanceType("p4de.24xlarge", vcpus=96, memory_gib=1152, default_card_enis=15, ipv4_per_interface=50, gpus=8, **_A100_80, **_GDR,
                 network_gbps=400, efa=True, network_cards=4, efa_interfaces=4, nvme_gb=8000),
    InstanceType("p5.48xlarge", vcpus=192, memory_gib=2048, default_card_enis=2, ipv4_per_interface=50, gpus=8, **_H100, **_GDR,
                 network_gbps=3200, efa=True, network_cards=32, efa_interfaces=32, nvme_gb=30400),
    InstanceType("p5e.48xlarge", vcpus=192, memory_gib=2048, default_card_enis=2, ipv4_per_interface=50, gpus=8, **_H200, **_GDR,
                 network_gbps=3200, efa=True, network_cards=32, efa_interfaces=32, nvme_gb=30400),
    InstanceType("p5en.48xlarge", vcpus=192, memory_gib=2048, default_card_enis=4, ipv4_per_interface=50, gpus=8, **_H200, **_GDR,
                 network_gbps=3200, efa=True, network_cards=16, efa_interfaces=16, nvme_gb=30400),
    # NVIDIA A10G (24 GB).
    InstanceType("g5.8xlarge", vcpus=32, memory_gib=128, default_card_enis=8, ipv4_per_interface=30, gpus=1, **_A10G,
                 network_gbps=25, efa=True, efa_interfaces=1, nvme_gb=900),
    InstanceType("g5.12xlarge", vcpus=48, memory_gib=192, default_card_enis=15, ipv4_per_interface=50, gpus=4, **_A10G,
                 network_gbps=40, efa=True, efa_interfaces=1, nvme_gb=3800),
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
