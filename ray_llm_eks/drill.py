"""Drills: one fault against a running deployment under light load, and what it cost.

``ray-llm-eks drill SCENARIO`` (and :func:`run_drill`, which the twin's tests call on the real
serving stack) sends one chat completion at a time to the deployment's OpenAI endpoint, waits
until it is answered, applies the fault through the Kubernetes API, and measures:

- the requests that failed, from the fault until the drill ends;
- the time from the fault to the first success after the outage;
- the time from the fault until the deployment gate (read-only, as ``verify`` runs it) passes again;
- the model's reload: vLLM's own ``Loading weights took`` and ``init engine ... took`` figures
  from the logs of the worker pods that started an engine after the fault.

The faults are those a cluster operator meets: a worker pod deleted (KubeRay recreates it and
Serve restarts the replica on it), the head pod deleted (without GCS fault tolerance the workers'
raylets exit and restart, and KubeRay resubmits the Serve config: ``rayservice_controller.go``
@v1.4.0 lines 804-809, "the head Pod crashed and GCS FT was not enabled"), and a GPU node drained
as ``kubectl drain`` does (cordon, then the Eviction API, so PodDisruptionBudgets apply).
The RBAC it needs is :data:`REQUIRED_RBAC` (docs/verification.md, "Drills").
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from .verification import objects
from .verification.kube import ApiError, Endpoints, Kube, NoClusterAccess
from .verification.probe import chat_probe
from .verification.report import PASS
from .verification.shared import wire

if TYPE_CHECKING:
    import os

    from .base.deployment import Deployment
    from .base.specs import Specs
    from .base.serving import ServingSpec

Clock = Callable[[], float]


class GateOutcome(Protocol):
    """What the drill reads of a gate run: the gate's :class:`~.verification.report.Report`, or the
    twin's run of the rendered gate program."""

    @property
    def verdict(self) -> str: ...

    @property
    def reasons(self) -> list[str]: ...


@dataclass(frozen=True)
class Scenario:
    name: str
    action: str
    """``delete-pod`` or ``drain-node``."""
    role: str | None
    """The worker role whose pod (or node) the fault hits; None: the head."""
    summary: str


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("delete-decode-worker", "delete-pod", "decode",
             "delete the decode worker pod; KubeRay recreates it and Serve restarts the decode replica"),
    Scenario("delete-prefill-worker", "delete-pod", "prefill",
             "delete the prefill worker pod; KubeRay recreates it and Serve restarts the prefill replica"),
    Scenario("delete-head", "delete-pod", None,
             "delete the head pod; without GCS fault tolerance the workers restart and KubeRay resubmits "
             "the Serve config"),
    Scenario("drain-gpu-node", "drain-node", "decode",
             "cordon the decode worker's node and evict its pods (PodDisruptionBudgets apply); uncordon it "
             "once its worker runs elsewhere or after --cordon-seconds"),
)}

REQUIRED_RBAC: tuple[tuple[str, str, str], ...] = (
    ("ray.io", "rayservices, rayclusters", "get"),
    ("", "pods", "get, list, delete (delete-* scenarios)"),
    ("", "pods/log", "get"),
    ("", "pods/eviction", "create (drain-gpu-node)"),
    ("", "nodes", "list, patch (drain-gpu-node: cordon and uncordon)"),
    ("", "configmaps", "get, list (the deployed gate settings)"),
    ("apps", "daemonsets", "get (the gate's EFA counter readers' DaemonSet)"),
    ("", "services/proxy, pods/proxy", "get, create (the load and the gate's probes, from a workstation)"),
    ("networking.k8s.io", "networkpolicies", "create, delete (admit the API server for the run, as verify)"),
)
"""(API group, resources, verbs): what the drill asks of the API server. A cluster operator's
role (for example EKS's ``AmazonEKSClusterAdminPolicy`` access policy, or ``admin`` in the serving
namespace plus ``nodes`` patch cluster-wide) has it; ``view`` does not."""

WEIGHTS_LOADED = re.compile(r"Loading weights took (?P<seconds>[0-9.]+) seconds")
"""vLLM's ``model_executor/model_loader/default_loader.py`` (0.27), once per engine worker."""
ENGINE_STARTED = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[0-9.]+) s")
"""vLLM's ``v1/engine/core.py`` (0.27): the engine start after the weights are read."""
MODEL_LOADED = re.compile(r"Model loading took (?P<gib>[0-9.]+) GiB(?: memory)? and (?P<seconds>[0-9.]+) seconds")
"""vLLM's GPU model runner (``v1/worker/gpu_model_runner.py``, 0.27): weights and model build together."""


