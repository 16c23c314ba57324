"""Each construct refuses bad input at construction, with a message naming what to change;
and an app of the user's own composes them (examples/existing_vpc)."""

from __future__ import annotations

import json

import pytest
from aws_cdk import aws_ec2 as ec2

from helpers.composition import cluster_stack
from ray_llm_eks.constructs import EfaFabric, EfaGpuNodeGroup, GpuDevicePlugins, InferenceCluster, InferenceVpc, SystemNodeGroup
from ray_llm_eks.base import WorkerPool


@pytest.fixture(scope="module")
def base():
    """One stack with a VPC and a cluster; each test adds (and fails to add) one construct."""
    stack, network, cluster = cluster_stack("Refusals")
    return stack, network, cluster


@pytest.mark.parametrize(
    ("instance_type", "message"),
    [("m7i.xlarge", "has no GPU"), ("g6.xlarge", "does not support EFA"), ("x9.mega", "not in the library's instance table")],
)
def test_gpu_node_group_refuses_instance_types_without_gpu_or_efa(base, instance_type, message):
    stack, network, cluster = base
    with pytest.raises(ValueError, match=message) as caught:
        EfaGpuNodeGroup(stack, f"Bad-{instance_type}", cluster=cluster.cluster, subnet=network.data_plane_subnet,
                        role="prefill", instance_type=instance_type)
    # aws-cdk-lib's ValidationError manner: the construct path, then the field, the value, what is accepted.
    assert str(caught.value).startswith(f"Refusals/Bad-{instance_type}: instance_type: ")
    assert f"(got '{instance_type}')" in str(caught.value) and "g6.8xlarge" in str(caught.value)


def test_gpu_node_group_refuses_a_placement_group_its_fabric_lacks(base):
    stack, network, cluster = base
    fabric = EfaFabric(stack, "NoPlacement", vpc=network.vpc, placement_group=False)
    with pytest.raises(ValueError, match="fabric has no placement group"):
        EfaGpuNodeGroup(stack, "WantsPlacement", cluster=cluster, subnet=network.data_plane_subnet,
                        role="prefill", fabric=fabric)


def test_gpu_node_group_refuses_unknown_roles_and_unordered_sizes(base):
    stack, network, cluster = base
    with pytest.raises(ValueError, match="Refusals/BadRole: role: not a worker role \\(got 'router'\\)"):
        EfaGpuNodeGroup(stack, "BadRole", cluster=cluster.cluster, subnet=network.data_plane_subnet, role="router")
    with pytest.raises(ValueError, match="Refusals/BadSizes: desired_size: sizes must satisfy min_size <= desired_size <= max_size"):
        EfaGpuNodeGroup(stack, "BadSizes", cluster=cluster.cluster, subnet=network.data_plane_subnet,
                        role="decode", min_size=1, desired_size=3, max_size=2)
    with pytest.raises(ValueError, match="Refusals/MinAboveMax: min_size: min_size is above max_size \\(1\\)"):
        EfaGpuNodeGroup(stack, "MinAboveMax", cluster=cluster.cluster, subnet=network.data_plane_subnet,
                        role="decode", min_size=2, desired_size=1, max_size=1)


def test_system_node_group_refuses_a_gpu_instance(base):
    stack, network, cluster = base
    with pytest.raises(ValueError, match="has a GPU"):
        SystemNodeGroup(stack, "BadSystem", cluster=cluster.cluster, subnet=network.data_plane_subnet, instance_type="g6.8xlarge")


