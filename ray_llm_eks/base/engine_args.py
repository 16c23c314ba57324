"""The engine-arguments escape hatch: vLLM settings the library does not model, passed through.

``model.engine_kwargs`` (both legs) and ``prefill.engine_kwargs`` / ``decode.engine_kwargs`` (one leg,
over the model's) are deep-merged over the ``engine_kwargs`` the library renders into each Ray Serve
LLM ``LLMConfig`` (``cdk8s_charts.serve_config``): a nested mapping merges key by key, anything else
replaces, the leg's value wins over the model's.

Each key is checked here, before any node starts:

- against the names vLLM takes at the image's vLLM version
  (``ray_llm_eks/data/generated/vllm_engine_args.json``, read from vLLM's source by
  tools/generate_vllm_engine_args.py). Ray Serve LLM's ``LLMConfig`` types ``engine_kwargs`` as
  ``Dict[str, Any]`` (Ray 2.58 ``python/ray/llm/_internal/serve/core/configs/llm_config.py``, field
  ``engine_kwargs``) and so accepts any key; only the replica, once its GPU node is up, sorts the
  keys into ``AsyncEngineArgs`` and ``FrontendArgs`` fields and raises ``Unknown engine argument:
  <key>`` for the rest (``engines/vllm/vllm_models.py``, ``VLLMEngineConfig.from_llm_config``). A typo
  would cost a node start and a failed gate.
- against :data:`OWNED`: the keys the library renders itself, or that the pods, the memory check,
  the KV path and the deployment gate depend on, each refused with its reason and the setting to use.
  Every key the library renders is owned, so a user key never overrides a rendered one.

With a custom image, or a tag the library does not know, the vLLM version is unknown: the names are
then not checked (a warning says so), the owned keys still are.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping

from .errors import SpecError, credential_kind, problem

ENGINE_ARGS_FILE = Path(__file__).resolve().parent.parent / "data" / "generated" / "vllm_engine_args.json"
"""vLLM's engine argument names at one version (``make generate VLLM_SOURCE=...``)."""

ENGINE_ARGS_CLASSES = ("EngineArgs", "AsyncEngineArgs", "BaseFrontendArgs", "FrontendArgs")
"""The classes whose fields Ray Serve LLM 2.58 passes to vLLM (``from_llm_config`` takes
``dataclasses.fields(AsyncEngineArgs)`` and ``dataclasses.fields(FrontendArgs)``, bases included)."""


@lru_cache(maxsize=1)
def _generated() -> dict[str, Any]:
    return json.loads(ENGINE_ARGS_FILE.read_text())


def known_version() -> str:
    """The vLLM version whose names the generated file holds."""
    return _generated()["vllm"]


def accepted_names(vllm: str) -> frozenset[str] | None:
    """The ``engine_kwargs`` names Ray Serve LLM passes to vLLM ``vllm``, or None when the library has
    not read that version's source."""
    document = _generated()
    if vllm != document["vllm"]:
        return None
    return frozenset(name for cls in ENGINE_ARGS_CLASSES for name in document["classes"][cls]["fields"])


@dataclass(frozen=True)
class Owned:
    """Why a key is not passed through, and what to set instead."""

    why: str
    instead: str


_KV_SIZE = ("the memory check, the replicas' KV pool and the gate's expected KV bytes per request "
            "are computed from it")
