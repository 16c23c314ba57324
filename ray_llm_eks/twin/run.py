"""One twin run: render, network, Ray nodes, Serve app, Kubernetes API stand-in, and the real gate.

:class:`TwinRun` is a context manager; leaving it (normally, on an exception, or on SIGTERM,
which :func:`terminate_gracefully` turns into an exception) ends every process and removes every
namespace the run made. The process that enters it moves into the ``client`` namespace until it
leaves, so the gate, the bench and any request it sends reach the twin as a client pod reaches
the cluster.

The Ray cluster is the same for both topologies, as it is in a deployment (the rendered worker
groups do not change with the topology): :meth:`TwinRun.use` redeploys the Serve config of the
other topology, or a changed one, on the running nodes, as a deploy of a changed RayService
makes KubeRay do.
"""

from __future__ import annotations

import base64

import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..verification import bundle
from . import cluster, kube_api, netns, render, twin_profile

HOSTS = ("head", "prefill", "decode", "client")
LOOPBACK_ONLY = ("lonely",)
"""A host with no link at all, for the trap of a node whose network never came up."""
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "examples" / "twin" / "twin.yaml"
GATE_TIMEOUT_SECONDS = 1200.0


def terminate_gracefully() -> None:
    """SIGTERM raises KeyboardInterrupt, so ``with TwinRun(...)`` cleans up when CI or a user stops it."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM inside the block (the main thread only: elsewhere signals cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {number: signal.signal(number, signal.SIG_IGN) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in held.items():
            signal.signal(number, handler)


@dataclass(frozen=True)
class Environment:
    """What ``make twin`` installed: the twin's Python environment and its native libraries."""

    venv: Path
    native: Path
    """The folder holding the ``libcuda.so.1`` stub (``.twin/lib``)."""
    model: Path

    @property
    def preload(self) -> Path:
        """The shim that bounds NIXL's LIBFABRIC progress thread's idle polling (``progress_idle.c``)."""
        return self.native / "libnixl_progress_idle.so"

    @property
    def library_path(self) -> str:
        site = self.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        return ":".join(str(p) for p in (self.native, self.venv / "lib" / "mpich", site / "nvidia" / "cu13" / "lib"))

    @classmethod
    def default(cls) -> Environment:
        return cls(venv=ROOT / ".venv-twin", native=ROOT / ".twin" / "lib", model=ROOT / ".twin" / "model")

    def check(self) -> None:
        missing = [str(p) for p in (self.venv / "bin" / "ray", self.native / "libcuda.so.1", self.preload,
                                      self.model / "config.json")
                   if not p.exists()]
        if missing:
            raise cluster.TwinError(f"the twin is not installed ({', '.join(missing)} missing): run `make twin`")


@dataclass
class GateRun:
    returncode: int
    report: dict[str, Any]
    stderr: str

    @property
    def verdict(self) -> str:
        return str(self.report.get("verdict"))

    @property
    def reasons(self) -> list[str]:
        return list(self.report.get("reasons") or [])


