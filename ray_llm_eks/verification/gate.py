"""The deployment gate: roll the pods to the deployed spec, wait for the service, and prove the path.

One run, bounded by ``deadline_seconds``, in this order (docs/verification.md):

1. **Rollout.** KubeRay 1.4.0 with ``upgradeStrategy: None`` applies no pod-template or replica
   change to a running RayCluster (``rayservice_controller.go``: replicas are cleared before the
   hash, a changed template only counts when worker groups are appended). Every pod template
   carries the hash of the cluster spec it was rendered from; when the active cluster's pods carry
   another hash, the gate deletes that RayCluster, and KubeRay, finding neither an active nor a
   pending cluster, builds a new one from the RayService's current spec and promotes it once its
   Serve applications run (``shouldPrepareNewCluster``: the nil/nil case comes before the
   upgrade-strategy check). The old pods go first, so no second set of GPUs is needed.
2. **Ready.** The RayService's ``Ready`` condition is True, its active cluster's pods all carry
   the expected hash and are Ready, one worker pod per GPU node of each role.
3. **Nodes, pods, engine.** Allocatable ``vpc.amazonaws.com/efa`` on every GPU node; each pod's
   image (and digest) and worker environment; the Serve application's deployed arguments against
   the rendered Serve config (Ray's ``GET /api/serve/applications/``).
4. **Probes.** ``probes`` streamed chat completions through the OpenAI Service; EFA byte counters
   of every GPU node and NIXL metrics of every worker read before and after.
5. **Transport** (disaggregated only). NIXL evidence in every worker's log (:mod:`.evidence`);
   EFA bytes moved against the planner's predicted KV bytes; failed NIXL transfers.

Standard library only: it runs in the cluster, in the serving image.
"""

from __future__ import annotations

import base64
import datetime
import json
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from . import efa, evidence, metrics, probe, serving_window
from .kube import ApiError, Kube, NoClusterAccess

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
READY_CONDITION = "Ready"
CLUSTER_LABEL = "ray.io/cluster"
GROUP_LABEL = "ray.io/group"
NODE_TYPE_LABEL = "ray.io/node-type"
AUTOSCALER_CONTAINER = "autoscaler"
"""The Ray autoscaler sidecar KubeRay adds to the head pod (v1.4.0 ``common/pod.go``,
``AutoscalerContainerName``)."""
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_LABEL = "ray-llm-eks/instance"
"""The label every object of one deployment carries (the charts' ``pod_templates.INSTANCE_LABEL``)."""
COMPONENT_LABEL = "ray-llm-eks/component"
SETTINGS_COMPONENT = "gate-settings"
REPORT_COMPONENT = "gate-report"
SETTINGS_FILE = "gate.json"
REPORT_FILE = "report.json"
RAY_AUTH_TOKEN_KEY = "auth_token"
LOG_SINCE_MARGIN_SECONDS = 5.0
"""Worker log lines are read from the current Serve deployment's time minus this (clock skew)."""
SIGNAL_DATA_MAX_BYTES = 4096
"""CloudFormation's limit on a wait condition signal's ``Data`` (CloudFormation quotas)."""


@dataclass(frozen=True)
class RoleExpectation:
    nodes: int
    node_selector: dict[str, str]
    gpus_per_node: int
    min_nodes: int | None = None
    """An autoscaled role's node group bounds; None: fixed at ``nodes``."""
    max_nodes: int | None = None

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


@dataclass(frozen=True)
class GateConfig:
    """What the deployed spec says; rendered by the chart into the gate's ConfigMap as JSON."""

    namespace: str
    ray_service: str
    topology: str
    model: str
    application: str
    openai_url: str
    dashboard_url: str
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
    min_kv_fraction: float
    probes: int
    probe_prompt_words: int
    probe_max_tokens: int
    deadline_seconds: float
    rollout: bool = True
    """Delete an active RayCluster whose pods run another cluster spec (the deploy's Job does; ``verify`` never)."""
    as_deploy_job: bool = True
    """Running as the deploy's Job: the deadline counts from the Job's creation (when CloudFormation's
    wait began, not when this process started after its image pull), and the report is also kept in
    a ConfigMap that no later deploy prunes."""
    poll_seconds: float = 10.0
    metrics_settle_seconds: float = 15.0
    post_probe_reserve_seconds: float = 90.0
    """Kept after the probes for the counter, metrics and log reads (a few 15 s calls at most), so
    the gate still ends by its deadline; what follows it (the report, the signal) fits the margin
    before the wait condition's timeout (``spec.verification.GATE_MARGIN_SECONDS``)."""
    expected_backend: str = evidence.EXPECTED_BACKEND
    expected_provider: str = evidence.EXPECTED_PROVIDER
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
    (``report["window"]``, :mod:`.serving_window`). Empty: no window."""
    ray_auth: str = "disabled"
    """``token``: the RayService must carry ``authOptions.mode: token`` as stored (a CRD older
    than KubeRay 1.5.1 drops the field silently), and dashboard calls send the cluster's token."""
    run_id: str = ""
    job_name: str = ""
    """The Job that runs this gate in the cluster; its report is kept in ``<job_name>-report``."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown gate settings: {', '.join(unknown)}")
        values = dict(data)
        values["roles"] = {role: RoleExpectation(**spec) for role, spec in data["roles"].items()}
        return cls(**values)

    @property
    def autoscaled(self) -> bool:
        return any(role.autoscaled for role in self.roles.values())

    @property
    def disaggregated(self) -> bool:
        return self.topology == "disaggregated"


@dataclass
class Endpoints:
    """How the gate reaches pods and Services: directly from inside the cluster, or through the API server."""

    kube: Kube
    via_api_proxy: bool = False

    def _auth(self) -> dict[str, str]:
        token = self.kube.access.token() if self.via_api_proxy else None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def open(self, request: urllib.request.Request, timeout: float) -> Any:
        for key, value in self._auth().items():
            request.add_header(key, value)
        context = self.kube.ssl_context if self.via_api_proxy else None
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def get(self, url: str, timeout: float = 15.0, headers: Mapping[str, str] | None = None) -> bytes:
        with self.open(urllib.request.Request(url, method="GET", headers=dict(headers or {})), timeout) as response:
            return response.read()

    def pod_url(self, pod: Mapping[str, Any], port: int, path: str) -> str:
        if self.via_api_proxy:
            meta = pod["metadata"]
            return self.kube.proxy_url(meta["namespace"], "pods", meta["name"], port, path)
        return f"http://{pod['status']['podIP']}:{port}{path}"

    def service_url(self, url: str, namespace: str) -> str:
        """``url`` is ``http://<service>.<namespace>.svc:<port>``; through the proxy it becomes the proxy path."""
        if not self.via_api_proxy:
            return url
        parts = urllib.parse.urlsplit(url)
        service = (parts.hostname or "").split(".", 1)[0]
        return self.kube.proxy_url(namespace, "services", service, parts.port or 80, parts.path)


