"""The cdk8s charts of the serving layer, in apply order.

1. ``serving-namespace``: the Namespace (with its Pod Security Admission labels) and the
   ServiceAccount the Ray pods run as (bound to an IAM role through EKS Pod Identity by
   ``ray_llm_eks.constructs.serving``).
2. ``serving-network-policy``: default deny, and what is allowed (:mod:`.network_policy`),
   before any pod starts.
3. ``serving-admission-policy``: only this deployment's accounts may run privileged or tolerate
   the GPU taint (:mod:`.admission_policy`).
4. ``serving-rayservice``: the KubeRay ``RayService`` and the Service of the OpenAI API.

Chart ids are public API: they name the files in ``cdk.out/manifests/`` and the CDK constructs
that apply them. Switching topology changes only what is inside ``serving-rayservice``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import cdk8s
import cdk8s_plus_35 as kplus
from cdk8s_plus_35 import k8s

from ..base.placement import WORKER_ROLES
from ..base.serving import SERVE_PORT, EndpointType, RayAuth, ServingSpec
from ..base.wire import INSTANCE_LABEL, RAY_ROLE_LABEL, SERVES_HTTP_LABEL, SERVING_INSTANCE_NAMESPACE_LABEL
from ..pd import bundle as pd_bundle
from . import gcs_redis, pod_templates, serve_config
from .labels import APP_INSTANCE_LABEL, APP_NAME_LABEL, NAME
from .teardown_guard import TeardownGuard, TeardownGuardAccess
from .admission_policy import ADMISSION_POLICY_CHART_ID, AdmissionPolicyChart
from .network_policy import NETWORK_POLICY_CHART_ID, NetworkPolicyChart
from .rayservice import (
    HeadGroupSpec,
    RayClusterConfig,
    RayService,
    RayServiceSpec,
    UpgradeStrategy,
    WorkerGroupSpec,
)

NAMESPACE_CHART_ID = "serving-namespace"
RAYSERVICE_CHART_ID = "serving-rayservice"
OPENAI_SERVICE_SUFFIX = "-openai"

INTERNAL_NLB_ANNOTATIONS = {
    # Handled by the service controller of the AWS cloud-controller-manager, which EKS runs in
    # its control plane (out of tree since Kubernetes 1.27; no AWS Load Balancer Controller
    # needed): an NLB instead of a Classic ELB, in the private subnets (those tagged
    # kubernetes.io/role/internal-elb=1).
    "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}


POD_SECURITY_LEVEL_KEY = "pod-security.kubernetes.io/enforce"
POD_SECURITY_LABELS = {
    # The workers need what "baseline" forbids (hostPath for the model cache; privileged, or
    # IPC_LOCK, for NIXL to register GPU memory with EFA), so the namespace enforces
    # "privileged". "restricted" is audited and warned, so every pod that is looser than it is
    # named in the API server's audit log and in kubectl's output. Who may run privileged here is
    # narrowed by RBAC on the namespace and by the NetworkPolicies, not by this label.
    POD_SECURITY_LEVEL_KEY: "privileged",
    "pod-security.kubernetes.io/enforce-version": "v1.35",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/audit-version": "v1.35",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "v1.35",
}


def openai_service_name(service_name: str) -> str:
    """The Service of the OpenAI API for the RayService ``service_name``."""
    return f"{service_name}{OPENAI_SERVICE_SUFFIX}"


def endpoint_command(spec: ServingSpec) -> str:
    """How a client reaches the OpenAI API, as the stack's ``EndpointCommand`` output says it: never
    a ``kubectl port-forward``, which needs ``pods/portforward`` in the serving namespace and so
    reaches every port of the Ray head (docs/threat-model.md, T1). From a pod of a namespace in
    ``client_namespaces`` (the ClusterIP Service), or through the internal NLB from ``client_cidrs``."""
    service, namespace = openai_service_name(spec.service_name), spec.namespace
    if spec.service.endpoint is EndpointType.internal_nlb:
        return (f"kubectl -n {namespace} get svc {service} -o jsonpath='{{.status.loadBalancer.ingress[0].hostname}}'"
                f"  # then http://<that name>:{SERVE_PORT}/v1 from {', '.join(spec.service.client_cidrs)}")
    url = f"http://{service}.{namespace}.svc:{SERVE_PORT}/v1"
    if spec.service.client_namespaces:
        return (f"curl -s {url}/models  # from a pod in namespace {', '.join(spec.service.client_namespaces)} "
                "(serving.client_namespaces)")
    return (f"none yet: name the namespaces of your client pods in serving.client_namespaces (they call {url}), "
            "or set serving.endpoint internal-nlb with serving.client_cidrs")


class ServingNamespaceChart(cdk8s.Chart):
    """Namespace ``spec.namespace`` and the ServiceAccount of the Ray pods."""

    def __init__(self, scope: cdk8s.App, construct_id: str, *, spec: ServingSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        self.namespace_object = kplus.Namespace(self, "Namespace", metadata=cdk8s.ApiObjectMetadata(
            name=spec.namespace,
            labels={**POD_SECURITY_LABELS, SERVING_INSTANCE_NAMESPACE_LABEL: spec.service_name}))
        self.service_account = kplus.ServiceAccount(
            self,
            "ServiceAccount",
            metadata=cdk8s.ApiObjectMetadata(name=spec.service_name, namespace=spec.namespace),
            # No Kubernetes API token in the Ray pods: nothing in them calls the API (KubeRay's
            # autoscaler is off), and a token in a privileged pod is one more thing to steal.
            # EKS Pod Identity does not use it: its webhook mounts a projected token of its own
            # (audience pods.eks.amazonaws.com) and sets AWS_CONTAINER_CREDENTIALS_FULL_URI.
            automount_token=False,
        )
        self.service_account.node.add_dependency(self.namespace_object)
        # Autoscaled, the head gets an account of its own: KubeRay binds the Ray autoscaler's Role
        # (pods get/list/watch, rayclusters get/patch) to the head pod's account, and that right
        # must not reach the workers, whose privileged pods could otherwise mint a token for it
        # through their node's kubelet.
        self.head_service_account: kplus.ServiceAccount | None = None
        if spec.autoscaling:
            self.head_service_account = kplus.ServiceAccount(
                self, "HeadServiceAccount",
                metadata=cdk8s.ApiObjectMetadata(name=pod_templates.head_service_account(spec), namespace=spec.namespace),
                automount_token=False)
            self.head_service_account.node.add_dependency(self.namespace_object)
        self.teardown_guard = TeardownGuardAccess(self, "TeardownGuard", spec=spec)
        self.teardown_guard.node.add_dependency(self.namespace_object)


class RayServiceChart(cdk8s.Chart):
    """The RayService (head + prefill + decode worker groups) and the OpenAI API Service."""

    def __init__(self, scope: cdk8s.App, construct_id: str, *, spec: ServingSpec, service_account_name: str,
                 teardown_guard: TeardownGuardAccess) -> None:
        super().__init__(scope, construct_id, namespace=spec.namespace, disable_resource_name_hashes=True)
        # The 47-character limit is checked by the spec and, for use without one, by the RayService object.
        name = spec.service_name
        self.serving = spec

        self.serve_config = serve_config.build_serve_config(spec)
        workers = [
            WorkerGroupSpec(
                group_name=role,
                replicas=spec.pool(role).desired_size,
                min_replicas=spec.pool(role).min_size,
                max_replicas=spec.pool(role).max_size,
                ray_start_params=pod_templates.worker_ray_start_params(spec, role),
                template=pod_templates.worker_template(spec, role, service_account_name),
            )
            for role in WORKER_ROLES
        ]
        self.spec = RayServiceSpec(
            serve_config_v2=self.serve_config.to_text(),
            upgrade_strategy=UpgradeStrategy.none,
            exclude_head_pod_from_serve_svc=True,
            ray_cluster_config=RayClusterConfig(
                ray_version=spec.ray_version,
                head_group_spec=HeadGroupSpec(
                    ray_start_params=pod_templates.head_ray_start_params(),
                    template=pod_templates.head_template(
                        spec, pod_templates.head_service_account(spec) if spec.autoscaling else service_account_name),
                ),
                worker_group_specs=workers,
                auth_mode=RayAuth.token.value if spec.service.ray_auth is RayAuth.token else None,
                enable_in_tree_autoscaling=spec.autoscaling,
                autoscaler_options=pod_templates.autoscaler_options() if spec.autoscaling else None,
                gcs_fault_tolerance_options=(gcs_redis.fault_tolerance_options(spec)
                                             if spec.service.gcs_fault_tolerance.enabled else None),
            ),
        )
        if spec.disaggregation.min_prompt_tokens:
            # The conditional P/D program the Ray pods mount (pod_templates._pd_program).
            archive = pd_bundle.archive()
            k8s.KubeConfigMap(self, "PdProgram", metadata=k8s.ObjectMeta(
                name=pod_templates.pd_program_config_map(spec), labels={APP_NAME_LABEL: NAME, APP_INSTANCE_LABEL: name}),
                binary_data={pd_bundle.archive_name(archive): base64.b64encode(archive).decode()})
        self.ray_service = RayService(
            self,
            "RayService",
            name=name,
            spec=self.spec,
            labels={APP_NAME_LABEL: NAME, APP_INSTANCE_LABEL: name},
        )

        internal_nlb = spec.service.endpoint is EndpointType.internal_nlb
        self.openai_service = kplus.Service(
            self,
            "OpenAiService",
            metadata=cdk8s.ApiObjectMetadata(
                name=openai_service_name(name),
                annotations=dict(INTERNAL_NLB_ANNOTATIONS) if internal_nlb else None,
            ),
            type=kplus.ServiceType.LOAD_BALANCER if internal_nlb else kplus.ServiceType.CLUSTER_IP,
            # The NLB's security group and NodePort admit only these (required by the spec).
            load_balancer_source_ranges=list(spec.service.client_cidrs) if internal_nlb else None,
            ports=[
                kplus.ServicePort(
                    name="http",
                    port=SERVE_PORT,
                    target_port=SERVE_PORT,
                    protocol=kplus.Protocol.TCP,
                )
            ],
        )
        # Every worker runs a Serve proxy next to its model replica; the head runs none.
        # KubeRay's readiness probe on workers keeps a pod out until its proxy answers.
        self.openai_service.select_label(INSTANCE_LABEL, name)
        self.openai_service.select_label(SERVES_HTTP_LABEL, "true")
        if internal_nlb:
            # Local keeps the client's source address (no SNAT to a node IP at the NodePort), so
            # the NetworkPolicy's client CIDRs see the real caller.
            cdk8s.ApiObject.of(self.openai_service).add_json_patch(
                cdk8s.JsonPatch.add("/spec/externalTrafficPolicy", "Local"))

        self.disruption_budgets = {
            role: disruption_budget(self, spec, role) for role in WORKER_ROLES
            if spec.pool(role).min_size >= MIN_REPLICAS_FOR_DISRUPTION_BUDGET
        }
        # Last in the manifest: `kubectl delete -f` deletes it after the RayService and waits for it
        # while KubeRay finishes with the RayClusters (docs/rayservice.md, "Delete order").
        self.teardown_guard = TeardownGuard(self, "TeardownGuard", spec=spec, access=teardown_guard)
        self.teardown_guard.node.add_dependency(self.ray_service)


MIN_REPLICAS_FOR_DISRUPTION_BUDGET = 2
"""A budget on a single pod would block every drain (a managed node group update then fails
after EKS's 15-minute eviction timeout, or needs ``force``): with one pod per leg, an upgrade
takes the leg down whatever the budget says, so none is rendered (docs/threat-model.md)."""


def disruption_budget(chart: cdk8s.Chart, spec: ServingSpec, role: str) -> k8s.KubePodDisruptionBudget:
    """At most one pod of the leg evicted at a time: node drains (managed node group updates,
    Cluster Autoscaler scale-in) wait for the replacement before taking the next. A pod that is
    not Ready anyway may always be evicted (``unhealthyPodEvictionPolicy: AlwaysAllow``, GA in
    Kubernetes 1.31), so a crash-looping worker cannot wedge an upgrade.

    Counted from the node group's ``min_size`` (a fixed group's size; an autoscaled leg may shrink
    to it, and a budget above what runs would block every drain). An integer ``minAvailable``
    (those pods less one), not ``maxUnavailable``: the pods belong
    to a RayCluster, which has no ``scale`` subresource, and for ``maxUnavailable`` (or a
    percentage) the disruption controller needs the owner's scale, or allows no disruption at all
    (Kubernetes docs, "Specifying a Disruption Budget for your Application": "Arbitrary workloads
    ... only an integer value can be used with .spec.minAvailable")."""
    name = spec.service_name
    return k8s.KubePodDisruptionBudget(
        chart, f"DisruptionBudget-{role}",
        metadata=k8s.ObjectMeta(name=f"{name}-{role}", labels={
            APP_NAME_LABEL: NAME, APP_INSTANCE_LABEL: name}),
        spec=k8s.PodDisruptionBudgetSpec(
            min_available=k8s.IntOrString.from_number(spec.pool(role).min_size - 1),
            unhealthy_pod_eviction_policy="AlwaysAllow",
            selector=k8s.LabelSelector(match_labels={INSTANCE_LABEL: name,
                                                     RAY_ROLE_LABEL: role})))


@dataclass(frozen=True)
class ServingCharts:
    namespace: ServingNamespaceChart
    network_policy: NetworkPolicyChart
    admission_policy: AdmissionPolicyChart
    rayservice: RayServiceChart

    @property
    def charts(self) -> list[cdk8s.Chart]:
        """Apply order: the namespace and service account before anything that lives in them, the
        policies before any pod, so no pod starts with the namespace open."""
        return [self.namespace, self.network_policy, self.admission_policy, self.rayservice]


def build_serving_charts(app: cdk8s.App, spec: ServingSpec) -> ServingCharts:
    """The serving charts of ``spec``, in ``app`` (a ``cdk8s.App``: charts never sit under a CDK construct)."""
    namespace_chart = ServingNamespaceChart(app, NAMESPACE_CHART_ID, spec=spec)
    policy_chart = NetworkPolicyChart(app, NETWORK_POLICY_CHART_ID, spec=spec)
    policy_chart.add_dependency(namespace_chart)
    rayservice_chart = RayServiceChart(
        app,
        RAYSERVICE_CHART_ID,
        spec=spec,
        service_account_name=namespace_chart.service_account.name,
        teardown_guard=namespace_chart.teardown_guard,
    )
    admission_chart = AdmissionPolicyChart(app, ADMISSION_POLICY_CHART_ID, spec=spec)
    admission_chart.add_dependency(policy_chart)
    rayservice_chart.add_dependency(admission_chart)
    return ServingCharts(namespace=namespace_chart, network_policy=policy_chart, admission_policy=admission_chart,
                         rayservice=rayservice_chart)
