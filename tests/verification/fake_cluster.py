"""A deployment on loopback, for running the real gate program against real HTTP endpoints.

No Kubernetes API server, EKS node or GPU can run here, so each part the gate talks to is a small
HTTP server on its own loopback address, serving what the real one serves:

- the Kubernetes API (``127.0.0.1``): the RayService rendered by the real chart, pods built from
  its real pod templates (labels and annotations as KubeRay 1.4.0 sets them), nodes with
  allocatable GPU and EFA, pod logs, ConfigMaps (stored with their labels; pods, nodes and
  ConfigMaps listed by ``labelSelector`` as the API server filters them), the RayClusters and
  their reconcile as KubeRay 1.4.0 does it under ``upgradeStrategy: None`` (:class:`FakeKubeRay`),
  and the API server proxy;
- the OpenAI Service and the Ray dashboard's Serve API (``127.0.0.1``);
- each worker pod's Prometheus endpoint (``127.0.0.2``/``127.0.0.3``), exposed with
  ``prometheus_client`` under the names and in the shape Ray Serve LLM 2.58 gives vLLM's NIXL
  metrics (as the twin showed them, docs/twin.md "What the real stack showed that the loopback fakes
  did not"): Ray's labels (``ReplicaId``, ``WorkerId``, ``SessionName``, ...); the
  NIXL histograms on the decode worker only, from its first transfer; the failure counters only
  from their first count; a replaced replica's series left exported, frozen, after a redeploy;
- each GPU node's EFA counter reader (``127.0.0.4``/``127.0.0.5``): the package's own server
  over a fixture sysfs tree.

Serving a completion moves the KV bytes of its prompt (unless the scenario's conditional decode
server prefills it on decode, ``Scenario.pd_threshold``): the fixture counters of the prefill
node (``tx_bytes``) and the decode node (``rx_bytes``) and the decode worker's
``ray_vllm_nixl_bytes_transferred`` grow by the reference model's KV bytes for the prompt
(:func:`kv_bytes_moved`, stated from the model's shape, not computed with the gate's formula or
settings), scaled by the scenario, or by the scenario's own byte counts for each node.
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import yaml
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from ray_llm_eks.base import wire
from ray_llm_eks.verification import bundle, efa

PREFILL_IP, DECODE_IP, PREFILL_NODE_IP, DECODE_NODE_IP = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"
API_SERVER_IPS = ("10.0.32.17", "10.0.96.201")
"""The control plane's interfaces in the VPC, as ``default/kubernetes`` lists them."""
PREFILL_NODE, DECODE_NODE = "ip-10-0-1-11.prefill", "ip-10-0-1-12.decode"
SYSTEM_NODE = "ip-10-0-1-10.system"
RELOAD_LINES = ["(Worker pid=5188) INFO [default_loader.py:430] Loading weights took 2.50 seconds",
                "(EngineCore pid=5149) INFO [core.py:355] init engine (profile, create kv cache, warmup model) took 4.00 s"]
"""What a replacement worker's vLLM prints as its engine starts (tests/verification/fixtures/drill/, the twin's)."""

EFA_LINES = [
    # NIXL 1.3.1's C++ (Abseil) lines: libfabric_topology.cpp:134, libfabric_rail_manager.cpp:232,
    # libfabric_rail.cpp:457; then its Python logger's (src/api/python/logging.py format), _api.py:390
    # and :268. None is vLLM's: the NixlConnector prints neither.
    "I1130 21:03:46.100000     412 libfabric_topology.cpp:134] Discovered 1 EFA devices",
    "I1130 21:03:46.120000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=efa",
    "I1130 21:03:46.121000     412 libfabric_rail.cpp:457] Using provider without FI_HMEM support for rail 0",
    "(ServeReplica:llm:PDDecode pid=412) 2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated",
    "(ServeReplica:llm:PDDecode pid=412) 2026-11-30 21:03:46 NIXL INFO    _api.py:268 Initialized NIXL agent: 3f9c2a",
]
TCP_LINES = [
    "I1130 21:03:46.090100     412 libfabric_topology.cpp:116] TCP devices available globally - "
    "no accelerator-specific mapping required",
    "I1130 21:03:46.090211     412 libfabric_topology.cpp:136] Discovered 1 tcp devices (TCP fallback)",
    "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=tcp",
    "(ServeReplica:llm:PDDecode pid=412) 2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated",
    "(ServeReplica:llm:PDDecode pid=412) 2026-11-30 21:03:46 NIXL INFO    _api.py:268 Initialized NIXL agent: 3f9c2a",
]
"""What a worker logs when libfabric runs on its tcp provider (FI_PROVIDER=tcp, no EFA device)."""

KV_BLOCK_TOKENS = 528
KV_BLOCK_BYTES = KV_BLOCK_TOKENS * 32_768
KV_STATE_BYTES = 51_511_296
KV_BYTES_PER_COMPLETION = KV_BLOCK_BYTES + KV_STATE_BYTES
"""68,812,800 B: what vLLM's NixlConnector moves for one prompt of 2 to 529 tokens of the reference
model, Qwen3.5-9B in bfloat16 (docs/verification.md "Thresholds"): one 528-token block of its 8
full-attention layers at 32,768 B a token (8 x 2 x 4 KV heads x 256 x 2 B; prefill keeps the last
token back, decode recomputes it) and the state of its 24 Gated-DeltaNet layers, 51,511,296 B.
Written out from the model, not read from ``gate.json`` nor computed with ``wire.kv_transfer_bytes``,
so that the gate's prediction is checked against it rather than repeated by it."""