OWNED: dict[str, Owned] = {
    # Ray Serve LLM sets both from model_loading_config and refuses them here
    # (vllm_models.py, VLLMEngineConfig.get_initialization_kwargs).
    "model": Owned("Ray Serve LLM sets it from the model source and refuses it in engine_kwargs", "model.source"),
    "served_model_name": Owned("Ray Serve LLM sets it from the model id and refuses it in engine_kwargs",
                               "model.served_name"),
    # Ray sets "ray" and refuses any other value (get_initialization_kwargs): nothing to choose.
    "distributed_executor_backend": Owned("Ray Serve LLM sets it to 'ray' and refuses any other value",
                                          "leave it out"),
    # Rendered by the library (serve_config.EngineKwargs): each has its own setting.
    "dtype": Owned(f"rendered from model.dtype; {_KV_SIZE}", "model.dtype"),
    "max_model_len": Owned(f"rendered from model.max_model_len; {_KV_SIZE}, and the gate's probe prompt fits it",
                           "model.max_model_len"),
    "gpu_memory_utilization": Owned(f"rendered from model.gpu_memory_utilization; {_KV_SIZE}",
                                    "model.gpu_memory_utilization"),
    "enforce_eager": Owned("rendered from model.enforce_eager", "model.enforce_eager"),
    "tensor_parallel_size": Owned("rendered per leg; the placement bundles, replicas per node and NIXL side-channel "
                                  "ports the pods open are computed from it",
                                  "model.tensor_parallel_size, or <leg>.tensor_parallel_size"),
    "revision": Owned("rendered from model.revision (with tokenizer_revision)", "model.revision"),
    "tokenizer_revision": Owned("rendered from model.revision, the same commit as the weights", "model.revision"),
    "language_model_only": Owned("rendered from model.serve_images; the memory check counts the vision tower "
                                 "by it", "model.serve_images"),
    # The KV path: what the gate verifies (connector, per-leg kv_role, backends, buffer device).
    "kv_transfer_config": Owned("rendered per leg (NixlConnector, kv_producer on prefill, kv_consumer on decode, "
                                "the KV-path table's backends and buffer device); the gate verifies it",
                                "nixl.backends and nixl.kv_buffer_device"),
    # KV offloading makes vLLM set kv_role kv_both and its own connector (vLLM 0.26.0
    # vllm/config/vllm.py:863-891), replacing the NIXL P/D path.
    "kv_offloading_size": Owned("vLLM then replaces the NIXL connector's kv_role with kv_both and adds its own "
                                "connector, which the gate does not verify", "leave it out"),
    "kv_offloading_backend": Owned("only read with kv_offloading_size, which is refused", "leave it out"),
    # The KV cache's size and layout, which the memory check, the autoscaling target and the gate's
    # per-request KV bytes (in whole blocks: ServingSpec.kv_transfer_bytes) assume.
    "kv_cache_dtype": Owned(f"the KV cache is sized in model.dtype: {_KV_SIZE}", "model.dtype"),
    "block_size": Owned("the gate counts KV bytes per request in whole blocks of vLLM's default size "
                        "(models.DEFAULT_BLOCK_SIZE, or the hybrid model's)", "leave it out"),
    "kv_cache_memory_bytes": Owned(f"it replaces gpu_memory_utilization's KV pool; {_KV_SIZE}",
                                   "model.gpu_memory_utilization"),
    "num_gpu_blocks_override": Owned(f"it replaces the KV pool vLLM profiles; {_KV_SIZE}",
                                     "model.gpu_memory_utilization"),
    # One engine of tensor_parallel_size GPUs per replica: the placement bundles, the NIXL ports and
    # the replica counts assume it (serve_config.placement_group_config; Ray's data-parallel builder,
    # serving_patterns/data_parallel, takes over the deployment when data_parallel_size > 1; vLLM's
    # NIXL worker refuses kv_consumer with pipeline_parallel_size > 1, nixl/base_worker.py:436).
    "pipeline_parallel_size": Owned("the placement bundles hold tensor_parallel_size GPUs per replica, one stage",
                                    "model.tensor_parallel_size"),
    "data_parallel_size": Owned("each replica is one engine: Ray's data-parallel deployment would change the "
                                "replica count and NIXL ports the pods are rendered for",
                                "more nodes (<leg>.desired_size), each node one replica per tensor-parallel group"),
    # Where the weights go: HF_HOME on the node's model cache (cdk8s_charts.model_cache); elsewhere
    # they are downloaded again on every pod start.
    "download_dir": Owned("the weights go to the node's model cache (HF_HOME), kept across pod restarts",
                          "leave it out"),
    # Credentials would be written into the RayService manifest, the gate's settings and GitOps output.
    "hf_token": Owned("a token here is written into the RayService manifest", "model.hf_token_secret"),
    "api_key": Owned("a key here is written into the RayService manifest; callers are limited by network policy",
                     "serving.client_namespaces or serving.client_cidrs"),
    # The worker pods run privileged on the GPU nodes (security_profile privileged): code from the
    # model repository would run there with the node's EFA device and the worker role.
    "trust_remote_code": Owned("the model repository's Python would run in the worker pods, which hold the GPU "
                               "node's devices (privileged by default)", "a model whose architecture vLLM implements"),
    # Ray 2.58's LLMConfig refuses disable_log_stats with log_engine_metrics on, its default
    # (llm_config.py, _check_log_stats_with_metrics): the serve application would fail to deploy.
    "disable_log_stats": Owned("Ray Serve LLM refuses it while log_engine_metrics is on (its default)",
                               "leave it out"),
}
"""The keys refused, each with its reason. Anything else vLLM takes is passed through as written:
scheduler limits (``max_num_seqs``, ``max_num_batched_tokens``), prefix caching, chunked prefill,
``compilation_config``, speculative decoding, ``quantization`` (the memory check then counts the
weights at ``model.dtype``, more than they take), ``tokenizer``, ``seed``, tool and reasoning parsers."""


