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
ADDON_VERSIONS = {"vpc_cni": VERSION, "coredns": "v1.98.0-eksbuild.2"}
NVIDIA_DIGEST = "sha256:" + "a" * 64
EFA_DIGEST = "sha256:" + "b" * 64
PLUGINS_PINNED = {"nvidia_device_plugin_image_digest": NVIDIA_DIGEST, "efa_device_plugin_image_digest": EFA_DIGEST}
ALL_PINS = {"cluster": {"addon_versions": ADDON_VERSIONS},
            "versions": {"kuberay_image_digest": DIGEST, **PLUGINS_PINNED}}
"""Every pin of this file in one build (each test reads its own pin; they reach different resources),
so the three tests cost one synthesis."""


def test_the_core_addons_are_the_ones_the_cluster_installs():
    assert set(infra.CORE_ADDONS) == {*NETWORKING_ADDONS, DNS_ADDON}


def test_addon_versions_reach_each_addon_and_only_the_ones_given(synth):
    built = synth(ALL_PINS)
    versions = {r["Properties"]["AddonName"]: r["Properties"].get("AddonVersion")
                for r in built.resources("AWS::EKS::Addon").values() if r["Properties"]["AddonName"] in infra.CORE_ADDONS}
    assert versions == {"vpc-cni": VERSION, "coredns": "v1.98.0-eksbuild.2", "kube-proxy": None,
                        "eks-pod-identity-agent": None}


def test_the_default_leaves_every_core_addon_at_eks_default(default):
    core = [r["Properties"] for r in default.resources("AWS::EKS::Addon").values()
            if r["Properties"]["AddonName"] in infra.CORE_ADDONS]
    assert len(core) == len(infra.CORE_ADDONS) and all("AddonVersion" not in p for p in core)


def test_the_kuberay_image_goes_by_digest_on_the_charts_tag(synth):
    built = synth(ALL_PINS)
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


# --- the device plugins' images (privileged, on every GPU node), by digest, required by strict ----

PINNED = {"image": {"digest": DIGEST}, "model": {"revision": "0123456789abcdef0123456789abcdef01234567"},
          "versions": PLUGINS_PINNED}