@dataclass
class Report:
    config: GateConfig
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    """Set once by :meth:`finish`, so every copy of the report (stdout, file, ConfigMap) says the same."""

    def finish(self) -> None:
        if self.finished is None:
            self.finished = time.time()

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)

    @property
    def verdict(self) -> str:
        if self.sections.get("skipped") and not self.reasons:
            return SKIPPED
        return FAIL if self.reasons else PASS

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "run_id": self.config.run_id,
            "namespace": self.config.namespace,
            "ray_service": self.config.ray_service,
            "topology": self.config.topology,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "duration_s": round((self.finished or time.time()) - self.started, 1),
            **self.sections,
        }

    def summary(self) -> dict[str, Any]:
        """The figures a person looks at first, small enough for a CloudFormation signal."""
        probes = self.sections.get("probes", {})
        kv = self.sections.get("kv", {})
        transport = self.sections.get("transport", {})
        data = {
            "verdict": self.verdict,
            "run_id": self.config.run_id,
            "reasons": self.reasons[:5],
            "probes_ok": probes.get("ok"),
            "probes": probes.get("count"),
            "ttft_ms_p50": probes.get("ttft_ms_p50"),
            "e2e_ms_p50": probes.get("e2e_ms_p50"),
            "backend": transport.get("backend"),
            "provider": transport.get("provider"),
            "kv_predicted_bytes": kv.get("predicted_bytes"),
            "efa_moved_bytes": kv.get("efa_moved_bytes"),
            "efa_fraction_of_predicted": kv.get("efa_fraction_of_predicted"),
            "nixl_bytes_transferred": kv.get("nixl", {}).get("bytes_transferred"),
            "nixl_mean_xfer_time_ms": kv.get("nixl", {}).get("mean_xfer_time_ms"),
            "report": report_command(self.config.namespace, self.config.job_name) if self.config.job_name else None,
        }
        data["reasons"] = [r if len(r) <= 300 else r[:297] + "..." for r in data["reasons"]]
        while len(json.dumps(data)) > SIGNAL_DATA_MAX_BYTES - 256 and len(data["reasons"]) > 1:
            data["reasons"] = data["reasons"][:-1]
        if len(json.dumps(data)) > SIGNAL_DATA_MAX_BYTES - 256:
            data["reasons"] = [data["reasons"][0][:120] + "..."]
        return data

    @property
    def report_config_map(self) -> str:
        return report_config_map(self.config.job_name)


def report_config_map(job_name: str) -> str:
    """Where the gate Job keeps its report; no deploy manages it, so no rollback prunes it."""
    return f"{job_name}-report"


def report_command(namespace: str, job_name: str) -> str:
    """The command that prints a gate run's full JSON report."""
    return (f"kubectl -n {namespace} get configmap {report_config_map(job_name)} "
            "-o jsonpath='{.data.report\\.json}'")


Sleeper = Callable[[float], None]