class DrillError(RuntimeError):
    """The drill cannot start (the deployment does not serve, the target is missing) or its fault failed."""


@dataclass
class Sample:
    started_s: float
    """Since the drill's start."""
    ended_s: float
    ok: bool
    error: str | None = None


@dataclass
class EngineReload:
    pod: str
    role: str
    weights_load_s: float | None
    engine_init_s: float | None

    @property
    def total_s(self) -> float | None:
        parts = [p for p in (self.weights_load_s, self.engine_init_s) if p is not None]
        return sum(parts) if parts else None


@dataclass
class DrillResult:
    scenario: str
    target: str
    """The pod deleted, or the node drained."""
    requests: int
    failed: int
    failed_before_fault: int
    first_failure_s: float | None
    """From the fault to the end of the first failed request; None: no request failed."""
    first_success_s: float | None
    """From the fault to the first success after the outage, the longest run of failed requests
    (:func:`recovery`); with no failure, the first success of a request sent after the fault.
    None: the outage had not ended when the drill did."""
    pod_replaced_s: float | None
    """From the fault until the target's replacement pod was Ready (None: the head drill, or never)."""
    gate_pass_s: float | None
    gate_runs: int
    gate_reasons: list[str]
    """The last failing gate run's reasons, when the gate never passed."""
    reloads: list[EngineReload]
    errors: list[str]
    """The distinct errors of the failed requests, the first few."""
    notes: list[str] = field(default_factory=list)
    timeline: list[tuple[float, float, bool]] = field(default_factory=list)
    """Every request as (sent, answered, succeeded), in seconds from the fault: the figures above
    can be recomputed from it."""

    @property
    def model_reload_s(self) -> float | None:
        """The slowest weight load after the fault: the reload on the recovery's critical path."""
        loads = [r.weights_load_s for r in self.reloads if r.weights_load_s is not None]
        return max(loads) if loads else None

    @property
    def passed(self) -> bool:
        return self.first_success_s is not None and self.gate_pass_s is not None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["model_reload_s"] = self.model_reload_s
        data["reloads"] = [{**asdict(r), "total_s": r.total_s} for r in self.reloads]
        return data


def recovery(samples: list[Sample], fault_s: float) -> tuple[float | None, float | None]:
    """(first failure, end of the outage) since ``fault_s``, each measured to the end of a request.

    The outage is the longest run of consecutive failed requests after the fault (from the first
    one's start to the last one's end); it ends with the success that follows it. A lone failure
    before it (a request cut when the head went) or after it (one request of a still-loaded
    deployment) is counted in ``failed``, not taken for the outage; a lone success inside it does
    not end it. With no failure, the end is the first success of a request sent after the fault;
    with an outage that never ended, None. The load sends one request at a time, so requests do
    not overlap."""
    after = sorted((s for s in samples if s.ended_s >= fault_s), key=lambda s: s.ended_s)
    if not any(not s.ok for s in after):
        success = next((s for s in after if s.ok and s.started_s >= fault_s), None)
        return None, (round(success.ended_s - fault_s, 3) if success else None)
    runs: list[list[Sample]] = []
    for previous, sample in zip([None, *after], after):
        if not sample.ok:
            if previous is None or previous.ok:
                runs.append([])
            runs[-1].append(sample)
    outage = max(runs, key=lambda run: run[-1].ended_s - run[0].started_s)
    success = next((s for s in after if s.ok and s.started_s >= outage[-1].ended_s), None)
    first_failure = next(s for s in after if not s.ok)
    return (round(first_failure.ended_s - fault_s, 3),
            round(success.ended_s - fault_s, 3) if success else None)


def engine_reloads(log: str) -> tuple[float | None, float | None]:
    """(weights load, engine init) seconds from a worker's log; the last of each (the newest engine)."""
    weights = [float(m["seconds"]) for m in WEIGHTS_LOADED.finditer(log)]
    if not weights:
        weights = [float(m["seconds"]) for m in MODEL_LOADED.finditer(log)]
    engines = [float(m["seconds"]) for m in ENGINE_STARTED.finditer(log)]
    return (weights[-1] if weights else None), (engines[-1] if engines else None)


