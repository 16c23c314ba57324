"""How Ray Serve picks the replica of a leg for each request: its request router.

Ray Serve routes every call to a deployment through that deployment's request router, set by the
deployment's ``request_router_config`` (Ray 2.58 ``ray/serve/config.py``, ``RequestRouterConfig``:
``request_router_class`` and ``request_router_kwargs``, the keyword arguments Serve passes to the
class's ``initialize_state``). Ray Serve LLM takes it in a model config's ``deployment_config``
(``ray/llm/_internal/serve/core/configs/llm_config.py``, ``LLMConfig.deployment_config``: "Supported
fields are ... ``request_router_config``").

Paths below are in the Ray 2.58.0 wheel (the image's Ray; the router and its public module are the
same files in 2.58.1). What each leg's router decides in the P/D graph that
``build_pd_openai_app`` builds (``ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py:222-300``:
ingress -> ``Decode:`` deployment -> ``Prefill:`` deployment):

- the **prefill** leg's router picks the prefill replica each decode replica calls. The call
  carries a deep copy of the client's request (``engines/vllm/kv_transfer/base.py:213-232``,
  ``prepare_prefill_request``: ``request.model_copy(deep=True)``, clamped to one token;
  ``prefill_decode/pd_server.py:303-322`` prepares it and calls the prefill handle with it), so
  its ``messages`` or ``prompt`` are the client's, which is what ``PrefixCacheAffinityRouter``
  matches on (``_extract_text_from_request``);
- the **decode** leg's router picks the decode replica the ingress calls. Decode is handed the
  prompt's KV cache by NIXL, so its own prefix cache saves no prefill compute there.

Without a router of its own a leg keeps Ray's choice: ``PowerOfTwoChoicesRequestRouter``
(``ray/serve/_private/constants.py``, ``DEFAULT_REQUEST_ROUTER_PATH``), and ``RoundRobinRouter``
for a decode deployment that is the ingress when ``RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING=1``
(``core/ingress/builder.py:35-46``; off by default, ``ray/llm/_internal/serve/constants.py:65``).
Nothing is written for that default, so Ray's own default stays Ray's.

``prefix-cache-affinity`` is ``ray.serve.llm.request_router.PrefixCacheAffinityRouter``
(``ray/serve/llm/request_router.py``, ``@PublicAPI(stability="beta")``, a subclass of
``ray/llm/_internal/serve/routing_policies/prefix_aware/prefix_aware_router.py``'s class): it keeps a
prefix tree of the text each replica was sent and, while the replicas' queues differ by no more than
``imbalanced_threshold``, sends a request to the replica whose text matches the longest share of its
input (below ``match_rate_threshold``, to the replica holding the least text); past the threshold it
routes by power of two. Its arguments are the fields below, each written only when set, so Ray's
defaults (quoted from ``initialize_state``) stay Ray's. Ray accepts any key in
``request_router_kwargs`` and fails only when the replica's router calls ``initialize_state``; here
a misspelled key is refused when the configuration is read (a test checks these names against
``initialize_state``'s parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Mapping

from .errors import Collector, SpecErrors, is_whole_number, problem

PREFIX_CACHE_AFFINITY_ROUTER = "ray.serve.llm.request_router.PrefixCacheAffinityRouter"
"""Ray Serve LLM's public import path of the prefix-aware router (Ray 2.58 ``ray/serve/llm/request_router.py``)."""


class RouterPolicy(str, Enum):
    default = "default"
    """Ray Serve's own router (nothing written): power of two choices."""
    prefix_cache_affinity = "prefix-cache-affinity"
    """``ray.serve.llm.request_router.PrefixCacheAffinityRouter``."""


ROUTER_CLASSES: dict[RouterPolicy, str] = {RouterPolicy.prefix_cache_affinity: PREFIX_CACHE_AFFINITY_ROUTER}
"""The ``request_router_class`` each non-default policy writes."""


