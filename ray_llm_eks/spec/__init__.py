"""The plain layer below both halves: what the AWS constructs and the cdk8s charts must agree on.

It imports no ``aws_cdk``, no ``cdk8s`` and no ``constructs``; ``ray_llm_eks.constructs`` and
``ray_llm_eks.cdk8s_charts`` both import it and never each other (a test walks the imports).
It holds:

- :mod:`.placement`: the worker roles, node labels and taints;
- :mod:`.pools`: :class:`WorkerPool` and :class:`SystemPool`, what a node group creates;
- :mod:`.serving`: :class:`ServingSpec` (model, image, topology, engine settings, on its pools)
  and the facts both halves use (ports, the DLC account and tags);
- :mod:`.infrastructure`: the checks and defaults of the AWS side;
- :mod:`.memory` and :mod:`.sizing`: GPU memory and pod sizing, computed from the instance table;
- :mod:`.errors`: :class:`SpecError`, one shape for every refusal.

Every default is stated once here; the constructs' props and the configuration model refer to it.
"""

from .errors import SpecError, SpecErrors
from .placement import (
    DECODE,
    GPU_PRESENT_LABEL,
    GPU_TAINT_KEY,
    PREFILL,
    ROLE_LABEL,
    SYSTEM_LABELS,
    WORKER_ROLES,
    Taint,
)
from .pools import RootVolume, SystemPool, WorkerPool
from .serving import (
    EndpointType,
    ImageSpec,
    ModelSpec,
    NixlSpec,
    SecurityProfile,
    RayAuth,
    GcsFaultTolerance,
    ServingSpec,
    Topology,
)

__all__ = [
    "DECODE",
    "GPU_PRESENT_LABEL",
    "GPU_TAINT_KEY",
    "PREFILL",
    "ROLE_LABEL",
    "SYSTEM_LABELS",
    "WORKER_ROLES",
    "EndpointType",
    "ImageSpec",
    "ModelSpec",
    "NixlSpec",
    "RootVolume",
    "SecurityProfile",
    "RayAuth",
    "GcsFaultTolerance",
    "ServingSpec",
    "SpecError",
    "SpecErrors",
    "SystemPool",
    "Taint",
    "Topology",
    "WorkerPool",
]