class Load:
    """One request at a time, ``interval_s`` apart at most, until :meth:`stop`: light load, so a
    failure is the fault's and not the load's."""

    def __init__(self, send: Callable[[], tuple[bool, str | None]], *, interval_s: float, clock: Clock) -> None:
        self.send, self.interval_s, self.clock = send, interval_s, clock
        self.origin = clock()
        self.samples: list[Sample] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> float:
        return self.clock() - self.origin

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=300)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.now()
            ok, error = self.send()
            with self.lock:
                self.samples.append(Sample(round(started, 3), round(self.now(), 3), ok, error))
            self._stop.wait(max(0.0, self.interval_s - (self.now() - started)))

    def snapshot(self) -> list[Sample]:
        with self.lock:
            return list(self.samples)

    def wait_for_success(self, after_s: float, timeout_s: float) -> bool:
        """A success of a request sent at ``after_s`` or later."""
        return self._wait(lambda: any(s.ok and s.started_s >= after_s for s in self.snapshot()), timeout_s)

    def wait_for_recovery(self, fault_s: float, timeout_s: float) -> bool:
        """A success after the outage the fault caused, so far (:func:`recovery`): a success sent
        after the fault but before its first failure (an eviction a budget delays) is not it. A
        later failure moves the outage's end; the figures are taken at the drill's end."""
        return self._wait(lambda: recovery(self.snapshot(), fault_s)[1] is not None, timeout_s)

    def _wait(self, done: Callable[[], bool], timeout_s: float) -> bool:
        deadline = self.now() + timeout_s
        while self.now() < deadline:
            if done():
                return True
            time.sleep(0.2)
        return False


