"""PodDisruptionBudgets: node drains take one pod of a leg at a time, and never wedge on one pod."""

from __future__ import annotations

import copy

import pytest
from helpers.charts import leg
from helpers.charts import render as render_scenario
from cdk8s_charts.netpol import selects

from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)

KUBERNETES_VERSION = "1.35.0"


def budgets(rendered) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in rendered.all_objects() if o["kind"] == "PodDisruptionBudget"}


def test_a_leg_of_several_pods_loses_at_most_one_to_a_drain(scenario):
    rendered = scenario("multi_gpu")  # two prefill and two decode nodes, one pod each
    found = budgets(rendered)
    assert sorted(found) == ["ray-llm-decode", "ray-llm-prefill"]
    for role in ("prefill", "decode"):
        spec = found[f"ray-llm-{role}"]["spec"]
        # An integer minAvailable: RayCluster has no scale subresource, which maxUnavailable needs.
        assert spec["minAvailable"] == rendered.worker_group(role)["replicas"] - 1 == 1
        assert "maxUnavailable" not in spec
        assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        # The selector picks exactly this leg's pods, as rendered into the RayService.
        own = rendered.worker_group(role)["template"]["metadata"]["labels"]
        other = rendered.worker_group("decode" if role == "prefill" else "prefill")["template"]["metadata"]["labels"]
        assert selects(spec["selector"], own)
        assert not selects(spec["selector"], other)
        assert not selects(spec["selector"], rendered.head_group["template"]["metadata"]["labels"])


@pytest.mark.parametrize("name", ["disaggregated", "colocated"])
def test_a_single_pod_leg_gets_no_budget_that_would_block_every_drain(scenario, name):
    assert budgets(scenario(name)) == {}


def test_budgets_pass_kubernetes_validate_strict(scenario):
    import kubernetes_validate

    for budget in budgets(scenario("multi_gpu")).values():
        kubernetes_validate.validate(copy.deepcopy(budget), KUBERNETES_VERSION, strict=True)


def test_an_autoscaled_legs_budget_follows_the_smallest_it_may_be():
    """Counted from desired_size, decode 1/3/6 would get minAvailable 2: once scaled in to one
    or two pods, no drain could ever proceed. From min_size, a leg that may shrink to one pod gets
    none, and one that keeps at least three keeps two through a drain."""
    shrinks = budgets(render_scenario(Deployment(decode=leg("decode", min_size=1, desired_size=3, max_size=6))))
    assert "ray-llm-decode" not in shrinks
    keeps = budgets(render_scenario(Deployment(decode=leg("decode", min_size=3, desired_size=4, max_size=6))))
    assert keeps["ray-llm-decode"]["spec"]["minAvailable"] == 2
