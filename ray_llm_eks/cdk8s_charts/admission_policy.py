"""Who may run privileged, and who may land on the GPU nodes (``serving-admission-policy``).

The GPU taint keeps pods off the GPU nodes only until a pod adds the toleration, and the
namespace's Pod Security level is ``privileged`` (the workers need it). This
ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``, built into Kubernetes 1.30+;
EKS 1.35 runs it without a webhook) denies, in every namespace but ``kube-system``, any pod
that is privileged or tolerates the GPU taint, unless it runs in the serving namespace as the
Ray pods' service account or the EFA counter readers' one.

The check reads ``object.spec.serviceAccountName``, not the requesting user: the KubeRay operator
and the DaemonSet controller create these pods on the workload's behalf. Who may create pods as
those accounts is then a matter of RBAC in the serving namespace (docs/threat-model.md).
``kube-system`` is left out: the NVIDIA and EFA device plugins and aws-node run there with GPU
tolerations and host access. A toleration without a key and ``operator: Exists`` tolerates
every taint, so it counts as a GPU toleration.
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_35 import k8s

from ..spec.placement import GPU_TAINT_KEY
from ..spec.serving import ServingSpec
from . import pod_templates

ADMISSION_POLICY_CHART_ID = "serving-admission-policy"
EXEMPT_NAMESPACES = ("kube-system",)


def _containers(field: str) -> str:
    return f"(has(object.spec.{field}) ? object.spec.{field} : [])"


PRIVILEGED = (
    f"({_containers('containers')} + {_containers('initContainers')}).exists(c, has(c.securityContext) && "
    "has(c.securityContext.privileged) && c.securityContext.privileged == true)"
)
GPU_TOLERATION = (
    "has(object.spec.tolerations) && object.spec.tolerations.exists(t, "
    f"(has(t.key) && t.key == '{GPU_TAINT_KEY}') || (!has(t.key) && has(t.operator) && t.operator == 'Exists'))"
)


def allowed_accounts(spec: ServingSpec) -> tuple[str, ...]:
    """The Ray pods' account (named after the service) and the EFA counter readers'."""
    return spec.service_name, pod_templates.efa_counters_name(spec.service_name)


def policy_name(spec: ServingSpec) -> str:
    return f"{spec.namespace}-{spec.service_name}-gpu-and-privileged"


class AdmissionPolicyChart(cdk8s.Chart):
    """The ValidatingAdmissionPolicy and its binding (cluster-scoped; see the module docstring)."""

    def __init__(self, scope: cdk8s.App, id: str, *, spec: ServingSpec) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        name = policy_name(spec)
        accounts = ", ".join(f"'{a}'" for a in allowed_accounts(spec))
        labels = {pod_templates.APP_NAME_LABEL: pod_templates.NAME, pod_templates.APP_INSTANCE_LABEL: spec.service_name}
        who = f"the service accounts {', '.join(allowed_accounts(spec))} in namespace {spec.namespace}"
        k8s.KubeValidatingAdmissionPolicy(self, "Policy", metadata=k8s.ObjectMeta(name=name, labels=labels),
                                          spec=k8s.ValidatingAdmissionPolicySpec(
            failure_policy="Fail",
            match_constraints=k8s.MatchResources(
                namespace_selector=k8s.LabelSelector(match_expressions=[k8s.LabelSelectorRequirement(
                    key="kubernetes.io/metadata.name", operator="NotIn", values=list(EXEMPT_NAMESPACES))]),
                resource_rules=[k8s.NamedRuleWithOperations(
                    api_groups=[""], api_versions=["v1"], operations=["CREATE", "UPDATE"], resources=["pods"])]),
            variables=[
                k8s.Variable(name="allowed", expression=(
                    f"request.namespace == '{spec.namespace}' && has(object.spec.serviceAccountName) && "
                    f"object.spec.serviceAccountName in [{accounts}]")),
                k8s.Variable(name="privileged", expression=PRIVILEGED),
                k8s.Variable(name="gpuToleration", expression=GPU_TOLERATION),
            ],
            validations=[
                k8s.Validation(expression="!variables.privileged || variables.allowed",
                               message=f"privileged containers are allowed only for {who}"),
                k8s.Validation(expression="!variables.gpuToleration || variables.allowed",
                               message=f"tolerating the GPU taint ({GPU_TAINT_KEY}) is allowed only for {who}"),
            ]))
        k8s.KubeValidatingAdmissionPolicyBinding(self, "Binding", metadata=k8s.ObjectMeta(name=name, labels=labels),
                                                 spec=k8s.ValidatingAdmissionPolicyBindingSpec(
            policy_name=name, validation_actions=["Deny"]))
