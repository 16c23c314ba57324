"""The KV-transfer figures in the workers' Prometheus metrics, and how they moved across the probes.

vLLM 0.26 records NIXL transfers (``distributed/kv_transfer/kv_connector/v1/nixl/stats.py``):
histograms ``vllm:nixl_xfer_time_seconds`` and ``vllm:nixl_bytes_transferred``, counters
``vllm:nixl_num_failed_transfers`` (a KV read that failed), ``vllm:nixl_num_failed_notifications``
(decode read the KV cache but could not tell prefill, whose blocks then stay held until their
lease expires) and ``vllm:nixl_num_kv_expired_reqs`` (counted on prefill: a request whose KV
blocks were freed at the lease's end because no notification came). Under Ray Serve LLM the names
reach each Ray node's metrics agent (KubeRay's ``metrics`` port, 8080) with the prefix ``ray_``
and ``:`` turned into ``_``: ``ray_vllm_nixl_bytes_transferred_sum``. Both spellings are read,
and a counter with or without the ``_total`` suffix, so the same code reads a plain vLLM server too.

What Ray Serve LLM 2.58 really exports (shown by the twin: docs/twin.md), and how each is read here:

- **Absent while zero.** The three counters are not exported until they first count (a plain
  vLLM exports them at 0): a reading before the probes never has them. A series absent from an
  endpoint's earlier reading therefore counts from zero, and on an endpoint that exports vLLM's
  metrics at all, an absent failure counter reads as 0, not as unknown.
- **Decode only.** Decode pulls the KV cache, so the NIXL histograms appear only on decode
  workers, after their first transfer; prefill exports none (its ``kv_expired_reqs`` aside).
- **Frozen series.** After a Serve redeploy the replaced replicas' series stay exported, frozen,
  beside the new replicas' (each replica has its own ``ReplicaId``): an endpoint's absolute total
  then counts old replicas too, so only per-series deltas are used, never totals.

The parser reads the Prometheus text exposition format 0.0.4 (one sample a line:
``name{label="value",...} value [timestamp]``); the tests check it against ``prometheus_client``'s
own output. Standard library only: it also runs inside the cluster.

**Only counts.** Every series read here is a counter, a histogram's ``_sum``, ``_count`` or bucket:
a number in [0, 2**63). The format allows ``NaN`` and ``+Inf`` as sample values, and ``1e309``
parses as infinity; a value of a read series outside that range raises :class:`Invalid` rather than
being skipped (a ``NaN`` failure counter skipped would read as "no failures") or summed (infinity
minus infinity is ``NaN``, and ``NaN < threshold`` is False). The bound also keeps every sum and
difference of such values finite. Series the gate does not read may carry anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from .shared import wire

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

PREFIXES = ("ray_vllm_", "vllm:", "vllm_")
BYTES = "nixl_bytes_transferred"
XFER_TIME = "nixl_xfer_time_seconds"
FAILED = "nixl_num_failed_transfers"
FAILED_NOTIFICATIONS = "nixl_num_failed_notifications"
KV_EXPIRED = "nixl_num_kv_expired_reqs"

FIGURES: dict[str, tuple[str, str]] = {
    "bytes_transferred": (BYTES, "_sum"),
    "transfers": (BYTES, "_count"),
    "xfer_time_seconds": (XFER_TIME, "_sum"),
    "xfer_count": (XFER_TIME, "_count"),
    "failed_transfers": (FAILED, ""),
    "failed_notifications": (FAILED_NOTIFICATIONS, ""),
    "kv_expired_reqs": (KV_EXPIRED, ""),
}
"""Each NIXL figure of the gate's report: (metric, suffix)."""
MAX_VALUE = float(1 << 63)
ZERO_WHEN_ABSENT = ("failed_transfers", "failed_notifications", "kv_expired_reqs")
"""Counters Ray Serve LLM exports only once they count: absent on an endpoint that exports vLLM's
metrics means 0."""


class Invalid(ValueError):
    """A series the gate reads carries a value that is not a count (:func:`checked`)."""


