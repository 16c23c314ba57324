"""AWS CDK constructs of ray-llm-eks; each is importable alone.

Lives inside the package so a top-level ``constructs/`` folder can never shadow the
``constructs`` library. The constructs read the spec layer (:mod:`ray_llm_eks.base`) and the
cdk8s charts; the charts never import the constructs.
"""

from .addons import GpuDevicePlugins, KubeRayOperator
from .autoscaler import NodeAutoscaler
from .cluster import ClusterLike, InferenceCluster
from .network import InferenceVpc
from .nodegroups import EfaFabric, EfaGpuNodeGroup, SystemNodeGroup, make_node_role
from .observability import InferenceObservability
from .serving import RayLlmServing
from .spend import InferenceSpend
from .validation import ConstructValidationError

__all__ = [
    "ClusterLike",
    "ConstructValidationError",
    "EfaFabric",
    "EfaGpuNodeGroup",
    "GpuDevicePlugins",
    "InferenceCluster",
    "InferenceObservability",
    "InferenceSpend",
    "InferenceVpc",
    "KubeRayOperator",
    "NodeAutoscaler",
    "RayLlmServing",
    "SystemNodeGroup",
    "make_node_role",
]
