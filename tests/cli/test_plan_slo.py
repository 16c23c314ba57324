"""``ray-llm-eks plan --slo-ttft-ms --slo-itl-ms`` (issue 40) and ``bench --profile-isl``'s
refusals, through typer's CliRunner: the JSON's shape, the text's binding constraint, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_llm_eks.cli import app

PROFILE_RUN = Path(__file__).resolve().parents[1] / "data" / "bench" / "runs" / "profile"
WORKLOAD = ["--isl", "2048", "--osl", "256", "--rate", "2"]
SLO_KEYS = {"prefill_replicas": int, "decode_replicas": int, "min_prompt_tokens": int, "ttft_ms_p90": float,
            "itl_ms_p90": float, "hourly_cost_usd": float, "cost_per_million_output_tokens_usd": float}


def test_the_slo_plan_in_json_has_the_documented_keys(runner):
    result = runner.invoke(app, ["plan", "--json", "--slo-ttft-ms", "2000", "--slo-itl-ms", "150", *WORKLOAD])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    slo = data["slo_plan"]
    for key, kind in SLO_KEYS.items():
        assert type(slo[key]) is kind, key
    assert slo["feasible"] is True and slo["binding"] in ("ttft", "itl", "throughput", "none")
    assert slo["ttft_ms_p90"] <= 2000 and slo["itl_ms_p90"] <= 150
    assert slo["workload"] == {"isl": 2048, "osl": 256, "rate": 2.0}
    assert slo["threshold"]["min_prompt_tokens"] == slo["min_prompt_tokens"]
    assert slo["performance_model"] == "built-in capacity model" and slo["profile"] is None
    # The rest of the plan is the plan of the same workload without targets.
    plain = json.loads(runner.invoke(app, ["plan", "--json", *WORKLOAD]).stdout)
    assert "slo_plan" not in plain
    assert {k: v for k, v in data.items() if k != "slo_plan"} == plain


@pytest.mark.parametrize(("flags", "binding"), [
    (["--slo-ttft-ms", "900", "--slo-itl-ms", "10000"], "Binding constraint: TTFT;"),
    (["--slo-ttft-ms", "60000", "--slo-itl-ms", "103"], "Binding constraint: ITL;"),
    (["--slo-ttft-ms", "60000", "--slo-itl-ms", "10000"], "Binding constraint: throughput (the rate alone);"),
])
def test_the_text_says_which_constraint_binds(runner, flags, binding):
    result = runner.invoke(app, ["plan", *flags, *WORKLOAD], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert binding in text
    assert "disaggregation.min_prompt_tokens 528: shorter prompts are prefilled on the decode replica" in text
    assert "threshold: a remote prefill waits rho/(1-rho) x its prefill" in text


def test_one_replica_a_leg_binds_nothing(runner):
    result = runner.invoke(app, ["plan", "--slo-ttft-ms", "5000", "--slo-itl-ms", "500", "--isl", "512", "--osl", "64",
                                 "--rate", "0.05"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Binding constraint: none (one replica a leg meets both targets)" in " ".join(result.output.split())


def test_an_infeasible_target_exits_1_with_its_reason(runner):
    result = runner.invoke(app, ["plan", "--json", "--slo-ttft-ms", "2000", "--slo-itl-ms", "50", *WORKLOAD])
    assert result.exit_code == 1
    slo = json.loads(result.stdout)["slo_plan"]
    assert slo["feasible"] is False and slo["reason"].startswith("ITL: ")


def test_plan_on_a_recorded_bench_profile(runner):
    result = runner.invoke(app, ["plan", "--json", "--profile", str(PROFILE_RUN), "--slo-ttft-ms", "500",
                                 "--slo-itl-ms", "50", "--isl", "2048", "--osl", "16", "--rate", "4"])
    assert result.exit_code == 0, result.output
    slo = json.loads(result.stdout)["slo_plan"]
    assert slo["performance_model"] == "measured profile" and slo["profile"] == str(PROFILE_RUN)
    # 2048 tokens is past the profile's longest prompt (1024): extrapolated, and said.
    assert slo["warnings"][0].startswith("prompt 2048 tokens is beyond the measured range (64..1024): extrapolated")
    text = runner.invoke(app, ["plan", "--profile", str(PROFILE_RUN), "--slo-ttft-ms", "500", "--slo-itl-ms", "50",
                               "--isl", "2048", "--osl", "16", "--rate", "4"], env={"COLUMNS": "200"})
    said = " ".join(text.output.split())
    assert "warning: prompt 2048 tokens is beyond the measured range (64..1024)" in said
    assert "(measured profile)" in said


@pytest.mark.parametrize(("args", "message"), [
    (["--slo-ttft-ms", "500"], "error: an SLO plan needs --slo-ttft-ms, --slo-itl-ms, --isl, --osl and --rate together; "
                               "missing --slo-itl-ms, --isl, --osl, --rate"),
    (["--slo-ttft-ms", "500", "--slo-itl-ms", "50", "--isl", "100", "--osl", "10"], "missing --rate"),
    (["--profile", str(PROFILE_RUN), *WORKLOAD], "error: an SLO plan (--profile) needs --slo-ttft-ms, --slo-itl-ms"),
    (["--slo-ttft-ms", "0", "--slo-itl-ms", "50", *WORKLOAD],
     "error: --slo-ttft-ms: not a latency target (got 0.0); accepted: milliseconds > 0"),
    (["--slo-ttft-ms", "500", "--slo-itl-ms", "-3", *WORKLOAD],
     "error: --slo-itl-ms: not a latency target (got -3.0); accepted: milliseconds > 0"),
    (["--slo-ttft-ms", "500", "--slo-itl-ms", "50", "--profile", "/nonexistent/run", *WORKLOAD],
     "error: --profile: '/nonexistent/run' has no profile.json; accepted: a run directory"),
    (["--slo-ttft-ms", "fast", "--slo-itl-ms", "50", *WORKLOAD], "'--slo-ttft-ms'"),
])
def test_bad_slo_flags_exit_2_naming_the_flag(runner, args, message):
    result = runner.invoke(app, ["plan", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


def test_the_colocated_topology_is_refused(runner, write_config):
    config = write_config("topology: colocated\n")
    result = runner.invoke(app, ["plan", "--config", config, "--slo-ttft-ms", "500", "--slo-itl-ms", "50", *WORKLOAD],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "--slo-ttft-ms: the SLO planner sizes the prefill and decode legs of a disaggregated deployment (got " \
           "topology colocated)" in " ".join(result.output.split())


@pytest.mark.parametrize(("value", "message"), [
    ("64,abc", "--profile-isl: not a comma list of whole numbers (got '64,abc')"),
    ("0,64", "--profile-isl: each prompt length must be >= 1 (got '0,64')"),
    ("64,4095", "--profile-isl: 4095 tokens and the prefill level's 8 answer tokens exceed model.max_model_len (4096)"),
    ("64,64", "--profile-isl: prompt lengths repeat (got [64, 64])"),
])
def test_bench_refuses_a_bad_profile_sweep_naming_the_flag(runner, tmp_path, value, message):
    result = runner.invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "run"),
                                 "--profile-isl", value], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert message in " ".join(result.output.split()), result.output
