"""What the serving nodes did during one bench level: EFA bytes per node, GPU utilization and memory.

Two sources, each read over the level's window (from just before AIPerf starts the level to just
after it exits), each optional:

- **EFA bytes** from the gate's EFA counter reader on each GPU node (``GET :9475/counters``, the
  ``efa-counters`` DaemonSet; on the local twin the same reader serves the node veth's bytes). Read
  once before and once after the level; the bytes a node sent and received are the gate's own rule
  (:func:`efa.node_delta`: the larger of the plain and the RDMA counters, a counter that went down
  counts from zero), so the bench and the gate read the fabric alike.
- **GPU utilization and memory** from NVIDIA's DCGM exporter on each GPU node (Prometheus text):
  ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_FB_USED`` and ``DCGM_FI_DEV_FB_FREE`` (MiB), gauges
  in dcgm-exporter's default counter set (``etc/default-counters.csv``). A gauge says nothing about
  the time between two readings, so it is sampled every :data:`GPU_SAMPLE_INTERVAL_S` seconds
  during the level, in a thread beside AIPerf.

A figure whose source was not given, or did not answer, is null, never 0, and ``notes`` says why:
on the twin there is no GPU, and an absent GPU must not read as an idle one.

Nodes are named on the command line (``--efa-counters-url prefill-0=http://...``); the command
line knows each name's role and instance type, and so the node's EFA line rate (``nodes`` and
``line_rate_gbps`` of the settings). Standard library only, like the rest of the bench; the gate's
modules it reads with travel in the bench's ConfigMap (:mod:`.bundle`).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Mapping

try:  # the in-cluster bundle: the gate's modules beside this one (bundle.SHARED)
    from . import efa, metrics, reads  # type: ignore[attr-defined]
except ImportError:  # the repository
    from ..verification import efa, metrics, reads  # type: ignore[no-redef]

EFA_SOURCE = "efa-counters"
INTERFACE_SOURCE = "interface-counters"
"""``efa_source`` when a counter reader served bytes that are not an EFA port's (the local twin's
veth, :data:`EFA_PORT_COUNTERS`): traffic moved, but not over EFA, so ``compare`` does not take it
as the fabric's proof."""
GPU_SOURCE = "dcgm"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
GPU_SAMPLE_INTERVAL_S = 5.0
"""Seconds between two GPU readings during a level: a level of the default 100 requests lasts tens
of seconds, so a few readings each, without loading the exporter."""
READ_TIMEOUT_S = 5.0
"""The bound on one reading (connect and body): a node that does not answer costs the level this,
not its figures."""
GPU_METRICS_LIMIT = reads.Limit("a DCGM exporter page", 4 * reads.MiB)
"""A DCGM exporter page: a few dozen series per GPU, some kB per node."""


def _get(url: str, limit: reads.Limit, timeout_s: float) -> bytes:
    return reads.read(urllib.request.Request(url), limit, timeout_s)


def _why(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:200]


@dataclass(frozen=True)
class GpuReading:
    """One DCGM page of one node: each GPU's utilization, and the node's frame buffer summed over its GPUs."""

    utilization_pct: tuple[float, ...]
    used_mib: float | None
    free_mib: float | None


def parse_dcgm(text: str) -> GpuReading:
    """The three gauges of a DCGM exporter page. ValueError when a value is not a finite number in
    [0, 2**63) (:func:`metrics.checked`), or the page carries none of them (not a DCGM page)."""
    samples = metrics.parse(text)
    found: dict[str, list[float]] = {GPU_UTIL: [], FB_USED: [], FB_FREE: []}
    for sample in samples:
        if sample.name in found:
            found[sample.name].append(metrics.checked(sample))
    if not any(found.values()):
        raise ValueError(f"the page has none of {GPU_UTIL}, {FB_USED}, {FB_FREE}")
    return GpuReading(tuple(found[GPU_UTIL]), sum(found[FB_USED]) if found[FB_USED] else None,
                      sum(found[FB_FREE]) if found[FB_FREE] else None)


