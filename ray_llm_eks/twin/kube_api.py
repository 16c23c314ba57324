"""The Kubernetes API the gate reads on the twin: the few calls it makes, over the twin's real parts.

No API server, kubelet or KubeRay runs here, so this loopback server answers the gate's calls
(:mod:`ray_llm_eks.verification.kube`) as they would for the twin's processes:

- the RayService as rendered, carrying the Serve config the run submitted (``serveConfigV2``, a
  new ``metadata.generation`` each time), with the status KubeRay sets (``Ready`` once the Serve
  app runs, ``observedGeneration``, ``activeServiceStatus.rayClusterName`` and its
  ``applicationStatuses`` as Ray's dashboard reports them: ``calculateStatus`` and
  ``getAndCheckServeStatus``, rayservice_controller.go@v1.5.1), and its RayCluster (spec and uid)
  as KubeRay builds it;
- the ``UpdatedServeApplications`` Event KubeRay records on the RayService at each submission;
- a pod per Ray node, built from the rendered pod template as KubeRay labels and owns it, with the
  environment the twin's node really runs, the node's address as ``podIP``, and the node's
  stamped output as its log (``sinceTime`` as the kubelet applies it);
- the EFA counter reader of each worker node (labels of the rendered DaemonSet), each controlled by
  the DaemonSet (``ownerReferences`` with its uid, as the DaemonSet controller sets them), and the
  DaemonSet itself by name;
- the two GPU nodes, whose allocatable ``vpc.amazonaws.com/efa`` is the veth and
  ``nvidia.com/gpu`` the engine's core, one each;
- ConfigMaps: the rendered ones (gate settings, the continuous-verification state) and what the
  gate writes, listed by label selector as the API server does (equality terms, comma-separated);
- Jobs: the deploy gate's, finished;
- the faults a drill applies (``ray_llm_eks/drill.py``): a pod deleted or evicted (the run's
  :attr:`KubeApi.on_pod_deleted` ends its Ray node and starts the replacement, as the kubelet and
  KubeRay do) and a node cordoned (``spec.unschedulable``: a replacement pod stays Pending,
  ``Unschedulable``, until it is uncordoned). No PodDisruptionBudget is applied to an eviction.

Every request needs the bearer token of the file the twin writes. Standard library only.
"""

from __future__ import annotations

import copy
import datetime
import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping

CLUSTER_SUFFIX = "twin"


def parse_selector(text: str) -> dict[str, str]:
    """An equality-based label selector (``a=b,c==d``) as a dict; set-based terms are refused."""
    terms: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in term or " in " in term or "(" in term:
            raise ValueError(f"selector term {term!r} is not an equality term")
        key, _, value = term.replace("==", "=").partition("=")
        terms[key.strip()] = value.strip()
    return terms


