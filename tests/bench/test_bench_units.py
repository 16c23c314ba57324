"""The bench's arithmetic and its reading of AIPerf's files, without a server."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from helpers.pins import unpinned
from ray_llm_eks.base import histogram
from ray_llm_eks.bench import agreement, cost, runner, workloads
from ray_llm_eks.bench.runner import BenchError, BenchSettings

DATA = Path(__file__).resolve().parents[1] / "data" / "bench"


def settings(**overrides) -> BenchSettings:
    return BenchSettings(**{"url": "http://127.0.0.1:8000", "model": "m", "tokenizer": "t", "aiperf": "aiperf",
                            **overrides})


# --- histogram quantiles (PromQL's histogram_quantile) --------------------------------------------

def test_quantile_interpolates_inside_the_bucket_holding_the_rank():
    # 10 observations: 2 in (0, 1], 6 in (1, 2], 2 in (2, 4]. Rank of p50 = 5, in (1, 2]:
    # 1 + (2 - 1) * (5 - 2) / (8 - 2) = 1.5. Rank of p95 = 9.5, in (2, 4]: 2 + 2 * 1.5 / 2 = 3.5.
    buckets = {1.0: 2, 2.0: 8, 4.0: 10, math.inf: 10}
    assert histogram.quantile(0.5, buckets) == 1.5
    assert histogram.quantile(0.95, buckets) == 3.5


def test_quantile_in_the_first_bucket_interpolates_from_zero_and_in_inf_returns_the_last_bound():
    assert histogram.quantile(0.5, {0.005: 4, 0.01: 4, math.inf: 4}) == 0.0025
    assert histogram.quantile(0.99, {0.1: 1, 0.2: 2, math.inf: 10}) == 0.2


def test_quantile_of_an_empty_histogram_is_none_and_q_is_checked():
    assert histogram.quantile(0.5, {1.0: 0, math.inf: 0}) is None
    assert histogram.quantile(0.5, {}) is None
    with pytest.raises(ValueError, match="q must be between 0 and 1"):
        histogram.quantile(1.5, {1.0: 1})


def test_series_merge_by_adding_buckets():
    merged = histogram.merge([{"0.1": 1, "+Inf": 2}, {"0.1": 3, "+Inf": 3}])
    assert merged == {0.1: 4.0, math.inf: 5.0}


# --- the server's metrics, as AIPerf exports them --------------------------------------------------

def real_export() -> dict:
    return json.loads((DATA / "server_metrics_export_vllm_cpu.json").read_text())


def test_server_figures_read_vllm_s_own_counters():
    figures = runner.server_figures(real_export())
    assert figures["generation_tokens"] == 192  # 12 requests x 16 tokens, as the client counted
    assert figures["prompt_tokens"] == 932
    assert figures["endpoints"] == ["http://127.0.0.1:18090/metrics"]
    assert figures["queue_time_ms"]["count"] == 12
    assert 0 <= figures["kv_cache_usage_max"] <= 1
    assert figures["nixl_failed_transfers"] is None  # a CPU engine has no NIXL


def test_no_transfer_histogram_gives_no_figure():
    assert runner.kv_transfer_ms(real_export()) is None
    assert runner.kv_transfer_ms(None) is None


def test_kv_transfer_is_merged_over_workers_under_ray_s_spelling():
    """Ray re-exports vLLM's metrics as ray_vllm_*: two workers' series add up before the quantile."""
    export = real_export()
    histogram_entry = export["metrics"]["vllm:e2e_request_latency_seconds"]
    series = histogram_entry["series"][0]
    export["metrics"] = {"ray_vllm_nixl_xfer_time_seconds": {**histogram_entry, "series": [series, series]}}
    figure = runner.kv_transfer_ms(export)
    assert figure["metric"] == "ray_vllm_nixl_xfer_time_seconds"
    assert figure["count"] == 2 * series["buckets"]["+Inf"]
    merged = histogram.merge([series["buckets"], series["buckets"]])
    assert figure["p50"] == histogram.quantile(0.5, merged) * 1000
    assert figure["p95"] == histogram.quantile(0.95, merged) * 1000
    assert figure["mean"] == pytest.approx(series["stats"]["sum"] / series["stats"]["count"] * 1000)


# --- cost -------------------------------------------------------------------------------------

def test_cost_per_accepted_response_spreads_the_hour_over_what_it_served():
    # $3.60 an hour for 10 s is $0.01; 4 accepted responses share it.
    assert cost.usd_per_accepted_response(3.6, 4, 10.0) == pytest.approx(0.0025)
    assert cost.usd_per_accepted_response(3.6, 0, 10.0) is None
    assert cost.usd_per_million_output_tokens(3.6, 1000.0) == pytest.approx(1.0)
    assert cost.usd_per_million_output_tokens(3.6, 0.0) is None


def test_the_planner_and_the_bench_share_one_formula():
    from ray_llm_eks.planning import make_plan

    estimate = make_plan(unpinned()).cost
    assert estimate.usd_per_million_output_tokens(500.0) == cost.usd_per_million_output_tokens(estimate.hourly_usd, 500.0)


# --- accepted responses ---------------------------------------------------------------------------

def record(ttft=50.0, e2e=500.0, tokens=16, error=None) -> dict:
    row = {"metadata": {"benchmark_phase": "profiling"},
           "metrics": {"time_to_first_token": {"value": ttft}, "request_latency": {"value": e2e},
                       "output_sequence_length": {"value": tokens}}}
    return {**row, "error": error} if error else row


@pytest.mark.parametrize(("row", "accepted"), [
    (record(), True),
    (record(ttft=100.0), True),  # on the SLO is within it
    (record(ttft=100.1), False),
    (record(e2e=1000.1), False),
    (record(tokens=0), False),  # empty
    (record(error={"type": "HTTPError", "message": "500"}), False),
])
def test_accepted_means_completed_non_empty_and_within_both_slos(row, accepted):
    assert runner.is_accepted(row, 100.0, 1000.0) is accepted


def test_without_slos_every_non_empty_success_is_accepted():
    assert runner.is_accepted(record(ttft=1e6, e2e=1e7), None, None)


# --- settings and the AIPerf command line ---------------------------------------------------------

def test_the_command_uses_the_server_s_token_counts_and_the_slos_as_goodput():
    command = runner.aiperf_command(settings(slo_ttft_ms=200, slo_e2e_ms=2000, metrics_urls=("http://w:8080/metrics",)),
                                    4, Path("/out"))
    assert command[:2] == ["aiperf", "profile"]
    assert "--use-server-token-count" in command and "--streaming" in command
    assert command[command.index("--goodput") + 1] == "time_to_first_token:200 request_latency:2000"
    assert command[command.index("--concurrency") + 1] == "4"
    assert command[command.index("--warmup-request-count") + 1] == "4"
    assert command[command.index("--server-metrics") + 1] == "http://w:8080/metrics"
    assert command[command.index("--extra-inputs") + 1] == "ignore_eos:true"


def test_aiperf_scrapes_the_workers_until_ray_has_exported_the_level_s_last_transfers():
    scraped = runner.aiperf_environment(settings(metrics_urls=("http://w:8080/metrics",)), base={"PATH": "/bin"})
    assert scraped == {"PATH": "/bin", "PYTHONUNBUFFERED": "1", "AIPERF_SERVER_METRICS_COLLECTION_FLUSH_PERIOD": "12"}
    # Ray 2.58 exports every 10 s: the flush must outlast one export after the last response.
    assert BenchSettings.__dataclass_fields__["metrics_flush_s"].default > 10.0
    assert "AIPERF_SERVER_METRICS_COLLECTION_FLUSH_PERIOD" not in runner.aiperf_environment(settings(), base={})


def test_the_flush_knob_and_its_bound_are_aiperf_s_own():
    from aiperf.common.environment import Environment

    knob = type(Environment.SERVER_METRICS).model_fields["COLLECTION_FLUSH_PERIOD"]
    assert type(Environment.SERVER_METRICS).model_config["env_prefix"] + "COLLECTION_FLUSH_PERIOD" \
        == "AIPERF_SERVER_METRICS_COLLECTION_FLUSH_PERIOD"
    assert [m.le for m in knob.metadata if hasattr(m, "le")] == [runner.MAX_METRICS_FLUSH_S]


def test_a_trace_replaces_the_synthetic_lengths():
    command = runner.aiperf_command(settings(trace="/t.jsonl", replay_timestamps=True, concurrency=(1,)), None, Path("/o"))
    assert "--isl" not in command and "--concurrency" not in command
    assert command[command.index("--custom-dataset-type") + 1] == "mooncake_trace"
    assert "--fixed-schedule" in command


def test_a_mix_goes_to_aiperf_s_seq_dist_instead_of_the_lengths():
    command = runner.aiperf_command(settings(mix="32,64:70;512,64:30", isl=166, osl=64), 4, Path("/o"))
    assert command[command.index("--seq-dist") + 1] == "32,64:70;512,64:30"
    assert "--isl" not in command and "--osl" not in command


@pytest.mark.parametrize("text", ["32,64:70;512,64:30", " 8 , 16 : 60 ; 160,16:40 ", "100,10:33.5;200,20:66.5",
                                  "64,8:100"])
def test_a_mix_the_bench_takes_is_one_aiperf_parses_to_the_same_pairs(text):
    """AIPerf 0.13's own parser of --seq-dist (what it runs on the value at its start-up)."""
    from aiperf.common.models.sequence_distribution import DistributionParser

    ours = runner.parse_mix(text)
    theirs = DistributionParser.validate(runner.canonical_mix(ours))
    assert [(p.input_seq_len, p.output_seq_len, p.probability) for p in theirs] == ours
    assert all(p.input_seq_len_stddev == 0 == p.output_seq_len_stddev for p in theirs)


