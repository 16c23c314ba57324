"""vLLM's NIXL metrics as Ray Serve LLM 2.58 really exports them (docs/twin.md), read by the gate.

- The failure counters (``*_num_failed_transfers``, ``*_num_failed_notifications``,
  ``*_num_kv_expired_reqs``) are not exported while zero: the first failure makes the series appear.
- The NIXL histograms exist only on decode (it pulls the KV cache), from its first transfer;
  prefill exports none.
- After a Serve redeploy the replaced replicas' series stay exported, frozen, beside the new ones.

Each exposition is ``prometheus_client``'s, with Ray's labels; a labelled metric exports no series
until one is observed, which is Ray's absent-while-zero shape.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ray_llm_eks.base.wire import GateSettings
from ray_llm_eks.verification import metrics
from ray_llm_eks.verification.gate import Gate
from ray_llm_eks.verification.kube import Endpoints

RAY_LABELS = ("Component", "NodeAddress", "ReplicaId", "SessionName", "Version", "WorkerId", "engine", "model_name")
KV_BYTES = 50_000_000


def ray_labels(replica: str, node: str = "10.0.1.12") -> dict[str, str]:
    return {"Component": "core_worker", "NodeAddress": node, "ReplicaId": replica,
            "SessionName": "session_2026-11-30_21-00-00_000000_1", "Version": "2.58.0",
            "WorkerId": replica.encode().hex().ljust(56, "0"), "engine": "0", "model_name": "qwen3.5-9b"}


class RayWorker:
    """One Ray node's metrics port with one vLLM engine's metrics (Ray's names and labels)."""

    def __init__(self, node: str = "10.0.1.12") -> None:
        self.node = node
        self.registry = CollectorRegistry()
        r = self.registry
        self.bytes = Histogram("ray_vllm_nixl_bytes_transferred", "", RAY_LABELS, registry=r, buckets=(1e6, 1e8, 1e9))
        self.seconds = Histogram("ray_vllm_nixl_xfer_time_seconds", "", RAY_LABELS, registry=r, buckets=(0.01, 0.1, 1))
        self.failed = Counter("ray_vllm_nixl_num_failed_transfers", "", RAY_LABELS, registry=r)
        self.notifications = Counter("ray_vllm_nixl_num_failed_notifications", "", RAY_LABELS, registry=r)
        self.expired = Counter("ray_vllm_nixl_num_kv_expired_reqs", "", RAY_LABELS, registry=r)
        # Every engine exports vLLM's gauges from its start, so the endpoint visibly exports vLLM's metrics.
        self.running = Gauge("ray_vllm_num_requests_running", "", RAY_LABELS, registry=r)

    def start(self, replica: str) -> RayWorker:
        self.running.labels(**ray_labels(replica, self.node)).set(0)
        return self

    def transfer(self, replica: str, size: float = KV_BYTES, seconds: float = 0.03) -> None:
        self.bytes.labels(**ray_labels(replica, self.node)).observe(size)
        self.seconds.labels(**ray_labels(replica, self.node)).observe(seconds)

    @property
    def text(self) -> str:
        return generate_latest(self.registry).decode()

    @property
    def totals(self) -> metrics.NixlTotals:
        return metrics.NixlTotals.of(self.text)


def test_ray_does_not_export_a_failure_counter_before_it_counts():
    decode = RayWorker().start("decode-1")
    decode.transfer("decode-1")
    assert "ray_vllm_nixl_num_failed_transfers_total{" not in decode.text
    decode.failed.labels(**ray_labels("decode-1")).inc()
    assert 'ray_vllm_nixl_num_failed_transfers_total{Component="core_worker"' in decode.text


def test_the_first_failure_counts_from_zero():
    decode = RayWorker().start("decode-1")
    decode.transfer("decode-1")
    before = decode.totals
    assert before.failed is None  # not exported: nothing failed yet
    decode.failed.labels(**ray_labels("decode-1")).inc()
    decode.notifications.labels(**ray_labels("decode-1")).inc(2)
    delta = metrics.nixl_delta(before, decode.totals)
    assert (delta["failed_transfers"], delta["failed_notifications"]) == (1.0, 2.0)
    assert delta["kv_expired_reqs"] == 0.0  # absent on an endpoint that exports vLLM: none


def test_an_absent_counter_is_zero_only_where_vllm_is_exported():
    prefill = RayWorker("10.0.1.11").start("prefill-1")  # prefill: vLLM's metrics, no NIXL series
    delta = metrics.nixl_delta(prefill.totals, prefill.totals)
    assert delta["failed_transfers"] == 0.0 and delta["bytes_transferred"] is None
    assert not prefill.totals.transfers_exported
    nothing = metrics.NixlTotals.of("# HELP ray_node_cpu_utilization\nray_node_cpu_utilization 3.0\n")
    assert metrics.nixl_delta(nothing, nothing)["failed_transfers"] is None  # no vLLM here: unknown


def test_a_frozen_replica_does_not_double_the_figures():
    """After a Serve redeploy, the replaced replica's series stay exported beside the new one's: the
    endpoint's absolute totals count both, the deltas only what moved."""
    decode = RayWorker().start("decode-old")
    for _ in range(10):
        decode.transfer("decode-old")
    decode.failed.labels(**ray_labels("decode-old")).inc(4)
    decode.start("decode-new")  # the redeploy: a new replica, the old series frozen
    before = decode.totals
    for _ in range(3):
        decode.transfer("decode-new")
    after = decode.totals
    assert after.bytes_sum == 13 * KV_BYTES  # absolute: the frozen replica's 10 transfers too
    delta = metrics.nixl_delta(before, after)
    assert delta["bytes_transferred"] == 3 * KV_BYTES and delta["transfers"] == 3
    assert delta["failed_transfers"] == 0.0
    assert delta["mean_xfer_time_ms"] == pytest.approx(30.0)


def test_a_replica_gone_between_readings_moves_nothing_and_a_restarted_one_counts_from_zero():
    gone, restarted = RayWorker().start("a"), RayWorker().start("b")
    for _ in range(5):
        gone.transfer("a")
        restarted.transfer("b")
    before = metrics.NixlTotals.of(gone.text + restarted.text)
    restarted = RayWorker().start("b")  # b's engine restarted (its series began again); a is gone
    restarted.transfer("b")
    delta = metrics.nixl_delta(before, restarted.totals)
    assert delta["bytes_transferred"] == KV_BYTES and delta["transfers"] == 1


def test_a_counter_ray_also_exports_as_a_gauge_is_read_once():
    """Ray's OpenCensus path exports each counter as ``X_total`` and as the deprecated gauge ``X``."""
    labels = '{ReplicaId="decode-1",engine="0"}'
    text = (f"ray_vllm_nixl_num_failed_transfers_total{labels} 2.0\n"
            f"ray_vllm_nixl_num_failed_transfers{labels} 2.0\n")
    assert metrics.NixlTotals.of(text).failed == 2.0


# --- the gate's KV check ------------------------------------------------------------------------------------

def _pod(name: str, role: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"ray.io/group": role, "ray.io/node-type": "worker"}},
            "spec": {"nodeName": f"node-{role}"}}


