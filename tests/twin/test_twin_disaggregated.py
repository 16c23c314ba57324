"""Prefill/decode on the twin: Ray Serve LLM, two vLLM engines and NIXL over libfabric's tcp provider.

What runs is the rendered deployment of ``examples/twin/twin.yaml`` through the twin profile;
what is read is what the deployment gate reads in a cluster: the OpenAI endpoint, the workers'
``/metrics`` on Ray's metrics port, the node counters through the gate program's own counter
reader, the worker logs. Nothing here is a fake of the serving path.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers.twin import capture, chat, get, wait_until
from ray_llm_eks.twin import tiny_model, twin_profile
from ray_llm_eks.verification import efa, metrics

pytestmark = pytest.mark.twin
PROMPT = "the prefill computes the key value cache and decode reads it " * 60


@pytest.fixture(scope="module")
def pd(twin):
    twin.use("disaggregated")
    return twin


def node_counters(run, role: str) -> efa.Counters:
    settings = run.settings()
    body = json.loads(get(f"http://{run.deployments['disaggregated'].nodes[role].address}:"
                          f"{settings['efa_counter_port']}{efa.COUNTER_PATH}"))
    return body["counters"]


def worker_metrics(run, role: str) -> str:
    settings = run.settings()
    address = run.deployments["disaggregated"].nodes[role].address
    return get(f"http://{address}:{settings['metrics_port']}/metrics").decode()


def served_requests(run) -> float:
    samples = metrics.parse(worker_metrics(run, "decode"))
    return metrics.total(samples, "request_success") or 0.0


def settled(run, quiet_seconds: float = twin_profile.METRICS_QUIET_SECONDS) -> float:
    """Wait until decode's finished-request count stops moving for ``quiet_seconds`` (two of the
    twin's metrics export periods, twin_profile.METRICS_REPORT_INTERVAL_MS), so a reading holds every request served before it."""
    last, since = served_requests(run), time.monotonic()

    def quiet():
        nonlocal last, since
        now = served_requests(run)
        if now != last:
            last, since = now, time.monotonic()
        return time.monotonic() - since >= quiet_seconds

    wait_until(quiet, 120, "decode's request count to settle")
    return last