@dataclass
class Drill:
    """A drill against the deployment that ``settings`` (its deployed gate settings) describe.

    ``gate``: runs the read-only gate once and returns its report (the CLI: through the API
    server's proxy; the twin: from the client namespace)."""

    settings: wire.GateSettings
    kube: Kube
    endpoints: Endpoints
    gate: Callable[[], GateOutcome]
    interval_s: float = 1.0
    request_timeout_s: float = 60.0
    timeout_s: float = 900.0
    """How long the deployment may take to serve again, and the gate to pass, after the fault."""
    cordon_seconds: float = 300.0
    poll_s: float = 1.0
    """Between reads of the pods (the replacement, the node to uncordon at twice this)."""
    retry_s: float = 5.0
    """Between gate runs, and between evictions a PodDisruptionBudget refused."""
    clock: Clock = time.monotonic
    log: Callable[[str], None] = lambda message: None

    def run(self, scenario: Scenario) -> DrillResult:
        c = self.settings
        if scenario.role is not None and scenario.role not in c.roles:
            raise DrillError(f"scenario {scenario.name} needs a {scenario.role} role; this deployment ({c.topology}) "
                             f"has {', '.join(sorted(c.roles))}")
        cluster = self._active_cluster()
        target = self._target_pod(cluster, scenario)
        load = Load(self._send, interval_s=self.interval_s, clock=self.clock).start()
        notes: list[str] = []
        try:
            if not load.wait_for_success(0.0, min(self.timeout_s, 300.0)):
                raise DrillError(f"the deployment does not serve before the fault: {self._errors(load.snapshot())}")
            fault_s, fault_epoch = load.now(), time.time()
            if scenario.action == "delete-pod":
                self.log(f"deleting pod {target['metadata']['name']}")
                self._delete_pod(target)
                target_name = target["metadata"]["name"]
            else:
                target_name = str(target["spec"].get("nodeName"))
                notes += self._drain(target_name, target, load)
            replaced = None
            if scenario.role is not None:
                replaced = self._wait_for_replacement(target, scenario.role, load, fault_s)
            load.wait_for_recovery(fault_s, max(0.0, self.timeout_s - (load.now() - fault_s)))
            gate_pass, runs, reasons = self._gate_until_pass(load, fault_s)
            # The gate's own probes may see the service back before the load's next request does.
            load.wait_for_recovery(fault_s, max(0.0, self.timeout_s - (load.now() - fault_s)))
        finally:
            load.stop()
        samples = load.snapshot()
        first_failure, first_success = recovery(samples, fault_s)
        return DrillResult(
            scenario=scenario.name, target=target_name, requests=len(samples),
            failed=sum(not s.ok for s in samples if s.ended_s >= fault_s),
            failed_before_fault=sum(not s.ok for s in samples if s.ended_s < fault_s),
            first_failure_s=first_failure, first_success_s=first_success, pod_replaced_s=replaced,
            gate_pass_s=gate_pass, gate_runs=runs, gate_reasons=reasons,
            reloads=self._reloads(fault_epoch), errors=self._errors(samples), notes=notes,
            timeline=[(round(x.started_s - fault_s, 3), round(x.ended_s - fault_s, 3), x.ok) for x in samples])

    # --- the deployment ------------------------------------------------------------------------

    def _active_cluster(self) -> str:
        c = self.settings
        service = self.kube.ray_service(c.namespace, c.ray_service)
        name = ((service or {}).get("status") or {}).get("activeServiceStatus", {}).get("rayClusterName")
        if not name:
            raise DrillError(f"RayService {c.namespace}/{c.ray_service} has no active RayCluster: nothing serves")
        return str(name)

    def _cluster_pods(self, cluster: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return self.kube.ray_cluster_pods(self.settings.namespace, cluster, selector)

    def _target_pod(self, cluster: str, scenario: Scenario) -> dict[str, Any]:
        selector = ({wire.RAY_NODE_TYPE_LABEL: "head"} if scenario.role is None
                    else {wire.RAY_GROUP_LABEL: scenario.role})
        pods = sorted((p for p in self._cluster_pods(cluster, selector) if objects.pod_ready(p)),
                      key=lambda p: p["metadata"]["name"])
        if not pods:
            what = "head" if scenario.role is None else f"{scenario.role} worker"
            raise DrillError(f"RayCluster {cluster} has no Ready {what} pod to fault")
        return pods[0]

    def _send(self) -> tuple[bool, str | None]:
        c = self.settings
        prompt = f"Drill {uuid.uuid4().hex}. Reply with one short sentence."
        result = chat_probe(self.endpoints.service_url(c.openai_url, c.namespace), c.model, prompt, 8,
                            timeout=self.request_timeout_s, opener=self.endpoints.open)
        return result.ok, result.error

    # --- faults ----------------------------------------------------------------------------------

    def _delete_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        self.kube.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")

    def _drain(self, node: str, target: Mapping[str, Any], load: Load) -> list[str]:
        """``kubectl drain``: cordon, then evict every pod on the node but DaemonSets' (a 429 is a
        PodDisruptionBudget saying not yet: retried until the timeout)."""
        self._cordon(node, True)
        notes = [f"cordoned {node}"]
        pods = self.kube.get("/api/v1/pods", fieldSelector=f"spec.nodeName={node}")["items"]
        evicted = []
        for pod in pods:
            if any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or ()):
                continue
            self._evict(pod, load)
            evicted.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        notes.append(f"evicted {', '.join(evicted) or 'nothing'}")
        threading.Thread(target=self._uncordon_later, args=(node, target, load), daemon=True).start()
        return notes

    def _evict(self, pod: Mapping[str, Any], load: Load) -> None:
        meta = pod["metadata"]
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
        deadline = load.now() + self.timeout_s
        while True:
            try:
                self.kube.request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction",
                                  body=body)
                return
            except ApiError as error:
                if error.status == 404:
                    return
                if error.status != 429 or load.now() > deadline:
                    raise DrillError(f"cannot evict {meta['namespace']}/{meta['name']}: {error}") from None
            time.sleep(self.retry_s)

    def _cordon(self, node: str, unschedulable: bool) -> None:
        self.kube.request("PATCH", f"/api/v1/nodes/{node}", body={"spec": {"unschedulable": unschedulable}},
                          content_type="application/merge-patch+json")

    def _uncordon_later(self, node: str, target: Mapping[str, Any], load: Load) -> None:
        """A fixed-size node group has no other node for the worker: after ``cordon_seconds`` the node
        comes back (as a replaced node would), unless the worker already runs elsewhere."""
        started = load.now()
        role = objects.label(target, wire.RAY_GROUP_LABEL) or ""
        while load.now() - started < self.cordon_seconds:
            try:
                pods = self._cluster_pods(self._active_cluster(), {wire.RAY_GROUP_LABEL: role})
            except (ApiError, NoClusterAccess, DrillError):
                pods = []
            if any(objects.pod_ready(p) and p["spec"].get("nodeName") != node for p in pods):
                break
            time.sleep(2 * self.poll_s)
        try:
            self._cordon(node, False)
            self.log(f"uncordoned {node}")
        except (ApiError, NoClusterAccess) as error:
            self.log(f"cannot uncordon {node}: {error}; run `kubectl uncordon {node}`")

    # --- recovery ----------------------------------------------------------------------------

    def _wait_for_replacement(self, target: Mapping[str, Any], role: str, load: Load, fault_s: float) -> float | None:
        uid = target["metadata"].get("uid") or target["metadata"]["name"]
        while load.now() - fault_s < self.timeout_s:
            try:
                pods = self._cluster_pods(self._active_cluster(), {wire.RAY_GROUP_LABEL: role})
            except (ApiError, NoClusterAccess, DrillError):
                pods = []
            if any(objects.pod_ready(p) and (p["metadata"].get("uid") or p["metadata"]["name"]) != uid for p in pods):
                return round(load.now() - fault_s, 3)
            time.sleep(self.poll_s)
        return None

    def _gate_until_pass(self, load: Load, fault_s: float) -> tuple[float | None, int, list[str]]:
        runs, reasons = 0, []
        while load.now() - fault_s < self.timeout_s:
            runs += 1
            report = self.gate()
            if report.verdict == PASS:
                return round(load.now() - fault_s, 3), runs, []
            reasons = list(report.reasons)
            self.log(f"gate run {runs}: {report.verdict}: {'; '.join(reasons)[:300]}")
            time.sleep(self.retry_s)
        return None, runs, reasons

    def _reloads(self, fault_epoch: float) -> list[EngineReload]:
        """vLLM's figures from each worker pod's log since the fault (the kubelet's ``sinceTime``)."""
        c = self.settings
        reloads = []
        try:
            cluster = self._active_cluster()
            workers = self._cluster_pods(cluster, {wire.RAY_NODE_TYPE_LABEL: "worker"})
        except (ApiError, NoClusterAccess, DrillError):
            return []
        for pod in sorted(workers, key=lambda p: p["metadata"]["name"]):
            try:
                text = self.kube.pod_log(c.namespace, pod["metadata"]["name"], c.worker_container,
                                         since=objects.rfc3339(fault_epoch))
            except (ApiError, NoClusterAccess):
                continue
            weights, engine = engine_reloads(text)
            if weights is not None or engine is not None:
                reloads.append(EngineReload(pod["metadata"]["name"], objects.label(pod, wire.RAY_GROUP_LABEL) or "",
                                            weights, engine))
        return reloads

    @staticmethod
    def _errors(samples: list[Sample], limit: int = 5) -> list[str]:
        seen: list[str] = []
        for sample in samples:
            if sample.error and sample.error[:200] not in seen:
                seen.append(sample.error[:200])
        return seen[:limit]


