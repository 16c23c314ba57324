"""What every chart's own containers share: Guaranteed resources, and the locked-down, non-root
security contexts of the project's helpers (gate, EFA counter reader, bench, password copy)."""

from __future__ import annotations

from typing import Mapping

from cdk8s_plus_35 import k8s

from ..base import sizing

NOBODY = 65534


def guaranteed(resources: sizing.PodResources, extra: Mapping[str, int] | None = None) -> k8s.ResourceRequirements:
    """Requests equal to limits: the Guaranteed QoS class (see ``sizing``)."""
    amounts = {
        "cpu": k8s.Quantity.from_string(resources.cpu_quantity),
        "memory": k8s.Quantity.from_string(resources.memory_quantity),
    }
    amounts.update({name: k8s.Quantity.from_number(count) for name, count in (extra or {}).items()})
    return k8s.ResourceRequirements(requests=dict(amounts), limits=dict(amounts))


def locked_down() -> k8s.SecurityContext:
    """For the project's own helper containers: no capability, nothing writable, no way up."""
    return k8s.SecurityContext(
        allow_privilege_escalation=False, privileged=False, read_only_root_filesystem=True,
        capabilities=k8s.Capabilities(drop=["ALL"]), seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
    )


def non_root() -> k8s.PodSecurityContext:
    """nobody: the helpers (gate, EFA counter reader, bench) read, compute and send, nothing more."""
    return k8s.PodSecurityContext(run_as_non_root=True, run_as_user=NOBODY, run_as_group=NOBODY,
                                  seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"))


def env_vars(values: Mapping[str, str]) -> list[k8s.EnvVar]:
    return [k8s.EnvVar(name=name, value=value) for name, value in values.items()]
