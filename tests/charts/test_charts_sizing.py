"""The pod sizing arithmetic (ray_llm_eks/base/sizing.py), checked by hand-worked figures."""

from __future__ import annotations

import pytest

from ray_llm_eks.base import sizing
from ray_llm_eks.base.instance_types import INSTANCE_TYPES


@pytest.mark.parametrize(
    ("vcpus", "millis"),
    [(1, 60), (2, 70), (4, 80), (32, 150)],  # 60 + 10 + 5 + 5 + 28 * 2.5 = 150 for 32 vCPUs
)
def test_kube_reserved_cpu_follows_the_eks_ami_formula(vcpus, millis):
    assert sizing.kube_reserved_cpu_millis(vcpus) == millis


def test_kube_reserved_memory_uses_the_max_pods_upper_bound():
    assert sizing.kube_reserved_memory_mib(32) == 11 * 250 + 255
    assert sizing.kube_reserved_memory_mib(4) == 11 * 110 + 255


def test_g6_8xlarge_worker_worked_example():
    # memory: floor(128 GiB * 1024 * 0.96) = 125829 MiB - 3005 kube-reserved - 100 eviction
    # - 896 DaemonSets = 121828 MiB -> 118 GiB; CPU: 32000 - 150 - 1100 = 30750m -> 30.
    worker = sizing.worker_resources(INSTANCE_TYPES["g6.8xlarge"])
    assert (worker.cpu_quantity, worker.memory_quantity) == ("30", "118Gi")


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.has_gpu and t.efa))
def test_every_worker_request_stays_below_the_estimated_allocatable(name):
    instance = INSTANCE_TYPES[name]
    allocatable = sizing.estimated_allocatable(instance)
    worker = sizing.worker_resources(instance)
    assert 0 < worker.cpu_millis <= allocatable.cpu_millis - sizing.DAEMONSET_BUDGET.cpu_millis
    assert 0 < worker.memory_mib <= allocatable.memory_mib - sizing.DAEMONSET_BUDGET.memory_mib


def test_head_takes_its_target_on_the_reference_system_node():
    head = sizing.head_resources(INSTANCE_TYPES["m7i.xlarge"])
    assert head == sizing.HEAD_TARGET