def result_json(result: DrillResult) -> str:
    return json.dumps(result.to_json(), indent=2)


def drill_deployment(deployment: Deployment | Specs | ServingSpec, scenario: str, *,
                     kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None,
                     namespace: str | None = None, service: str | None = None, interval_s: float = 1.0,
                     timeout_s: float = 900.0, cordon_seconds: float = 300.0, expected_provider: str | None = None,
                     pace: Mapping[str, float] | None = None,
                     log: Callable[[str], None] = lambda message: None) -> DrillResult:
    """``ray-llm-eks drill``: :class:`Drill` from a workstation, against the deployment in the cluster
    ``kubeconfig`` and ``context`` reach, with the local configuration's gate settings (refused when
    the cluster's copy differs; ``ray_llm_eks.verify.deployed_gate``). The load and the
    gate go through the API server's proxy (admitted for the run, as ``verify``), so their latencies
    include it.

    :raises KeyError: no such scenario (:data:`SCENARIOS`).
    :raises DrillError: the deployment does not serve before the fault, or the fault cannot be applied.
    """
    from .verification.gate import Gate
    from .verify import deployed_gate, proxied

    chosen = SCENARIOS[scenario]
    kube, settings = deployed_gate(deployment, kubeconfig=kubeconfig, context=context, namespace=namespace,
                                   service=service, timeout_s=min(timeout_s, 600.0),
                                   expected_provider=expected_provider, pace=pace)
    endpoints = Endpoints(kube, via_api_proxy=True)
    # ``pace``'s poll_seconds (a cluster that answers at once) also paces the drill's own reads and retries.
    poll = (pace or {}).get("poll_seconds")
    waits = {} if poll is None else {"poll_s": poll, "retry_s": poll}
    with proxied(kube, settings, log=log):
        drill = Drill(settings, kube, endpoints, gate=lambda: Gate(settings, kube, endpoints, log=log).run(),
                      interval_s=interval_s, timeout_s=timeout_s, cordon_seconds=cordon_seconds, log=log, **waits)
        return drill.run(chosen)
