"""The instance table checked row by row against EC2's DescribeInstanceTypes, as moto ships it."""

from __future__ import annotations

import re

import boto3
import pytest

from ray_llm_eks.base.instance_types import INSTANCE_TYPES


@pytest.fixture(scope="module")
def described() -> dict[str, dict]:
    from moto import mock_aws

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
    # "25 Gigabit", "Up to 12.5 Gigabit", and p4d's "4x 100 Gigabit" (four cards of 100).
    cards, gbps = re.search(r"(?:(\d+)x )?([\d.]+) Gigabit", network["NetworkPerformance"]).groups()
    assert ours.network_gbps == int(cards or 1) * float(gbps)
    assert ours.efa_interfaces == network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    assert ours.nvme_gb == ec2.get("InstanceStorageInfo", {}).get("TotalSizeInGB", 0)
    # What nodeadm reads for maxPods (nodeadm/internal/util/ec2.go:34-53@v20260724): the default
    # card's MaximumNetworkInterfaces and Ipv4AddressesPerInterface.
    (default_card,) = [c for c in network["NetworkCards"]
                       if c["NetworkCardIndex"] == network.get("DefaultNetworkCardIndex", 0)]
    assert ours.default_card_enis == default_card["MaximumNetworkInterfaces"] > 0
    assert ours.ipv4_per_interface == network["Ipv4AddressesPerInterface"] > 0


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.efa))
def test_every_network_card_takes_the_interface_the_launch_template_gives_it(described, name):
    # One EFA device per card: a single-card type takes one ``efa`` interface (EFA with ENA) at
    # card 0 device 0; a multi-card type an ENA primary, then ``efa-only`` at card 0 device 1 and
    # at device 0 of every further card (InstanceType.network_interfaces). Each card must accept
    # the interface types put on it (NetworkCards[].InterfaceTypes).
    ours, network = INSTANCE_TYPES[name], described[name]["NetworkInfo"]
    assert ours.efa_interfaces == ours.network_cards == len(network["NetworkCards"])
    cards = {card["NetworkCardIndex"]: card for card in network["NetworkCards"]}
    for card, device, kind in ours.network_interfaces():
        assert kind in cards[card]["InterfaceTypes"], (card, kind)
        assert device < cards[card]["MaximumNetworkInterfaces"]


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.efa))
def test_single_card_types_get_one_efa_interface_and_multi_card_types_the_ena_plus_efa_only_layout(name):
    ours = INSTANCE_TYPES[name]
    layout = ours.network_interfaces()
    if ours.network_cards == 1:
        # eksctl efaEnabled (pkg/cfn/builder/network_interfaces.go@v0.230.0): one efa at 0/0.
        assert layout == ((0, 0, "efa"),)
    else:
        # EC2 User Guide efa-acc-inst-types: ENA primary, efa-only at 0/1 and at device 0 of each further card.
        assert layout[:2] == ((0, 0, "interface"), (0, 1, "efa-only"))
        assert layout[2:] == tuple((card, 0, "efa-only") for card in range(1, ours.network_cards))
    assert sum(kind in ("efa", "efa-only") for _, _, kind in layout) == ours.efa_interfaces


def test_non_efa_types_get_no_launch_template_interfaces():
    assert INSTANCE_TYPES["m7i.xlarge"].network_interfaces() == ()
    assert INSTANCE_TYPES["g6.4xlarge"].network_interfaces() == ()


def test_p_series_facts_as_aws_states_them():
    p5, p5en, p4d = (INSTANCE_TYPES[n] for n in ("p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge"))
    assert (p5.gpus, p5.gpu_model, p5.efa_interfaces, p5.efa_gbps, p5.efa_gbps_per_interface) == (8, "H100", 32, 3200, 100)
    assert (p5en.efa_interfaces, p5en.efa_gbps_per_interface) == (16, 200)
    assert (p4d.efa_interfaces, p4d.efa_gbps, p4d.gpu_memory_mib) == (4, 400, 40_960)
    assert all(INSTANCE_TYPES[n].gpudirect_rdma for n in ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge",
                                                          "p5e.48xlarge", "p5en.48xlarge"))
    assert not any(t.gpudirect_rdma for n, t in INSTANCE_TYPES.items() if n.startswith("g"))