class Gate:
    def __init__(self, config: GateConfig, kube: Kube, endpoints: Endpoints, *,
                 sleep: Sleeper = time.sleep, clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] = lambda message: None) -> None:
        self.config = config
        self.kube = kube
        self.endpoints = endpoints
        self.sleep = sleep
        self.clock = clock
        self.log = log
        self.deadline = clock() + config.deadline_seconds
        self.report = Report(config)
        self.application: dict[str, Any] = {}
        """The Serve application as last read from the dashboard (``ApplicationDetails``)."""
        self.active_cluster = ""
        """The RayService's active RayCluster as last read (its Secret holds the Ray token)."""

    # --- the run ----------------------------------------------------------------------------------

    def run(self) -> Report:
        if self.config.wait_for_job and self._job_running(self.config.wait_for_job):
            self.report.sections["skipped"] = (f"the deploy's gate Job {self.config.wait_for_job} is still running; "
                                               "the pods may be mid-rollout")
            return self.report
        if self.config.as_deploy_job:
            self._anchor_deadline_to_job()
        cluster = self.wait_until_ready()
        if cluster is None:
            return self.report
        workers = self.check_nodes_and_pods(cluster)
        self.check_engine()
        if self.report.reasons:
            return self.report  # a pod or engine mismatch makes every later figure meaningless
        if not self.config.disaggregated:
            if self.config.state_config_map:
                self.record_window(workers, self.read_metrics(workers), {})
            self.run_probes()  # colocated: no KV cache crosses the network, so no transport checks
            return self.report
        counter_pods = self.efa_counter_pods()
        efa_before = self.read_efa(counter_pods)
        texts_before = self.read_metrics(workers)
        if self.config.state_config_map:
            self.record_window(workers, texts_before, efa_before)
        nixl_before = {pod: metrics.NixlTotals.of(text) for pod, text in texts_before.items()}
        if not self.run_probes():
            return self.report
        settle = min(self.config.metrics_settle_seconds, max(0.0, self._remaining()))
        if settle:
            self.sleep(settle)  # Ray's metrics agent exports periodically
        efa_after = self.read_efa(counter_pods)
        nixl_after = {pod: metrics.NixlTotals.of(text) for pod, text in self.read_metrics(workers).items()}
        self.check_transport_logs(workers)
        self.check_kv(efa_before, efa_after, nixl_before, nixl_after, workers)
        return self.report

    def _remaining(self) -> float:
        return self.deadline - self.clock()

    def _kube(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A Kubernetes call, retried on transient errors (unreachable, 5xx, 429) until the deadline."""
        while True:
            try:
                return call(*args, **kwargs)
            except (NoClusterAccess, ApiError) as error:
                if not error.transient or self._remaining() <= self.config.poll_seconds:
                    raise
                self.log(f"retrying after a transient API error: {error}")
                self.sleep(min(self.config.poll_seconds, max(0.0, self._remaining())))

    def _anchor_deadline_to_job(self) -> None:
        """CloudFormation's wait began when the Job was created; this process may start minutes later."""
        c = self.config
        try:
            created = self.kube.job(c.namespace, c.job_name)["metadata"]["creationTimestamp"]
            age = time.time() - _epoch(created)
        except (ApiError, NoClusterAccess, KeyError, ValueError) as error:
            self.report.warnings.append(f"cannot read Job {c.job_name}'s creation time ({error}); the deadline "
                                        "counts from this process's start")
            return
        self.deadline = min(self.deadline, self.clock() + c.deadline_seconds - max(0.0, age))

    # --- 1 and 2: rollout and readiness -------------------------------------------------------------

    def wait_until_ready(self) -> str | None:
        """The name of the active RayCluster once it runs the expected spec and its Serve application
        runs the expected config; None (with the reason reported) when the deadline passes first.

        Transient API errors (unreachable, 5xx, 429) are retried until the deadline; refused
        credentials end the run at once.
        """
        c = self.config
        deleted: list[str] = []
        state = "the RayService does not exist"
        started = self.clock()
        while True:
            try:
                outcome = self._poll_once(deleted)
            except (NoClusterAccess, ApiError) as error:
                if not error.transient:
                    raise
                outcome = f"the API server did not answer ({error})"
            if isinstance(outcome, tuple):
                active, ready_state = outcome
                if ready_state is None:
                    self.report.sections["service"] = {
                        "ready": True, "active_cluster": active, "waited_s": round(self.clock() - started, 1),
                        "rollout": {"recreated": deleted, "cluster_spec_hash": c.cluster_spec_hash},
                    }
                    return active
                state = ready_state
            elif outcome is False:
                return None  # a reason that waiting cannot fix was reported
            else:
                state = outcome
            if self._remaining() <= c.poll_seconds:
                self.report.sections["service"] = {"ready": False, "last_state": state, "rollout": {"recreated": deleted}}
                self.report.fail(f"the RayService {c.namespace}/{c.ray_service} was not ready within "
                                 f"{c.deadline_seconds:.0f} s ({state})")
                return None
            self.sleep(c.poll_seconds)

    def _poll_once(self, deleted: list[str]) -> tuple[str, str | None] | str | bool:
        """One look: (active cluster, None) when ready; (active, why not) or a state string to keep
        waiting; False when the gate must stop."""
        c = self.config
        service = self.kube.ray_service(c.namespace, c.ray_service)
        if service is None:
            return "the RayService does not exist"
        applied = _template_hashes(service, c.hash_annotation)
        if applied and applied != {c.cluster_spec_hash}:
            self.report.fail(f"the RayService {c.namespace}/{c.ray_service} in the cluster carries cluster spec hash "
                             f"{sorted(applied)}, not {c.cluster_spec_hash}: a newer deploy replaced it, or it was "
                             "edited by hand")
            return False
        if c.ray_auth == "token":
            stored = ((service.get("spec") or {}).get("rayClusterConfig") or {}).get("authOptions") or {}
            if stored.get("mode") != "token":
                self.report.fail(
                    f"the RayService {c.namespace}/{c.ray_service} as stored has no authOptions.mode token, so Ray runs "
                    "without authentication: the cluster's RayService CRD predates KubeRay 1.5.1 and the API server "
                    "dropped the field (helm upgrade does not update CRDs; apply the operator version's CRDs)")
                return False
        status = service.get("status") or {}
        active = (status.get("activeServiceStatus") or {}).get("rayClusterName") or ""
        self.active_cluster = active
        pods = self.kube.pods(c.namespace, {CLUSTER_LABEL: active}) if active else []
        stale = sorted({_annotation(p, c.hash_annotation) or "(none)" for p in pods} - {c.cluster_spec_hash})
        if not c.rollout and active and stale:
            self.report.fail(f"the running pods of {active} carry cluster spec {', '.join(stale)}, the deployed spec is "
                             f"{c.cluster_spec_hash}: the pods were not rolled out (the deploy's gate Job does that; "
                             "this run does not)")
            return False
        if c.rollout and active and stale and active not in deleted:
            self.log(f"active RayCluster {active} runs cluster spec {stale}; deleting it so KubeRay recreates it "
                     f"from spec {c.cluster_spec_hash}")
            try:
                self.kube.delete_ray_cluster(c.namespace, active)
            except ApiError as error:
                if error.status != 404:
                    raise
            deleted.append(active)
        ready = _condition_true(service, READY_CONDITION)
        current = [p for p in pods if _annotation(p, c.hash_annotation) == c.cluster_spec_hash]
        enough, counts = self._enough_ready(pods, current)
        state = (f"Ready={ready}, active cluster {active or '(none)'}, pods ready on spec {c.cluster_spec_hash}: "
                 f"{counts}")
        # KubeRay 1.4.0 keeps a deleted cluster as active until it promotes the new one.
        if not (ready and active and active not in deleted and not stale and enough):
            waiting = self._pods_waiting(c.namespace)
            return active, state + (f"; {waiting}" if waiting else "")
        serve = self._serve_state()
        if serve is False:
            return False
        if serve is not None:
            return active, f"{state}; {serve}"
        return active, None

    def _enough_ready(self, pods: list[dict[str, Any]], current: list[dict[str, Any]]) -> tuple[bool, str]:
        """Per role: a fixed role has exactly its pods, all ready; an autoscaled one at least one and
        at most its maximum ready, and a pod still starting (Pending while Cluster Autoscaler adds
        its node) is not waited for. The head: one, ready."""
        c, ok, parts = self.config, True, []
        groups = {"head": [p for p in pods if _label(p, NODE_TYPE_LABEL) == "head"]}
        groups.update({role: [p for p in pods if _label(p, GROUP_LABEL) == role] for role in c.roles})
        for group, members in groups.items():
            low, high = (1, 1) if group == "head" else c.roles[group].pod_range
            fixed = group == "head" or not c.roles[group].autoscaled
            ready = [p for p in members if p in current and _pod_ready(p)]
            ok = ok and (low <= len(ready) <= high if not fixed else len(ready) == low and len(members) == low)
            parts.append(f"{group} {len(ready)}/{low if low == high else f'{low} to {high}'}")
        return ok, ", ".join(parts)

    def _serve_state(self) -> str | bool | None:
        """None when the application runs the rendered config; a state to wait on; False on a failed deploy."""
        c = self.config
        url = c.dashboard_url.rstrip("/") + "/api/serve/applications/"
        try:
            details = json.loads(self.endpoints.get(self.endpoints.service_url(url, c.namespace),
                                                    headers=self._dashboard_headers()))
        except Exception as error:  # noqa: BLE001 - the dashboard may still be starting
            return f"the Ray dashboard does not answer yet ({error})"
        app = (details.get("applications") or {}).get(c.application)
        if app is None:
            return f"Serve application {c.application!r} is not deployed yet"
        self.application = app
        differences = _differences(c.serve_args, (app.get("deployed_app_config") or {}).get("args") or {})
        status = app.get("status")
        if differences:
            return f"Serve application {c.application!r} still runs another config (differs at {differences[0]})"
        if status == "DEPLOY_FAILED":
            # Serve's message names the deployments, not why their engines died: the workers' logs
            # do (a LIBFABRIC plugin that cannot load libfabric, no EFA device for FI_PROVIDER=efa),
            # so their root causes come first (seen on the local twin, docs/twin.md).
            if c.disaggregated:
                for reason in self._startup_failures():
                    self.report.fail(reason)
            self.report.fail(f"Serve application {c.application!r} failed to deploy the spec's config: "
                             f"{(app.get('message') or '')[:500]}")
            return False
        if status != "RUNNING":
            return f"Serve application {c.application!r} is {status}"
        return None

    def _startup_failures(self) -> list[str]:
        """What the worker logs of the active cluster say went wrong since the Serve deploy: the
        transport classifier's disqualifying lines only (a log without the startup lines proves
        nothing here, the engines never started)."""
        c = self.config
        deployed = self.application.get("last_deployed_time_s")
        since = _rfc3339(float(deployed) - LOG_SINCE_MARGIN_SECONDS) if deployed else None
        try:
            pods = self.kube.pods(c.namespace, {CLUSTER_LABEL: self.active_cluster, NODE_TYPE_LABEL: "worker"})
            logs = {p["metadata"]["name"]: self.kube.pod_log(c.namespace, p["metadata"]["name"], c.worker_container,
                                                            since=since) for p in pods}
        except (ApiError, NoClusterAccess) as error:
            return [f"cannot read the worker logs to say why the engines did not start: {error}"]
        result = evidence.classify_logs(logs, c.expected_backend, c.expected_provider, require_startup=False)
        return [r for r in result["reasons"] if r != "no worker logs to read"]

    def _job_running(self, name: str) -> bool:
        try:
            job = self.kube.job(self.config.namespace, name)
        except ApiError as error:
            if error.status == 404:
                return False  # gone: a later deploy's prune, or never created
            raise
        status = job.get("status") or {}
        finished = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        return not (finished & {"Complete", "Failed"} or status.get("succeeded") or status.get("failed"))

    def _dashboard_headers(self) -> dict[str, str]:
        """With token auth, the active RayCluster's token: KubeRay 1.5.1 keeps it in a Secret named
        after the cluster, key ``auth_token`` (``raycluster_controller.go``), and Ray accepts it as
        ``X-Ray-Authorization`` ("for proxies and KubeRay"), which the API server's proxy passes on."""
        if self.config.ray_auth != "token" or not self.active_cluster:
            return {}
        name = kuberay_check_name(self.active_cluster)
        secret = self.kube.get(f"/api/v1/namespaces/{self.config.namespace}/secrets/{name}")
        token = base64.b64decode((secret.get("data") or {}).get(RAY_AUTH_TOKEN_KEY, "")).decode()
        return {"X-Ray-Authorization": f"Bearer {token}"} if token else {}

    def _pods_waiting(self, namespace: str) -> str:
        """Why Ray pods of this service are not running yet (Pending, image pull, crash), for the report."""
        try:
            pods = self.kube.pods(namespace, {INSTANCE_LABEL: self.config.ray_service})
        except (ApiError, NoClusterAccess):
            return ""
        reasons = []
        for pod in pods:
            if CLUSTER_LABEL not in (pod.get("metadata") or {}).get("labels", {}):
                continue  # not a Ray pod (the EFA counter readers carry the instance label too)
            status = pod.get("status") or {}
            why = [f"{w['reason']}" + (f": {w.get('message', '')[:120]}" if w.get("message") else "")
                   for w in ((cs.get("state") or {}).get("waiting") or {} for cs in status.get("containerStatuses") or ())
                   if w.get("reason")]
            why += [f"{cond.get('reason')}: {cond.get('message', '')[:160]}" for cond in status.get("conditions") or ()
                    if cond.get("type") == "PodScheduled" and cond.get("status") == "False"]
            if why:
                reasons.append(f"{pod['metadata']['name']} {status.get('phase', '')} ({'; '.join(why)})")
        return "; ".join(reasons[:4])

    # --- 3: nodes, pods, engine -----------------------------------------------------------------------

    def check_nodes_and_pods(self, cluster: str) -> list[dict[str, Any]]:
        c = self.config
        nodes_report, pods_report, workers = [], [], []
        for role, expect in c.roles.items():
            pods = self._kube(self.kube.pods, c.namespace, {CLUSTER_LABEL: cluster, GROUP_LABEL: role})
            nodes = self._kube(self.kube.nodes, expect.node_selector)
            if expect.autoscaled:
                # Pods and nodes come and go: check the ready pods and the nodes they run on (a node
                # Cluster Autoscaler just added may not advertise its GPU and EFA yet, and one it is
                # about to remove runs no worker).
                pods = [p for p in pods if _pod_ready(p)]
                hosts = {(p.get("spec") or {}).get("nodeName") for p in pods}
                nodes = [n for n in nodes if n["metadata"]["name"] in hosts]
            for node in nodes:
                allocatable = (node.get("status") or {}).get("allocatable") or {}
                efa_count, gpu_count = _int(allocatable.get(EFA_RESOURCE)), _int(allocatable.get(GPU_RESOURCE))
                name = node["metadata"]["name"]
                nodes_report.append({"name": name, "role": role, "efa_allocatable": efa_count,
                                     "gpu_allocatable": gpu_count})
                if efa_count < 1:
                    self.report.fail(f"{role} node {name} has no allocatable {EFA_RESOURCE} (the EFA device plugin "
                                     "is not running there, or the instance has no EFA interface)")
                if gpu_count < expect.gpus_per_node:
                    self.report.fail(f"{role} node {name} has {gpu_count} allocatable {GPU_RESOURCE}, expected "
                                     f"{expect.gpus_per_node}")
            low, high = expect.pod_range
            if len(nodes) < low:
                self.report.fail(f"{len(nodes)} {role} node(s) found, expected {expect.describe()}")
            if not low <= len(pods) <= high:
                self.report.fail(f"{len(pods)} {role} worker pod(s) in {cluster}, expected {expect.describe()}")
            for pod in pods:
                workers.append(pod)
                pods_report.append(self._check_pod(pod, role))
        for head in self._kube(self.kube.pods, c.namespace, {CLUSTER_LABEL: cluster, NODE_TYPE_LABEL: "head"}):
            pods_report.append(self._check_pod(head, "head"))
            if c.autoscaled and not _container_running(head, AUTOSCALER_CONTAINER):
                # KubeRay watches only the Ray container; a dead sidecar would stop autoscaling silently.
                self.report.fail(f"the Ray autoscaler container of the head pod {head['metadata']['name']} is not "
                                 "running: the worker groups no longer scale (kubectl logs -c autoscaler)")
        self.report.sections["nodes"] = nodes_report
        self.report.sections["pods"] = pods_report
        return workers

    def _check_pod(self, pod: Mapping[str, Any], role: str) -> dict[str, Any]:
        c = self.config
        name = pod["metadata"]["name"]
        containers = (pod.get("spec") or {}).get("containers") or []
        main = next((x for x in containers if x.get("name") == c.worker_container), containers[0] if containers else {})
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        status = next((s for s in statuses if s.get("name") == main.get("name")), {})
        image_id = status.get("imageID", "")
        digest = image_id.rsplit("@", 1)[1] if "@" in image_id else None
        entry = {"name": name, "role": role, "node": (pod.get("spec") or {}).get("nodeName"),
                 "image": main.get("image"), "image_digest": digest,
                 "cluster_spec_hash": _annotation(pod, c.hash_annotation)}
        if main.get("image") != c.image:
            self.report.fail(f"pod {name} runs image {main.get('image')}, the deployed spec says {c.image}")
        if c.image_digest and digest and digest != c.image_digest:
            self.report.fail(f"pod {name} runs image digest {digest}, the deployed spec pins {c.image_digest}")
        if role != "head":
            env = {e.get("name"): e.get("value") for e in main.get("env") or ()}
            wrong = {k: env.get(k) for k, v in c.worker_env.items() if env.get(k) != v}
            entry["env_mismatches"] = wrong
            if wrong:
                self.report.fail(f"pod {name} environment differs from the spec: "
                                 + ", ".join(f"{k}={v!r} (expected {c.worker_env[k]!r})" for k, v in wrong.items()))
        return entry

    def check_engine(self) -> None:
        """Record the Serve application the wait loop found running the spec's config (Ray's
        ``GET /api/serve/applications/``: its ``deployed_app_config.args`` against the rendered ones)."""
        c = self.config
        app = self.application
        deployed_args = ((app.get("deployed_app_config") or {}).get("args")) or {}
        differences = _differences(c.serve_args, deployed_args)
        self.report.sections["engine"] = {
            "application": c.application, "status": app.get("status"), "matches_spec": not differences,
            "differences": differences[:20], "last_deployed_time_s": app.get("last_deployed_time_s"),
            "deployments": {name: d.get("status") for name, d in (app.get("deployments") or {}).items()},
        }
        if app.get("status") != "RUNNING":
            self.report.fail(f"Serve application {c.application!r} is {app.get('status')}, not RUNNING")
        if differences:
            self.report.fail(f"the deployed engine settings differ from the spec at {', '.join(differences[:5])}")

    # --- 4: probes and counters --------------------------------------------------------------------------

    def efa_counter_pods(self) -> list[dict[str, Any]]:
        return list(self._kube(self.kube.pods, self.config.namespace, self.config.efa_counter_selector))

    def read_efa(self, counter_pods: list[dict[str, Any]]) -> dict[str, efa.Counters]:
        readings: dict[str, efa.Counters] = {}
        for pod in counter_pods:
            node = (pod.get("spec") or {}).get("nodeName") or pod["metadata"]["name"]
            try:
                body = self.endpoints.get(self.endpoints.pod_url(pod, self.config.efa_counter_port, efa.COUNTER_PATH))
                readings[node] = json.loads(body)["counters"]
            except Exception as error:  # noqa: BLE001
                self.report.warnings.append(f"cannot read EFA counters on {node}: {error}")
        return readings

    def read_metrics(self, workers: list[dict[str, Any]]) -> dict[str, str]:
        """Each worker's ``/metrics`` body (Ray's metrics agent on the node)."""
        readings = {}
        for pod in workers:
            name = pod["metadata"]["name"]
            try:
                readings[name] = self.endpoints.get(self.endpoints.pod_url(pod, self.config.metrics_port,
                                                                           "/metrics")).decode()
            except Exception as error:  # noqa: BLE001
                self.report.warnings.append(f"cannot read metrics of {name}: {error}")
        return readings

    def record_window(self, workers: list[dict[str, Any]], texts: Mapping[str, str],
                      efa_counters: Mapping[str, efa.Counters]) -> None:
        """Keep this run's reading and report what was served since the previous run's.

        Read before the probes. A run that cannot read or keep its state fails: the serving
        metrics and their alarms would otherwise go quiet with nothing to say why. A previous
        reading that cannot be used (another schema, edited by hand) is replaced, with a warning."""
        c = self.config
        labels = {pod["metadata"]["name"]: (pod["metadata"].get("labels") or {}) for pod in workers}
        roles = {name: pod_labels.get(GROUP_LABEL, "") for name, pod_labels in labels.items()}
        created = {pod["metadata"]["name"]: _created(pod) for pod in workers}
        # EFA only on nodes that run a worker of this cluster: a node Cluster Autoscaler is about
        # to remove, or a surge node of a node group update, moves nothing and proves nothing.
        worker_nodes = {(pod.get("spec") or {}).get("nodeName"): roles[pod["metadata"]["name"]] for pod in workers}
        try:
            state = self._kube(self.kube.config_map, c.namespace, c.state_config_map)
        except Exception as error:  # noqa: BLE001
            self.report.fail(f"cannot read the state ConfigMap {c.state_config_map}, so the serving metrics "
                             f"cannot be computed: {error}")
            return
        previous: Any = None
        previous_text = (state.get("data") or {}).get(serving_window.STATE_KEY)
        if previous_text:
            try:
                previous = json.loads(previous_text)
                if not isinstance(previous.get("workers"), dict):
                    raise ValueError("no workers")
            except Exception as error:  # noqa: BLE001 - anything unusable is replaced below
                self.report.warnings.append(f"replaced an unusable previous reading in {c.state_config_map}: {error}")
                previous = None
        unread = {name: previous["workers"][name] for name in roles
                  if name not in texts and previous is not None and name in previous["workers"]}
        current = serving_window.snapshot(
            {pod: (roles.get(pod, ""), text, created.get(pod, 0.0)) for pod, text in texts.items()},
            {node: (worker_nodes[node], counters) for node, counters in efa_counters.items() if node in worker_nodes},
            cluster=self.active_cluster, carried=unread)
        if previous is not None:
            try:
                self.report.sections["window"] = serving_window.window(previous, current, c.disaggregated)
            except Exception as error:  # noqa: BLE001
                self.report.warnings.append(f"replaced an unusable previous reading in {c.state_config_map}: {error}")
        try:
            self._kube(self.kube.replace_config_map,
                       {**state, "data": {**(state.get("data") or {}), serving_window.STATE_KEY: json.dumps(current)}})
        except Exception as error:  # noqa: BLE001
            self.report.fail(f"cannot keep this run's reading in {c.state_config_map}, so the next run cannot "
                             f"compute its serving metrics: {error}")

    def run_probes(self) -> bool:
        """Send the probes, each bounded by the time left; False when the deadline cut them short."""
        c = self.config
        url = self.endpoints.service_url(c.openai_url, c.namespace)
        results = []
        reserve = c.post_probe_reserve_seconds if c.disaggregated else 0.0
        for index in range(c.probes):
            if self._remaining() - reserve <= 1.0:
                self.report.fail(f"the deadline passed after {index} of {c.probes} probes")
                break
            timeout = min(300.0, self._remaining() - reserve)
            results.append(probe.chat_probe(url, c.model, probe.probe_prompt(c.probe_prompt_words), c.probe_max_tokens,
                                            timeout=timeout, opener=self.endpoints.open))
        ok = [r for r in results if r.ok]
        self.report.sections["probes"] = {
            "count": len(results), "ok": len(ok),
            "ttft_ms_p50": _median([r.ttft_ms for r in ok]), "e2e_ms_p50": _median([r.e2e_ms for r in ok]),
            "via_api_server_proxy": self.endpoints.via_api_proxy,
            "results": [r.to_json() for r in results],
        }
        for index, result in enumerate(results):
            if not result.ok:
                self.report.fail(f"probe {index + 1} failed: {result.error}")
        return len(results) == c.probes

    # --- 5: transport --------------------------------------------------------------------------------------

    def check_transport_logs(self, workers: list[dict[str, Any]]) -> None:
        c = self.config
        # Only what the current replicas printed: after an in-place Serve redeploy the container log
        # still holds the previous replicas' lines (an old UCX warning, or an old EFA line that
        # would vouch for replicas that printed none).
        deployed = self.application.get("last_deployed_time_s")
        since = _rfc3339(float(deployed) - LOG_SINCE_MARGIN_SECONDS) if deployed else None
        if c.log_window_seconds is not None:
            window_start = time.time() - c.log_window_seconds
            since = _rfc3339(max(window_start, float(deployed) - LOG_SINCE_MARGIN_SECONDS) if deployed else window_start)
        logs = {}
        for pod in workers:
            name = pod["metadata"]["name"]
            try:
                logs[name] = self._kube(self.kube.pod_log, c.namespace, name, c.worker_container, since=since)
            except Exception as error:  # noqa: BLE001
                self.report.fail(f"cannot read the log of {name}: {error}")
        result = evidence.classify_logs(logs, c.expected_backend, c.expected_provider,
                                        require_startup=c.log_window_seconds is None)
        backends = {e["backend"] for e in result["by_source"].values()}
        providers = {e["provider"] for e in result["by_source"].values()}
        self.report.sections["transport"] = {
            "verdict": result["verdict"], "backend": _one(backends), "provider": _one(providers),
            "log_since": since, "by_pod": result["by_source"],
        }
        for reason in result["reasons"]:
            self.report.fail(reason)

    def check_kv(self, efa_before: Mapping[str, efa.Counters], efa_after: Mapping[str, efa.Counters],
                 nixl_before: Mapping[str, metrics.NixlTotals], nixl_after: Mapping[str, metrics.NixlTotals],
                 workers: list[dict[str, Any]]) -> None:
        """The EFA bytes against the prediction (the verdict), and vLLM's NIXL figures (failed
        transfers fail; the rest corroborate). NIXL's transfer series live on decode, which pulls the
        KV cache: prefill exports none, and a decode worker exports them from its first transfer."""
        c = self.config
        probes_json = self.report.sections.get("probes", {}).get("results", [])
        counted = [r for r in probes_json if r.get("ok")]
        uncounted = [i + 1 for i, r in enumerate(probes_json) if r.get("ok") and not r.get("prompt_tokens")]
        if uncounted:
            # Counting them as 0 tokens would lower the bar to the sequence state alone.
            self.report.fail(f"probe(s) {', '.join(map(str, uncounted))} reported no usage.prompt_tokens (the server "
                             "ignored stream_options.include_usage), so the KV bytes they moved cannot be predicted")
        predicted = sum(r["prompt_tokens"] * c.kv_bytes_per_token + c.kv_bytes_per_sequence
                        for r in counted if r.get("prompt_tokens"))
        role_of_node = {}
        for entry in self.report.sections.get("nodes", []):
            role_of_node[entry["name"]] = entry["role"]
        # A delta needs both readings: counting from zero would credit every byte since boot.
        read_twice = sorted(set(efa_before) & set(efa_after))
        by_node = {node: {"role": role_of_node.get(node), **efa.node_delta(efa_before[node], efa_after[node])}
                   for node in read_twice}
        sent = sum(d["sent_bytes"] for d in by_node.values() if d["role"] == "prefill")
        received = sum(d["received_bytes"] for d in by_node.values() if d["role"] == "decode")
        moved = min(sent, received)
        # Per series, never absolute totals: after a Serve redeploy the replaced replicas' series
        # stay exported, frozen, beside the new ones (metrics module docstring).
        roles = {pod["metadata"]["name"]: _label(pod, GROUP_LABEL) or "" for pod in workers}
        read_twice_pods = sorted(set(nixl_before) & set(nixl_after))
        nixl_by_pod = {pod: {"role": roles.get(pod, ""), "exports_transfers": nixl_after[pod].transfers_exported,
                             **metrics.nixl_delta(nixl_before[pod], nixl_after[pod])} for pod in read_twice_pods}
        nixl: dict[str, Any] = {**metrics.sum_deltas(nixl_by_pod.values()), "by_pod": nixl_by_pod}
        fraction = moved / predicted if predicted else None
        self.report.sections["kv"] = {
            "predicted_bytes": predicted,
            "kv_bytes_per_token": c.kv_bytes_per_token,
            "kv_bytes_per_sequence": c.kv_bytes_per_sequence,
            "efa_prefill_sent_bytes": sent, "efa_decode_received_bytes": received,
            "efa_moved_bytes": moved, "efa_fraction_of_predicted": round(fraction, 4) if fraction is not None else None,
            "min_fraction": c.min_kv_fraction,
            "efa_by_node": by_node,
            "nixl": nixl,
            "nixl_fraction_of_predicted": (round(nixl["bytes_transferred"] / predicted, 4)
                                           if predicted and nixl["bytes_transferred"] is not None else None),
        }
        prefill_nodes = {n for n, r in role_of_node.items() if r == "prefill"}
        decode_nodes = {n for n, r in role_of_node.items() if r == "decode"}
        missing = sorted((prefill_nodes | decode_nodes) - set(read_twice))
        if missing:
            self.report.fail(f"no EFA counter reading before and after the probes from {', '.join(missing)} "
                             "(is the efa-counters DaemonSet running there?)")
        if not predicted:
            self.report.fail("no successful probe reported its prompt tokens, so the KV bytes cannot be predicted")
        elif fraction is not None and fraction < c.min_kv_fraction:
            self.report.fail(f"EFA counters moved {moved} bytes (prefill sent {sent}, decode received {received}) "
                             f"across the probes, {fraction:.1%} of the {predicted} KV bytes predicted; at least "
                             f"{c.min_kv_fraction:.0%} must cross EFA")
        if nixl["failed_transfers"]:
            self.report.fail(f"vLLM counted {nixl['failed_transfers']:.0f} failed NIXL transfer(s) during the probes")
        if nixl["failed_notifications"]:
            self.report.warnings.append(
                f"vLLM counted {nixl['failed_notifications']:.0f} failed NIXL notification(s) during the probes: decode "
                "read the KV cache but could not tell prefill, which holds those blocks until their lease expires "
                "(the side-channel ports and the EFA security group between the pods)")
        if nixl["kv_expired_reqs"]:
            self.report.warnings.append(
                f"prefill freed the KV cache of {nixl['kv_expired_reqs']:.0f} request(s) at its lease's end during the "
                "probes (vllm:nixl_num_kv_expired_reqs): decode never confirmed reading it, a lost notification or a "
                "request decode did not pull (possibly from before the probes)")
        self._warn_missing_nixl(nixl_by_pod, roles)

    def _warn_missing_nixl(self, nixl_by_pod: Mapping[str, Mapping[str, Any]], roles: Mapping[str, str]) -> None:
        """vLLM's NIXL byte count corroborates the EFA counters, which are the proof: its absence is a
        warning. Decode pulls the KV cache, so only decode workers export it (prefill's silence is
        expected), and only from their first transfer; after successful probes, no decode worker
        exporting it means the KV cache was not counted by NIXL (or Ray's agent does not export it)."""
        ok = self.report.sections.get("probes", {}).get("ok") or 0
        decode = sorted(pod for pod, role in roles.items() if role == "decode")
        unread = [pod for pod in decode if pod not in nixl_by_pod]
        silent = [pod for pod in decode if pod in nixl_by_pod and not nixl_by_pod[pod]["exports_transfers"]]
        # A decode worker that was not read is already a warning ("cannot read metrics of ..."); one
        # that exports the series while another does not may simply have served every probe.
        if ok and silent and len(silent) + len(unread) == len(decode):
            self.report.warnings.append(
                f"no decode worker exports ray_vllm_nixl_bytes_transferred after {ok} successful probe(s) "
                f"({', '.join(silent)}): NIXL's own count of the KV bytes is missing (the EFA counters are the proof; "
                "check the worker's metrics on port 8080 and that the engines run the NixlConnector)")


# --- small helpers ----------------------------------------------------------------------------------------

def _epoch(stamp: str) -> float:
    """Seconds since the epoch of a Kubernetes RFC 3339 timestamp (``2026-11-30T21:03:46Z``)."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _container_running(pod: Mapping[str, Any], name: str) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s.get("name") == name and "running" in (s.get("state") or {}) for s in statuses)


def _label(obj: Mapping[str, Any], key: str) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(key)


def _created(pod: Mapping[str, Any]) -> float:
    try:
        return _epoch(pod["metadata"]["creationTimestamp"])
    except (KeyError, TypeError, ValueError):
        return 0.0  # unknown: treated as older than any reading


def _rfc3339(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _template_hashes(service: Mapping[str, Any], key: str) -> set[str]:
    config = (service.get("spec") or {}).get("rayClusterConfig") or {}
    templates = [((config.get("headGroupSpec") or {}).get("template") or {})]
    templates += [(g.get("template") or {}) for g in config.get("workerGroupSpecs") or ()]
    return {((t.get("metadata") or {}).get("annotations") or {}).get(key) for t in templates} - {None}


def _annotation(obj: Mapping[str, Any], key: str) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(key)


def _condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or ())


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and _condition_true(pod, "Ready")


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _median(values: list[float | None]) -> float | None:
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    middle = len(present) // 2
    value = present[middle] if len(present) % 2 else (present[middle - 1] + present[middle]) / 2
    return round(value, 1)


def _one(values: set[Any]) -> Any:
    present = values - {None}
    return next(iter(present)) if len(present) == 1 else (sorted(present) if present else None)


def _differences(expected: Any, actual: Any, path: str = "args") -> list[str]:
    """Paths where ``actual`` differs from ``expected``; keys only in ``actual`` are Ray's defaults and ignored."""
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return [path]
        found: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                found.append(f"{path}.{key}")
            else:
                found.extend(_differences(value, actual[key], f"{path}.{key}"))
        return found
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [path]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in _differences(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [path]




def kuberay_check_name(name: str) -> str:
    """The name KubeRay gives an object derived from ``name`` (v1.5.1 ``utils.CheckName``, which
    names the token Secret after the RayCluster): its last 50 characters, and an ``r`` for a
    leading digit or punctuation."""
    if len(name) > 50:
        name = name[len(name) - 50:]
    if name and (name[0].isdigit() or not name[0].isalnum()):
        name = "r" + name[1:]
    return name


def deployed_settings(kube: Kube, namespace: str, ray_service: str) -> dict[str, Any]:
    """The gate settings of the spec the RayService now carries, from the ConfigMap the deploy applied.

    Raises LookupError when the cluster holds none (not deployed by ray-llm-eks, or another name).
    """
    service = kube.ray_service(namespace, ray_service)
    if service is None:
        raise LookupError(f"no RayService {namespace}/{ray_service} in the cluster")
    candidates = kube.config_maps(namespace, {COMPONENT_LABEL: SETTINGS_COMPONENT, INSTANCE_LABEL: ray_service})
    # Newest first: two runs that changed only the Serve config share a cluster hash.
    candidates.sort(key=lambda c: (c.get("metadata") or {}).get("creationTimestamp", ""), reverse=True)
    settings = [json.loads((c.get("data") or {}).get(SETTINGS_FILE, "{}")) for c in candidates]
    for candidate in settings:
        if {candidate.get("cluster_spec_hash")} == _template_hashes(service, candidate.get("hash_annotation", "")):
            return candidate
    raise LookupError(f"no gate settings in {namespace} match the RayService {ray_service} "
                      f"({len(settings)} found): was it deployed by ray-llm-eks, and has its gate Job been applied?")
