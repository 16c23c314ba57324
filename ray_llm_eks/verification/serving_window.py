"""What the deployment served between two continuous verification runs, from the workers' own metrics.

Each run of continuous verification reads every Ray worker's Prometheus endpoint and every GPU
node's EFA counters (it does so for its probes anyway), keeps that reading in a ConfigMap, and
subtracts the previous run's. The difference is the window's traffic: requests, tokens, the
latency histograms' bucket counts, the NIXL figures, each node's EFA bytes and, with
``disaggregation.min_prompt_tokens``, the requests that took each path (prefilled on decode, or
on the prefill leg with a KV transfer). Publishing
percentiles computed here, rather than letting the CloudWatch agent scrape the workers, is what
keeps the histograms: the agent's Prometheus pipeline publishes counters, gauges and summaries,
not histogram buckets (docs/observability.md, "Why continuous verification publishes latency").

vLLM's names (0.26, ``vllm/v1/metrics/loggers.py``): histograms ``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds`` (older releases: ``vllm:time_per_output_token_seconds``, also
still emitted beside its replacement with the same buckets, so only one of the two is read),
counters ``vllm:request_success_total`` and ``vllm:generation_tokens_total``; Ray renames them
``ray_vllm_...`` (see :mod:`.metrics`).

The window includes the previous run's own probe requests (a handful of short chats), since the
reading is taken before each run's probes. Each series is subtracted from its own previous value:
one that went down (a restarted replica) counts from zero, as Prometheus' ``increase`` does. One
that first appears on a pod read before also counts from zero, where ``increase`` would skip its
first value: under Ray Serve LLM a series first appears either with a replica that started inside
the window, or with a counter's first count (``*_num_failed_transfers``, ``*_failed_notifications``
and ``*_kv_expired_reqs`` are not exported while zero, so the first failed transfer is the
series' appearance). A replaced replica's series stays exported, frozen, beside its successor's:
it moves nothing, and no figure here is an absolute total. NIXL's series live on decode (which
pulls the KV cache); prefill exports none, and that is no gap. On a disaggregated deployment, a
failure counter no pod exports reads 0. A pod that first appears counts from zero only if it was
created after the previous reading; one that existed but was not read then is left out of this
window (its share is unknown), and a pod that cannot be read now keeps its earlier reading, so
the next window counts its traffic once. A node read only once is left out of the EFA minimum.

Standard library only: it runs in the cluster.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Callable, Iterable, Mapping

from . import efa, metrics
from .shared import histogram, wire
CLOCK_SKEW_SECONDS = 5.0
"""Allowed between a pod's creation stamp (the API server's clock) and a reading's (the run's)."""

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
    "nixl_failed_notifications": (metrics.FAILED_NOTIFICATIONS, ""),
    "nixl_kv_expired": (metrics.KV_EXPIRED, ""),
}
PATH_COUNTERS = {f"{path}_prefill_requests": path for path in metrics.PATHS}
"""Requests per path of the conditional decode server (``disaggregation.min_prompt_tokens``), from
its :data:`.metrics.PD_COUNTER` (:func:`.metrics.path_series`): window figures
``local_prefill_requests`` and ``remote_prefill_requests``."""
ABSENT_WHILE_ZERO = ("nixl_failed", "nixl_failed_notifications", "nixl_kv_expired")
"""Counters Ray Serve LLM exports only once they count: on a disaggregated deployment whose workers
were read, a window in which no pod exports one saw none."""

Reading = dict[str, Any]
"""One worker's series: ``{"counters": {key: {series: value}}, "buckets": {figure: {series: {le: count}}}}``,
a series being its labels (``le`` aside) as sorted JSON. Kept per series, not per pod: a pod runs
several replicas (each its own ``ReplicaId`` series), and one replica restarting must reset only
its own counts."""


def _series(labels: tuple[tuple[str, str], ...]) -> str:
    return json.dumps(sorted((k, v) for k, v in labels if k != "le"), separators=(",", ":"))


def read_worker(text: str) -> Reading:
    """The window figures' raw material from one ``/metrics`` body, per series.

    :class:`.metrics.Invalid` when a series read carries a value that is not a count, or a bucket
    bound (``le``) that is neither a finite number nor ``+Inf``."""
    samples = metrics.parse(text)
    counters = {key: found for key, (metric, suffix) in COUNTERS.items()
                if (found := metrics.series(samples, metric, suffix))}
    paths = metrics.path_series(samples) or {}
    counters.update({key: paths[path] for key, path in PATH_COUNTERS.items() if paths.get(path)})
    buckets: dict[str, dict[str, dict[str, float]]] = {}
    for figure, candidates in HISTOGRAMS.items():
        for metric in candidates:
            name = metrics.exported_name(samples, metric, "_bucket")
            found: dict[str, dict[str, float]] = {}
            for sample in samples:
                le = dict(sample.labels).get("le")
                if sample.name == name and le is not None:
                    key = "+Inf" if le.strip().lower() in ("+inf", "inf") else repr(_bound(le))
                    found.setdefault(_series(sample.labels), {})[key] = metrics.checked(sample)
            if found:
                buckets[figure] = found
                break
    return {"counters": counters, "buckets": buckets}


def _bound(le: str) -> float:
    try:
        bound = float(le)
    except ValueError:
        bound = math.nan
    if not math.isfinite(bound):
        raise metrics.Invalid(f"a bucket bound le={le!r:.40} is not a number")
    return bound


def snapshot(workers: Mapping[str, tuple[str, str, float]], nodes: Mapping[str, tuple[str, efa.Counters]],
             at: float | None = None, cluster: str = "",
             carried: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A run's reading: ``workers`` pod -> (role, /metrics text, creation time), ``nodes`` node ->
    (role, EFA counters), of the RayService's active RayCluster ``cluster``. ``carried``: earlier
    entries of pods whose metrics could not be read this time, kept as they were, so their
    traffic counts in the next window instead of being lost or counted twice."""
    readings = {pod: {"role": role, "created": created, **read_worker(text)}
                for pod, (role, text, created) in sorted(workers.items())}
    for pod, entry in (carried or {}).items():
        readings.setdefault(pod, entry)
    return {
        "at": time.time() if at is None else at,
        "cluster": cluster,
        "workers": readings,
        "nodes": {node: {"role": role, "counters": counters} for node, (role, counters) in sorted(nodes.items())},
    }


