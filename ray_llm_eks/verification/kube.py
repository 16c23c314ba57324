"""The few Kubernetes API calls the gate makes, over plain HTTPS with the standard library.

The gate runs inside the cluster in the serving image, which is not ours to extend, so it cannot
rely on the ``kubernetes`` client package; it needs only GET, list and one DELETE, with a bearer
token. In a pod the token and CA come from the service account mount (re-read on every call:
projected tokens rotate); ``ray-llm-eks verify`` builds the same client from a kubeconfig.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from . import reads
from .shared import wire

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
REQUEST_TIMEOUT_SECONDS = 15.0


class NoClusterAccess(RuntimeError):
    """The API server cannot be reached, or refuses our credentials (exit code 3).

    ``transient`` is True when it could not be reached (worth retrying while a deadline allows)
    and False when it answered and refused (401/403, bad TLS material: retrying cannot help).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class ApiError(RuntimeError):
    def __init__(self, status: int, path: str, message: str) -> None:
        super().__init__(f"{status} on {path}: {message}")
        self.status = status
        self.path = path

    @property
    def transient(self) -> bool:
        """Server-side trouble or throttling: the same call may succeed a moment later."""
        return self.status >= 500 or self.status == 429


@dataclass
class KubeAccess:
    server: str
    token: Callable[[], str | None]
    """The bearer token, asked for before every request (so a rotating one can be re-read or refreshed)."""
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    """The name the server's certificate is checked against and sent as SNI, instead of the
    server's host (a kubeconfig's ``tls-server-name``: a server reached by address or tunnel)."""
    proxy_url: str | None = None
    """An ``http://`` proxy every request goes through (a kubeconfig's ``proxy-url``; HTTPS via
    CONNECT). None: the environment's ``HTTPS_PROXY``/``NO_PROXY``, as urllib reads them."""

    @classmethod
    def in_cluster(cls) -> KubeAccess:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise NoClusterAccess("not in a pod: KUBERNETES_SERVICE_HOST is not set; give --kube-api")
        token_file = SERVICE_ACCOUNT_DIR / "token"
        host = f"[{host}]" if ":" in host else host
        return cls(server=f"https://{host}:{port}", token=lambda: _read(token_file),
                   ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"))

    @classmethod
    def with_token_file(cls, server: str, token_file: str | None) -> KubeAccess:
        return cls(server=server.rstrip("/"), token=lambda: _read(Path(token_file)) if token_file else None)


class _NamedServer(ssl.SSLContext):
    """A TLS context that checks the certificate against, and sends as SNI, ``server_name`` whatever
    host was dialled (``http.client`` passes the dialled host as ``server_hostname``)."""

    server_name = ""

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["server_hostname"] = self.server_name
        return super().wrap_socket(sock, *args, **kwargs)


def _tls_context(ca_file: str | None, server_name: str | None) -> ssl.SSLContext:
    if not server_name:
        return ssl.create_default_context(cafile=ca_file)
    # What create_default_context does for a client (certificate and host name required), as a _NamedServer.
    context = _NamedServer(ssl.PROTOCOL_TLS_CLIENT)
    context.server_name = server_name
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    else:
        context.load_default_certs()
    return context


def _shown(url: str | None) -> str:
    """A proxy URL without its password."""
    parts = urllib.parse.urlsplit(url or "")
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class Kube:
    def __init__(self, access: KubeAccess) -> None:
        self.access = access
        self.ssl_context: ssl.SSLContext | None = None
        if access.server.startswith("https://"):
            try:
                context = _tls_context(access.ca_file, access.tls_server_name)
                if access.client_cert_file:
                    context.load_cert_chain(access.client_cert_file, access.client_key_file)
            except (OSError, ssl.SSLError) as error:
                raise NoClusterAccess(f"cannot load the TLS material for {access.server}: {error}") from None
            if access.insecure_skip_tls_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self.ssl_context = context

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None, accept: str = "application/json", timeout: float = REQUEST_TIMEOUT_SECONDS,
                content_type: str = "application/json", limit: reads.Limit = reads.KUBE_API) -> bytes:
        """The answer's body, at most ``limit`` long, all of it within ``timeout`` (:mod:`.reads`)."""
        url = self.access.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={"Accept": accept})
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            token = self.access.token()
        except OSError as error:
            raise NoClusterAccess(f"cannot read the API token: {error}") from None
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            return reads.read(request, limit, timeout, self.ssl_context, proxy=self.access.proxy_url)
        except reads.TooLarge as error:  # the same answer again would be as large
            raise NoClusterAccess(str(error)) from None
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:300]
            if error.code in (401, 403) and "/proxy" not in path:
                raise NoClusterAccess(f"the API server refused {method} {path} ({error.code}): {detail}") from None
            raise ApiError(error.code, path, detail) from None
        except ssl.SSLCertVerificationError as error:  # the same certificate again would fail the same way
            raise NoClusterAccess(f"the API server at {self.access.server} is not the one its certificate "
                                  f"names: {error}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            reason = getattr(error, "reason", None)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise NoClusterAccess(f"the API server at {self.access.server} is not the one its certificate "
                                      f"names: {reason}") from None
            raise NoClusterAccess(f"cannot reach the API server at {self.access.server}"
                                  f"{' through proxy ' + _shown(self.access.proxy_url) if self.access.proxy_url else ''}"
                                  f": {error}", transient=True) from None

    def get(self, path: str, **query: str) -> dict[str, Any]:
        body = self.request("GET", path, query=query or None)
        try:
            answer = reads.json_loads(body)
        except ValueError:  # a truncated answer: worth another try
            answer = None
        if not isinstance(answer, dict):
            raise NoClusterAccess(f"the API server sent a body that is not a JSON object for {path}", transient=True)
        return answer

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        """The ``items`` of a list answer; an answer without a list of objects is refused like one
        that is not JSON."""
        items = self.get(path, **query).get("items")
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise NoClusterAccess(f"the API server's answer for {path} has no list of objects", transient=True)
        return items

    def delete(self, path: str) -> None:
        self.request("DELETE", path, body={"kind": "DeleteOptions", "apiVersion": "v1",
                                           "propagationPolicy": "Background"})

    # --- the objects the gate reads ----------------------------------------------------------

    def _get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self.get(path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def ray_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(f"/apis/ray.io/v1/namespaces/{namespace}/rayservices/{name}")

    def ray_cluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}")

    def delete_ray_cluster(self, namespace: str, name: str) -> None:
        self.delete(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}")

    def ray_cluster_pods(self, namespace: str, cluster: str, selector: Mapping[str, str] | None = None,
                         *, found: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The pods KubeRay made for RayCluster ``cluster``: labelled ``ray.io/cluster=<cluster>`` *and*
        controlled by that RayCluster's uid (KubeRay 1.4.0 sets it as each pod's controller,
        ``raycluster_controller.go`` lines 1055 and 1082). A pod that only carries the label, created by
        anyone who may create pods in the namespace, is not the cluster's: the gate neither counts,
        probes, nor rolls out over it. ``found``: the RayCluster as already read. Empty when the
        RayCluster is gone (its pods are being deleted with it)."""
        found = found if found is not None else self.ray_cluster(namespace, cluster)
        if found is None:
            return []
        uid = (found.get("metadata") or {}).get("uid")
        pods = self.pods(namespace, {wire.RAY_CLUSTER_LABEL: cluster, **(selector or {})})
        return [p for p in pods if uid and any(
            ref.get("kind") == "RayCluster" and ref.get("uid") == uid and ref.get("controller")
            for ref in (p.get("metadata") or {}).get("ownerReferences") or ())]

    def daemon_set(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")

    def pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return self.items(f"/api/v1/namespaces/{namespace}/pods", labelSelector=_selector(selector))

    def nodes(self, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return self.items("/api/v1/nodes", labelSelector=_selector(selector))

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")

    def put_config_map(self, namespace: str, name: str, labels: Mapping[str, str], data: Mapping[str, str]) -> None:
        """Create the ConfigMap, or replace it when it exists (a Job run again under the same name)."""
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)}, "data": dict(data)}
        try:
            self.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body=body, timeout=10)
        except ApiError as error:
            if error.status != 409:
                raise
            self.request("PUT", f"/api/v1/namespaces/{namespace}/configmaps/{name}", body=body, timeout=10)

    def config_map(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def replace_config_map(self, config_map: Mapping[str, Any]) -> None:
        """PUT the ConfigMap as read and changed: its ``resourceVersion`` makes a concurrent writer fail."""
        meta = config_map["metadata"]
        self.request("PUT", f"/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}",
                     body=dict(config_map), timeout=10)

    def config_maps(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return self.items(f"/api/v1/namespaces/{namespace}/configmaps", labelSelector=_selector(selector))

    def events(self, namespace: str, *, kind: str, name: str, reason: str) -> list[dict[str, Any]]:
        """The core Events about object ``kind``/``name`` with ``reason`` (field selectors the API
        server supports for Events: ``involvedObject.*`` and ``reason``)."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name},reason={reason}"
        return self.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=selector).get("items") or []

    def pod_log(self, namespace: str, pod: str, container: str, since: str | None = None) -> str:
        """The container's log; with ``since`` (RFC 3339), only lines the kubelet stamped at or after it.
        The API server is asked for one byte over :data:`.reads.POD_LOG`, so a log over it fails the
        read (:class:`.reads.TooLarge`) instead of arriving cut."""
        query = {"container": container, "limitBytes": str(reads.POD_LOG.max_bytes + 1),
                 **({"sinceTime": since} if since else {})}
        return self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", query=query, accept="*/*",
                            limit=reads.POD_LOG).decode(errors="replace")

    def proxy_url(self, namespace: str, kind: str, name: str, port: int, path: str) -> str:
        """The API server's proxy to a pod or service port (``kind``: ``pods`` or ``services``)."""
        return f"{self.access.server}/api/v1/namespaces/{namespace}/{kind}/{name}:{port}/proxy{path}"


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


@dataclass
class Endpoints:
    """How the gate reaches pods and Services: directly from inside the cluster, or through the API server."""

    kube: Kube
    via_api_proxy: bool = False

    def _auth(self) -> dict[str, str]:
        token = self.kube.access.token() if self.via_api_proxy else None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def open(self, request: urllib.request.Request, limit: reads.Limit, timeout: float) -> reads.Response:
        for key, value in self._auth().items():
            request.add_header(key, value)
        if not self.via_api_proxy:
            return reads.urlopen(request, limit, timeout)
        return reads.urlopen(request, limit, timeout, self.kube.ssl_context, proxy=self.kube.access.proxy_url)

    def get(self, url: str, limit: reads.Limit, timeout: float = 15.0, headers: Mapping[str, str] | None = None) -> bytes:
        """The body of ``GET url``: at most ``limit`` long, all of it within ``timeout``."""
        with self.open(urllib.request.Request(url, method="GET", headers=dict(headers or {})), limit, timeout) as answer:
            return answer.body()

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
