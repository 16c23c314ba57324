"""The wire contract: what the deploy side and the in-cluster programs must agree on.

The charts, the CLI and the stack write; the deployment gate (``ray_llm_eks.verification``,
mounted in the cluster as ``rayllmeks_gate``) and the bench Job read. Everything that crosses
between them is defined here once: the labels they select by, the names of the objects and files
they exchange, the metrics the gate publishes, and the gate's settings (:class:`GateSettings`,
``gate.json``).

This file travels inside the gate's ConfigMap beside the gate's own modules
(``verification.bundle.SHARED``), so it imports the standard library only, never relatively, and
runs on Python 3.9 (the serving image's interpreter may be that old).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

PROJECT = "ray-llm-eks"
LABEL_PREFIX = f"{PROJECT}/"
"""Every label, annotation and taint key this project owns starts with it."""

# --- labels --------------------------------------------------------------------------------------------

INSTANCE_LABEL = f"{LABEL_PREFIX}instance"
"""On every object of one deployment (its value: the RayService's name); Services and the gate
select the Ray pods by it, not by the generated RayCluster name (which KubeRay suffixes)."""
COMPONENT_LABEL = f"{LABEL_PREFIX}component"
"""Which part of the deployment an object is (one of the ``*_COMPONENT`` values)."""
RAY_ROLE_LABEL = f"{LABEL_PREFIX}ray-role"
"""A Ray pod's role: ``head``, ``prefill`` or ``decode``."""
SERVES_HTTP_LABEL = f"{LABEL_PREFIX}serves-http"
"""``true`` on the Ray pods behind the OpenAI Service."""
GATE_RUN_LABEL = f"{LABEL_PREFIX}gate-run"
"""The gate run (the hash of what it checks) of its Job and settings."""
SERVING_INSTANCE_NAMESPACE_LABEL = f"{LABEL_PREFIX}serving-instance"
"""On the serving namespace: which deployment owns it (informative; the admission policy binds by
namespace name, which nobody can forge)."""
CLUSTER_SPEC_HASH_ANNOTATION = f"{LABEL_PREFIX}cluster-spec-hash"
"""On every Ray pod template: the hash of the cluster spec it was rendered from; the gate rolls out
by it (settings ``hash_annotation``)."""

GATE_COMPONENT = "gate"
GATE_SETTINGS_COMPONENT = "gate-settings"
GATE_REPORT_COMPONENT = "gate-report"
EFA_COUNTERS_COMPONENT = "efa-counters"
MONITOR_COMPONENT = "continuous-verification"
BENCH_COMPONENT = "bench"
VERIFY_API_PROXY_COMPONENT = "verify-api-proxy"
TEARDOWN_GUARD_COMPONENT = "teardown-guard"
GCS_REDIS_SECRET_COMPONENT = "gcs-redis-secret"
"""The NetworkPolicy ``ray-llm-eks verify`` applies for its run."""

# KubeRay's own pod labels and containers (v1.4.0 ``utils/constant.go``, ``common/pod.go``), which
# the gate selects by; the charts never set them (``cdk8s_charts.labels.KUBERAY_OWNED_LABEL_PREFIXES``).
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_GROUP_LABEL = "ray.io/group"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
AUTOSCALER_CONTAINER = "autoscaler"
"""The Ray autoscaler sidecar KubeRay adds to the head pod (``AutoscalerContainerName``)."""

# --- resources, containers and ports ---------------------------------------------------------------------

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
WORKER_CONTAINER = "ray-worker"
"""The Ray worker pods' main container: the gate reads its image, environment and log, and the
log metric filters match it."""
METRICS_PORT = 8080
"""KubeRay's ``metrics-export-port`` default (``DefaultMetricsPort``), declared on the Ray pods."""
DASHBOARD_PORT = 8265
EFA_COUNTER_PORT = 9475
"""Where the EFA counter readers serve a GPU node's byte counters."""
EFA_COUNTER_PATH = "/counters"

# --- files ----------------------------------------------------------------------------------------------

GATE_SETTINGS_FILE = "gate.json"
"""The key of :class:`GateSettings` in the settings ConfigMap, and its file in the gate's pod."""
GATE_REPORT_FILE = "report.json"
"""The key of the report in the ConfigMap the gate Job keeps it in."""
MONITOR_STATE_FILE = "state.json"
"""The key of the previous reading in continuous verification's state ConfigMap."""


def report_config_map(job_name: str) -> str:
    """Where the gate Job keeps its report; no deploy manages it, so no rollback prunes it."""
    return f"{job_name}-report"


def efa_counters_name(service_name: str) -> str:
    """The EFA counter readers' DaemonSet (and its service account): the gate reads only the pods
    this DaemonSet controls, found by its uid, whatever else carries their labels."""
    return f"{service_name}-efa-counters"


def report_command(namespace: str, job_name: str) -> str:
    """The command that prints a gate run's full JSON report."""
    return (f"kubectl -n {namespace} get configmap {report_config_map(job_name)} "
            "-o jsonpath='{.data.report\\.json}'")


# --- metrics --------------------------------------------------------------------------------------------

METRIC_NAMESPACE = "RayLlmEks"
"""The prefix of every deployment's own metric namespace (:func:`metric_namespace`)."""


def metric_namespace(stack_name: str, namespace: str, ray_service: str) -> str:
    """The CloudWatch namespace of one deployment's metrics: ``RayLlmEks/<stack>/<namespace>/<service>``.

    One per deployment, so its monitor role's ``cloudwatch:namespace`` condition admits only this
    deployment's metrics, and no other deployment's monitor (or any pod that runs as one) can write
    its ``TransportVerified``. A stack name is unique in its account and region, as CloudWatch
    namespaces are; namespace and service tell two servings of one stack apart. At most
    9 + 128 + 63 + 47 + 3 = 250 characters (CloudWatch takes 255; stack names are letters, digits
    and hyphens, Kubernetes names lowercase letters, digits and hyphens, all valid there).
    """
    return f"{METRIC_NAMESPACE}/{stack_name}/{namespace}/{ray_service}"
TRANSPORT_VERIFIED = "TransportVerified"
"""Continuous verification's verdict (1 pass, 0 fail), dimensions ``Namespace`` and ``RayService``."""
SERVING_METRICS: dict[str, tuple[str, str]] = {
    "worker_pods_replaced": ("WorkerPodsReplaced", "Count"),
    "requests": ("Requests", "Count"),
    "generation_tokens_per_second": ("GeneratedTokensPerSecond", "Count/Second"),
    "ttft_p50_ms": ("TtftP50", "Milliseconds"),
    "ttft_p99_ms": ("TtftP99", "Milliseconds"),
    "ttft_p99_floor_ms": ("TtftP99Floor", "Milliseconds"),
    "itl_p50_ms": ("ItlP50", "Milliseconds"),
    "itl_p99_ms": ("ItlP99", "Milliseconds"),
    "kv_transfer_bytes": ("KvTransferBytes", "Bytes"),
    "kv_transfer_mean_ms": ("KvTransferTimeMean", "Milliseconds"),
    "nixl_failed_transfers": ("NixlFailedTransfers", "Count"),
    "min_node_efa_bytes": ("MinNodeEfaBytes", "Bytes"),
}
"""Window figure -> (CloudWatch metric, unit), with the dimensions of ``TransportVerified``; each
published only when it has a value (``verification/serving_window.py``)."""

PD_REQUESTS_METRIC = "rayllmeks_pd_requests"
"""Requests the decode replicas of a conditional P/D application took, by where their prompt was
prefilled (:data:`PD_PATH_TAG`): a ``ray.util.metrics.Counter`` of ``ray_llm_eks.pd.conditional``,
which Ray exports on each node's metrics port (:data:`METRICS_PORT`) as
``ray_rayllmeks_pd_requests_total`` (Ray's ``ray_`` prefix; ``_total`` on counters)."""
PD_PATH_TAG = "prefill"
"""The counter's tag: :data:`PD_LOCAL` (prefilled on the decode replica, no KV transfer) or :data:`PD_REMOTE`
(the prefill leg, and a NIXL read)."""
PD_LOCAL = "local"
PD_REMOTE = "remote"
PD_THRESHOLD_KEY = "rayllmeks_min_prompt_tokens"
"""Where the decode leg's ``LLMConfig.experimental_configs`` carries ``disaggregation.min_prompt_tokens``."""
PD_IMPORT_PATH = "rayllmeks_pd.conditional:build_pd_openai_app"
"""The Serve application's ``import_path`` with ``disaggregation.min_prompt_tokens`` (``ray_llm_eks.pd.bundle.IMPORT_PATH``),
which the gate names when no decode worker exports :data:`PD_REQUESTS_METRIC`."""


def prefill_path(prompt_tokens: int, min_prompt_tokens: int) -> str:
    """Where a prompt of ``prompt_tokens`` (as the server counts it, after the chat template) is
    prefilled: :data:`PD_LOCAL` below ``min_prompt_tokens``, :data:`PD_REMOTE` from it on (a prompt of
    exactly the threshold takes the prefill leg); with 0, every prompt is remote. The decode
    replica's rule (``ray_llm_eks.pd.conditional.route``), which the gate classifies its probes by."""
    return PD_LOCAL if prompt_tokens < min_prompt_tokens else PD_REMOTE

# --- the gate's settings ----------------------------------------------------------------------------------

EXPECTED_BACKEND = "LIBFABRIC"
"""The NIXL backend the worker logs must prove (``verification/evidence.py``)."""
EXPECTED_PROVIDER = "efa"
"""The libfabric provider they must prove; ``tcp`` where no EFA device exists on purpose."""

_JSON_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                                            "dict": (dict,)}


