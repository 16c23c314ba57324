"""Conditional disaggregation on the twin: ``disaggregation.min_prompt_tokens`` rendered, run through
the twin profile, and served by Ray Serve LLM with ``rayllmeks_pd`` imported from the rendered archive.

A mixed workload: short prompts are prefilled on the decode replica (no NIXL read: decode's
``nixl_bytes_transferred`` histogram does not count them), long ones on the prefill leg (it does);
greedy answers on both paths equal those of the plain P/D application; the requests-per-path counter
says which path each took; ``bench --mix`` classes each request by the server's prompt count and
the decode replica's counter agrees. Written to need one deploy: the module before it leaves the
plain disaggregated application running (MODULE_ORDER in conftest.py)."""

from __future__ import annotations

import json

import pytest

from helpers.twin import BENCH_REQUESTS, MIX_CONCURRENCY, THRESHOLD, chat, wait_until
from ray_llm_eks.base import wire
from ray_llm_eks.bench import runner
from ray_llm_eks.verification import metrics

pytestmark = pytest.mark.twin

SHORT = ["hello", "what is a key value cache", "decode reads it"]
"""Each well under THRESHOLD tokens after the tiny model's chat template."""
LONG = ["the prefill computes the key value cache and decode reads it " * 20,
        "long prompts still take the prefill leg and move their cache " * 20]
"""Each well over THRESHOLD tokens and under the twin's max_model_len."""


def decode_metrics(run) -> list[metrics.Sample]:
    from test_twin_disaggregated import worker_metrics
    return metrics.parse(worker_metrics(run, "decode"))


def path_count(samples: list[metrics.Sample], path: str) -> float:
    return sum(s.value for s in samples if wire.PD_REQUESTS_METRIC in s.name and (wire.PD_PATH_TAG, path) in s.labels)


def answers(run, prompts: list[str]) -> list[str]:
    return [chat(run.openai_url, "tiny", prompt, max_tokens=8)["choices"][0]["message"]["content"] for prompt in prompts]


@pytest.fixture(scope="module")
def conditional(twin, conditional_config):
    """Plain P/D's greedy answers, then the conditional application deployed (fresh: the twin's fixed
    nodes cannot roll the decode replica over, see TwinRun.use)."""
    twin.use("disaggregated")
    plain = {"short": answers(twin, SHORT), "long": answers(twin, LONG)}
    twin.use("conditional", fresh=True)
    try:
        yield twin, plain
    finally:
        # The next module deploys the plain application from an empty Serve, not by a rolling update
        # of another import path over these replicas (as after the prefix-routing module).
        twin.twin.remove_applications()


def nixl_transfers(run) -> float:
    from test_twin_disaggregated import worker_metrics
    return metrics.NixlTotals.of(worker_metrics(run, "decode")).transfers or 0.0


def test_short_prompts_move_no_kv_and_long_ones_do(conditional):
    run, plain = conditional

    def counted(before, path: str, at_least: float):
        def check():
            samples = decode_metrics(run)
            return samples if path_count(samples, path) - path_count(before, path) >= at_least else None
        return check

    before = decode_metrics(run)
    transfers_before = nixl_transfers(run)
    short = answers(run, SHORT)
    after_short = wait_until(counted(before, wire.PD_LOCAL, len(SHORT)), 60,
                             "the local-path counter to count the short prompts")
    # No NIXL read for a prompt prefilled on decode: the transfer histogram did not count them.
    assert nixl_transfers(run) == transfers_before
    assert path_count(after_short, wire.PD_LOCAL) - path_count(before, wire.PD_LOCAL) == len(SHORT)
    assert path_count(after_short, wire.PD_REMOTE) == path_count(before, wire.PD_REMOTE)

    long = answers(run, LONG)
    wait_until(counted(after_short, wire.PD_REMOTE, len(LONG)), 60, "the remote-path counter to count the long prompts")
    wait_until(lambda: nixl_transfers(run) >= transfers_before + len(LONG), 60,
               "decode's NIXL transfers to count the long prompts")
    assert nixl_transfers(run) == transfers_before + len(LONG)  # one read per long prompt, none for the short ones

    # Greedy answers agree with plain P/D on both paths.
    assert short == plain["short"]
    assert long == plain["long"]


def test_bench_reports_ttft_per_prefill_path_and_the_decode_replica_agrees(conditional, conditional_mixed_run):
    """A mixed workload (helpers.twin.MIX) against the conditional deployment: every request of each
    level is classed by the server's own prompt count, both classes are served, and the decode
    replica counted the same requests on the same paths (its counter, scraped by the bench)."""
    summary = json.loads((conditional_mixed_run / runner.SUMMARY_FILE).read_text())
    assert [str(entry["concurrency"]) for entry in summary] == MIX_CONCURRENCY.split(",")
    for entry in summary:
        paths = entry["by_prefill_path"]
        assert paths["min_prompt_tokens"] == THRESHOLD and paths["unclassified"] == 0, paths
        local, remote = paths["local"]["requests"], paths["remote"]["requests"]
        assert local + remote == entry["requests_ok"] == BENCH_REQUESTS and local and remote, paths
        assert paths["local"]["prompt_tokens"]["max"] < THRESHOLD <= paths["remote"]["prompt_tokens"]["min"], paths
        assert paths["local"]["ttft_ms"]["p50"] > 0 and paths["remote"]["ttft_ms"]["p50"] > 0, paths
        counted = entry["pd_requests"]
        assert (counted["local"], counted["remote"]) == (local, remote), counted


def test_the_gate_proves_both_paths_on_the_conditional_deployment(conditional):
    """The rendered gate, as the conditional deployment renders it (its threshold, its long probes of at
    least the threshold's words, one short probe): each probe is classed by the server's own prompt
    count, the decode replica's counter grew by each class's probes, and only the long probes are
    predicted and read over NIXL."""
    run, _ = conditional
    settings = run.settings("conditional")
    assert settings["min_prompt_tokens"] == THRESHOLD and settings["probe_prompt_words"] >= THRESHOLD
    gate = run.gate(settings)
    assert (gate.returncode, gate.verdict) == (0, "pass"), gate.reasons
    probes, paths, kv = gate.report["probes"], gate.report["paths"], gate.report["kv"]
    long_count = probes["count"] - 1  # the rendered number of long probes, then the short one
    assert paths["counter"] == "ray_rayllmeks_pd_requests_total" and paths["min_prompt_tokens"] == THRESHOLD
    assert paths["probes"] == {"local": [probes["count"]], "remote": list(range(1, probes["count"]))}
    short = probes["results"][-1]
    assert short["prefill"] == "local" and short["prompt_tokens"] < THRESHOLD
    assert all(r["prefill"] == "remote" and r["prompt_tokens"] >= THRESHOLD for r in probes["results"][:-1])
    # Nothing else runs on the twin during the gate: the counter grew by exactly the probes of each class.
    assert paths["counted"] == {"local": 1.0, "remote": float(long_count)}
    assert kv["predicted_probes"] == long_count
    assert kv["nixl"]["transfers"] == long_count  # one NIXL read per long probe, none for the short one
    print(f"\ngate paths on the twin: {paths['counted']}, kv: predicted {kv['predicted_bytes']} B, "
          f"moved {kv['efa_moved_bytes']} B ({kv['efa_fraction_of_predicted']})")
