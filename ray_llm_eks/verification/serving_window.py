"""What the deployment served between two continuous verification runs, from the workers' own metrics.

Each run of continuous verification reads every Ray worker's Prometheus endpoint and every GPU
node's EFA counters (it does so for its probes anyway), keeps that reading in a ConfigMap, and
subtracts the previous run's. The difference is the window's traffic: requests, tokens, the
latency histograms' bucket counts, the NIXL figures and each node's EFA bytes. Publishing
percentiles computed here, rather than letting the CloudWatch agent scrape the workers, is what
keeps the histograms: the agent's Prometheus pipeline publishes counters, gauges and summaries,
not histogram buckets (docs/observability.md, "Why continuous verification publishes latency").

vLLM's names (0.26, ``vllm/v1/metrics/loggers.py``): histograms ``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds`` (older releases: ``vllm:time_per_output_token_seconds``, also
still emitted beside its replacement with the same buckets, so only one of the two is read),
counters ``vllm:request_success_total`` and ``vllm:generation_tokens_total``; Ray renames them
``ray_vllm_...`` (see :mod:`.metrics`).

The window includes the previous run's own probe requests (a handful of short chats), since the
reading is taken before each run's probes. Counters that went down (a restarted engine) count
from zero, as Prometheus' ``increase`` does; a worker or node that first appears in a window
counts from zero too (it started inside it); a node read only once is left out of the EFA minimum.

Standard library only: it runs in the cluster.
"""

from __future__ import annotations

import math
import time
from typing import Any, Iterable, Mapping

from . import efa, metrics

try:  # the in-cluster bundle carries bench's histogram module beside this one
    from . import histogram  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised by the bundle tests
    from ..bench import histogram  # type: ignore[no-redef]

STATE_KEY = "state.json"
"""The key of the reading in the continuous verification's state ConfigMap."""

HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("time_to_first_token_seconds",),
    "itl": ("inter_token_latency_seconds", "time_per_output_token_seconds"),
}
"""Each figure's histogram, by preference: the first name a worker exports is read, the rest ignored."""
COUNTERS: dict[str, tuple[str, str]] = {
    "requests": ("request_success", ""),
    "generation_tokens": ("generation_tokens", ""),
    "nixl_bytes": (metrics.BYTES, "_sum"),
    "nixl_seconds": (metrics.XFER_TIME, "_sum"),
    "nixl_transfers": (metrics.XFER_TIME, "_count"),
    "nixl_failed": (metrics.FAILED, ""),
}

Reading = dict[str, Any]
"""``{"counters": {key: value}, "buckets": {figure: {le: cumulative count}}}`` of one worker."""


def read_worker(text: str) -> Reading:
    """The window figures' raw material from one ``/metrics`` body."""
    samples = metrics.parse(text)
    counters = {}
    for key, (metric, suffix) in COUNTERS.items():
        value = metrics.total(samples, metric, suffix)
        if value is not None:
            counters[key] = value
    buckets: dict[str, dict[str, float]] = {}
    for figure, candidates in HISTOGRAMS.items():
        for metric in candidates:
            names = {f"{prefix}{metric}_bucket" for prefix in metrics.PREFIXES}
            found: dict[str, float] = {}
            for sample in samples:
                le = dict(sample.labels).get("le")
                if sample.name in names and le is not None and not math.isnan(sample.value):
                    key = "+Inf" if le.strip().lower() in ("+inf", "inf") else repr(float(le))
                    found[key] = found.get(key, 0.0) + sample.value  # series of one worker add up
            if found:
                buckets[figure] = found
                break
    return {"counters": counters, "buckets": buckets}


def snapshot(workers: Mapping[str, tuple[str, str]], nodes: Mapping[str, tuple[str, efa.Counters]],
             at: float | None = None, cluster: str = "") -> dict[str, Any]:
    """A run's reading: ``workers`` pod -> (role, /metrics text), ``nodes`` node -> (role, EFA
    counters), of the RayService's active RayCluster ``cluster``."""
    return {
        "at": time.time() if at is None else at,
        "cluster": cluster,
        "workers": {pod: {"role": role, **read_worker(text)} for pod, (role, text) in sorted(workers.items())},
        "nodes": {node: {"role": role, "counters": counters} for node, (role, counters) in sorted(nodes.items())},
    }


def _worker_delta(before: Reading | None, after: Reading) -> Reading:
    if before is None:
        return after  # started inside the window
    old_counters, old_buckets = before.get("counters", {}), before.get("buckets", {})
    went_down = any(value < old_counters.get(key, 0.0) for key, value in after["counters"].items()) or any(
        count < old_buckets.get(figure, {}).get(le, 0.0)
        for figure, buckets in after["buckets"].items() for le, count in buckets.items())
    if went_down:
        return after  # the engine restarted: its counters began again from zero
    return {
        "counters": {key: value - old_counters.get(key, 0.0) for key, value in after["counters"].items()},
        "buckets": {figure: {le: count - old_buckets.get(figure, {}).get(le, 0.0) for le, count in buckets.items()}
                    for figure, buckets in after["buckets"].items()},
    }


def _sum(readings: Iterable[Reading], key: str) -> float | None:
    values = [r["counters"][key] for r in readings if key in r["counters"]]
    return sum(values) if values else None


