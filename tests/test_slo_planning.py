"""The SLO planner (issue 40): replicas per leg for TTFT and ITL targets, the default
``disaggregation.min_prompt_tokens``, queueing, and a ``bench --profile-isl`` run as the model.

The profile is ``tests/data/bench/runs/profile``, recorded by ``tests/bench/record_profile.py``
with the real ``bench`` against GuideLLM's mock server (told TTFT 40 ms, ITL 6 ms)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.pins import unpinned_config
from ray_llm_eks.base.pricing import load_price_table
from ray_llm_eks.planning import PlanError, Workload, make_plan
from ray_llm_eks.slo_planning import (SloTargets, default_threshold, erlang_c, load_profile, slo_plan,
                                      wait_quantile_ms)

PROFILE_RUN = Path(__file__).parent / "data" / "bench" / "runs" / "profile"
LLAMA_70B_P5 = {"prefill": {"instance_type": "p5.48xlarge"}, "decode": {"instance_type": "p5.48xlarge"},
                "model": {"tensor_parallel_size": 8, "source": "meta-llama/Llama-3.3-70B-Instruct",
                          "served_name": "llama"}}
QWEN_P5 = {"prefill": {"instance_type": "p5.48xlarge"}, "decode": {"instance_type": "p5.48xlarge"},
           "model": {"tensor_parallel_size": 8}}


@pytest.fixture(scope="module")
def reference():
    return unpinned_config()


@pytest.fixture(scope="module")
def table():
    return load_price_table()


def plan_for(deployment, table, isl=2048, osl=256, rate=2.0, ttft=2000.0, itl=150.0, **kwargs):
    return slo_plan(deployment.specs(), deployment.footprint(), table, Workload(isl, osl, rate), SloTargets(ttft, itl),
                    **kwargs)


# --- queueing -------------------------------------------------------------------------------------

def test_erlang_c_matches_the_closed_forms():
    # M/M/1: an arrival waits with probability rho; M/M/2 at offered load 1: 1/3 (Erlang C's table).
    assert erlang_c(1, 0.3) == pytest.approx(0.3)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(4, 4.0) == 1.0 and erlang_c(3, 0.0) == 0.0


def test_the_wait_quantile_is_the_inverse_of_erlang_c_s_tail():
    # M/M/1 at rho 0.5, service 100 ms: P(W > t) = 0.5 exp(-(10 - 5) t / s): p90 at ln(5)/5 s.
    assert wait_quantile_ms(5.0, 100.0, 1) == pytest.approx(math.log(5) / 5 * 1000)
    assert wait_quantile_ms(0.5, 100.0, 1) == 0.0  # P(wait) 0.05 < 0.1: the p90 request does not wait
    assert wait_quantile_ms(10.0, 100.0, 1) == math.inf


# --- the plan -------------------------------------------------------------------------------------

def test_one_replica_a_leg_costs_what_the_plan_costs(reference, table):
    result = plan_for(reference, table, rate=0.05)
    assert (result.prefill_replicas, result.decode_replicas, result.binding) == (1, 1, "none")
    # The reference runs one g6.8xlarge a leg: the SLO plan's cost at one node a leg is plan's own.
    assert result.hourly_cost_usd == pytest.approx(make_plan(reference).cost.hourly_usd, abs=1e-9)
    assert result.cost_per_million_output_tokens_usd == pytest.approx(
        result.hourly_cost_usd / (0.05 * 256 * 3600) * 1e6)


def test_the_predictions_meet_the_targets_and_the_counts_are_the_smallest(reference, table):
    result = plan_for(reference, table)
    assert result.feasible and result.path == "remote-prefill"
    assert result.ttft_ms_p90 <= 2000 and result.itl_ms_p90 <= 150
    fewer = plan_for(reference, table, ttft=result.ttft_ms_p90 * 1.0001)
    assert fewer.prefill_replicas == result.prefill_replicas
    # One prefill replica fewer misses the TTFT target: its p90 is above it.
    tighter = plan_for(reference, table, ttft=result.ttft_ms_p90 * 0.999)
    assert tighter.prefill_replicas > result.prefill_replicas or not tighter.feasible


@pytest.mark.parametrize(("kwargs", "binding"), [
    ({"rate": 0.05}, "none"),
    ({"rate": 2.0, "ttft": 60_000.0, "itl": 10_000.0}, "throughput"),
    ({"rate": 2.0, "ttft": 900.0, "itl": 10_000.0}, "ttft"),
    ({"rate": 2.0, "ttft": 60_000.0, "itl": 103.0}, "itl"),
])
def test_the_binding_constraint(reference, table, kwargs, binding):
    result = plan_for(reference, table, **kwargs)
    assert result.feasible and result.binding == binding, result.summary()


def test_an_unreachable_itl_is_infeasible_and_says_why(reference, table):
    result = plan_for(reference, table, itl=50.0)
    assert not result.feasible and result.binding_by_leg["decode"] == "itl"
    assert result.reason.startswith("ITL: ") and "above --slo-itl-ms 50" in result.reason


def test_a_short_prompt_stays_on_the_decode_leg(table):
    deployment = unpinned_config(LLAMA_70B_P5)
    threshold = default_threshold(deployment.specs())
    result = plan_for(deployment, table, isl=threshold.min_prompt_tokens - 1, osl=128, rate=0.5, ttft=5000, itl=200)
    assert (result.path, result.prefill_replicas, result.nodes["prefill"]) == ("local-prefill", 0, 0)
    assert result.decode_replicas >= 1
    longer = plan_for(deployment, table, isl=threshold.min_prompt_tokens, osl=128, rate=0.5, ttft=5000, itl=200)
    assert longer.path == "remote-prefill" and longer.prefill_replicas >= 1


@settings(max_examples=40, deadline=None)
@given(isl=st.integers(1, 3000), longer=st.integers(1, 800), rate=st.floats(0.05, 8.0))
def test_a_longer_prompt_never_needs_fewer_prefill_replicas(isl, longer, rate):
    deployment, table = unpinned_config(LLAMA_70B_P5), load_price_table()
    short = plan_for(deployment, table, isl=isl, osl=64, rate=rate, ttft=3000, itl=500)
    long = plan_for(deployment, table, isl=isl + longer, osl=64, rate=rate, ttft=3000, itl=500)
    if long.feasible:
        assert short.feasible and long.prefill_replicas >= short.prefill_replicas, (short.summary(), long.summary())


@settings(max_examples=40, deadline=None)
@given(itl=st.floats(20.0, 400.0), tighter=st.floats(0.3, 1.0), rate=st.floats(0.1, 20.0),
       isl=st.sampled_from([256, 1024, 3000]))
def test_a_tighter_itl_never_needs_fewer_decode_replicas(itl, tighter, rate, isl):
    deployment, table = unpinned_config(LLAMA_70B_P5), load_price_table()
    loose = plan_for(deployment, table, isl=isl, osl=256, rate=rate, ttft=60_000, itl=itl)
    tight = plan_for(deployment, table, isl=isl, osl=256, rate=rate, ttft=60_000, itl=itl * tighter)
    if tight.feasible:
        assert loose.feasible and tight.decode_replicas >= loose.decode_replicas, (loose.summary(), tight.summary())


def test_the_colocated_topology_is_refused(table):
    deployment = unpinned_config({"topology": "colocated"})
    with pytest.raises(PlanError, match=r"^--slo-ttft-ms: the SLO planner sizes .* \(got topology colocated\)"):
        plan_for(deployment, table)


@pytest.mark.parametrize(("ttft", "itl", "flag"), [(0.0, 10.0, "--slo-ttft-ms"), (10.0, -1.0, "--slo-itl-ms"),
                                                   (math.inf, 10.0, "--slo-ttft-ms")])
def test_targets_must_be_positive_milliseconds(ttft, itl, flag):
    with pytest.raises(PlanError, match=f"^{flag}: not a latency target"):
        SloTargets(ttft, itl)


# --- the threshold --------------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(slow=st.floats(0.05, 3200.0), factor=st.floats(1.0, 100.0),
       config=st.sampled_from([None, LLAMA_70B_P5, QWEN_P5]))
def test_a_faster_fabric_never_raises_the_threshold(slow, factor, config):
    specs = unpinned_config(config).specs()
    assert (default_threshold(specs, slow * factor).min_prompt_tokens
            <= default_threshold(specs, slow).min_prompt_tokens)


def test_the_threshold_follows_the_fabric_and_the_model():
    llama = unpinned_config(LLAMA_70B_P5).specs()
    on_efa = default_threshold(llama)
    # p5.48xlarge at TP 8: all 32 EFA devices x 100 Gbps reach one replica.
    assert on_efa.link_gbps == 3200 and not on_efa.never_pays
    slow = default_threshold(llama, 0.5)
    assert slow.min_prompt_tokens > on_efa.min_prompt_tokens
    # A 9B model on eight H100s: a whole prompt fits in the memory-bound step's idle compute, so
    # prefilling on the decode replica costs its batch nothing and a remote prefill never pays.
    qwen = default_threshold(unpinned_config(QWEN_P5).specs())
    assert qwen.never_pays and qwen.min_prompt_tokens == 4096
    # The threshold is in whole KV blocks (16 tokens for Llama).
    assert on_efa.min_prompt_tokens % 16 == 0
    assert any("3200 Gbps" in line for line in on_efa.assumptions)


def test_the_threshold_is_the_deployment_s_not_the_workload_s(reference, table):
    assert {plan_for(reference, table, isl=isl).min_prompt_tokens for isl in (64, 1024, 3000)} == {
        default_threshold(reference.specs()).min_prompt_tokens}


# --- a measured profile ---------------------------------------------------------------------------

def test_the_recorded_profile_is_what_bench_wrote():
    data = json.loads((PROFILE_RUN / "profile.json").read_text())
    summary = json.loads((PROFILE_RUN / "summary.json").read_text())
    assert [p["isl"] for p in data["prefill"]] == [64, 256, 1024]
    assert [d["concurrency"] for d in data["decode"]] == [e["concurrency"] for e in summary] == [1, 4, 8]
    for level, entry in zip(data["decode"], summary):
        # The same AIPerf aggregate as the summary's percentiles, with p90 besides.
        for p in ("p50", "p95", "p99"):
            assert level["itl_ms"][p] == entry["itl_ms"][p]
        assert level["itl_ms"]["p50"] <= level["itl_ms"]["p90"] <= level["itl_ms"]["p95"]
    # The mock was told TTFT 40 ms and ITL 6 ms.
    assert all(p["ttft_ms"]["p90"] >= 39.0 for p in data["prefill"])
    assert all(d["itl_ms"]["p50"] >= 5.0 for d in data["decode"])


def test_a_profile_interpolates_and_warns_outside_its_range():
    data = json.loads((PROFILE_RUN / "profile.json").read_text())
    model = load_profile(PROFILE_RUN, Workload(128, 16, 1.0))
    points = sorted((p["isl"], p["ttft_ms"]["p90"]) for p in data["prefill"])
    envelope = [max(y for _, y in points[: i + 1]) for i in range(len(points))]
    # Between two measured lengths: on the line between them (of the non-decreasing envelope).
    assert model.prefill(160) == pytest.approx(envelope[0] + (envelope[1] - envelope[0]) * (160 - 64) / (256 - 64))
    assert model.warnings() == []
    # Beyond the longest: in proportion to the length, and said.
    assert model.prefill(2048) == pytest.approx(envelope[-1] * 2)
    assert model.prefill(32) == envelope[0]
    warnings = model.warnings()
    assert warnings[0] == "prompt 32 tokens is below the measured range (64..1024): the figure at 64 is used"
    assert warnings[1].startswith("prompt 2048 tokens is beyond the measured range (64..1024): extrapolated")


def test_a_plan_from_the_recorded_profile(reference, table):
    result = plan_for(reference, table, isl=600, osl=16, rate=4.0, ttft=500, itl=50, profile=PROFILE_RUN)
    assert result.feasible and result.performance_model == "measured profile"
    assert result.profile == str(PROFILE_RUN)
    data = json.loads((PROFILE_RUN / "profile.json").read_text())
    itls = [d["itl_ms"]["p90"] for d in data["decode"]]
    assert min(itls) <= result.itl_ms_p90 <= max(itls) * 1.0001
    # Asked at the profile's ITL shape? No (600 + 16 against 128 + 16): said.
    assert result.warnings == ("ITL was measured at prompt 128 + answer 16 tokens, the workload is 600 + 16: measure "
                               "at the workload's shape",)


@pytest.mark.parametrize(("files", "message"), [
    ({}, "has no profile.json"),
    ({"profile.json": "{}"}, "is not a profile (format None, not 1)"),
    ({"profile.json": json.dumps({"format": 1, "prefill": [], "decode": []})}, "is not a profile (it needs prefill"),
])
def test_a_run_without_a_profile_is_refused_naming_the_flag(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(PlanError, match=r"^--profile: ") as caught:
        load_profile(tmp_path, Workload(128, 16, 1.0))
    assert message in str(caught.value)