def checked(sample: Sample) -> float:
    """``sample``'s value, if it is a finite number in [0, :data:`MAX_VALUE`); :class:`Invalid` otherwise."""
    if not 0.0 <= sample.value < MAX_VALUE:  # False for NaN too
        raise Invalid(f"{sample.name} is {sample.value!r}, not a count")
    return sample.value


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


def exported_name(samples: Iterable[Sample], metric: str, suffix: str = "",
                  prefixes: tuple[str, ...] = PREFIXES) -> str | None:
    """The one sample name ``metric`` + ``suffix`` is exported under here: the first known prefix
    present, and for a counter (no suffix) ``_total`` before the bare name. Ray's OpenCensus
    exporter also exports each counter as a gauge under the bare name, with the same value
    (``RAY_EXPORT_COUNTER_AS_GAUGE``, on by default: "DEPRECATED, use <name>_total"), so adding
    both would count it twice."""
    present = {s.name for s in samples}
    for prefix in prefixes:
        candidates = [f"{prefix}{metric}_total", f"{prefix}{metric}"] if suffix == "" else [f"{prefix}{metric}{suffix}"]
        for name in candidates:
            if name in present:
                return name
    return None


def total(samples: Iterable[Sample], metric: str, suffix: str = "") -> float | None:
    """Sum of ``metric`` + ``suffix`` over every label set, under its one exported name; None if absent.

    An absolute figure: after a Serve redeploy it counts the replaced replicas' frozen series too.
    Compare two readings with :func:`series_delta` of :func:`series` instead."""
    found = series(samples, metric, suffix)
    return sum(found.values()) if found else None


def series_key(labels: tuple[tuple[str, str], ...]) -> str:
    """One series' identity: its labels but ``le``, sorted, as compact JSON."""
    return json.dumps(sorted((k, v) for k, v in labels if k != "le"), separators=(",", ":"))


def series(samples: Iterable[Sample], metric: str, suffix: str = "",
           prefixes: tuple[str, ...] = PREFIXES) -> dict[str, float]:
    """``metric`` + ``suffix`` per label set (:func:`series_key`), under its one exported name;
    empty when the endpoint does not export it."""
    samples = list(samples)
    name = exported_name(samples, metric, suffix, prefixes)
    found: dict[str, float] = {}
    for sample in samples:
        if sample.name == name:
            key = series_key(sample.labels)
            found[key] = found.get(key, 0.0) + checked(sample)
    return found


def series_delta(before: Mapping[str, float], after: Mapping[str, float]) -> float:
    """How much a counter moved between two readings of one endpoint, series by series.

    A series that went down (its replica restarted) counts from zero; so does one absent before (a
    replica that started in between, or a counter Ray exports only once it counts); one absent
    after (a replica gone) moved nothing; a frozen one (a replaced replica, still exported) moved 0."""
    moved = 0.0
    for key, value in after.items():
        old = before.get(key)
        moved += value if old is None or value < old else value - old
    return moved


PD_PREFIXES = ("ray_",)
"""Ray's Prometheus namespace for a ``ray.util.metrics`` metric (``NAMESPACE = "ray"``,
``ray/_private/telemetry/open_telemetry_metric_recorder.py:21``@2.58.1), such as the conditional
decode server's :data:`wire.PD_REQUESTS_METRIC`."""
PD_COUNTER = f"{PD_PREFIXES[0]}{wire.PD_REQUESTS_METRIC}_total"
"""The name the gate's report gives it: ``ray_rayllmeks_pd_requests_total``. Ray exports a
``Counter`` with ``_total`` (and, with ``RAY_EXPORT_COUNTER_AS_GAUGE`` on, the same value again as
a gauge under the bare name: ``ray/util/metrics.py`` ``Counter``, ``ray/_private/metrics_agent.py:419-433``
@2.58.1), which :func:`exported_name` reads once."""
PATHS = (wire.PD_LOCAL, wire.PD_REMOTE)


