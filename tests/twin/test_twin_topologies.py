"""Both topologies from one definition on the twin: the gate, the bench, compare, and greedy agreement.

The colocated baseline runs on the same Ray nodes (the rendered worker groups are the same in
both topologies); each topology is benchmarked with ``ray-llm-eks bench`` from the client
namespace, then ``compare`` reads the two runs. Greedy decoding must agree on every fixed prompt:
with the KV cache of every disaggregated answer carried by NIXL from another node, a corrupted
or misplaced block would change the tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ray_llm_eks.bench import agreement, compare, runner

pytestmark = pytest.mark.twin
ISL, OSL, REQUESTS = 128, 16, 12


def bench(twin, topology: str, out):
    twin.use(topology)
    config = twin.workdir / f"{topology}.yaml"
    config.write_text(twin.config.read_text() + f"\ntopology: {topology}\n")
    settings = twin.settings(topology)
    workers = [n.address for name, n in twin.deployments[topology].nodes.items() if name != "head"]
    command = [sys.executable, "-m", "ray_llm_eks.cli", "bench", "--config", str(config), "--url", twin.openai_url,
               "--model", settings["model"], "--tokenizer", str(twin.environment.model), "--isl", str(ISL),
               "--osl", str(OSL), "--concurrency", "1,2", "--requests", str(REQUESTS), "--out", str(out),
               "--slo-ttft-ms", "5000", "--slo-e2e-ms", "30000",
               *[arg for address in workers for arg in ("--metrics-url", f"http://{address}:{settings['metrics_port']}/metrics")]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(twin, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    colocated_gate = None
    paths = {}
    for topology in ("colocated", "disaggregated"):
        paths[topology] = bench(twin, topology, out / topology)
        if topology == "colocated":
            colocated_gate = twin.gate(twin.settings("colocated"))
    return paths, colocated_gate


def test_the_gate_passes_the_colocated_baseline(runs):
    _, gate = runs
    assert (gate.returncode, gate.verdict) == (0, "pass"), gate.reasons
    assert "transport" not in gate.report and "kv" not in gate.report  # no KV crosses a network


def test_every_request_of_both_topologies_is_served(runs):
    paths, _ = runs
    scraped = {topology: 0 for topology in paths}
    for topology, path in paths.items():
        summary = json.loads((path / runner.SUMMARY_FILE).read_text())
        assert [e["concurrency"] for e in summary] == [1, 2]
        for entry in summary:
            assert (entry["requests_ok"], entry["requests_failed"]) == (REQUESTS, 0), topology
            assert entry["output_tokens"] == REQUESTS * OSL
            # AIPerf drops the scrape of a level whose endpoints did not answer its reachability
            # check in time (seen on the twin's loaded cores): judge KV time where it scraped.
            if entry["server"] is None:
                continue
            scraped[topology] += 1
            if topology == "disaggregated":
                assert entry["kv_transfer_ms"] and entry["kv_transfer_ms"]["count"] > 0, entry
            else:
                assert not entry["kv_transfer_ms"] or not entry["kv_transfer_ms"].get("count")
    assert scraped["disaggregated"] >= 1, "no level of the disaggregated run scraped the workers' metrics"


def test_greedy_answers_agree_across_the_kv_transfer(runs):
    paths, _ = runs
    first = json.loads((paths["disaggregated"] / runner.AGREEMENT_FILE).read_text())
    second = json.loads((paths["colocated"] / runner.AGREEMENT_FILE).read_text())
    result = agreement.agreement(first, second)
    assert result["compared"] == len(agreement.PROMPTS)
    assert result["rate"] == 1.0, (result["divergences"], result["errors"])


def test_compare_reads_both_runs_and_decides(runs, tmp_path):
    paths, _ = runs
    decision = compare.compare(paths["disaggregated"], paths["colocated"], tmp_path)
    assert decision["decision"]
    assert (tmp_path / compare.REPORT_FILE).read_text()
    print(f"\ncompare on the twin: {decision['decision']}: {decision['reason']}")