def _gate(disaggregated, probes_ok: int = 3, prompt_tokens: int = 100) -> Gate:
    # One-token blocks and nothing withheld: each probe predicts exactly KV_BYTES (these tests are about
    # NIXL's series; the block rounding is wire.kv_transfer_bytes's, tested with the gate end to end).
    config = GateSettings.from_json({**disaggregated.settings, "kv_bytes_per_token": 10_000,
                                   "kv_bytes_per_sequence": KV_BYTES - prompt_tokens * 10_000,
                                   "kv_block_tokens": 1, "kv_tokens_withheld": 0})
    gate = Gate(config, kube=None, endpoints=Endpoints(kube=None))  # type: ignore[arg-type]
    gate.report.sections["probes"] = {"count": probes_ok, "ok": probes_ok,
                                      "results": [{"ok": True, "prompt_tokens": prompt_tokens}] * probes_ok}
    gate.report.sections["nodes"] = [{"name": "node-prefill", "role": "prefill"}, {"name": "node-decode", "role": "decode"}]
    return gate


def _efa(moved: int) -> tuple[dict, dict]:
    before = {"node-prefill": {"d": {"tx_bytes": 0}}, "node-decode": {"d": {"rx_bytes": 0}}}
    after = {"node-prefill": {"d": {"tx_bytes": moved}}, "node-decode": {"d": {"rx_bytes": moved}}}
    return before, after


def _check(gate: Gate, before: dict[str, str], after: dict[str, str], workers: list[dict]) -> dict[str, Any]:
    efa_before, efa_after = _efa(3 * KV_BYTES)
    gate.checks.check_kv(efa_before, efa_after, {p: metrics.NixlTotals.of(t) for p, t in before.items()},
                  {p: metrics.NixlTotals.of(t) for p, t in after.items()}, workers)
    return gate.report.sections["kv"]


WORKERS = [_pod("prefill-0", "prefill"), _pod("decode-0", "decode")]


