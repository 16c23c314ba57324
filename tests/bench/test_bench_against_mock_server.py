"""``ray-llm-eks bench`` with the real AIPerf against GuideLLM's mock server on loopback.

What is checked is what the server was told (TTFT, ITL, output tokens) and arithmetic a reader can
redo from AIPerf's raw files: accepted responses, tokens per second, the cost figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import statistics

import pytest

from ray_llm_eks.bench import bundle, runner
from ray_llm_eks.bench.agreement import PROMPTS

from loopback import (ITL_MS, LEVELS, LOOP_CLOCK_MS, OUTPUT_TOKENS, REQUESTS, SLO_E2E_MS, SLO_TTFT_MS, TTFT_MS,
                      read_json)
from utilization_servers import CounterNode, DcgmServer, dcgm_page

# AIPerf's start-up (its services, the tokenizer, the dataset) is most of each run's half minute:
# these run in `make test-bench`, which CI runs after `make test`.
pytestmark = pytest.mark.aiperf

REQUIRED_KEYS = {"concurrency", "requests_ok", "requests_failed", "accepted_responses", "ttft_ms", "itl_ms", "e2e_ms",
                 "output_tokens_per_s", "kv_transfer_ms", "hourly_cost_usd", "cost_per_million_output_tokens_usd",
                 "cost_per_accepted_response_usd"}


def records(run_dir: Path, entry: dict) -> list[dict]:
    """The measured requests (AIPerf also exports its warm-up requests, which no figure counts)."""
    lines = (run_dir / entry["raw"] / "profile_export.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [r for r in rows if r["metadata"]["benchmark_phase"] == "profiling"]


def test_summary_has_one_entry_per_level_with_every_key(sweep):
    out, _ = sweep
    summary = read_json(out / runner.SUMMARY_FILE)
    assert [e["concurrency"] for e in summary] == list(LEVELS)
    for entry in summary:
        assert REQUIRED_KEYS <= entry.keys()
        for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
            assert set(entry[metric]) == {"p50", "p95", "p99"}
            assert entry[metric]["p50"] <= entry[metric]["p95"] <= entry[metric]["p99"]
        # The mock serves no /metrics: no transfer histogram, so no figure rather than a zero.
        assert entry["kv_transfer_ms"] is None


def test_measured_latencies_are_what_the_server_was_told(sweep):
    """At least what the server slept, in milliseconds, and ordered; no upper bound, since a loaded
    machine makes every figure larger by as much as it likes.

    The mock sleeps TTFT_MS, writes the first token, then sleeps ITL_MS before each of the other
    OUTPUT_TOKENS - 1. A client cannot see a token before it is written, so per request TTFT >=
    TTFT_MS and end-to-end >= TTFT_MS + (OUTPUT_TOKENS - 1) x ITL_MS, whatever the load, less the
    mock's clock granularity (LOOP_CLOCK_MS, which load cannot widen). ITL has no such floor: a
    client that reads the first chunk late (a stalled process) measures a shorter ITL, so it is
    checked by its definition instead.
    """
    out, _ = sweep
    floor_ttft = TTFT_MS - LOOP_CLOCK_MS
    floor_e2e = TTFT_MS + (OUTPUT_TOKENS - 1) * ITL_MS - LOOP_CLOCK_MS
    for entry in read_json(out / runner.SUMMARY_FILE):
        rows = records(out, entry)
        assert len(rows) == REQUESTS
        for row in rows:
            m = row["metrics"]
            # Units: every latency AIPerf recorded is in milliseconds.
            assert {m[k]["unit"] for k in ("time_to_first_token", "inter_token_latency", "request_latency")} == {"ms"}
            ttft, itl, e2e = (m[k]["value"] for k in ("time_to_first_token", "inter_token_latency", "request_latency"))
            assert m["output_sequence_length"]["value"] == OUTPUT_TOKENS
            # Ordering, and what the server slept before the first token and after it.
            assert floor_ttft <= ttft <= e2e and e2e >= floor_e2e, m
            # ITL is AIPerf's (end-to-end - TTFT) / (tokens - 1).
            assert itl == pytest.approx((e2e - ttft) / (OUTPUT_TOKENS - 1), rel=1e-6)
        # The summary's figures are those records' percentiles, in the same unit.
        for metric, key in (("ttft_ms", "time_to_first_token"), ("itl_ms", "inter_token_latency"),
                            ("e2e_ms", "request_latency")):
            cuts = statistics.quantiles([r["metrics"][key]["value"] for r in rows], n=100, method="inclusive")
            for p in ("p50", "p95", "p99"):
                assert entry[metric][p] == pytest.approx(cuts[int(p[1:]) - 1], rel=1e-9)
        assert entry["ttft_ms"]["p50"] >= floor_ttft, entry["ttft_ms"]
        assert entry["e2e_ms"]["p50"] >= floor_e2e, entry["e2e_ms"]
        assert entry["e2e_ms"]["p50"] >= entry["ttft_ms"]["p50"]


def test_every_request_completes_with_the_server_s_token_count(sweep):
    out, _ = sweep
    for entry in read_json(out / runner.SUMMARY_FILE):
        assert (entry["requests_ok"], entry["requests_failed"]) == (REQUESTS, 0)
        assert entry["output_tokens"] == REQUESTS * OUTPUT_TOKENS


def test_accepted_responses_are_recounted_from_the_raw_records(sweep):
    """Completed, non-empty, within both SLOs; AIPerf's own goodput applies the same SLOs. How many
    the live SLOs let in depends on the machine's load (TTFT 40 ms against 45 ms), so only the
    recount is asserted here; the split is constructed in the next test."""
    out, _ = sweep
    for entry in read_json(out / runner.SUMMARY_FILE):
        rows = records(out, entry)
        within = [r for r in rows if not r.get("error")
                  and r["metrics"]["output_sequence_length"]["value"] > 0
                  and r["metrics"]["time_to_first_token"]["value"] <= SLO_TTFT_MS
                  and r["metrics"]["request_latency"]["value"] <= SLO_E2E_MS]
        assert entry["accepted_responses"] == len(within)
        assert (entry["slo_ttft_ms"], entry["slo_e2e_ms"]) == (SLO_TTFT_MS, SLO_E2E_MS)
        assert entry["aiperf_goodput_per_s"] * entry["duration_s"] == pytest.approx(entry["accepted_responses"], abs=1)


@pytest.mark.parametrize(("slo", "key"), [("slo_ttft_ms", "time_to_first_token"), ("slo_e2e_ms", "request_latency")])
def test_an_slo_between_two_measured_requests_splits_them(sweep, reference_hourly_usd, slo, key):
    """Each level's recorded requests summarized again with an SLO halfway between the two middle
    distinct measured values: the requests at or below it, and no others, are accepted, so
    0 < accepted < requests_ok by construction, whatever the load made the values."""
    out, _ = sweep
    for entry in read_json(out / runner.SUMMARY_FILE):
        rows = records(out, entry)
        values = sorted({r["metrics"][key]["value"] for r in rows})
        assert len(values) >= 2, values  # timed in nanoseconds: 24 requests never measure alike
        middle = len(values) // 2
        threshold = (values[middle - 1] + values[middle]) / 2
        below = sum(1 for r in rows if r["metrics"][key]["value"] <= threshold)
        settings = runner.BenchSettings(url="http://127.0.0.1:1", model="tiny", tokenizer="tiny",
                                        concurrency=(entry["concurrency"],), requests=REQUESTS,
                                        hourly_cost_usd=reference_hourly_usd, **{slo: threshold})
        again = runner.summarize_level(out / entry["raw"], settings, entry["concurrency"])
        assert 0 < again["accepted_responses"] == below < again["requests_ok"] == REQUESTS
        assert again["cost_per_accepted_response_usd"] == reference_hourly_usd * again["duration_s"] / 3600 / below
        assert again["accepted_responses_per_s"] == below / again["duration_s"]


def test_cost_arithmetic_is_exact(sweep, reference_hourly_usd):
    out, _ = sweep
    for entry in read_json(out / runner.SUMMARY_FILE):
        aggregate = read_json(out / entry["raw"] / "profile_export_aiperf.json")
        duration = aggregate["benchmark_duration"]["avg"]
        tokens = sum(r["metrics"]["output_sequence_length"]["value"] for r in records(out, entry))
        assert entry["hourly_cost_usd"] == reference_hourly_usd  # `plan`'s figure for the reference deployment
        assert entry["duration_s"] == duration
        assert entry["output_tokens_per_s"] == tokens / duration
        assert entry["cost_per_million_output_tokens_usd"] == reference_hourly_usd / (tokens / duration * 3600) * 1e6
        # None when the live SLOs let nothing in (a loaded machine); the constructed split checks it too.
        accepted = entry["accepted_responses"]
        assert entry["cost_per_accepted_response_usd"] == (
            reference_hourly_usd * duration / 3600 / accepted if accepted else None)


def test_raw_output_and_the_command_are_kept(sweep):
    out, _ = sweep
    for entry in read_json(out / runner.SUMMARY_FILE):
        raw = out / entry["raw"]
        assert {"profile_export_aiperf.json", "profile_export.jsonl", "aiperf.log", "command.txt"} <= \
            {p.name for p in raw.iterdir()}
        command = (raw / "command.txt").read_text()
        assert f"--concurrency {entry['concurrency']}" in command and "--use-server-token-count" in command
    run_info = read_json(out / runner.RUN_FILE)
    assert run_info["aiperf_version"] == runner.AIPERF_VERSION
    # No --config: priced as the reference deployment, but what serves --url is not known.
    assert run_info["settings"]["deployment"]["topology"] is None
    assert run_info["settings"]["deployment"]["config"] == "none (priced as the reference deployment)"


def test_progress_is_printed_per_level(sweep):
    _, result = sweep
    for index, level in enumerate(LEVELS, 1):
        assert f"[{index}/{len(LEVELS)}] concurrency {level}: {REQUESTS} requests" in result.stdout
    assert "summary.json" in result.stdout


def test_the_agreement_prompts_are_recorded(sweep):
    out, _ = sweep
    recorded = read_json(out / runner.AGREEMENT_FILE)
    assert recorded["temperature"] == 0
    assert len(recorded["completions"]) == 4
    assert all(c["text"] and c["error"] is None for c in recorded["completions"])


def test_the_installed_aiperf_is_the_pinned_one():
    from importlib.metadata import version

    assert version("aiperf") == runner.AIPERF_VERSION


def test_failed_requests_are_counted_and_never_accepted(mock_servers, tokenizer_dir, tmp_path, cli):
    # The mock answers 5 requests, then fails every other one.
    url = mock_servers.start("failing", "--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4",
                             "--fail-after-requests", "5")
    cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer_dir), "--isl", "16", "--osl", "4",
        "--concurrency", "2", "--requests", "12", "--agreement-prompts", "0", "--out", str(tmp_path))
    (entry,) = read_json(tmp_path / runner.SUMMARY_FILE)
    assert entry["requests_failed"] > 0
    assert entry["requests_ok"] + entry["requests_failed"] == 12
    assert entry["accepted_responses"] == entry["requests_ok"]  # no SLO set: every success is accepted


def test_a_server_that_fails_every_request_is_recorded_and_the_bench_exits_1(mock_servers, tokenizer_dir,
                                                                             tmp_path, cli):
    url = mock_servers.start("always-failing", "--ttft-ms", "5", "--itl-ms", "1", "--fail-after-requests", "0")
    result = cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer_dir), "--isl", "16",
                 "--osl", "4", "--concurrency", "2", "--requests", "6", "--agreement-prompts", "0",
                 "--out", str(tmp_path), check=False)
    assert result.returncode == 1
    assert "no request succeeded at c2" in " ".join(result.stderr.split())
    (entry,) = read_json(tmp_path / runner.SUMMARY_FILE)  # the failures are a result, kept
    assert (entry["requests_ok"], entry["requests_failed"], entry["accepted_responses"]) == (0, 6, 0)
    assert entry["aiperf_exit_code"] == 1 and entry["cost_per_accepted_response_usd"] is None


def test_a_trace_is_replayed_at_its_timestamps(mock_servers, tokenizer_dir, tmp_path, cli):
    url = mock_servers.start("trace", "--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "8")
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 100, "input_length": 24, "output_length": 8,
                                         "hash_ids": [i]}) + "\n" for i in range(6)))
    # A previous run's agreement.json in the same directory must not survive a run that records none.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / runner.AGREEMENT_FILE).write_text("{}")
    cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer_dir), "--trace", str(trace),
        "--replay-timestamps", "--agreement-prompts", "0", "--out", str(tmp_path / "run"))
    assert not (tmp_path / "run" / runner.AGREEMENT_FILE).exists()
    (entry,) = read_json(tmp_path / "run" / runner.SUMMARY_FILE)
    assert entry["concurrency"] is None and entry["raw"] == "raw/trace-timestamps"
    assert entry["requests_ok"] == 6
    command = (tmp_path / "run" / entry["raw"] / "command.txt").read_text()
    assert "--custom-dataset-type mooncake_trace" in command and "--fixed-schedule" in command


def test_the_in_cluster_package_runs_from_its_bundle_with_the_standard_library(mock_servers, tokenizer_dir, tmp_path):
    """What the Job runs: the bundled files under their mounted name, on a Python without site-packages."""
    url = mock_servers.start("bundle", "--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4")
    package = tmp_path / "program" / bundle.IN_CLUSTER_PACKAGE
    package.mkdir(parents=True)
    for name, text in bundle.files().items():
        (package / name).write_text(text)
    # The utilization sources too: the gate's modules the bench reads them with travel in the bundle.
    counters, dcgm = CounterNode(tmp_path / "sysfs"), DcgmServer(dcgm_page([{"util": 30, "used": 100, "free": 300}]))
    settings = runner.BenchSettings(url=url, model="tiny", tokenizer=str(tokenizer_dir), concurrency=(2,),
                                    requests=6, isl=16, osl=4, hourly_cost_usd=1.5, agreement_prompts=2,
                                    aiperf=str(Path(sys.executable).parent / "aiperf"),
                                    efa_counters_urls={"decode-0": counters.url}, gpu_metrics_urls={"decode-0": dcgm.url})
    (tmp_path / "bench.json").write_text(json.dumps(settings.to_json()))
    try:
        result = subprocess.run([sys.executable, "-S", "-m", bundle.IN_CLUSTER_PACKAGE, str(tmp_path / "bench.json"),
                                 str(tmp_path / "out")], cwd=tmp_path / "program", capture_output=True, text=True,
                                timeout=300, env={**os.environ, "PYTHONPATH": ""})
    finally:
        counters.stop()
        dcgm.stop()
    assert result.returncode == 0, result.stderr
    assert "[bench] done" in result.stdout
    (entry,) = read_json(tmp_path / "out" / runner.SUMMARY_FILE)
    assert entry["requests_ok"] == 6 and entry["hourly_cost_usd"] == 1.5
    utilization = entry["utilization"]
    assert utilization["efa_bytes_per_node"] == {"decode-0": {"sent": 0, "received": 0}}  # nothing moved
    assert (utilization["gpu_utilization_pct"], utilization["gpu_memory_used_fraction"]) == (30.0, 0.25)
    assert len(read_json(tmp_path / "out" / runner.AGREEMENT_FILE)["completions"]) == 2 <= len(PROMPTS)


def test_when_aiperf_fails_its_own_reason_comes_first(tokenizer_dir, tmp_path, cli):
    """No server at --url: every request fails, AIPerf exits 1, and the bench prints what AIPerf
    said (its exit-error panel and the per-request error it points to), not only its log's path."""
    from loopback import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer_dir), "--isl", "16",
                 "--osl", "4", "--concurrency", "1", "--requests", "3", "--agreement-prompts", "0",
                 "--out", str(tmp_path), check=False)
    message = " ".join(result.stderr.split())
    assert result.returncode == 1, message
    assert f"no request succeeded at c1 (summary.json has the errors; first check --url and --model): {url}. " \
           "AIPerf says: All 3 inference request(s) failed." in message
    assert "Error in aiohttp request: ClientConnectorError(" in message and "Connect call failed" in message


