#!/usr/bin/env python3
"""Compose ray-llm-eks constructs in your own stack, down to the RayService.

Your platform already owns the VPC (in us-east-1); you want one g6e.12xlarge (4 x L40S) for
prefill and two g6.12xlarge (4 x L4 each) for decode, with tensor parallelism 2. Nothing below
repeats a GPU count, a memory size, a label, a taint or a region: the serving construct derives
the pods from the node groups, and the image's region from the stack.

Run from the repository root:

    PATH=.venv/bin:$PATH node_modules/.bin/cdk synth --app ".venv/bin/python examples/existing_vpc/app.py"
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from ray_llm_eks.constructs import (
    EfaFabric,
    EfaGpuNodeGroup,
    GpuDevicePlugins,
    InferenceCluster,
    InferenceVpc,
    KubeRayOperator,
    RayLlmServing,
    SystemNodeGroup,
)
from ray_llm_eks.base import ModelSpec

REGION = "us-east-1"
DATA_PLANE_AZ = "us-east-1a"


class PlatformNetwork(Construct):
    """Stands in for the VPC your platform team already runs (normally in another stack)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc(
            self,
            "SharedVpc",
            ip_addresses=ec2.IpAddresses.cidr("10.42.0.0/16"),
            availability_zones=["us-east-1a", "us-east-1b"],
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20),
            ],
            flow_logs={"All": ec2.FlowLogOptions()},
        )


class MixedGpuInferenceStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        platform = PlatformNetwork(self, "Platform")
        data_plane_subnet = platform.vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[DATA_PLANE_AZ]
        ).subnets[0]

        network = InferenceVpc(
            self, "Network", data_plane_az=DATA_PLANE_AZ, vpc=platform.vpc, data_plane_subnet=data_plane_subnet
        )
        cluster = InferenceCluster(self, "Cluster", vpc=network.vpc, endpoint_access="private")
        # Given the InferenceCluster, node groups wait for the VPC CNI and CoreDNS for the system node.
        system = SystemNodeGroup(self, "SystemNodes", cluster=cluster, subnet=network.data_plane_subnet)
        # Prefill and decode share one EFA security group and placement group.
        fabric = EfaFabric(self, "EfaFabric", vpc=network.vpc)
        self.prefill = EfaGpuNodeGroup(
            self, "PrefillNodes", cluster=cluster, subnet=network.data_plane_subnet, fabric=fabric,
            role="prefill", instance_type=ec2.InstanceType("g6e.12xlarge"),
        )
        self.decode = EfaGpuNodeGroup(
            self, "DecodeNodes", cluster=cluster, subnet=network.data_plane_subnet, fabric=fabric,
            role="decode", instance_type="g6.12xlarge", min_size=2, desired_size=2, max_size=2,
        )
        # Tolerations and the EFA plugin's instance types come from the node groups. Unpinned, as
        # the serving below: for a real deploy give nvidia_image_digest= and efa_image_digest= (the
        # refusal without strict=False prints the commands) and drop strict=False.
        plugins = GpuDevicePlugins(self, "DevicePlugins", cluster=cluster, gpu_node_groups=[self.prefill, self.decode],
                                   strict=False)
        kuberay = KubeRayOperator(self, "KubeRay", cluster=cluster, system_nodes=system)
        # Pods, replicas (GPUs / tensor parallel x nodes), NIXL ports and the image's region all
        # derive from the pools and the stack; the charts are applied after KubeRay and the plugins.
        self.serving = RayLlmServing(
            self, "Serving", cluster=cluster, prefill=self.prefill, decode=self.decode, system=system,
            kuberay=kuberay, device_plugins=plugins, model=ModelSpec(tensor_parallel_size=2),
            # Unpinned on purpose, so the example synthesizes offline: no digest or commit can be
            # known here. For a real deploy give image=ImageSpec(digest=...) and
            # ModelSpec(revision=...) from the commands `ray-llm-eks plan` prints, and drop this.
            strict=False,
        )


def build(app: cdk.App) -> MixedGpuInferenceStack:
    stack = MixedGpuInferenceStack(app, "MixedGpuInference", env=cdk.Environment(region=REGION))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


if __name__ == "__main__":
    app = cdk.App()
    build(app)
    app.synth()