def path_series(samples: Iterable[Sample]) -> dict[str, dict[str, float]] | None:
    """The conditional decode server's requests per path (its ``prefill`` tag), each per series
    (:func:`series_key`); None when the endpoint does not export the counter. Ray exports a series
    only once it counts (``ray.util.metrics.Counter``: the tag set's first ``inc``), so a path
    absent here took no request since the replica started."""
    found = series(samples, wire.PD_REQUESTS_METRIC, "", PD_PREFIXES)
    if not found:
        return None
    paths: dict[str, dict[str, float]] = {path: {} for path in PATHS}
    for key, value in found.items():
        path = dict(json.loads(key)).get(wire.PD_PATH_TAG, "")
        paths.setdefault(path, {})[key] = value
    return paths


def exports_vllm(samples: Iterable[Sample]) -> bool:
    """Whether an endpoint exports any of vLLM's metrics (under any known prefix)."""
    return any(s.name.startswith(PREFIXES) for s in samples)


@dataclass(frozen=True)
class NixlTotals:
    """One reading of one metrics endpoint: each NIXL figure per series (a figure missing from
    ``series``: not exported there), and whether the endpoint exports vLLM's metrics at all."""

    series: Mapping[str, Mapping[str, float]]
    vllm: bool = False

    @classmethod
    def of(cls, text: str) -> NixlTotals:
        samples = parse(text)
        found = {figure: series(samples, metric, suffix) for figure, (metric, suffix) in FIGURES.items()}
        return cls(series={figure: values for figure, values in found.items() if values}, vllm=exports_vllm(samples))

    def total(self, figure: str) -> float | None:
        """The absolute figure (frozen series included: for display, never for a verdict)."""
        values = self.series.get(figure)
        return sum(values.values()) if values else None

    @property
    def bytes_sum(self) -> float | None:
        return self.total("bytes_transferred")

    @property
    def transfers(self) -> float | None:
        return self.total("transfers")

    @property
    def xfer_seconds_sum(self) -> float | None:
        return self.total("xfer_time_seconds")

    @property
    def xfer_count(self) -> float | None:
        return self.total("xfer_count")

    @property
    def failed(self) -> float | None:
        return self.total("failed_transfers")

    @property
    def present(self) -> bool:
        """Whether any NIXL figure is exported here (on a disaggregated deployment: a decode worker
        after its first transfer, or a worker that counted a failure)."""
        return bool(self.series)

    @property
    def transfers_exported(self) -> bool:
        """Whether NIXL's transfer histograms are exported here (decode, after its first transfer)."""
        return any(figure in self.series for figure in ("bytes_transferred", "transfers", "xfer_time_seconds"))


def nixl_delta(before: NixlTotals, after: NixlTotals) -> dict[str, float | None]:
    """What moved between two readings of the same endpoint, series by series (None: not exported).

    The failure counters read 0 where they are absent from an endpoint that exports vLLM's metrics:
    Ray Serve LLM exports them only once they count."""
    delta: dict[str, float | None] = {}
    for figure in FIGURES:
        values = after.series.get(figure)
        if values:
            delta[figure] = series_delta(before.series.get(figure, {}), values)
        else:
            delta[figure] = 0.0 if figure in ZERO_WHEN_ABSENT and (after.vllm or before.vllm) else None
    seconds, count = delta["xfer_time_seconds"], delta["xfer_count"]
    delta["mean_xfer_time_ms"] = seconds / count * 1000.0 if seconds is not None and count else None
    return delta


def sum_deltas(deltas: Iterable[Mapping[str, float | None]]) -> dict[str, float | None]:
    """The deployment's figures: every worker's deltas added up (absent everywhere stays None)."""
    result: dict[str, float | None] = dict.fromkeys(FIGURES)
    for delta in deltas:
        for key in FIGURES:
            if delta.get(key) is not None:
                result[key] = (result[key] or 0.0) + float(delta[key])  # type: ignore[arg-type]
    seconds, count = result["xfer_time_seconds"], result["xfer_count"]
    result["mean_xfer_time_ms"] = seconds / count * 1000.0 if seconds is not None and count else None
    return result