def _quantile_ms(readings: Iterable[Reading], figure: str, q: float) -> float | None:
    merged = histogram.merge(r["buckets"][figure] for r in readings if figure in r["buckets"])
    value = histogram.quantile(q, merged)
    return None if value is None else round(value * 1000.0, 3)


def _added(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else round(sum(values), 3)  # type: ignore[arg-type]


def window(previous: Mapping[str, Any], current: Mapping[str, Any], disaggregated: bool) -> dict[str, Any]:
    """The figures of the window between two snapshots (None where nothing was exported)."""
    seconds = float(current["at"]) - float(previous["at"])
    old_workers = previous.get("workers", {})
    deltas = {pod: (entry["role"], _worker_delta(old_workers.get(pod), entry))
              for pod, entry in current["workers"].items()}
    by_role: dict[str, list[Reading]] = {}
    for role, delta in deltas.values():
        by_role.setdefault(role, []).append(delta)
    everyone = [delta for _, delta in deltas.values()]
    # Disaggregated, a request finishes on decode (prefill runs it to one token first), so decode's
    # counters are the requests and the tokens, and a client's first token waits for both legs: the
    # prefill leg's first token, then decode's (which includes pulling the KV cache). The sum of
    # the two legs' quantiles is an estimate of the client's: exact when slow prefills and slow
    # decode starts coincide, above it otherwise.
    served = by_role.get("decode", []) if disaggregated else everyone
    figures: dict[str, Any] = {
        "seconds": round(seconds, 3),
        "workers": len(deltas),
        "worker_pods_replaced": _replaced(previous, current),
        "requests": _sum(served, "requests"),
        "generation_tokens_per_second": None,
        "itl_p50_ms": _quantile_ms(served, "itl", 0.5),
        "itl_p99_ms": _quantile_ms(served, "itl", 0.99),
    }
    tokens = _sum(served, "generation_tokens")
    if tokens is not None and seconds > 0:
        figures["generation_tokens_per_second"] = round(tokens / seconds, 3)
    for q, name in ((0.5, "ttft_p50_ms"), (0.99, "ttft_p99_ms")):
        if disaggregated:
            figures[name] = _added(_quantile_ms(by_role.get("prefill", []), "ttft", q),
                                   _quantile_ms(by_role.get("decode", []), "ttft", q))
        else:
            figures[name] = _quantile_ms(everyone, "ttft", q)
    if disaggregated:
        transfers, kv_seconds = _sum(everyone, "nixl_transfers"), _sum(everyone, "nixl_seconds")
        figures.update({
            "kv_transfer_bytes": _sum(everyone, "nixl_bytes"),
            "kv_transfer_mean_ms": round(kv_seconds / transfers * 1000.0, 3) if kv_seconds and transfers else None,
            "nixl_failed_transfers": _sum(everyone, "nixl_failed"),
        })
        figures.update(_efa(previous.get("nodes", {}), current.get("nodes", {})))
    return figures


def _replaced(previous: Mapping[str, Any], current: Mapping[str, Any]) -> int | None:
    """Worker pods that went away and came back under another name in the same RayCluster: a pod
    rescheduled (its node drained, lost or replaced). A container restart keeps the pod's name
    (``PodRestarts`` counts those); scaling only adds or only removes pods; a new RayCluster is a
    rollout, not a rescheduling (None)."""
    if previous.get("cluster") != current.get("cluster"):
        return None
    before, after = set(previous.get("workers", {})), set(current["workers"])
    return min(len(after - before), len(before - after))


def _efa(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Each GPU node's EFA bytes in the window: what a prefill node sent, what a decode node received."""
    by_node = {}
    for node, entry in after.items():
        if node not in before:
            continue  # read once: a node that joined in this window is judged from the next one on
        delta = efa.node_delta(before[node]["counters"], entry["counters"])
        by_node[node] = delta["sent_bytes"] if entry["role"] == "prefill" else delta["received_bytes"]
    return {"efa_bytes_by_node": by_node, "min_node_efa_bytes": min(by_node.values()) if by_node else None}


PUBLISHED = {
    "worker_pods_replaced": ("WorkerPodsReplaced", "Count"),
    "requests": ("Requests", "Count"),
    "generation_tokens_per_second": ("GeneratedTokensPerSecond", "Count/Second"),
    "ttft_p50_ms": ("TtftP50", "Milliseconds"),
    "ttft_p99_ms": ("TtftP99", "Milliseconds"),
    "itl_p50_ms": ("ItlP50", "Milliseconds"),
    "itl_p99_ms": ("ItlP99", "Milliseconds"),
    "kv_transfer_bytes": ("KvTransferBytes", "Bytes"),
    "kv_transfer_mean_ms": ("KvTransferTimeMean", "Milliseconds"),
    "nixl_failed_transfers": ("NixlFailedTransfers", "Count"),
    "min_node_efa_bytes": ("MinNodeEfaBytes", "Bytes"),
}
"""Window figure -> (CloudWatch metric, unit); each published only when it has a value."""


def published(figures: Mapping[str, Any]) -> list[tuple[str, float, str]]:
    """(metric, value, unit) of every figure with a value."""
    return [(metric, float(figures[key]), unit) for key, (metric, unit) in PUBLISHED.items()
            if figures.get(key) is not None]