@pytest.mark.parametrize(("text", "says"), [
    ("32,64:70;512,64:20", "the percentages sum to 90, not 100"),
    ("32,64", "'32,64' is not ISL,OSL:PCT"),
    ("32|4,64:100", "'32|4,64:100' is not ISL,OSL:PCT"),
    ("[(32,64):100]", "'[(32,64):100]' is not ISL,OSL:PCT"),  # AIPerf's bracket form
    ("0,64:100", "'0,64:100': token counts must be >= 1"),
    ("32,64:0;32,8:100", "'32,64:0': a percentage above 0 and at most 100"),
    ("32,64:70;;512,64:30", "'' is not ISL,OSL:PCT"),
])
def test_a_bad_mix_is_refused_with_its_first_problem(text, says):
    with pytest.raises(ValueError) as caught:
        runner.parse_mix(text)
    assert str(caught.value) == says or str(caught.value).startswith(says + " ")


def test_aiperf_refuses_a_mix_whose_percentages_do_not_sum_to_100_too():
    from aiperf.common.models.sequence_distribution import DistributionParser

    with pytest.raises(ValueError, match="Probabilities must sum to 100.0"):
        DistributionParser.validate("32,64:70;512,64:20")


def test_a_mix_s_means_weigh_each_pair_by_its_share():
    assert runner.mix_means(runner.parse_mix("32,64:70;512,16:30")) == (176, 50)  # 22.4+153.6, 44.8+4.8


@pytest.mark.parametrize(("overrides", "message"), [
    ({"mix": "32,64:50"}, "mix: the percentages sum to 50, not 100 (got '32,64:50'); accepted: ISL,OSL:PCT"),
    ({"mix": "32,64:100", "trace": "t.jsonl"}, "mix: a trace brings its own lengths"),
    ({"mix": "32,64:100", "profile_isls": (64,)}, "profile_isls: a profile measures one prompt length per level, "
                                                  "not a mix"),
    ({"min_prompt_tokens": 0}, "min_prompt_tokens: a prompt length in tokens, a whole number >= 1 (got 0)"),
])
def test_bad_mix_and_threshold_settings_are_refused_naming_the_setting(overrides, message):
    with pytest.raises(BenchError) as caught:
        settings(**overrides)
    assert message in str(caught.value)


def test_the_mix_and_the_threshold_round_trip_through_json_for_the_in_cluster_job():
    original = settings(mix="32,64:70;512,64:30", isl=176, osl=64, min_prompt_tokens=64)
    again = BenchSettings.from_json(json.loads(json.dumps(original.to_json())))
    assert again == original and (again.mix, again.min_prompt_tokens) == ("32,64:70;512,64:30", 64)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"concurrency": ()}, "concurrency: each level must be a whole number >= 1"),
    ({"concurrency": (0, 4)}, "concurrency: each level must be a whole number >= 1 (got [0, 4])"),
    ({"concurrency": (4, 4)}, "concurrency: levels repeat (got [4, 4]); accepted: distinct levels"),
    ({"requests": 0}, "requests: must be a whole number >= 1 (got 0)"),
    ({"slo_ttft_ms": -1.0}, "slo_ttft_ms: must be a positive number of milliseconds (got -1.0)"),
    ({"hourly_cost_usd": 0.0}, "hourly_cost_usd: must be a positive price (got 0.0)"),
    ({"replay_timestamps": True}, "replay_timestamps: needs a trace to replay"),
    ({"trace": "t", "replay_timestamps": True, "concurrency": (1, 2)}, "concurrency: a timestamp replay is one level"),
    ({"agreement_prompts": 99}, "agreement_prompts: between 0 and 16 (got 99)"),
    ({"metrics_flush_s": 31.0}, "metrics_flush_s: between 0 and 30 seconds, AIPerf's bound (got 31.0)"),
])
def test_bad_settings_are_refused_with_the_field_and_the_value(overrides, message):
    with pytest.raises(BenchError) as refused:
        settings(**overrides)
    assert message in str(refused.value)
    field = message.split(":")[0]
    assert field in {name for name, _ in refused.value.problems}


def test_settings_round_trip_through_json_and_refuse_unknown_keys():
    original = settings(concurrency=(1, 8), metrics_urls=("http://a/metrics",))
    assert BenchSettings.from_json(json.loads(json.dumps(original.to_json()))) == original
    with pytest.raises(BenchError, match="unknown bench settings: colour"):
        BenchSettings.from_json({**original.to_json(), "colour": "red"})


def test_an_aiperf_that_stopped_early_is_not_a_measurement(tmp_path):
    """AIPerf writes its records one by one: a partial file after a crash must not be summarised."""
    rows = [{"metadata": {"benchmark_phase": "profiling"}, "metrics": {}, "error": {"type": "X", "message": "m"}}] * 3
    (tmp_path / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(runner.BenchIncomplete, match="after recording 3 of 10 requests"):
        runner._check_failed_level(tmp_path, settings(requests=10), 4, 1, "concurrency 4", tmp_path / "aiperf.log")
    # All requests recorded and all failed: AIPerf's exit 1 for "nothing succeeded", a result.
    runner._check_failed_level(tmp_path, settings(requests=3), 4, 1, "concurrency 4", tmp_path / "aiperf.log")
    ok = dict(rows[0], error=None)
    (tmp_path / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [ok] * 3))
    with pytest.raises(runner.BenchIncomplete):  # a non-zero exit with successes is not that case
        runner._check_failed_level(tmp_path, settings(requests=3), 4, 1, "concurrency 4", tmp_path / "aiperf.log")


def test_a_run_directory_without_a_summary_is_refused(tmp_path):
    with pytest.raises(BenchError, match="no summary.json"):
        runner.load_run(tmp_path)


def test_a_missing_aiperf_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(runner.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BenchError, match=r"pip install 'ray-llm-eks\[bench\]'"):
        runner.find_aiperf()


# --- presets and agreement -----------------------------------------------------------------------

