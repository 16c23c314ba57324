"""The twin at run time: Ray nodes in their namespaces, the Serve app, the EFA-counter readers.

:class:`Twin` starts what KubeRay and the kubelet would: ``ray start`` for the head and each
worker group with the rendered parameters and environment (changed by :mod:`.twin_profile`), the
EFA counter reader of each GPU node (the gate program's own ``efa-counters``, as the DaemonSet
runs it, over a sysfs tree whose counters are the node veth's), and then deploys the Serve
config through the dashboard's REST API as KubeRay does (``PUT /api/serve/applications/``).

With ``authOptions.mode: token`` in the rendered RayService (the default), every Ray node runs
with ``RAY_AUTH_MODE=token`` and one random ``RAY_AUTH_TOKEN``, as KubeRay 1.5.1 sets them on the
Ray container from the cluster's Secret (``SetContainerTokenAuthEnvVars``, common/pod.go@v1.5.1),
and the twin's own dashboard calls send ``x-ray-authorization: Bearer <token>`` as KubeRay's
dashboard client does (``setAuthHeader``, dashboardclient/dashboard_httpclient.go@v1.5.1).

The process that runs a twin moves itself into the ``client`` namespace (:func:`enter`), where
the gate, the bench and the Kubernetes API stand-in run, so every request it sends crosses the
twin's own links. Every wait is bounded; :meth:`Twin.close` ends every process it started
(process groups, SIGTERM then SIGKILL) and removes the namespaces, also after a failure.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..verification.bundle import IN_CLUSTER_PACKAGE
from . import netns
from .twin_profile import DASHBOARD_PORT, TwinDeployment

CLONE_NEWNET = 0x40000000
COUNTER_DEVICE = "veth0"
"""The device name the counter reader reports: the twin's stand-in for ``rdmap0s6``."""


class TwinError(RuntimeError):
    pass


def enter(namespace: str) -> int:
    """Move this thread (and the threads and processes it starts later) into the network
    namespace ``namespace``; :func:`leave` goes back. Returns 0."""
    libc = ctypes.CDLL(None, use_errno=True)
    path = f"/run/netns/{namespace}"
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise TwinError(f"setns({path}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    return 0


def leave(original_fd: int) -> None:
    """Back to the namespace ``original_fd`` (an open ``/proc/self/ns/net``) refers to."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(original_fd, CLONE_NEWNET) != 0:
        raise TwinError(f"setns(back): {os.strerror(ctypes.get_errno())}")


def rfc3339_nano(epoch: float) -> str:
    stamp = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond:06d}000Z"


class StampedLog:
    """A container log as the kubelet keeps it: each line with the time it was written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.lines: list[tuple[float, str]] = []
        self.pumps: list[threading.Thread] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("a", encoding="utf-8")

    def follow(self, stream: Any) -> threading.Thread:
        def pump() -> None:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\n")
                now = time.time()
                with self.lock:
                    self.lines.append((now, line))
                    self.file.write(f"{rfc3339_nano(now)} {line}\n")
                    self.file.flush()
        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        self.pumps.append(thread)
        return thread

    def drained(self, timeout: float) -> bool:
        """Whether every stream this log follows reached its end (its writers exited) within ``timeout``."""
        deadline = time.monotonic() + timeout
        for thread in self.pumps:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self.pumps)

    def text(self, since: float | None = None) -> str:
        with self.lock:
            return "".join(f"{line}\n" for stamp, line in self.lines if since is None or stamp >= since)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: StampedLog | None = None
    restartable: bool = False
    """A Ray node's container under the twin's kubelet stand-in, which restarts it when it exits."""


def _signal(process: Process, number: int) -> None:
    try:
        os.killpg(process.popen.pid, number)
    except ProcessLookupError:
        pass


def _reap(process: Process, seconds: float) -> None:
    try:
        process.popen.wait(seconds)
    except subprocess.TimeoutExpired:
        pass


def _end(process: Process, grace_seconds: float) -> None:
    if process.popen.poll() is None:
        _signal(process, signal.SIGTERM)
        _reap(process, grace_seconds)
    _signal(process, signal.SIGKILL)
    _reap(process, 5)


