#!/usr/bin/env python3
"""Import ray-llm-eks constructs into your own stack.

Your platform already owns the VPC; you want L40S GPUs (g6e.8xlarge) and two decode nodes.
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
    SystemNodeGroup,
)

DATA_PLANE_AZ = "us-east-2a"


class PlatformNetwork(Construct):
    """Stands in for the VPC your platform team already runs (normally in another stack)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc(
            self,
            "SharedVpc",
            ip_addresses=ec2.IpAddresses.cidr("10.42.0.0/16"),
            availability_zones=["us-east-2a", "us-east-2b"],
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20),
            ],
            flow_logs={"All": ec2.FlowLogOptions()},
        )


class L40sInferenceStack(cdk.Stack):
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
        # Given the InferenceCluster (not only its eks.Cluster), node groups wait for the VPC CNI
        # and CoreDNS waits for the system node.
        system = SystemNodeGroup(self, "SystemNodes", cluster=cluster, subnet=network.data_plane_subnet)
        # Prefill and decode share one EFA security group and placement group.
        fabric = EfaFabric(self, "EfaFabric", vpc=network.vpc)
        self.prefill = EfaGpuNodeGroup(
            self, "PrefillNodes", cluster=cluster, subnet=network.data_plane_subnet, fabric=fabric,
            role="prefill", instance_type="g6e.8xlarge",
        )
        self.decode = EfaGpuNodeGroup(
            self, "DecodeNodes", cluster=cluster, subnet=network.data_plane_subnet, fabric=fabric,
            role="decode", instance_type="g6e.8xlarge", min_size=2, desired_size=2, max_size=2,
        )
        GpuDevicePlugins(
            self, "DevicePlugins", cluster=cluster.cluster,
            gpu_taint_key=EfaGpuNodeGroup.TAINT_KEY, gpu_instance_types=["g6e.8xlarge"],
        )
        kuberay = KubeRayOperator(self, "KubeRay", cluster=cluster.cluster)
        kuberay.chart.node.add_dependency(system.nodegroup)


def build(app: cdk.App) -> L40sInferenceStack:
    stack = L40sInferenceStack(app, "L40sInference", env=cdk.Environment(region="us-east-2"))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


if __name__ == "__main__":
    app = cdk.App()
    build(app)
    app.synth()
