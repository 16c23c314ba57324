"""A thin, typed ``RayService`` (KubeRay ``ray.io/v1``) object.

Only the RayService's own fields are typed here; the three pod templates inside it are the
typed ``PodTemplateSpec`` of ``cdk8s_plus_35.k8s`` (the Kubernetes 1.35 API that cdk8s-plus-35
already loads), rendered by cdk8s's own serializer. The strict test against the KubeRay v1.4.0
CRD schema (``tests/data/ray.io_rayservices.yaml``) is the guarantee that the result is what
``kubectl apply --validate=strict`` accepts.

Field meanings (KubeRay v1.4.0 ``ray-operator/apis/ray/v1/rayservice_types.go`` and the CRD):

- ``serveConfigV2`` is a YAML string (rendered as JSON, a subset), submitted by the operator to the Serve REST API.
- ``upgradeStrategy.type``: ``NewCluster`` builds a second RayCluster and switches traffic when
  it is ready (blue/green: twice the GPUs); ``None`` updates only the Serve config in place and
  never creates a second cluster, the only choice that fits a cluster sized for one copy.
- ``excludeHeadPodFromServeSvc``: the head (no GPU, ``num-cpus: 0``) runs no Serve replica, so
  it stays out of the ``<name>-serve-svc`` endpoints.
- ``serviceUnhealthySecondThreshold``/``deploymentUnhealthySecondThreshold`` are documented as
  unused in v1 and are never emitted.
- Names longer than 47 characters are refused by KubeRay (it derives longer names from them).

Typed objects, chosen by measurement (2 cores, Python 3.11, cdk8s 2.70, cdk8s-plus-35 2.0.5,
median of three runs; ``/usr/bin/time`` of a script that imports, builds one chart and
synthesizes it):

==================================================  ==========  =========  ============
approach                                            import      total      peak RSS
==================================================  ==========  =========  ============
(a) ``cdk8s import kuberay:=ray.io_rayservices``    1.5 s       1.7 s      317 MB
(b) cdk8s-plus-35 ``k8s`` + this thin object        0.35 s      0.5 s      90 MB
==================================================  ==========  =========  ============

(a) generates a 6.3 MB Python module (1442 classes) plus a 0.6 MB jsii assembly that would have
to be regenerated at bootstrap; (b) adds no generated code, and cdk8s-plus-35 is loaded anyway
for the core kinds. Building and synthesizing the objects costs about 0.05 s either way.
Commands: ``npx cdk8s import kuberay:=.../ray.io_rayservices.yaml --language python``, then
``/usr/bin/time -f %e python m_a.py`` and ``python m_b.py`` (see docs/rayservice.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping, Sequence

import cdk8s
from cdk8s_plus_35 import k8s
from constructs import Construct

from ..base.digest import canonical_digest
from ..base.serving import RAY_SERVICE_NAME_MAX
from ..base.wire import CLUSTER_SPEC_HASH_ANNOTATION

API_VERSION = "ray.io/v1"
KIND = "RayService"

# Every pod template (so every Ray pod) carries wire.CLUSTER_SPEC_HASH_ANNOTATION: the hash of the
# ``rayClusterConfig`` it belongs to. KubeRay 1.4.0 with ``upgradeStrategy: None`` never applies a
# pod-template or replica change to a running RayCluster (its hash clears replicas, and a changed
# template only counts when worker groups are appended: ``rayservice_controller.go``). The
# deployment gate compares this annotation on the running pods with the deployed one and, when they
# differ, deletes the active RayCluster; KubeRay then builds a new one from the current spec
# (docs/replacement.md). Replicas are part of the hash, so a node-count change is a cluster change too.


class UpgradeStrategy(str, Enum):
    none = "None"
    new_cluster = "NewCluster"


def pod_template_to_json(template: k8s.PodTemplateSpec) -> dict[str, Any]:
    """Kubernetes JSON of a typed pod template, by cdk8s's own serializer.

    The ``k8s`` structs have no public serializer of their own; ``KubePodTemplate.to_json`` is
    the generated one (camelCase names, quantities, int-or-string). The throwaway chart is
    never synthesized.
    """
    scratch = cdk8s.Chart(cdk8s.App(), "pod-template")
    return dict(k8s.KubePodTemplate(scratch, "template", template=template).to_json()["template"])


@dataclass(frozen=True)
class HeadGroupSpec:
    ray_start_params: Mapping[str, str]
    template: k8s.PodTemplateSpec

    def to_json(self) -> dict[str, Any]:
        return {"rayStartParams": dict(self.ray_start_params), "template": pod_template_to_json(self.template)}


@dataclass(frozen=True)
class WorkerGroupSpec:
    group_name: str
    replicas: int
    min_replicas: int
    max_replicas: int
    ray_start_params: Mapping[str, str]
    template: k8s.PodTemplateSpec

    def __post_init__(self) -> None:
        if not self.min_replicas <= self.replicas <= self.max_replicas:
            raise ValueError(
                f"worker group {self.group_name}: replicas must satisfy min <= replicas <= max; got "
                f"{self.min_replicas} <= {self.replicas} <= {self.max_replicas}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "groupName": self.group_name,
            "replicas": self.replicas,
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
            "rayStartParams": dict(self.ray_start_params),
            "template": pod_template_to_json(self.template),
        }


@dataclass(frozen=True)
class RayClusterConfig:
    ray_version: str
    head_group_spec: HeadGroupSpec
    worker_group_specs: Sequence[WorkerGroupSpec]
    enable_in_tree_autoscaling: bool = False
    """Off: replica counts are fixed by the node groups' sizes (no Ray autoscaler sidecar)."""
    autoscaler_options: Mapping[str, Any] | None = None
    """``autoscalerOptions`` (KubeRay v1.4.0 CRD) when in-tree autoscaling is on."""
    gcs_fault_tolerance_options: Mapping[str, Any] | None = None
    """``gcsFaultToleranceOptions`` (KubeRay 1.3+): the Redis address and where its password is."""
    auth_mode: str | None = None
    """``authOptions.mode`` (KubeRay 1.5.1+); None leaves the field out, as KubeRay 1.4.0's CRD
    has no such field. Part of the spec hash: a changed mode needs a new RayCluster."""

    def to_json(self) -> dict[str, Any]:
        """The JSON KubeRay reads, every pod template annotated with :attr:`spec_hash`."""
        rendered = self._unannotated_json()
        digest = canonical_digest(rendered)
        templates = [rendered["headGroupSpec"]["template"]]
        templates += [group["template"] for group in rendered["workerGroupSpecs"]]
        for template in templates:
            annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[CLUSTER_SPEC_HASH_ANNOTATION] = digest
        return rendered

    @property
    def spec_hash(self) -> str:
        """12 hex digits of SHA-256 over the canonical JSON of the cluster spec (replicas included)."""
        return canonical_digest(self._unannotated_json())

    def _unannotated_json(self) -> dict[str, Any]:
        return {
            "rayVersion": self.ray_version,
            "enableInTreeAutoscaling": self.enable_in_tree_autoscaling,
            **({"autoscalerOptions": dict(self.autoscaler_options)} if self.autoscaler_options is not None else {}),
            "headGroupSpec": self.head_group_spec.to_json(),
            "workerGroupSpecs": [group.to_json() for group in self.worker_group_specs],
            **({"authOptions": {"mode": self.auth_mode}} if self.auth_mode is not None else {}),
            **({"gcsFaultToleranceOptions": dict(self.gcs_fault_tolerance_options)}
               if self.gcs_fault_tolerance_options is not None else {}),
        }