class GpuSampler:
    """Reads every node's DCGM page now, then every ``interval_s`` until :meth:`stop`, in a thread."""

    def __init__(self, urls: Mapping[str, str], interval_s: float = GPU_SAMPLE_INTERVAL_S,
                 timeout_s: float = READ_TIMEOUT_S) -> None:
        self.urls = dict(urls)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.readings: dict[str, list[GpuReading]] = {node: [] for node in self.urls}
        self.errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)

    def sample(self) -> None:
        for node, url in self.urls.items():
            try:
                self.readings[node].append(parse_dcgm(_get(url, GPU_METRICS_LIMIT, self.timeout_s).decode("utf-8", "replace")))
            except Exception as error:  # noqa: BLE001 - a node that does not answer has no figure, and says why
                self.errors.setdefault(node, _why(error))

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> GpuSampler:
        if self.urls:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the thread, then one last reading: the level's end is sampled too."""
        if self.urls:
            self._stop.set()
            self._thread.join()
            self.sample()


def read_efa(urls: Mapping[str, str], timeout_s: float = READ_TIMEOUT_S) -> tuple[dict[str, efa.Counters], dict[str, str]]:
    """Each node's EFA counters (:func:`efa.parse_reading`), and why a node has none."""
    readings: dict[str, efa.Counters] = {}
    errors: dict[str, str] = {}
    for node, url in urls.items():
        try:
            readings[node] = efa.parse_reading(_get(url, reads.EFA_COUNTERS, timeout_s))
        except Exception as error:  # noqa: BLE001 - an unreadable node has no figure, and says why
            errors[node] = _why(error)
    return readings, errors


EFA_PORT_COUNTERS = ("send_bytes", "recv_bytes")
"""Counters every EFA port exports (Linux ``drivers/infiniband/hw/efa/efa_verbs.c``,
``EFA_DEFINE_PORT_STATS``) and a network interface's statistics do not have (a veth has ``tx_bytes``,
``rx_bytes``, ``tx_packets``, ``rx_packets``): bytes without them are not EFA's, and an EFA line
rate does not apply to them."""


def is_efa_port(counters: efa.Counters) -> bool:
    return any(name in values for values in counters.values() for name in EFA_PORT_COUNTERS)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def record(window_s: float, *, efa_before: Mapping[str, efa.Counters], efa_after: Mapping[str, efa.Counters],
           gpu: Mapping[str, list[GpuReading]], nodes: Mapping[str, Mapping[str, Any]],
           notes: list[str] | None = None) -> dict[str, Any]:
    """The ``utilization`` entry of one level (docs/benchmark.md, "Utilization").

    ``nodes`` holds every node named on the command line: ``role``, ``instance_type`` and
    ``efa_line_rate_gbps`` (None when the command line did not know them). A node missing from
    ``efa_before`` or ``efa_after`` (not given, or unreadable) has no EFA figure; one with no GPU
    reading has no GPU figure."""
    notes = list(notes or [])
    bytes_per_node: dict[str, dict[str, int]] = {}
    for node in sorted(set(efa_before) & set(efa_after)):
        delta = efa.node_delta(efa_before[node], efa_after[node])
        if not delta["devices"]:
            notes.append(f"{node}: the EFA counter reader reports no EFA device")
            continue
        bytes_per_node[node] = {"sent": int(delta["sent_bytes"]), "received": int(delta["received_bytes"])}
    gbps = {node: max(b["sent"], b["received"]) * 8 / window_s / 1e9 for node, b in bytes_per_node.items()} \
        if window_s > 0 else {}
    line_rates: dict[str, float | None] = {}
    for node in bytes_per_node:
        rate = (nodes.get(node) or {}).get("efa_line_rate_gbps")
        if rate and not is_efa_port(efa_after[node]):
            notes.append(f"{node}: the counters are not an EFA port's (no {' or '.join(EFA_PORT_COUNTERS)}): "
                         f"no line rate (the local twin's veth stands in)")
            rate = None
        line_rates[node] = rate
    shares = [gbps[node] / rate for node, rate in line_rates.items() if rate and node in gbps]

    utilization = [value for readings in gpu.values() for reading in readings for value in reading.utilization_pct]
    used_per_node = [max((r.used_mib for r in readings if r.used_mib is not None), default=None)
                     for readings in gpu.values()]
    used = [value for value in used_per_node if value is not None]
    fractions = [r.used_mib / (r.used_mib + r.free_mib) for readings in gpu.values() for r in readings
                 if r.used_mib is not None and r.free_mib is not None and r.used_mib + r.free_mib > 0]
    has_gpu = bool(utilization or used)
    return {
        "window_s": round(window_s, 3),
        "gpu_source": GPU_SOURCE if has_gpu else None,
        "gpu_utilization_pct": _mean(utilization),
        "gpu_memory_used_mib": max(used) if used else None,
        "gpu_memory_used_fraction": max(fractions) if fractions else None,
        "gpu_samples": sum(len(readings) for readings in gpu.values()) if has_gpu else None,
        "efa_source": (None if not bytes_per_node else EFA_SOURCE
                       if all(is_efa_port(efa_after[node]) for node in bytes_per_node) else INTERFACE_SOURCE),
        "efa_bytes_per_node": bytes_per_node or None,
        "efa_gbps_per_node": gbps or None,
        "efa_line_rate_gbps_per_node": line_rates or None,
        "efa_line_rate_share_max": max(shares) if shares else None,
        "nodes": {node: {"role": (facts or {}).get("role"), "instance_type": (facts or {}).get("instance_type")}
                  for node, facts in sorted(nodes.items())},
        "notes": notes,
    }


