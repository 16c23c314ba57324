"""The twin profile: the one transformation from a rendered deployment to the local twin.

The twin runs what ``make synth`` renders, not a hand-written copy: the RayService's
``serveConfigV2``, each group's ``rayStartParams`` and the Ray container's environment, and the
deployment gate's settings. A machine with no GPU, no EFA device and no Kubernetes needs a few
of those values changed. Every change is made here and listed, with its reason, in
:data:`CHANGES`, which ``make twin`` prints and docs/twin.md explains.

Everything else (the engine arguments, the NIXL backends, the side-channel port bases, the role
resources, the placement strategy, the replica counts, the other environment variables, the
probes and thresholds of the gate) runs as rendered. The traps of ``make test-twin`` change what
they deploy on top of this; the one change they share is here too (:data:`TRAP_CHANGES`,
:func:`failing_at_first_start`). The standard library and PyYAML only.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..base.units import MIB
from ..base import wire

ROLES = ("prefill", "decode")
TWIN_PROVIDER = "tcp"
NODE_CPUS = 3
OBJECT_STORE_BYTES = 256 * MIB
KV_CACHE_SPACE_GIB = 1
HEAD_PORT = 6379
DASHBOARD_PORT = 8265
GATE_DEADLINE_SECONDS = 900.0
GATE_POLL_SECONDS = 2.0
"""How often the gate reads the RayService on the twin (``poll_seconds``, 10 s as rendered). The
twin's API stand-in answers from this machine with Serve's state as the head reports it, so the
gate looks as often as KubeRay requeues (``ServiceDefaultRequeueDuration``, 2 s), and a Serve
status is still believed only once it held ``serve_settle_seconds`` (6 s, as rendered)."""

METRICS_REPORT_INTERVAL_MS = 2000
"""How often each Ray process exports its metrics to its node's ``/metrics`` on the twin
(``RAY_metrics_report_interval_ms``; Ray 2.58's default is 10,000, floored at 1,000 by
``src/ray/stats/stats.h`` ``SetReportInterval``, as ``_private/telemetry/open_telemetry_metric_recorder.py:95-115``
mirrors). Every wait for a figure to appear there is sized to this period: the gate's
:data:`GATE_METRICS_SETTLE_SECONDS`, the tests' :data:`METRICS_QUIET_SECONDS`, the bench's
:data:`BENCH_METRICS_FLUSH_SECONDS`."""
GATE_METRICS_SETTLE_SECONDS = 5.0
"""The gate's wait for the probes' metrics (``metrics_settle_seconds``, 15 s rendered: 1.5 export
periods of 10 s); 2.5 periods of :data:`METRICS_REPORT_INTERVAL_MS` here."""
METRICS_QUIET_SECONDS = 4.0
"""How long a counter must stay unchanged before a twin test believes every request is counted:
two export periods (a test used 12 s with Ray's 10 s)."""
BENCH_METRICS_FLUSH_SECONDS = 4.0
"""``bench --metrics-flush-s`` on the twin: two export periods (the bench's default is 12 s for 10 s)."""

CHANGES: tuple[tuple[str, str], ...] = (
    ("serve: model_loading_config.model_source", "the tiny model built on this machine, never a hub download"),
    ("serve: accelerator_type removed", "Ray 2.58 refuses an accelerator type on the CPU (llm_config.py)"),
    ("serve: bundles GPU -> CPU", "one CPU per engine worker instead of a GPU; the role resource stays"),
    ("serve: kv_transfer_config.kv_buffer_device cpu", "vLLM's NixlConnector on the CPU platform takes only the host "
     "buffer (the rendered default without GPUDirect RDMA already; a P-series render says cuda)"),
    ("ray start: num-gpus 0, num-cpus 3", "no GPU; the replica actor, its engine worker and an ingress replica (the head advertises 0 CPUs as rendered)"),
    ("ray start: object-store-memory 256 MiB", "three Ray nodes and two engines share 24 GiB"),
    ("env: FI_PROVIDER efa -> tcp", "no EFA device: libfabric's tcp provider over the node's veth"),
    ("env: LD_LIBRARY_PATH", "libfabric 2.x, the CUDA runtime and a libcuda.so.1 stub for NIXL's LIBFABRIC plugin"),
    ("env: LD_PRELOAD", "NIXL's LIBFABRIC progress thread waits up to 1 ms for its idle sockets (progress_idle.c): "
     "it polls without pause, one core per engine, and the twin's two cores run two engines and all else"),
    ("env: HF_HOME, HF_HUB_CACHE", "the run's own folder instead of the node's host path"),
    ("env: VLLM_CPU_KVCACHE_SPACE, VLLM_CPU_OMP_THREADS_BIND", "vLLM's CPU KV pool in GiB; one core per engine"),
    ("env: RAY_metrics_report_interval_ms 2000", "every Ray node exports its metrics every 2 s instead of 10 s, so each "
     "wait for the probes' or the bench's figures is 2 export periods instead of 10 s and more (METRICS_REPORT_INTERVAL_MS)"),
    ("serve: runtime_env.py_modules file://", "with disaggregation.min_prompt_tokens: the conditional P/D archive "
     "from the rendered ConfigMap, written to the run's folder, instead of the Ray pods' mount (pd_program_for_twin)"),
    ("gate: openai_url", "the head node's address in the twin's network"),
    ("gate: serve_args, worker_env", "what this profile changed, which the gate compares with what runs"),
    ("gate: expected_provider tcp", "the provider the twin's links offer"),
    ("gate: as_deploy_job false, deadline_seconds", "no Job, no wait condition; bounded for a local run"),
    ("gate: metrics_settle_seconds 5", "the gate waits 2.5 of the twin's 2 s export periods for the probes' metrics "
     "(15 s rendered: 1.5 of Ray's 10 s periods)"),
    ("gate: poll_seconds 2", "the API stand-in answers from this machine: the gate reads the RayService as often as "
     "KubeRay requeues (2 s) instead of every 10 s; a Serve status must still hold 6 s before it is believed"),
)

TRAP_CHANGES: tuple[tuple[str, str], ...] = (
    ("serve: deployment_config.max_constructor_retry_count 1 (the traps whose engines cannot start)",
     "Ray Serve retries a replica that fails to start min(20, 3 x replicas) times before the application is "
     "DEPLOY_FAILED (Ray 2.58 deployment_state.py _failed_to_start_threshold), about 40 s an engine start on the "
     "twin; the first failure already wrote the root cause the gate reads in the worker logs"),
)
"""What :func:`failing_at_first_start` changes in a trap's Serve config (docs/twin.md lists it)."""


@dataclass(frozen=True)
class Paths:
    """Where the twin's own files are on this machine."""

    model: str
    library_path: str
    """``LD_LIBRARY_PATH`` for the Ray nodes: libfabric, the CUDA runtime, the libcuda stub."""
    hf_home: str
    preload: str
    """``LD_PRELOAD`` for the worker nodes: the shim that bounds NIXL's progress thread's idle polling."""


@dataclass
class RayNode:
    """One Ray node: ``ray start`` arguments and environment, as KubeRay would start the pod's container."""

    name: str
    group: str
    """``headgroup`` or the worker group's name."""
    address: str
    start_params: dict[str, str]
    env: dict[str, str]
    template: dict[str, Any]
    """The rendered pod template (labels, annotations, containers), for the Kubernetes API stand-in."""
    metrics_port: int = 8080
    """KubeRay's ``metrics`` port; the GPU profile's nodes share one host and take one each."""
    agent_port: int = 52365
    """The dashboard agent's HTTP port (KubeRay's ``dashboard-agent``); one per node on a shared host."""

    def ray_start(self, head_address: str) -> list[str]:
        """KubeRay's command line (``pod.go``: ``ray start`` with each param as ``--key=value``)."""
        args = ["start", "--block", f"--node-ip-address={self.address}"]
        if self.group == "headgroup":
            args += ["--head", f"--port={HEAD_PORT}", f"--dashboard-port={DASHBOARD_PORT}"]
        else:
            args += [f"--address={head_address}:{HEAD_PORT}"]
        args += [f"--metrics-export-port={self.metrics_port}", f"--dashboard-agent-listen-port={self.agent_port}"]
        for key, value in self.start_params.items():
            # KubeRay quotes JSON for bash -c ('{"prefill":1}'); here there is no shell.
            args.append(f"--{key}={value.strip(chr(39))}")
        return args


@dataclass
class TwinDeployment:
    topology: str
    nodes: dict[str, RayNode]
    serve_config: dict[str, Any]
    gate_settings: dict[str, Any]
    rayservice: dict[str, Any]
    changes: tuple[tuple[str, str], ...] = CHANGES
    notes: list[str] = field(default_factory=list)

    @property
    def head(self) -> RayNode:
        return self.nodes["head"]


def _llm_configs(args: Mapping[str, Any]) -> list[dict[str, Any]]:
    if "llm_configs" in args:
        return list(args["llm_configs"])
    return [args[f"{role}_config"] for role in ROLES if f"{role}_config" in args]


def serve_for_cpu(serve_config: Mapping[str, Any], model_path: str) -> dict[str, Any]:
    """The rendered ``serveConfigV2`` with the CPU changes of :data:`CHANGES` (a new dict)."""
    config = copy.deepcopy(dict(serve_config))
    for application in config["applications"]:
        for llm in _llm_configs(application["args"]):
            llm["model_loading_config"]["model_source"] = model_path
            llm.pop("accelerator_type", None)
            placement = llm.get("placement_group_config") or {}
            for bundle in placement.get("bundles") or ():
                gpus = bundle.pop("GPU", None)
                if gpus is not None:
                    bundle["CPU"] = gpus
            transfer = (llm.get("engine_kwargs") or {}).get("kv_transfer_config")
            if transfer is not None:
                transfer["kv_buffer_device"] = "cpu"
    return config


def failing_at_first_start(serve_config: Mapping[str, Any]) -> dict[str, Any]:
    """``serve_config`` (a new dict) whose LLM deployments fail the application at their first
    failed start (:data:`TRAP_CHANGES`): ``max_constructor_retry_count`` 1 in each leg's
    ``deployment_config``, which Ray Serve LLM passes to ``serve.deployment`` as a deployment option
    (Ray 2.58 ``llm/_internal/serve/core/server/builder.py`` ``build_llm_deployment``). Serve fails a
    deployment once its constructor failures reach min(``max_constructor_retry_count``, 3 x
    replicas) (``serve/_private/deployment_state.py`` ``_failed_to_start_threshold``, 3 from
    ``RAY_SERVE_MAX_PER_REPLICA_RETRY_COUNT``) and the application with its first failed
    deployment (``application_state.py``)."""
    config = copy.deepcopy(dict(serve_config))
    for application in config["applications"]:
        for llm in _llm_configs(application["args"]):
            llm.setdefault("deployment_config", {})["max_constructor_retry_count"] = 1
    return config


def worker_env_for_twin(env: Mapping[str, str], paths: Paths) -> dict[str, str]:
    changed = dict(env)
    changed["FI_PROVIDER"] = TWIN_PROVIDER
    changed["HF_HOME"] = paths.hf_home
    changed["HF_HUB_CACHE"] = f"{paths.hf_home}/hub"
    changed["LD_LIBRARY_PATH"] = paths.library_path
    changed["LD_PRELOAD"] = paths.preload
    changed["VLLM_CPU_KVCACHE_SPACE"] = str(KV_CACHE_SPACE_GIB)
    changed["RAY_metrics_report_interval_ms"] = str(METRICS_REPORT_INTERVAL_MS)
    return changed


def _container_env(template: Mapping[str, Any], name: str | None = None) -> dict[str, str]:
    containers = template["spec"]["containers"]
    main = next((c for c in containers if c.get("name") == name), containers[0])
    return {e["name"]: e["value"] for e in main.get("env") or () if "value" in e}


def _ray_service(objects: list[Mapping[str, Any]]) -> dict[str, Any]:
    return copy.deepcopy(dict(next(o for o in objects if o.get("kind") == "RayService")))


def gate_settings_of(objects: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The deploy gate's settings (``gate.json``) from the rendered verification chart."""
    for obj in objects:
        data = obj.get("data") or {}
        if obj.get("kind") == "ConfigMap" and wire.GATE_SETTINGS_FILE in data:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if labels.get(wire.COMPONENT_LABEL) == wire.GATE_SETTINGS_COMPONENT:
                return dict(json.loads(data[wire.GATE_SETTINGS_FILE]))
    raise LookupError("the rendered verification chart has no gate settings ConfigMap")


def twin_deployment(rayservice_objects: list[Mapping[str, Any]], verification_objects: list[Mapping[str, Any]],
                    addresses: Mapping[str, str], paths: Paths) -> TwinDeployment:
    """The twin of one rendered deployment: ``addresses`` maps head/prefill/decode to the twin's IPs."""
    import yaml

    service = _ray_service(rayservice_objects)
    cluster = service["spec"]["rayClusterConfig"]
    serve = serve_for_cpu(yaml.safe_load(service["spec"]["serveConfigV2"]), paths.model)
    settings = gate_settings_of(verification_objects)
    head_template = cluster["headGroupSpec"]["template"]
    nodes = {"head": RayNode("head", "headgroup", addresses["head"], dict(cluster["headGroupSpec"]["rayStartParams"]),
                             {**_container_env(head_template), "HF_HOME": paths.hf_home,
                              "RAY_metrics_report_interval_ms": str(METRICS_REPORT_INTERVAL_MS)}, head_template)}
    worker_env: dict[str, str] = {}
    for core, group in enumerate(cluster["workerGroupSpecs"]):
        role = group["groupName"]
        params = dict(group["rayStartParams"])
        params["num-gpus"] = "0"
        params["num-cpus"] = str(NODE_CPUS)
        params["object-store-memory"] = str(OBJECT_STORE_BYTES)
        env = worker_env_for_twin(_container_env(group["template"], settings.get("worker_container")), paths)
        worker_env = {k: env[k] for k in settings["worker_env"]}
        # Each engine on its own core, in both topologies (a colocated replica lands on either node).
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
        nodes[role] = RayNode(role, role, addresses[role], params, env, group["template"])
    head = addresses["head"]
    application = serve["applications"][0]
    settings.update(
        openai_url=f"http://{head}:{serve.get('http_options', {}).get('port', 8000)}",
        serve_args=application["args"],
        worker_env=worker_env,
        expected_provider=TWIN_PROVIDER,
        as_deploy_job=False,
        deadline_seconds=GATE_DEADLINE_SECONDS,
        poll_seconds=GATE_POLL_SECONDS,
        metrics_settle_seconds=GATE_METRICS_SETTLE_SECONDS,
    )
    # The RayService the KubeRay stand-in serves carries the config it submits, as KubeRay's does:
    # the gate compares the stored serveConfigV2 with its serve_args (verification.rollout).
    service = {**service, "spec": {**service["spec"], "serveConfigV2": json.dumps(serve, indent=2)}}
    return TwinDeployment(topology=settings["topology"], nodes=nodes, serve_config=serve, gate_settings=settings,
                          rayservice=service)


def pd_program_for_twin(serve_config: Mapping[str, Any], rayservice_objects: list[Mapping[str, Any]],
                        directory: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """``serve_config`` with each ``file://`` archive of ``runtime_env.py_modules`` moved from the Ray
    pods' mount to ``directory``, and the files to write there (name -> bytes), from the rendered
    ConfigMaps' ``binaryData``: the twin's Ray nodes have no pod and no mount, but the same archive."""
    import base64

    archives = {name: base64.b64decode(data) for obj in rayservice_objects if obj.get("kind") == "ConfigMap"
                for name, data in ((obj.get("binaryData") or {}).items())}
    config = copy.deepcopy(dict(serve_config))
    files: dict[str, bytes] = {}
    for application in config["applications"]:
        modules = (application.get("runtime_env") or {}).get("py_modules") or []
        for index, uri in enumerate(modules):
            name = uri.rsplit("/", 1)[-1]
            if uri.startswith("file://") and name in archives:
                files[name] = archives[name]
                modules[index] = f"file://{directory}/{name}"
    return config, files