class FrozenKwargs(Mapping[str, Any]):
    """``engine_kwargs`` as a part holds them: unchangeable and hashable, nested mappings and lists
    frozen too, since the parts are frozen dataclasses and a whole :class:`Deployment` hashes (the
    test suite caches a synth by it; a user may keep deployments in a set). :func:`thaw` gives the
    plain dict the Serve config is written from."""

    __slots__ = ("_items",)

    def __init__(self, values: Mapping[Any, Any] | None = None) -> None:
        self._items = {key: _freeze(value) for key, value in (values or {}).items()}

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return repr(thaw(self))


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return FrozenKwargs(value)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    return value


def frozen(value: Any) -> Any:
    """A mapping as :class:`FrozenKwargs`; anything else as given (the spec refuses it)."""
    return FrozenKwargs(value) if isinstance(value, Mapping) and not isinstance(value, FrozenKwargs) else value


def thaw(value: Any) -> Any:
    """Plain dicts and lists again, for the Serve config's JSON."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    return value


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``: mappings on both sides merge key by key, anything else in ``over`` wins."""
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        merged[key] = (deep_merge(below, value) if isinstance(below, Mapping) and isinstance(value, Mapping)
                       else value)
    return merged


def _json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be written into the Serve config (JSON), or None."""
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "not a finite number"
    if isinstance(value, (list, tuple)):
        return next((why for item in value if (why := _json_problem(item))), None)
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            return "a mapping with a key that is not text"
        return next((why for item in value.values() if (why := _json_problem(item))), None)
    return f"a {type(value).__name__}, not a value of JSON"


def _credential(value: Any) -> str | None:
    if isinstance(value, Mapping):
        return next((kind for item in value.values() if (kind := _credential(item))), None)
    if isinstance(value, (list, tuple)):
        return next((kind for item in value if (kind := _credential(item))), None)
    return credential_kind(value)


def _problem(field: str, value: Any, what: str, accepted: str) -> SpecError:
    """:func:`~.errors.problem`, with a credential anywhere inside the value redacted (``shown``
    redacts a credential-shaped text; a list or mapping holding one is not repeated at all)."""
    kind = _credential(value)
    if kind is None or isinstance(value, str):
        return problem(field, value, what, accepted)
    return SpecError(field, f"{what} (got a {type(value).__name__} holding {kind}, redacted); accepted: {accepted}")


def problems(kwargs: Any, field: str, *, vllm: str | None, ray: str) -> list[SpecError]:
    """What is wrong with one ``engine_kwargs`` mapping (``field``: where it is written, such as
    ``model.engine_kwargs``), for the image's vLLM ``vllm`` (None: unknown) and Ray ``ray``."""
    if not isinstance(kwargs, Mapping):
        return [problem(field, kwargs, "not a mapping", "a mapping of vLLM engine argument names to values, or {}")]
    names = accepted_names(vllm) if vllm is not None else None
    found: list[SpecError] = []
    for key, value in kwargs.items():
        where = f"{field}.{key}"
        if not isinstance(key, str):
            found.append(problem(field, key, "an engine argument name that is not text", "vLLM's names, as text"))
            continue
        if (owned := OWNED.get(key)) is not None:
            found.append(_problem(where, value, f"not passed through: {owned.why}", owned.instead))
            continue
        if names is not None and key not in names:
            close = difflib.get_close_matches(key, sorted(names), n=3)
            hint = f"closest: {', '.join(close)}; " if close else ""
            found.append(_problem(where, value, (
                f"not an engine argument of vLLM {vllm} (EngineArgs, AsyncEngineArgs or FrontendArgs, which Ray "
                f"Serve LLM {ray} passes on; any other key stops the replica at start: 'Unknown engine argument')"),
                f"{hint}every name: ray_llm_eks/data/generated/vllm_engine_args.json"))
            continue
        if (kind := _credential(value)) is not None:
            found.append(_problem(where, value, f"holds {kind}, which would be written into the RayService manifest",
                                  "no credential (a Hugging Face token: model.hf_token_secret)"))
            continue
        if (why := _json_problem(value)) is not None:
            found.append(problem(where, value, f"{why}: the Serve config is JSON",
                                 "text, a number, true or false, null, a list or a mapping of them"))
    return found


def unchecked_warning(kwargs_fields: list[str], image: str) -> SpecError | None:
    """The warning for engine arguments whose names could not be checked (the image's vLLM unknown)."""
    if not kwargs_fields:
        return None
    return SpecError(kwargs_fields[0], (
        f"the vLLM version inside image {image} is unknown (a custom repository, or a tag the library does not know), "
        f"so the names in {', '.join(kwargs_fields)} are not checked against its engine arguments (the library "
        f"knows vLLM {known_version()}'s): a wrong name stops the replicas at start with 'Unknown engine argument'"))