def _plugin_values(built) -> dict[str, dict]:
    return {r["Properties"]["Release"]: json.loads(r["Properties"]["Values"])
            for r in built.resources("Custom::AWSCDK-EKS-HelmChart").values()
            if r["Properties"]["Release"] in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin")}


def test_the_device_plugin_images_go_by_digest_on_each_charts_tag(synth, default):
    values = _plugin_values(synth(ALL_PINS))
    # NVIDIA's chart writes repository:tag, its tag v<appVersion> = v<chart version> (_helpers.tpl
    # fullimage at v0.20.0); the EFA chart v0.5.20 deploys its image v0.5.13 (eks-charts values.yaml).
    assert values["nvidia-device-plugin"]["image"] == {"tag": f"v0.20.1@{NVIDIA_DIGEST}"}
    assert values["aws-efa-k8s-device-plugin"]["image"] == {"tag": f"v0.5.13@{EFA_DIGEST}"}
    assert f"{infra.NVIDIA_DEVICE_PLUGIN_IMAGE}:v0.20.1@{NVIDIA_DIGEST}".count("@sha256:") == 1
    # Unpinned (strict false), the charts keep their own tags.
    assert all("image" not in v for v in _plugin_values(default).values())


def test_strict_refuses_the_device_plugins_by_tag_naming_the_commands():
    with pytest.raises(ConfigError) as caught:
        parse_config({**PINNED, "versions": {}})
    lines = str(caught.value).splitlines()[1:]
    assert [line.split(":", 1)[0].strip() for line in lines] == [
        "versions.nvidia_device_plugin_image_digest", "versions.efa_device_plugin_image_digest"]
    assert all("strict mode refuses it: device plugin image" in line and "or strict false" in line for line in lines)
    assert ("docker buildx imagetools inspect nvcr.io/nvidia/k8s-device-plugin:v0.20.1 "
            "--format '{{json .Manifest.Digest}}'") in lines[0]
    assert ("aws ecr describe-images --registry-id 602401143452 --repository-name eks/aws-efa-k8s-device-plugin "
            "--image-ids imageTag=v0.5.13 --region us-west-2") in lines[1]
    assert parse_config(PINNED).reproducibility_problems() == []


def test_unpinned_they_are_one_more_warning_and_plan_prints_their_commands():
    unpinned = parse_config({"strict": False})
    fields = [p.field for p in unpinned.reproducibility_problems()]
    assert fields == ["image.digest", "model.revision", "versions.nvidia_device_plugin_image_digest",
                      "versions.efa_device_plugin_image_digest"]
    commands = unpinned.pin_commands()
    assert list(commands) == fields
    assert commands["versions.efa_device_plugin_image_digest"].endswith(
        "--query 'imageDetails[0].imageDigest' --output text")


@pytest.mark.parametrize(("versions", "field", "says"), [
    ({"nvidia_device_plugin_image_digest": "v0.20.1"}, "versions.nvidia_device_plugin_image_digest",
     "not an image digest"),
    # Chart v0.5.19 deploys image v0.5.12, which the table does not record: no tag to put the digest on.
    ({"efa_device_plugin": "v0.5.19", "efa_device_plugin_image_digest": EFA_DIGEST},
     "versions.efa_device_plugin_image_digest", "the image tag chart v0.5.19 deploys is not recorded"),
])
def test_a_bad_device_plugin_pin_is_refused_with_its_field(versions, field, says):
    with pytest.raises(ConfigError, match=rf"{field}: {says}"):
        parse_config({"strict": False, "versions": versions})


def test_strict_with_an_efa_chart_of_no_recorded_tag_says_which_charts_can_be_pinned():
    with pytest.raises(ConfigError) as caught:
        parse_config({**PINNED, "versions": {"nvidia_device_plugin_image_digest": NVIDIA_DIGEST,
                                             "efa_device_plugin": "v0.5.19"}})
    (line,) = str(caught.value).splitlines()[1:]
    assert line.strip().startswith("versions.efa_device_plugin_image_digest: strict mode refuses it")
    assert "accepted: efa_device_plugin one of v0.5.20, v0.5.21" in line


def test_the_construct_takes_the_same_pins_and_the_same_strict():
    import aws_cdk as cdk

    from ray_llm_eks.base import WorkerPool
    from ray_llm_eks.constructs import GpuDevicePlugins
    from ray_llm_eks.constructs.validation import ConstructValidationError

    stack = cdk.Stack(cdk.App(), "Pins")
    pools = [WorkerPool("prefill")]
    with pytest.raises(ConstructValidationError) as caught:
        GpuDevicePlugins(stack, "Strict", cluster=None, gpu_node_groups=pools, kubernetes_owner="gitops")
    assert [line.split(": ", 2)[1] for line in str(caught.value).splitlines()] == [
        "nvidia_image_digest", "efa_image_digest"]
    assert "Pins/Strict: nvidia_image_digest: strict mode refuses it: device plugin image" in str(caught.value)
    plugins = GpuDevicePlugins(stack, "Pinned", cluster=None, gpu_node_groups=pools, kubernetes_owner="gitops",
                               nvidia_image_digest=NVIDIA_DIGEST, efa_image_digest=EFA_DIGEST)
    assert plugins.nvidia_values["image"] == {"tag": f"v0.20.1@{NVIDIA_DIGEST}"}
    assert plugins.efa_values["image"] == {"tag": f"v0.5.13@{EFA_DIGEST}"}
    # With a digest, the chart's image.tag is the digest's: a value of the user's would contradict it.
    with pytest.raises(ConstructValidationError, match=r"nvidia_values\.image\.tag: set by nvidia_image_digest"):
        GpuDevicePlugins(stack, "Contradicted", cluster=None, gpu_node_groups=pools, kubernetes_owner="gitops",
                         nvidia_image_digest=NVIDIA_DIGEST, efa_image_digest=EFA_DIGEST,
                         nvidia_values={"image": {"tag": "v0.20.0"}})
    unpinned = GpuDevicePlugins(stack, "Unpinned", cluster=None, gpu_node_groups=pools, kubernetes_owner="gitops",
                                strict=False)
    assert "image" not in unpinned.nvidia_values and "image" not in unpinned.efa_values