def test_vpc_existing_xor_props(base):
    stack, network, _ = base
    with pytest.raises(ValueError, match="Refusals/Both: cidr: give either an existing vpc or the props to create one, not both; with vpc set, remove: cidr, nat_gateways"):
        InferenceVpc(stack, "Both", data_plane_az="us-west-2a", vpc=network.vpc,
                     data_plane_subnet=network.data_plane_subnet, cidr="10.1.0.0/16", nat_gateways=1)
    with pytest.raises(ValueError, match="Refusals/VpcOnly: data_plane_subnet: an existing VPC needs both vpc and data_plane_subnet"):
        InferenceVpc(stack, "VpcOnly", data_plane_az="us-west-2a", vpc=network.vpc)
    with pytest.raises(ValueError, match="Refusals/OneAz: availability_zones: EKS needs subnets in at least two"):
        InferenceVpc(stack, "OneAz", data_plane_az="us-west-2a", availability_zones=["us-west-2a"])
    with pytest.raises(ValueError, match="Refusals/ElsewhereAz: data_plane_az: not one of availability_zones"):
        InferenceVpc(stack, "ElsewhereAz", data_plane_az="us-west-2c", availability_zones=["us-west-2a", "us-west-2b"])
    other_az = network.vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=["us-west-2b"]).subnets[0]
    with pytest.raises(ValueError, match="Refusals/WrongSubnet: data_plane_subnet: the subnet is not in data_plane_az us-west-2a \\(got 'us-west-2b'\\)"):
        InferenceVpc(stack, "WrongSubnet", data_plane_az="us-west-2a", vpc=network.vpc, data_plane_subnet=other_az)


def test_cluster_refuses_versions_without_a_kubectl_layer_and_unknown_options(base):
    stack, network, _ = base
    with pytest.raises(ValueError, match="Refusals/Old: kubernetes_version: .*\\(got '1.30'\\); accepted: 1.35"):
        InferenceCluster(stack, "Old", vpc=network.vpc, kubernetes_version="1.30")
    with pytest.raises(ValueError, match="Refusals/Open: endpoint_access: .*\\(got 'internet'\\)"):
        InferenceCluster(stack, "Open", vpc=network.vpc, endpoint_access="internet")
    with pytest.raises(ValueError, match="Refusals/Logs: control_plane_logs: .*everything"):
        InferenceCluster(stack, "Logs", vpc=network.vpc, control_plane_logs=["everything"])


def test_device_plugins_refuse_the_nvidia_versions_that_break_efa(base):
    stack, _, cluster = base
    with pytest.raises(ValueError, match="MOFED"):
        GpuDevicePlugins(stack, "Broken", cluster=cluster.cluster, gpu_node_groups=[WorkerPool("prefill")],
                         nvidia_chart_version="0.19.2")


