"""The instance table checked row by row against EC2's DescribeInstanceTypes, as moto ships it."""

from __future__ import annotations

import re

import boto3
import pytest
from moto import mock_aws

from ray_llm_eks.base.instance_types import INSTANCE_TYPES


@pytest.fixture(scope="module")
def described() -> dict[str, dict]:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-west-2")
        pages = ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=sorted(INSTANCE_TYPES))
        return {t["InstanceType"]: t for page in pages for t in page["InstanceTypes"]}


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_row_matches_describe_instance_types(described, name):
    ours, ec2 = INSTANCE_TYPES[name], described[name]
    assert ours.vcpus == ec2["VCpuInfo"]["DefaultVCpus"]
    assert ours.memory_gib * 1024 == ec2["MemoryInfo"]["SizeInMiB"]
    gpus = ec2.get("GpuInfo", {}).get("Gpus", [])
    assert ours.gpus == sum(g["Count"] for g in gpus)
    if gpus:
        assert ours.gpu_model == gpus[0]["Name"]
        assert ours.gpu_memory_mib == gpus[0]["MemoryInfo"]["SizeInMiB"]
    network = ec2["NetworkInfo"]
    assert ours.efa == network.get("EfaSupported", False)
    assert ours.network_cards == network["MaximumNetworkCards"]
    assert ours.network_burst_only == network["NetworkPerformance"].startswith("Up to")
    assert ours.network_gbps == float(re.search(r"[\d.]+", network["NetworkPerformance"]).group())
    assert ours.nvme_gb == ec2.get("InstanceStorageInfo", {}).get("TotalSizeInGB", 0)
