"""``ray-llm-eks bench`` against vLLM itself, on the CPU: real engine, real ``vllm:`` metrics.

Slow (the environment is 3.4 GB; the server needs 1-3 minutes to start): ``make test-slow``,
never ``make test``. The model is a 2-layer Llama with random weights and a local BPE tokenizer
(``ray_llm_eks/twin/tiny_model.py``), so nothing is downloaded; its answers are gibberish, which is fine: greedy
decoding must still give the same gibberish twice.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from loopback import free_port, read_json, run_cli, wait_for
from ray_llm_eks.bench import agreement, runner
from ray_llm_eks.twin import tiny_model

pytestmark = pytest.mark.slow_vllm
HERE = Path(__file__).resolve().parent
TINY_MODEL = Path(tiny_model.__file__)
LEVELS, REQUESTS, ISL, OSL = (1, 4), 48, 64, 32
SCRAPE_INTERVAL_S = 0.333
"""AIPerf 0.13 scrapes /metrics every 333 ms (``Environment.SERVER_METRICS.COLLECTION_INTERVAL``)."""


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    python = os.environ.get("RAY_LLM_EKS_VLLM_PYTHON")
    if not python:
        pytest.skip("RAY_LLM_EKS_VLLM_PYTHON is not set: run `make test-slow`")
    directory = tmp_path_factory.mktemp("vllm")
    model = directory / "model"
    subprocess.run([python, str(TINY_MODEL), "model", str(model)], check=True, capture_output=True)
    port = free_port()
    log = directory / "vllm.log"
    process = subprocess.Popen(
        [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name", "tiny",
         "--dtype", "float32", "--max-model-len", "4096", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(url + "/v1/models", process, log, seconds=900)
        yield url, model
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def runs(vllm_server, tmp_path_factory):
    url, model = vllm_server
    out = tmp_path_factory.mktemp("vllm-runs")
    common = ["--url", url, "--model", "tiny", "--tokenizer", str(model), "--isl", str(ISL), "--osl", str(OSL),
              "--slo-ttft-ms", "2000", "--slo-e2e-ms", "10000"]
    run_cli("bench", *common, "--concurrency", ",".join(map(str, LEVELS)), "--requests", str(REQUESTS),
            "--out", str(out / "first"))
    run_cli("bench", *common, "--concurrency", "1", "--requests", "4", "--out", str(out / "second"))
    return out


def test_every_request_is_served_and_the_engine_counts_the_same_tokens(runs):
    summary = read_json(runs / "first" / runner.SUMMARY_FILE)
    assert [e["concurrency"] for e in summary] == list(LEVELS)
    for entry in summary:
        assert (entry["requests_ok"], entry["requests_failed"]) == (REQUESTS, 0)
        assert entry["accepted_responses"] == REQUESTS
        assert entry["output_tokens"] == REQUESTS * OSL  # ignore_eos: exactly --osl each
        server = entry["server"]
        assert server["endpoints"] and server["endpoints"][0].endswith("/metrics")
        # vLLM's own counter over the measured phase matches the client's count from `usage`, up
        # to what AIPerf's scrape windows blur at each edge of the phase (one interval each side,
        # plus the requests in flight at the boundary).
        edge = 2 * SCRAPE_INTERVAL_S * entry["output_tokens_per_s"] + entry["concurrency"] * OSL
        assert abs(server["generation_tokens"] - entry["output_tokens"]) <= edge, (server, entry["output_tokens"])
        assert server["prompt_tokens"] > 0 and server["queue_time_ms"]["count"] > 0
        assert entry["kv_transfer_ms"] is None  # one engine: nothing crosses a network
        assert 0 < entry["ttft_ms"]["p50"] <= entry["e2e_ms"]["p50"]
        print(f"\nvLLM CPU, concurrency {entry['concurrency']}: " + json.dumps(
            {k: entry[k] for k in ("ttft_ms", "itl_ms", "e2e_ms", "output_tokens_per_s", "duration_s",
                                   "cost_per_accepted_response_usd", "server")}))


def test_greedy_decoding_gives_the_same_tokens_twice(runs):
    first = read_json(runs / "first" / runner.AGREEMENT_FILE)
    second = read_json(runs / "second" / runner.AGREEMENT_FILE)
    result = agreement.agreement(first, second)
    assert result["compared"] == len(agreement.PROMPTS)
    assert result["rate"] == 1.0, result["divergences"]
    assert all(c["text"] and c["completion_tokens"] for c in first["completions"])
