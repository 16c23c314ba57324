"""Fine-grained assertions on the AWS half (issue 3): one test per fact, each fact's source cited
where the construct states it (``ray_llm_eks/constructs``)."""

from __future__ import annotations

import json

import pytest

from helpers.synthesis import launch_template_of, nodegroups_by_role
from ray_llm_eks.base import GPU_TAINT_KEY


def single(resources: dict) -> dict:
    assert len(resources) == 1, list(resources)
    return next(iter(resources.values()))


def props(resource: dict) -> dict:
    return resource["Properties"]


ADMIN_ROLE_ARN = "arn:aws:iam::123456789012:role/platform-admins"
CUSTOM_CLUSTER = {
    "network": {"flow_log_retention_days": 7, "nat_gateways": 2},
    "cluster": {"control_plane_log_retention_days": 365, "endpoint_access": "public-and-private",
                "public_access_cidrs": ["203.0.113.0/24"], "admin_role_arn": ADMIN_ROLE_ARN},
}
"""The network and cluster options set away from their defaults in one build (each test below reads
its own option; none of them touches another's resources), so they cost one synthesis, not four."""


# --- VPC ---------------------------------------------------------------------------------


def test_vpc_spans_two_azs_with_public_and_private_subnets(default):
    subnets = default.resources("AWS::EC2::Subnet")
    assert sorted(props(s)["AvailabilityZone"] for s in subnets.values()) == [
        "us-west-2a", "us-west-2a", "us-west-2b", "us-west-2b",
    ]
    public = [s for s in subnets.values() if props(s)["MapPublicIpOnLaunch"]]
    assert len(public) == 2


def test_one_nat_gateway_in_the_data_plane_az(default):
    nat = single(default.resources("AWS::EC2::NatGateway"))
    subnet_id = props(nat)["SubnetId"]["Ref"]
    subnet = default.template_json["Resources"][subnet_id]
    assert props(subnet)["AvailabilityZone"] == "us-west-2a"
    assert props(subnet)["MapPublicIpOnLaunch"] is True


def test_vpc_flow_logs_go_to_cloudwatch_with_configured_retention(default, synth):
    flow_log = single(default.resources("AWS::EC2::FlowLog"))
    assert props(flow_log)["LogDestinationType"] == "cloud-watch-logs"
    assert props(flow_log)["TrafficType"] == "ALL"
    group_id = props(flow_log)["LogGroupName"]["Ref"]
    assert props(default.template_json["Resources"][group_id])["RetentionInDays"] == 30

    custom = synth(CUSTOM_CLUSTER)
    flow_log = single(custom.resources("AWS::EC2::FlowLog"))
    assert props(custom.template_json["Resources"][props(flow_log)["LogGroupName"]["Ref"]])["RetentionInDays"] == 7
    assert len(custom.resources("AWS::EC2::NatGateway")) == 2


def test_data_plane_subnet_is_the_private_subnet_in_the_data_plane_az(default):
    subnet = default.stack.network.data_plane_subnet
    assert subnet.availability_zone == "us-west-2a"
    assert default.stack.network.data_plane_subnets.subnets == [subnet]
    resource = default.template_json["Resources"][default.logical_id(subnet)]
    assert props(resource)["MapPublicIpOnLaunch"] is False


# --- Cluster -----------------------------------------------------------------------------


def test_cluster_is_kubernetes_1_35_with_managed_node_groups_only(default):
    cluster = props(single(default.resources("AWS::EKS::Cluster")))
    assert cluster["Version"] == "1.35"
    assert cluster["BootstrapSelfManagedAddons"] is False
    # No Auto Mode: no compute config, no auto-mode storage or load-balancing.
    assert "ComputeConfig" not in cluster or cluster["ComputeConfig"].get("Enabled") is False
    assert default.stack.cluster.cluster.default_nodegroup is None


def test_control_plane_logging_api_audit_authenticator(default):
    cluster = props(single(default.resources("AWS::EKS::Cluster")))
    enabled = cluster["Logging"]["ClusterLogging"]["EnabledTypes"]
    assert sorted(t["Type"] for t in enabled) == ["api", "audit", "authenticator"]


def test_control_plane_logs_expire_after_the_configured_retention(default, synth):
    """EKS creates /aws/eks/<name>/cluster without retention; LogRetention sets it on that group."""
    (cluster_id,) = default.resources("AWS::EKS::Cluster")
    retention = props(single({k: r for k, r in default.resources("Custom::LogRetention").items()
                              if k.startswith("ClusterControlPlane")}))
    assert retention["LogGroupName"] == {"Fn::Join": ["", ["/aws/eks/", {"Ref": cluster_id}, "/cluster"]]}
    assert retention["RetentionInDays"] == 90
    custom = synth(CUSTOM_CLUSTER)
    assert props(single({k: r for k, r in custom.resources("Custom::LogRetention").items()
                         if k.startswith("ClusterControlPlane")}))["RetentionInDays"] == 365