def test_the_configured_architecture_is_the_checkpoints(pd):
    """The planner's figures for the tiny model are what the twin serves (as a user gives them for
    any model outside the table): read back from the checkpoint ``make twin`` built."""
    model = Path(pd.environment.model)
    config = json.loads((model / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"],
            config["hidden_size"] // config["num_attention_heads"]) == (
        tiny_model.LAYERS, tiny_model.HEADS, tiny_model.KV_HEADS, tiny_model.HEAD_DIM)
    raw = (model / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    header.pop("__metadata__", None)
    parameters = 0
    for tensor in header.values():
        count = 1
        for size in tensor["shape"]:
            count *= size
        parameters += count
    import yaml

    declared = yaml.safe_load(pd.config.read_text())["model"]["architecture"]
    assert declared == {**tiny_model.ARCHITECTURE, "parameter_count": parameters}


def test_a_pd_request_moves_the_kv_cache_over_the_decode_nodes_link(pd):
    settings = pd.settings()
    before = {role: node_counters(pd, role) for role in ("prefill", "decode")}
    nixl_before = metrics.NixlTotals.of(worker_metrics(pd, "decode"))
    answer = chat(pd.openai_url, settings["model"], PROMPT)
    prompt_tokens = answer["usage"]["prompt_tokens"]
    assert answer["usage"]["completion_tokens"] > 0  # random weights: the text itself may be blank

    # Ray's metrics agent exports every few seconds: wait for the transfer to show.
    def moved():
        totals = metrics.NixlTotals.of(worker_metrics(pd, "decode"))
        return totals if (totals.bytes_sum or 0) > (nixl_before.bytes_sum or 0) else None

    nixl_after = wait_until(moved, 60, "decode's ray_vllm_nixl_bytes_transferred to grow")
    after = {role: node_counters(pd, role) for role in ("prefill", "decode")}
    nixl = metrics.nixl_delta(nixl_before, nixl_after)
    predicted = prompt_tokens * settings["kv_bytes_per_token"] + settings["kv_bytes_per_sequence"]
    sent = efa.node_delta(before["prefill"], after["prefill"])["sent_bytes"]
    received = efa.node_delta(before["decode"], after["decode"])["received_bytes"]
    print(f"\nprompt {prompt_tokens} tokens, predicted {predicted} B, NIXL {nixl['bytes_transferred']} B, "
          f"prefill sent {sent} B, decode received {received} B")
    # Decode pulls: its NIXL histogram moved. What vLLM moves is block-rounded and need not be the
    # planner's figure (the first real run: 1,310,720 of 1,626,112 predicted bytes for 794 tokens),
    # so it is held to the gate's share, not to equality.
    assert nixl["bytes_transferred"] >= settings["min_kv_fraction"] * predicted
    assert nixl["transfers"] >= 1
    # The links carried at least the gate's share of the planner's figure.
    assert min(sent, received) >= settings["min_kv_fraction"] * predicted
    # Fact 2 of the first real run: NIXL series only on decode.
    prefill_text = worker_metrics(pd, "prefill")
    assert not metrics.NixlTotals.of(prefill_text).present
    capture("metrics/decode-after-one-transfer.prom", worker_metrics(pd, "decode"))
    capture("metrics/prefill-after-one-transfer.prom", prefill_text)


def test_the_gate_passes_on_libfabric_tcp_when_tcp_is_expected(pd):
    result = pd.gate(pd.settings())
    report = result.report
    assert (result.returncode, result.verdict) == (0, "pass"), (result.reasons, result.stderr[-2000:])
    assert report["transport"]["backend"] == "LIBFABRIC"
    assert report["transport"]["provider"] == "tcp"
    kv = report["kv"]
    assert kv["predicted_bytes"] > 0 and kv["efa_fraction_of_predicted"] >= kv["min_fraction"]
    assert kv["nixl"]["bytes_transferred"] >= kv["min_fraction"] * kv["predicted_bytes"]
    assert report["probes"]["ok"] == report["probes"]["count"] == pd.settings()["probes"]
    print(f"\ngate kv: {json.dumps({k: kv[k] for k in ('predicted_bytes', 'efa_moved_bytes', 'efa_fraction_of_predicted')})}"
          f" nixl {kv['nixl']['bytes_transferred']}")
    for pod, log in ((p, pd.twin.node_logs[p.split('-')[-2]].text()) for p in report["transport"]["by_pod"]):
        capture(f"logs/healthy-libfabric-tcp-{pod.split('-')[-2]}.log", log)


def test_the_gate_fails_on_the_same_run_when_efa_is_expected(pd):
    result = pd.gate(pd.settings(expected_provider="efa"))
    assert (result.returncode, result.verdict) == (1, "fail")
    reasons = " | ".join(result.reasons)
    assert "tcp" in reasons.lower(), reasons
    assert all("efa" in r.lower() or "tcp" in r.lower() for r in result.reasons), reasons


def test_continuous_verification_computes_the_serving_window_from_two_runs(pd):
    """The CronJob's settings, run twice: the second run reports what was served in between, from
    the workers' real metrics and the nodes' counters, kept in the rendered state ConfigMap."""
    settings = pd.continuous_verification("disaggregated")
    assert settings["state_config_map"] and settings["log_window_seconds"]
    settled(pd)  # Ray exports each node's metrics periodically: every request served so far is counted
    first = pd.gate(settings)
    assert first.verdict == "pass", first.reasons
    assert "window" not in first.report  # the first run only keeps its reading
    served = [chat(pd.openai_url, settings["model"], PROMPT, max_tokens=8) for _ in range(3)]
    settled(pd)
    second = pd.gate(settings)
    assert second.verdict == "pass", second.reasons
    window = second.report["window"]
    print(f"\nserving window on the twin: {json.dumps(window)}")
    # Between the two readings: the first run's own probes and the three requests above.
    assert window["requests"] == settings["probes"] + len(served)
    assert window["workers"] == 2 and window["workers_skipped"] == []
    assert window["kv_transfer_bytes"] >= settings["min_kv_fraction"] * settings["kv_bytes_per_token"] * sum(
        s["usage"]["prompt_tokens"] for s in served)
    assert window["nixl_failed_transfers"] == 0
    assert window["ttft_p50_ms"] and window["itl_p50_ms"] is not None and window["generation_tokens_per_second"] > 0
    assert window["min_node_efa_bytes"] > 0
