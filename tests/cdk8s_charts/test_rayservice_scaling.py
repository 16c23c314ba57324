"""xPyD, fixed and autoscaled: the Serve config and the worker groups for 1P1D, 1P2D and 2P1D,
checked against Ray 2.58's own models (``LLMConfig``, ``AutoscalingConfig``, ``PDServingArgs``)
and the strict KubeRay v1.4.0 CRD; and the refusals for ranges the serving path cannot take."""

from __future__ import annotations

import json

import pytest
from helpers.charts import leg, render

from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.observability import ObservabilitySpec
from ray_llm_eks.base.serving import Topology

UNWATCHED = ObservabilitySpec(enabled=False)
"""Scale to zero is refused with continuous verification on (the last test), so the others turn it off."""

SHAPES = {"1P1D": (1, 1), "1P2D": (1, 2), "2P1D": (2, 1)}
GROWTH = {"prefill": 2, "decode": 3}
"""Autoscaled: each leg may add this many nodes above its deploy-time size."""


def _legs(prefill: int, decode: int, autoscaled: bool) -> dict:
    def sized(role: str, n: int):
        return leg(role, min_size=n, desired_size=n, max_size=n + (GROWTH[role] if autoscaled else 0))

    return {"prefill": sized("prefill", prefill), "decode": sized("decode", decode)}


def _deployment(legs: dict[str, dict], **parts) -> Deployment:
    """A deployment whose legs are given as their fields, by role."""
    return Deployment(**{role: leg(role, **fields) for role, fields in legs.items()}, **parts)


_cache: dict[tuple[str, bool], object] = {}


