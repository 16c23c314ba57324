"""The KV-transfer figures in the workers' Prometheus metrics, and how they moved across the probes.

vLLM 0.26 records NIXL transfers (``distributed/kv_transfer/kv_connector/v1/nixl/stats.py``):
histograms ``vllm:nixl_xfer_time_seconds`` and ``vllm:nixl_bytes_transferred``, counter
``vllm:nixl_num_failed_transfers``. Under Ray Serve LLM the names reach each Ray node's metrics
agent (KubeRay's ``metrics`` port, 8080) with the prefix ``ray_`` and ``:`` turned into ``_``:
``ray_vllm_nixl_bytes_transferred_sum``. Both spellings are read, and a counter with or without
the ``_total`` suffix, so the same code reads a plain vLLM server too.

The parser reads the Prometheus text exposition format 0.0.4 (one sample a line:
``name{label="value",...} value [timestamp]``); the tests check it against ``prometheus_client``'s
own output. Standard library only: it also runs inside the cluster.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

PREFIXES = ("ray_vllm_", "vllm:", "vllm_")
BYTES = "nixl_bytes_transferred"
XFER_TIME = "nixl_xfer_time_seconds"
FAILED = "nixl_num_failed_transfers"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def parse(text: str) -> list[Sample]:
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, label_text, value_text = match.groups()
        try:
            value = float(value_text)
        except ValueError:
            continue
        labels = tuple(
            (key, value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
            for key, value in _LABEL.findall(label_text or "")
        )
        samples.append(Sample(name, labels, value))
    return samples


def exported_name(samples: Iterable[Sample], metric: str, suffix: str = "") -> str | None:
    """The one sample name ``metric`` + ``suffix`` is exported under here: the first known prefix
    present, and for a counter (no suffix) ``_total`` before the bare name. Ray's OpenCensus
    exporter also exports each counter as a gauge under the bare name, with the same value
    (``RAY_EXPORT_COUNTER_AS_GAUGE``, on by default: "DEPRECATED, use <name>_total"), so adding
    both would count it twice."""
    present = {s.name for s in samples}
    for prefix in PREFIXES:
        candidates = [f"{prefix}{metric}_total", f"{prefix}{metric}"] if suffix == "" else [f"{prefix}{metric}{suffix}"]
        for name in candidates:
            if name in present:
                return name
    return None


def total(samples: Iterable[Sample], metric: str, suffix: str = "") -> float | None:
    """Sum of ``metric`` + ``suffix`` over every label set, under its one exported name; None if absent."""
    samples = list(samples)
    name = exported_name(samples, metric, suffix)
    found = [s.value for s in samples if s.name == name and not math.isnan(s.value)]
    return sum(found) if found else None


@dataclass(frozen=True)
class NixlTotals:
    """Cumulative NIXL figures of one metrics endpoint (None: the metric is not exported there)."""

    bytes_sum: float | None
    transfers: float | None
    xfer_seconds_sum: float | None
    xfer_count: float | None
    failed: float | None

    @classmethod
    def of(cls, text: str) -> NixlTotals:
        samples = parse(text)
        return cls(
            bytes_sum=total(samples, BYTES, "_sum"),
            transfers=total(samples, BYTES, "_count"),
            xfer_seconds_sum=total(samples, XFER_TIME, "_sum"),
            xfer_count=total(samples, XFER_TIME, "_count"),
            failed=total(samples, FAILED),
        )

    @property
    def present(self) -> bool:
        return any(v is not None for v in (self.bytes_sum, self.transfers, self.xfer_seconds_sum, self.failed))


def _delta(after: float | None, before: float | None) -> float | None:
    if after is None:
        return None
    return after - (before or 0.0)


def nixl_delta(before: NixlTotals, after: NixlTotals) -> dict[str, float | None]:
    """What moved between two scrapes of the same endpoint."""
    xfer_count = _delta(after.xfer_count, before.xfer_count)
    xfer_seconds = _delta(after.xfer_seconds_sum, before.xfer_seconds_sum)
    return {
        "bytes_transferred": _delta(after.bytes_sum, before.bytes_sum),
        "transfers": _delta(after.transfers, before.transfers),
        "xfer_time_seconds": xfer_seconds,
        "xfer_count": xfer_count,
        "mean_xfer_time_ms": (xfer_seconds / xfer_count * 1000.0) if xfer_seconds is not None and xfer_count else None,
        "failed_transfers": _delta(after.failed, before.failed),
    }


def sum_deltas(deltas: Iterable[dict[str, float | None]]) -> dict[str, float | None]:
    """The deployment's figures: every worker's deltas added up (absent everywhere stays None)."""
    keys = ("bytes_transferred", "transfers", "xfer_time_seconds", "xfer_count", "failed_transfers")
    result: dict[str, float | None] = dict.fromkeys(keys)
    for delta in deltas:
        for key in keys:
            if delta.get(key) is not None:
                result[key] = (result[key] or 0.0) + float(delta[key])  # type: ignore[arg-type]
    seconds, count = result["xfer_time_seconds"], result["xfer_count"]
    result["mean_xfer_time_ms"] = seconds / count * 1000.0 if seconds is not None and count else None
    return result
