"""Helm add-ons: the NVIDIA and EFA device plugins, and the KubeRay operator.

Every chart has an explicit release name and a pinned version, so a `cdk deploy` months later
installs what was reviewed.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import Duration, aws_eks_v2 as eks
from constructs import Construct

from ..spec import infrastructure as infra
from ..spec.errors import problem
from ..spec.placement import GPU_PRESENT_LABEL, SYSTEM_LABELS
from ..spec.pools import WorkerPool
from .cluster import ClusterLike, eks_cluster_of
from .nodegroups import EfaGpuNodeGroup, SystemNodeGroup
from .validation import ConstructValidationError, validated

NVIDIA_REPOSITORY = "https://nvidia.github.io/k8s-device-plugin"
EFA_REPOSITORY = "https://aws.github.io/eks-charts"
KUBERAY_REPOSITORY = "https://ray-project.github.io/kuberay-helm/"

GpuPoolLike = EfaGpuNodeGroup | WorkerPool


def _pool(group: GpuPoolLike) -> WorkerPool:
    return group.pool if isinstance(group, EfaGpuNodeGroup) else group


class GpuDevicePlugins(Construct):
    """The NVIDIA and EFA device plugins, on the GPU nodes only.

    The ``AL2023_x86_64_NVIDIA`` AMI ships the driver and the EFA kernel module but no device
    plugin, so without these pods cannot request ``nvidia.com/gpu`` or ``vpc.amazonaws.com/efa``.
    Everything node-specific derives from ``gpu_node_groups`` (the ``EfaGpuNodeGroup``s, or
    their ``pool``s), so the plugins reach exactly those nodes.

    Default settings:
    - ``nvidia-device-plugin`` 0.20.1 (release ``nvidia-device-plugin``, namespace kube-system),
      scheduled on nodes labelled ``nvidia.com/gpu.present=true``.
    - ``aws-efa-k8s-device-plugin`` v0.5.20 (release ``aws-efa-k8s-device-plugin``,
      namespace kube-system). It has no tolerations by default, so it gets the GPU taints'.
      Its node affinity lists the instance types it believes support EFA; the node groups'
      instance types replace that list, so a type newer than the chart's list still gets the plugin.
    - Both tolerate every taint key of the node groups (``operator: Exists``).

    Public attributes: ``nvidia``, ``efa`` (the ``HelmChart`` constructs), ``charts``, ``pools``,
    ``instance_types`` (what the EFA plugin covers).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterLike,
        gpu_node_groups: Sequence[GpuPoolLike],
        nvidia_chart_version: str = infra.DEFAULT_NVIDIA_DEVICE_PLUGIN_VERSION,
        efa_chart_version: str = infra.DEFAULT_EFA_DEVICE_PLUGIN_VERSION,
    ) -> None:
        super().__init__(scope, construct_id)
        validated(self, infra.nvidia_device_plugin_version, nvidia_chart_version, "nvidia_chart_version")
        validated(self, infra.semver, efa_chart_version, "efa_chart_version", v_prefix=True)
        if not gpu_node_groups:
            raise ConstructValidationError(self, [problem(
                "gpu_node_groups", [], "empty", "the EfaGpuNodeGroups (or their pools) whose nodes need the device plugins")])
        self.pools: tuple[WorkerPool, ...] = tuple(_pool(group) for group in gpu_node_groups)
        self.instance_types: tuple[str, ...] = tuple(sorted({pool.instance_type for pool in self.pools}))
        taint_keys = sorted({pool.taint.key for pool in self.pools})
        effects = {pool.taint.key: pool.taint.effect for pool in self.pools}
        gpu_nodes = {GPU_PRESENT_LABEL: "true"}
        tolerations = [{"key": key, "operator": "Exists", "effect": effects[key]} for key in taint_keys]
        helm_cluster = eks_cluster_of(cluster)
        self.nvidia = eks.HelmChart(
            self,
            "NvidiaDevicePlugin",
            cluster=helm_cluster,
            chart="nvidia-device-plugin",
            repository=NVIDIA_REPOSITORY,
            version=nvidia_chart_version,
            release="nvidia-device-plugin",
            namespace="kube-system",
            values={"nodeSelector": gpu_nodes, "tolerations": tolerations},
        )
        self.efa = eks.HelmChart(
            self,
            "EfaDevicePlugin",
            cluster=helm_cluster,
            chart="aws-efa-k8s-device-plugin",
            repository=EFA_REPOSITORY,
            version=efa_chart_version,
            release="aws-efa-k8s-device-plugin",
            namespace="kube-system",
            values={
                "nodeSelector": gpu_nodes,
                "tolerations": tolerations,
                "supportedInstanceLabels": {
                    "keys": ["node.kubernetes.io/instance-type"],
                    "values": list(self.instance_types),
                },
            },
        )

    @property
    def charts(self) -> list[eks.HelmChart]:
        return [self.nvidia, self.efa]


class KubeRayOperator(Construct):
    """The KubeRay operator (chart ``kuberay-operator``), on the system node.

    Default settings: version 1.4.0, release ``kuberay-operator``, namespace ``kuberay``,
    node selector ``role=system`` (or ``system_nodes``' labels, after which it is then ordered);
    Helm waits (up to 10 minutes) for the operator to be ready, so a RayService applied after
    this chart finds both the CRDs and a running controller.

    ``watch_namespaces``: the namespaces the operator acts in, with namespaced RBAC only
    (``singleNamespaceInstall``); default: every namespace, with a ClusterRole (the chart's
    default). ``RayLlmEksStack`` passes the serving namespace.

    Public attributes: ``chart`` (the ``HelmChart``; anything that creates Ray custom resources
    must depend on it), ``watch_namespaces``.
    """

    NAMESPACE = infra.KUBERAY_NAMESPACE
    RELEASE = infra.KUBERAY_RELEASE

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterLike,
        version: str = infra.DEFAULT_KUBERAY_VERSION,
        system_nodes: SystemNodeGroup | None = None,
        node_selector: dict[str, str] | None = None,
        watch_namespaces: Sequence[str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        validated(self, infra.semver, version, "version")
        self.version = version
        if watch_namespaces is not None:
            validated(self, infra.namespaces, list(watch_namespaces), "watch_namespaces")
        self.watch_namespaces = tuple(watch_namespaces) if watch_namespaces is not None else None
        values: dict[str, object] = {
            "nodeSelector": dict(node_selector or (system_nodes.labels if system_nodes else SYSTEM_LABELS))}
        if self.watch_namespaces:
            # Namespaced Roles in the watched namespaces instead of a ClusterRole, and
            # --watch-namespace (chart 1.4.0, templates/deployment.yaml and
            # multiple_namespaces_role.yaml): the operator cannot touch pods elsewhere. The
            # namespaces must exist before the chart installs (RayLlmServing orders that).
            values.update(singleNamespaceInstall=True, watchNamespace=list(self.watch_namespaces))
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=eks_cluster_of(cluster),
            chart="kuberay-operator",
            repository=KUBERAY_REPOSITORY,
            version=version,
            release=self.RELEASE,
            namespace=self.NAMESPACE,
            create_namespace=True,
            wait=True,
            timeout=Duration.minutes(10),
            values=values,
        )
        if system_nodes is not None:
            # Helm's wait needs a node that can run the operator's pod.
            self.chart.node.add_dependency(system_nodes.nodegroup)