def test_a_profile_sweep_records_ttft_by_prompt_length_and_itl_by_concurrency(mock_servers, tokenizer_dir,
                                                                               tmp_path, cli):
    """``bench --profile-isl``: the concurrency levels, then one prefill level per prompt length at
    concurrency 1; ``profile.json`` holds AIPerf's own percentiles of each (p90 among them), which
    ``plan --profile`` reads."""
    url = mock_servers.start("profile", "--ttft-ms", str(TTFT_MS), "--ttft-ms-std", "0",
                             "--itl-ms", str(ITL_MS), "--output-tokens", str(OUTPUT_TOKENS))
    out = tmp_path / "run"
    cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer_dir), "--isl", "32",
        "--osl", str(OUTPUT_TOKENS), "--concurrency", "2", "--requests", "8", "--agreement-prompts", "0",
        "--profile-isl", "16,128", "--out", str(out))
    profile = read_json(out / runner.PROFILE_FILE)
    assert profile["format"] == runner.PROFILE_FORMAT
    assert [(p["isl"], p["concurrency"], p["raw"]) for p in profile["prefill"]] == [
        (16, 1, "raw/prefill-isl16"), (128, 1, "raw/prefill-isl128")]
    assert [(d["concurrency"], d["isl"], d["osl"], d["raw"]) for d in profile["decode"]] == [(2, 32, OUTPUT_TOKENS, "raw/c2")]
    # The prefill levels stay out of summary.json: it holds the concurrency levels only.
    assert [e["concurrency"] for e in read_json(out / runner.SUMMARY_FILE)] == [2]
    for level in (*profile["prefill"], *profile["decode"]):
        aggregate = read_json(out / level["raw"] / "profile_export_aiperf.json")
        assert level["ttft_ms"] == {p: aggregate["time_to_first_token"][p] for p in runner.PROFILE_PERCENTILES}
        assert level["itl_ms"] == {p: aggregate["inter_token_latency"][p] for p in runner.PROFILE_PERCENTILES}
        assert level["requests_ok"] == 8 and level["ttft_ms"]["p90"] >= TTFT_MS - LOOP_CLOCK_MS
    for level in profile["prefill"]:
        command = (out / level["raw"] / "command.txt").read_text()
        assert f"--isl {level['isl']} --osl {runner.PREFILL_LEVEL_OSL}" in command and "--concurrency 1 " in command


