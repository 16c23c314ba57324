"""The serving layer on the cluster: the RayService charts, their identity, and their apply order.

- An IAM role for the Ray pods, trusted by EKS Pod Identity (``pods.eks.amazonaws.com`` with
  ``sts:AssumeRole`` and ``sts:TagSession``, as the EKS Pod Identity docs require). It has no
  permissions: it is where S3 model access goes later (``pod_role.add_to_policy(...)``).
- A ``CfnPodIdentityAssociation`` binding that role to the ServiceAccount of the Ray pods.
- The cdk8s charts of :mod:`ray_llm_eks.cdk8s_charts`, each applied with
  ``cluster.add_cdk8s_chart`` after everything in ``depends_on`` (the KubeRay operator's Helm
  chart brings the RayService CRD; the device plugins advertise the GPU and EFA resources),
  after the Pod Identity association (the Pod Identity webhook injects credentials only into
  pods created after the association exists, so no Ray pod starts without them), and each
  after the chart before it (the namespace exists before what lives in it).

Construct ids (``PodRole``, ``PodIdentity``, and the chart ids) are public API: CloudFormation
logical ids derive from them.
"""

from __future__ import annotations

from typing import Sequence

import cdk8s
from aws_cdk import aws_eks_v2 as eks, aws_iam as iam
from constructs import Construct

from ..cdk8s_charts import ServingCharts, build_serving_charts, openai_service_name
from ..config import DeploymentConfig

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


class RayLlmServing(Construct):
    """The Ray Serve LLM RayService (disaggregated or colocated) on ``cluster``.

    Public attributes:

    - ``charts``: the cdk8s charts, in apply order (``serving-namespace``, ``serving-rayservice``);
    - ``manifests``: the ``KubernetesManifest`` applying each chart, by chart id;
    - ``pod_role``: the Pod Identity role of the Ray pods (no permissions by default);
    - ``pod_identity``: the ``CfnPodIdentityAssociation``;
    - ``namespace``, ``service_account_name``, ``ray_service_name``, ``openai_service_name``:
      where to find the endpoint (``kubectl -n <namespace> port-forward svc/<openai> 8000``).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        config: DeploymentConfig,
        cdk8s_app: cdk8s.App,
        depends_on: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        self.config = config
        # Build the charts first: a refused combination fails before any AWS resource exists.
        self.serving_charts: ServingCharts = build_serving_charts(cdk8s_app, config)
        self.charts: list[cdk8s.Chart] = self.serving_charts.charts

        self.namespace = config.serving.namespace
        self.service_account_name = self.serving_charts.namespace.service_account.name
        self.ray_service_name = config.serving.service_name
        self.openai_service_name = openai_service_name(config)

        self.pod_role = iam.Role(
            self,
            "PodRole",
            description=f"Ray Serve LLM pods ({self.namespace}/{self.service_account_name}) via EKS Pod Identity",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
        )
        # SessionTagsPrincipal adds sts:TagSession beside sts:AssumeRole, as Pod Identity needs.
        self.pod_identity = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=self.namespace,
            service_account=self.service_account_name,
            role_arn=self.pod_role.role_arn,
        )

        self.manifests: dict[str, eks.KubernetesManifest] = {}
        previous: eks.KubernetesManifest | None = None
        for chart in self.charts:
            manifest = cluster.add_cdk8s_chart(chart.node.id, chart)
            manifest.node.add_dependency(self.pod_identity)
            for dependency in depends_on:
                manifest.node.add_dependency(dependency)
            if previous is not None:
                manifest.node.add_dependency(previous)
            self.manifests[chart.node.id] = manifest
            previous = manifest
