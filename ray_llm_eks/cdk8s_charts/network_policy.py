"""Who may talk to the serving namespace, and where its pods may talk to (``serving-network-policy``).

Without policies any pod in the cluster can reach the Ray head's dashboard and Jobs API (8265)
and GCS (6379), neither authenticated in Ray 2.58 by default, and submit a job that runs on a
privileged GPU worker. These NetworkPolicies, enforced by the VPC CNI's network policy agent
(``InferenceCluster`` turns it on: ``enableNetworkPolicy``), deny everything in the namespace,
then allow:

- ``<svc>-within-deployment``: every port between this deployment's pods (Ray head, workers,
  the gate, the EFA counter readers, the bench Job: all carry ``ray-llm-eks/instance=<svc>``).
  Ray uses dynamic ports (raylet, object manager, workers, NIXL's side channel), and the VPC CNI
  agent takes at most 24 port combinations per selector, so the peers are selected, not ports.
- ``<svc>-operator-dashboard``: the KubeRay operator (``operator_namespace``, default ``kuberay``) to the head's 8265
  only: it reads and updates Serve applications through the dashboard's REST API
  (``rayservice_controller.go`` at v1.4.0). Not GCS, not the workers.
- ``<svc>-openai-clients``: port 8000 of the Serve proxies (workers; the head runs none) from
  the namespaces and CIDRs named in ``client_namespaces``/``client_cidrs``. A port-forward enters
  the pod's own network namespace and is not subject to policies.
- ``<svc>-dns``: every pod of the namespace to CoreDNS (``kube-system``, ``k8s-app=kube-dns``), 53.
- ``<svc>-egress``: this deployment's pods to ``egress_cidrs`` on 443 (model download, AWS APIs,
  the Kubernetes API for the gate, CloudFormation's signal URL), never to the link-local range
  (no IMDS: no node role credentials), plus the EKS Pod Identity agent (169.254.170.23:80), where
  the pods get their own role's credentials.

Not governed by NetworkPolicy: the KV transfer itself. NIXL's LIBFABRIC/EFA traffic bypasses the
kernel IP path; the EFA security group (``EfaFabric``) admits only its own members.
"""

from __future__ import annotations

import ipaddress

import cdk8s
from cdk8s_plus_35 import k8s

from ..base.infrastructure import KUBERAY_OPERATOR_POD_LABELS
from ..base.serving import SERVE_PORT, ServingSpec
from ..base.wire import INSTANCE_LABEL, RAY_ROLE_LABEL, SERVES_HTTP_LABEL
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


def _port(number: int, protocol: str = "TCP") -> k8s.NetworkPolicyPort:
    return k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(number), protocol=protocol)


def _namespace(name: str) -> k8s.LabelSelector:
    return k8s.LabelSelector(match_labels={NAMESPACE_NAME_LABEL: name})


class NetworkPolicyChart(cdk8s.Chart):
    """The serving namespace's NetworkPolicies (see the module docstring)."""

    def __init__(self, scope: cdk8s.App, construct_id: str, *, spec: ServingSpec) -> None:
        super().__init__(scope, construct_id, namespace=spec.namespace, disable_resource_name_hashes=True)
        name = spec.service_name
        deployment = k8s.LabelSelector(match_labels={INSTANCE_LABEL: name})
        labels = {APP_NAME_LABEL: NAME, APP_INSTANCE_LABEL: name}

        def policy(id_: str, suffix: str, spec_: k8s.NetworkPolicySpec) -> None:
            k8s.KubeNetworkPolicy(self, id_, metadata=k8s.ObjectMeta(name=f"{name}-{suffix}", labels=labels), spec=spec_)

        policy("DefaultDeny", "default-deny", k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(), policy_types=["Ingress", "Egress"]))
        policy("WithinDeployment", "within-deployment", k8s.NetworkPolicySpec(
            pod_selector=deployment, policy_types=["Ingress", "Egress"],
            ingress=[k8s.NetworkPolicyIngressRule(from_=[k8s.NetworkPolicyPeer(pod_selector=deployment)])],
            egress=[k8s.NetworkPolicyEgressRule(to=[k8s.NetworkPolicyPeer(pod_selector=deployment)])]))
        policy("OperatorDashboard", "operator-dashboard", k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(match_labels={INSTANCE_LABEL: name,
                                                         RAY_ROLE_LABEL: "head"}),
            policy_types=["Ingress"],
            ingress=[k8s.NetworkPolicyIngressRule(
                from_=[k8s.NetworkPolicyPeer(namespace_selector=_namespace(spec.operator_namespace),
                                             pod_selector=k8s.LabelSelector(match_labels=dict(KUBERAY_OPERATOR_POD_LABELS)))],
                ports=[_port(DASHBOARD_PORT)])]))
        clients = [k8s.NetworkPolicyPeer(namespace_selector=_namespace(n)) for n in spec.service.client_namespaces]
        clients += [k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=c)) for c in spec.service.client_cidrs]
        if clients:
            policy("OpenAiClients", "openai-clients", k8s.NetworkPolicySpec(
                pod_selector=k8s.LabelSelector(match_labels={INSTANCE_LABEL: name,
                                                             SERVES_HTTP_LABEL: "true"}),
                policy_types=["Ingress"],
                ingress=[k8s.NetworkPolicyIngressRule(from_=clients, ports=[_port(SERVE_PORT)])]))
        policy("Dns", "dns", k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(), policy_types=["Egress"],
            egress=[k8s.NetworkPolicyEgressRule(
                to=[k8s.NetworkPolicyPeer(namespace_selector=_namespace("kube-system"),
                                          pod_selector=k8s.LabelSelector(match_labels=dict(KUBE_DNS_LABELS)))],
                ports=[_port(DNS_PORT, "UDP"), _port(DNS_PORT, "TCP")])]))
        policy("Egress", "egress", k8s.NetworkPolicySpec(
            pod_selector=deployment, policy_types=["Egress"],
            egress=[
                k8s.NetworkPolicyEgressRule(
                    to=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=c, except_=_except(c)))
                        for c in spec.service.egress_cidrs],
                    ports=[_port(HTTPS_PORT)]),
                k8s.NetworkPolicyEgressRule(
                    to=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=POD_IDENTITY_AGENT))], ports=[_port(80)]),
            ]))


def _except(cidr: str) -> list[str] | None:
    """The link-local range (IMDS and friends) carved out of any egress block that contains it."""
    return [LINK_LOCAL] if ipaddress.IPv4Network(LINK_LOCAL).subnet_of(ipaddress.IPv4Network(cidr)) else None
