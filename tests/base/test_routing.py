"""The request router per leg (``prefill.request_router`` / ``decode.request_router``) and the KV
buffer device's default: what the Serve config carries, checked with Ray 2.58's own classes.

What Ray's schema is run on here, and what it is not: this virtualenv has Ray 2.58.1 without vLLM,
and ``ray/serve/llm/__init__.py`` imports vLLM's protocol models, so ``import
ray.serve.llm.request_router`` fails there ("Neither vLLM nor SGLang is installed"), and Ray's
``RequestRouterConfig`` imports the class it names when built. The :func:`public_router_module`
fixture therefore loads Ray's own file ``ray/serve/llm/request_router.py`` under its real module
name without running the package's ``__init__`` (the file itself imports only Ray's internal router
modules, which need no vLLM). Everything after that is Ray's code on the rendered dict:
``LLMConfig`` (which builds Serve's ``DeploymentConfig`` and so the ``RequestRouterConfig``, importing
and cloudpickling the class) and ``ServeDeploySchema``. Not run here: the package ``ray.serve.llm``
itself and ``PDServingArgs`` (both import vLLM; the image and the twin have it), and the router at
work (measured on the twin: ``tests/twin/test_twin_prefix_routing.py``, docs/twin.md).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

from helpers.pins import unpinned_config
from ray_llm_eks.base import Leg, WorkerPool
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.routing import KWARG_NAMES, PREFIX_CACHE_AFFINITY_ROUTER, RequestRouter, RouterPolicy
from ray_llm_eks.cdk8s_charts.serve_config import build_serve_config
from ray_llm_eks.config import ConfigError
from ray_llm_eks.docgen import attribute_docs

PREFIX = {"policy": "prefix-cache-affinity"}


def args_of(data: dict) -> dict:
    return build_serve_config(unpinned_config(data).specs().serving).to_dict()["applications"][0]["args"]


def refusal(data: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        unpinned_config(data)
    return str(caught.value)


@pytest.fixture
def public_router_module(monkeypatch):
    """Ray's ``ray/serve/llm/request_router.py``, loaded as ``ray.serve.llm.request_router`` (see
    the module docstring for why not through its package)."""
    import ray

    module_name, _, class_name = PREFIX_CACHE_AFFINITY_ROUTER.rpartition(".")
    path = Path(ray.__file__).parent / "serve" / "llm" / "request_router.py"
    assert path.is_file(), f"ray {ray.__version__} has no {path}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, module_name, module)
    spec.loader.exec_module(module)
    assert hasattr(module, class_name)
    return module


# --- rendering ---------------------------------------------------------------------------------


def test_by_default_no_leg_writes_a_router_and_ray_keeps_its_own():
    args = args_of({})
    for role in ("prefill", "decode"):
        assert "request_router_config" not in args[f"{role}_config"]["deployment_config"]


def test_prefix_cache_affinity_on_prefill_is_the_prefill_deployments_router_only():
    args = args_of({"prefill": {"request_router": {**PREFIX, "imbalanced_threshold": 8, "match_rate_threshold": 0.2}}})
    assert args["prefill_config"]["deployment_config"] == {
        "num_replicas": 1,
        "request_router_config": {"request_router_class": "ray.serve.llm.request_router.PrefixCacheAffinityRouter",
                                  "request_router_kwargs": {"imbalanced_threshold": 8.0, "match_rate_threshold": 0.2}}}
    assert "request_router_config" not in args["decode_config"]["deployment_config"]


def test_only_the_settings_given_are_written_so_rays_defaults_stay_rays():
    args = args_of({"decode": {"request_router": PREFIX}})
    assert args["decode_config"]["deployment_config"]["request_router_config"]["request_router_kwargs"] == {}
    assert "request_router_config" not in args["prefill_config"]["deployment_config"]


def test_an_autoscaled_leg_keeps_its_autoscaling_beside_the_router():
    args = args_of({"prefill": {"min_size": 1, "desired_size": 1, "max_size": 2, "request_router": PREFIX}})
    deployment = args["prefill_config"]["deployment_config"]
    assert set(deployment) == {"autoscaling_config", "request_router_config"}


def test_colocated_takes_the_prefill_legs_router():
    args = args_of({"topology": "colocated", "prefill": {"request_router": {**PREFIX, "do_eviction": True}}})
    (llm,) = args["llm_configs"]
    assert llm["deployment_config"]["request_router_config"] == {
        "request_router_class": PREFIX_CACHE_AFFINITY_ROUTER, "request_router_kwargs": {"do_eviction": True}}


# --- Ray's own schema ---------------------------------------------------------------------------


def test_the_rendered_router_passes_rays_models_and_imports_rays_public_class(public_router_module):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import (
        PrefixCacheAffinityRouter as Implementation,
    )
    from ray.serve._private.config import DeploymentConfig  # what LLMConfig validates deployment_config with
    from ray.serve.config import RequestRouterConfig
    from ray.serve.request_router import RequestRouter as ServeRequestRouter
    from ray.serve.schema import ServeDeploySchema

    data = {"prefill": {"request_router": {**PREFIX, "imbalanced_threshold": 4, "match_rate_threshold": 0.3,
                                           "do_eviction": True, "eviction_threshold_chars": 200_000,
                                           "eviction_target_chars": 150_000, "eviction_interval_secs": 5}}}
    document = build_serve_config(unpinned_config(data).specs().serving).to_dict()
    ServeDeploySchema.model_validate(document)
    args = document["applications"][0]["args"]
    llm = LLMConfig.model_validate(args["prefill_config"])
    deployment = DeploymentConfig(**llm.deployment_config)
    router = deployment.request_router_config
    assert isinstance(router, RequestRouterConfig)
    cls = router.get_request_router_class()
    assert cls is public_router_module.PrefixCacheAffinityRouter
    assert issubclass(cls, Implementation) and issubclass(cls, ServeRequestRouter)
    assert router.get_serialized_request_router_cls()  # Ray pickled the class it imported
    # Every kwarg binds to the router's initialize_state (Ray only finds out in the replica).
    inspect.signature(cls.initialize_state).bind(None, **router.request_router_kwargs)


def test_kwarg_names_are_initialize_states_parameters_and_the_defaults_documented_are_rays():
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter

    parameters = dict(inspect.signature(PrefixCacheAffinityRouter.initialize_state).parameters)
    parameters.pop("self")
    assert parameters.pop("tree_actor").default is None  # a test's actor handle, never configured
    assert set(KWARG_NAMES) == set(parameters)
    docs = attribute_docs(RequestRouter)
    spelled = {float("inf"): "infinity", False: "false"}
    for name, parameter in parameters.items():
        default = parameter.default
        assert f"Ray's default, {spelled.get(default, default)}" in docs[name], (name, default)


def test_ray_itself_takes_a_misspelled_kwarg_silently_and_the_config_refuses_it():
    from ray.serve.config import RequestRouterConfig

    quiet = RequestRouterConfig(request_router_kwargs={"imbalance_threshold": 4})  # Ray's default class
    assert quiet.request_router_kwargs == {"imbalance_threshold": 4}
    message = refusal({"prefill": {"request_router": {**PREFIX, "imbalance_threshold": 4}}})
    assert "prefill.request_router.imbalance_threshold" in message and "(got 4)" in message
    for name in ("policy", *KWARG_NAMES):
        assert name in message


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings, field, accepted", [
    ({"policy": "prefix"}, "prefill.request_router.policy", "default, prefix-cache-affinity"),
    ({**PREFIX, "match_rate_threshold": 1.5}, "prefill.request_router.match_rate_threshold", "from 0 to 1"),
    ({**PREFIX, "imbalanced_threshold": -1}, "prefill.request_router.imbalanced_threshold", "0 or more"),
    ({**PREFIX, "imbalanced_threshold": float("inf")}, "prefill.request_router.imbalanced_threshold", "infinity"),
    ({**PREFIX, "eviction_interval_secs": 0}, "prefill.request_router.eviction_interval_secs", ">= 1"),
    ({**PREFIX, "eviction_threshold_chars": 1000, "eviction_target_chars": 2000},
     "prefill.request_router.eviction_target_chars", "at most 1000"),
    ({"imbalanced_threshold": 4}, "prefill.request_router.imbalanced_threshold", "policy: prefix-cache-affinity"),
], ids=["policy", "match-rate", "negative", "infinite", "interval", "target-above-threshold", "default-with-setting"])
def test_a_bad_router_setting_is_refused_with_its_field_and_what_is_accepted(settings, field, accepted):
    message = refusal({"prefill": {"request_router": settings}})
    line = next(line for line in message.splitlines() if field in line)
    assert accepted in line


def test_colocated_refuses_a_decode_router_it_would_drop():
    message = refusal({"topology": "colocated", "decode": {"request_router": PREFIX}})
    assert "decode.request_router" in message and "prefill.request_router" in message


def test_the_mapping_form_on_a_leg_names_an_unknown_key_and_the_accepted_ones():
    with pytest.raises(SpecErrors) as caught:
        Leg(WorkerPool("prefill"), request_router={**PREFIX, "match_rate": 0.5})
    (error,) = caught.value.errors
    assert error.field == "request_router.match_rate" and "0.5" in error.message
    assert "match_rate_threshold" in error.message
    leg = Leg(WorkerPool("prefill"), request_router={**PREFIX, "match_rate_threshold": 0.5})
    assert leg.request_router == RequestRouter(policy=RouterPolicy.prefix_cache_affinity, match_rate_threshold=0.5)


def test_the_example_in_docs_scaling_is_accepted_and_renders_the_router():
    import yaml

    text = (Path(__file__).resolve().parents[2] / "docs" / "scaling.md").read_text()
    section = text[text.index("## Prefix-aware routing"):]
    example = yaml.safe_load(section[section.index("```yaml") + len("```yaml"):section.index("```", section.index("```yaml") + 7)])
    args = args_of(example)
    assert args["prefill_config"]["deployment_config"]["num_replicas"] == 2
    assert args["prefill_config"]["deployment_config"]["request_router_config"] == {
        "request_router_class": PREFIX_CACHE_AFFINITY_ROUTER, "request_router_kwargs": {"imbalanced_threshold": 8.0}}