@dataclass
class LevelMeter:
    """Reads the EFA counters when entered and when left, and samples the GPUs in between.

    ``with LevelMeter(...) as meter: <run the level>``, then :meth:`record`."""

    efa_urls: Mapping[str, str]
    gpu_urls: Mapping[str, str]
    nodes: Mapping[str, Mapping[str, Any]]
    gpu_interval_s: float = GPU_SAMPLE_INTERVAL_S
    timeout_s: float = READ_TIMEOUT_S
    window_s: float = 0.0
    _before: dict[str, efa.Counters] = field(default_factory=dict)
    _after: dict[str, efa.Counters] = field(default_factory=dict)
    _notes: list[str] = field(default_factory=list)
    _sampler: GpuSampler | None = None
    _started: float = 0.0

    def __enter__(self) -> LevelMeter:
        self._before, errors = read_efa(self.efa_urls, self.timeout_s)
        self._notes += [f"{node}: EFA counters unreadable before the level ({why})" for node, why in errors.items()]
        self._sampler = GpuSampler(self.gpu_urls, self.gpu_interval_s, self.timeout_s).start()
        self._started = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.window_s = time.monotonic() - self._started
        # The counters first: the sampler may be inside a slow reading, which must not widen the
        # EFA window beyond window_s.
        self._after, errors = read_efa({n: u for n, u in self.efa_urls.items() if n in self._before}, self.timeout_s)
        self._notes += [f"{node}: EFA counters unreadable after the level ({why})" for node, why in errors.items()]
        assert self._sampler is not None
        self._sampler.stop()
        self._notes += [f"{node}: GPU metrics unreadable ({why})" for node, why in self._sampler.errors.items()]

    def record(self) -> dict[str, Any]:
        notes = list(self._notes)
        if not self.efa_urls:
            notes.append("no --efa-counters-url: EFA figures not measured")
        if not self.gpu_urls:
            notes.append("no --gpu-metrics-url: GPU figures not measured")
        return record(self.window_s, efa_before=self._before, efa_after=self._after,
                      gpu=self._sampler.readings if self._sampler else {}, nodes=self.nodes, notes=notes)


def absent(window_s: float, nodes: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The entry of a level no meter watched (a summary read again from AIPerf's files): every figure null."""
    return record(window_s, efa_before={}, efa_after={}, gpu={}, nodes=nodes or {},
                  notes=["not measured: the level was summarized from AIPerf's files alone"])
