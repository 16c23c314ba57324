"""What the constructs apply to the cluster, as data: a GitOps tool applies the same in their place.

Each construct that puts Kubernetes objects on the cluster describes them here: a Helm chart as
a :class:`HelmRelease` (its coordinates and the values ``eks.HelmChart`` gets), plain objects as
an :class:`ObjectSet`. With ``kubernetes_owner`` ``cdk`` (the default) the construct applies them
itself (``HelmRelease.install``, ``eks.KubernetesManifest``); with ``gitops`` it applies nothing and
``ray_llm_eks.gitops.render_manifests`` writes them for Argo CD or Flux (docs/gitops.md). Either
way the construct's ``gitops_parts`` lists them, so what a GitOps tool gets is what the stack
would have applied, from one description.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from aws_cdk import Duration, aws_eks_v2 as eks
from constructs import Construct

from ..base.errors import problem
from ..base.infrastructure import KubernetesOwner
from .validation import ConstructValidationError


def kubernetes_owner_of(scope: Construct, value: KubernetesOwner | str) -> KubernetesOwner:
    """``value`` as a :class:`KubernetesOwner`, or a ``ConstructValidationError`` naming the prop."""
    try:
        return KubernetesOwner(value)
    except ValueError:
        raise ConstructValidationError(scope, [problem(
            "kubernetes_owner", value, "not an owner of the Kubernetes side",
            " or ".join(owner.value for owner in KubernetesOwner))]) from None


@dataclass(frozen=True)
class HelmRelease:
    """One Helm release, as ``eks.HelmChart`` installs it (the chart from ``repository``).

    ``values`` may hold CDK tokens (the cluster's name, the stack's region when it has none).
    ``create_namespace``, ``wait`` and ``timeout_minutes``: None leaves ``eks.HelmChart``'s own
    default (it creates the namespace; it does not wait).
    """

    release: str
    chart: str
    repository: str
    version: str
    namespace: str
    values: Mapping[str, Any]
    create_namespace: bool | None = None
    wait: bool | None = None
    timeout_minutes: int | None = None

    def install(self, scope: Construct, construct_id: str, cluster: eks.ICluster) -> eks.HelmChart:
        options: dict[str, Any] = {}
        if self.create_namespace is not None:
            options["create_namespace"] = self.create_namespace
        if self.wait is not None:
            options["wait"] = self.wait
        if self.timeout_minutes is not None:
            options["timeout"] = Duration.minutes(self.timeout_minutes)
        return eks.HelmChart(scope, construct_id, cluster=cluster, chart=self.chart, repository=self.repository,
                             version=self.version, release=self.release, namespace=self.namespace,
                             values=dict(self.values), **options)


@dataclass(frozen=True)
class ObjectSet:
    """Plain Kubernetes objects applied together (``eks.KubernetesManifest``); ``name`` names the file."""

    name: str
    objects: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def apply(self, scope: Construct, construct_id: str, cluster: eks.ICluster) -> eks.KubernetesManifest:
        return eks.KubernetesManifest(scope, construct_id, cluster=cluster, manifest=list(self.objects))
