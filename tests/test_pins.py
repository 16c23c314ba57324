"""Pins beyond the image and the model (issue 24, "Pinned by default"): the EKS managed add-ons by
``AddonVersion`` and the KubeRay operator image by digest, each an option whose default leaves the
choice to EKS or the chart (no real version or digest can be learned offline, and none is
invented), with the command that resolves it."""

from __future__ import annotations

import json

import pytest

from ray_llm_eks.base import infrastructure as infra
from ray_llm_eks.config import ConfigError, parse_config
from ray_llm_eks.constructs.cluster import DNS_ADDON, NETWORKING_ADDONS

# Shaped like real values, not claimed to be real: the tests check the plumbing, not a release.
VERSION = "v1.99.0-eksbuild.1"
DIGEST = "sha256:" + "d" * 64


def test_the_core_addons_are_the_ones_the_cluster_installs():
    assert set(infra.CORE_ADDONS) == {*NETWORKING_ADDONS, DNS_ADDON}


def test_addon_versions_reach_each_addon_and_only_the_ones_given(synth):
    built = synth({"cluster": {"addon_versions": {"vpc_cni": VERSION, "coredns": "v1.98.0-eksbuild.2"}}})
    versions = {r["Properties"]["AddonName"]: r["Properties"].get("AddonVersion")
                for r in built.resources("AWS::EKS::Addon").values() if r["Properties"]["AddonName"] in infra.CORE_ADDONS}
    assert versions == {"vpc-cni": VERSION, "coredns": "v1.98.0-eksbuild.2", "kube-proxy": None,
                        "eks-pod-identity-agent": None}


def test_the_default_leaves_every_core_addon_at_eks_default(default):
    core = [r["Properties"] for r in default.resources("AWS::EKS::Addon").values()
            if r["Properties"]["AddonName"] in infra.CORE_ADDONS]
    assert len(core) == len(infra.CORE_ADDONS) and all("AddonVersion" not in p for p in core)


def test_the_kuberay_image_goes_by_digest_on_the_charts_tag(synth):
    built = synth({"versions": {"kuberay_image_digest": DIGEST}})
    (chart,) = [r["Properties"] for r in built.resources("Custom::AWSCDK-EKS-HelmChart").values()
                if r["Properties"]["Chart"] == "kuberay-operator"]
    values = json.loads(chart["Values"])
    assert values["image"] == {"tag": f"v{chart['Version']}@{DIGEST}"}


@pytest.mark.parametrize(("data", "field", "says"), [
    ({"cluster": {"addon_versions": {"vpc_cni": "latest"}}}, "cluster.addon_versions.vpc_cni", "not an EKS add-on version"),
    ({"versions": {"kuberay_image_digest": "v1.5.1"}}, "versions.kuberay_image_digest", "not an image digest"),
    # EFA-only interfaces (every GPU node's) need vpc-cni 1.18.5 or later (EKS user guide, node-efa).
    ({"cluster": {"addon_versions": {"vpc_cni": "v1.18.4-eksbuild.1"}}}, "cluster.addon_versions.vpc_cni",
     r"older than v1\.18\.5"),
])
def test_a_bad_pin_is_refused_with_its_field(data, field, says):
    with pytest.raises(ConfigError, match=rf"{field}: {says}"):
        parse_config({"strict": False, **data})


def test_vpc_cni_from_the_efa_only_minimum_on_is_accepted():
    assert infra.vpc_cni_version("v1.18.5-eksbuild.1", "vpc_cni") == "v1.18.5-eksbuild.1"
    assert infra.vpc_cni_version("v1.20.4-eksbuild.2", "vpc_cni") == "v1.20.4-eksbuild.2"
    assert infra.vpc_cni_version(None, "vpc_cni") is None
    with pytest.raises(Exception, match="older than v1.18.5"):
        infra.vpc_cni_version("v1.9.10-eksbuild.1", "vpc_cni")


def test_the_commands_that_resolve_them():
    assert infra.addon_version_command("vpc-cni", "1.35") == (
        "aws eks describe-addon-versions --kubernetes-version 1.35 --addon-name vpc-cni "
        "--query 'addons[0].addonVersions[?compatibilities[?defaultVersion]].addonVersion' --output text")
    assert infra.kuberay_image_digest_command("1.5.1") == (
        "docker buildx imagetools inspect quay.io/kuberay/operator:v1.5.1 --format '{{json .Manifest.Digest}}'")
