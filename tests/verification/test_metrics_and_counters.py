"""The Prometheus parser against prometheus_client's own output, and the EFA counter arithmetic."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from ray_llm_eks.base import wire
from ray_llm_eks.verification import efa, metrics


def _exposition(prefix: str) -> str:
    registry = CollectorRegistry()
    sent = Histogram(f"{prefix}nixl_bytes_transferred", "b", ["ReplicaId"], registry=registry, buckets=(1e6, 1e9))
    seconds = Histogram(f"{prefix}nixl_xfer_time_seconds", "s", ["ReplicaId"], registry=registry, buckets=(0.1, 1))
    failed = Counter(f"{prefix}nixl_num_failed_transfers", "f", ["ReplicaId"], registry=registry)
    for replica, size in (("a", 1_000_000), ("b", 3_000_000)):
        sent.labels(replica).observe(size)
        seconds.labels(replica).observe(0.02)
    failed.labels("a").inc(2)
    return generate_latest(registry).decode()


@pytest.mark.parametrize("prefix", ["ray_vllm_", "vllm_"])
def test_nixl_totals_sum_every_replica(prefix):
    # Ray 2.58's OpenTelemetry exporter names counters with _total, histograms with _sum/_count.
    totals = metrics.NixlTotals.of(_exposition(prefix))
    assert totals.bytes_sum == 4_000_000 and totals.transfers == 2
    assert totals.xfer_seconds_sum == pytest.approx(0.04) and totals.xfer_count == 2
    assert totals.failed == 2


def test_vllm_colon_names_are_read_too():
    text = 'vllm:nixl_bytes_transferred_sum{engine="0"} 512.0\nvllm:nixl_num_failed_transfers_total 0\n'
    totals = metrics.NixlTotals.of(text)
    assert (totals.bytes_sum, totals.failed) == (512.0, 0.0)


def test_absent_metrics_stay_none():
    totals = metrics.NixlTotals.of("# HELP up\nup 1\n")
    assert not totals.present
    assert metrics.nixl_delta(totals, totals)["bytes_transferred"] is None


def test_labels_with_escapes_parse():
    [sample] = metrics.parse('x{a="q\\"uote",b="2"} 3 1700000000\n')
    assert sample.labels == (("a", 'q"uote'), ("b", "2")) and sample.value == 3


def _tree(root, device: str, **counters: int) -> None:
    folder = root / "class" / "infiniband" / device / "ports" / "1" / "hw_counters"
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in counters.items():
        (folder / name).write_text(f"{value}\n")


def test_counters_are_read_per_device(tmp_path):
    _tree(tmp_path, "rdmap0s6", tx_bytes=10, rx_bytes=20, rdma_read_bytes=0)
    _tree(tmp_path, "rdmap1s6", tx_bytes=1)
    assert efa.read_counters(tmp_path) == {"rdmap0s6": {"rdma_read_bytes": 0, "rx_bytes": 20, "tx_bytes": 10},
                                           "rdmap1s6": {"tx_bytes": 1}}
    assert efa.read_counters(tmp_path / "no-efa") == {}


def test_a_p5_node_sums_the_counters_of_all_32_devices(tmp_path):
    # p5.48xlarge with an EFA interface on every card: 32 devices under /sys/class/infiniband,
    # one rail each in NIXL. The node's bytes are the sum over every device, each device judged
    # by the larger of its plain and RDMA counters (P-series pulls the cache with RDMA reads).
    for card in range(32):
        _tree(tmp_path, f"rdmap{card + 79}s0", tx_bytes=0, rx_bytes=0, rdma_read_bytes=0, rdma_read_resp_bytes=0)
    before = efa.read_counters(tmp_path)
    assert len(before) == 32
    for card in range(32):
        # Every device served 1 MB of RDMA reads; the first 4 also sent 10 bytes of plain traffic.
        _tree(tmp_path, f"rdmap{card + 79}s0", tx_bytes=10 if card < 4 else 0, rx_bytes=0,
              rdma_read_bytes=2_000_000, rdma_read_resp_bytes=1_000_000)
    delta = efa.node_delta(before, efa.read_counters(tmp_path))
    assert delta["devices"] == sorted(f"rdmap{card + 79}s0" for card in range(32))
    assert delta["sent_bytes"] == 32 * 1_000_000
    assert delta["received_bytes"] == 32 * 2_000_000
    assert len(delta["by_device"]) == 32


def test_a_device_that_moved_nothing_still_counts_in_its_nodes_sum():
    # Four devices (p4d, g6e.48xlarge), traffic on two of them: the node's figure is their sum.
    before = {f"rdmap{i}s0": {"tx_bytes": 0, "rx_bytes": 0} for i in range(4)}
    after = {**before, "rdmap0s0": {"tx_bytes": 700, "rx_bytes": 1}, "rdmap3s0": {"tx_bytes": 300, "rx_bytes": 2}}
    delta = efa.node_delta(before, after)
    assert (delta["sent_bytes"], delta["received_bytes"]) == (1000, 3)


def test_g_series_moves_bytes_in_tx_rx_not_rdma():
    before = {"rdmap0s6": {"tx_bytes": 100, "rx_bytes": 100, "rdma_read_bytes": 0, "rdma_read_resp_bytes": 0}}
    after = {"rdmap0s6": {"tx_bytes": 5100, "rx_bytes": 200, "rdma_read_bytes": 0, "rdma_read_resp_bytes": 0}}
    delta = efa.node_delta(before, after)
    assert (delta["sent_bytes"], delta["received_bytes"]) == (5000, 100)


def test_rdma_reads_count_where_tx_does_not():
    # A P-series decode node pulling the cache with RDMA reads: rdma_read_bytes on the reader,
    # rdma_read_resp_bytes on the node that served them.
    delta = efa.node_delta({"d": {"rdma_read_bytes": 0, "rx_bytes": 0}}, {"d": {"rdma_read_bytes": 7000, "rx_bytes": 10}})
    assert delta["received_bytes"] == 7000


def test_a_reset_counter_counts_from_zero():
    delta = efa.node_delta({"d": {"tx_bytes": 9000}}, {"d": {"tx_bytes": 300}})
    assert delta["sent_bytes"] == 300


def test_the_counter_server_serves_the_tree(tmp_path):
    _tree(tmp_path, "rdmap0s6", tx_bytes=42)
    server = efa.make_server(str(tmp_path), 0, "127.0.0.1")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        port = server.server_address[1]
        body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/counters", timeout=5).read())
        assert body["counters"] == {"rdmap0s6": {"tx_bytes": 42}}
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read() == b"ok"
    finally:
        server.shutdown()
        server.server_close()


def _ray_counter(values: dict[tuple[str, str], float]) -> str:
    """A ``ray.util.metrics.Counter`` as Ray 2.58.1's OpenCensus proxy exports it: a
    ``CounterMetricFamily`` (prometheus_client adds ``_total``) and, for bug compatibility, the same
    values again as a ``GaugeMetricFamily`` under the bare name (``ray/_private/metrics_agent.py:396-440``)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    name = f"ray_{wire.PD_REQUESTS_METRIC}"
    keys = ["Component", "SessionName", "WorkerId", wire.PD_PATH_TAG]

    class Collector:
        def collect(self):
            counter = CounterMetricFamily(name, "requests", labels=keys)
            gauge = GaugeMetricFamily(name, f"(DEPRECATED, use {name}_total metric instead) requests", labels=keys)
            for (worker, path), value in values.items():
                for family in (counter, gauge):
                    family.add_metric(["core_worker", "session_1", worker, path], value)
            return [counter, gauge]

    registry = CollectorRegistry()
    registry.register(Collector())
    return generate_latest(registry).decode()


def test_the_requests_per_path_are_read_once_per_series_from_rays_counter():
    text = _ray_counter({("w1", wire.PD_LOCAL): 2, ("w1", wire.PD_REMOTE): 5, ("w2", wire.PD_REMOTE): 1})
    assert f"{metrics.PD_COUNTER}{{" in text and "ray_rayllmeks_pd_requests{" in text  # both spellings exported
    paths = metrics.path_series(metrics.parse(text))
    assert {path: sum(series.values()) for path, series in paths.items()} == {wire.PD_LOCAL: 2, wire.PD_REMOTE: 6}
    assert len(paths[wire.PD_REMOTE]) == 2  # one series per worker, each its own delta


def test_a_path_without_a_request_reads_empty_and_no_counter_reads_none():
    assert metrics.path_series(metrics.parse(_ray_counter({("w1", wire.PD_REMOTE): 3}))) == {
        wire.PD_LOCAL: {}, wire.PD_REMOTE: {'[["Component","core_worker"],["SessionName","session_1"],'
                                            '["WorkerId","w1"],["prefill","remote"]]': 3.0}}
    assert metrics.path_series(metrics.parse(_exposition("ray_vllm_"))) is None
