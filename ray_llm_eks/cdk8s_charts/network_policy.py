"""Who may talk to the serving namespace, and where its pods may talk to (``serving-network-policy``).

Without policies any pod in the cluster can reach the Ray head's dashboard and Jobs API (8265),
GCS (6379), the Ray Client server (10001) and the dashboard agents (52365), and submit a job that
runs on a privileged GPU worker (with token authentication, the default, Ray also wants the
cluster's token; with KubeRay 1.4.0 nothing else stands in the way). These NetworkPolicies,
enforced by the VPC CNI's network policy agent (``InferenceCluster`` turns it on, in strict mode:
``constructs.addons``), deny everything in the namespace, then allow each role of pod what it
uses, selected by the labels this library renders (``base.wire``):

- ``<svc>-ray``: every port among the Ray pods, head and workers (``ray-role`` set: only the
  RayService's pod templates carry it). Ray uses dynamic ports (raylet, object manager, workers,
  NIXL's side channel), and the VPC CNI agent takes at most 24 port combinations per selector, so
  the peers are selected, not ports. No other pod is such a peer, whatever labels it copies of
  the instance's.
- ``<svc>-operator-dashboard``: the KubeRay operator (``operator_namespace``, default ``kuberay``)
  to the head's 8265 only: it submits the Serve config and reads Serve's status through the
  dashboard's REST API (``rayservice_controller.go`` at v1.4.0 and v1.5.1). Not GCS, not the workers.
- ``<svc>-verification``: the gate and continuous verification to the Serve proxies' 8000 and the
  metrics port (8080) of the workers, and to the EFA counter readers' 9475. Not the head: they
  read Serve's state from the RayService through the Kubernetes API (``verification.rollout``).
- ``<svc>-bench``: the benchmark Job to the workers' 8000 and 8080.
- ``<svc>-counter-readers``: the EFA counter readers (host ``/sys``) accept 9475 from the gate
  and continuous verification, and open nothing (no rule for their egress).
- ``<svc>-openai-clients``: port 8000 of the Serve proxies (workers; the head runs none) from
  the namespaces and CIDRs named in ``client_namespaces``/``client_cidrs``.
- ``<svc>-dns``: every pod of the namespace to CoreDNS (``kube-system``, ``k8s-app=kube-dns``), 53.
- ``<svc>-egress-ray`` and ``<svc>-egress``: the Ray pods, and the gate, continuous
  verification, the bench Job, the teardown guard and the GCS password copy, to ``egress_cidrs``
  on 443 (model download, AWS APIs, the Kubernetes API, CloudFormation's signal URL), never to the
  link-local range (no IMDS: no node role credentials), plus the EKS Pod Identity agent
  (169.254.170.23:80), where the pods get their own role's credentials. The counter readers get
  neither.

Selected by label, so a pod that copies a role's labels gets that role's access: who may create
pods in the serving namespace is the admission policy's and RBAC's concern (docs/threat-model.md).

Not governed by NetworkPolicy: the KV transfer itself. NIXL's LIBFABRIC/EFA traffic bypasses the
kernel IP path; the EFA security group (``EfaFabric``) admits only its own members. Nor a
``kubectl port-forward``, which enters the pod's own network namespace.
"""

from __future__ import annotations

import ipaddress

import cdk8s
from cdk8s_plus_35 import k8s

from ..base.infrastructure import KUBERAY_OPERATOR_POD_LABELS
from ..base.serving import SERVE_PORT, ServingSpec
from ..base.wire import (
    BENCH_COMPONENT,
    COMPONENT_LABEL,
    EFA_COUNTER_PORT,
    EFA_COUNTERS_COMPONENT,
    GATE_COMPONENT,
    GCS_REDIS_SECRET_COMPONENT,
    INSTANCE_LABEL,
    METRICS_PORT,
    MONITOR_COMPONENT,
    RAY_ROLE_LABEL,
    SERVES_HTTP_LABEL,
    TEARDOWN_GUARD_COMPONENT,
)
from .labels import APP_INSTANCE_LABEL, APP_NAME_LABEL, NAME

