"""The default stack: every construct of the library composed from one DeploymentConfig.

Construct IDs below are part of the public API: CloudFormation logical IDs derive from them,
and changing one replaces the resource (see docs/replacement.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from .config import ConfigError, DeploymentConfig
from .constructs.addons import GpuDevicePlugins, KubeRayOperator
from .constructs.cluster import InferenceCluster
from .constructs.network import InferenceVpc
from .constructs.nodegroups import EfaFabric, EfaGpuNodeGroup, SystemNodeGroup
from .constructs.serving import RayLlmServing


class RayLlmEksStack(cdk.Stack):
    """VPC, EKS, system and EFA GPU node groups, device plugins, KubeRay, and the RayService.

    :param config: the deployment; ``DeploymentConfig()`` is the reference deployment.
    :param vpc: an existing VPC to use instead of creating one (give ``data_plane_subnet`` too).
    :param data_plane_subnet: the private subnet, in ``config.data_plane_az``, for every node.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        vpc: ec2.IVpc | None = None,
        data_plane_subnet: ec2.ISubnet | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config

        if vpc is None and data_plane_subnet is None:
            self.network = InferenceVpc(
                self,
                "Network",
                data_plane_az=config.data_plane_az,
                availability_zones=config.control_plane_azs,
                cidr=config.network.vpc_cidr,
                nat_gateways=config.network.nat_gateways,
                flow_log_retention_days=config.network.flow_log_retention_days,
            )
        else:
            self.network = InferenceVpc(
                self, "Network", data_plane_az=config.data_plane_az, vpc=vpc, data_plane_subnet=data_plane_subnet
            )
        self.cluster = InferenceCluster(
            self,
            "Cluster",
            vpc=self.network.vpc,
            kubernetes_version=config.cluster.kubernetes_version,
            cluster_name=config.cluster.name,
            endpoint_access=config.cluster.endpoint_access.value,
            public_access_cidrs=config.cluster.public_access_cidrs,
            control_plane_logs=config.cluster.control_plane_logs,
            admin_role_arn=config.cluster.admin_role_arn,
        )
        self.system_nodes = SystemNodeGroup(
            self,
            "SystemNodes",
            cluster=self.cluster,
            subnet=self.network.data_plane_subnet,
            instance_type=config.system.instance_type,
            count=config.system.count,
            root_volume_size_gib=config.system.root_volume_size_gib,
        )
        # One EFA security group and placement group for both roles: the KV cache crosses roles.
        self.efa_fabric = EfaFabric(
            self,
            "EfaFabric",
            vpc=self.network.vpc,
            placement_group=config.prefill.placement_group or config.decode.placement_group,
        )
        self.gpu_node_groups: dict[str, EfaGpuNodeGroup] = {}
        for role, construct_id in (("prefill", "PrefillNodes"), ("decode", "DecodeNodes")):
            group = getattr(config, role)
            self.gpu_node_groups[role] = EfaGpuNodeGroup(
                self,
                construct_id,
                cluster=self.cluster,
                subnet=self.network.data_plane_subnet,
                role=role,
                fabric=self.efa_fabric,
                instance_type=group.instance_type,
                min_size=group.min_size,
                desired_size=group.desired_size,
                max_size=group.max_size,
                root_volume_size_gib=group.root_volume.size_gib,
                root_volume_throughput_mibps=group.root_volume.throughput_mibps,
                root_volume_iops=group.root_volume.iops,
                placement_group=group.placement_group,
            )
        self.prefill_nodes = self.gpu_node_groups["prefill"]
        self.decode_nodes = self.gpu_node_groups["decode"]

        self.device_plugins = GpuDevicePlugins(
            self,
            "DevicePlugins",
            cluster=self.cluster.cluster,
            nvidia_chart_version=config.versions.nvidia_device_plugin,
            efa_chart_version=config.versions.efa_device_plugin,
            gpu_taint_key=EfaGpuNodeGroup.TAINT_KEY,
            gpu_instance_types=[config.prefill.instance_type, config.decode.instance_type],
        )
        self.kuberay = KubeRayOperator(
            self,
            "KubeRay",
            cluster=self.cluster.cluster,
            version=config.versions.kuberay,
        )
        # The operator's pod needs a node to run on before Helm's wait can finish.
        self.kuberay.chart.node.add_dependency(self.system_nodes.nodegroup)

        # cdk8s charts must be scoped under a cdk8s App, never under a CDK construct.
        self.cdk8s_app = cdk8s.App()
        self.serving = RayLlmServing(
            self,
            "Serving",
            cluster=self.cluster.cluster,
            config=config,
            cdk8s_app=self.cdk8s_app,
            # The RayService CRD comes with the operator chart; device plugins must advertise
            # nvidia.com/gpu and vpc.amazonaws.com/efa before workers can schedule.
            depends_on=[self.kuberay.chart, *self.device_plugins.charts],
        )

        cluster_name = self.cluster.cluster.cluster_name
        cdk.CfnOutput(self, "ClusterName", value=cluster_name)
        cdk.CfnOutput(
            self,
            "ConfigCommand",
            description="Point kubectl at the cluster (needs an IAM principal with an access entry)",
            value=cdk.Fn.join("", ["aws eks update-kubeconfig --region ", self.region, " --name ", cluster_name]),
        )
        cdk.CfnOutput(
            self,
            "EndpointCommand",
            description="Reach the OpenAI-compatible API on localhost:8000",
            value=f"kubectl -n {config.serving.namespace} port-forward svc/{self.serving.openai_service_name} 8000:8000",
        )

    @property
    def charts(self) -> list[cdk8s.Chart]:
        """Every cdk8s chart this stack applies, in apply order."""
        return list(self.serving.charts)


def default_context() -> dict[str, Any]:
    """cdk.json's context, so code outside `cdk synth` (tests, examples) sees the same feature flags."""
    cdk_json = Path(__file__).resolve().parent.parent / "cdk.json"
    if not cdk_json.exists():  # installed as a wheel: no project cdk.json to follow
        return {}
    return dict(json.loads(cdk_json.read_text()).get("context", {}))


def build_app(
    config: DeploymentConfig,
    *,
    outdir: str | None = None,
    context: Mapping[str, Any] | None = None,
    nag: bool = True,
) -> tuple[cdk.App, RayLlmEksStack]:
    """The app `cdk synth` runs: the stack, with cdk-nag AwsSolutions registered as a validation plugin."""
    merged = default_context()
    merged.update(context or {})
    app = cdk.App(outdir=outdir, context=merged)
    problems = config.reproducibility_problems()
    if problems and config.strict:
        raise ConfigError("strict mode refuses an irreproducible deployment:\n  " + "\n  ".join(problems))
    stack = RayLlmEksStack(
        app,
        config.stack_name,
        config=config,
        description="ray-llm-eks: disaggregated Ray Serve LLM (NIXL over EFA) on Amazon EKS",
        env=cdk.Environment(region=config.region),
    )
    if problems:
        # One warning, shown by `cdk synth`; `strict: true` makes it an error instead.
        cdk.Annotations.of(stack).add_warning_v2("ray-llm-eks:reproducibility", "; ".join(problems))
    if nag:
        from cdk_nag import AwsSolutionsChecks

        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack
