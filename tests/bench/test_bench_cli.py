"""``ray-llm-eks bench`` and ``compare``: flags, refusals and exit codes, through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ray_llm_eks import cli

runner = CliRunner()
RUNS = Path(__file__).resolve().parents[1] / "data" / "bench" / "runs"


def invoke(*args: str):
    return runner.invoke(cli.app, list(args))


def test_emit_job_prints_a_job_for_the_service_and_how_to_fetch_its_results(tmp_path):
    result = invoke("bench", "--emit-job", "--concurrency", "1,8", "--slo-ttft-ms", "500", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    documents = [d for d in yaml.safe_load_all(result.stdout.split("kubectl apply")[0]) if d]
    assert [d["kind"] for d in documents] == ["ConfigMap", "Job"]
    assert "kubectl cp" in result.output and "-- touch /work/out/.fetched" in result.output
    assert "'[bench] exit 0'" in result.output  # printed as text, not taken for markup


@pytest.mark.parametrize(("args", "message"), [
    (["--url", "http://x", "--workload", "huge"], "--workload: unknown preset (got 'huge'); accepted: short-chat, long-prompt, long-answer"),
    (["--url", "http://x", "--isl", "4000", "--osl", "200"], "--isl + --osl: 4000 + 200 tokens exceed model.max_model_len (4096)"),
    ([], "--url: missing"),
    (["--url", "http://x", "--concurrency", "4,4"], "--concurrency: levels repeat (got [4, 4]); accepted: distinct levels"),
    (["--url", "http://x", "--slo-ttft-ms", "0"], "--slo-ttft-ms: must be a positive number of milliseconds (got 0.0)"),
    (["--url", "http://x", "--hourly-cost-usd", "0"], "--hourly-cost-usd: must be a positive price (got 0.0)"),
    (["--url", "http://x", "--trace", "missing.jsonl"], "--trace: no such file (got 'missing.jsonl')"),
    (["--url", "http://x", "--replay-timestamps"], "--replay-timestamps: needs a trace to replay"),
])
def test_bad_flags_exit_2_naming_the_flag(tmp_path, args, message):
    result = invoke("bench", *args, "--out", str(tmp_path))
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


CONDITIONAL = str(Path(__file__).resolve().parents[1] / "data" / "bench" / "conditional.yaml")
"""The disaggregated reference deployment with disaggregation.min_prompt_tokens 64."""
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "benchmark"


@pytest.mark.parametrize(("args", "message"), [
    (["--mix", "32,64:70;512,64:20"], "--mix: the percentages sum to 90, not 100 (got '32,64:70;512,64:20'); "
                                      "accepted: ISL,OSL:PCT pairs separated by ';' (whole numbers of tokens >= 1, "
                                      "percentages above 0 summing to 100), e.g. 32,64:70;512,64:30"),
    (["--mix", "32|4,64:100"], "--mix: '32|4,64:100' is not ISL,OSL:PCT (got '32|4,64:100'); accepted: ISL,OSL:PCT"),
    (["--mix", "32,64:100", "--isl", "32"], "--mix: not with --isl (got --mix '32,64:100'); accepted: --mix alone"),
    (["--mix", "32,64:100", "--osl", "8", "--isl", "8"], "--mix: not with --isl or --osl"),
    (["--config", CONDITIONAL, "--mix", "4000,200:50;32,64:50"],
     "--mix: 4000,200 (ISL,OSL) exceed model.max_model_len (4096) (got '4000,200:50;32,64:50'); accepted: pairs "
     "whose ISL + OSL is within it"),
    (["--mix", "32,64:100", "--profile-isl", "64"], "--profile-isl: a profile measures one prompt length per level, "
                                                     "not a mix; accepted: without --mix"),
    (["--config", str(EXAMPLES / "colocated.yaml"), "--min-prompt-tokens", "64"],
     "--min-prompt-tokens: topology colocated of --config has no prefill leg: every request is prefilled where it "
     "is decoded (got 64); accepted: leave it out"),
    (["--config", CONDITIONAL, "--min-prompt-tokens", "32"],
     "--min-prompt-tokens: 32 differs from --config's disaggregation.min_prompt_tokens (64) (got 32); accepted: 64"),
    (["--config", str(EXAMPLES / "disaggregated.yaml"), "--min-prompt-tokens", "32"],
     "--min-prompt-tokens: 32 differs from --config's disaggregation.min_prompt_tokens (0) (got 32); accepted: "
     "leave it out"),
])
def test_a_bad_mix_or_threshold_exits_2_with_one_line_naming_the_flag(tmp_path, args, message):
    result = invoke("bench", "--url", "http://x", *args, "--out", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_emit_job_carries_the_mix_and_the_configuration_s_threshold(tmp_path):
    result = invoke("bench", "--emit-job", "--config", CONDITIONAL, "--mix", "32,64:70;512,64:30", "--out",
                    str(tmp_path))
    assert result.exit_code == 0, result.output
    config_map = next(yaml.safe_load_all(result.stdout.split("kubectl apply")[0]))
    settings = json.loads(config_map["data"]["bench.json"])
    assert (settings["mix"], settings["min_prompt_tokens"]) == ("32,64:70;512,64:30", 64)
    assert (settings["isl"], settings["osl"]) == (176, 64)  # the mix's means: 0.7 x 32 + 0.3 x 512, 64


def test_emit_job_carries_the_threshold_flag_without_a_config(tmp_path):
    result = invoke("bench", "--emit-job", "--min-prompt-tokens", "48", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    settings = json.loads(next(yaml.safe_load_all(result.stdout.split("kubectl apply")[0]))["data"]["bench.json"])
    assert (settings["mix"], settings["min_prompt_tokens"]) == (None, 48)


def test_emit_job_carries_the_trace_in_its_config_map(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 4, "hash_ids": [0]}\n')
    result = invoke("bench", "--emit-job", "--trace", str(trace), "--replay-timestamps", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    config_map = next(yaml.safe_load_all(result.stdout.split("kubectl apply")[0]))
    assert config_map["data"]["trace.jsonl"] == trace.read_text()
    settings = json.loads(config_map["data"]["bench.json"])
    assert settings["trace"] == "/opt/rayllmeks-bench/trace.jsonl" and settings["replay_timestamps"] is True
    assert settings["concurrency"] == [1]


def test_a_concurrency_that_is_not_a_list_of_numbers_is_a_usage_error(tmp_path):
    result = invoke("bench", "--url", "http://x", "--concurrency", "1,many", "--out", str(tmp_path))
    assert result.exit_code == 2 and "not a comma list of whole numbers" in " ".join(result.output.split())


def test_compare_of_three_runs_prints_the_decision_its_reasons_and_the_ranking(tmp_path):
    """The recorded runs wait (a mock moves no KV cache; no licence on record): exit 1, the report written."""
    runs = [str(RUNS / name) for name in ("disaggregated", "colocated", "managed")]
    result = invoke("compare", *runs, "--out", str(tmp_path))
    assert result.exit_code == 1, result.output
    output = " ".join(result.output.split())
    assert output.startswith("wait - transport-unverified: disaggregated's transport is unverified")
    assert "- license-not-recorded: No licence on record" in output
    decision = json.loads((tmp_path / "verdict.json").read_text())
    ranking = ", ".join(f"{row['run']} {row['responses_per_dollar']:,.0f}" for row in decision["ranking"])
    assert f"accepted responses per dollar: {ranking}" in output
    assert {p.name for p in tmp_path.iterdir()} == {"report.md", "verdict.json", "latency_vs_throughput.png",
                                                   "cost_per_accepted_response.png"}


def test_compare_of_one_run_exits_2(tmp_path):
    result = invoke("compare", str(RUNS / "colocated"), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2 and "at least two run directories (got 1)" in " ".join(result.output.split())


def test_compare_of_a_directory_that_is_not_a_run_exits_2(tmp_path):
    result = invoke("compare", str(tmp_path), str(RUNS / "colocated"), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2 and "no summary.json" in result.output


@pytest.mark.parametrize("decision_of, code", [("trial", 0), ("reject", 0), ("wait", 1)])
def test_compare_exits_0_on_trial_or_reject_and_1_on_wait(tmp_path, decision_of, code):
    from test_compare import THREE, cheaper, copy_run, on_record, verified

    def same_answers(edit):
        def both(run, entries, completions):
            edit(run, entries, completions)
            completions["completions"] = json.loads((THREE[0] / "agreement.json").read_text())["completions"]
        return both
    if decision_of == "wait":
        runs = [RUNS / "disaggregated", copy_run(RUNS / "colocated", tmp_path / "long", lambda run, e, c: run[
            "settings"].update(isl=4096))]
    else:
        runs = on_record(tmp_path, verified(), cheaper(2.0) if decision_of == "reject" else verified(),
                         same_answers(verified(revision=None)))
    result = invoke("compare", *map(str, runs), "--out", str(tmp_path / "o"), "--json")
    assert result.exit_code == code, result.output
    assert json.loads(result.stdout)["decision"] == decision_of


@pytest.mark.integration
@pytest.mark.parametrize("given", [True, False])
def test_a_tokenizer_that_cannot_load_stops_the_bench_before_aiperf_with_the_reason(tmp_path, monkeypatch, given):
    """Offline (HF_HUB_OFFLINE=1) with an empty Hugging Face cache: no Hub is needed to fail. The
    message is the check's, made before AIPerf started (nothing of AIPerf's in --out), with the
    library's own reason and what to do; AIPerf itself took 48 s to fail here without the check."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    name = "ray-llm-eks-tests/no-such-tokenizer" if given else "Qwen/Qwen3.5-9B"  # the reference model.source
    out = tmp_path / "run"
    result = invoke("bench", "--url", "http://127.0.0.1:1", "--model", "tiny", *(["--tokenizer", name] if given else []),
                    "--concurrency", "1", "--requests", "2", "--agreement-prompts", "0", "--out", str(out))
    message = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert (f"error: --tokenizer: the tokenizer '{name}' could not load: TokenizerError: Failed to load tokenizer "
            f"'{name}': OSError: Tokenizer '{name}' (revision 'main') is not present in the HuggingFace cache.") in message
    assert "before starting AIPerf, offline mode: HF_HUB_OFFLINE set). To fix: pass --tokenizer PATH with a local " \
           "tokenizer directory" in message
    assert "or give this machine access to the Hugging Face Hub" in message
    assert ("(--tokenizer not given: model.source of --config" in message) is not given
    assert "aiperf exited" not in message and not out.exists()  # AIPerf never started


@pytest.mark.integration
def test_a_local_tokenizer_in_offline_mode_is_refused_with_aiperf_s_rule(tmp_path, monkeypatch, tokenizer_dir):
    """AIPerf 0.13 in offline mode takes every tokenizer name for a cached Hub id, a directory too."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = invoke("bench", "--url", "http://127.0.0.1:1", "--model", "tiny", "--tokenizer", str(tokenizer_dir),
                    "--agreement-prompts", "0", "--out", str(tmp_path / "run"))
    message = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "HFValidationError: Repo id must be in the form" in message
    assert "To fix: AIPerf 0.13.0 reads a local directory only with HF_HUB_OFFLINE unset" in message


def test_compare_prints_how_the_decision_moves_with_the_attainment_goal(tmp_path):
    result = invoke("compare", str(RUNS / "disaggregated"), str(RUNS / "colocated"), "--out", str(tmp_path), "--json")
    decision = json.loads(result.stdout)
    gain = decision["gain"]
    text = invoke("compare", str(RUNS / "disaggregated"), str(RUNS / "colocated"), "--out", str(tmp_path / "t"))
    assert (f"Decision at --min-attainment 80%: wait (disaggregated {gain:+.0%} vs colocated; transport-unverified, "
            f"license-not-recorded); 90% (used): wait (disaggregated {gain:+.0%} vs colocated; transport-unverified, "
            "license-not-recorded); 95%: wait (no priced level of colocated); 99%: wait (no priced level of "
            "colocated).") in " ".join(text.output.split())
    assert [(e["min_attainment"], e["used"], e["decision"]) for e in decision["sensitivity"]][:2] == \
        [(0.8, False, "wait"), (0.9, True, "wait")]


def test_compare_s_plots_mark_levels_below_the_goal_and_never_draw_backward(tmp_path, monkeypatch):
    """`ray-llm-eks compare` as typed, on a colocated run whose top level serves less than c8 did:
    the Figure objects it saves are read (every line's x rises; the below-goal levels are crosses)."""
    from matplotlib.figure import Figure
    from test_compare import copy_run, throughput_falls_at_the_top

    saved: dict[str, Figure] = {}
    original = Figure.savefig

    def keep(figure, path, *args, **kwargs):
        saved[Path(path).name] = figure
        return original(figure, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    fallen = copy_run(RUNS / "colocated", tmp_path / "colocated", throughput_falls_at_the_top)
    result = invoke("compare", str(RUNS / "disaggregated"), str(fallen), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1, result.output  # wait: the recorded runs carry no licence
    assert set(saved) == {"latency_vs_throughput.png", "cost_per_accepted_response.png"}
    summary = json.loads((fallen / "summary.json").read_text())
    below = {e["concurrency"] for e in summary if e["accepted_responses"] / (e["requests_ok"] + e["requests_failed"]) < 0.9}
    assert below == {1, 2, 4}
    for figure in saved.values():
        for axis in figure.axes:
            for line in axis.get_lines():
                assert list(line.get_xdata()) == sorted(line.get_xdata()), line.get_gid()
            crosses = [c for c in axis.collections if c.get_gid() == "below-goal"]
            assert crosses and all(c.get_paths() for c in crosses)
            assert "level below the 90% attainment goal" in [t.get_text() for t in axis.get_legend().get_texts()]
    (cost_axis,) = saved["cost_per_accepted_response.png"].axes
    assert {int(x) for c in cost_axis.collections if c.get_gid() == "below-goal" for x, _ in c.get_offsets()} == below


def test_compare_prints_each_run_s_classes_and_decides_on_the_mix(tmp_path):
    from ray_llm_eks.bench.compare import class_line

    result = invoke("compare", str(RUNS / "mixed-disaggregated"), str(RUNS / "mixed-colocated"), "--out", str(tmp_path))
    decision = json.loads((tmp_path / "verdict.json").read_text())
    output = " ".join(result.output.split())
    assert result.exit_code == (1 if decision["decision"] == "wait" else 0), result.output
    rows = {row["run"]: row for row in decision["prefill_paths"]}
    assert ("by prefill path, at each run's best level: - " + " ".join(class_line(rows["disaggregated"]).split())
            + " - colocated: no classes: a colocated deployment prefills every request where it decodes it (all "
            "local by definition) The decision is on the mix of ") in output
    assert " ".join(decision["mix"]["text"].split()) in output


def test_compare_without_classes_prints_no_class_lines(tmp_path):
    result = invoke("compare", str(RUNS / "disaggregated"), str(RUNS / "colocated"), "--out", str(tmp_path))
    assert "by prefill path" not in result.output and "decision is on the mix" not in result.output