def test_every_preset_fits_the_reference_context_length():

    max_model_len = unpinned().specs().serving.model.max_model_len
    assert set(workloads.PRESETS) == {"short-chat", "long-prompt", "long-answer"}
    for preset in workloads.PRESETS.values():
        assert preset.isl + preset.osl <= max_model_len


def completions(texts, errors=(), reasoning=None):
    return {"max_tokens": 64, "completions": [
        {"prompt_sha256": str(i), "text": t, "error": "HTTPError: 500" if i in errors else None,
         "reasoning": (reasoning or {}).get(i, "")} for i, t in enumerate(texts)]}


def test_agreement_counts_identical_completions_and_locates_divergence():
    result = agreement.agreement(completions(["a b c", "same", "x"]), completions(["a b d", "same", "x"]))
    assert (result["compared"], result["identical"]) == (3, 2)
    assert result["rate"] == pytest.approx(2 / 3)
    assert result["divergences"] == [{"prompt_sha256": "0", "first_difference_at_char": 4, "a": "c", "b": "d"}]


def test_a_prompt_that_failed_on_one_side_is_a_disagreement():
    """A broken KV path may fail requests rather than corrupt them: that must not raise the rate."""
    result = agreement.agreement(completions(["x", "y"]), completions(["x", "y"], errors=(1,)))
    assert (result["compared"], result["identical"], result["rate"]) == (2, 1, 0.5)
    assert result["errors"] == [{"prompt_sha256": "1", "a": None, "b": "HTTPError: 500"}]


def test_a_thinking_model_s_reasoning_is_compared_too():
    """Qwen3.5 can spend all 64 tokens thinking: equal empty contents must not agree trivially."""
    result = agreement.agreement(completions([""], reasoning={0: "Let me count"}),
                                 completions([""], reasoning={0: "Let me think"}))
    assert result["rate"] == 0.0


def test_the_agreement_prompts_are_fixed_and_distinct():
    assert len(set(agreement.PROMPTS)) == len(agreement.PROMPTS) == 16
    assert len({agreement.prompt_id(p) for p in agreement.PROMPTS}) == 16


def test_the_load_generator_stays_out_of_the_core_install():
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    assert not any(name in core for name in ("aiperf", "guidellm", "matplotlib", "transformers"))
    assert f"aiperf=={runner.AIPERF_VERSION}" in project["optional-dependencies"]["bench"]


# --- the tokenizer check and AIPerf's own reason -------------------------------------------------

FAILURES = DATA / "aiperf_failures"


@pytest.mark.parametrize(("log", "reasons"), [
    # No exit-error panel: the tokenizer prefetch fails before AIPerf's services start; the last
    # line of its traceback is the reason (the log's 60 lines before it are the Hub's retries).
    ("hub-unreachable.log", ["aiperf.common.exceptions.TokenizerError: Failed to load tokenizer 'Qwen/Qwen3.5-9B': "
                             "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and "
                             "couldn't find them in the cached files."]),
    # The panel's first Reason, unwrapped; the HookError after it only wraps it, and the first
    # ERROR line says the same thing, so neither is repeated.
    ("offline-local-directory.log", ["Failed to load tokenizer '/tmp/bench-h/tok': HFValidationError: Repo id must "
                                     "be in the form 'repo_name' or 'namespace/repo_name': '/tmp/bench-h/tok'. Use "
                                     "`repo_type` argument if needed."]),
    # The panel points to "prior log output" for the per-request error: the first ERROR line is it.
    ("connection-refused.log", ["All 4 inference request(s) failed. No successful responses were collected — check "
                                "the server URL, endpoint path, and response format. See prior log output for "
                                "per-request error details.",
                                "Error in aiohttp request: ClientConnectorError(ConnectionKey(host='127.0.0.1', "
                                "port=1, is_ssl=False, ssl=True, proxy=None, proxy_auth=None, proxy_headers_hash=None, "
                                "server_hostname=None), ConnectionRefusedError(111, \"Connect call failed "
                                "('127.0.0.1', 1)\"))"]),
])
def test_aiperf_s_reason_is_read_from_its_real_output(log, reasons):
    assert runner.aiperf_reason((FAILURES / log).read_text()) == reasons