def matches(obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _stamp(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeApi:
    """The store and the routes; :meth:`serve` starts it on ``host`` (loopback of the client namespace)."""

    def __init__(self, *, namespace: str, rayservice: Mapping[str, Any], config_maps: list[Mapping[str, Any]],
                 logs: dict[str, Callable[[float | None], str]]) -> None:
        self.namespace = namespace
        self.token = secrets.token_hex(16)
        self.lock = threading.Lock()
        self.rayservice = copy.deepcopy(dict(rayservice))
        self.name = self.rayservice["metadata"]["name"]
        self.cluster = f"{self.name}-{CLUSTER_SUFFIX}"
        self.cluster_uid = secrets.token_hex(8)
        self.counter_daemon_set = f"{self.name}-efa-counters"
        """The readers' DaemonSet (``wire.efa_counters_name``; not imported: the twin stays apart from the gate)."""
        self.counter_daemon_set_uid = secrets.token_hex(8)
        self.ready = False
        self.pods: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.config_maps: dict[str, dict[str, Any]] = {}
        for config_map in config_maps:
            self.put_config_map(config_map)
        self.logs = logs
        """Pod name -> a function giving its log since an epoch (None: all)."""
        self.on_pod_deleted: Callable[[str], None] | None = None
        """Called (in a thread of its own) with a pod's name once a DELETE or an eviction took it."""
        self.generation = 1
        self.serve_submitted: float | None = None
        """When the run last submitted the Serve config (KubeRay's ``UpdatedServeApplications`` Event)."""
        self.applications: Callable[[], Mapping[str, Any]] | None = None
        """Ray's ``GET /api/serve/applications/`` on the head (with the token, as KubeRay 1.5.1 calls it)."""
        self.server: ThreadingHTTPServer | None = None
        self.requests: list[tuple[float, str, str]] = []
        """(time, method, path with query) of every call, in order: what the gate asked and when."""

    # --- the store ---------------------------------------------------------------------------

    def put_config_map(self, config_map: Mapping[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(dict(config_map))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("namespace", self.namespace)
        old = self.config_maps.get(meta["name"])
        meta["resourceVersion"] = str(int((old or {}).get("metadata", {}).get("resourceVersion", "0")) + 1)
        meta.setdefault("creationTimestamp", (old or {}).get("metadata", {}).get("creationTimestamp")
                        or _stamp(datetime.datetime.now().timestamp()))
        self.config_maps[meta["name"]] = stored
        return stored

    def add_pod(self, name: str, *, template: Mapping[str, Any], group: str, node: str, ip: str,
                env: Mapping[str, str], created: float, scheduled: bool = True) -> None:
        """A Ray pod as KubeRay 1.4.0 labels it (``ray.io/cluster``, ``ray.io/group``, ``ray.io/node-type``)."""
        containers = copy.deepcopy(template["spec"]["containers"])
        containers[0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
        image = containers[0]["image"]
        head = group == "headgroup"
        labels = {**(template.get("metadata") or {}).get("labels", {}), "ray.io/cluster": self.cluster,
                  "ray.io/group": group, "ray.io/node-type": "head" if head else "worker"}
        # KubeRay sets the RayCluster as each pod's controller (raycluster_controller.go@v1.4.0:1055, :1082).
        owner = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": self.cluster, "uid": self.cluster_uid,
                 "controller": True, "blockOwnerDeletion": True}
        running = {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": containers[0]["name"], "state": {"running": {}}, "restartCount": 0,
                                          "imageID": image if "@" in image else ""}]}
        pending = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": f"0/1 nodes are available: 1 node(s) were unschedulable ({node} is cordoned)"}]}
        with self.lock:
            self.pods = [p for p in self.pods if p["metadata"]["name"] != name]
            self.pods.append({
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels, "uid": secrets.token_hex(8),
                             "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                             "creationTimestamp": _stamp(created), "ownerReferences": [owner]},
                "spec": {"nodeName": node, "containers": containers} if scheduled else {"containers": containers},
                "status": running if scheduled else pending,
            })

    def remove_pod(self, name: str) -> None:
        with self.lock:
            self.pods = [p for p in self.pods if p["metadata"]["name"] != name]

    def container_restarted(self, name: str) -> None:
        with self.lock:
            for pod in self.pods:
                if pod["metadata"]["name"] == name:
                    for status in pod["status"].get("containerStatuses") or ():
                        status["restartCount"] = int(status.get("restartCount", 0)) + 1

    def cordoned(self, node: str) -> bool:
        with self.lock:
            return any(n["metadata"]["name"] == node and (n.get("spec") or {}).get("unschedulable")
                       for n in self.nodes)

    def add_counter_pod(self, name: str, labels: Mapping[str, str], node: str, ip: str,
                        controller_uid: str | None = "") -> None:
        """A counter reader on ``node``; ``controller_uid``: the DaemonSet uid it names as its controller
        ("": the readers' DaemonSet's, as its controller sets it; None: none, a pod made by hand)."""
        uid = self.counter_daemon_set_uid if controller_uid == "" else controller_uid
        owners = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": self.counter_daemon_set, "uid": uid,
                   "controller": True, "blockOwnerDeletion": True}] if uid else []
        with self.lock:
            self.pods.append({"metadata": {"name": name, "namespace": self.namespace, "labels": dict(labels),
                                           "uid": secrets.token_hex(8), "ownerReferences": owners},
                              "spec": {"nodeName": node}, "status": {"phase": "Running", "podIP": ip}})

    def daemon_set_object(self) -> dict[str, Any]:
        return {"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": self.counter_daemon_set, "namespace": self.namespace,
                             "uid": self.counter_daemon_set_uid}}

    def add_node(self, name: str, labels: Mapping[str, str]) -> None:
        self.nodes.append({"metadata": {"name": name, "labels": dict(labels)},
                           "status": {"allocatable": {"vpc.amazonaws.com/efa": "1", "nvidia.com/gpu": "1"}}})

    def finished_job(self, name: str, created: float) -> None:
        self.jobs[name] = {"kind": "Job", "metadata": {"name": name, "namespace": self.namespace,
                                                       "creationTimestamp": _stamp(created)},
                           "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}

    def ray_cluster_object(self) -> dict[str, Any]:
        """The RayCluster KubeRay builds from the RayService: its ``rayClusterConfig`` as the spec."""
        return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": self.cluster, "namespace": self.namespace, "uid": self.cluster_uid,
                             "labels": {"ray.io/originated-from-cr-name": self.name}},
                "spec": copy.deepcopy(self.rayservice["spec"]["rayClusterConfig"])}

    def recreate_cluster(self, rayservice: Mapping[str, Any]) -> None:
        """Another RayService spec whose ``rayClusterConfig`` differs (another rendered deployment):
        KubeRay would build a new RayCluster for it; the stand-in serves that spec under a new
        generation and a new RayCluster uid. The run re-adds the pods from the new templates."""
        with self.lock:
            self.rayservice = {**copy.deepcopy(dict(rayservice)), "metadata": copy.deepcopy(self.rayservice["metadata"])}
            self.cluster_uid = secrets.token_hex(8)
            self.generation += 1

    def submitted(self, serve_config: Mapping[str, Any], when: float) -> None:
        """The run submitted ``serve_config`` (KubeRay submits what the RayService carries): the
        stored spec carries it, as JSON text like the chart's, under a new generation."""
        with self.lock:
            spec = {**self.rayservice["spec"], "serveConfigV2": json.dumps(dict(serve_config), indent=2)}
            if spec != self.rayservice["spec"]:
                self.generation += 1
            self.rayservice = {**self.rayservice, "spec": spec}
            self.serve_submitted = when

    def application_statuses(self) -> dict[str, Any]:
        """``applicationStatuses`` as KubeRay fills them from Ray's answer (status, message, and each
        deployment's status and message); empty while the dashboard does not answer."""
        data = (self.applications() if self.applications is not None else None) or {}
        return {name: {"status": app.get("status", ""), "message": app.get("message", ""),
                       "serveDeploymentStatuses": {d: {"status": v.get("status", ""), "message": v.get("message", "")}
                                                   for d, v in (app.get("deployments") or {}).items()}}
                for name, app in (data.get("applications") or {}).items()}

    def rayservice_object(self, applications: Mapping[str, Any] | None = None) -> dict[str, Any]:
        active: dict[str, Any] = {"rayClusterName": self.cluster}
        if applications:
            active["applicationStatuses"] = dict(applications)
        status = {"conditions": [{"type": "Ready", "status": "True" if self.ready else "False"}],
                  "observedGeneration": self.generation, "activeServiceStatus": active}
        return {**self.rayservice, "metadata": {**self.rayservice["metadata"], "generation": self.generation},
                "status": status}

    def serve_events(self) -> list[dict[str, Any]]:
        if self.serve_submitted is None:
            return []
        return [{"kind": "Event", "type": "Normal", "reason": "UpdatedServeApplications",
                 "involvedObject": {"kind": "RayService", "name": self.name, "namespace": self.namespace},
                 "message": f"Updated serve applications to the RayCluster {self.namespace}/{self.cluster}",
                 "lastTimestamp": _stamp(self.serve_submitted)}]

    # --- HTTP ------------------------------------------------------------------------------------

    def serve(self, host: str = "127.0.0.1") -> str:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _route(self, method: str) -> None:
                try:
                    status, body, kind = api.route(method, self.path, self.headers, self._body())
                except Exception as error:  # noqa: BLE001 - a bug here must reach the gate as a 500
                    status, body, kind = 500, {"kind": "Status", "message": repr(error)}, "application/json"
                data = json.dumps(body).encode() if not isinstance(body, (bytes, str)) else (
                    body.encode() if isinstance(body, str) else body)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def do_GET(self) -> None:  # noqa: N802
                self._route("GET")

            def do_PUT(self) -> None:  # noqa: N802
                self._route("PUT")

            def do_POST(self) -> None:  # noqa: N802
                self._route("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._route("DELETE")

            def do_PATCH(self) -> None:  # noqa: N802
                self._route("PATCH")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer((host, 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        return f"http://{host}:{self.server.server_address[1]}"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def _take_pod(self, name: str, json_type: str) -> tuple[int, Any, str]:
        """A DELETE or an eviction (called with the lock held): the pod is Terminating at once, and the
        run's kubelet stand-in ends it and starts its replacement."""
        pod = next((p for p in self.pods if p["metadata"]["name"] == name), None)
        if pod is None:
            return 404, {"kind": "Status", "reason": "NotFound", "message": name}, json_type
        pod["metadata"]["deletionTimestamp"] = _stamp(time.time())
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        if self.on_pod_deleted is not None:
            threading.Thread(target=self.on_pod_deleted, args=(name,), daemon=True).start()
        return 200, copy.deepcopy(pod), json_type

    def route(self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, Any, str]:
        json_type = "application/json"
        if headers.get("Authorization") != f"Bearer {self.token}":
            return 401, {"kind": "Status", "reason": "Unauthorized"}, json_type
        self.requests.append((time.time(), method, raw_path))
        url = urllib.parse.urlsplit(raw_path)
        path, query = url.path, dict(urllib.parse.parse_qsl(url.query))
        ns = f"/api/v1/namespaces/{self.namespace}"
        try:
            selector = parse_selector(query.get("labelSelector", ""))
        except ValueError as error:
            return 400, {"kind": "Status", "reason": "BadRequest", "message": str(error)}, json_type
        rayservice = f"/apis/ray.io/v1/namespaces/{self.namespace}/rayservices/{self.name}"
        # Ray is asked before the lock is taken: its answer may take seconds.
        applications = self.application_statuses() if method == "GET" and path == rayservice else None
        with self.lock:
            if method == "GET" and path == rayservice:
                return 200, self.rayservice_object(applications), json_type
            if method == "GET" and path == f"{ns}/events":
                wanted = (f"involvedObject.kind=RayService,involvedObject.name={self.name},"
                          "reason=UpdatedServeApplications")
                items = self.serve_events() if query.get("fieldSelector") == wanted else []
                return 200, {"kind": "EventList", "items": items}, json_type
            if method == "GET" and path == f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters/{self.cluster}":
                return 200, self.ray_cluster_object(), json_type
            if method == "GET" and path == f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets/{self.counter_daemon_set}":
                return 200, self.daemon_set_object(), json_type
            if method == "GET" and path == f"{ns}/pods":
                return 200, {"kind": "PodList", "items": [p for p in self.pods if matches(p, selector)]}, json_type
            if method == "GET" and path == "/api/v1/nodes":
                return 200, {"kind": "NodeList", "items": [n for n in self.nodes if matches(n, selector)]}, json_type
            if method == "GET" and path.startswith(f"{ns}/pods/") and path.endswith("/log"):
                pod = path.split("/")[-2]
                if pod not in self.logs:
                    return 404, {"kind": "Status", "reason": "NotFound", "message": pod}, json_type
                since = _epoch(query["sinceTime"]) if "sinceTime" in query else None
                return 200, self.logs[pod](since), "text/plain"
            if method == "GET" and path == f"{ns}/configmaps":
                items = [c for c in self.config_maps.values() if matches(c, selector)]
                return 200, {"kind": "ConfigMapList", "items": copy.deepcopy(items)}, json_type
            if path.startswith(f"{ns}/configmaps/"):
                name = path.rsplit("/", 1)[1]
                stored = self.config_maps.get(name)
                if method == "GET":
                    return (200, copy.deepcopy(stored), json_type) if stored else (
                        404, {"kind": "Status", "reason": "NotFound"}, json_type)
                if method == "PUT":
                    new = json.loads(body)
                    if stored and new.get("metadata", {}).get("resourceVersion") not in (
                            None, stored["metadata"]["resourceVersion"]):
                        return 409, {"kind": "Status", "reason": "Conflict"}, json_type
                    return 200, self.put_config_map(new), json_type
            if method == "POST" and path == f"{ns}/configmaps":
                new = json.loads(body)
                if new["metadata"]["name"] in self.config_maps:
                    return 409, {"kind": "Status", "reason": "AlreadyExists"}, json_type
                return 201, self.put_config_map(new), json_type
            if method in ("DELETE", "POST") and path.startswith(f"{ns}/pods/") and (
                    method == "DELETE" and path.count("/") == 6 or path.endswith("/eviction")):
                return self._take_pod(path.split("/")[6], json_type)
            if method == "GET" and path == "/api/v1/pods":
                node = query.get("fieldSelector", "").removeprefix("spec.nodeName=")
                items = [p for p in self.pods if matches(p, selector) and (not node or p["spec"].get("nodeName") == node)]
                return 200, {"kind": "PodList", "items": copy.deepcopy(items)}, json_type
            if method == "PATCH" and path.startswith("/api/v1/nodes/"):
                name, patch = path.rsplit("/", 1)[1], json.loads(body)
                for node_object in self.nodes:
                    if node_object["metadata"]["name"] == name:
                        node_object.setdefault("spec", {}).update(patch.get("spec") or {})
                        return 200, copy.deepcopy(node_object), json_type
                return 404, {"kind": "Status", "reason": "NotFound", "message": name}, json_type
            if method == "GET" and path.startswith(f"/apis/batch/v1/namespaces/{self.namespace}/jobs/"):
                job = self.jobs.get(path.rsplit("/", 1)[1])
                return (200, job, json_type) if job else (404, {"kind": "Status", "reason": "NotFound"}, json_type)
        return 404, {"kind": "Status", "reason": "NotFound", "message": f"{method} {path}: not served by the twin"}, \
            json_type