def _accepts(annotation: str, value: Any) -> bool:
    """Whether a JSON value fits a field annotated ``annotation`` (a string: this module's
    annotations are never evaluated, which keeps ``X | None`` readable on Python 3.9)."""
    for part in (p.strip() for p in annotation.split("|")):
        if part == "None":
            if value is None:
                return True
            continue
        base = part.split("[", 1)[0]
        if isinstance(value, bool) and base != "bool":
            continue  # JSON's true is no number
        if isinstance(value, _JSON_TYPES[base]):
            return True
    return False


def _read(cls: Any, data: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``data`` checked against ``cls``'s fields: no unknown key, no missing required one, each
    value of its field's JSON type. Raises ValueError naming every problem."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object, not {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    problems = []
    unknown = sorted(set(data) - set(known))
    if unknown:
        problems.append(f"unknown {what}: {', '.join(unknown)} (a newer or older deploy wrote them; this program "
                        f"reads {', '.join(known)})")
    missing = [name for name, f in known.items() if f.default is MISSING and name not in data]
    if missing:
        problems.append(f"missing {what}: {', '.join(missing)}")
    for name, value in data.items():
        if name in known and not _accepts(str(known[name].type), value):
            problems.append(f"{what} {name} must be {known[name].type}, not {type(value).__name__} ({value!r})")
    if problems:
        raise ValueError("; ".join(problems))
    return dict(data)


def _write(obj: Any) -> dict[str, Any]:
    """Every field, but an optional one at its default: the rendered file holds what the spec says."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)
            if f.default is MISSING or getattr(obj, f.name) != f.default}


@dataclass(frozen=True)
class RoleExpectation:
    """What the gate expects of one worker role's nodes and pods."""

    nodes: int
    node_selector: dict[str, str]
    gpus_per_node: int
    min_nodes: int | None = None
    """An autoscaled role's node group bounds; None: fixed at ``nodes``."""
    max_nodes: int | None = None
    efa_per_node: int = 1
    """Allocatable ``vpc.amazonaws.com/efa`` each node must advertise: one per EFA interface its
    launch template attaches (``WorkerPool.efa_per_node``; 32 on p5.48xlarge). Written only when
    not 1, so a gate.json of a single-card type is what it was before multi-card types."""

    @property
    def autoscaled(self) -> bool:
        return self.min_nodes is not None and self.max_nodes is not None and self.min_nodes < self.max_nodes

    @property
    def pod_range(self) -> tuple[int, int]:
        """How many worker pods of the role may run: exactly ``nodes`` when fixed; autoscaled, from
        one (the path must be provable) to the node group's maximum."""
        if self.autoscaled:
            return max(1, self.min_nodes or 0), int(self.max_nodes or 0)
        return self.nodes, self.nodes

    def describe(self) -> str:
        low, high = self.pod_range
        return str(low) if low == high else f"{low} to {high} (autoscaled)"

    def to_json(self) -> dict[str, Any]:
        return {**_write(self), "node_selector": dict(self.node_selector)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], role: str = "") -> RoleExpectation:
        return cls(**_read(cls, data, f"gate settings of role {role}" if role else "role settings"))


