"""The charts' label and naming conventions (the keys the in-cluster programs read are in
``ray_llm_eks.base.wire``).

Pod templates carry only this project's own keys (``wire.LABEL_PREFIX``), never
``app.kubernetes.io/*`` or ``ray.io/*`` (:data:`KUBERAY_OWNED_LABEL_PREFIXES`); top-level object
metadata carries ``app.kubernetes.io/name`` and ``app.kubernetes.io/instance``.
"""

from __future__ import annotations

from ..base.serving import ServingSpec
from ..base.wire import INSTANCE_LABEL, LABEL_PREFIX, PROJECT, RAY_ROLE_LABEL, SERVES_HTTP_LABEL
from ..base.wire import efa_counters_name as wire_efa_counters_name

NODE_POOL_ANNOTATION = f"{LABEL_PREFIX}node-pool"
"""On each pod template: the node identity of the pool it runs on (``WorkerPool.node_identity``).
Part of the cluster spec hash, so a change that rolls the nodes (a new launch template version)
also gives the gate a new run, which the stack orders after the node groups."""

KUBERAY_OWNED_LABEL_PREFIXES = ("app.kubernetes.io/", "ray.io/")
"""Label keys KubeRay sets on the pods it creates; pod templates must not set any of them.

KubeRay merges its own pod labels (``ray.io/cluster``, ``ray.io/node-type``, ``ray.io/group``,
``ray.io/identifier``, ``ray.io/is-ray-node``, ``app.kubernetes.io/name: kuberay``,
``app.kubernetes.io/created-by: kuberay-operator``) under the template's, so a template label
with the same key wins. But the selector of the RayService's ``<name>-head-svc``
(``BuildHeadServiceForRayService``) is built from KubeRay's defaults, so a head pod labelled
``app.kubernetes.io/name: ray-llm-eks`` matches no selector and that Service has no endpoints
(kuberay issues #2147, #2648). The whole ``app.kubernetes.io/`` and ``ray.io/`` namespaces are
kept off, not just today's keys. Top-level object metadata (the RayService, the Services) may
carry ``app.kubernetes.io/*``: KubeRay does not copy those onto pods.
"""

# Top-level object metadata only (see KUBERAY_OWNED_LABEL_PREFIXES).

# Top-level object metadata only (see KUBERAY_OWNED_LABEL_PREFIXES).
APP_NAME_LABEL = "app.kubernetes.io/name"
APP_INSTANCE_LABEL = "app.kubernetes.io/instance"
NAME = PROJECT


def pod_labels(spec: ServingSpec, ray_role: str, *, serves_http: bool) -> dict[str, str]:
    """Pod-template labels: this project's keys only (:data:`KUBERAY_OWNED_LABEL_PREFIXES`)."""
    return {
        INSTANCE_LABEL: spec.service_name,
        RAY_ROLE_LABEL: ray_role,
        SERVES_HTTP_LABEL: "true" if serves_http else "false",
    }


def efa_counters_name(service_name: str) -> str:
    """The deployment gate's EFA counter reader DaemonSet, and its service account (the name the
    gate looks the DaemonSet up by: :func:`.wire.efa_counters_name`)."""
    return wire_efa_counters_name(service_name)


def bench_job_prefix(service_name: str) -> str:
    """What every benchmark Job's name starts with (``<svc>-bench-<settings hash>``), and so its pods'."""
    return f"{service_name}-bench-"


def gate_name(service_name: str) -> str:
    return f"{service_name}-gate"


def monitor_name(service_name: str) -> str:
    """The continuous verification CronJob and its service account: ``<svc>-cv``, at most 50
    characters for a 47-character service (a CronJob's name may have 52: its Jobs add 11)."""
    return f"{service_name}-cv"
