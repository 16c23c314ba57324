"""Let the API server's proxy through the serving namespace's NetworkPolicies, for one ``verify`` run.

``ray-llm-eks verify`` reaches the pods and Services through the API server's proxy, so the
connections come from the EKS control plane's network interfaces in the VPC, which no rendered
policy admits (``serving-network-policy`` denies everything but the deployment's own pods). A
standing rule for those addresses would be wrong twice: they change when EKS replaces the
control-plane interfaces, and a rule for the cluster subnets would admit every pod, whose
addresses come from the same subnets.

So ``verify`` admits, for its run only, exactly the addresses the ``default/kubernetes``
Endpoints list (the API server's own, which the VPC CNI never gives a pod), on exactly the ports
the gate probes, to this deployment's pods; and deletes the policy when it ends, however it ends.
Reaching a pod through the proxy still needs the ``pods/proxy`` or ``services/proxy`` right in
Kubernetes RBAC, which the person running ``verify`` has and a neighbour pod has not.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .kube import ApiError, Kube
from .shared import wire

API_SERVER_ENDPOINTS = "/api/v1/namespaces/default/endpoints/kubernetes"
POLICY_SUFFIX = wire.VERIFY_API_PROXY_COMPONENT


def api_server_addresses(kube: Kube) -> list[str]:
    """The API server's addresses in the VPC, as the ``kubernetes`` Service's Endpoints list them."""
    endpoints = kube.get(API_SERVER_ENDPOINTS)
    addresses = sorted({a["ip"] for subset in endpoints.get("subsets") or [] for a in subset.get("addresses") or []
                        if a.get("ip")})
    if not addresses:
        raise LookupError("the default/kubernetes Endpoints list no API server address to admit")
    return addresses


def port_of(url: str) -> int:
    parts = urllib.parse.urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def policy_name(ray_service: str, run: str) -> str:
    """One per run: two runs at once must not delete each other's admission."""
    return f"{ray_service}-{POLICY_SUFFIX}-{run}"


def policy(namespace: str, ray_service: str, instance_label: str, addresses: Sequence[str],
           ports: Sequence[int], run: str) -> dict[str, Any]:
    """Ingress from the API server's addresses (IPv4 /32, IPv6 /128) to this deployment's pods."""
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": policy_name(ray_service, run), "namespace": namespace,
                     "labels": {instance_label: ray_service, wire.COMPONENT_LABEL: POLICY_SUFFIX}},
        "spec": {
            "podSelector": {"matchLabels": {instance_label: ray_service}},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"ipBlock": {"cidr": f"{a}/{128 if ':' in a else 32}"}} for a in addresses],
                "ports": [{"protocol": "TCP", "port": p} for p in sorted(set(ports))],
            }],
        },
    }


@contextlib.contextmanager
def admitted(kube: Kube, namespace: str, ray_service: str, instance_label: str, ports: Sequence[int],
             log: Callable[[str], None] = lambda _: None) -> Iterator[dict[str, Any]]:
    """The policy exists inside the ``with`` block and is gone after it, SIGTERM included (only a
    SIGKILL leaves it behind: ``kubectl delete networkpolicy -l ray-llm-eks/component=verify-api-proxy``)."""
    body = policy(namespace, ray_service, instance_label, api_server_addresses(kube), ports, secrets.token_hex(3))
    collection = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
    path = f"{collection}/{body['metadata']['name']}"
    try:
        kube.request("POST", collection, body=body, timeout=10)
    except ApiError as error:
        if error.status != 409:
            raise
        kube.request("PUT", path, body=body, timeout=10)
    log(f"admitted the API server ({', '.join(b['ipBlock']['cidr'] for b in body['spec']['ingress'][0]['from'])}) "
        f"to ports {', '.join(str(p['port']) for p in body['spec']['ingress'][0]['ports'])} "
        f"with NetworkPolicy {namespace}/{body['metadata']['name']} for this run")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _exit)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        yield body
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        try:
            kube.delete(path)
            log(f"deleted NetworkPolicy {namespace}/{body['metadata']['name']}")
        except Exception as error:  # noqa: BLE001 - say so; the run's own result still stands
            log(f"could not delete NetworkPolicy {namespace}/{body['metadata']['name']}: {error}; "
                f"delete it with: kubectl -n {namespace} delete networkpolicy {body['metadata']['name']}")


def _exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)