def test_the_endpoint_is_private_by_default_and_public_only_for_named_cidrs(default, synth):
    access = props(single(default.resources("AWS::EKS::Cluster")))["ResourcesVpcConfig"]
    assert access["EndpointPublicAccess"] is False
    assert access["EndpointPrivateAccess"] is True
    assert "PublicAccessCidrs" not in access

    opened = synth(CUSTOM_CLUSTER)
    access = props(single(opened.resources("AWS::EKS::Cluster")))["ResourcesVpcConfig"]
    assert (access["EndpointPublicAccess"], access["EndpointPrivateAccess"]) == (True, True)
    assert access["PublicAccessCidrs"] == ["203.0.113.0/24"]


def test_the_kubectl_handler_runs_in_the_vpc_so_a_private_endpoint_is_reachable(default):
    handlers = [r for logical_id, r in default.resources("AWS::Lambda::Function").items()
                if "KubectlProvider" in logical_id and "Handler" in logical_id]
    assert handlers, "the kubectl handler must be placed in the VPC"
    for handler in handlers:
        assert props(handler)["VpcConfig"]["SubnetIds"] and props(handler)["VpcConfig"]["SecurityGroupIds"]


def test_the_vpc_cni_enforces_network_policy_in_strict_mode(default):
    """Strict: a new pod starts denied until its policies are programmed, not open (constructs.cluster)."""
    (cni,) = [r for r in default.resources("AWS::EKS::Addon").values() if props(r)["AddonName"] == "vpc-cni"]
    assert json.loads(props(cni)["ConfigurationValues"]) == {
        "enableNetworkPolicy": "true", "env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}


def _manifests(default) -> dict[str, list[dict]]:
    return {logical_id: default.manifest_objects(logical_id)
            for logical_id in default.resources("Custom::AWSCDK-EKS-KubernetesResource")}


def test_under_strict_mode_every_system_namespace_with_pods_has_a_policy_before_its_pods(default):
    """kube-system (CoreDNS, device plugins, Cluster Autoscaler), the operator's and the CloudWatch
    agent's namespaces: a policy admitting all, applied before what runs there."""
    from ray_llm_eks.constructs.cluster import OPEN_NAMESPACE_POLICY

    opened = {}
    for logical_id, objects in _manifests(default).items():
        for obj in objects:
            if obj["kind"] == "NetworkPolicy" and obj["metadata"]["name"] == OPEN_NAMESPACE_POLICY:
                assert obj["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                                       "ingress": [{}], "egress": [{}]}
                opened[obj["metadata"]["namespace"]] = logical_id
    assert set(opened) == {"kube-system", "kuberay", "amazon-cloudwatch"}
    resources = default.template_json["Resources"]
    dns = next(i for i, r in default.resources("AWS::EKS::Addon").items() if props(r)["AddonName"] == "coredns")
    assert opened["kube-system"] in resources[dns].get("DependsOn", [])
    helm = [i for i, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
            and props(r).get("Chart") == "kuberay-operator"]
    assert helm and opened["kuberay"] in resources[helm[0]].get("DependsOn", [])
    cloudwatch = next(i for i, r in default.resources("AWS::EKS::Addon").items()
                      if props(r)["AddonName"] == "amazon-cloudwatch-observability")
    assert opened["amazon-cloudwatch"] in resources[cloudwatch].get("DependsOn", [])


def test_the_cloudformation_role_does_not_become_cluster_admin(default):
    cluster = props(single(default.resources("AWS::EKS::Cluster")))
    assert cluster["AccessConfig"]["BootstrapClusterCreatorAdminPermissions"] is False


def test_kubectl_layer_is_v35_and_used_by_the_kubectl_handler(default):
    from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer

    layer = default.stack.cluster.node.find_child("KubectlLayer")
    assert isinstance(layer, KubectlV35Layer)
    layer_id = default.logical_id(layer)
    handlers = [f for f in default.resources("AWS::Lambda::Function").values() if {"Ref": layer_id} in props(f).get("Layers", [])]
    assert len(handlers) == 1


def test_core_addons_are_eks_managed_addons(default):
    names = sorted(props(a)["AddonName"] for a in default.resources("AWS::EKS::Addon").values())
    # The core four, and the CloudWatch Observability add-on (observability, on by default).
    assert names == ["amazon-cloudwatch-observability", "coredns", "eks-pod-identity-agent", "kube-proxy", "vpc-cni"]


def test_nodes_wait_for_networking_addons_and_coredns_waits_for_a_node(default):
    resources = default.template_json["Resources"]
    addons = {props(a)["AddonName"]: logical_id for logical_id, a in default.resources("AWS::EKS::Addon").items()}
    for logical_id, nodegroup in default.resources("AWS::EKS::Nodegroup").items():
        for name in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent"):
            assert addons[name] in nodegroup.get("DependsOn", []), (logical_id, name)
    system = default.logical_id(default.stack.system_nodes.nodegroup)
    assert system in resources[addons["coredns"]]["DependsOn"]


def test_node_roles_drop_the_cni_policy_only_after_the_cni_has_its_own_role(default):
    """Upgrading a stack whose nodes still carry AmazonEKS_CNI_Policy: the role update waits for
    the add-on's Pod Identity association, so aws-node is never left without permissions."""
    resources = default.template_json["Resources"]
    addons = {props(a)["AddonName"]: logical_id for logical_id, a in default.resources("AWS::EKS::Addon").items()}
    assert props(resources[addons["vpc-cni"]])["PodIdentityAssociations"][0]["ServiceAccount"] == "aws-node"
    node_roles = {props(n)["NodeRole"]["Fn::GetAtt"][0] for n in default.resources("AWS::EKS::Nodegroup").values()}
    assert len(node_roles) == 3
    for role in node_roles:
        assert addons["vpc-cni"] in resources[role].get("DependsOn", []), role
        assert not any("AmazonEKS_CNI_Policy" in json.dumps(p) for p in props(resources[role])["ManagedPolicyArns"])


def test_admin_role_gets_cluster_admin_through_an_access_entry(default, synth):
    # By default the only access entry is the one aws-cdk-lib gives its kubectl handler.
    principals = [props(e)["PrincipalArn"] for e in default.resources("AWS::EKS::AccessEntry").values()]
    assert len(principals) == 1 and "KubectlProviderHandler" in json.dumps(principals)
    arn = ADMIN_ROLE_ARN
    with_admin = synth(CUSTOM_CLUSTER)
    entries = [props(e) for e in with_admin.resources("AWS::EKS::AccessEntry").values() if props(e)["PrincipalArn"] == arn]
    assert len(entries) == 1
    policies = [p["PolicyArn"] for p in entries[0]["AccessPolicies"]]
    assert any("AmazonEKSClusterAdminPolicy" in json.dumps(p) for p in policies)
    assert entries[0]["AccessPolicies"][0]["AccessScope"]["Type"] == "cluster"


# --- Node groups -------------------------------------------------------------------------


def test_three_node_groups_system_prefill_decode(default):
    assert sorted(nodegroups_by_role(default)) == ["decode", "prefill", "system"]


def test_system_node_group(default):
    system = nodegroups_by_role(default)["system"]
    assert system["InstanceTypes"] == ["m7i.xlarge"]
    assert system["AmiType"] == "AL2023_x86_64_STANDARD"
    assert system["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 1, "MaxSize": 1}
    assert system["Labels"] == {"role": "system"}
    assert "Taints" not in system
    data_plane = default.logical_id(default.stack.network.data_plane_subnet)
    assert system["Subnets"] == [{"Ref": data_plane}]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_gpu_node_group_ami_labels_taint_sizes_and_single_subnet(default, role):
    group = nodegroups_by_role(default)[role]
    assert group["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert group["InstanceTypes"] == ["g6.8xlarge"]
    assert group["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 1, "MaxSize": 1}
    assert group["Labels"] == {"role": role, "nvidia.com/gpu.present": "true"}
    assert group["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": GPU_TAINT_KEY, "Value": role}]
    data_plane = default.logical_id(default.stack.network.data_plane_subnet)
    assert group["Subnets"] == [{"Ref": data_plane}]
    assert "DiskSize" not in group  # sized in the launch template instead
    assert "RemoteAccess" not in group


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_gpu_launch_template_has_one_efa_interface_at_card_0_device_0_with_both_security_groups(default, role):
    # g6.8xlarge has one network card: one ``efa`` interface (EFA with ENA) at card 0 device 0, as
    # eksctl's efaEnabled renders it (InstanceType.network_interfaces); no ENA-plus-EFA-only pair,
    # which the EC2 guide recommends for multi-card types only.
    data = launch_template_of(default, nodegroups_by_role(default)[role])
    assert "SecurityGroupIds" not in data and "SecurityGroups" not in data
    (efa,) = data["NetworkInterfaces"]
    assert (efa["NetworkCardIndex"], efa["DeviceIndex"], efa["InterfaceType"]) == (0, 0, "efa")
    efa_sg = default.logical_id(default.stack.gpu_node_groups[role].efa_security_group)
    cluster_id = default.logical_id(default.stack.cluster.cluster)
    assert "SubnetId" not in efa and "PrivateIpAddress" not in efa
    assert efa["DeleteOnTermination"] is True
    # The node's only interface carries its IP traffic too: the cluster group (which EKS no
    # longer adds once a launch template names a group) beside the EFA group.
    assert efa["Groups"] == [
        {"Fn::GetAtt": [cluster_id, "ClusterSecurityGroupId"]},
        {"Fn::GetAtt": [efa_sg, "GroupId"]},
    ]


def test_prefill_and_decode_share_one_efa_security_group_open_only_to_itself(default):
    efa_groups = {default.logical_id(g.efa_security_group) for g in default.stack.gpu_node_groups.values()}
    assert len(efa_groups) == 1  # the KV cache crosses roles, so both roles must be members
    (sg_id,) = efa_groups
    sg = props(default.template_json["Resources"][sg_id])
    # allow_all_outbound=False: no 0.0.0.0/0 egress on the EFA group, only the self-reference.
    assert all(rule.get("CidrIp") != "0.0.0.0/0" for rule in sg.get("SecurityGroupEgress", []))
    self_ref = {"Fn::GetAtt": [sg_id, "GroupId"]}
    default.template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"IpProtocol": "-1", "GroupId": self_ref, "SourceSecurityGroupId": self_ref},
    )
    default.template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress",
        {"IpProtocol": "-1", "GroupId": self_ref, "DestinationSecurityGroupId": self_ref},
    )


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_gpu_root_volume_is_encrypted_gp3_sized_in_the_launch_template(default, role):
    data = launch_template_of(default, nodegroups_by_role(default)[role])
    (mapping,) = data["BlockDeviceMappings"]
    assert mapping["DeviceName"] == "/dev/xvda"
    assert mapping["Ebs"] == {
        "VolumeType": "gp3", "VolumeSize": 200, "Throughput": 1000, "Iops": 16000,
        "Encrypted": True, "DeleteOnTermination": True,
    }


@pytest.mark.parametrize("role", ["system", "prefill", "decode"])
def test_imdsv2_required_with_hop_limit_one(default, role):
    data = launch_template_of(default, nodegroups_by_role(default)[role])
    assert data["MetadataOptions"] == {"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 1}


def test_one_cluster_placement_group_for_both_roles_on_by_default_and_optional(default, synth):
    groups = default.resources("AWS::EC2::PlacementGroup")
    assert [props(g)["Strategy"] for g in groups.values()] == ["cluster"]
    (group_id,) = groups
    for role in ("prefill", "decode"):
        data = launch_template_of(default, nodegroups_by_role(default)[role])
        assert data["Placement"]["GroupName"] == {"Fn::GetAtt": [group_id, "GroupName"]}

    without = synth({"prefill": {"placement_group": False}, "decode": {"placement_group": False}})
    assert without.resources("AWS::EC2::PlacementGroup") == {}
    assert "Placement" not in launch_template_of(without, nodegroups_by_role(without)["prefill"])

    decode_only = synth({"prefill": {"placement_group": False}})
    assert len(decode_only.resources("AWS::EC2::PlacementGroup")) == 1
    assert "Placement" not in launch_template_of(decode_only, nodegroups_by_role(decode_only)["prefill"])
    assert "Placement" in launch_template_of(decode_only, nodegroups_by_role(decode_only)["decode"])


def test_sizes_and_instance_type_come_from_config(synth):
    custom = synth({
        "decode": {"instance_type": "g6e.8xlarge", "min_size": 1, "desired_size": 2, "max_size": 3,
                   "root_volume": {"size_gib": 300, "throughput_mibps": 500, "iops": 6000}},
    })
    decode = nodegroups_by_role(custom)["decode"]
    assert decode["InstanceTypes"] == ["g6e.8xlarge"]
    assert decode["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 2, "MaxSize": 3}
    ebs = launch_template_of(custom, decode)["BlockDeviceMappings"][0]["Ebs"]
    assert (ebs["VolumeSize"], ebs["Throughput"], ebs["Iops"]) == (300, 500, 6000)


# --- ECR access --------------------------------------------------------------------------


def test_every_node_role_can_pull_from_ecr_and_has_the_eks_worker_policies(default):
    for role in (default.stack.system_nodes.role, *(g.role for g in default.stack.gpu_node_groups.values())):
        arns = json.dumps(props(default.template_json["Resources"][default.logical_id(role)])["ManagedPolicyArns"])
        for policy in ("AmazonEC2ContainerRegistryPullOnly", "AmazonEKSWorkerNodePolicy"):
            assert policy in arns
        assert "AmazonEKS_CNI_Policy" not in arns  # the VPC CNI has its own role


# --- Helm add-ons ------------------------------------------------------------------------


def helm_charts(synthesized) -> dict[str, dict]:
    return {props(c)["Chart"]: props(c) for c in synthesized.resources("Custom::AWSCDK-EKS-HelmChart").values()}


def test_helm_charts_have_release_names_and_pinned_versions(default):
    charts = helm_charts(default)
    assert {name: (c["Release"], c["Version"], c["Repository"]) for name, c in charts.items()} == {
        "nvidia-device-plugin": ("nvidia-device-plugin", "0.20.1", "https://nvidia.github.io/k8s-device-plugin"),
        "aws-efa-k8s-device-plugin": ("aws-efa-k8s-device-plugin", "v0.5.20", "https://aws.github.io/eks-charts"),
        "kuberay-operator": ("kuberay-operator", "1.5.1", "https://ray-project.github.io/kuberay-helm/"),
    }


def values_of(chart: dict) -> dict:
    return json.loads(chart["Values"])


@pytest.mark.parametrize("chart", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"])
def test_device_plugins_run_on_gpu_nodes_and_tolerate_their_taint(default, chart):
    values = values_of(helm_charts(default)[chart])
    assert values["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in values["tolerations"]


def test_efa_plugin_is_told_the_gpu_instance_types(default, synth):
    values = values_of(helm_charts(default)["aws-efa-k8s-device-plugin"])
    assert values["supportedInstanceLabels"]["values"] == ["g6.8xlarge"]
    mixed = synth({"decode": {"instance_type": "g6e.8xlarge"}})
    values = values_of(helm_charts(mixed)["aws-efa-k8s-device-plugin"])
    assert values["supportedInstanceLabels"]["values"] == ["g6.8xlarge", "g6e.8xlarge"]


def test_kuberay_operator_runs_on_the_system_node_after_it_exists(default):
    chart = helm_charts(default)["kuberay-operator"]
    assert values_of(chart)["nodeSelector"] == {"role": "system"}
    assert chart["Wait"] is True
    logical = default.logical_id(default.stack.kuberay.chart)
    depends = default.template_json["Resources"][logical]["DependsOn"]
    assert default.logical_id(default.stack.system_nodes.nodegroup) in depends


def test_kubernetes_manifests_are_applied_after_the_kuberay_crds(default):
    kuberay = default.logical_id(default.stack.kuberay.chart)
    manifests = default.resources("Custom::AWSCDK-EKS-KubernetesResource")
    assert manifests, "the RayService chart must be applied through the cluster"
    for logical_id, manifest in manifests.items():
        if any(o["apiVersion"].startswith("ray.io/") for o in default.manifest_objects(logical_id)):
            assert kuberay in manifest.get("DependsOn", []), logical_id


# --- Offline, environment-agnostic synthesis ---------------------------------------------


def test_stack_is_account_agnostic_and_needs_no_lookups(default):
    assert default.stack.account == "${Token[AWS.AccountId.0]}" or default.stack.resolve(default.stack.account) == {"Ref": "AWS::AccountId"}
    manifest = json.loads((default.outdir / "manifest.json").read_text())
    assert not any(a.get("missing") for a in [manifest])  # no context lookups requested
    assert "missing" not in manifest


def test_subnets_are_tagged_for_kubernetes_load_balancers(default):
    for subnet in default.resources("AWS::EC2::Subnet").values():
        tags = {t["Key"]: t["Value"] for t in props(subnet)["Tags"]}
        role = "kubernetes.io/role/elb" if props(subnet)["MapPublicIpOnLaunch"] else "kubernetes.io/role/internal-elb"
        assert tags[role] == "1"


def test_outputs_tell_how_to_reach_the_cluster_and_the_endpoint(default):
    outputs = default.template_json["Outputs"]
    assert "update-kubeconfig" in json.dumps(outputs["ConfigCommand"]["Value"])
    # No port-forward (it needs pods/portforward, which reaches the Ray head's every port: threat model, T1).
    assert "port-forward" not in outputs["EndpointCommand"]["Value"]
    assert "http://ray-llm-openai.inference.svc:8000/v1" in outputs["EndpointCommand"]["Value"]
    assert "serving.client_namespaces" in outputs["EndpointCommand"]["Value"]
