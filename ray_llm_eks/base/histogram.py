"""Quantiles of a Prometheus histogram from its bucket counts, merged across series.

AIPerf scrapes each ``/metrics`` endpoint it is given and exports, per series, the bucket
counts accumulated during the profiling phase (``server_metrics_export.json``:
``metrics[name].series[i].buckets``, cumulative ``le`` -> count). Several workers export the same
histogram, each as its own series; buckets add across series, percentiles do not, so the series
are merged first. The quantile follows PromQL's ``histogram_quantile``: find the bucket holding
the rank, interpolate linearly inside it (from 0 for the first bucket), and return the largest
finite bound when the rank falls in ``+Inf``.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping


def _bound(le: str) -> float:
    return math.inf if le.strip().lower() in ("+inf", "inf") else float(le)


def merge(series_buckets: Iterable[Mapping[str, float]]) -> dict[float, float]:
    """Add cumulative bucket counts of several series with the same bucket layout."""
    merged: dict[float, float] = {}
    for buckets in series_buckets:
        for le, count in buckets.items():
            bound = _bound(le)
            merged[bound] = merged.get(bound, 0.0) + float(count)
    return merged


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The ``q`` quantile (0 < q < 1) of cumulative buckets; ``None`` with no observation."""
    if not 0 < q < 1:
        raise ValueError(f"q must be between 0 and 1; got {q}")
    bounds = sorted(buckets)
    if not bounds or math.isinf(bounds[0]) and len(bounds) == 1:
        return None
    total = buckets[bounds[-1]] if math.isinf(bounds[-1]) else max(buckets.values())
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                finite = [b for b in bounds if not math.isinf(b)]
                return finite[-1] if finite else None
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return None