@dataclass(frozen=True)
class RayServiceSpec:
    serve_config_v2: str
    ray_cluster_config: RayClusterConfig
    upgrade_strategy: UpgradeStrategy = UpgradeStrategy.none
    exclude_head_pod_from_serve_svc: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "upgradeStrategy": {"type": self.upgrade_strategy.value},
            "excludeHeadPodFromServeSvc": self.exclude_head_pod_from_serve_svc,
            "serveConfigV2": self.serve_config_v2,
            "rayClusterConfig": self.ray_cluster_config.to_json(),
        }


class RayService(cdk8s.ApiObject):
    """A KubeRay ``RayService`` whose ``spec`` is a :class:`RayServiceSpec`."""

    def __init__(self, scope: Construct, construct_id: str, *, name: str, spec: RayServiceSpec,
                 labels: Mapping[str, str] | None = None) -> None:
        if len(name) > RAY_SERVICE_NAME_MAX:
            raise ValueError(
                f"RayService name {name!r} has {len(name)} characters; KubeRay accepts at most {RAY_SERVICE_NAME_MAX}"
            )
        super().__init__(
            scope,
            construct_id,
            api_version=API_VERSION,
            kind=KIND,
            metadata=cdk8s.ApiObjectMetadata(name=name, labels=dict(labels or {})),
        )
        self.spec = spec
        self.add_json_patch(cdk8s.JsonPatch.add("/spec", spec.to_json()))
