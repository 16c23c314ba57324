"""The escape hatches of the AWS constructs: Helm values merged through one helper, node-group
options on ``EfaGpuNodeGroup``, ``ConstructValidationError`` for every refusal, and
``construct_id`` as every construct's second parameter.

One stack (synthesized once for the module) holds a construct of each kind with the hatches
open; the refusals build into a second stack that is never synthesized.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from aws_cdk import assertions, aws_eks_v2 as eks
from constructs import Construct

import ray_llm_eks.constructs as constructs_package
from helpers.composition import cluster_stack
from ray_llm_eks.constructs import (
    ConstructValidationError, EfaFabric, EfaGpuNodeGroup, GpuDevicePlugins,
    KubeRayOperator, SystemNodeGroup,
)
from ray_llm_eks.constructs.addons import merge_helm_values
from ray_llm_eks.constructs.autoscaler import EXTRA_ARGS, NodeAutoscaler
from ray_llm_eks.base.errors import SpecError
from ray_llm_eks.testing import normalized_template

CONSTRUCTS_DIR = Path(constructs_package.__file__).parent
CHARTS_DIR = CONSTRUCTS_DIR.parent / "cdk8s_charts"
HELM = "Custom::AWSCDK-EKS-HelmChart"
NODEGROUP = "AWS::EKS::Nodegroup"


# --- the merge rule -------------------------------------------------------------------------


def test_mappings_merge_recursively_and_the_users_values_win():
    library = {"nodeSelector": {"role": "system"}, "resources": {"requests": {"cpu": "100m", "memory": "600Mi"}}}
    user = {"resources": {"requests": {"cpu": "250m"}}, "nodeSelector": {"zone": "a"}, "priorityClassName": "x"}
    assert merge_helm_values(library, user) == {
        "nodeSelector": {"role": "system", "zone": "a"},
        "resources": {"requests": {"cpu": "250m", "memory": "600Mi"}},
        "priorityClassName": "x",
    }


def test_anything_but_a_mapping_replaces_whole_and_none_removes():
    library = {"tolerations": [{"key": "a", "operator": "Exists"}], "extraArgs": {"v": "4", "x": "1"}, "wait": True}
    merged = merge_helm_values(library, {"tolerations": [{"key": "b"}], "extraArgs": {"x": None}, "wait": None,
                                         "new": None, "more": {"gone": None}})
    assert merged == {"tolerations": [{"key": "b"}], "extraArgs": {"v": "4"}, "more": {}}
    # A mapping over a leaf (and a leaf over a mapping) replaces too: no merging across kinds.
    assert merge_helm_values({"image": "x"}, {"image": {"tag": "v1"}}) == {"image": {"tag": "v1"}}
    assert merge_helm_values({"image": {"tag": "v1"}}, {"image": "y"}) == {"image": "y"}


def test_the_librarys_key_order_is_kept_and_nothing_is_changed_in_place():
    library = {"b": {"y": 1, "x": 2}, "a": 1}
    user = {"c": 3, "b": {"z": 0, "x": 9}}
    merged = merge_helm_values(library, user)
    assert list(merged) == ["b", "a", "c"] and list(merged["b"]) == ["y", "x", "z"]
    assert library == {"b": {"y": 1, "x": 2}, "a": 1} and user == {"c": 3, "b": {"z": 0, "x": 9}}
    merged["b"]["y"] = 7
    assert library["b"]["y"] == 1 and user["b"] == {"z": 0, "x": 9}
    # Without user values the result equals the library's, order included (so templates do not move).
    assert list(merge_helm_values(library, None).items()) == list(library.items())
    assert merge_helm_values(library, None) is not library


def test_the_merge_refuses_what_helm_cannot_read_and_reserved_keys():
    with pytest.raises(SpecError, match=r"^values: Helm values must be a mapping \(got \['a'\]\)"):
        merge_helm_values({}, ["a"])
    with pytest.raises(SpecError, match=r"^nvidia_values\.config: a Helm values key must be a string \(got 1\)"):
        merge_helm_values({}, {"config": {1: "x"}}, "nvidia_values")
    with pytest.raises(SpecError, match=r"^values\.rbac\.serviceAccount\.name: set by the owner \(got 'other'\)"):
        merge_helm_values({}, {"rbac": {"serviceAccount": {"name": "other"}}}, reserved={"rbac.serviceAccount.name": "the owner"})
    # A reserved key's parent is free to merge.
    assert merge_helm_values({"rbac": {"create": True}}, {"rbac": {"pspEnabled": False}},
                             reserved={"rbac.serviceAccount.name": "the owner"}) == {"rbac": {"create": True, "pspEnabled": False}}


# --- one stack with every hatch open, synthesized once --------------------------------------


@pytest.fixture(scope="module")
def hatches():
    stack, network, cluster = cluster_stack("Hatches")
    system = SystemNodeGroup(stack, "SystemNodes", cluster=cluster, subnet=network.data_plane_subnet)
    fabric = EfaFabric(stack, "Fabric", vpc=network.vpc)
    subnet = network.data_plane_subnet
    groups = {
        "plain": EfaGpuNodeGroup(stack, "Plain", cluster=cluster, subnet=subnet, fabric=fabric, role="prefill"),
        "explicit": EfaGpuNodeGroup(stack, "ExplicitDefaults", cluster=cluster, subnet=subnet, fabric=fabric,
                                    role="prefill", capacity_type=eks.CapacityType.ON_DEMAND, max_unavailable=None,
                                    max_unavailable_percentage=None, release_version=None),
        "spot": EfaGpuNodeGroup(stack, "Spot", cluster=cluster, subnet=subnet, fabric=fabric, role="decode",
                                min_size=0, desired_size=2, max_size=4, capacity_type="SPOT", max_unavailable=2,
                                release_version="1.35.3-20260301"),
        "percentage": EfaGpuNodeGroup(stack, "Percentage", cluster=cluster.cluster, subnet=subnet, fabric=fabric,
                                      role="decode", max_unavailable_percentage=50),
    }
    plugins = GpuDevicePlugins(
        stack, "DevicePlugins", cluster=cluster, gpu_node_groups=[groups["plain"], groups["spot"]], strict=False,
        nvidia_values={"nodeSelector": {"nvidia.com/gpu.present": None, "team": "ml"}, "tolerations": [{"operator": "Exists"}],
                       "config": {"map": {"default": "version: v1"}}},
        efa_values={"supportedInstanceLabels": {"values": ["p5.48xlarge"]}, "resources": {"requests": {"cpu": "20m"}}})
    kuberay = KubeRayOperator(stack, "KubeRay", cluster=cluster, system_nodes=system, watch_namespaces=["inference"],
                              values={"nodeSelector": {"zone": "a"}, "resources": {"limits": {"memory": "1Gi"}}})
    autoscaler = NodeAutoscaler(stack, "Autoscaler", cluster=cluster, system_nodes=system,
                                values={"extraArgs": {"scale-down-unneeded-time": "30m", "v": "4"},
                                        "image": {"pullPolicy": "Always"}, "podAnnotations": None})
    template = assertions.Template.from_stack(stack)
    normalized = normalized_template(template.to_json())
    return {"stack": stack, "groups": groups, "plugins": plugins, "kuberay": kuberay, "autoscaler": autoscaler,
            "template": template, "resources": normalized["Resources"]}


def _logical_id(hatches, construct) -> str:
    element = construct
    while not hasattr(element, "logical_id"):  # an L2 (or a CustomResource): descend to its L1
        element = element.node.default_child
    return hatches["stack"].get_logical_id(element)


def _properties(hatches, construct) -> dict:
    return hatches["resources"][_logical_id(hatches, construct)]["Properties"]


def test_each_chart_is_installed_with_the_merged_values(hatches):
    plugins, kuberay, autoscaler = hatches["plugins"], hatches["kuberay"], hatches["autoscaler"]
    nvidia = _properties(hatches, plugins.nvidia)["Values"]
    assert nvidia == {"nodeSelector": {"team": "ml"},
                      "tolerations": [{"operator": "Exists"}], "config": {"map": {"default": "version: v1"}}}
    assert nvidia == plugins.nvidia_values
    efa = _properties(hatches, plugins.efa)["Values"]
    assert efa["supportedInstanceLabels"] == {"keys": ["node.kubernetes.io/instance-type"], "values": ["p5.48xlarge"]}
    assert efa["resources"] == {"requests": {"cpu": "20m"}}
    assert efa["tolerations"] == [{"effect": "NoSchedule", "key": "ray-llm-eks/gpu-role", "operator": "Exists"}]
    assert _properties(hatches, kuberay.chart)["Values"] == {
        "nodeSelector": {"role": "system", "zone": "a"}, "resources": {"limits": {"memory": "1Gi"}},
        "singleNamespaceInstall": True, "watchNamespace": ["inference"]}
    values = _properties(hatches, autoscaler.chart)["Values"]
    assert values["extraArgs"] == {**EXTRA_ARGS, "scale-down-unneeded-time": "30m", "v": "4"}
    assert values["image"] == {"tag": "v1.35.0", "pullPolicy": "Always"}
    assert "podAnnotations" not in values and "podAnnotations" not in autoscaler.values  # a None is left out
    assert values["rbac"] == {"serviceAccount": {"create": True, "name": "cluster-autoscaler"}}


def test_node_group_options_at_their_defaults_change_nothing(hatches):
    plain = _properties(hatches, hatches["groups"]["plain"].nodegroup)
    explicit = _properties(hatches, hatches["groups"]["explicit"].nodegroup)
    for name in ("CapacityType", "UpdateConfig", "ReleaseVersion"):
        assert name not in plain and name not in explicit
    strip = ("LaunchTemplate", "NodeRole")  # references to each group's own launch template and role
    assert {k: v for k, v in plain.items() if k not in strip} == {k: v for k, v in explicit.items() if k not in strip}
    assert hatches["groups"]["plain"].capacity_type is eks.CapacityType.ON_DEMAND


def test_node_group_options_reach_the_node_group(hatches):
    template = hatches["template"]
    spot, percentage = hatches["groups"]["spot"], hatches["groups"]["percentage"]
    template.has_resource(NODEGROUP, {"Properties": assertions.Match.object_like({
        "CapacityType": "SPOT", "UpdateConfig": {"MaxUnavailable": 2}, "ReleaseVersion": "1.35.3-20260301",
        "ScalingConfig": {"DesiredSize": 2, "MaxSize": 4, "MinSize": 0}})})
    assert _logical_id(hatches, spot.nodegroup) in template.find_resources(
        NODEGROUP, {"Properties": {"CapacityType": "SPOT"}})
    assert _properties(hatches, percentage.nodegroup)["UpdateConfig"] == {"MaxUnavailablePercentage": 50}
    assert "CapacityType" not in _properties(hatches, percentage.nodegroup)
    assert spot.capacity_type is eks.CapacityType.SPOT


# --- refusals: the construct path, the field, the value, what is accepted -------------------


@pytest.fixture(scope="module")
def refusals():
    stack, network, cluster = cluster_stack("Refusals")
    return stack, network, cluster


@pytest.mark.parametrize(("props", "message"), [
    ({"capacity_type": eks.CapacityType.CAPACITY_BLOCK},
     r"capacity_type: a Capacity Block node group needs its launch template to target the reservation .*"
     r"\(got 'CAPACITY_BLOCK'\); accepted: ON_DEMAND or SPOT, or capacity=Capacity\(type='capacity-block'"),
    ({"capacity_type": "spot"}, r"capacity_type: not an EKS capacity type \(got 'spot'\)"),
    ({"max_unavailable": 2}, r"max_unavailable: .* at most max_size \(got 2\); accepted: a whole number from 1 to 1"),
    ({"max_unavailable_percentage": 0}, r"max_unavailable_percentage: .*\(got 0\); accepted: a whole number from 1 to 100"),
    ({"max_unavailable": 1, "max_unavailable_percentage": 50},
     r"max_unavailable: give max_unavailable or max_unavailable_percentage, not both"),
    ({"release_version": "v20260301"}, r"release_version: not an EKS-optimized AMI release version \(got 'v20260301'\)"),
    ({"release_version": "1.34.2-20260301"},
     r"release_version: an AMI release for Kubernetes 1.34, but the cluster runs 1.35 .*accepted: a 1.35.x release"),
])
def test_gpu_node_group_refuses_node_group_options_out_of_range(refusals, props, message):
    stack, network, cluster = refusals
    construct_id = f"Options{len(stack.node.children)}"
    with pytest.raises(ConstructValidationError, match=message) as caught:
        EfaGpuNodeGroup(stack, construct_id, cluster=cluster, subnet=network.data_plane_subnet, role="decode", **props)
    assert str(caught.value).startswith(f"Refusals/{construct_id}: ")


def test_gpu_node_group_reports_every_option_problem_at_once(refusals):
    stack, network, cluster = refusals
    with pytest.raises(ConstructValidationError) as caught:
        EfaGpuNodeGroup(stack, "Everything", cluster=cluster, subnet=network.data_plane_subnet, role="decode",
                        capacity_type="CAPACITY_BLOCK", max_unavailable=5, release_version="latest")
    assert [error.field for error in caught.value.errors] == ["capacity_type", "max_unavailable", "release_version"]


@pytest.mark.parametrize(("build", "message"), [
    (lambda stack, cluster: KubeRayOperator(stack, "KubeRayWatch", cluster=cluster, values={"watchNamespace": ["x"]}),
     r"^Refusals/KubeRayWatch: values\.watchNamespace: set by watch_namespaces, which RayLlmServing reads"),
    (lambda stack, cluster: KubeRayOperator(stack, "KubeRayList", cluster=cluster, values=[("nodeSelector", {})]),
     r"^Refusals/KubeRayList: values: Helm values must be a mapping"),
    (lambda stack, cluster: NodeAutoscaler(stack, "AutoscalerName", cluster=cluster,
                                           values={"rbac": {"serviceAccount": {"name": "mine"}}}),
     r"^Refusals/AutoscalerName: values\.rbac\.serviceAccount\.name: set by the construct: the Pod Identity"),
    (lambda stack, cluster: NodeAutoscaler(stack, "AutoscalerCluster", cluster=cluster,
                                           values={"autoDiscovery": {"clusterName": "other"}}),
     r"^Refusals/AutoscalerCluster: values\.autoDiscovery\.clusterName: set by the construct"),
])
def test_helm_constructs_refuse_values_that_would_contradict_them(refusals, build, message):
    stack, _, cluster = refusals
    with pytest.raises(ConstructValidationError, match=message):
        build(stack, cluster)


def test_device_plugins_refuse_an_empty_node_group_list_and_bad_keys(refusals):
    from ray_llm_eks.base import WorkerPool
    stack, _, cluster = refusals
    with pytest.raises(ConstructValidationError, match=r"^Refusals/NoGroups: gpu_node_groups: empty \(got \[\]\)"):
        GpuDevicePlugins(stack, "NoGroups", cluster=cluster, gpu_node_groups=[])
    with pytest.raises(ConstructValidationError,
                       match=r"^Refusals/BadKey: efa_values\.resources: a Helm values key must be a string"):
        GpuDevicePlugins(stack, "BadKey", cluster=cluster, gpu_node_groups=[WorkerPool("prefill")],
                         efa_values={"resources": {("cpu",): "1"}})


def test_a_placement_group_the_fabric_lacks_is_a_construct_validation_error(refusals):
    stack, network, cluster = refusals
    fabric = EfaFabric(stack, "Flat", vpc=network.vpc, placement_group=False)
    with pytest.raises(ConstructValidationError, match=r"^Refusals/Placed: placement_group: the fabric has no placement group"):
        EfaGpuNodeGroup(stack, "Placed", cluster=cluster, subnet=network.data_plane_subnet, role="prefill", fabric=fabric)


# --- the package as a whole -----------------------------------------------------------------


def _construct_classes():
    """Every construct class of the AWS constructs and of the charts (cdk8s builds on the same
    ``constructs.Construct``)."""
    for package, folder in (("ray_llm_eks.constructs", CONSTRUCTS_DIR), ("ray_llm_eks.cdk8s_charts", CHARTS_DIR)):
        yield from _classes_of(package, folder)


def _classes_of(package: str, folder: Path):
    for module_info in pkgutil.iter_modules([str(folder)]):
        module = importlib.import_module(f"{package}.{module_info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Construct) and cls.__module__ == module.__name__:
                yield cls


def test_every_construct_takes_construct_id_second():
    classes = list(_construct_classes())
    assert len(classes) >= 18
    for cls in classes:
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:3]
        assert [p.name for p in parameters] == ["scope", "construct_id"], cls.__qualname__
        assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters), cls.__qualname__


def test_no_bare_value_error_is_raised_in_the_constructs_package():
    raised = []
    for path in sorted(CONSTRUCTS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(target, ast.Name) and target.id in {"ValueError", "TypeError", "RuntimeError"}:
                    raised.append(f"{path.name}:{node.lineno}")
    assert raised == []