NETWORK_POLICY_CHART_ID = "serving-network-policy"
DASHBOARD_PORT = 8265
DNS_PORT = 53
HTTPS_PORT = 443
LINK_LOCAL = "169.254.0.0/16"
POD_IDENTITY_AGENT = "169.254.170.23/32"
"""EKS Pod Identity agent's link-local address (EKS user guide, "pod-id-agent-setup"); port 80."""
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by Kubernetes on every namespace (immutable, since 1.21): a namespace selector by name."""
KUBE_DNS_LABELS = {"k8s-app": "kube-dns"}


VERIFIERS = (GATE_COMPONENT, MONITOR_COMPONENT)
"""The gate and continuous verification: what they reach, they reach alike."""
HTTPS_CLIENTS = (*VERIFIERS, BENCH_COMPONENT, TEARDOWN_GUARD_COMPONENT, GCS_REDIS_SECRET_COMPONENT)
"""The components that call out on 443 (the Kubernetes API, AWS APIs, the signal URL, a tokenizer)."""


def _port(number: int, protocol: str = "TCP") -> k8s.NetworkPolicyPort:
    return k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(number), protocol=protocol)


def _namespace(name: str) -> k8s.LabelSelector:
    return k8s.LabelSelector(match_labels={NAMESPACE_NAME_LABEL: name})


class NetworkPolicyChart(cdk8s.Chart):
    """The serving namespace's NetworkPolicies (see the module docstring)."""

    def __init__(self, scope: cdk8s.App, construct_id: str, *, spec: ServingSpec) -> None:
        super().__init__(scope, construct_id, namespace=spec.namespace, disable_resource_name_hashes=True)
        name = spec.service_name
        labels = {APP_NAME_LABEL: NAME, APP_INSTANCE_LABEL: name}

        def policy(id_: str, suffix: str, spec_: k8s.NetworkPolicySpec) -> None:
            k8s.KubeNetworkPolicy(self, id_, metadata=k8s.ObjectMeta(name=f"{name}-{suffix}", labels=labels), spec=spec_)

        def components(*values: str) -> k8s.LabelSelector:
            return k8s.LabelSelector(match_labels={INSTANCE_LABEL: name}, match_expressions=[
                k8s.LabelSelectorRequirement(key=COMPONENT_LABEL, operator="In", values=list(values))])

        ray = k8s.LabelSelector(match_labels={INSTANCE_LABEL: name}, match_expressions=[
            k8s.LabelSelectorRequirement(key=RAY_ROLE_LABEL, operator="Exists")])
        workers = k8s.LabelSelector(match_labels={INSTANCE_LABEL: name, SERVES_HTTP_LABEL: "true"})
        counters = k8s.LabelSelector(match_labels={INSTANCE_LABEL: name, COMPONENT_LABEL: EFA_COUNTERS_COMPONENT})
        worker_ports = [_port(SERVE_PORT), _port(METRICS_PORT)]

        policy("DefaultDeny", "default-deny", k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(), policy_types=["Ingress", "Egress"]))
        policy("Ray", "ray", k8s.NetworkPolicySpec(
            pod_selector=ray, policy_types=["Ingress", "Egress"],
            ingress=[k8s.NetworkPolicyIngressRule(from_=[k8s.NetworkPolicyPeer(pod_selector=ray)])],
            egress=[k8s.NetworkPolicyEgressRule(to=[k8s.NetworkPolicyPeer(pod_selector=ray)])]))
        policy("OperatorDashboard", "operator-dashboard", k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(match_labels={INSTANCE_LABEL: name,
                                                         RAY_ROLE_LABEL: "head"}),
            policy_types=["Ingress"],
            ingress=[k8s.NetworkPolicyIngressRule(
                from_=[k8s.NetworkPolicyPeer(namespace_selector=_namespace(spec.operator_namespace),
                                             pod_selector=k8s.LabelSelector(match_labels=dict(KUBERAY_OPERATOR_POD_LABELS)))],
                ports=[_port(DASHBOARD_PORT)])]))
        policy("Verification", "verification", k8s.NetworkPolicySpec(
            pod_selector=components(*VERIFIERS), policy_types=["Egress"],
            egress=[k8s.NetworkPolicyEgressRule(to=[k8s.NetworkPolicyPeer(pod_selector=workers)], ports=worker_ports),
                    k8s.NetworkPolicyEgressRule(to=[k8s.NetworkPolicyPeer(pod_selector=counters)],
                                                ports=[_port(EFA_COUNTER_PORT)])]))
        policy("Bench", "bench", k8s.NetworkPolicySpec(
            pod_selector=components(BENCH_COMPONENT), policy_types=["Egress"],
            # The counter readers too: bench records each level's EFA bytes per node (summary.json "utilization").
            egress=[k8s.NetworkPolicyEgressRule(to=[k8s.NetworkPolicyPeer(pod_selector=workers)], ports=worker_ports),
                    k8s.NetworkPolicyEgressRule(to=[k8s.NetworkPolicyPeer(pod_selector=counters)],
                                                ports=[_port(EFA_COUNTER_PORT)])]))
        policy("WorkersFromVerification", "workers-from-verification", k8s.NetworkPolicySpec(
            pod_selector=workers, policy_types=["Ingress"],
            ingress=[k8s.NetworkPolicyIngressRule(
                from_=[k8s.NetworkPolicyPeer(pod_selector=components(*VERIFIERS, BENCH_COMPONENT))],
                ports=worker_ports)]))
        policy("CounterReaders", "counter-readers", k8s.NetworkPolicySpec(
            pod_selector=counters, policy_types=["Ingress"],
            ingress=[k8s.NetworkPolicyIngressRule(
                from_=[k8s.NetworkPolicyPeer(pod_selector=components(*VERIFIERS, BENCH_COMPONENT))],
                ports=[_port(EFA_COUNTER_PORT)])]))
        clients = [k8s.NetworkPolicyPeer(namespace_selector=_namespace(n)) for n in spec.service.client_namespaces]
        clients += [k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=c)) for c in spec.service.client_cidrs]
        if clients:
            policy("OpenAiClients", "openai-clients", k8s.NetworkPolicySpec(
                pod_selector=workers, policy_types=["Ingress"],
                ingress=[k8s.NetworkPolicyIngressRule(from_=clients, ports=[_port(SERVE_PORT)])]))
        policy("Dns", "dns", k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(), policy_types=["Egress"],
            egress=[k8s.NetworkPolicyEgressRule(
                to=[k8s.NetworkPolicyPeer(namespace_selector=_namespace("kube-system"),
                                          pod_selector=k8s.LabelSelector(match_labels=dict(KUBE_DNS_LABELS)))],
                ports=[_port(DNS_PORT, "UDP"), _port(DNS_PORT, "TCP")])]))
        https = [
            k8s.NetworkPolicyEgressRule(
                to=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=c, except_=_except(c)))
                    for c in spec.service.egress_cidrs],
                ports=[_port(HTTPS_PORT)]),
            k8s.NetworkPolicyEgressRule(
                to=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=POD_IDENTITY_AGENT))], ports=[_port(80)]),
        ]
        # Two policies: a selector cannot say "Ray pods or these components".
        policy("EgressRay", "egress-ray", k8s.NetworkPolicySpec(pod_selector=ray, policy_types=["Egress"], egress=https))
        policy("Egress", "egress", k8s.NetworkPolicySpec(pod_selector=components(*HTTPS_CLIENTS), policy_types=["Egress"],
                                                         egress=https))


def _except(cidr: str) -> list[str] | None:
    """The link-local range (IMDS and friends) carved out of any egress block that contains it."""
    return [LINK_LOCAL] if ipaddress.IPv4Network(LINK_LOCAL).subnet_of(ipaddress.IPv4Network(cidr)) else None