def test_a_log_without_an_error_gives_its_last_line_and_an_empty_log_nothing():
    assert runner.aiperf_reason("12:00:00.000 INFO     starting (x.py:1)\nKilled\n") == ["Killed"]
    assert runner.aiperf_reason("") == []


def test_an_aiperf_that_stopped_early_says_aiperf_s_reason_before_the_log_path(tmp_path):
    (tmp_path / "aiperf.log").write_text((FAILURES / "hub-unreachable.log").read_text())
    with pytest.raises(runner.BenchIncomplete) as raised:
        runner._check_failed_level(tmp_path, settings(requests=4), 1, 1, "concurrency 1", tmp_path / "aiperf.log")
    message = str(raised.value)
    assert message.startswith("aiperf exited with 1 at concurrency 1 after recording 0 of 4 requests. AIPerf says: "
                              "aiperf.common.exceptions.TokenizerError: Failed to load tokenizer 'Qwen/Qwen3.5-9B': ")
    assert message.endswith(f"Its log: {tmp_path / 'aiperf.log'}")


def test_aiperf_s_python_is_its_shebang_else_a_python_beside_it(tmp_path):
    python = tmp_path / "venv" / "python3.11"
    python.parent.mkdir()
    python.write_text("")
    console_script = tmp_path / "venv" / "aiperf"
    console_script.write_text(f"#!{python}\nimport sys\n")
    assert runner.aiperf_python(str(console_script)) == str(python)
    # The in-cluster Job's pip --target wrapper is a shell script; it writes a python wrapper beside it.
    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    (wrapper_dir / "aiperf").write_text("#!/bin/sh\nPYTHONPATH=/work/site exec /usr/bin/python3 -m aiperf \"$@\"\n")
    assert runner.aiperf_python(str(wrapper_dir / "aiperf")) is None
    (wrapper_dir / "python").write_text("#!/bin/sh\n")
    assert runner.aiperf_python(str(wrapper_dir / "aiperf")) == str(wrapper_dir / "python")


def test_the_job_writes_that_python_wrapper_where_the_check_looks():
    from ray_llm_eks.cdk8s_charts.bench import AIPERF_IN_POD, _script

    beside = str(Path(AIPERF_IN_POD).parent / "python")
    assert f"exec %s \"$@\"\\n' \"$PY\" > {beside}" in _script(60)


@pytest.mark.integration
def test_a_local_tokenizer_directory_loads_in_aiperf_s_python(tokenizer_dir, monkeypatch):
    for variable in runner.OFFLINE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    line = runner.check_tokenizer(settings(tokenizer=str(tokenizer_dir), aiperf=None))
    assert line.startswith(f"tokenizer {str(tokenizer_dir)!r} loads (")


def test_an_aiperf_whose_python_is_unknown_is_not_checked_and_says_so(tmp_path):
    program = tmp_path / "aiperf"
    program.write_text("#!/bin/sh\n")
    line = runner.check_tokenizer(settings(aiperf=str(program)))
    assert line == f"tokenizer 't': not checked ({program} names no Python); AIPerf loads it itself"


@pytest.mark.integration
def test_a_tokenizer_saved_as_the_docs_say_loads_in_aiperf_s_python(tokenizer_dir, tmp_path, monkeypatch):
    """docs/benchmark.md's recipe, `AutoTokenizer.from_pretrained(...).save_pretrained(DIR)`, from a
    local tokenizer instead of the Hub (no Hub here): the directory it writes is one AIPerf loads."""
    from transformers import AutoTokenizer

    for variable in runner.OFFLINE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    saved = tmp_path / "tokenizers" / "copy"
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(str(saved))
    assert runner.check_tokenizer(settings(tokenizer=str(saved), aiperf=None)).startswith(f"tokenizer {str(saved)!r} loads")
