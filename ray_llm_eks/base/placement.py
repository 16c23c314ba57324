"""Where pods land: the worker roles, and the node labels and taints both halves agree on.

The AWS side (``constructs.nodegroups``) puts these labels and taints on the nodes; the
Kubernetes side (``cdk8s_charts.pod_templates``) selects and tolerates them, and the device
plugins (``constructs.addons``) tolerate them too. They are written here once.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import problem
from .wire import LABEL_PREFIX

PREFILL = "prefill"
DECODE = "decode"
WORKER_ROLES: tuple[str, ...] = (PREFILL, DECODE)
"""The two GPU worker roles of a disaggregated deployment (the colocated baseline uses both
node groups for one model config)."""

SYSTEM_ROLE = "system"
ROLE_LABEL = "role"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
"""The NVIDIA device plugin's node affinity looks for this label."""
GPU_TAINT_KEY = f"{LABEL_PREFIX}gpu-role"
NO_SCHEDULE = "NoSchedule"

SYSTEM_LABELS: dict[str, str] = {ROLE_LABEL: SYSTEM_ROLE}


@dataclass(frozen=True)
class Taint:
    """A node taint; pods tolerate it with ``operator: Equal`` on the same key, value and effect."""

    key: str
    value: str
    effect: str = NO_SCHEDULE


def require_worker_role(role: str, field: str = "role") -> str:
    if role not in WORKER_ROLES:
        raise problem(field, role, "not a worker role", ", ".join(WORKER_ROLES))
    return role


def worker_labels(role: str) -> dict[str, str]:
    return {ROLE_LABEL: role, GPU_PRESENT_LABEL: "true"}


def worker_taint(role: str) -> Taint:
    """Keeps every pod that does not tolerate it off the role's dedicated GPU nodes."""
    return Taint(key=GPU_TAINT_KEY, value=role)