def kv_bytes_moved(prompt_tokens: int) -> int:
    """The reference model's bytes for a prompt: its tokens but the last, in whole blocks, and the state."""
    return -(-(prompt_tokens - 1) // KV_BLOCK_TOKENS) * KV_BLOCK_BYTES + KV_STATE_BYTES

RAY_LABELS = ("Component", "NodeAddress", "ReplicaId", "SessionName", "Version", "WorkerId", "engine", "model_name")
"""The labels Ray Serve LLM's vLLM metrics carry on a Ray node's metrics port (Ray's own tags, the
Serve replica's, and vLLM's ``engine`` and ``model_name``)."""
PD_RAY_LABELS = ("Component", "NodeAddress", "SessionName", "Version", "WorkerId")
"""Ray's own tags on an application's ``ray.util.metrics`` metric (without vLLM's and Serve's)."""


KUBERAY_HASH_ANNOTATION = "ray.io/hash-without-replicas-and-workers-to-delete"
SPEC_HASH_ANNOTATION = "ray-llm-eks/cluster-spec-hash"
CLUSTER_SUFFIXES = ("fghij", "klmno", "pqrst", "uvwxy", "zabcd", "efghi")
"""The random suffixes KubeRay's ``GenerateRayClusterName`` would pick, in order."""


@dataclass
class FakeRayCluster:
    name: str
    uid: str
    spec_hash: str
    """The cluster spec hash of the RayService spec it was built from (on each of its pod templates)."""
    config: dict[str, Any]
    """``rayClusterConfig`` of that spec."""
    reconciles: int = 0
    """Reconciles since KubeRay created it."""
    head_ready_after: int = 1
    """Reconciles until its head pod is Ready (the first cluster of a fake deployment starts ready)."""

    @property
    def head_ready(self) -> bool:
        return self.reconciles >= self.head_ready_after


class FakeKubeRay:
    """KubeRay 1.4.0's RayService reconcile with ``upgradeStrategy: None``, one step per read of the
    RayService (``controllers/ray/rayservice_controller.go`` at v1.4.0):

    - a pending cluster named in the status but missing is created from the current spec
      (``reconcileRayCluster``, lines 510-514), under the same name;
    - a cluster whose spec differs is updated in place only when worker groups were appended at the
      end (``shouldUpdateCluster``, 531-544 and 631-657), which no ray-llm-eks change does: never here;
    - a new pending cluster is named only when neither an active nor a pending cluster exists
      (``shouldPrepareNewCluster``, 689-711: other differences need a zero-downtime strategy), in
      ``calculateStatus`` (274-279), and created at the next reconcile;
    - a pending cluster whose Serve applications run is promoted to active (246-271); until then
      the status keeps naming the active cluster, even a deleted one.
    """

    def __init__(self, service: str, rayservice: dict[str, Any], spec_hash: str) -> None:
        self.service = service
        self.rayservice = rayservice
        self.spec_hash = spec_hash
        self.clusters: dict[str, FakeRayCluster] = {}
        self.active = self._create(f"{service}-abcde", head_ready_after=0).name
        self.pending = ""
        self.pending_apps: dict[str, Any] | None = None
        """``pendingServiceStatus.applicationStatuses`` as last written: KubeRay updates it only once the
        pending cluster's head is ready (its reconcile returns early before, rayservice_controller.go
        :140-141 and :1061-1062), so a recreated pending cluster shows its predecessor's for a while."""
        self.names = iter(CLUSTER_SUFFIXES)
        self.promote_after = 3
        self.never_serving: set[str] = set()
        """Spec hashes whose clusters never serve (their pods cannot start, or Serve fails)."""

    def _create(self, name: str, head_ready_after: int = 1) -> FakeRayCluster:
        uid = f"uid-{name}-{len(self.clusters)}-{time.monotonic_ns() % 100000}"
        config = json.loads(json.dumps(self.rayservice["spec"]["rayClusterConfig"]))
        self.clusters[name] = FakeRayCluster(name, uid, self.spec_hash, config, head_ready_after=head_ready_after)
        return self.clusters[name]

    def reconcile(self) -> None:
        pending = self.clusters.get(self.pending) if self.pending else None
        if self.pending and pending is None:
            self._create(self.pending)  # :510-514
            return
        if pending is not None:
            pending.reconciles += 1
            if pending.reconciles > self.promote_after and pending.spec_hash not in self.never_serving:
                self.active, self.pending, self.pending_apps = pending.name, "", None  # :246-271
            return
        if self.active not in self.clusters:  # :689-711, named in :274-279
            self.pending = f"{self.service}-{next(self.names)}"

    def delete(self, name: str) -> bool:
        return self.clusters.pop(name, None) is not None

    def cluster_object(self, name: str, namespace: str) -> dict[str, Any] | None:
        cluster = self.clusters.get(name)
        if cluster is None:
            return None
        config = json.loads(json.dumps(cluster.config))
        for template in [config["headGroupSpec"]["template"], *(g["template"] for g in config["workerGroupSpecs"])]:
            template.setdefault("metadata", {}).setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = cluster.spec_hash
        return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": config, "metadata": {
            "name": name, "namespace": namespace, "uid": cluster.uid,
            "annotations": {KUBERAY_HASH_ANNOTATION: f"kuberay-{cluster.spec_hash}"}}}


def parse_selector(text: str) -> dict[str, str]:
    """An equality-based label selector as the API server parses it: terms split on commas, each
    ``key=value`` or ``key==value`` (set-based terms and ``!=`` are refused, as nothing here sends them)."""
    terms: dict[str, str] = {}
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        if "!=" in term or "=" not in term:
            raise ValueError(f"not an equality term: {term!r}")
        key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
        terms[key.strip()] = value.strip()
    return terms