def _rendered(shape: str, autoscaled: bool):
    if (shape, autoscaled) not in _cache:
        _cache[shape, autoscaled] = render(Deployment(**_legs(*SHAPES[shape], autoscaled)))
    return _cache[shape, autoscaled]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_fixed_xpyd_fixes_replicas_and_worker_groups(shape):
    prefill_nodes, decode_nodes = SHAPES[shape]
    rendered = _rendered(shape, autoscaled=False)
    args = rendered.application["args"]
    assert args["prefill_config"]["deployment_config"] == {"num_replicas": prefill_nodes}
    assert args["decode_config"]["deployment_config"] == {"num_replicas": decode_nodes}
    for role, nodes in (("prefill", prefill_nodes), ("decode", decode_nodes)):
        group = rendered.worker_group(role)
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (nodes, nodes, nodes)
        assert json.loads(group["rayStartParams"]["resources"].strip("'")) == {role: 1}
        # Every replica rank's NIXL side-channel port is declared on every pod of the role.
        ports = [p["containerPort"] for p in rendered.worker_container(role)["ports"] if p["name"].startswith("nixl-")]
        assert len(ports) == nodes
    assert rendered.cluster["enableInTreeAutoscaling"] is False
    assert "autoscalerOptions" not in rendered.cluster


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_autoscaled_xpyd_scales_each_leg_between_its_node_group_sizes(shape):
    prefill_nodes, decode_nodes = SHAPES[shape]
    rendered = _rendered(shape, autoscaled=True)
    args = rendered.application["args"]
    for role, nodes in (("prefill", prefill_nodes), ("decode", decode_nodes)):
        high = nodes + GROWTH[role]
        (config,) = args[f"{role}_config"]["deployment_config"].values()
        # One replica per L4 node; the target is the decode KV pool's sequences at max_model_len (10).
        assert args[f"{role}_config"]["deployment_config"] == {"autoscaling_config": {
            "min_replicas": nodes, "initial_replicas": nodes, "max_replicas": high, "target_ongoing_requests": 10.0}}
        group = rendered.worker_group(role)
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (nodes, nodes, high)
        # The Ray autoscaler plans pods from the declared resources: Serve LLM's accelerator hint
        # must be among them, or no pending replica matches the group (kuberay #863).
        assert json.loads(group["rayStartParams"]["resources"].strip("'")) == {role: 1, "accelerator_type:L4": 1}
        annotations = group["template"]["metadata"]["annotations"]
        assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
        ports = [p for p in rendered.worker_container(role)["ports"] if p["name"].startswith("nixl-")]
        assert len(ports) == high  # ranks up to the most replicas the leg may have
    cluster = rendered.cluster
    assert cluster["enableInTreeAutoscaling"] is True
    options = cluster["autoscalerOptions"]
    assert (options["version"], options["upscalingMode"], options["idleTimeoutSeconds"]) == ("v2", "Default", 60)
    assert options["resources"]["requests"] == options["resources"]["limits"] == {"cpu": "200m", "memory": "512Mi"}
    # The API credentials reach the autoscaler container only; the head keeps no token of its own,
    # and KubeRay's autoscaler Role is bound to the head's own account, which no worker uses.
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["serviceAccountName"] == "ray-llm-head"
    assert {rendered.worker_group(r)["template"]["spec"]["serviceAccountName"] for r in ("prefill", "decode")} == {
        "ray-llm"}
    accounts = [o for o in rendered.all_objects() if o["kind"] == "ServiceAccount"]
    assert {a["metadata"]["name"]: a.get("automountServiceAccountToken") for a in accounts} == {
        "ray-llm": False, "ray-llm-head": False, "ray-llm-teardown-guard": False}
    assert head["automountServiceAccountToken"] is False
    (volume,) = head["volumes"]
    assert options["volumeMounts"] == [{"name": volume["name"], "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                        "readOnly": True}]
    assert [next(iter(s)) for s in volume["projected"]["sources"]] == ["serviceAccountToken", "configMap", "downwardAPI"]
    assert not any(m["name"] == volume["name"] for c in head["containers"] for m in c.get("volumeMounts") or [])


@pytest.mark.parametrize("autoscaled", [False, True], ids=["fixed", "autoscaled"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_passes_rays_models_and_the_strict_crd(shape, autoscaled, strict_rayservice_validator):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.config import AutoscalingConfig

    rendered = _rendered(shape, autoscaled)
    errors = sorted(strict_rayservice_validator.iter_errors(rendered.ray_service), key=str)
    assert not errors, [e.message for e in errors]
    args = rendered.application["args"]
    for role in ("prefill", "decode"):
        llm = LLMConfig.model_validate(args[f"{role}_config"])
        deployment = llm.deployment_config
        if autoscaled:
            scaling = AutoscalingConfig(**deployment["autoscaling_config"])
            assert scaling.min_replicas <= scaling.initial_replicas <= scaling.max_replicas
            assert scaling.target_ongoing_requests == 10.0  # not Serve LLM's 1e9, which never scales up
        else:
            assert deployment == {"num_replicas": SHAPES[shape][0 if role == "prefill" else 1]}


def test_serve_llm_defaults_do_not_override_the_target():
    """Ray Serve LLM merges its defaults (target 1e9, max ongoing 1e9) under the deployment_config
    we write, with its own merge function (Ray 2.58 ``core/server/builder.py``,
    ``DEFAULT_DEPLOYMENT_OPTIONS``, built from these constants): the written target must survive."""
    from ray.llm._internal.common.dict_utils import maybe_apply_llm_deployment_config_defaults
    from ray.llm._internal.serve.constants import DEFAULT_MAX_ONGOING_REQUESTS, DEFAULT_MAX_TARGET_ONGOING_REQUESTS

    defaults = {"max_ongoing_requests": DEFAULT_MAX_ONGOING_REQUESTS,
                "autoscaling_config": {"target_ongoing_requests": DEFAULT_MAX_TARGET_ONGOING_REQUESTS}}
    ours = _rendered("1P2D", autoscaled=True).application["args"]["decode_config"]["deployment_config"]
    merged = maybe_apply_llm_deployment_config_defaults(defaults, dict(ours))
    assert merged["autoscaling_config"] == {**ours["autoscaling_config"]}
    assert DEFAULT_MAX_TARGET_ONGOING_REQUESTS >= 1e9
    # A fixed leg's num_replicas drops the default autoscaling_config (no conflict with Serve).
    fixed = _rendered("1P2D", autoscaled=False).application["args"]["decode_config"]["deployment_config"]
    assert "autoscaling_config" not in maybe_apply_llm_deployment_config_defaults(defaults, dict(fixed))


def test_colocated_autoscales_one_deployment_over_both_groups():
    rendered = render(Deployment(topology=Topology.colocated, **_legs(1, 2, autoscaled=True)))
    (llm,) = rendered.application["args"]["llm_configs"]
    assert llm["deployment_config"] == {"autoscaling_config": {
        "min_replicas": 3, "initial_replicas": 3, "max_replicas": 8, "target_ongoing_requests": 10.0}}


def test_a_configured_target_is_written_as_given():
    rendered = render(_deployment({"prefill": {"min_size": 1, "desired_size": 1, "max_size": 2, "target_ongoing_requests": 8},
                                   "decode": {"min_size": 1, "desired_size": 1, "max_size": 4,
                                              "target_ongoing_requests": 2.5}}))
    args = rendered.application["args"]
    assert args["prefill_config"]["deployment_config"]["autoscaling_config"]["target_ongoing_requests"] == 8.0
    assert args["decode_config"]["deployment_config"]["autoscaling_config"]["target_ongoing_requests"] == 2.5


# A rule of one pool or leg names the part's own field (the configuration adds the section,
# tests/test_one_validation.py); a rule across the legs names the leg.
@pytest.mark.parametrize(("legs", "field", "says"), [
    # Out of order, as before.
    ({"decode": {"min_size": 3, "desired_size": 2, "max_size": 4}}, "desired_size", "min_size <= desired_size"),
    ({"prefill": {"min_size": 1, "desired_size": 1, "max_size": 101}}, "max_size", "node count out of range"),
    # Scale to zero where requests would time out: a new L4 node serves in about 573 s, Ray
    # Serve LLM answers 408 after 600 s (and 480 s is the margin).
    ({"prefill": {"min_size": 0, "desired_size": 1, "max_size": 2}}, "prefill.min_size", "HTTP 408 after 600 s"),
    ({"decode": {"min_size": 0, "desired_size": 1, "max_size": 2}}, "decode.min_size", "HTTP 408 after 600 s"),
    # Both legs at zero: no pod behind the Service at all.
    ({"prefill": {"min_size": 0, "desired_size": 1, "max_size": 2}, "decode": {"min_size": 0, "desired_size": 1,
                                                                                 "max_size": 2}},
     "decode.min_size", "no endpoint"),
    ({"decode": {"min_size": 1, "desired_size": 1, "max_size": 2, "target_ongoing_requests": 0}},
     "target_ongoing_requests", "not a request count per replica"),
])
def test_impossible_ranges_are_refused_with_the_field(legs, field, says):
    # A part built alone names its type first (``WorkerPool: desired_size: ...``, base.errors.SpecErrors.owner).
    with pytest.raises(SpecErrors, match=rf"(^|\n)(\w+: )?{field}: [^\n]*{says}"):
        _deployment(legs, observability=UNWATCHED)


def test_scale_to_zero_and_continuous_verification_are_refused_together(monkeypatch):
    """A node that serves fast enough could scale to zero, but not with continuous verification
    probing it every period."""
    from ray_llm_eks.base import scaling

    monkeypatch.setattr(scaling, "NODE_READY_SECONDS", 30)
    monkeypatch.setattr(scaling, "IMAGE_PULL_MIBPS", 1000)
    monkeypatch.setattr(scaling, "MODEL_DOWNLOAD_MIBPS", 1000)
    zero = {"prefill": {"min_size": 0, "desired_size": 1, "max_size": 2}}
    assert _deployment(zero, observability=UNWATCHED).specs().serving.replica_range("prefill") == (0, 2)
    with pytest.raises(SpecErrors, match=r"prefill.min_size: continuous verification probes the endpoint every 15"):
        _deployment(zero)


def test_colocated_may_let_one_group_reach_zero():
    """One model over both groups: the other group's replicas keep serving while one is empty."""
    spec = _deployment({"prefill": {"min_size": 0, "desired_size": 1, "max_size": 2}}, topology=Topology.colocated,
                       observability=UNWATCHED).specs().serving
    assert spec.replica_range("prefill") == (0, 2)
