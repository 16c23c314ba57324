"""The default stack: every construct of the library composed from one Deployment.

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

from .base.deployment import Deployment
from .config import ConfigError
from .cdk8s_charts import endpoint_command
from .constructs.addons import GpuDevicePlugins, KubeRayOperator
from .constructs.autoscaler import NodeAutoscaler
from .constructs.cluster import InferenceCluster
from .constructs.network import InferenceVpc
from .constructs.observability import InferenceObservability
from .constructs.nodegroups import EfaFabric, EfaGpuNodeGroup, SystemNodeGroup
from .constructs.serving import RayLlmServing
from .constructs.spend import InferenceSpend
from .constructs.validation import ConstructValidationError

from .base.placement import DECODE, PREFILL, WORKER_ROLES
from .base.wire import report_command

# Construct ids of the GPU node groups, by role (public API: logical ids derive from them).
GPU_NODE_GROUP_IDS = {PREFILL: "PrefillNodes", DECODE: "DecodeNodes"}


class RayLlmEksStack(cdk.Stack):
    """VPC, EKS, system and EFA GPU node groups, device plugins, KubeRay, and the RayService.

    With ``kubernetes_owner: gitops`` the stack builds the AWS side only and applies no Helm chart
    and no chart of the serving layer (``ray-llm-eks render`` writes them: docs/gitops.md).

    The stack is the configuration's only reader on the AWS side. The deployment's parts are
    composed once, when it is built (``Deployment.specs()``, ``base.composition.compose``), and
    handed on as they are: each node group its pool (``pool=``), the serving construct the whole
    ``Specs`` (``specs=``) with the node groups its pods run on.

    :param config: the deployment; ``Deployment()`` is the reference deployment.
    :param vpc: an existing VPC to use instead of creating one (give ``data_plane_subnet`` too).
    :param data_plane_subnet: the private subnet, in ``config.data_plane_az``, for every node.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Deployment,
        vpc: ec2.IVpc | None = None,
        data_plane_subnet: ec2.ISubnet | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("env", cdk.Environment(region=config.region))
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        specs = config.specs()

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
            endpoint_access=config.cluster.endpoint_access,
            public_access_cidrs=config.cluster.public_access_cidrs,
            bootstrap_cluster_creator_admin_permissions=config.cluster.bootstrap_cluster_creator_admin_permissions,
            control_plane_logs=config.cluster.control_plane_logs,
            control_plane_log_retention_days=config.cluster.control_plane_log_retention_days,
            admin_role_arn=config.cluster.admin_role_arn,
            addon_versions=config.cluster.addon_versions.by_addon(),
        )
        self.system_nodes = SystemNodeGroup(
            self, "SystemNodes", cluster=self.cluster, subnet=self.network.data_plane_subnet, pool=specs.system
        )
        # One EFA security group and placement group for both roles: the KV cache crosses roles.
        self.efa_fabric = EfaFabric(
            self,
            "EfaFabric",
            vpc=self.network.vpc,
            placement_group=any(pool.placement_group for pool in (specs.prefill, specs.decode)),
        )
        self.gpu_node_groups: dict[str, EfaGpuNodeGroup] = {}
        for role in WORKER_ROLES:
            self.gpu_node_groups[role] = EfaGpuNodeGroup(
                self,
                GPU_NODE_GROUP_IDS[role],
                cluster=self.cluster,
                subnet=self.network.data_plane_subnet,
                fabric=self.efa_fabric,
                pool=specs.pool(role),
            )
        self.prefill_nodes = self.gpu_node_groups[PREFILL]
        self.decode_nodes = self.gpu_node_groups[DECODE]

        self.device_plugins = GpuDevicePlugins(
            self,
            "DevicePlugins",
            cluster=self.cluster,
            gpu_node_groups=[self.prefill_nodes, self.decode_nodes],
            nvidia_chart_version=config.versions.nvidia_device_plugin,
            efa_chart_version=config.versions.efa_device_plugin,
            nvidia_image_digest=config.versions.nvidia_device_plugin_image_digest,
            efa_image_digest=config.versions.efa_device_plugin_image_digest,
            strict=config.strict,
            kubernetes_owner=config.kubernetes_owner,
        )
        # Cluster Autoscaler only when a node group may grow or shrink (docs/scaling.md).
        self.node_autoscaler: NodeAutoscaler | None = None
        if specs.serving.autoscaling:
            self.node_autoscaler = NodeAutoscaler(self, "NodeAutoscaler", cluster=self.cluster,
                                                  system_nodes=self.system_nodes,
                                                  kubernetes_owner=config.kubernetes_owner)
        self.kuberay = KubeRayOperator(
            self, "KubeRay", cluster=self.cluster, version=config.versions.kuberay, system_nodes=self.system_nodes,
            watch_namespaces=[specs.serving.namespace], image_digest=config.versions.kuberay_image_digest,
            kubernetes_owner=config.kubernetes_owner,
        )
        self.serving = RayLlmServing(
            self, "Serving", cluster=self.cluster, specs=specs, prefill=self.prefill_nodes, decode=self.decode_nodes,
            system=self.system_nodes, kuberay=self.kuberay, device_plugins=self.device_plugins,
            node_autoscaler=self.node_autoscaler, kubernetes_owner=config.kubernetes_owner,
        )
        self.cdk8s_app = self.serving.cdk8s_app

        self.observability: InferenceObservability | None = None
        if specs.observability.enabled:
            self.observability = InferenceObservability(self, "Observability", serving=self.serving,
                                                        after=[self.system_nodes.nodegroup])
        # Spend limits only when configured: the cost-allocation tag reaches the launch templates,
        # and so rolls the nodes once, only for a deployment that asked for it.
        self.spend: InferenceSpend | None = None
        if specs.spend is not None:
            self.spend = InferenceSpend(self, "Spend", spend=specs.spend, serving=self.serving,
                                        observability=self.observability, footprint=config.footprint())

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
            description="How a client reaches the OpenAI-compatible API (no port-forward: README, \"Call the API\")",
            value=endpoint_command(self.serving.spec),
        )
        cdk.CfnOutput(
            self,
            "GateReportCommand",
            # A wait condition's Data attribute is a JSON object, which no output can hold without the
            # AWS::LanguageExtensions transform; the verdict's reason shows in the deploy's events.
            description="The deployment gate's full JSON report, kept after a rollback (docs/verification.md)",
            value=report_command(self.serving.namespace, self.serving.gate_job_name),
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
    config: Deployment,
    *,
    outdir: str | None = None,
    context: Mapping[str, Any] | None = None,
    nag: bool = True,
) -> tuple[cdk.App, RayLlmEksStack]:
    """The app `cdk synth` runs: the stack, with cdk-nag AwsSolutions registered as a validation plugin."""
    merged = default_context()
    merged.update(context or {})
    app = cdk.App(outdir=outdir, context=merged)
    try:
        stack = RayLlmEksStack(
            app,
            config.stack_name,
            config=config,
            description="ray-llm-eks: disaggregated Ray Serve LLM (NIXL over EFA) on Amazon EKS",
        )
    except ConstructValidationError as error:
        # The configuration runs the same checks first; this is for a stack subclass's own props.
        raise ConfigError(str(error)) from None
    problems = config.reproducibility_problems()
    if problems:
        # One warning, shown by `cdk synth`; `strict: true` makes it an error (in the spec check).
        cdk.Annotations.of(stack).add_warning_v2(
            "ray-llm-eks:reproducibility", "; ".join(f"{p.field}: {p.message}" for p in problems)
        )
    if nag:
        from cdk_nag import AwsSolutionsChecks

        from .constructs.nag_rules import RayLlmEksChecks

        # cdk-nag's EKS rules miss aws_eks_v2 clusters; the project's own rules cover them.
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app), RayLlmEksChecks())
    return app, stack