@dataclass(frozen=True)
class RequestRouter:
    """How Ray Serve picks this leg's replica for each request (docs/scaling.md, "Prefix-aware routing")."""

    __pydantic_config__ = {"extra": "forbid"}

    policy: RouterPolicy = RouterPolicy.default
    """default (Ray Serve's power of two choices) or prefix-cache-affinity (Ray Serve LLM's PrefixCacheAffinityRouter: a request goes to the replica that was sent the longest matching prefix, so vLLM's prefix cache there holds it). The settings below apply to prefix-cache-affinity only."""
    imbalanced_threshold: float | None = None
    """Route by prefix while the candidate replicas' queue lengths differ by at most this; past it, by power of two. None: Ray's default, infinity (always by prefix, whatever the load)."""
    match_rate_threshold: float | None = None
    """The share (0 to 1) of a request's text that must match a replica's for prefix routing; below it, the replica holding the least text. None: Ray's default, 0.1."""
    do_eviction: bool | None = None
    """Trim the router's prefix tree (characters kept per replica) periodically. None: Ray's default, false."""
    eviction_threshold_chars: int | None = None
    """With do_eviction: trim a replica's text once it passes this many characters. None: Ray's default, 400000."""
    eviction_target_chars: int | None = None
    """With do_eviction: trim down to this many characters (at most eviction_threshold_chars). None: Ray's default, 360000."""
    eviction_interval_secs: int | None = None
    """With do_eviction: seconds between eviction checks. None: Ray's default, 10."""

    def __post_init__(self) -> None:
        found = Collector()
        try:
            object.__setattr__(self, "policy", RouterPolicy(self.policy))
        except ValueError:
            found.add(problem("policy", self.policy, "not a request router policy",
                              ", ".join(p.value for p in RouterPolicy)))
            found.raise_if_any(self)
        for name in ("imbalanced_threshold", "match_rate_threshold"):
            value = getattr(self, name)
            # Finite only: the Serve config is JSON, which has no infinity (leave the field out for Ray's).
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0
                                      or (name == "match_rate_threshold" and value > 1)):
                found.add(problem(name, value, "not a threshold", "a number from 0 to 1" if name ==
                                  "match_rate_threshold" else "a finite queue length difference, 0 or more; "
                                  "leave it out for Ray's default (infinity)"))
        if self.do_eviction is not None and not isinstance(self.do_eviction, bool):
            found.add(problem("do_eviction", self.do_eviction, "not true or false", "true or false, or none"))
        for name in ("eviction_threshold_chars", "eviction_target_chars", "eviction_interval_secs"):
            value = getattr(self, name)
            if value is not None and (not is_whole_number(value) or value < 1):
                found.add(problem(name, value, "not a positive whole number", "a whole number >= 1, or none"))
        threshold, target = self.eviction_threshold_chars, self.eviction_target_chars
        if is_whole_number(threshold) and is_whole_number(target) and target > threshold:
            found.add(problem("eviction_target_chars", target, f"above eviction_threshold_chars ({threshold}): "
                              "eviction would never bring the tree under its trigger", f"at most {threshold}"))
        if self.policy is RouterPolicy.default and self.kwargs:
            found.add(problem(next(iter(self.kwargs)), next(iter(self.kwargs.values())),
                              "a prefix-cache-affinity setting, but policy is default (Ray Serve's power of two "
                              "choices takes no settings)", "policy: prefix-cache-affinity, or leave the setting out"))
        found.raise_if_any(self)

    @property
    def kwargs(self) -> dict[str, Any]:
        """``request_router_kwargs``: the settings given, by Ray's names (the field names)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "policy" and getattr(self, f.name) is not None}

    @property
    def router_class(self) -> str | None:
        """``request_router_class``, or None for Ray's default (nothing written)."""
        return ROUTER_CLASSES.get(self.policy)


KWARG_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RequestRouter) if f.name != "policy")
"""The ``request_router_kwargs`` names this library writes: ``initialize_state``'s parameters but
``tree_actor`` (a test's stand-in for the prefix tree actor, an actor handle no config can carry)."""


def request_router_of(settings: Mapping[str, Any]) -> RequestRouter:
    """A :class:`RequestRouter` from its mapping form; an unknown key is refused with the names
    accepted (Ray itself would take it silently and fail only in the replica's router)."""
    accepted = [f.name for f in fields(RequestRouter)]
    unknown = [key for key in settings if key not in accepted]
    if unknown:
        raise SpecErrors([problem(str(key), settings[key], "not a request router setting", ", ".join(accepted))
                          for key in unknown], "RequestRouter")
    return RequestRouter(**settings)
