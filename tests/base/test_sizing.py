"""The pod sizing arithmetic (ray_llm_eks/base/sizing.py), checked by hand-worked figures and
against the upstream formulas it restates (nodeadm's kube-reserved and maxPods, the kubelet's
huge-page subtraction)."""

from __future__ import annotations

import pytest

from ray_llm_eks.base import sizing
from ray_llm_eks.base.instance_types import INSTANCE_TYPES

WORKER_TYPES = sorted(n for n, t in INSTANCE_TYPES.items() if t.has_gpu and t.efa)


@pytest.mark.parametrize(
    ("vcpus", "millis"),
    # nodeadm config.go getCPUMillicoresToReserve: 600/100/50/25 basis points of the ranges
    # 0-1000, 1000-2000, 2000-4000, 4000-total millicores, each rounded down.
    # 5 vCPUs: 60 + 10 + 10 + 1000 * 25 // 10000 = 2 (2.5 rounded down) = 82.
    # 32: 60 + 10 + 10 + 28000 * 25 // 10000 = 70 -> 150. 192: 60 + 10 + 10 + 470 = 550.
    [(1, 60), (2, 70), (4, 80), (5, 82), (32, 150), (192, 550)],
)
def test_kube_reserved_cpu_follows_nodeadm(vcpus, millis):
    assert sizing.kube_reserved_cpu_millis(vcpus) == millis


@pytest.mark.parametrize(
    ("name", "pods"),
    # nodeadm: default-card ENIs * (IPv4 per ENI - 1) + 2 (its instance-info.jsonl@v20260724 holds
    # the same ENI and IP figures); managed node groups cap it at 110 (< 30 vCPUs) or 250.
    [("g6.8xlarge", 8 * 29 + 2),        # 234, under the 250 cap
     ("g5.12xlarge", 250),              # 15 * 49 + 2 = 737, capped
     ("p5.48xlarge", 2 * 49 + 2),       # 100: two interfaces on its default card
     ("p5en.48xlarge", 4 * 49 + 2),     # 198
     ("m7i.xlarge", 4 * 14 + 2)],       # 58
)
def test_max_pods_is_nodeadms_eni_formula_under_the_managed_node_group_cap(name, pods):
    assert sizing.max_pods(INSTANCE_TYPES[name]) == pods
    assert sizing.kube_reserved_memory_mib(INSTANCE_TYPES[name]) == 11 * pods + 255


def test_huge_pages_are_the_efa_pool_on_efa_types_and_none_elsewhere():
    assert sizing.huge_pages_mib(INSTANCE_TYPES["g6.8xlarge"]) == 5128 * 2 == 10_256
    assert sizing.huge_pages_mib(INSTANCE_TYPES["p5.48xlarge"]) == 10_256
    assert sizing.huge_pages_mib(INSTANCE_TYPES["m7i.xlarge"]) == 0


def test_g6_8xlarge_node_budget_worked_example():
    # capacity: 32 vCPUs, floor(128 GiB * 1024 * 0.96) = 125829 MiB
    # kube-reserved: 150m, 11 * 234 + 255 = 2829 MiB; eviction 100 MiB; huge pages 10256 MiB
    # allocatable: 31850m, 125829 - 2829 - 100 - 10256 = 112644 MiB
    # DaemonSets 1100m / 896 MiB, worker margin 100m / 512 MiB -> room 30650m, 111236 MiB
    # worker: 30 CPUs, 108 GiB (110592 MiB); left: 750m, 1156 MiB.
    budget = sizing.node_budget(INSTANCE_TYPES["g6.8xlarge"])
    lines = {name: (r.cpu_millis, r.memory_mib) for name, r in budget.lines()}
    assert lines == {
        "capacity": (32_000, 125_829), "kube-reserved": (150, 2_829), "eviction threshold": (0, 100),
        "huge pages": (0, 10_256), "allocatable": (31_850, 112_644), "DaemonSets": (1_100, 896),
        "worker request": (30_000, 110_592), "margin": (750, 1_156),
    }
    assert (budget.pod.cpu_quantity, budget.pod.memory_quantity) == ("30", "108Gi")
    assert budget.pod == sizing.worker_resources(INSTANCE_TYPES["g6.8xlarge"])
    assert budget.allocatable == sizing.estimated_allocatable(INSTANCE_TYPES["g6.8xlarge"])


@pytest.mark.parametrize("name", WORKER_TYPES)
def test_every_worker_fits_allocatable_after_the_huge_pages_with_the_stated_margin(name):
    instance = INSTANCE_TYPES[name]
    budget = sizing.node_budget(instance)
    # allocatable is capacity less every reservation, the huge-page pool included
    assert budget.allocatable.memory_mib == (budget.capacity.memory_mib - sizing.kube_reserved_memory_mib(instance)
                                             - sizing.EVICTION_HARD_MEMORY_MIB - sizing.EFA_HUGEPAGES_2MI * 2)
    assert budget.margin.cpu_millis >= sizing.WORKER_MARGIN.cpu_millis
    assert budget.margin.memory_mib >= sizing.WORKER_MARGIN.memory_mib
    # ... and no more than a whole CPU and a whole GiB above it (the rounding down)
    assert budget.margin.cpu_millis < sizing.WORKER_MARGIN.cpu_millis + 1000
    assert budget.margin.memory_mib < sizing.WORKER_MARGIN.memory_mib + 1024
    assert budget.pod.cpu_millis % 1000 == 0 and budget.pod.memory_mib % 1024 == 0 and budget.pod.cpu_millis > 0


def test_node_budget_json_names_every_line():
    data = sizing.node_budget(INSTANCE_TYPES["p5.48xlarge"]).to_dict()
    assert list(data) == ["instance_type", "capacity", "kube_reserved", "eviction", "huge_pages", "allocatable",
                          "daemonsets", "worker", "margin"]
    assert data["huge_pages"] == {"cpu_millis": 0, "memory_mib": 10_256}
    assert data["kube_reserved"] == {"cpu_millis": 550, "memory_mib": 11 * 100 + 255}


def test_head_takes_its_target_on_the_reference_system_node():
    head = sizing.head_resources(INSTANCE_TYPES["m7i.xlarge"])
    assert head == sizing.HEAD_TARGET