@dataclass
class Twin:
    """One running twin of ``deployment`` on ``network`` (whose hosts are head, prefill, decode, client)."""

    deployment: TwinDeployment
    network: netns.Network
    """The hosts: network namespaces (:class:`.netns.Network`), or the GPU profile's
    :class:`.host_network.HostNetwork`, which has the same interface."""
    workdir: Path
    ray_bin: Path
    """The twin environment's ``bin`` folder (``ray``, ``python``)."""
    gate_program: Path
    """A folder holding the rendered gate program package (``rayllmeks_gate``)."""
    log: Callable[[str], None] = print
    processes: list[Process] = field(default_factory=list)
    node_logs: dict[str, StampedLog] = field(default_factory=dict)
    started_at: dict[str, float] = field(default_factory=dict)
    pods_started: dict[str, int] = field(default_factory=dict)
    """How many pods have run each node (a new pod gets a fresh Ray temp dir: :meth:`ray_temp_dir`)."""
    last_submitted: str = ""
    """The Serve config last sent (:meth:`submit`), as canonical JSON: what KubeRay caches."""
    restarts_exited: bool = False
    """A Ray node that exits is restarted (by :class:`~.run.TwinRun`'s kubelet stand-in), not an error."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Guards ``processes``: the twin's kubelet stand-in restarts nodes from its own thread."""
    ray_auth_token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    """The cluster's Ray token (KubeRay 1.5.1 makes 32 random bytes, base64: ``createAuthSecret``)."""

    @property
    def token_auth(self) -> bool:
        """Whether the rendered RayService asks for Ray token authentication (``authOptions.mode``)."""
        cluster = (self.deployment.rayservice.get("spec") or {}).get("rayClusterConfig") or {}
        return (cluster.get("authOptions") or {}).get("mode") == "token"

    def auth_env(self) -> dict[str, str]:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.ray_auth_token} if self.token_auth else {}

    def auth_headers(self) -> dict[str, str]:
        return {"x-ray-authorization": f"Bearer {self.ray_auth_token}"} if self.token_auth else {}

    # --- starting ------------------------------------------------------------------------------

    def _spawn(self, name: str, host: str, argv: list[str], env: Mapping[str, str], *,
               logged: bool, log: StampedLog | None = None) -> Process:
        base = {"PATH": f"{self.ray_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.workdir / "home"),
                "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
        if logged and log is None:
            log = StampedLog(self.workdir / "logs" / f"{name}.log")
        out = subprocess.PIPE if logged else (self.workdir / "logs" / f"{name}.log").open("ab")
        popen = subprocess.Popen(self.network.exec_prefix(host) + ["env", "-i", *(f"{k}={v}" for k, v in
                                                                              {**base, **env}.items()), *argv],
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, cwd=self.workdir)
        process = Process(name, popen, log)
        if log is not None and popen.stdout is not None:
            log.follow(popen.stdout)
        with self.lock:
            self.processes.append(process)
        return process

    def start_ray(self, timeout: float = 180.0) -> None:
        (self.workdir / "home").mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        for name in self.deployment.nodes:
            self.start_node(name, timeout)
        expected = len(self.deployment.nodes)
        self._wait(lambda: self.alive_nodes() >= expected, timeout, f"{expected} Ray nodes to join")
        self.log(f"ray: {expected} nodes up")

    def start_node(self, name: str, timeout: float = 180.0, *, log: StampedLog | None = None) -> Process:
        """``ray start`` of node ``name``, as the kubelet starts a Ray pod's container. ``log``: the
        container log to go on writing (a container restarted in its pod); default: a new one (a
        new pod). The head's start returns once its dashboard answers."""
        node = self.deployment.nodes[name]
        if log is None:
            self.pods_started[name] = self.pods_started.get(name, 0) + 1
        args = node.ray_start(self.deployment.head.address) + [f"--temp-dir={self.ray_temp_dir(name)}"]
        self.started_at[name] = time.time()
        process = self._spawn(name, name, [str(self.ray_bin / "ray"), *args], {**node.env, **self.auth_env()},
                              logged=True, log=log)
        process.restartable = self.restarts_exited
        self.node_logs[name] = process.log  # type: ignore[assignment]
        if name == "head":
            def dashboard_answers() -> bool:
                # A head whose ``ray start --block`` exited never answers: say so now. Under the kubelet
                # stand-in its process is restartable, which :meth:`_wait` does not count as dead, and
                # a replacement head that found its ports still taken waited out the whole timeout
                # (180 s) before the retry that then started it (docs/twin.md, the head drill).
                if process.popen.poll() is not None:
                    raise TwinError(f"the Ray head's `ray start` exited with code {process.popen.returncode} before "
                                    f"its dashboard answered; see {process.log.path if process.log else 'its log'}")
                return self._get_json(f"http://{node.address}:{DASHBOARD_PORT}/api/version") is not None

            self._wait(dashboard_answers, timeout, "the Ray head's dashboard to answer")
        return process

    def stop_node(self, name: str, grace_seconds: float = 30.0) -> None:
        """End node ``name``'s processes as the kubelet ends a deleted pod's container: SIGTERM, then
        SIGKILL after the grace period (KubeRay's pods keep Kubernetes' default of 30 s). Then,
        as the container's cgroup goes, every Ray process left in the node's namespace (GCS,
        raylet and workers run in sessions of their own, outside ``ray start``'s process group;
        a head restarted over a surviving GCS finds its port taken), but the EFA counter reader,
        another pod on the same node."""
        with self.lock:
            mine = [p for p in self.processes if p.name == name]
            self.processes[:] = [p for p in self.processes if p.name != name]
        for process in mine:
            _end(process, grace_seconds)
        self._end_container(name)

    def _end_container(self, name: str) -> None:
        """What the end of a container's cgroup does: every process of node ``name`` goes (but the
        EFA counter reader's, another pod), and is gone before anything starts again."""
        killed: list[int] = []
        netns.kill_namespace_processes(self.network.namespace(name), spare=IN_CLUSTER_PACKAGE, pids=killed)
        netns.wait_gone(killed)

    def exited_nodes(self) -> list[str]:
        """Ray nodes whose ``ray start --block`` has exited (a raylet that lost its GCS exits)."""
        with self.lock:
            return [p.name for p in self.processes if p.name in self.deployment.nodes and p.popen.poll() is not None]

    def restart_node(self, name: str) -> Process:
        """The kubelet restarting a container that exited, in the same pod: the container's other
        processes go with it (a raylet that exits leaves its engine running, still holding the NIXL
        side-channel port), and the same log goes on."""
        with self.lock:
            self.processes[:] = [p for p in self.processes if p.name != name]
        self._end_container(name)
        return self.start_node(name, log=self.node_logs.get(name))

    def alive_nodes(self) -> int:
        data = self._get_json(f"http://{self.deployment.head.address}:{DASHBOARD_PORT}/nodes?view=summary")
        if not data:
            return 0
        summary = (data.get("data") or {}).get("summary") or []
        return sum(1 for node in summary if (node.get("raylet") or {}).get("state") == "ALIVE")

    def start_counter_readers(self, port: int) -> None:
        """The gate program's ``efa-counters`` in each worker's namespace, over a sysfs tree whose
        counters are the node veth's byte counters (as that namespace sees them)."""
        tree = self.workdir / "sysfs"
        counters = tree / "class" / "infiniband" / COUNTER_DEVICE / "ports" / "1" / "hw_counters"
        counters.mkdir(parents=True, exist_ok=True)
        for name in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets"):
            link = counters / name
            if not link.is_symlink():
                link.symlink_to(f"/sys/class/net/{self.network.device}/statistics/{name}")
        for role in self.worker_roles:
            self._spawn(f"efa-counters-{role}", role,
                        [str(self.ray_bin / "python"), "-S", "-m", IN_CLUSTER_PACKAGE, "efa-counters", "--sysfs", str(tree),
                         "--port", str(port), "--host", self.deployment.nodes[role].address],
                        {"PYTHONPATH": str(self.gate_program), "NODE_NAME": self.node_name(role)}, logged=False)
        for role in self.worker_roles:
            url = f"http://{self.deployment.nodes[role].address}:{port}/healthz"
            self._wait(lambda url=url: self._get(url) is not None, 30, f"the counter reader on {role}")

    def ray_temp_dir(self, node: str) -> Path:
        """Each node's own: nodes sharing one would bind the same plasma socket. Short, since a
        Unix socket path holds at most 107 bytes.

        Each pod's own too, as a replacement pod starts on a fresh filesystem. A new head that found
        its predecessor's ``ray_current_cluster`` refused to start while the other nodes' raylets,
        which on the twin share the host's process table, still named the old GCS address: ``ray
        start --head`` fails when ``find_bootstrap_address(temp_dir)`` equals its address and
        ``find_gcs_addresses()`` (a scan of every process for ``--gcs-address``) lists it
        (``ray/scripts/scripts.py:1051-1063``, ``ray/_private/services.py:387,407`` of Ray 2.58.0). In
        Kubernetes the new head pod sees neither: a fresh filesystem and its own PID namespace. The
        head drill's new head failed four times that way, 8 s apart, before the workers' raylets
        had exited. A container restarted in its pod keeps the pod's directory."""
        generation = self.pods_started.get(node, 1)
        return Path("/tmp") / f"{netns.PREFIX}{self.network.run}" / (node if generation <= 1 else f"{node}.{generation}")

    @property
    def worker_roles(self) -> list[str]:
        return [name for name in self.deployment.nodes if name != "head"]

    def node_name(self, role: str) -> str:
        return f"twin-{role}"

    # --- Serve ---------------------------------------------------------------------------------

    def deploy(self, serve_config: Mapping[str, Any] | None = None, timeout: float = 600.0, *,
               require_running: bool = True, submit: bool = True) -> dict[str, Any]:
        """``PUT /api/serve/applications/`` (KubeRay's call) and wait until the application runs;
        ``submit=False``: only the wait (the config is the one running, :meth:`serves`).

        Returns the application's details; raises :class:`TwinError` with Serve's message when the
        deploy fails or the wait runs out. ``require_running=False`` (a trap) also returns once
        the deploy has failed."""
        config = dict(serve_config or self.deployment.serve_config)
        if submit:
            self.submit(config)
        name = config["applications"][0]["name"]
        state: dict[str, Any] = {}

        def running() -> bool:
            nonlocal state
            data = self.applications()
            state = (data.get("applications") or {}).get(name) or {}
            if state.get("status") == "DEPLOY_FAILED":
                if not require_running:
                    return True
                raise TwinError(f"Serve application {name} failed to deploy: {state.get('message', '')[:2000]}")
            return state.get("status") == "RUNNING"

        self._wait(running, timeout, f"Serve application {name} to run",
                   detail=lambda: f"status {state.get('status')}: {str(state.get('message', ''))[:500]}")
        self.log(f"serve: {name} {state.get('status')}")
        return state

    def remove_applications(self, timeout: float = 300.0) -> None:
        """Delete every Serve application and wait until none is listed, so what deploys next
        starts on empty nodes, as on a new RayCluster. It sends the deployment's config with no
        applications (``PUT``), which keeps Serve's controller and proxies (the dashboard's ``DELETE``
        shuts Serve down); an application is listed until its replicas have stopped."""
        self.submit({**self.deployment.serve_config, "applications": []})

        def gone() -> bool:
            data = self.applications()  # {} while the dashboard does not answer
            return "applications" in data and not data["applications"]

        self._wait(gone, timeout, "the Serve applications to be deleted")
        self.log("serve: no application")

    def submit(self, serve_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``PUT /api/serve/applications/`` of ``serve_config`` (default: the deployment's), as KubeRay sends it."""
        config = dict(serve_config or self.deployment.serve_config)
        request = urllib.request.Request(self.serve_applications_url, data=json.dumps(config).encode(), method="PUT",
                                         headers={"Content-Type": "application/json", **self.auth_headers()})
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        self.last_submitted = json.dumps(config, sort_keys=True)
        return config

    def serves(self, serve_config: Mapping[str, Any]) -> bool:
        """Whether KubeRay would leave ``serve_config`` unsent: it is the config last sent and Serve
        lists an application. KubeRay submits only when nothing is cached, Serve lists no
        application (a head lost without GCS fault tolerance) or the config differs from the cached
        one (``checkIfNeedSubmitServeApplications``, ``ray-operator/controllers/ray/
        rayservice_controller.go:1187-1206`` of KubeRay 1.5.1). Sending it again is not free: Serve
        stamps every ``PUT`` as a new deployment time even when no replica changes (``apply_app_config``,
        ``ray/serve/_private/application_state.py:667`` of Ray 2.58.0), and the gate reads the
        workers' startup lines from that time on."""
        if json.dumps(dict(serve_config), sort_keys=True) != self.last_submitted:
            return False
        return bool(self.applications().get("applications"))

    @property
    def serve_applications_url(self) -> str:
        """The dashboard's Serve REST API on the head, which KubeRay reads and writes."""
        return f"http://{self.deployment.head.address}:{DASHBOARD_PORT}/api/serve/applications/"

    def applications(self) -> dict[str, Any]:
        """Serve's instance details (``applications`` by name), or {} while the dashboard does not answer."""
        return self._get_json(self.serve_applications_url) or {}

    # --- plumbing ------------------------------------------------------------------------------

    def _get(self, url: str, timeout: float = 5.0) -> bytes | None:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=self.auth_headers()),
                                        timeout=timeout) as response:
                return response.read()
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _get_json(self, url: str) -> Any:
        body = self._get(url)
        try:
            return json.loads(body) if body else None
        except ValueError:
            return None

    def _wait(self, ready: Callable[[], bool], timeout: float, what: str,
              detail: Callable[[], str] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if ready():
                return
            with self.lock:
                dead = [p.name for p in self.processes if p.popen.poll() is not None and not p.restartable]
            if dead:
                raise TwinError(f"waiting for {what}: {', '.join(dead)} exited; see {self.workdir / 'logs'}")
            if time.monotonic() > deadline:
                raise TwinError(f"waited {timeout:.0f} s for {what}" + (f" ({detail()})" if detail else ""))
            time.sleep(1.0)

    def close(self) -> None:
        with self.lock:
            processes = list(self.processes)
            self.processes.clear()
        for process in reversed(processes):
            if process.popen.poll() is None:
                _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in processes:
            _reap(process, max(0.1, deadline - time.monotonic()))
        for process in processes:
            _signal(process, signal.SIGKILL)
            _reap(process, 5)
        shutil.rmtree(Path("/tmp") / f"{netns.PREFIX}{self.network.run}", ignore_errors=True)