def test_example_app_uses_the_existing_vpc_and_its_own_node_types(example):
    stack, template, outdir = example
    resources = template["Resources"]
    assert sum(r["Type"] == "AWS::EC2::VPC" for r in resources.values()) == 1  # the platform's, none of ours
    nodegroups = {r["Properties"]["Labels"]["role"]: r["Properties"] for r in resources.values() if r["Type"] == "AWS::EKS::Nodegroup"}
    assert nodegroups["prefill"]["InstanceTypes"] == ["g6e.12xlarge"]  # given as ec2.InstanceType
    assert nodegroups["decode"]["InstanceTypes"] == ["g6.12xlarge"]
    assert nodegroups["decode"]["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}
    subnets = {json.dumps(n["Subnets"]) for n in nodegroups.values()}
    assert len(subnets) == 1  # every node in the one data-plane subnet
    cluster = next(r for r in resources.values() if r["Type"] == "AWS::EKS::Cluster")["Properties"]
    assert cluster["ResourcesVpcConfig"]["EndpointPublicAccess"] is False


def _example_objects(stack) -> dict:
    import cdk8s

    objects = [o for chart in stack.serving.charts for o in cdk8s.Testing.synth(chart)]
    (ray_service,) = [o for o in objects if o["kind"] == "RayService"]
    return ray_service


def test_example_app_pods_match_its_node_groups(example):
    import yaml

    from ray_llm_eks.base import sizing

    stack, _, _ = example
    ray_service = _example_objects(stack)
    groups = {g["groupName"]: g for g in ray_service["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    legs = yaml.safe_load(ray_service["spec"]["serveConfigV2"])["applications"][0]["args"]
    for role, node_group, nodes in (("prefill", stack.prefill, 1), ("decode", stack.decode, 2)):
        group = groups[role]
        (container,) = group["template"]["spec"]["containers"]
        limits = container["resources"]["limits"]
        instance = node_group.pool.instance
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (nodes, nodes, nodes)
        assert limits["nvidia.com/gpu"] == instance.gpus == 4
        assert group["rayStartParams"]["num-gpus"] == "4"
        assert limits["memory"] == sizing.worker_resources(instance).memory_quantity
        assert int(limits["cpu"]) < instance.vcpus
        assert group["template"]["spec"]["nodeSelector"] == {"role": role}
        assert group["template"]["spec"]["tolerations"][0]["value"] == role
        # GPUs / tensor parallel x nodes model replicas, one NIXL listener port each.
        leg = legs[f"{role}_config"]
        assert leg["deployment_config"]["num_replicas"] == 4 // 2 * nodes
        nixl = [p["containerPort"] for p in container["ports"] if p["name"].startswith("nixl")]
        assert len(nixl) == 4 // 2 * nodes
        assert container["image"] == "763104351884.dkr.ecr.us-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
    assert legs["prefill_config"]["accelerator_type"] == "L40S"
    assert legs["decode_config"]["accelerator_type"] == "L4"


def test_example_app_applies_the_charts_after_kuberay_and_the_device_plugins(example):
    stack, template, _ = example
    resources = template["Resources"]
    helm = {r["Properties"]["Chart"]: lid for lid, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"}
    manifest = stack.get_logical_id(stack.serving.manifests["serving-rayservice"].node.default_child)
    assert {helm["kuberay-operator"], helm["nvidia-device-plugin"], helm["aws-efa-k8s-device-plugin"]} <= set(
        resources[manifest]["DependsOn"])
    efa_values = json.loads(resources[helm["aws-efa-k8s-device-plugin"]]["Properties"]["Values"])
    assert efa_values["supportedInstanceLabels"]["values"] == ["g6.12xlarge", "g6e.12xlarge"]


def test_example_app_orders_addons_and_nodes_through_the_constructs(example):
    _, template, _ = example
    resources = template["Resources"]
    addons = {r["Properties"]["AddonName"]: lid for lid, r in resources.items() if r["Type"] == "AWS::EKS::Addon"}
    nodegroups = {r["Properties"]["Labels"]["role"]: lid for lid, r in resources.items() if r["Type"] == "AWS::EKS::Nodegroup"}
    for lid in nodegroups.values():
        assert addons["vpc-cni"] in resources[lid]["DependsOn"]
    assert nodegroups["system"] in resources[addons["coredns"]]["DependsOn"]
    efa_groups = {json.dumps(r["Properties"]["LaunchTemplateData"]["NetworkInterfaces"][0]["Groups"])
                  for r in resources.values() if r["Type"] == "AWS::EC2::LaunchTemplate"
                  and "NetworkInterfaces" in r["Properties"]["LaunchTemplateData"]}
    assert len(efa_groups) == 1


def test_example_app_passes_cdk_nag(example):
    _, _, outdir = example
    report = json.loads((outdir / "validation-report.json").read_text())
    assert all(p["conclusion"] == "success" for p in report["pluginReports"])


def test_misused_props_outside_the_battery_name_the_construct_path_and_the_field(base):
    """Misuses the configuration cannot make (its parser has no such prop), each refused with the
    construct path, the field, the value and what is accepted, never an AttributeError or a jsii trace."""
    from ray_llm_eks.constructs import InferenceObservability, KubeRayOperator

    stack, network, cluster = base
    with pytest.raises(ValueError, match=r"^Refusals/NoServing: serving: not a RayLlmServing \(got None\); accepted: "):
        InferenceObservability(stack, "NoServing", serving=None)
    with pytest.raises(ValueError, match=r"^Refusals/OneNamespace: watch_namespaces: not a list \(got 'inference'\); "
                                         r"accepted: a list such as \[inference\]"):
        KubeRayOperator(stack, "OneNamespace", cluster=cluster, watch_namespaces="inference")
    with pytest.raises(ValueError, match=r"^Refusals/Typo: model: unknown field\(s\) of ModelSpec \(got \['max_len'\]\); "
                                         r"accepted: source, served_name, "):
        from ray_llm_eks.base import WorkerPool
        from ray_llm_eks.constructs import RayLlmServing

        RayLlmServing(stack, "Typo", cluster=cluster, prefill=WorkerPool("prefill"), decode=WorkerPool("decode"),
                      model={"max_len": 4096})
    with pytest.raises(ValueError, match=r"^Refusals/ExistingVpc: data_plane_az: region us-west-2 has no availability "
                                         r"zone us-west-2q"):
        InferenceVpc(stack, "ExistingVpc", data_plane_az="us-west-2q", vpc=network.vpc,
                     data_plane_subnet=network.data_plane_subnet)
