"""A NetworkPolicy evaluator for the tests: Kubernetes' semantics for the parts the charts use.

Implemented from the Kubernetes API reference (networking.k8s.io/v1 NetworkPolicy) and the
concept page "Network Policies":

- A pod is isolated for ingress (egress) when at least one policy in its namespace selects it and
  lists ``Ingress`` (``Egress``) in ``policyTypes``; then a connection is allowed only if some
  rule of some such policy allows it (policies are additive). A pod no policy isolates allows all.
- A policy without ``policyTypes`` (or with an empty list) has the API server's default (field
  reference: "If this field is not specified, it will default based on the existence of ingress
  or egress rules; policies that contain an egress section are assumed to affect egress, and all
  policies (whether or not they contain an ingress section) are assumed to affect ingress"):
  ``Ingress`` always, plus ``Egress`` when its ``egress`` list is not empty.
- A connection between two pods needs both the source's egress and the destination's ingress.
- A peer with ``podSelector`` alone means pods of the policy's namespace; with
  ``namespaceSelector`` alone, every pod of the matching namespaces; with both, the matching pods
  of the matching namespaces; ``ipBlock`` matches addresses (``except`` carved out).
- An empty ``from``/``to`` list (or none) matches every peer; an empty ``ports`` list every port.
- Label selectors: ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists, DoesNotExist);
  an empty selector matches everything.

Named ports and SCTP are not used by the charts and not implemented (a rule with a named port
raises, so a chart that starts using one fails the tests instead of passing them).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace set) or an address outside the cluster (namespace None)."""

    ip: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None

    def ns_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels} if self.namespace else {}


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(peer: dict[str, Any], policy_namespace: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.ip)
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])
    if not other.is_pod:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.ns_labels()):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector"), other.labels)


def _port_matches(ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        if "port" not in entry:
            return True
        if isinstance(entry["port"], str):
            raise NotImplementedError(f"named port {entry['port']!r}")
        if entry["port"] <= port <= entry.get("endPort", entry["port"]):
            return True
    return False


def policy_types(policy: dict[str, Any]) -> list[str]:
    """``spec.policyTypes``, or the API server's default when it is absent or empty."""
    spec = policy["spec"]
    if spec.get("policyTypes"):
        return list(spec["policyTypes"])
    return ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def _side_allows(policies: list[dict[str, Any]], pod: Endpoint, other: Endpoint, port: int, protocol: str,
                 direction: str) -> bool:
    kind, peers_key, rules_key = ("Ingress", "from", "ingress") if direction == "ingress" else ("Egress", "to", "egress")
    isolating = [p for p in policies if p["metadata"]["namespace"] == pod.namespace
                 and kind in policy_types(p)
                 and selects(p["spec"].get("podSelector") or {}, pod.labels)]
    if not isolating:
        return True
    for policy in isolating:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            if (not peers or any(_peer_matches(peer, policy["metadata"]["namespace"], other) for peer in peers)) \
                    and _port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def allowed(policies: list[dict[str, Any]], source: Endpoint, destination: Endpoint, port: int,
            protocol: str = "TCP") -> bool:
    """Whether ``source`` may open a connection to ``destination``'s ``port``."""
    egress = not source.is_pod or _side_allows(policies, source, destination, port, protocol, "egress")
    ingress = not destination.is_pod or _side_allows(policies, destination, source, port, protocol, "ingress")
    return egress and ingress
