"""Helm add-ons: the NVIDIA and EFA device plugins, and the KubeRay operator.

Every chart has an explicit release name and a pinned version, so a `cdk deploy` months later
installs what was reviewed.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import Duration, aws_eks_v2 as eks
from constructs import Construct

from ..config import BROKEN_NVIDIA_DEVICE_PLUGIN_VERSIONS
from .nodegroups import GPU_PRESENT_LABEL, ROLE_LABEL, SystemNodeGroup

NVIDIA_REPOSITORY = "https://nvidia.github.io/k8s-device-plugin"
EFA_REPOSITORY = "https://aws.github.io/eks-charts"
KUBERAY_REPOSITORY = "https://ray-project.github.io/kuberay-helm/"



def _tolerate(taint_key: str) -> dict[str, str]:
    return {"key": taint_key, "operator": "Exists", "effect": "NoSchedule"}


class GpuDevicePlugins(Construct):
    """The NVIDIA and EFA device plugins, on the GPU nodes only.

    The ``AL2023_x86_64_NVIDIA`` AMI ships the driver and the EFA kernel module but no device
    plugin, so without these pods cannot request ``nvidia.com/gpu`` or ``vpc.amazonaws.com/efa``.

    Default settings:
    - ``nvidia-device-plugin`` 0.20.1 (release ``nvidia-device-plugin``, namespace kube-system),
      scheduled on nodes labelled ``nvidia.com/gpu.present=true``.
    - ``aws-efa-k8s-device-plugin`` v0.5.20 (release ``aws-efa-k8s-device-plugin``,
      namespace kube-system). It has no tolerations by default, so it gets the GPU taint's.
      Its node affinity lists the instance types it believes support EFA; ``gpu_instance_types``
      replaces that list so a type newer than the chart's list still gets the plugin.
    - Both tolerate the GPU nodes' taint (``gpu_taint_key``).

    Public attributes: ``nvidia``, ``efa`` (the ``HelmChart`` constructs), ``charts``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        gpu_taint_key: str,
        gpu_instance_types: Sequence[str],
        nvidia_chart_version: str = "0.20.1",
        efa_chart_version: str = "v0.5.20",
    ) -> None:
        super().__init__(scope, construct_id)
        if nvidia_chart_version in BROKEN_NVIDIA_DEVICE_PLUGIN_VERSIONS:
            raise ValueError(
                f"GpuDevicePlugins: nvidia_chart_version {nvidia_chart_version!r} defaults to MOFED mode, "
                "which breaks EFA; accepted: 0.20.x"
            )
        if not gpu_instance_types:
            raise ValueError("GpuDevicePlugins: gpu_instance_types must name the GPU node groups' instance types")
        gpu_nodes = {GPU_PRESENT_LABEL: "true"}
        tolerations = [_tolerate(gpu_taint_key)]
        self.nvidia = eks.HelmChart(
            self,
            "NvidiaDevicePlugin",
            cluster=cluster,
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
            cluster=cluster,
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
                    "values": sorted(set(gpu_instance_types)),
                },
            },
        )

    @property
    def charts(self) -> list[eks.HelmChart]:
        return [self.nvidia, self.efa]


class KubeRayOperator(Construct):
    """The KubeRay operator (chart ``kuberay-operator``), on the system node.

    Default settings: version 1.4.0, release ``kuberay-operator``, namespace ``kuberay``,
    node selector ``role=system``; Helm waits (up to 10 minutes) for the operator to be ready,
    so a RayService applied after this chart finds both the CRDs and a running controller.

    Public attribute: ``chart`` (the ``HelmChart``). Anything that creates Ray custom resources
    must depend on it.
    """

    NAMESPACE = "kuberay"
    RELEASE = "kuberay-operator"

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        version: str = "1.4.0",
        node_selector: dict[str, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            chart="kuberay-operator",
            repository=KUBERAY_REPOSITORY,
            version=version,
            release=self.RELEASE,
            namespace=self.NAMESPACE,
            create_namespace=True,
            wait=True,
            timeout=Duration.minutes(10),
            values={"nodeSelector": node_selector or {ROLE_LABEL: SystemNodeGroup.LABELS[ROLE_LABEL]}},
        )
