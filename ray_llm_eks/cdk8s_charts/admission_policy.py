"""Who may run privileged, reach the host, or land on the GPU nodes (``serving-admission-policy``).

The GPU taint keeps pods off the GPU nodes only until a pod adds the toleration, and the
namespace's Pod Security level is ``privileged`` (the workers need it). This
ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``, built into Kubernetes 1.30+;
EKS 1.35 runs it without a webhook) grants, per service account of this deployment:

=========================  ==========  ==================  ========  =============  =========
who                        privileged  added capabilities  hostPath  GPU toleration  host namespaces, ``nodeName``
=========================  ==========  ==================  ========  =============  =========
the Ray pods' account      yes         yes                 yes       yes            no
the EFA counter readers'   no          no                  yes (/sys) yes           no
anyone else                no          no                  no        no             no
=========================  ==========  ==================  ========  =============  =========

"Host namespaces" are ``hostNetwork``, ``hostPID`` and ``hostIPC``: the VPC CNI's policy agent
admits every connection from the pod's own node, so a hostNetwork pod on the (untainted) system
node would walk past the NetworkPolicies to the head's 8265 and 6379. ``nodeName`` set at
creation skips the scheduler and with it every taint. Ephemeral containers (``kubectl debug``)
may never be privileged or add capabilities, not even on the Ray pods (which never use one), so
the right to debug a pod is not the right to root on its node.

Scope. One policy per deployment, bound twice:

- ``<name>-own`` to the serving namespace, where the table applies;
- ``<name>-elsewhere`` to every namespace that is neither exempt (``admission_exempt_namespaces``,
  default ``kube-system``: aws-node, kube-proxy and the device plugins run there with host access
  and catch-all tolerations) nor another deployment's serving namespace (labelled
  ``ray-llm-eks/serving-instance``), where nobody gets anything in the table.

So two deployments in one cluster each govern their own namespace and agree everywhere else.
Labelling a namespace needs ``patch`` or ``create`` on namespaces, cluster-scoped rights.

Updates: a pod already running when the policy arrives (a node agent in a namespace that is not
exempt) is not frozen: an UPDATE is denied only for a grant the old object did not already use.

The grants go to a pod's service account and to who creates the pod together: the Ray pods'
account only when the KubeRay operator creates them, the EFA counter readers' only when the
DaemonSet controller does. Whoever else can make a pod run as those accounts (a Deployment, a
Job, a RayJob's submitter pod) gets none of them.

Not covered: ``pods/binding`` (a Binding carries no pod spec to check; only the scheduler holds
that right by default), and whoever may create namespaces can create one already labelled as a
serving namespace, which the ``-elsewhere`` binding then skips: keep namespace creation to admins.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
from cdk8s_plus_35 import k8s

from ..base.infrastructure import DAEMONSET_CONTROLLER_USERS, KUBERAY_OPERATOR_SERVICE_ACCOUNT
from ..base.placement import GPU_TAINT_KEY
from ..base.serving import ServingSpec
from ..base.wire import SERVING_INSTANCE_NAMESPACE_LABEL
from .labels import APP_INSTANCE_LABEL, APP_NAME_LABEL, NAME, efa_counters_name

ADMISSION_POLICY_CHART_ID = "serving-admission-policy"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _list(obj: str, field: str) -> str:
    return f"(has({obj}.spec.{field}) ? {obj}.spec.{field} : [])"


def _containers(obj: str) -> str:
    return f"({_list(obj, 'containers')} + {_list(obj, 'initContainers')} + {_list(obj, 'ephemeralContainers')})"


def _flag(obj: str, field: str) -> str:
    return f"(has({obj}.spec.{field}) && {obj}.spec.{field} == true)"


@dataclass(frozen=True)
class Grant:
    """One thing a pod may ask for, as a CEL predicate over a pod (``object`` or ``oldObject``)."""

    name: str
    description: str
    template: str

    def on(self, obj: str) -> str:
        return self.template.format(o=obj)


PRIVILEGED = Grant("privileged", "privileged containers", _containers("{o}") +
                   ".exists(c, has(c.securityContext) && has(c.securityContext.privileged) && "
                   "c.securityContext.privileged == true)")
CAPABILITIES = Grant("capabilities", "added Linux capabilities", _containers("{o}") +
                     ".exists(c, has(c.securityContext) && has(c.securityContext.capabilities) && "
                     "has(c.securityContext.capabilities.add) && size(c.securityContext.capabilities.add) > 0)")
HOST_PATH = Grant("hostPath", "hostPath volumes", _list("{o}", "volumes") + ".exists(v, has(v.hostPath))")
GPU_TOLERATION = Grant("gpuToleration", f"tolerating the GPU taint ({GPU_TAINT_KEY})",
                       _list("{o}", "tolerations") + ".exists(t, "
                       f"(has(t.key) && t.key == '{GPU_TAINT_KEY}') || (!has(t.key) && has(t.operator) && t.operator == 'Exists'))")
HOST_NAMESPACES = Grant("hostNamespaces", "hostNetwork, hostPID or hostIPC",
                        " || ".join(_flag("{o}", f) for f in ("hostNetwork", "hostPID", "hostIPC")))
EPHEMERAL_PRIVILEGES = Grant("ephemeralPrivileges", "privileged or capability-adding ephemeral containers",
                             _list("{o}", "ephemeralContainers") + ".exists(c, has(c.securityContext) && ("
                             "(has(c.securityContext.privileged) && c.securityContext.privileged == true) || "
                             "(has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add) && "
                             "size(c.securityContext.capabilities.add) > 0)))")
GRANTS = (PRIVILEGED, CAPABILITIES, HOST_PATH, GPU_TOLERATION, HOST_NAMESPACES, EPHEMERAL_PRIVILEGES)


def grants(spec: ServingSpec) -> dict[str, tuple[Grant, ...]]:
    """Service account → what it may ask for (the module docstring's table)."""
    return {
        spec.service_name: (PRIVILEGED, CAPABILITIES, HOST_PATH, GPU_TOLERATION),
        efa_counters_name(spec.service_name): (HOST_PATH, GPU_TOLERATION),
    }


def creators(spec: ServingSpec) -> dict[str, tuple[str, ...]]:
    """Service account → who may create its privileged pods: the KubeRay operator for the Ray
    pods, the DaemonSet controller for the EFA counter readers. Anyone else who can make a pod run
    as those accounts (a Deployment, a Job, ``kubectl run --overrides``) gets none of the grants."""
    return {
        spec.service_name: (f"system:serviceaccount:{spec.operator_namespace}:{KUBERAY_OPERATOR_SERVICE_ACCOUNT}",),
        efa_counters_name(spec.service_name): DAEMONSET_CONTROLLER_USERS,
    }


def policy_name(spec: ServingSpec) -> str:
    return f"{spec.namespace}-{spec.service_name}-pod-privileges"


def _allowed(spec: ServingSpec, grant: Grant) -> str:
    accounts = [account for account, granted in grants(spec).items() if grant in granted]
    if not accounts:
        return "false"
    who = creators(spec)

    def users(account: str) -> str:
        return ", ".join("'" + user + "'" for user in who[account])

    alternatives = " || ".join(
        f"(object.spec.serviceAccountName == '{account}' && request.userInfo.username in [{users(account)}])"
        for account in accounts)
    return f"request.namespace == '{spec.namespace}' && has(object.spec.serviceAccountName) && ({alternatives})"


def _who(spec: ServingSpec, grant: Grant) -> str:
    accounts = [account for account, granted in grants(spec).items() if grant in granted]
    if not accounts:
        return "nobody outside the exempt namespaces " + ", ".join(spec.service.admission_exempt_namespaces)
    return (f"only to pods of the service accounts {', '.join(accounts)} in namespace {spec.namespace}, "
            "created by their controller (the KubeRay operator, the DaemonSet controller)")


class AdmissionPolicyChart(cdk8s.Chart):
    """The ValidatingAdmissionPolicy and its two bindings (cluster-scoped; see the module docstring)."""

    def __init__(self, scope: cdk8s.App, construct_id: str, *, spec: ServingSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        name = policy_name(spec)
        labels = {APP_NAME_LABEL: NAME, APP_INSTANCE_LABEL: spec.service_name}
        variables = [k8s.Variable(name=f"{g.name}Allowed", expression=_allowed(spec, g)) for g in GRANTS]
        validations = [
            k8s.Validation(
                expression=(f"!({g.on('object')}) || variables.{g.name}Allowed || "
                            f"(request.operation == 'UPDATE' && ({g.on('oldObject')}))"),
                reason="Forbidden",
                message=f"{g.description}: allowed {_who(spec, g)}")
            for g in GRANTS
        ]
        validations.append(k8s.Validation(
            expression="request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''",
            reason="Forbidden",
            message="spec.nodeName at creation skips the scheduler and every taint; use a nodeSelector or affinity"))
        k8s.KubeValidatingAdmissionPolicy(self, "Policy", metadata=k8s.ObjectMeta(name=name, labels=labels),
                                          spec=k8s.ValidatingAdmissionPolicySpec(
            failure_policy="Fail",
            match_constraints=k8s.MatchResources(resource_rules=[k8s.NamedRuleWithOperations(
                api_groups=[""], api_versions=["v1"], operations=["CREATE", "UPDATE"],
                resources=["pods", "pods/ephemeralcontainers"])]),
            variables=variables,
            validations=validations))
        own = k8s.LabelSelector(match_expressions=[k8s.LabelSelectorRequirement(
            key=NAMESPACE_NAME_LABEL, operator="In", values=[spec.namespace])])
        elsewhere = k8s.LabelSelector(match_expressions=[
            k8s.LabelSelectorRequirement(key=NAMESPACE_NAME_LABEL, operator="NotIn",
                                         values=sorted(spec.service.admission_exempt_namespaces)),
            k8s.LabelSelectorRequirement(key=SERVING_INSTANCE_NAMESPACE_LABEL, operator="DoesNotExist"),
        ])
        for id_, suffix, selector in (("BindingOwn", "own", own), ("BindingElsewhere", "elsewhere", elsewhere)):
            k8s.KubeValidatingAdmissionPolicyBinding(
                self, id_, metadata=k8s.ObjectMeta(name=f"{name}-{suffix}", labels=labels),
                spec=k8s.ValidatingAdmissionPolicyBindingSpec(
                    policy_name=name, validation_actions=["Deny"],
                    match_resources=k8s.MatchResources(namespace_selector=selector)))