@dataclass(frozen=True)
class GateSettings:
    """What the deployed spec says (the chart renders it as ``gate.json``), and how this run goes.

    The fields without a default are the spec's: the chart writes every one, and the gate refuses
    settings that lack one. The fields with a default are the run's options: the deploy's Job runs
    with the defaults, ``ray-llm-eks verify`` and continuous verification override them
    (:func:`read_only_run`), and :meth:`to_json` leaves out an option at its default. So is
    ``min_prompt_tokens``, a spec field added since, whose default is the behaviour before it: a spec
    without it renders the ``gate.json`` it rendered before.
    """

    namespace: str
    ray_service: str
    topology: str
    model: str
    application: str
    openai_url: str
    image: str
    image_digest: str | None
    cluster_spec_hash: str
    hash_annotation: str
    worker_container: str
    worker_env: dict[str, str]
    serve_args: dict[str, Any]
    roles: dict[str, RoleExpectation]
    metrics_port: int
    efa_counter_port: int
    efa_counter_selector: dict[str, str]
    kv_bytes_per_token: int
    kv_bytes_per_sequence: int
    kv_block_tokens: int
    """Tokens per KV block: whole blocks move (:func:`kv_transfer_bytes`)."""
    kv_tokens_withheld: int
    """Prompt tokens prefill does not send (1 for a hybrid model, whose decode recomputes the last)."""
    min_kv_fraction: float
    probes: int
    probe_prompt_words: int
    probe_max_tokens: int
    deadline_seconds: float
    expected_backend: str
    expected_provider: str
    ray_auth: str
    """``token``: the RayService must carry ``authOptions.mode: token`` as stored (a CRD older
    than KubeRay 1.5.1 drops the field silently). The gate never needs the token: it reads Serve's
    state from the RayService, not from Ray's dashboard (``verification.rollout``)."""
    min_prompt_tokens: int = 0
    """``disaggregation.min_prompt_tokens``: the decode replicas prefill a prompt of fewer tokens
    themselves, with no KV transfer. Above 0, the gate also sends a short probe (the local class),
    predicts KV bytes only for the probes of at least this many tokens (the remote class), and reads
    each path's count from the decode workers' :data:`PD_REQUESTS_METRIC` (docs/verification.md).
    0: every probe takes the prefill leg, and the setting is left out of ``gate.json``."""
    rollout: bool = True
    """Delete an active RayCluster whose pods run another cluster spec (the deploy's Job does; ``verify`` never)."""
    as_deploy_job: bool = True
    """Running as the deploy's Job: the deadline counts from the Job's creation (when CloudFormation's
    wait began, not when this process started after its image pull), and the report is also kept in
    a ConfigMap that no later deploy prunes."""
    poll_seconds: float = 10.0
    replaced_grace_seconds: float = 300.0
    """The deploy's Job: how long a RayService carrying another cluster spec is waited for before
    "a newer deploy replaced it" fails the run. On a rollback, CloudFormation may re-apply this
    gate's manifest before the RayService's (its order is not documented): the RayService then
    comes back to this spec within a few minutes. Other runs (``verify``) fail at once."""
    stuck_pod_seconds: float = 600.0
    """A pod of the cluster the gate waits for that waits this long on its image (``ErrImagePull``
    and ``ImagePullBackOff``, which the kubelet alternates, count as one wait) or on a node
    (``Unschedulable``, for the head and fixed-size roles: an autoscaled role's extra pods are
    Cluster Autoscaler's to place) fails the gate with the pod's reason, instead of at the deadline.
    An image name that can never resolve (``InvalidImageName``) fails it at once."""
    serve_settle_seconds: float = 6.0
    """How long KubeRay's status of the Serve application, for the current generation and active
    cluster, must hold before the gate believes it: three of KubeRay's 2 s reconciles, the first
    of which may report the previous config's status (``verification.rollout``)."""
    metrics_settle_seconds: float = 15.0
    post_probe_reserve_seconds: float = 90.0
    """Kept after the probes for the counter, metrics and log reads (a few 15 s calls at most), so
    the gate still ends by its deadline; what follows it (the report, the signal) fits the margin
    before the wait condition's timeout (``spec.verification.GATE_MARGIN_SECONDS``)."""
    log_window_seconds: float | None = None
    """Continuous verification: read only this much of each worker's log, and count only the
    lines that disqualify (the startup lines rotated away long ago). None: since the Serve deploy,
    and the startup lines must be there (the deploy's gate)."""
    wait_for_job: str = ""
    """Continuous verification: while this Job (the deploy's gate) has not finished, do nothing,
    publish nothing: the pods may be mid-rollout."""
    state_config_map: str = ""
    """Continuous verification: the ConfigMap that keeps the previous run's reading of the workers'
    metrics and the nodes' EFA counters, so each run reports what was served since
    (``report["window"]``). Empty: no window."""
    run_id: str = ""
    """The gate run: the hash of everything it checks (empty until the chart has computed it)."""
    job_name: str = ""
    """The Job that runs this gate in the cluster; its report is kept in ``<job_name>-report``."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateSettings:
        """Settings from their JSON; ValueError names every unknown or missing key and every value
        of the wrong type (a gate of another version, or an override with a typo)."""
        values = _read(cls, data, "gate settings")
        values["roles"] = {role: RoleExpectation.from_json(spec, role) for role, spec in values["roles"].items()}
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The JSON the chart renders (``gate.json``) and :meth:`from_json` reads back."""
        data = _write(self)
        data["roles"] = {role: expectation.to_json() for role, expectation in self.roles.items()}
        return data

    def with_overrides(self, overrides: Mapping[str, Any]) -> GateSettings:
        """These settings with ``overrides`` (JSON values) applied, checked as :meth:`from_json` checks."""
        return GateSettings.from_json({**self.to_json(), **overrides})

    @property
    def autoscaled(self) -> bool:
        return any(role.autoscaled for role in self.roles.values())

    @property
    def disaggregated(self) -> bool:
        return self.topology == "disaggregated"