MIX, THRESHOLD = "8,16:50;160,16:50", 64


@pytest.fixture(scope="module")
def mixed_sweep(mock_servers, tokenizer_dir, tmp_path_factory, cli):
    """``bench --mix`` with ``--min-prompt-tokens`` against the mock, scraping a page of the decode
    replica's counter (Ray's format, :func:`loopback.pd_requests_page`) that does not move: AIPerf's
    delta of each series is then known, 0 (the recorded run, ``record_mixed.py``, has a moving one)."""
    from loopback import pd_requests_page
    from utilization_servers import DcgmServer

    url = mock_servers.start("mixed", "--ttft-ms", str(TTFT_MS), "--ttft-ms-std", "0", "--itl-ms", str(ITL_MS),
                             "--output-tokens", str(OUTPUT_TOKENS))
    page = DcgmServer(pd_requests_page({("worker-a", "local"): 5, ("worker-a", "remote"): 3}))
    out = tmp_path_factory.mktemp("mixed")
    try:
        result = cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer_dir), "--mix", MIX,
                     "--min-prompt-tokens", str(THRESHOLD), "--concurrency", "2", "--requests", str(REQUESTS),
                     "--agreement-prompts", "0", "--metrics-url", page.url, "--metrics-flush-s", "1", "--out", str(out))
    finally:
        page.stop()
    return out, result


