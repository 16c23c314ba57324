"""cdk8s charts of ray-llm-eks: the Ray Serve LLM RayService and what it needs in Kubernetes.

Built from typed objects: core kinds through cdk8s-plus-35, pod templates through its
``k8s`` module, and a thin typed ``RayService`` (see :mod:`.rayservice` for the measurement
that chose this over ``cdk8s import`` of the KubeRay CRD).
"""

from .admission_policy import ADMISSION_POLICY_CHART_ID, AdmissionPolicyChart
from .network_policy import NETWORK_POLICY_CHART_ID, NetworkPolicyChart
from .rayservice import RayService, RayServiceSpec, UpgradeStrategy
from .serve_config import build_serve_config
from .serving import (
    NAMESPACE_CHART_ID,
    RAYSERVICE_CHART_ID,
    RayServiceChart,
    ServingCharts,
    ServingNamespaceChart,
    build_serving_charts,
    endpoint_command,
    openai_service_name,
)
from .verification import VERIFICATION_CHART_ID, GatePlan, VerificationChart, build_verification_chart

__all__ = [
    "ADMISSION_POLICY_CHART_ID",
    "AdmissionPolicyChart",
    "NAMESPACE_CHART_ID",
    "NETWORK_POLICY_CHART_ID",
    "NetworkPolicyChart",
    "RAYSERVICE_CHART_ID",
    "RayService",
    "RayServiceChart",
    "RayServiceSpec",
    "ServingCharts",
    "ServingNamespaceChart",
    "UpgradeStrategy",
    "VERIFICATION_CHART_ID",
    "GatePlan",
    "VerificationChart",
    "build_verification_chart",
    "build_serve_config",
    "build_serving_charts",
    "endpoint_command",
    "openai_service_name",
]