def _counter_delta(before: Mapping[str, float], after: Mapping[str, float]) -> float:
    total = 0.0
    for series, value in after.items():
        old = before.get(series)
        total += value if old is None or value < old else value - old  # new or restarted: from zero
    return total


def _bucket_delta(before: Mapping[str, Mapping[str, float]], after: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    merged: dict[str, float] = {}
    for series, counts in after.items():
        old = before.get(series) or {}
        restarted = any(count < old.get(le, 0.0) for le, count in counts.items())
        for le, count in counts.items():
            merged[le] = merged.get(le, 0.0) + (count if restarted else count - old.get(le, 0.0))
    return merged


def _worker_delta(before: Reading | None, after: Reading) -> Reading:
    """Counters and buckets moved between two readings of one pod, summed over its series."""
    before = before or {"counters": {}, "buckets": {}}
    return {
        "counters": {key: _counter_delta(before["counters"].get(key, {}), series)
                     for key, series in after["counters"].items()},
        "buckets": {figure: _bucket_delta(before["buckets"].get(figure, {}), series)
                    for figure, series in after["buckets"].items()},
    }


def _sum(readings: Iterable[Reading], key: str) -> float | None:
    values = [r["counters"][key] for r in readings if key in r["counters"]]
    return sum(values) if values else None


def _merged(readings: Iterable[Reading], figure: str) -> dict[float, float]:
    return histogram.merge(r["buckets"][figure] for r in readings if figure in r["buckets"])


def _ms(estimate: Callable[[float, Mapping[float, float]], float | None], readings: Iterable[Reading],
        figure: str, q: float) -> float | None:
    """``estimate`` (a quantile, or its bucket's floor) of the readings' merged buckets, in ms."""
    value = estimate(q, _merged(readings, figure))
    return None if value is None else round(value * 1000.0, 3)


def _quantile_ms(readings: Iterable[Reading], figure: str, q: float) -> float | None:
    return _ms(histogram.quantile, readings, figure, q)


def quantile_floor(q: float, buckets: Mapping[float, float]) -> float | None:
    """The lower bound of the bucket holding the ``q`` quantile: the quantile is certainly above
    it (the largest finite bound when the rank falls in ``+Inf``); None with no observation."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if not bounds or total <= 0:
        return None
    rank, lower = q * total, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            return lower
        lower = bound
    return lower


def _added(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else round(sum(values), 3)  # type: ignore[arg-type]


def window(previous: Mapping[str, Any], current: Mapping[str, Any], disaggregated: bool,
           conditional: bool = False) -> dict[str, Any]:
    """The figures of the window between two snapshots (None where nothing was exported).

    ``conditional`` (``disaggregation.min_prompt_tokens`` set): also the requests that took each path,
    as the decode workers counted them; of these, only the remote ones moved KV bytes."""
    seconds = float(current["at"]) - float(previous["at"])
    old_workers = previous.get("workers", {})
    deltas, skipped = {}, []
    for pod, entry in current["workers"].items():
        if pod in old_workers:
            deltas[pod] = (entry["role"], _worker_delta(old_workers[pod], entry))
        elif float(entry.get("created") or 0.0) >= float(previous["at"]) - CLOCK_SKEW_SECONDS:
            deltas[pod] = (entry["role"], _worker_delta(None, entry))  # started inside the window
        else:
            skipped.append(pod)  # existed before but was not read then: its share of the window is unknown
    by_role: dict[str, list[Reading]] = {}
    for role, delta in deltas.values():
        by_role.setdefault(role, []).append(delta)
    everyone = [delta for _, delta in deltas.values()]
    # Disaggregated, a request finishes on decode (prefill runs it to one token first), so decode's
    # counters are the requests and the tokens, and a client's first token waits for both legs: the
    # prefill leg's first token, then decode's (which includes pulling the KV cache). vLLM measures
    # each leg apart, so the client's quantile is not in the metrics: the sum of the two legs'
    # quantiles is shown as an estimate (neither bound), and the alarm uses what is certain: the
    # client's first token comes after each leg's, so its p99 is at least the larger leg floor.
    served = by_role.get("decode", []) if disaggregated else everyone
    figures: dict[str, Any] = {
        "seconds": round(seconds, 3),
        "workers": len(deltas),
        "workers_skipped": skipped,
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
    if not disaggregated:
        figures["ttft_p99_floor_ms"] = _ms(quantile_floor, everyone, "ttft", 0.99)
    else:
        floors = [f for f in (_ms(quantile_floor, by_role.get(role, []), "ttft", 0.99) for role in ("prefill", "decode"))
                  if f is not None]
        figures["ttft_p99_floor_ms"] = max(floors) if floors else None
        transfers, kv_seconds = _sum(everyone, "nixl_transfers"), _sum(everyone, "nixl_seconds")
        failures = {key: _sum(everyone, key) for key in ABSENT_WHILE_ZERO}
        if any(delta["counters"] or delta["buckets"] for delta in everyone):
            # Workers that export vLLM's metrics, none of them a failure counter: nothing failed.
            failures = {key: 0.0 if value is None else value for key, value in failures.items()}
        figures.update({
            "kv_transfer_bytes": _sum(everyone, "nixl_bytes"),
            "kv_transfer_mean_ms": round(kv_seconds / transfers * 1000.0, 3) if kv_seconds and transfers else None,
            "nixl_failed_transfers": failures["nixl_failed"],
            "nixl_failed_notifications": failures["nixl_failed_notifications"],
            "nixl_kv_expired_reqs": failures["nixl_kv_expired"],
        })
        figures.update(_efa(previous.get("nodes", {}), current.get("nodes", {})))
        if conditional:
            decode = by_role.get("decode", [])
            # Ray exports a path's series from its first request on: decode workers that were read and
            # export vLLM's metrics, with no series of a path, took no request on it.
            read = any(delta["counters"] or delta["buckets"] for delta in decode)
            figures.update({key: 0.0 if value is None and read else value
                            for key, value in ((key, _sum(decode, key)) for key in PATH_COUNTERS)})
    # The current reading's values are counts (metrics.checked), but the previous one comes back from a
    # ConfigMap: huge values there can still overflow a difference or a sum.
    infinite = sorted(key for key, value in figures.items() if isinstance(value, float) and not math.isfinite(value))
    if infinite:
        raise ValueError(f"the window's {', '.join(infinite)} is not finite")
    return figures


def _replaced(previous: Mapping[str, Any], current: Mapping[str, Any]) -> int | None:
    """Worker pods that went away and came back under another name in the same RayCluster and
    role: a pod rescheduled (its node drained, lost or replaced), or, with the Ray autoscaler v2
    (KubeRay then sets ``restartPolicy: Never``), a crashed one. A container restart otherwise
    keeps the pod's name (``PodRestarts`` counts those); scaling a role only adds or only
    removes its pods; a new RayCluster is a rollout, not a rescheduling (None)."""
    if previous.get("cluster") != current.get("cluster"):
        return None
    replaced = 0
    for role in {entry.get("role") for entry in [*previous.get("workers", {}).values(), *current["workers"].values()]}:
        before = {p for p, e in previous.get("workers", {}).items() if e.get("role") == role}
        after = {p for p, e in current["workers"].items() if e.get("role") == role}
        replaced += min(len(after - before), len(before - after))
    return replaced


def _efa(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Each worker node's EFA bytes in the window: what a prefill node sent, what a decode node
    received. Only nodes that run a worker pod of the cluster are read (a node Cluster Autoscaler
    is about to remove, or a surge node of a node group update, carries none)."""
    by_node = {}
    for node, entry in after.items():
        if node not in before:
            continue  # read once: a node that joined in this window is judged from the next one on
        delta = efa.node_delta(before[node]["counters"], entry["counters"])
        by_node[node] = delta["sent_bytes"] if entry["role"] == "prefill" else delta["received_bytes"]
    return {"efa_bytes_by_node": by_node, "min_node_efa_bytes": min(by_node.values()) if by_node else None}




def published(figures: Mapping[str, Any]) -> list[tuple[str, float, str]]:
    """(metric, value, unit) of every figure with a value (``wire.SERVING_METRICS``)."""
    return [(metric, float(figures[key]), unit) for key, (metric, unit) in wire.SERVING_METRICS.items()
            if figures.get(key) is not None]