def test_a_mixed_sweep_classes_every_request_by_the_server_s_prompt_count(mixed_sweep):
    out, result = mixed_sweep
    (entry,) = read_json(out / runner.SUMMARY_FILE)
    rows = records(out, entry)
    command = (out / entry["raw"] / "command.txt").read_text()
    assert f"--seq-dist '{MIX}'" in command and "--isl" not in command
    split = entry["by_prefill_path"]
    assert split["local"]["requests"] + split["remote"]["requests"] + split["unclassified"] == len(rows) == REQUESTS
    for path, keep in (("local", lambda n: n < THRESHOLD), ("remote", lambda n: n >= THRESHOLD)):
        mine = [r for r in rows if keep(r["metrics"]["input_sequence_length"]["value"])]
        assert split[path]["requests"] == len(mine)
        ttfts = sorted(r["metrics"]["time_to_first_token"]["value"] for r in mine)
        if ttfts:
            assert split[path]["ttft_ms"]["p50"] == pytest.approx(statistics.median(ttfts), rel=1e-9)
            assert split[path]["ttft_ms"]["p50"] >= TTFT_MS - LOOP_CLOCK_MS
    # Both pairs were drawn: AIPerf's prompts of 8 and of 160 tokens are on either side of 64 as the mock counts.
    assert split["local"]["requests"] > 0 and split["remote"]["requests"] > 0
    # The page never moved during the level: every series' delta is 0, counted per path, not dropped.
    assert entry["pd_requests"] == {"metric": runner.PD_REQUESTS_SERIES, "series": 2, "local": 0, "remote": 0}
    assert "by prefill path: local < 64 prompt tokens" in result.stdout