@dataclass
class TwinRun:
    workdir: Path
    config: Path = DEFAULT_CONFIG
    environment: Environment = field(default_factory=Environment.default)
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        self.rendered: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.deployments: dict[str, twin_profile.TwinDeployment] = {}
        self.tiny: render.TinyConfig | None = None
        self.network: netns.Network | None = None
        self.paths: twin_profile.Paths | None = None
        self.twin: cluster.Twin | None = None
        self.api: kube_api.KubeApi | None = None
        self.api_url = ""
        self.topology = ""
        self.deployed_at = 0.0
        """When the last Serve config was sent (epoch seconds)."""
        self._origin_fd: int | None = None
        self.pod_of: dict[str, str] = {}
        """Ray node -> the name of the pod that runs it now (a replacement has a new name)."""
        self.kubelet_log: list[tuple[float, str]] = []
        """(epoch, what the kubelet and KubeRay stand-in did) while :meth:`kubelet` was on."""
        self._kubelet_on = threading.Event()
        self._replacing: set[str] = set()
        self._resubmit = False

    # --- up and down ---------------------------------------------------------------------------

    def __enter__(self) -> TwinRun:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.environment.check()
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The configured deployment with the tiny model of a kind vLLM's CPU build serves (render.HYBRID_ON_CPU).
        self.tiny = render.tiny_config(self.config, self.workdir, runs_hybrid=False)
        for note in self.tiny.notes:
            self.log(f"twin: note: {note}")
        for topology in render.TOPOLOGIES:
            self.rendered[topology] = render.render(self.tiny.path, topology, self.workdir / topology)
        self.network = netns.Network(HOSTS, loopback_only=LOOPBACK_ONLY).up()
        self.paths = twin_profile.Paths(model=str(self.environment.model), library_path=self.environment.library_path,
                                        hf_home=str(self.workdir / "hf"), preload=str(self.environment.preload))
        for topology, charts in self.rendered.items():
            self.deployments[topology] = twin_profile.twin_deployment(
                charts[render.RAYSERVICE_CHART], charts[render.VERIFICATION_CHART], self.network.addresses, self.paths)
        first = self.deployments[render.TOPOLOGIES[0]]
        program = self.workdir / "gate-program"
        package = program / bundle.IN_CLUSTER_PACKAGE
        package.mkdir(parents=True, exist_ok=True)
        for name, text in self._gate_program_files(first).items():
            (package / name).write_text(text)
        self._origin_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
        cluster.enter(self.network.namespace("client"))
        self.twin = cluster.Twin(first, self.network, self.workdir, self.environment.venv / "bin", program,
                                 log=self.log)
        self.twin.start_ray()
        settings = first.gate_settings
        self.twin.start_counter_readers(int(settings["efa_counter_port"]))
        self._start_api(first)

    def _gate_program_files(self, deployment: twin_profile.TwinDeployment) -> dict[str, str]:
        """The gate program as the verification chart renders it: the files of the archive the Job
        imports from (the ConfigMap's ``binaryData``), unpacked into a folder here."""
        for obj in self.rendered[deployment.topology][render.VERIFICATION_CHART]:
            if obj.get("kind") == "ConfigMap" and obj["metadata"]["name"].endswith("-gate-program"):
                return bundle.unpack(base64.b64decode(obj["binaryData"][bundle.ARCHIVE]))
        raise cluster.TwinError("the rendered verification chart has no gate program ConfigMap")

    def _start_api(self, deployment: twin_profile.TwinDeployment) -> None:
        assert self.twin is not None
        config_maps = [obj for charts in self.rendered.values() for obj in charts[render.VERIFICATION_CHART]
                       if obj.get("kind") == "ConfigMap" and not obj["metadata"]["name"].endswith("-gate-program")]
        namespace = deployment.gate_settings["namespace"]
        logs: dict[str, Callable[[float | None], str]] = {}
        api = kube_api.KubeApi(namespace=namespace, rayservice=deployment.rayservice, config_maps=config_maps,
                               logs=logs)
        for name, node in deployment.nodes.items():
            pod = self.pod_name(api.cluster, node.group)
            self.pod_of[name] = pod
            logs[pod] = self.twin.node_logs[name].text
            api.add_pod(pod, template=node.template, group=node.group, node=self.twin.node_name(name),
                        ip=node.address, env=node.env, created=self.twin.started_at[name])
        selector = deployment.gate_settings["efa_counter_selector"]
        for role in self.twin.worker_roles:
            node = deployment.nodes[role]
            api.add_counter_pod(f"{deployment.gate_settings['ray_service']}-efa-counters-{role}", selector,
                                self.twin.node_name(role), node.address)
            api.add_node(self.twin.node_name(role), deployment.gate_settings["roles"][role]["node_selector"])
        for topology_deployment in self.deployments.values():
            api.finished_job(topology_deployment.gate_settings["job_name"], time.time())
        api.on_pod_deleted = self._pod_deleted
        api.applications = self.twin.applications
        self.api = api
        self.api_url = api.serve("127.0.0.1")
        (self.workdir / "token").write_text(api.token + "\n")

    @staticmethod
    def pod_name(cluster_name: str, group: str) -> str:
        return f"{cluster_name}-head" if group == "headgroup" else f"{cluster_name}-{group}-worker"

    def close(self) -> None:
        """Stop everything the run started. A second Ctrl-C (or CI's SIGTERM after a first) while
        this runs is held until it is done: interrupted, it left the Ray nodes running and the
        namespaces behind."""
        with _stop_signals_held():
            self._close()

    def _close(self) -> None:
        if self.api is not None:
            self.api.close()
            self.api = None
        if self.twin is not None:
            self.twin.close()
            self.twin = None
        if self._origin_fd is not None:
            cluster.leave(self._origin_fd)
            os.close(self._origin_fd)
            self._origin_fd = None
        if self.network is not None:
            self.network.down()
            self.network = None

    # --- the kubelet and KubeRay, for drills ---------------------------------------------------

    @contextlib.contextmanager
    def kubelet(self) -> Iterator[None]:
        """Inside the block, the twin does what the kubelet and KubeRay 1.4.0 do after a fault:

        - a pod deleted or evicted through the API: its Ray node gets SIGTERM (SIGKILL after 30 s),
          and the RayCluster's replacement pod, under a new name, starts the node again (Pending
          while the node is cordoned);
        - a Ray node that exits (a raylet whose GCS went away exits): restarted in its pod, its
          ``restartCount`` counted (``restartPolicy: Always``);
        - after the head restarts: the Serve config resubmitted once the head has no application
          (``rayservice_controller.go``@v1.4.0:804-809), and the RayService Ready again once it runs.

        Outside it, a Ray node that exits stays down and fails any wait (a trap must show)."""
        assert self.twin is not None
        self.twin.restarts_exited = True
        with self.twin.lock:
            for process in self.twin.processes:
                process.restartable = process.name in self.twin.deployment.nodes
        self._kubelet_on.set()
        thread = threading.Thread(target=self._supervise, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._kubelet_on.clear()
            thread.join(timeout=30)
            self.twin.restarts_exited = False

    def _note(self, what: str) -> None:
        self.kubelet_log.append((time.time(), what))
        self.log(f"kubelet: {what}")

    def _pod_deleted(self, pod: str) -> None:
        assert self.twin is not None and self.api is not None
        node = next((n for n, p in self.pod_of.items() if p == pod), None)
        if node is None or not self._kubelet_on.is_set():
            self.api.remove_pod(pod)  # a pod the twin runs nothing for (a counter reader), or no kubelet on
            return
        self._replacing.add(node)
        try:
            if node == "head":
                self.api.ready = False
            self.twin.stop_node(node)
            self.api.remove_pod(pod)
            self._note(f"pod {pod} ended ({node})")
            deployment = self.twin.deployment.nodes[node]
            replacement = f"{self.pod_name(self.api.cluster, deployment.group)}-{secrets.token_hex(3)[:5]}"
            host = self.twin.node_name(node)
            while self.api.cordoned(host) and self._kubelet_on.is_set():
                self.api.add_pod(replacement, template=deployment.template, group=deployment.group, node=host,
                                 ip=deployment.address, env=deployment.env, created=time.time(), scheduled=False)
                time.sleep(1.0)
            while True:
                try:
                    self.twin.start_node(node)
                    break
                except cluster.TwinError as error:  # the kubelet restarts a failed container (back-off)
                    self._note(f"start of {replacement} failed, retrying: {error}")
                    self.twin.stop_node(node)
                    time.sleep(5.0)
                    if not self._kubelet_on.is_set():
                        return
            self.api.logs[replacement] = self.twin.node_logs[node].text
            self.api.add_pod(replacement, template=deployment.template, group=deployment.group, node=host,
                             ip=deployment.address, env=deployment.env, created=self.twin.started_at[node])
            self.pod_of[node] = replacement
            self._note(f"pod {replacement} started ({node})")
            if node == "head":
                self._resubmit = True
        finally:
            self._replacing.discard(node)

    def _supervise(self) -> None:
        assert self.twin is not None and self.api is not None
        while self._kubelet_on.is_set():
            for node in self.twin.exited_nodes():
                if node in self._replacing:
                    continue
                try:
                    self.twin.restart_node(node)
                except cluster.TwinError as error:
                    self._note(f"restart of {node} failed: {error}")
                    continue
                self.api.container_restarted(self.pod_of[node])
                self._note(f"container of {self.pod_of[node]} restarted ({node} exited)")
            if self._resubmit:
                self._resubmit_when_empty()
            self._kubelet_on.wait(1.0)

    def _resubmit_when_empty(self) -> None:
        assert self.twin is not None and self.api is not None
        data = self.twin.applications()
        applications = data.get("applications") if data else None
        if applications is None:
            return  # the dashboard does not answer yet
        if not applications:
            try:
                config = self.twin.submit()
            except OSError as error:
                self._note(f"serve config resubmission failed: {error}")
                return
            self.api.submitted(config, time.time())
            self._note("serve config resubmitted (the head had no application)")
            return
        if all(app.get("status") == "RUNNING" for app in applications.values()):
            self.api.ready = True
            self._resubmit = False
            self._note("Serve application RUNNING again")

    # --- serving -------------------------------------------------------------------------------

    def use(self, topology: str, serve_config: Mapping[str, Any] | None = None, timeout: float = 900.0, *,
            require_running: bool = True, fresh: bool = False) -> dict[str, Any]:
        """Deploy ``topology``'s Serve config (or ``serve_config``) on the running nodes and wait for it
        to run (or, with ``require_running=False``, to run or fail).

        ``fresh``: delete the running applications first (:meth:`cluster.Twin.remove_applications`).
        A config that needs more of a node than the running replicas leave free (two prefill
        replicas where one runs) never finishes a rolling update on the twin's fixed nodes: Ray
        Serve starts the added replica before it stops an outdated one (``max_to_stop =
        rollout_size - pending_replicas`` is 0 there, Ray 2.58
        ``serve/_private/deployment_state.py`` ``_check_and_stop_outdated_version_replicas``), and
        the added one waits for resources the outdated one holds. A real cluster gets a node from
        the autoscaler instead."""
        assert self.twin is not None and self.api is not None
        deployment = self.deployments[topology]
        config = serve_config or deployment.serve_config
        self.api.ready = False
        self.twin.deployment = deployment
        if fresh:
            self.twin.remove_applications()
        cluster_changed = deployment.rayservice["spec"]["rayClusterConfig"] != self.api.rayservice["spec"]["rayClusterConfig"]
        if cluster_changed:
            # Another cluster spec (e.g. a deployment that mounts another ConfigMap): KubeRay would
            # roll a new RayCluster; the stand-in serves its spec and its pods' templates (hash
            # annotation included) on the running nodes, which need no change of their own.
            self.api.recreate_cluster(deployment.rayservice)
            for name, node in deployment.nodes.items():
                self.api.add_pod(self.pod_of[name], template=node.template, group=node.group,
                                 node=self.twin.node_name(name), ip=node.address, env=node.env,
                                 created=self.twin.started_at[name])
        # The config already running is not sent again, as KubeRay does not (cluster.Twin.serves):
        # then only the wait for it to run.
        submit = cluster_changed or not self.twin.serves(config)
        started = time.monotonic()
        if submit:
            self.deployed_at = time.time()
            # What KubeRay submits is what the RayService carries: the stand-in's now carries this.
            self.api.submitted(config, self.deployed_at)
        state = self.twin.deploy(config, timeout=timeout, require_running=require_running, submit=submit)
        self.api.ready = True
        self.topology = topology
        self.log(f"{topology}: Serve app {state.get('status')} after {time.monotonic() - started:.0f} s"
                 + ("" if submit else " (the running config, not sent again)"))
        return state

    def add(self, name: str, config: Path, topology: str = "disaggregated") -> twin_profile.TwinDeployment:
        """Another deployment for the running nodes, under ``name`` (``use(name)``, ``settings(name)``):
        ``config`` rendered for ``topology`` and run through the same profile, with each ``file://``
        archive of its Serve config written to its own folder (:func:`twin_profile.pd_program_for_twin`).
        The nodes were started for the first deployment, so ``config`` must render the same worker
        groups (a setting of the Serve application, such as ``disaggregation``, not of the pools)."""
        assert self.network is not None and self.paths is not None
        folder = self.workdir / name
        charts = render.render(config, topology, folder)
        deployment = twin_profile.twin_deployment(charts[render.RAYSERVICE_CHART], charts[render.VERIFICATION_CHART],
                                                  self.network.addresses, self.paths)
        serve, files = twin_profile.pd_program_for_twin(deployment.serve_config, charts[render.RAYSERVICE_CHART],
                                                        str(folder))
        for file, data in files.items():
            (folder / file).write_bytes(data)
        deployment.serve_config = serve
        deployment.rayservice["spec"]["serveConfigV2"] = json.dumps(serve, indent=2)
        self.rendered[name], self.deployments[name] = charts, deployment
        if self.api is not None:
            self.api.finished_job(deployment.gate_settings["job_name"], time.time())
        return deployment

    @property
    def openai_url(self) -> str:
        return str(self.deployments[self.topology or render.TOPOLOGIES[0]].gate_settings["openai_url"])

    def settings(self, topology: str | None = None, **overrides: Any) -> dict[str, Any]:
        return {**self.deployments[topology or self.topology].gate_settings, **overrides}

    def continuous_verification(self, topology: str | None = None) -> dict[str, Any]:
        """The settings the rendered continuous-verification CronJob runs with: the gate settings
        and the CronJob's own ``--set`` overrides, read from its command line."""
        topology = topology or self.topology
        for obj in self.rendered[topology][render.VERIFICATION_CHART]:
            if obj.get("kind") != "CronJob":
                continue
            container = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
            # ["/bin/sh", "-c", "exec ... run --config ... --set '{...}' --publish"]
            words = shlex.split(container["command"][-1])
            overrides = json.loads(words[words.index("--set") + 1])
            return self.settings(topology, **overrides)
        raise cluster.TwinError(f"the rendered {topology} verification chart has no continuous verification CronJob")

    def gate(self, settings: Mapping[str, Any], *extra: str, timeout: float = GATE_TIMEOUT_SECONDS) -> GateRun:
        """The rendered gate program, run as its Job runs it (``python -S -m rayllmeks_gate run``),
        against the stand-in API; returns its exit code and JSON report."""
        assert self.twin is not None
        config = self.workdir / "gate.json"
        config.write_text(json.dumps(dict(settings)))
        report = self.workdir / "gate-report.json"
        report.unlink(missing_ok=True)
        python = self.environment.venv / "bin" / "python"
        result = subprocess.run(
            [str(python), "-S", "-m", bundle.IN_CLUSTER_PACKAGE, "run", "--config", str(config),
             "--kube-api", self.api_url, "--kube-token-file", str(self.workdir / "token"),
             "--report-file", str(report), *extra],
            cwd=self.twin.gate_program, capture_output=True, text=True, timeout=timeout,
            env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
        data = json.loads(report.read_text()) if report.exists() else {}
        return GateRun(result.returncode, data, result.stderr)
