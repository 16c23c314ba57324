"""AWS CDK constructs of ray-llm-eks; each is importable alone.

Lives inside the package so a top-level ``constructs/`` folder can never shadow the
``constructs`` library.
"""

from .addons import GpuDevicePlugins, KubeRayOperator
from .cluster import InferenceCluster
from .network import InferenceVpc
from .nodegroups import EfaFabric, EfaGpuNodeGroup, SystemNodeGroup, make_node_role

__all__ = [
    "EfaFabric",
    "EfaGpuNodeGroup",
    "GpuDevicePlugins",
    "InferenceCluster",
    "InferenceVpc",
    "KubeRayOperator",
    "SystemNodeGroup",
    "make_node_role",
]
