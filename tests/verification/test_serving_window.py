"""The window between two continuous verification runs: counters and histogram buckets subtracted,
quantiles of the window alone, restarts and new pods counted from zero, the EFA minimum per node.

The metrics text is produced by ``prometheus_client`` under the names Ray gives vLLM's metrics.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from ray_llm_eks.base import wire
from ray_llm_eks.verification import serving_window
from ray_llm_eks.verification.serving_window import published, window

TTFT_BUCKETS = (0.02, 0.04, 0.06, 0.1, 0.5, 1.0, 5.0)


class Worker:
    """One worker's metrics endpoint."""

    def __init__(self, *, both_itl_names: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.ttft = Histogram("ray_vllm_time_to_first_token_seconds", "", ["model_name"], registry=self.registry,
                              buckets=TTFT_BUCKETS)
        self.itl = Histogram("ray_vllm_inter_token_latency_seconds", "", ["model_name"], registry=self.registry,
                             buckets=(0.01, 0.02, 0.05))
        # vLLM still emits the superseded name beside its replacement, with the same buckets.
        self.old_itl = Histogram("ray_vllm_time_per_output_token_seconds", "", ["model_name"], registry=self.registry,
                                 buckets=(0.01, 0.02, 0.05)) if both_itl_names else None
        self.success = Counter("ray_vllm_request_success", "", ["model_name", "finished_reason"],
                               registry=self.registry)
        self.tokens = Counter("ray_vllm_generation_tokens", "", ["model_name"], registry=self.registry)
        self.nixl_bytes = Histogram("ray_vllm_nixl_bytes_transferred", "", registry=self.registry, buckets=(1e6, 1e9))
        self.nixl_time = Histogram("ray_vllm_nixl_xfer_time_seconds", "", registry=self.registry, buckets=(0.01, 1))
        self.failed = Counter("ray_vllm_nixl_num_failed_transfers", "", registry=self.registry)

    def serve(self, ttft: float, tokens: int = 4, itl: float = 0.015, kv_bytes: float = 0.0,
              reason: str = "stop") -> None:
        self.ttft.labels("m").observe(ttft)
        for _ in range(tokens - 1):
            self.itl.labels("m").observe(itl)
            if self.old_itl:
                self.old_itl.labels("m").observe(itl)
        self.success.labels("m", reason).inc()
        self.tokens.labels("m").inc(tokens)
        if kv_bytes:
            self.nixl_bytes.observe(kv_bytes)
            self.nixl_time.observe(0.02)

    @property
    def text(self) -> str:
        return generate_latest(self.registry).decode()


def snapshot(workers: dict, nodes: dict, at: float, cluster: str = "", created: dict | None = None,
             carried: dict | None = None) -> dict:
    """The module's snapshot, every pod created at time 0 unless ``created`` says otherwise."""
    return serving_window.snapshot({pod: (role, text, (created or {}).get(pod, 0.0))
                                    for pod, (role, text) in workers.items()}, nodes, at=at, cluster=cluster,
                                   carried=carried)


def _efa(sent: int, received: int) -> dict:
    return {"rdmap0s6": {"tx_bytes": sent, "rx_bytes": received}}


def test_a_windows_quantiles_are_the_windows_alone():
    """Slow requests before the previous run do not leak into this window's p99."""
    worker = Worker()
    for _ in range(50):
        worker.serve(ttft=3.0)  # before the previous run
    before = snapshot({"w1": ("decode", worker.text)}, {}, at=1000.0)
    for _ in range(10):
        worker.serve(ttft=0.03)
    after = snapshot({"w1": ("decode", worker.text)}, {}, at=1900.0)
    figures = window(before, after, disaggregated=False)
    assert figures["seconds"] == 900.0 and figures["requests"] == 10
    # 10 observations in (0.02, 0.04]: PromQL's interpolation puts p50 at 0.03 and p99 at 0.0398.
    assert figures["ttft_p50_ms"] == pytest.approx(30.0)
    assert figures["ttft_p99_ms"] == pytest.approx(39.8)
    assert figures["generation_tokens_per_second"] == pytest.approx(40 / 900, abs=1e-3)
    assert figures["itl_p50_ms"] == pytest.approx(15.0)  # 30 gaps in (0.01, 0.02]


def test_disaggregated_requests_are_decodes_and_ttft_adds_both_legs():
    prefill, decode = Worker(), Worker()
    before = snapshot({"p": ("prefill", prefill.text), "d": ("decode", decode.text)}, {}, at=0.0)
    for _ in range(8):
        prefill.serve(ttft=0.05, tokens=1, reason="length")  # prefill runs each request to one token
        decode.serve(ttft=0.03, kv_bytes=2e6)
    after = snapshot({"p": ("prefill", prefill.text), "d": ("decode", decode.text)}, {}, at=60.0)
    figures = window(before, after, disaggregated=True)
    assert figures["requests"] == 8  # not 16: a request passes both legs
    # prefill p50 0.05 (in (0.04, 0.06]) + decode p50 0.03 (in (0.02, 0.04]).
    assert figures["ttft_p50_ms"] == pytest.approx(50.0 + 30.0)
    assert figures["ttft_p99_ms"] == pytest.approx(59.8 + 39.8)
    assert figures["kv_transfer_bytes"] == pytest.approx(16e6)
    assert figures["kv_transfer_mean_ms"] == pytest.approx(20.0)
    assert figures["nixl_failed_transfers"] == 0


def test_a_restarted_engine_and_a_new_pod_count_from_zero():
    old = Worker()
    for _ in range(100):
        old.serve(ttft=0.03)
    before = snapshot({"w1": ("decode", old.text)}, {}, at=0.0)
    restarted, added = Worker(), Worker()  # w1's engine restarted; w2 appeared in the window
    for _ in range(3):
        restarted.serve(ttft=0.03)
    for _ in range(2):
        added.serve(ttft=0.03)
    after = snapshot({"w1": ("decode", restarted.text), "w2": ("decode", added.text)}, {}, at=60.0,
                     created={"w2": 30.0})  # w2 was created inside the window
    figures = window(before, after, disaggregated=False)
    assert figures["requests"] == 5 and figures["workers"] == 2
    assert figures["ttft_p99_ms"] == pytest.approx(39.8)


def test_the_superseded_itl_name_is_not_counted_twice():
    worker = Worker(both_itl_names=True)
    before = snapshot({"w": ("decode", worker.text)}, {}, at=0.0)
    worker.serve(ttft=0.03, tokens=5, itl=0.015)
    reading = serving_window.read_worker(worker.text)
    (series,) = reading["buckets"]["itl"].values()
    assert series["+Inf"] == 4
    figures = window(before, snapshot({"w": ("decode", worker.text)}, {}, at=1.0), disaggregated=False)
    assert figures["itl_p50_ms"] == pytest.approx(15.0)


def test_a_window_without_requests_has_no_latency():
    worker = Worker()
    worker.serve(ttft=0.03)
    same = snapshot({"w": ("decode", worker.text)}, {}, at=0.0)
    figures = window(same, {**same, "at": 60.0}, disaggregated=False)
    assert figures["requests"] == 0 and figures["ttft_p99_ms"] is None and figures["itl_p50_ms"] is None
    names = [name for name, _, _ in published(figures)]
    assert "Requests" in names and "TtftP99" not in names  # nothing invented for an idle window


def test_each_gpu_nodes_efa_bytes_and_their_minimum():
    """A healthy pair cannot hide a broken one: the least a node moved is its own figure."""
    worker = Worker()
    nodes_before = {"p1": ("prefill", _efa(1000, 0)), "p2": ("prefill", _efa(1000, 0)),
                    "d1": ("decode", _efa(0, 1000))}
    nodes_after = {"p1": ("prefill", _efa(9_000_000, 50)), "p2": ("prefill", _efa(1200, 0)),
                   "d1": ("decode", _efa(0, 9_001_000)), "d2": ("decode", _efa(0, 5_000_000))}
    before = snapshot({"w": ("decode", worker.text)}, nodes_before, at=0.0)
    after = snapshot({"w": ("decode", worker.text)}, nodes_after, at=60.0)
    figures = window(before, after, disaggregated=True)
    # Prefill nodes are judged by what they sent, decode nodes by what they received; d2 was read
    # once (it joined in the window) and waits for the next one.
    assert figures["efa_bytes_by_node"] == {"p1": 8_999_000, "p2": 200, "d1": 9_000_000}
    assert figures["min_node_efa_bytes"] == 200


def test_each_node_sums_all_its_efa_devices_and_the_minimum_stays_per_node():
    """Multi-card nodes (p4d: 4 EFA devices): a node's figure is the sum over its devices, and the
    minimum is taken over nodes, so a node whose devices together moved little is still the minimum."""
    def four(values: tuple[int, int, int, int], key: str) -> dict:
        return {f"rdmap{i}s0": {"tx_bytes": 0, "rx_bytes": 0, key: v} for i, v in enumerate(values)}

    worker = Worker()
    zero = (0, 0, 0, 0)
    nodes_before = {"p1": ("prefill", four(zero, "tx_bytes")), "d1": ("decode", four(zero, "rx_bytes")),
                    "d2": ("decode", four(zero, "rx_bytes"))}
    nodes_after = {"p1": ("prefill", four((100, 200, 300, 400), "tx_bytes")),
                   "d1": ("decode", four((250, 250, 250, 250), "rx_bytes")),
                   "d2": ("decode", four((0, 0, 0, 40), "rx_bytes"))}
    figures = window(snapshot({"w": ("decode", worker.text)}, nodes_before, at=0.0),
                     snapshot({"w": ("decode", worker.text)}, nodes_after, at=60.0), disaggregated=True)
    assert figures["efa_bytes_by_node"] == {"p1": 1000, "d1": 1000, "d2": 40}
    assert figures["min_node_efa_bytes"] == 40


def test_colocated_reports_no_kv_figures():
    worker = Worker()
    before = snapshot({"w": ("colocated", worker.text)}, {}, at=0.0)
    worker.serve(ttft=0.03)
    figures = window(before, snapshot({"w": ("colocated", worker.text)}, {}, at=1.0), disaggregated=False)
    assert not {"kv_transfer_bytes", "min_node_efa_bytes", "nixl_failed_transfers"} & set(figures)


def test_every_published_metric_has_a_unit_cloudwatch_accepts():
    # PutMetricData's StandardUnit values (botocore's CloudWatch service model).
    import botocore.session

    model = botocore.session.get_session().get_service_model("cloudwatch")
    units = set(model.shape_for("StandardUnit").enum)
    assert {unit for _, unit in wire.SERVING_METRICS.values()} <= units


def test_a_rescheduled_pod_is_counted_a_scale_up_or_a_rollout_is_not():
    text = Worker().text
    base = snapshot({"c-decode-a": ("decode", text), "c-decode-b": ("decode", text)}, {}, at=0.0, cluster="c")
    moved = snapshot({"c-decode-a": ("decode", text), "c-decode-z": ("decode", text)}, {}, at=60.0, cluster="c")
    grown = snapshot({"c-decode-a": ("decode", text), "c-decode-b": ("decode", text), "c-decode-c": ("decode", text)},
                     {}, at=60.0, cluster="c")
    rolled = snapshot({"d-decode-x": ("decode", text), "d-decode-y": ("decode", text)}, {}, at=60.0, cluster="d")
    assert window(base, moved, disaggregated=False)["worker_pods_replaced"] == 1
    assert window(base, grown, disaggregated=False)["worker_pods_replaced"] == 0
    assert window(base, rolled, disaggregated=False)["worker_pods_replaced"] is None


class Replicas:
    """One pod running two replicas: Ray labels each replica's series with its ``ReplicaId``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.success = Counter("ray_vllm_request_success", "", ["ReplicaId"], registry=self.registry)
        self.ttft = Histogram("ray_vllm_time_to_first_token_seconds", "", ["ReplicaId"], registry=self.registry,
                              buckets=TTFT_BUCKETS)

    def serve(self, replica: str, n: int, ttft: float) -> None:
        for _ in range(n):
            self.success.labels(replica).inc()
            self.ttft.labels(replica).observe(ttft)

    @property
    def text(self) -> str:
        return generate_latest(self.registry).decode()


def test_one_replica_restarting_resets_only_its_own_series():
    """A pod runs several replicas; one restarting must not count the others' whole history."""
    pod = Replicas()
    pod.serve("a", 10_000, ttft=4.0)
    pod.serve("b", 5, ttft=0.03)
    before = snapshot({"w": ("decode", pod.text)}, {}, at=0.0)
    restarted = Replicas()  # replica a restarted (its series began again), b went on
    restarted.serve("a", 4, ttft=0.03)
    restarted.serve("b", 5 + 6, ttft=0.03)
    figures = window(before, snapshot({"w": ("decode", restarted.text)}, {}, at=60.0), disaggregated=False)
    assert figures["requests"] == 4 + 6
    assert figures["ttft_p99_ms"] == pytest.approx(39.8)  # none of a's 4 s history


def test_a_counter_ray_exports_twice_is_read_once():
    """Ray's OpenCensus path exports each counter as ``X_total`` and as the deprecated gauge ``X``."""
    text = "ray_vllm_request_success_total{ReplicaId=\"a\"} 7.0\nray_vllm_request_success{ReplicaId=\"a\"} 7.0\n"
    (series,) = serving_window.read_worker(text)["counters"]["requests"].values()
    assert series == 7.0


def test_a_pod_that_existed_but_was_not_read_is_left_out_and_an_unreadable_one_keeps_its_reading():
    old, late = Worker(), Worker()
    for _ in range(500):
        late.serve(ttft=3.0)  # its history before the previous reading, which missed it
    before = snapshot({"w1": ("decode", old.text)}, {}, at=100.0)
    old.serve(ttft=0.03)
    late.serve(ttft=0.03)
    after = snapshot({"w1": ("decode", old.text), "w2": ("decode", late.text)}, {}, at=200.0,
                     created={"w2": 50.0})  # created before the previous reading
    figures = window(before, after, disaggregated=False)
    assert figures["requests"] == 1 and figures["workers_skipped"] == ["w2"]
    # w1 cannot be read in the next run: its earlier reading is carried, and the run after that
    # counts its traffic of both windows once.
    carried = snapshot({"w2": ("decode", late.text)}, {}, at=300.0, created={"w2": 50.0},
                       carried={"w1": after["workers"]["w1"]})
    assert window(after, carried, disaggregated=False)["requests"] == 0
    old.serve(ttft=0.03)
    old.serve(ttft=0.03)
    final = snapshot({"w1": ("decode", old.text), "w2": ("decode", late.text)}, {}, at=400.0, created={"w2": 50.0})
    assert window(carried, final, disaggregated=False)["requests"] == 2


def test_the_p99_floor_is_the_lower_edge_of_its_bucket():
    """Three probes at 1.05 s interpolate to a p99 of 2485 ms in vLLM's 1-2.5 s bucket; the floor
    (what the alarm watches) says only what is certain: at least 1000 ms."""
    buckets = {0.5: 0.0, 1.0: 0.0, 2.5: 3.0, float("inf"): 3.0}
    from ray_llm_eks.base.histogram import quantile

    assert quantile(0.99, buckets) == pytest.approx(2.485)
    assert serving_window.quantile_floor(0.99, buckets) == 1.0
    assert serving_window.quantile_floor(0.99, {1.0: 1.0, float("inf"): 3.0}) == 1.0  # rank in +Inf
    assert serving_window.quantile_floor(0.99, {1.0: 0.0, float("inf"): 0.0}) is None


def test_the_disaggregated_floor_is_the_larger_legs():
    prefill, decode = Worker(), Worker()
    before = snapshot({"p": ("prefill", prefill.text), "d": ("decode", decode.text)}, {}, at=0.0)
    for _ in range(10):
        prefill.serve(ttft=0.7, tokens=1)  # in (0.5, 1.0]
        decode.serve(ttft=0.05)  # in (0.04, 0.06]
    figures = window(before, snapshot({"p": ("prefill", prefill.text), "d": ("decode", decode.text)}, {}, at=9.0),
                     disaggregated=True)
    assert figures["ttft_p99_floor_ms"] == 500.0


def test_replacements_are_counted_per_role():
    """Prefill scaling in while decode scales out is no replacement."""
    text = Worker().text
    base = snapshot({"p1": ("prefill", text), "p2": ("prefill", text), "d1": ("decode", text)}, {}, at=0.0, cluster="c")
    rebalanced = snapshot({"p1": ("prefill", text), "d1": ("decode", text), "d2": ("decode", text)}, {}, at=60.0,
                          cluster="c")
    assert window(base, rebalanced, disaggregated=False)["worker_pods_replaced"] == 0


# --- Ray Serve LLM 2.58's shape, as the twin showed it (docs/twin.md) ----------------------------------------

RAY_LABELS = ("Component", "NodeAddress", "ReplicaId", "SessionName", "Version", "WorkerId", "engine", "model_name")


def ray_labels(replica: str) -> dict[str, str]:
    return {"Component": "core_worker", "NodeAddress": "10.0.1.12", "ReplicaId": replica,
            "SessionName": "session_2026-11-30_21-00-00_000000_1", "Version": "2.58.0",
            "WorkerId": replica.encode().hex().ljust(56, "0"), "engine": "0", "model_name": "m"}


class RayPod:
    """A worker pod's metrics port as Ray exports vLLM's metrics: labelled (a series appears with its
    first observation), NIXL's failure counters absent until they count, a replaced replica frozen."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.success = Counter("ray_vllm_request_success", "", [*RAY_LABELS, "finished_reason"], registry=r)
        self.tokens = Counter("ray_vllm_generation_tokens", "", RAY_LABELS, registry=r)
        self.ttft = Histogram("ray_vllm_time_to_first_token_seconds", "", RAY_LABELS, registry=r, buckets=TTFT_BUCKETS)
        self.nixl_bytes = Histogram("ray_vllm_nixl_bytes_transferred", "", RAY_LABELS, registry=r, buckets=(1e6, 1e9))
        self.nixl_time = Histogram("ray_vllm_nixl_xfer_time_seconds", "", RAY_LABELS, registry=r, buckets=(0.01, 1))
        self.failed = Counter("ray_vllm_nixl_num_failed_transfers", "", RAY_LABELS, registry=r)
        self.notifications = Counter("ray_vllm_nixl_num_failed_notifications", "", RAY_LABELS, registry=r)
        self.expired = Counter("ray_vllm_nixl_num_kv_expired_reqs", "", RAY_LABELS, registry=r)

    def serve(self, replica: str, n: int = 1, ttft: float = 0.03, kv_bytes: float = 0.0) -> None:
        labels = ray_labels(replica)
        for _ in range(n):
            self.success.labels(**labels, finished_reason="stop").inc()
            self.tokens.labels(**labels).inc(4)
            self.ttft.labels(**labels).observe(ttft)
            if kv_bytes:
                self.nixl_bytes.labels(**labels).observe(kv_bytes)
                self.nixl_time.labels(**labels).observe(0.02)

    @property
    def text(self) -> str:
        return generate_latest(self.registry).decode()


def test_ray_exports_no_failure_counter_before_the_first_failure():
    decode = RayPod()
    decode.serve("d1", kv_bytes=2e6)
    assert "ray_vllm_nixl_num_failed_transfers_total{" not in decode.text
    assert "nixl_failed" not in serving_window.read_worker(decode.text)["counters"]


def test_the_first_failed_transfer_in_a_window_counts_on_a_pod_read_before():
    """The counter's series appears with its first count, on a pod whose previous reading had none:
    it counts from zero (where Prometheus' increase would skip a new series' first value)."""
    prefill, decode = RayPod(), RayPod()
    prefill.serve("p1")
    decode.serve("d1", kv_bytes=2e6)
    before = snapshot({"p": ("prefill", prefill.text), "d": ("decode", decode.text)}, {}, at=0.0)
    decode.serve("d1", n=2, kv_bytes=2e6)
    decode.failed.labels(**ray_labels("d1")).inc()
    decode.notifications.labels(**ray_labels("d1")).inc(3)
    prefill.expired.labels(**ray_labels("p1")).inc(2)  # counted on prefill (vLLM: "tracked on the P instance")
    figures = window(before, snapshot({"p": ("prefill", prefill.text), "d": ("decode", decode.text)}, {}, at=60.0),
                     disaggregated=True)
    assert figures["nixl_failed_transfers"] == 1
    assert (figures["nixl_failed_notifications"], figures["nixl_kv_expired_reqs"]) == (3, 2)
    assert ("NixlFailedTransfers", 1.0, "Count") in published(figures)
    # Reported, not published: no alarm or metric of their own (docs/observability.md).
    assert {name for name, _, _ in published(figures)} & {"NixlFailedNotifications", "NixlKvExpiredReqs"} == set()


def test_no_failure_counter_anywhere_is_zero_failures():
    """Ray exports none of them while zero, so a disaggregated window whose workers were read and
    export none of them saw no failure (published 0, not left out)."""
    prefill, decode = RayPod(), RayPod()
    before = snapshot({"p": ("prefill", prefill.text), "d": ("decode", decode.text)}, {}, at=0.0)
    prefill.serve("p1")
    decode.serve("d1", kv_bytes=2e6)
    figures = window(before, snapshot({"p": ("prefill", prefill.text), "d": ("decode", decode.text)}, {}, at=60.0),
                     disaggregated=True)
    assert (figures["nixl_failed_transfers"], figures["nixl_failed_notifications"],
            figures["nixl_kv_expired_reqs"]) == (0, 0, 0)
    assert ("NixlFailedTransfers", 0.0, "Count") in published(figures)
    assert figures["kv_transfer_bytes"] == 2e6  # decode's alone: prefill exports no NIXL series, and that is no gap


def test_a_new_pod_with_a_failure_is_still_judged_by_when_it_was_created():
    """The rule for pods is unchanged: one read for the first time counts from zero only if it was
    created inside the window; one that existed but was not read then is left out."""
    known, late, fresh = RayPod(), RayPod(), RayPod()
    before = snapshot({"d1": ("decode", known.text)}, {}, at=100.0)
    for pod, replica in ((known, "a"), (late, "b"), (fresh, "c")):
        pod.serve(replica, kv_bytes=2e6)
        pod.failed.labels(**ray_labels(replica)).inc()
    after = snapshot({"d1": ("decode", known.text), "d2": ("decode", late.text), "d3": ("decode", fresh.text)}, {},
                     at=200.0, created={"d2": 50.0, "d3": 150.0})
    figures = window(before, after, disaggregated=True)
    assert figures["workers_skipped"] == ["d2"]
    assert figures["nixl_failed_transfers"] == 2 and figures["requests"] == 2


def test_a_replaced_replicas_frozen_series_do_not_double_the_window():
    """After a Serve redeploy Ray keeps exporting the replaced replica's series, frozen, beside the
    new replica's: every figure is the window's traffic, none an absolute total."""
    decode = RayPod()
    decode.serve("old", n=50, ttft=4.0, kv_bytes=8e6)
    decode.failed.labels(**ray_labels("old")).inc(5)
    before = snapshot({"d": ("decode", decode.text)}, {}, at=0.0)
    decode.serve("new", n=10, ttft=0.03, kv_bytes=2e6)  # the redeploy: "old" is frozen from here on
    text = decode.text
    assert text.count('ReplicaId="old"') and text.count('ReplicaId="new"')  # both exported
    figures = window(before, snapshot({"d": ("decode", text)}, {}, at=60.0), disaggregated=True)
    assert figures["requests"] == 10
    assert figures["generation_tokens_per_second"] == pytest.approx(40 / 60, abs=1e-3)
    assert figures["kv_transfer_bytes"] == 10 * 2e6 and figures["kv_transfer_mean_ms"] == pytest.approx(20.0)
    assert figures["nixl_failed_transfers"] == 0
    assert figures["ttft_p99_floor_ms"] == 20.0  # decode's 0.03 s in (0.02, 0.04]: none of the old replica's 4 s


def test_a_conditional_window_counts_each_path_and_a_path_not_yet_exported_took_none():
    """Ray exports a path's series from its first request on (``ray.util.metrics.Counter``): a decode
    worker read twice that never prefilled a prompt itself took 0 local requests, not an unknown number."""
    decode = Worker()
    paths = Counter(f"ray_{wire.PD_REQUESTS_METRIC}", "", ["WorkerId", wire.PD_PATH_TAG], registry=decode.registry)
    decode.serve(ttft=0.03)
    paths.labels("w", wire.PD_REMOTE).inc()
    before = snapshot({"d": ("decode", decode.text)}, {}, at=1000.0)
    for _ in range(3):
        decode.serve(ttft=0.03)
        paths.labels("w", wire.PD_REMOTE).inc()
    after = snapshot({"d": ("decode", decode.text)}, {}, at=1300.0)
    figures = window(before, after, disaggregated=True, conditional=True)
    assert (figures["local_prefill_requests"], figures["remote_prefill_requests"], figures["requests"]) == (0.0, 3.0, 3)
    assert "local_prefill_requests" not in window(before, after, disaggregated=True)  # no threshold: as before