def read_only_run(deadline_seconds: float, **settings: Any) -> dict[str, Any]:
    """The overrides of a run that checks the deployment and changes nothing in it: no rollout (a
    stale RayCluster fails the run instead of being deleted), not the deploy's Job (the deadline
    counts from the process's start, no report ConfigMap). ``ray-llm-eks verify`` and continuous
    verification run so; ``settings`` are further overrides, by :class:`GateSettings` field."""
    overrides = {"rollout": False, "as_deploy_job": False, "deadline_seconds": deadline_seconds, **settings}
    known = {f.name for f in fields(GateSettings)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown gate settings: {', '.join(unknown)}")
    return overrides


def kv_transfer_bytes(prompt_tokens: int, *, bytes_per_token: int, bytes_per_sequence: int, block_tokens: int,
                      tokens_withheld: int) -> int:
    """What one request's prompt moves from prefill to decode with vLLM's NixlConnector: the
    full-attention cache of the tokens sent (the prompt less ``tokens_withheld``, never below one),
    in whole blocks of ``block_tokens``, and a hybrid model's fixed per-sequence state. The planner
    (``ModelArchitecture.kv_transfer_bytes``) and the gate's prediction are this arithmetic; the
    vLLM code it follows is cited there."""
    sent = max(min(prompt_tokens, 1), prompt_tokens - tokens_withheld)
    return -(-sent // block_tokens) * block_tokens * bytes_per_token + bytes_per_sequence


SETTINGS_SHA256_ENV = "GATE_SETTINGS_SHA256"
"""Continuous verification's pod carries the hash of the settings rendered beside it; the program
refuses a ``gate.json`` of another hash. The settings ConfigMap is immutable, but whoever may
delete and create ConfigMaps in the namespace can replace it (same name, other thresholds); the
hash lives in the CronJob's pod template, which the admission policy and the deploy own."""


def settings_sha256(settings: Mapping[str, Any]) -> str:
    """SHA-256 (64 hex) of the settings' canonical JSON (sorted keys, no spaces): the chart hashes
    what it renders into ``gate.json``, the program what it reads back, whatever the whitespace."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
