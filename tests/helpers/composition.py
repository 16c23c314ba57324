"""The reference deployment composed from the constructs, as a user's own app would compose it
(``tests/base/test_deployment.py`` checks it gets the configuration's rules; the verification tests
verify it)."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk

from ray_llm_eks.base.observability import ObservabilitySpec
from ray_llm_eks.base.serving import ServiceSettings
from ray_llm_eks.base.verification import VerificationSpec
from ray_llm_eks.constructs import (
    GpuDevicePlugins,
    InferenceCluster,
    InferenceObservability,
    InferenceVpc,
    KubeRayOperator,
    RayLlmServing,
    SystemNodeGroup,
)
from ray_llm_eks.constructs.nodegroups import EfaFabric, EfaGpuNodeGroup
from ray_llm_eks.stack import default_context
from ray_llm_eks.testing import FAST_SYNTH_CONTEXT


@dataclass(frozen=True)
class Composed:
    stack: cdk.Stack
    network: InferenceVpc
    cluster: InferenceCluster
    serving: RayLlmServing
    observability: InferenceObservability


def compose(service: ServiceSettings | None = None) -> Composed:
    """Every construct the stack composes, wired by hand; ``service`` as the user gives it (default:
    the reference deployment's)."""
    stack, network, cluster = cluster_stack("Composed")
    system, legs = serving_nodes(stack, network, cluster)
    plugins = GpuDevicePlugins(stack, "Plugins", cluster=cluster, gpu_node_groups=list(legs.values()), strict=False)
    kuberay = KubeRayOperator(stack, "KubeRay", cluster=cluster, system_nodes=system)
    observability = ObservabilitySpec()
    serving = RayLlmServing(stack, "Serving", strict=False, cluster=cluster, prefill=legs["prefill"], decode=legs["decode"],
                            system=system, kuberay=kuberay, device_plugins=plugins, observability=observability,
                            verification=VerificationSpec(every_minutes=observability.verify_every_minutes),
                            **({"service": service} if service is not None else {}))
    watched = InferenceObservability(stack, "Observability", serving=serving, after=[system.nodegroup])
    return Composed(stack, network, cluster, serving, watched)


def cluster_stack(name: str, region: str = "us-west-2", *, agnostic: bool = False):
    """A stack with the library's VPC (data plane in ``<region>a``) and cluster, as most composed
    apps start; ``agnostic``: a stack with no environment. Returns ``(stack, network, cluster)``."""
    app = cdk.App(context={**default_context(), **FAST_SYNTH_CONTEXT})
    stack = cdk.Stack(app, name) if agnostic else cdk.Stack(app, name, env=cdk.Environment(region=region))
    network = InferenceVpc(stack, "Network", data_plane_az=f"{region}a", availability_zones=[f"{region}a", f"{region}b"])
    return stack, network, InferenceCluster(stack, "Cluster", vpc=network.vpc)


def serving_nodes(stack: cdk.Stack, network: InferenceVpc,
                  cluster: InferenceCluster) -> tuple[SystemNodeGroup, dict[str, EfaGpuNodeGroup]]:
    """The system node group and the two GPU legs on one EFA fabric: ``(system, {"prefill": ..., "decode": ...})``."""
    system = SystemNodeGroup(stack, "System", cluster=cluster, subnet=network.data_plane_subnet)
    fabric = EfaFabric(stack, "Fabric", vpc=network.vpc)
    legs = {role: EfaGpuNodeGroup(stack, role.title(), cluster=cluster, subnet=network.data_plane_subnet,
                                  fabric=fabric, role=role) for role in ("prefill", "decode")}
    return system, legs