def selected(objects: list[dict[str, Any]], query: dict[str, str]) -> list[dict[str, Any]]:
    """The objects whose labels carry every term of the query's ``labelSelector`` (all without one)."""
    wanted = parse_selector(query.get("labelSelector", ""))
    return [o for o in objects if all(((o.get("metadata") or {}).get("labels") or {}).get(k) == v
                                      for k, v in wanted.items())]


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class Scenario:
    """What the fake deployment does; the defaults are a healthy disaggregated deployment."""

    worker_log: list[str] = field(default_factory=lambda: list(EFA_LINES))
    efa_fraction: float = 1.0
    """Share of the prompt's KV bytes (:func:`kv_bytes_moved`) the EFA counters of both nodes move per completion."""
    efa_sent_bytes: int | None = None
    """Bytes the prefill node's EFA device sends per completion (``tx_bytes``); None: ``efa_fraction``'s."""
    efa_received_bytes: int | None = None
    """Bytes the decode node's EFA device receives per completion (``rx_bytes``); None: ``efa_fraction``'s.
    The two differ where other EFA traffic crosses one of the nodes (another peer, another tenant)."""
    nixl_fraction: float = 1.0
    failed_transfers: int = 0
    """Failed NIXL transfers decode counts per completion (the counter appears with the first)."""
    failed_notifications: int = 0
    """Failed NIXL notifications decode counts per completion."""
    kv_expired_reqs: int = 0
    """Requests whose KV prefill frees at its lease's end, per completion (counted on prefill)."""
    completion_status: int = 200
    ready: bool = True
    old_log: list[str] = field(default_factory=list)
    """Lines the previous replicas printed before the current Serve deployment (an in-place redeploy)."""
    serve_states: list[tuple[str, bool]] = field(default_factory=list)
    """What KubeRay reports of the Serve application on successive RayService reads: (status, whether
    KubeRay has observed the current generation); then ``serve_final``."""
    serve_final: tuple[str, bool] = ("RUNNING", True)
    promote_after_polls: int = 3
    """RayService reads after KubeRay creates a pending cluster before it promotes it (until then the
    status still names the active one, even deleted, as in KubeRay 1.4.0)."""
    failing_specs: dict[str, str] = field(default_factory=dict)
    """Cluster spec hash -> how a cluster built from it fails: ``ImagePullBackOff`` (every pod),
    ``Unschedulable`` (the GPU workers), ``InvalidImageName`` (every pod) or ``DEPLOY_FAILED`` (the pods
    run, Serve fails). Such a cluster never serves, so it is never promoted."""
    job_age_seconds: float = 1.0
    job_status: dict = field(default_factory=dict)
    """The gate Job's ``status`` as the API returns it ({}: still running)."""
    usage: bool = True
    """Whether the stream ends with a usage chunk (stream_options.include_usage honoured)."""
    image: str | None = None
    """The image the pods run; default: the deployed spec's."""
    efa_allocatable: str = "1"
    autoscaler_running: bool | None = None
    """KubeRay's autoscaler sidecar in the head pod: running, terminated, or absent (None)."""
    prefill_ttft_seconds: float = 0.05
    decode_ttft_seconds: float = 0.03
    restart_reads: int = 6
    """Pod reads a deleted or evicted Ray pod's replacement takes to be Ready (the kubelet and KubeRay
    at work); the endpoint answers 503 while a role has no Ready pod, as Serve does without a replica."""
    evictions_refused: int = 0
    """Evictions a PodDisruptionBudget refuses (HTTP 429) before it admits one."""
    pd_threshold: int | None = None
    """The conditional decode server's ``min_prompt_tokens`` (``ray_llm_eks.pd.conditional``): a prompt of
    fewer tokens is prefilled on decode (no KV bytes, no NIXL read) and each request counted by path in
    ``ray_rayllmeks_pd_requests_total``. None: Ray's own P/D decode server, every prompt through the
    prefill leg and no such counter."""


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.server.fake.route(self, "GET")  # type: ignore[attr-defined]

    def do_POST(self) -> None:  # noqa: N802
        self.server.fake.route(self, "POST")  # type: ignore[attr-defined]

    def do_DELETE(self) -> None:  # noqa: N802
        self.server.fake.route(self, "DELETE")  # type: ignore[attr-defined]

    def do_PUT(self) -> None:  # noqa: N802
        self.server.fake.route(self, "PUT")  # type: ignore[attr-defined]

    def do_PATCH(self) -> None:  # noqa: N802
        self.server.fake.route(self, "PATCH")  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        return

    def reply(self, status: int, body: bytes | str | dict[str, Any], content_type: str = "application/json") -> None:
        data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeDeployment:
    """Everything the gate reaches, started on loopback; ``settings`` is the gate.json to run with."""

    def __init__(self, tmp: Path, rayservice: dict[str, Any], settings: dict[str, Any], scenario: Scenario) -> None:
        self.tmp = tmp
        self.scenario = scenario
        self.rayservice = rayservice
        self.namespace = settings["namespace"]
        self.name = settings["ray_service"]
        self.hash = settings["cluster_spec_hash"]
        self.settings = settings
        self.deleted: list[str] = []
        self.signals: list[tuple[dict[str, str], bytes]] = []
        self.requests_served = 0
        self.lock = threading.Lock()
        self.kuberay = FakeKubeRay(self.name, rayservice, self.hash)
        self.pod_reads = 0
        self.generation = {"head": 0, "prefill": 0, "decode": 0}
        """Each role's pod incarnation: a delete or an eviction makes the next (a new name and uid)."""
        self.down_until: dict[str, int] = {}
        """Role -> the pod read at which its replacement is Ready (absent: Ready)."""
        self.cordoned: set[str] = set()
        self.replaced_at: dict[str, float] = {}
        """Role -> when its pod was last taken (its replacement's log starts then)."""
        self.evictions: list[tuple[str, int]] = []
        """(pod, HTTP status) of every eviction asked for."""
        self.planted: list[dict[str, Any]] = []
        """Pods someone created by hand with the cluster's labels (no ownerReference to it)."""
        self.deployed_at = time.time() - 30
        self.created_config_maps: list[dict[str, Any]] = []
        self.ray_auth_token: str | None = None
        """Ray token auth on: KubeRay keeps the token in a Secret per RayCluster (served to anyone who asks)."""
        self.secret_reads: list[str] = []
        self.stored_auth_options: dict[str, Any] | None = None
        """``rayClusterConfig.authOptions`` as the API server stored it (None: pruned by an old CRD)."""
        self.dashboard_calls: list[str] = []
        """Every call to the head's dashboard (through the proxy): the gate must make none."""
        self.serve_config_text: str | None = None
        """``serveConfigV2`` as stored; None: the rendered one with the settings' args."""
        self.serve_events = True
        """Whether KubeRay's ``UpdatedServeApplications`` Event for the active cluster is still kept."""
        self.network_policies: dict[str, dict[str, Any]] = {}
        """NetworkPolicies in the namespace now; the proxy forwards only what they admit from the API server."""
        self.policy_history: list[tuple[str, str]] = []
        self.policy_history_bodies: list[dict[str, Any]] = []
        self.policies_created: list[dict[str, Any]] = []
        """Every NetworkPolicy body POSTed, kept after its deletion."""
        self.break_counters_until = 0
        """How many reads of each node's counters fail first (a reader not yet listening)."""
        self.counter_daemon_set: dict[str, Any] | None = {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": wire.efa_counters_name(self.name), "namespace": self.namespace,
                         "uid": f"uid-efa-counters-{time.monotonic_ns() % 100000}"}}
        """The counter readers' DaemonSet as the API returns it (None: not applied); its readers name its uid."""
        self.planted_readers: list[dict[str, Any]] = []
        """Pods someone created with the readers' labels, listed after the DaemonSet's (:meth:`plant_reader`)."""
        self.counter_reads: dict[str, int] = {}
        self.sysfs = {node: tmp / "sysfs" / node for node in (PREFILL_NODE, DECODE_NODE)}
        for root in self.sysfs.values():
            counters = root / "class" / "infiniband" / "rdmap0s6" / "ports" / "1" / "hw_counters"
            counters.mkdir(parents=True)
            for name in ("tx_bytes", "rx_bytes", "send_bytes", "recv_bytes", "rdma_read_bytes", "tx_pkts"):
                (counters / name).write_text("1000\n")
        self.registries = {pod: CollectorRegistry() for pod in ("prefill", "decode")}
        self.replicas = {"prefill": "a1b2c3d4", "decode": "e5f6a7b8"}
        """Each role's Serve replica now (Ray's ``ReplicaId`` label); :meth:`redeploy_replicas` replaces them."""
        # NIXL's metrics as Ray Serve LLM exports them: labelled, so a series exists only once it
        # is observed. Decode pulls the KV cache: the histograms and the transfer and notification
        # failures are decode's; the expired requests are prefill's (vLLM: "tracked on the P instance").
        decode, prefill = self.registries["decode"], self.registries["prefill"]
        self.nixl = {
            "bytes": Histogram("ray_vllm_nixl_bytes_transferred", "bytes", RAY_LABELS, registry=decode,
                               buckets=(1e6, 1e8, 1e9)),
            "seconds": Histogram("ray_vllm_nixl_xfer_time_seconds", "seconds", RAY_LABELS, registry=decode,
                                 buckets=(0.01, 0.1, 1.0)),
            "failed": Counter("ray_vllm_nixl_num_failed_transfers", "failed", RAY_LABELS, registry=decode),
            "notifications": Counter("ray_vllm_nixl_num_failed_notifications", "failed", RAY_LABELS, registry=decode),
            "expired": Counter("ray_vllm_nixl_num_kv_expired_reqs", "expired", RAY_LABELS, registry=prefill),
        }
        # The conditional decode server's ray.util.metrics Counter as Ray exports it: the "ray_" namespace,
        # "_total" (prometheus_client adds it to a Counter, as Ray's exporter does), Ray's own labels and
        # the counter's tag; a path's series appears with its first request (ray/util/metrics.py@2.58.1).
        self.pd_requests = Counter(f"ray_{wire.PD_REQUESTS_METRIC}", "requests by path",
                                   (*PD_RAY_LABELS, wire.PD_PATH_TAG), registry=decode)
        # vLLM's serving metrics under Ray's names, with vLLM's own bucket bounds (a subset).
        self.serving_metrics = {
            pod: {"ttft": Histogram("ray_vllm_time_to_first_token_seconds", "ttft", ["model_name"], registry=r,
                                    buckets=(0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5)),
                  "itl": Histogram("ray_vllm_inter_token_latency_seconds", "itl", ["model_name"], registry=r,
                                   buckets=(0.01, 0.025, 0.05, 0.075, 0.1)),
                  "success": Counter("ray_vllm_request_success", "finished", ["model_name", "finished_reason"],
                                     registry=r),
                  "tokens": Counter("ray_vllm_generation_tokens", "tokens", ["model_name"], registry=r)}
            for pod, r in self.registries.items()
        }
        self.config_map_store: dict[str, dict[str, Any]] = {}
        """ConfigMaps the deploy applied (gate settings, the continuous verification state), by name,
        with their labels; GET, PUT and list by label selector."""
        self.servers: list[ThreadingHTTPServer] = []
        self.api_port = self._serve("127.0.0.1", self.route_api)
        self.metrics_port = free_port(PREFILL_IP)
        for ip, pod in ((PREFILL_IP, "prefill"), (DECODE_IP, "decode")):
            self._serve(ip, lambda h, m, pod=pod: self.route_metrics(h, m, pod), self.metrics_port)
        self.counter_port = free_port(PREFILL_NODE_IP)
        self.counter_backend_port = free_port("127.0.0.1")
        for ip, node in ((PREFILL_NODE_IP, PREFILL_NODE), (DECODE_NODE_IP, DECODE_NODE)):
            # The package's own reader over the node's fixture tree, behind a pass-through that can
            # fail the first reads.
            server = efa.make_server(str(self.sysfs[node]), 0, "127.0.0.1")
            self.servers.append(server)
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
            backend = f"http://127.0.0.1:{server.server_address[1]}"
            self._serve(ip, lambda h, m, node=node, backend=backend: self.route_counters(h, node, backend),
                        self.counter_port)
        self.signal_port = self._serve("127.0.0.1", self.route_signal)
        self.token_file = tmp / "token"
        self.token_file.write_text("test-token\n")

    # --- plumbing --------------------------------------------------------------------------------

    def _serve(self, host: str, route: Callable[[Handler, str], None], port: int = 0,
               tls: ssl.SSLContext | None = None) -> int:
        server = ThreadingHTTPServer((host, port), Handler)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        server.fake = type("Route", (), {"route": staticmethod(route)})  # type: ignore[attr-defined]
        self.servers.append(server)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return int(server.server_address[1])

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def serve_api_over_tls(self, context: ssl.SSLContext) -> str:
        """The same API server on another loopback port, over TLS with ``context``: its URL."""
        return f"https://127.0.0.1:{self._serve('127.0.0.1', self.route_api, tls=context)}"

    @property
    def signal_url(self) -> str:
        return f"http://127.0.0.1:{self.signal_port}/signal?X-Amz-Signature=abc"

    def gate_settings(self, **overrides: Any) -> dict[str, Any]:
        return {
            **self.settings,
            "openai_url": f"{self.api_url}/openai",
            "metrics_port": self.metrics_port,
            "efa_counter_port": self.counter_port,
            **PACE,
            "deadline_seconds": 20,
            "probes": 3,
            "probe_prompt_words": 300,
            **overrides,
        }

    def ray_labels(self, role: str) -> dict[str, str]:
        """The labels of a role's current replica's vLLM metrics, as Ray exports them."""
        replica = self.replicas[role]
        return {"Component": "core_worker", "NodeAddress": PREFILL_NODE_IP if role == "prefill" else DECODE_NODE_IP,
                "ReplicaId": f"{role}-{replica}", "SessionName": "session_2026-11-30_21-00-00_000000_1",
                "Version": "2.58.0", "WorkerId": f"{replica}{'0' * 48}", "engine": "0", "model_name": self.settings["model"]}

    def redeploy_replicas(self) -> None:
        """An in-place Serve redeploy: new replicas, whose series start anew, while Ray's metrics agent
        keeps exporting the replaced replicas' series, frozen (docs/twin.md)."""
        self.replicas = {role: f"{int(replica, 16) + 1:08x}" for role, replica in self.replicas.items()}

    def apply_config_map(self, name: str, labels: dict[str, str], data: dict[str, str],
                         created: float | None = None) -> dict[str, Any]:
        """A ConfigMap as ``kubectl apply`` leaves it: labels, data, a creation stamp and a version."""
        stamp = datetime.datetime.fromtimestamp(time.time() if created is None else created, datetime.timezone.utc)
        self.config_map_store[name] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": name, "namespace": self.namespace, "labels": dict(labels), "resourceVersion": "1",
            "creationTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ")}, "data": dict(data)}
        return self.config_map_store[name]

    def apply_gate_settings(self, settings: dict[str, Any], name: str | None = None, created: float | None = None,
                            labels: dict[str, str] | None = None) -> dict[str, Any]:
        """The gate settings ConfigMap a deploy applies (the chart's labels unless ``labels`` says otherwise)."""
        run = str(settings.get("run_id") or "1a2b3c4d")
        name = name or f"{self.name}-gate-{run}"
        if labels is None:
            labels = {wire.INSTANCE_LABEL: self.name, wire.COMPONENT_LABEL: wire.GATE_SETTINGS_COMPONENT, wire.GATE_RUN_LABEL: run}
        return self.apply_config_map(name, labels, {wire.GATE_SETTINGS_FILE: json.dumps(settings)}, created)

    @property
    def active(self) -> str:
        return self.kuberay.active

    @property
    def pending(self) -> str:
        return self.kuberay.pending

    @property
    def pod_hash(self) -> str:
        """The cluster spec the active cluster's pods were built from."""
        return self.kuberay.clusters[self.active].spec_hash

    @pod_hash.setter
    def pod_hash(self, value: str) -> None:
        self.kuberay.clusters[self.active].spec_hash = value

    def deploy(self, rayservice: dict[str, Any], settings: dict[str, Any]) -> None:
        """A CloudFormation update (or its rollback) applies another RayService spec and gate settings."""
        self.rayservice, self.settings, self.hash = rayservice, settings, settings["cluster_spec_hash"]
        self.kuberay.rayservice, self.kuberay.spec_hash = rayservice, self.hash

    # --- Kubernetes API --------------------------------------------------------------------------

    def _pod(self, cluster: FakeRayCluster, name: str, ip: str, role: str, node: str) -> dict[str, Any]:
        config = cluster.config
        if role == "head":
            template = config["headGroupSpec"]["template"]
        else:
            template = next(g["template"] for g in config["workerGroupSpecs"] if g["groupName"] == role)
        containers = json.loads(json.dumps(template["spec"]["containers"]))
        if self.scenario.image:
            for container in containers:
                container["image"] = self.scenario.image
        labels = {**template["metadata"].get("labels", {}), "ray.io/cluster": cluster.name,
                  "ray.io/group": "headgroup" if role == "head" else role,
                  "ray.io/node-type": "head" if role == "head" else "worker"}
        annotations = {**template["metadata"].get("annotations", {}), SPEC_HASH_ANNOTATION: cluster.spec_hash}
        image = containers[0]["image"]
        statuses = [{"name": containers[0]["name"], "state": {"running": {}},
                     "imageID": f"{image.split('@')[0].split(':')[0]}@sha256:{'cd' * 32}"}]
        if role == "head" and self.scenario.autoscaler_running is not None:
            statuses.append({"name": "autoscaler", "state": {"running": {}} if self.scenario.autoscaler_running
                             else {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}})
        owner = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster.name, "uid": cluster.uid,
                 "controller": True, "blockOwnerDeletion": True}  # raycluster_controller.go@v1.4.0:1055, :1082
        status: dict[str, Any] = {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}],
                                  "containerStatuses": statuses}
        failure = self.scenario.failing_specs.get(cluster.spec_hash)
        if failure == "ImagePullBackOff" and self.pod_reads % 3 == 0:
            failure = "ErrImagePull"  # the kubelet shows it for a while after each failed pull, then backs off
        if role == "head" and not cluster.head_ready and failure is None:
            status = {**status, "conditions": [{"type": "Ready", "status": "False"}]}
        if failure in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName") or (failure == "Unschedulable" and role != "head"):
            status = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
            if failure == "Unschedulable":
                status["conditions"].append({
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                               "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
                               "3 No preemption victims found for incoming pod."})
            else:
                message = {"ImagePullBackOff": f'Back-off pulling image "{image}"',
                           "ErrImagePull": f'failed to pull and unpack image "{image}": not found'}.get(
                    failure, f'Failed to apply default image tag "{image}": couldn\'t parse image name')
                status["containerStatuses"] = [{"name": containers[0]["name"], "ready": False,
                                                "state": {"waiting": {"reason": failure, "message": message}}}]
        return {
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels, "annotations": annotations,
                         "ownerReferences": [owner], "uid": f"{cluster.uid}-{role}"},
            "spec": {"nodeName": node, "containers": containers},
            "status": status,
        }

    def pods(self) -> list[dict[str, Any]]:
        self.pod_reads += 1
        pods = list(self.planted)
        for name in dict.fromkeys([self.active, self.pending]):
            cluster = self.kuberay.clusters.get(name)
            if cluster is None:
                continue
            pods += [self._faulted(self._pod(cluster, self.pod_name(name, role), ip, role, node), role)
                     for role, ip, node in (("head", "127.0.0.9", SYSTEM_NODE), ("prefill", PREFILL_IP, PREFILL_NODE),
                                            ("decode", DECODE_IP, DECODE_NODE))]
        for ip, node in ((PREFILL_NODE_IP, PREFILL_NODE), (DECODE_NODE_IP, DECODE_NODE)):
            pods.append(self.reader_pod(f"{self.name}-efa-counters-{node.rsplit('.', 1)[-1]}", node, ip,
                                        controller_uid=(self.counter_daemon_set or {}).get("metadata", {}).get("uid")))
        return pods + self.planted_readers

    def reader_pod(self, name: str, node: str, ip: str, controller_uid: str | None) -> dict[str, Any]:
        """A pod with the readers' labels; ``controller_uid``: the DaemonSet it names as its controller
        (the DaemonSet controller sets it on the pods it creates; anyone creating a pod may write one)."""
        owners = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True, "blockOwnerDeletion": True,
                   "name": wire.efa_counters_name(self.name), "uid": controller_uid}] if controller_uid else []
        return {"metadata": {"name": name, "namespace": self.namespace, "uid": f"uid-{name}",
                             "labels": dict(self.settings["efa_counter_selector"]), "ownerReferences": owners},
                "spec": {"nodeName": node}, "status": {"phase": "Running", "podIP": ip}}

    def plant_reader(self, name: str, node: str, ip: str, controller_uid: str | None,
                     bytes_per_read: int = 10**12) -> None:
        """A reader someone else runs on ``node`` (another image, on the readers' account), listening on
        ``ip`` at the readers' port: its ``tx_bytes`` and ``rx_bytes`` grow by ``bytes_per_read`` at
        every read, whatever crossed the node's EFA device."""
        reads = {"count": 0}

        def route(handler: Handler, method: str) -> None:
            reads["count"] += 1
            value = 1000 + reads["count"] * bytes_per_read
            handler.reply(200, {"node": node, "counters": {"rdmap0s6": {"tx_bytes": value, "rx_bytes": value}}})

        self._serve(ip, route, self.counter_port)
        self.planted_readers.append(self.reader_pod(name, node, ip, controller_uid))

    def pod_name(self, cluster: str, role: str) -> str:
        generation = self.generation[role]
        base = {"head": "head-x", "prefill": "prefill-worker-p", "decode": "decode-worker-d"}[role]
        return f"{cluster}-{base}{generation + 1}" if generation else f"{cluster}-{base}1"

    def _faulted(self, pod: dict[str, Any], role: str) -> dict[str, Any]:
        """A replacement not Ready yet (Pending on a cordoned node, else starting), with its own uid."""
        if self.generation[role]:
            pod["metadata"]["uid"] += f"-{self.generation[role]}"
        node = pod["spec"]["nodeName"]
        if node in self.cordoned and role in self.down_until:
            self.down_until[role] = self.pod_reads + self.scenario.restart_reads  # restarts once uncordoned
            pod["spec"] = {"containers": pod["spec"]["containers"]}
            pod["status"] = {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 1 node(s) were unschedulable."}]}
        elif self.pod_reads < self.down_until.get(role, 0):
            pod["status"] = {**pod["status"], "conditions": [{"type": "Ready", "status": "False"}],
                             "containerStatuses": [{**pod["status"]["containerStatuses"][0], "ready": False}]}
        else:
            self.down_until.pop(role, None)
        return pod

    def serving(self) -> bool:
        """Serve answers only while every role has a Ready pod."""
        return not any(self.pod_reads < until for until in self.down_until.values())

    def take_pod(self, name: str) -> bool:
        """A DELETE or an admitted eviction of a Ray pod: KubeRay creates its replacement, under a new name."""
        for role in self.generation:
            if any(name == self.pod_name(cluster, role) for cluster in (self.active, self.pending) if cluster):
                self.generation[role] += 1
                self.down_until[role] = self.pod_reads + self.scenario.restart_reads
                self.replaced_at[role] = time.time()
                if role != "head":
                    self.redeploy_replicas()
                return True
        return False

    def nodes(self) -> list[dict[str, Any]]:
        return [{"metadata": {"name": node, "labels": {"role": role}},
                 "spec": {"unschedulable": True} if node in self.cordoned else {},
                 "status": {"allocatable": {"vpc.amazonaws.com/efa": self.scenario.efa_allocatable,
                                            "nvidia.com/gpu": "1", "cpu": "31", "memory": "120Gi"}}}
                for node, role in ((PREFILL_NODE, "prefill"), (DECODE_NODE, "decode"))]

    def rayservice_object(self) -> dict[str, Any]:
        self.kuberay.promote_after = self.scenario.promote_after_polls
        self.kuberay.never_serving = set(self.scenario.failing_specs)
        self.kuberay.reconcile()
        ready = self.scenario.ready and not self.pending
        service = self.rayservice
        spec = {**service["spec"], "serveConfigV2": self.serve_config_text if self.serve_config_text is not None else
                json.dumps({"applications": [{"name": self.settings["application"], "args": self.settings["serve_args"],
                                              "import_path": "ray.serve.llm:build_pd_openai_app"}]})}
        if self.stored_auth_options is not None:
            spec["rayClusterConfig"] = {**spec["rayClusterConfig"], "authOptions": self.stored_auth_options}
        # What KubeRay writes (calculateStatus): the generation it reconciled, and the active
        # cluster's Serve applications as it last read them from that cluster's dashboard.
        status, observed = self.scenario.serve_states.pop(0) if self.scenario.serve_states else self.scenario.serve_final
        app = self.settings["application"]
        generation = 7
        return {**service, "metadata": {**service["metadata"], "generation": generation}, "spec": spec, "status": {
            "observedGeneration": generation if observed else generation - 1,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "NonZeroServeEndpoints" if ready else "ZeroServeEndpoints"}],
            "activeServiceStatus": {"rayClusterName": self.active, "applicationStatuses": {app: {
                "status": status, "message": "engine died: CUDA out of memory" if status != "RUNNING" else "",
                "serveDeploymentStatuses": {"PDProxyServer": {"status": "HEALTHY"}}}}},
            **({"pendingServiceStatus": self._pending_status()} if self.pending else {})}}

    def _pending_status(self) -> dict[str, Any]:
        """What KubeRay 1.4.0 reports of the pending cluster: its name, and its Serve applications once
        its head answers (``calculateStatus``, rayservice_controller.go:242-244)."""
        status: dict[str, Any] = {"rayClusterName": self.pending}
        cluster = self.kuberay.clusters.get(self.pending)
        if cluster is not None and cluster.head_ready:
            app = self.settings["application"]
            if self.scenario.failing_specs.get(cluster.spec_hash) == "DEPLOY_FAILED":
                self.kuberay.pending_apps = {app: {"status": "DEPLOY_FAILED", "message": (
                    "Deploying application llm failed: The deployments ['PDDecode'] are UNHEALTHY.")}}
            elif cluster.spec_hash not in self.scenario.failing_specs:
                self.kuberay.pending_apps = {app: {"status": "DEPLOYING", "message": ""}}
        if self.kuberay.pending_apps is not None:
            status["applicationStatuses"] = self.kuberay.pending_apps
        return status

    def route_api(self, handler: Handler, method: str) -> None:
        url = urllib.parse.urlsplit(handler.path)
        path, query = url.path, dict(urllib.parse.parse_qsl(url.query))
        # /openai and /dashboard stand for the OpenAI Service and the head Service (no API auth).
        if path.startswith("/openai"):
            return self.route_openai(handler, method, path[len("/openai"):])
        if path.startswith("/dashboard"):
            return self.route_dashboard(handler, path[len("/dashboard"):])
        if handler.headers.get("Authorization") != "Bearer test-token":
            return handler.reply(401, {"kind": "Status", "message": "Unauthorized"})
        ns = f"/api/v1/namespaces/{self.namespace}"
        if "/proxy" in path:
            return self.route_proxy(handler, method, path)
        if method == "GET" and path.startswith(f"{ns}/secrets/"):
            self.secret_reads.append(path)
            if path == f"{ns}/secrets/{self.active}" and self.ray_auth_token is not None:
                return handler.reply(200, {"kind": "Secret", "metadata": {"name": self.active}, "data": {
                    "auth_token": base64.b64encode(self.ray_auth_token.encode()).decode()}})
        if method == "GET" and path == f"{ns}/events":
            wanted = "involvedObject.kind=RayService,involvedObject.name=" + self.name + \
                ",reason=UpdatedServeApplications"
            items = [{"kind": "Event", "reason": "UpdatedServeApplications", "type": "Normal",
                      "involvedObject": {"kind": "RayService", "name": self.name},
                      "message": f"Updated serve applications to the RayCluster {self.namespace}/{self.active}",
                      "lastTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.deployed_at))}]
            return handler.reply(200, {"kind": "EventList", "items": items if self.serve_events and
                                       query.get("fieldSelector") == wanted else []})
        if method == "GET" and path == "/api/v1/namespaces/default/endpoints/kubernetes":
            return handler.reply(200, {"kind": "Endpoints", "subsets": [
                {"addresses": [{"ip": ip} for ip in API_SERVER_IPS], "ports": [{"name": "https", "port": 443}]}]})
        policies = f"/apis/networking.k8s.io/v1/namespaces/{self.namespace}/networkpolicies"
        if path.startswith(policies):
            name = path[len(policies):].strip("/")
            if method in ("POST", "PUT"):
                body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
                if method == "POST" and body["metadata"]["name"] in self.network_policies:
                    return handler.reply(409, {"kind": "Status", "reason": "AlreadyExists"})
                self.network_policies[body["metadata"]["name"]] = body
                self.policy_history.append((method, body["metadata"]["name"]))
                self.policy_history_bodies.append(body)
                if method == "POST":
                    self.policies_created.append(body)
                return handler.reply(201 if method == "POST" else 200, body)
            if method == "DELETE" and name in self.network_policies:
                del self.network_policies[name]
                self.policy_history.append((method, name))
                return handler.reply(200, {"kind": "Status", "status": "Success"})
        if method == "GET" and path == f"/apis/ray.io/v1/namespaces/{self.namespace}/rayservices/{self.name}":
            return handler.reply(200, self.rayservice_object())
        clusters = f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters/"
        if method == "GET" and path.startswith(clusters):
            found = self.kuberay.cluster_object(path[len(clusters):], self.namespace)
            return handler.reply(200, found) if found else handler.reply(404, {"kind": "Status", "reason": "NotFound"})
        if method == "DELETE" and path.startswith(clusters):
            name = path[len(clusters):]
            if not self.kuberay.delete(name):
                return handler.reply(404, {"kind": "Status", "reason": "NotFound"})
            self.deleted.append(name)  # FakeKubeRay's next reconciles rebuild what it must
            return handler.reply(200, {"kind": "Status", "status": "Success"})
        if method == "GET" and path == f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets/{wire.efa_counters_name(self.name)}":
            return handler.reply(200, self.counter_daemon_set) if self.counter_daemon_set else \
                handler.reply(404, {"kind": "Status", "reason": "NotFound"})
        if method == "GET" and path == f"{ns}/pods":
            return handler.reply(200, {"kind": "PodList", "items": selected(self.pods(), query)})
        if method == "GET" and path == "/api/v1/pods":
            node = query.pop("fieldSelector", "").removeprefix("spec.nodeName=")
            items = [p for p in selected(self.pods(), query) if not node or p["spec"].get("nodeName") == node]
            return handler.reply(200, {"kind": "PodList", "items": items})
        if method == "DELETE" and path.startswith(f"{ns}/pods/") and path.count("/") == 6:
            if not self.take_pod(path.rsplit("/", 1)[1]):
                return handler.reply(404, {"kind": "Status", "reason": "NotFound"})
            return handler.reply(200, {"kind": "Pod", "metadata": {"name": path.rsplit("/", 1)[1]}})
        if method == "POST" and path.startswith(f"{ns}/pods/") and path.endswith("/eviction"):
            pod = path.split("/")[6]
            body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
            assert body["kind"] == "Eviction" and body["metadata"]["name"] == pod, body
            refused = sum(1 for _, status in self.evictions if status == 429) < self.scenario.evictions_refused
            status = 429 if refused else 201 if self.take_pod(pod) else 404
            self.evictions.append((pod, status))
            return handler.reply(status, {"kind": "Status", "code": status,
                                          "reason": "TooManyRequests" if refused else "Created"})
        if method == "PATCH" and path.startswith("/api/v1/nodes/"):
            assert handler.headers["Content-Type"] == "application/merge-patch+json"
            node, patch = path.rsplit("/", 1)[1], json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
            (self.cordoned.add if patch["spec"]["unschedulable"] else self.cordoned.discard)(node)
            return handler.reply(200, {"kind": "Node", "metadata": {"name": node}})
        if method == "GET" and path == "/api/v1/nodes":
            return handler.reply(200, {"kind": "NodeList", "items": selected(self.nodes(), query)})
        if method == "GET" and path.startswith(f"{ns}/pods/") and path.endswith("/log"):
            pod = path.split("/")[-2]
            # The kubelet stamps each line; sinceTime returns those at or after it.
            stamped = [(self.deployed_at - 60, line) for line in self.scenario.old_log]
            stamped += [(self.deployed_at + 1, line) for line in self.scenario.worker_log]
            if "sinceTime" in query:
                since = datetime.datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00")).timestamp()
                stamped = [(t, line) for t, line in stamped if t >= since]
            role = next((r for r in ("prefill", "decode") if f"{r}-worker" in pod), None)
            if role is not None and self.generation[role]:
                # A replacement: its own log starts when it was created, and its engine loads the model.
                started = self.replaced_at[role] + 0.5
                stamped = [(started, line) for line in [*RELOAD_LINES, *self.scenario.worker_log]]
                if "sinceTime" in query:
                    stamped = [(t, line) for t, line in stamped if t >= since]
            lines = [line for _, line in stamped] if "worker" in pod else ["head log"]
            return handler.reply(200, "\n".join(lines) + "\n", "text/plain")
        if method == "GET" and path.startswith(f"/apis/batch/v1/namespaces/{self.namespace}/jobs/"):
            created = datetime.datetime.fromtimestamp(time.time() - self.scenario.job_age_seconds, datetime.timezone.utc)
            return handler.reply(200, {"kind": "Job", "metadata": {
                "name": path.rsplit("/", 1)[1], "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")},
                "status": dict(self.scenario.job_status)})
        if method == "POST" and path == f"{ns}/configmaps":
            body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
            if any(c["metadata"]["name"] == body["metadata"]["name"] for c in self.created_config_maps):
                return handler.reply(409, {"kind": "Status", "reason": "AlreadyExists"})
            self.created_config_maps.append(body)
            return handler.reply(201, body)
        if path.startswith(f"{ns}/configmaps/") and path.rsplit("/", 1)[1] in self.config_map_store:
            name = path.rsplit("/", 1)[1]
            if method == "GET":
                return handler.reply(200, self.config_map_store[name])
            if method == "PUT":
                body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
                stored = self.config_map_store[name]
                if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
                    return handler.reply(409, {"kind": "Status", "reason": "Conflict"})
                body["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
                self.config_map_store[name] = body
                return handler.reply(200, body)
        if method == "PUT" and path.startswith(f"{ns}/configmaps/"):
            self.created_config_maps.append(json.loads(handler.rfile.read(int(handler.headers["Content-Length"]))))
            return handler.reply(200, self.created_config_maps[-1])
        if method == "GET" and path == f"{ns}/configmaps":
            stored = [*self.config_map_store.values(), *self.created_config_maps]
            return handler.reply(200, {"kind": "ConfigMapList", "items": selected(stored, query)})
        return handler.reply(404, {"kind": "Status", "reason": "NotFound", "message": path})

    def route_proxy(self, handler: Handler, method: str, path: str) -> None:
        """``/api/v1/namespaces/<ns>/(pods|services)/<name>:<port>/proxy<rest>``, forwarded like the API server."""
        head, rest = path.split("/proxy", 1)
        kind, target = head.split("/")[-2:]
        name, port = target.rsplit(":", 1)
        if not self._admits_api_server(int(port)):
            # What the VPC CNI's policy agent does to a connection no policy admits: drops it.
            return handler.reply(503, {"kind": "Status", "message": f"dial tcp {name}:{port}: i/o timeout"})
        if kind == "services":
            base = f"{self.api_url}/openai" if "openai" in name else f"{self.api_url}/dashboard"
        else:
            pod = next(p for p in self.pods() if p["metadata"]["name"] == name)
            # The pods' declared ports (the rendered settings') to where this fake's servers listen
            # on loopback; any other port is tried as given.
            served = {int(self.settings["metrics_port"]): self.metrics_port,
                      int(self.settings["efa_counter_port"]): self.counter_port}
            base = f"http://{pod['status']['podIP']}:{served.get(int(port), int(port))}"
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        request = urllib.request.Request(base + rest, data=body, method=method,
                                         headers={"Authorization": "Bearer test-token",
                                                  "Content-Type": handler.headers.get("Content-Type", ""),
                                                  # Passed on like any other request header.
                                                  **({"X-Ray-Authorization": handler.headers["X-Ray-Authorization"]}
                                                     if handler.headers.get("X-Ray-Authorization") else {})})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return handler.reply(response.status, response.read(), response.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as error:
            return handler.reply(error.code, error.read())

    def _admits_api_server(self, port: int) -> bool:
        """Whether some policy admits every API server address to ``port`` on this deployment's pods."""
        for policy in self.network_policies.values():
            if policy["spec"]["podSelector"].get("matchLabels") != {"ray-llm-eks/instance": self.name}:
                continue
            for rule in policy["spec"].get("ingress") or []:
                sources = {peer.get("ipBlock", {}).get("cidr") for peer in rule.get("from") or []}
                if {f"{ip}/32" for ip in API_SERVER_IPS} <= sources and \
                        any(p.get("port") == port for p in rule.get("ports") or []):
                    return True
        return False

    # --- the serving endpoints -----------------------------------------------------------------------

    def route_dashboard(self, handler: Handler, path: str) -> None:
        """Ray's dashboard on the head: with token auth (as KubeRay 1.5.1 runs it) it refuses a
        request without the cluster's token; every call is recorded (the gate makes none)."""
        self.dashboard_calls.append(path)
        if self.ray_auth_token is not None and \
                handler.headers.get("X-Ray-Authorization") != f"Bearer {self.ray_auth_token}":
            return handler.reply(401, {"error": "Unauthorized: missing or invalid authentication token"})
        return handler.reply(404, {})

    def _bump(self, node: str, counter: str, amount: int) -> None:
        path = self.sysfs[node] / "class" / "infiniband" / "rdmap0s6" / "ports" / "1" / "hw_counters" / counter
        path.write_text(f"{int(path.read_text()) + amount}\n")

    def route_openai(self, handler: Handler, method: str, path: str) -> None:
        if method != "POST" or path != "/v1/chat/completions":
            return handler.reply(404, {})
        body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
        if self.scenario.completion_status != 200:
            return handler.reply(self.scenario.completion_status, {"error": {"message": "engine dead"}})
        if not self.serving():
            self.pods()  # time passes for the kubelet while clients retry
            return handler.reply(503, {"error": {"message": "no replica of the deployment is running"}})
        prompt_tokens = len(body["messages"][0]["content"].split()) + 12  # + the chat template's tokens
        kv = kv_bytes_moved(prompt_tokens)
        scenario = self.scenario
        sent = scenario.efa_sent_bytes if scenario.efa_sent_bytes is not None else int(kv * scenario.efa_fraction)
        received = scenario.efa_received_bytes if scenario.efa_received_bytes is not None else \
            int(kv * scenario.efa_fraction)
        # The conditional decode server's rule: fewer tokens than its threshold, prefilled on decode.
        local = scenario.pd_threshold is not None and prompt_tokens < scenario.pd_threshold
        with self.lock:
            self.requests_served += 1
            decode_labels, prefill_labels = self.ray_labels("decode"), self.ray_labels("prefill")
            model = self.settings["model"]
            if scenario.pd_threshold is not None:
                labels = {k: decode_labels[k] for k in PD_RAY_LABELS}
                self.pd_requests.labels(**labels, **{wire.PD_PATH_TAG: wire.PD_LOCAL if local else wire.PD_REMOTE}).inc()
            if not local:  # the prefill leg, and decode's NIXL read of its KV cache over EFA
                self._bump(PREFILL_NODE, "tx_bytes", sent)
                self._bump(DECODE_NODE, "rx_bytes", received)
                if self.scenario.nixl_fraction:
                    self.nixl["bytes"].labels(**decode_labels).observe(kv * self.scenario.nixl_fraction)
                    self.nixl["seconds"].labels(**decode_labels).observe(0.031)
                if self.scenario.failed_transfers:
                    self.nixl["failed"].labels(**decode_labels).inc(self.scenario.failed_transfers)
                if self.scenario.failed_notifications:
                    self.nixl["notifications"].labels(**decode_labels).inc(self.scenario.failed_notifications)
                if self.scenario.kv_expired_reqs:
                    self.nixl["expired"].labels(**prefill_labels).inc(self.scenario.kv_expired_reqs)
                # Prefill runs each request to one token, decode streams the rest (4 tokens here).
                self.serving_metrics["prefill"]["ttft"].labels(model).observe(self.scenario.prefill_ttft_seconds)
                self.serving_metrics["prefill"]["success"].labels(model, "length").inc()
                self.serving_metrics["prefill"]["tokens"].labels(model).inc()
            decode = self.serving_metrics["decode"]
            decode["ttft"].labels(model).observe(self.scenario.decode_ttft_seconds)
            for _ in range(3):
                decode["itl"].labels(model).observe(0.02)
            decode["success"].labels(model, "stop").inc()
            decode["tokens"].labels(model).inc(4)
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        for piece in ("The", " answer", " is", " short."):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": body["model"],
                     "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            handler.wfile.flush()
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 4, "total_tokens": prompt_tokens + 4}
        if self.scenario.usage:
            handler.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        handler.wfile.write(b"data: [DONE]\n\n")

    def route_metrics(self, handler: Handler, method: str, pod: str) -> None:
        if handler.path != "/metrics":
            return handler.reply(404, {})
        return handler.reply(200, generate_latest(self.registries[pod]), "text/plain; version=0.0.4")

    def route_counters(self, handler: Handler, node: str, backend: str) -> None:
        self.counter_reads[node] = self.counter_reads.get(node, 0) + 1
        if self.counter_reads[node] <= self.break_counters_until:
            return handler.reply(503, b"starting", "text/plain")
        with urllib.request.urlopen(backend + handler.path, timeout=5) as response:
            return handler.reply(response.status, response.read(), "application/json")

    def route_signal(self, handler: Handler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        self.signals.append((dict(handler.headers), handler.rfile.read(length)))
        handler.reply(200, b"", "text/plain")


PACE = {"poll_seconds": 0.05, "serve_settle_seconds": 0.1, "metrics_settle_seconds": 0, "post_probe_reserve_seconds": 1}
"""The poll and wait times (``verify.PACE_SETTINGS``) of every gate, ``verify`` and ``drill`` run against the fake,
which answers at once: a Serve settle of two polls at least (two reads of the same status); the KubeRay
stand-in promotes after a count of polls, not a time."""


def run_gate(program: Path, fake: FakeDeployment, settings: dict[str, Any], *extra: str,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The in-cluster program in its own process: ``python -S`` (no site-packages, so only the
    standard library can be imported) ``-m rayllmeks_gate run`` from the rendered archive, as the
    Job runs it."""
    config = fake.tmp / "gate.json"
    config.write_text(json.dumps(settings))
    return subprocess.run(
        [sys.executable, "-S", "-m", bundle.IN_CLUSTER_PACKAGE, "run", "--config", str(config),
         "--kube-api", fake.api_url, "--kube-token-file", str(fake.token_file), *extra],
        cwd=fake.tmp, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", **program_env(program), **(env or {})},
    )


def program_env(program: Path) -> dict[str, str]:
    """The environment the chart gives the gate's pods for the program: the archive on ``PYTHONPATH``."""
    return {"PYTHONPATH": str(program / bundle.ARCHIVE)}


def kubeconfig_for(tmp: Path, server: str, token: str = "test-token", fail: bool = False) -> Path:
    """A kubeconfig for ``server`` whose user is an ``exec`` credential plugin, as ``aws eks
    update-kubeconfig`` writes one (here a Python one-liner printing an ``ExecCredential``)."""
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}}
    code = "import sys; sys.exit('AccessDenied')" if fail else f"print({json.dumps(json.dumps(credential))})"
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "eks",
        "clusters": [{"name": "eks", "cluster": {"server": server}}],
        "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "eks"}}],
        "users": [{"name": "eks", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                                    "command": sys.executable, "args": ["-c", code]}}}],
    }
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ray-llm-eks ARGS`` in this process (typer's CliRunner), as :func:`subprocess.run` would
    report it: each entry point keeps one test that starts it as its own process; the others need
    not pay for a Python and a jsii start each. An exception the command did not turn into an
    exit code is raised here (in a process of its own it would be a traceback and exit 1)."""
    from typer.testing import CliRunner

    from ray_llm_eks.cli import app

    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["ray-llm-eks", *args], result.exit_code, result.stdout, result.stderr)
