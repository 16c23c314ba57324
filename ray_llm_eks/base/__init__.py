"""The base layer, below both halves: the declared deployment and what the AWS constructs and the
cdk8s charts must agree on.

It imports no ``aws_cdk``, no ``cdk8s`` and no ``constructs``; ``ray_llm_eks.constructs`` and
``ray_llm_eks.cdk8s_charts`` both import it and never each other (a test walks the imports).
It holds:

- :mod:`.deployment`: :class:`Deployment`, the whole deployment as declared (what a YAML file
  loads into), with the rules that cross its AWS-side parts;
- :mod:`.composition`: :func:`~.composition.compose`, the one step that makes a deployment's parts
  into :class:`Specs` (:mod:`.specs`), with every rule that crosses the serving parts; the
  configuration and the constructs used directly both call it;
- :mod:`.cost` and :mod:`.spend`: the hourly cost of :class:`Specs` and the spend limits;
- :mod:`.histogram`: Prometheus histogram quantiles (the gate and the bench both read them);
- :mod:`.wire`: the names and settings the in-cluster programs share with the charts;
- :mod:`.units`: byte units;
- :mod:`.placement`: the worker roles, node labels and taints;
- :mod:`.pools`: :class:`WorkerPool` and :class:`SystemPool`, what a node group creates;
- :mod:`.routing`: :class:`RequestRouter`, a leg's Ray Serve request router;
- :mod:`.serving`: :class:`Leg`, :class:`ServiceSettings` and :class:`ServingSpec` (model, image,
  topology, engine settings, on its legs)
  and the facts both halves use (ports, the DLC account and tags);
- :mod:`.kv_path`: the KV-path table (``kv_buffer_device``, NIXL backends, worker environment by
  attention kind, GPUDirect RDMA and the image's vLLM and NIXL), and :mod:`.upstream_defects`, the
  upstream defects it is checked against (and whose log lines the deployment gate names);
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
from .pools import Capacity, RootVolume, SystemPool, WorkerPool
from .routing import RequestRouter, RouterPolicy
from .serving import (
    DisaggregationSpec,
    EndpointType,
    ImageSpec,
    ModelSpec,
    NixlSpec,
    SecurityProfile,
    RayAuth,
    GcsFaultTolerance,
    Leg,
    ServiceSettings,
    ServingSpec,
    Topology,
)
from .specs import Specs
from .deployment import ClusterSettings, Deployment, Network, Versions

__all__ = [
    "DECODE",
    "GPU_PRESENT_LABEL",
    "GPU_TAINT_KEY",
    "PREFILL",
    "ROLE_LABEL",
    "SYSTEM_LABELS",
    "WORKER_ROLES",
    "ClusterSettings",
    "Deployment",
    "DisaggregationSpec",
    "Leg",
    "Network",
    "ServiceSettings",
    "Specs",
    "Versions",
    "EndpointType",
    "ImageSpec",
    "ModelSpec",
    "NixlSpec",
    "Capacity",
    "RequestRouter",
    "RootVolume",
    "RouterPolicy",
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