def test_a_healthy_run_warns_of_nothing_although_prefill_exports_no_nixl(disaggregated):
    """Decode's first transfers make its NIXL series appear; prefill never has any."""
    prefill, decode = RayWorker("10.0.1.11").start("prefill-1"), RayWorker().start("decode-1")
    before = {"prefill-0": prefill.text, "decode-0": decode.text}
    for _ in range(3):
        decode.transfer("decode-1")
    gate = _gate(disaggregated)
    kv = _check(gate, before, {"prefill-0": prefill.text, "decode-0": decode.text}, WORKERS)
    assert gate.report.reasons == [] and gate.report.warnings == []
    assert kv["nixl"]["bytes_transferred"] == 3 * KV_BYTES and kv["nixl_fraction_of_predicted"] == 1.0
    assert kv["nixl"]["failed_transfers"] == 0.0 and kv["nixl"]["kv_expired_reqs"] == 0.0
    assert kv["nixl"]["by_pod"]["prefill-0"]["exports_transfers"] is False
    assert kv["nixl"]["by_pod"]["decode-0"]["bytes_transferred"] == 3 * KV_BYTES


def test_the_first_failed_transfer_during_the_probes_fails_the_gate(disaggregated):
    prefill, decode = RayWorker("10.0.1.11").start("prefill-1"), RayWorker().start("decode-1")
    decode.transfer("decode-1")
    before = {"prefill-0": prefill.text, "decode-0": decode.text}
    decode.transfer("decode-1")
    decode.failed.labels(**ray_labels("decode-1")).inc()
    gate = _gate(disaggregated)
    kv = _check(gate, before, {"prefill-0": prefill.text, "decode-0": decode.text}, WORKERS)
    assert kv["nixl"]["failed_transfers"] == 1.0
    assert "vLLM counted 1 failed NIXL transfer(s) during the probes" in gate.report.reasons


def test_failed_notifications_and_expired_requests_are_reported_and_warned(disaggregated):
    """Neither loses a transfer by itself: a failed notification follows a completed read (prefill
    keeps the blocks until the lease ends), an expired request is prefill freeing them then."""
    prefill, decode = RayWorker("10.0.1.11").start("prefill-1"), RayWorker().start("decode-1")
    before = {"prefill-0": prefill.text, "decode-0": decode.text}
    for _ in range(3):
        decode.transfer("decode-1")
    decode.notifications.labels(**ray_labels("decode-1")).inc()
    prefill.expired.labels(**ray_labels("prefill-1", "10.0.1.11")).inc(2)
    gate = _gate(disaggregated)
    kv = _check(gate, before, {"prefill-0": prefill.text, "decode-0": decode.text}, WORKERS)
    assert (kv["nixl"]["failed_notifications"], kv["nixl"]["kv_expired_reqs"]) == (1.0, 2.0)
    assert gate.report.reasons == []
    assert any("1 failed NIXL notification(s)" in w for w in gate.report.warnings)
    assert any("freed the KV cache of 2 request(s)" in w for w in gate.report.warnings)


def test_decode_without_nixl_series_after_successful_probes_is_warned_by_name(disaggregated):
    prefill, decode = RayWorker("10.0.1.11").start("prefill-1"), RayWorker().start("decode-1")
    texts = {"prefill-0": prefill.text, "decode-0": decode.text}
    gate = _gate(disaggregated)
    kv = _check(gate, texts, texts, WORKERS)
    assert gate.report.reasons == []  # the EFA counters are the proof; NIXL's count corroborates
    (warning,) = gate.report.warnings
    assert "no decode worker exports ray_vllm_nixl_bytes_transferred after 3 successful probe(s) (decode-0)" in warning
    assert kv["nixl"]["bytes_transferred"] is None and kv["nixl_fraction_of_predicted"] is None


def test_one_of_two_decode_workers_without_nixl_series_is_no_warning(disaggregated):
    """Ray Serve routes each probe to one decode replica: one that served none exports none yet."""
    prefill, busy, idle = RayWorker("10.0.1.11").start("p"), RayWorker().start("d1"), RayWorker("10.0.1.13").start("d2")
    before = {"prefill-0": prefill.text, "decode-0": busy.text, "decode-1": idle.text}
    for _ in range(3):
        busy.transfer("d1")
    gate = _gate(disaggregated)
    _check(gate, before, {"prefill-0": prefill.text, "decode-0": busy.text, "decode-1": idle.text},
           [*WORKERS, _pod("decode-1", "decode")])
    assert gate.report.warnings == [] and gate.report.reasons == []


def test_the_gate_does_not_double_frozen_series_after_a_redeploy(disaggregated):
    prefill, decode = RayWorker("10.0.1.11").start("prefill-1"), RayWorker().start("decode-old")
    for _ in range(20):
        decode.transfer("decode-old")
    decode.start("decode-new")
    before = {"prefill-0": prefill.text, "decode-0": decode.text}
    for _ in range(3):
        decode.transfer("decode-new")
    gate = _gate(disaggregated)
    kv = _check(gate, before, {"prefill-0": prefill.text, "decode-0": decode.text}, WORKERS)
    assert kv["nixl"]["bytes_transferred"] == 3 * KV_BYTES and kv["nixl_fraction_of_predicted"] == 1.0
    assert gate.report.reasons == [] and gate.report.warnings == []
