"""Who may run privileged, reach the host, or land on the GPU nodes (``serving-admission-policy``).

The GPU taint keeps pods off the GPU nodes only until a pod adds the toleration, and the
namespace's Pod Security level is ``privileged`` (the workers need it). This
ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``, built into Kubernetes 1.30+;
EKS 1.35 runs it without a webhook) grants, per service account of this deployment and only on
pods its controller creates, exactly what the rendered pods use (:func:`profiles`):

- the Ray workers (account ``<svc>``), created by the KubeRay operator
  (``kuberay/kuberay-operator``, the same account in KubeRay 1.4.0 and 1.5.1, chart
  ``values.yaml`` ``serviceAccount.name``): privileged containers and init containers (or
  ``IPC_LOCK`` with the ``ipc-lock`` profile), ``CHOWN`` and ``FOWNER`` (the cache's init
  container), the host path ``/var/lib/ray-llm-eks/hf-cache``, and ``operator: Equal``
  tolerations of each leg's GPU taint; they may run as root (privileged);
- the Ray head (``<svc>``, or ``<svc>-head`` when autoscaled; labelled ``ray.io/node-type: head``),
  created by the KubeRay operator: nothing, and every container runs as the image's user
  (``image.user_id``) with ``runAsNonRoot``, whoever creates it;
- the EFA counter readers (``<svc>-efa-counters``), created by the DaemonSet controller: the host
  path ``/sys``, mounted read-only by every container, the workers' GPU tolerations, and every
  container as 65534 with ``runAsNonRoot``, whoever creates it;
- anyone else, anywhere: none of it.

Nobody outside the exempt agents gets ``hostNetwork``, ``hostPID``, ``hostIPC``, a ``hostPort``,
``spec.nodeName`` at creation (it skips the scheduler and every taint), or a privileged or
capability-adding ephemeral container. A toleration "reaches the GPU taint" when its key is the
GPU taint's, or it has no key and ``operator: Exists`` (it tolerates every taint); the granted
ones must equal a rendered toleration field by field. Tolerations of other keys (the
``node.kubernetes.io/*`` ones the DaemonSet controller and ``DefaultTolerationSeconds`` add) are
not grants. A host path must be one of the account's, byte for byte, and every container that
mounts a read-only one must mount it ``readOnly``. Where a user is named above, every
container (init and ephemeral too) must run with ``runAsNonRoot`` and that ``runAsUser``
(container's or pod's), whoever creates the pod.

Updates. A pod's spec is immutable but for container images, added tolerations and a few
timers (``ValidatePodUpdate``, kubernetes ``pkg/apis/core/validation/validation.go``), and
ephemeral containers arrive through ``pods/ephemeralcontainers`` (matched here). Status goes
through ``pods/status``, which is not matched: the kubelet is untouched. So:

- an UPDATE that leaves ``spec`` as it was (labels, annotations, owner references, finalizers:
  what controllers and the garbage collector write) is admitted;
- any other UPDATE of a pod of a granted account or an exempt agent (an image swap, a
  toleration, an ephemeral container: ``kubectl debug`` included) is admitted only from the
  account's controller, and then only within its grants. KubeRay 1.5.1's head account, which may
  patch pods for the autoscaler, is not a controller here.

Node agents (``serving.admission_exempt_agents``, ``namespace/service-account``) are exempt only
when the DaemonSet or ReplicaSet controller creates their pods; a pod someone creates by hand
under the same account gets the "anyone else" row.

Scope. One policy per deployment, bound twice, by namespace name (the API server sets
``kubernetes.io/metadata.name``; nobody can forge it):

- ``<name>-own`` to the serving namespace;
- ``<name>-elsewhere`` to every other namespace but the serving namespaces of other deployments
  named in ``serving.other_serving_namespaces`` (which their own policies govern). kube-system is
  governed too: its agents are exempt by account, not the namespace.

RayClusters. The operator turns a RayCluster in the serving namespace into pods of the granted
accounts, so a second policy (``<name>-ray-clusters``, bound to the serving namespace by name)
admits a RayCluster there only from the operator (its RayService controller creates them), and
an UPDATE of one from anyone else only if it changes nothing but the worker groups' replica
counts and ``scaleStrategy`` (what the Ray autoscaler patches, from the head's account) or
leaves the spec alone (metadata).

Not covered: ``pods/binding`` (a Binding carries no pod spec; only the scheduler holds that right
by default), and RayJob or RayService objects in the serving namespace: the operator turns them
into RayClusters and pods of the granted accounts, so those rights stay with the deploy.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
from cdk8s_plus_35 import k8s

from ..base.infrastructure import AGENT_CONTROLLER_USERS, DAEMONSET_CONTROLLER_USER, KUBERAY_OPERATOR_SERVICE_ACCOUNT
from ..base.placement import GPU_TAINT_KEY
from ..base.serving import SecurityProfile, ServingSpec
from .containers import NOBODY
from .labels import APP_INSTANCE_LABEL, APP_NAME_LABEL, NAME, efa_counters_name
from .model_cache import HF_CACHE_CAPABILITIES, HF_CACHE_HOST_PATH
from .pod_templates import head_service_account

ADMISSION_POLICY_CHART_ID = "serving-admission-policy"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
RAY_NODE_TYPE_LABEL, RAY_HEAD = "ray.io/node-type", "head"
"""The label KubeRay sets on every Ray pod it creates (v1.4.0 and v1.5.1
``ray-operator/controllers/ray/utils/constant.go``, ``RayNodeTypeLabelKey``), ``head`` or ``worker``."""
EFA_COUNTERS_HOST_PATH = "/sys"
"""What the EFA counter readers mount, read-only (``cdk8s_charts.verification``)."""
IPC_LOCK = "IPC_LOCK"


def _list(obj: str, field: str) -> str:
    return f"(has({obj}.spec.{field}) ? {obj}.spec.{field} : [])"


def _containers(obj: str = "object", *, ephemeral: bool = True) -> str:
    lists = [_list(obj, "containers"), _list(obj, "initContainers")]
    if ephemeral:
        lists.append(_list(obj, "ephemeralContainers"))
    return "(" + " + ".join(lists) + ")"


def _flag(field: str) -> str:
    return f"(has(object.spec.{field}) && object.spec.{field} == true)"


def _quoted(values) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


_PRIVILEGED = "(has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged == true)"
_ADDS = ("(has(c.securityContext) && has(c.securityContext.capabilities) && "
         "has(c.securityContext.capabilities.add) && size(c.securityContext.capabilities.add) > 0)")
_REACHES_GPU = (f"((has(t.key) && t.key == '{GPU_TAINT_KEY}') || "
                "((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))")


@dataclass(frozen=True)
class HostPathGrant:
    path: str
    read_only: bool


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str
    effect: str
    operator: str = "Equal"


@dataclass(frozen=True)
class Profile:
    """What one account's pods may ask for (a row of the module docstring's table)."""

    name: str
    account: str
    creators: tuple[str, ...]
    head: bool | None = None
    """True: only pods labelled ``ray.io/node-type: head``; False: only pods without that label."""
    privileged: bool = False
    capabilities: tuple[str, ...] = ()
    host_paths: tuple[HostPathGrant, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    run_as_user: int | None = None
    """Set: every container runs non-root as this user, whoever creates the pod."""

    def selects(self, namespace: str) -> str:
        """CEL: the pod is this profile's (namespace, account, Ray node type), whoever asks."""
        parts = [f"request.namespace == '{namespace}'", f"variables.account == '{self.account}'"]
        if self.head is not None:
            parts.append(("" if self.head else "!") + "variables.rayHead")
        return "(" + " && ".join(parts) + ")"


def profiles(spec: ServingSpec) -> tuple[Profile, ...]:
    """The grants, each as narrow as the rendered pods it serves."""
    operator = (f"system:serviceaccount:{spec.operator_namespace}:{KUBERAY_OPERATOR_SERVICE_ACCOUNT}",)
    gpu = tuple(dict.fromkeys(Toleration(p.taint.key, p.taint.value, p.taint.effect) for p in spec.pools))
    privileged = spec.service.security_profile is SecurityProfile.privileged
    head_account = head_service_account(spec) if spec.autoscaling else spec.service_name
    return (
        Profile("workers", spec.service_name, operator, head=False, privileged=privileged,
                capabilities=tuple(sorted({*HF_CACHE_CAPABILITIES, *(() if privileged else (IPC_LOCK,))})),
                host_paths=(HostPathGrant(HF_CACHE_HOST_PATH, read_only=False),), tolerations=gpu),
        Profile("head", head_account, operator, head=True, run_as_user=spec.image.user_id),
        Profile("efaCounters", efa_counters_name(spec.service_name), (DAEMONSET_CONTROLLER_USER,),
                host_paths=(HostPathGrant(EFA_COUNTERS_HOST_PATH, read_only=True),), tolerations=gpu,
                run_as_user=NOBODY),
    )


@dataclass(frozen=True)
class Grant:
    """One thing a pod may ask for: ``uses`` over ``object``; ``allows(profile)`` is the CEL
    that the pod asks for no more of it than the profile grants ("false" for nobody)."""

    name: str
    description: str
    uses: str

    def allows(self, profile: Profile) -> str:
        return _ALLOWS[self.name](profile)


def _allow_privileged(p: Profile) -> str:
    if not p.privileged:
        return "false"
    # KubeRay copies the Ray container's securityContext into the workers' wait-gcs-ready init
    # container (v1.4.0/v1.5.1 ray-operator/controllers/ray/common/pod.go): init containers too.
    return f"{_list('object', 'ephemeralContainers')}.all(c, !{_PRIVILEGED})"


def _allow_capabilities(p: Profile) -> str:
    if not p.capabilities:
        return "false"
    return (f"{_list('object', 'ephemeralContainers')}.all(c, !{_ADDS}) && "
            f"{_containers(ephemeral=False)}.all(c, !{_ADDS} || "
            f"c.securityContext.capabilities.add.all(x, x in {_quoted(p.capabilities)}))")


def _allow_host_path(p: Profile) -> str:
    if not p.host_paths:
        return "false"

    def one(g: HostPathGrant) -> str:
        exact = f"v.hostPath.path == '{g.path}'"
        if not g.read_only:
            return f"({exact})"
        return (f"({exact} && {_containers()}.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m, "
                "m.name != v.name || (has(m.readOnly) && m.readOnly == true))))")

    return f"{_list('object', 'volumes')}.all(v, !has(v.hostPath) || " + " || ".join(one(g) for g in p.host_paths) + ")"


def _allow_gpu_toleration(p: Profile) -> str:
    if not p.tolerations:
        return "false"

    def field(name: str, default: str) -> str:
        return f"(has(t.{name}) ? t.{name} : '{default}')"

    exact = " || ".join(
        f"({field('key', '')} == '{t.key}' && {field('operator', 'Equal')} == '{t.operator}' && "
        f"{field('value', '')} == '{t.value}' && {field('effect', '')} == '{t.effect}')" for t in p.tolerations)
    return f"{_list('object', 'tolerations')}.all(t, !{_REACHES_GPU} || {exact})"


def _never(_: Profile) -> str:
    return "false"


PRIVILEGED = Grant("privileged", "privileged containers", f"{_containers()}.exists(c, {_PRIVILEGED})")
CAPABILITIES = Grant("capabilities", "added Linux capabilities", f"{_containers()}.exists(c, {_ADDS})")
HOST_PATH = Grant("hostPath", "hostPath volumes", f"{_list('object', 'volumes')}.exists(v, has(v.hostPath))")
GPU_TOLERATION = Grant("gpuToleration", f"tolerating the GPU taint ({GPU_TAINT_KEY}) or every taint",
                       f"{_list('object', 'tolerations')}.exists(t, {_REACHES_GPU})")
HOST_NAMESPACES = Grant("hostNamespaces", "hostNetwork, hostPID or hostIPC",
                        " || ".join(_flag(f) for f in ("hostNetwork", "hostPID", "hostIPC")))
HOST_PORT = Grant("hostPort", "host ports", f"{_containers()}.exists(c, has(c.ports) && "
                  "c.ports.exists(p, has(p.hostPort) && p.hostPort != 0))")
EPHEMERAL_PRIVILEGES = Grant("ephemeralPrivileges", "privileged or capability-adding ephemeral containers",
                             f"{_list('object', 'ephemeralContainers')}.exists(c, {_PRIVILEGED} || {_ADDS})")
GRANTS = (PRIVILEGED, CAPABILITIES, HOST_PATH, GPU_TOLERATION, HOST_NAMESPACES, HOST_PORT, EPHEMERAL_PRIVILEGES)
_ALLOWS = {"privileged": _allow_privileged, "capabilities": _allow_capabilities, "hostPath": _allow_host_path,
           "gpuToleration": _allow_gpu_toleration, "hostNamespaces": _never, "hostPort": _never,
           "ephemeralPrivileges": _never}


def _agents(spec: ServingSpec) -> list[tuple[str, str]]:
    return [tuple(agent.split("/", 1)) for agent in spec.service.admission_exempt_agents]  # type: ignore[misc]


def policy_name(spec: ServingSpec) -> str:
    return f"{spec.namespace}-{spec.service_name}-pod-privileges"


def _variables(spec: ServingSpec) -> list[k8s.Variable]:
    users = "request.userInfo.username"
    agents = " || ".join(f"(request.namespace == '{ns}' && variables.account == '{account}')"
                         for ns, account in _agents(spec)) or "false"
    governed = " || ".join([*(p.selects(spec.namespace) for p in profiles(spec)), f"({agents})"])
    # Which controller may change a governed pod's spec: the profile's creators, or the agents'.
    controller = " || ".join([*(f"({p.selects(spec.namespace)} && {users} in {_quoted(p.creators)})"
                                for p in profiles(spec)),
                              f"(({agents}) && {users} in {_quoted(AGENT_CONTROLLER_USERS)})"])
    variables = [
        ("account", "has(object.spec.serviceAccountName) && object.spec.serviceAccountName != '' ? "
                    "object.spec.serviceAccountName : 'default'"),
        ("rayHead", f"has(object.metadata.labels) && '{RAY_NODE_TYPE_LABEL}' in object.metadata.labels && "
                    f"object.metadata.labels['{RAY_NODE_TYPE_LABEL}'] == '{RAY_HEAD}'"),
        ("specUnchanged", "request.operation == 'UPDATE' && object.spec == oldObject.spec"),
        ("exempt", f"({agents}) && {users} in {_quoted(AGENT_CONTROLLER_USERS)}"),
        ("governed", governed),
        ("byController", controller),
    ]
    variables += [(p.name, f"{p.selects(spec.namespace)} && {users} in {_quoted(p.creators)}")
                  for p in profiles(spec)]
    return [k8s.Variable(name=name, expression=expression) for name, expression in variables]


def _who(spec: ServingSpec, grant: Grant) -> str:
    granted = [p for p in profiles(spec) if grant.allows(p) != "false"]
    if not granted:
        return "to nobody but the exempt node agents (serving.admission_exempt_agents)"
    return ("only to pods of " + ", ".join(f"{spec.namespace}/{p.account}" for p in granted) +
            " created by their controller, and only as the rendered pods use it")


def _non_root(uid: int) -> str:
    def effective(field: str, default: str) -> str:
        return (f"(has(c.securityContext) && has(c.securityContext.{field}) ? c.securityContext.{field} : "
                f"(has(object.spec.securityContext) && has(object.spec.securityContext.{field}) ? "
                f"object.spec.securityContext.{field} : {default}))")

    return f"{_containers()}.all(c, {effective('runAsNonRoot', 'false')} == true && {effective('runAsUser', '-1')} == {uid})"


def _validations(spec: ServingSpec) -> list[k8s.Validation]:
    validations = []
    for grant in GRANTS:
        allowed = " || ".join(f"(variables.{p.name} && {grant.allows(p)})"
                              for p in profiles(spec) if grant.allows(p) != "false") or "false"
        validations.append(k8s.Validation(
            expression=f"!({grant.uses}) || variables.exempt || variables.specUnchanged || {allowed}",
            reason="Forbidden", message=f"{grant.description}: allowed {_who(spec, grant)}"))
    for p in profiles(spec):
        if p.run_as_user is not None:
            validations.append(k8s.Validation(
                expression=f"!{p.selects(spec.namespace)} || variables.specUnchanged || {_non_root(p.run_as_user)}",
                reason="Forbidden",
                message=f"pods of {spec.namespace}/{p.account}" + (" labelled ray.io/node-type=head" if p.head else "") +
                        f" run as user {p.run_as_user} with runAsNonRoot, every container"))
    validations.append(k8s.Validation(
        expression="request.operation != 'UPDATE' || variables.specUnchanged || !variables.governed || "
                   "variables.byController",
        reason="Forbidden",
        message="the spec (images, tolerations, ephemeral containers) of a pod of a granted account or an exempt "
                "node agent changes only by its controller"))
    validations.append(k8s.Validation(
        expression="variables.exempt || request.operation != 'CREATE' || !has(object.spec.nodeName) || "
                   "object.spec.nodeName == ''",
        reason="Forbidden",
        message="spec.nodeName at creation skips the scheduler and every taint; use a nodeSelector or affinity"))
    return validations


RAY_CLUSTER_SCALING_FIELDS = ("replicas", "minReplicas", "maxReplicas", "scaleStrategy", "suspend")
"""The worker group fields the Ray autoscaler may change (Ray ``autoscaler/_private/kuberay/node_provider.py``
patches ``replicas`` and ``scaleStrategy.workersToDelete``; KubeRay's own fields for a group's size
and suspension beside them)."""


def ray_cluster_policy_name(spec: ServingSpec) -> str:
    return f"{policy_name(spec)}-ray-clusters"


def _ray_cluster_validations(spec: ServingSpec) -> list[k8s.Validation]:
    operator = f"system:serviceaccount:{spec.operator_namespace}:{KUBERAY_OPERATOR_SERVICE_ACCOUNT}"
    autoscaler = f"system:serviceaccount:{spec.namespace}:{head_service_account(spec)}"
    scaling = _quoted(RAY_CLUSTER_SCALING_FIELDS)
    only_scaling = (
        "object.spec.all(k, k == 'workerGroupSpecs' || (k in oldObject.spec && object.spec[k] == oldObject.spec[k])) && "
        "oldObject.spec.all(k, k in object.spec) && "
        "(has(object.spec.workerGroupSpecs) ? object.spec.workerGroupSpecs : []).all(g, "
        "(has(oldObject.spec.workerGroupSpecs) ? oldObject.spec.workerGroupSpecs : []).exists(o, "
        f"o.groupName == g.groupName && g.all(k, k in {scaling} || (k in o && g[k] == o[k])) && "
        f"o.all(k, k in {scaling} || k in g)))")
    updaters = (f"(request.userInfo.username == '{autoscaler}' && {only_scaling})" if spec.autoscaling else "false")
    return [
        k8s.Validation(
            expression=f"request.operation != 'CREATE' || request.userInfo.username == '{operator}'",
            reason="Forbidden",
            message=f"RayClusters in {spec.namespace} come from its RayService (the KubeRay operator creates them): "
                    "here a RayCluster is privileged pods on the GPU nodes"),
        k8s.Validation(
            expression=(f"request.operation != 'UPDATE' || object.spec == oldObject.spec || "
                        f"request.userInfo.username == '{operator}' || {updaters}"),
            reason="Forbidden",
            message=f"a RayCluster in {spec.namespace} changes only by the KubeRay operator" +
                    (" (and its worker groups' size by the Ray autoscaler)" if spec.autoscaling else "")),
    ]


class AdmissionPolicyChart(cdk8s.Chart):
    """The pod policy and its two bindings, the RayCluster policy and its binding (cluster-scoped;
    see the module docstring)."""

    def __init__(self, scope: cdk8s.App, construct_id: str, *, spec: ServingSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        name = policy_name(spec)
        labels = {APP_NAME_LABEL: NAME, APP_INSTANCE_LABEL: spec.service_name}
        k8s.KubeValidatingAdmissionPolicy(self, "Policy", metadata=k8s.ObjectMeta(name=name, labels=labels),
                                          spec=k8s.ValidatingAdmissionPolicySpec(
            failure_policy="Fail",
            match_constraints=k8s.MatchResources(resource_rules=[k8s.NamedRuleWithOperations(
                api_groups=[""], api_versions=["v1"], operations=["CREATE", "UPDATE"],
                resources=["pods", "pods/ephemeralcontainers"])]),
            variables=_variables(spec),
            validations=_validations(spec)))
        own = k8s.LabelSelector(match_expressions=[k8s.LabelSelectorRequirement(
            key=NAMESPACE_NAME_LABEL, operator="In", values=[spec.namespace])])
        elsewhere = k8s.LabelSelector(match_expressions=[k8s.LabelSelectorRequirement(
            key=NAMESPACE_NAME_LABEL, operator="NotIn",
            values=sorted({spec.namespace, *spec.service.other_serving_namespaces}))])
        for id_, suffix, selector in (("BindingOwn", "own", own), ("BindingElsewhere", "elsewhere", elsewhere)):
            k8s.KubeValidatingAdmissionPolicyBinding(
                self, id_, metadata=k8s.ObjectMeta(name=f"{name}-{suffix}", labels=labels),
                spec=k8s.ValidatingAdmissionPolicyBindingSpec(
                    policy_name=name, validation_actions=["Deny"],
                    match_resources=k8s.MatchResources(namespace_selector=selector)))
        clusters = ray_cluster_policy_name(spec)
        k8s.KubeValidatingAdmissionPolicy(self, "RayClusterPolicy", metadata=k8s.ObjectMeta(name=clusters, labels=labels),
                                          spec=k8s.ValidatingAdmissionPolicySpec(
            failure_policy="Fail",
            match_constraints=k8s.MatchResources(resource_rules=[k8s.NamedRuleWithOperations(
                api_groups=["ray.io"], api_versions=["*"], operations=["CREATE", "UPDATE"],
                resources=["rayclusters"])]),
            validations=_ray_cluster_validations(spec)))
        k8s.KubeValidatingAdmissionPolicyBinding(
            self, "RayClusterBinding", metadata=k8s.ObjectMeta(name=clusters, labels=labels),
            spec=k8s.ValidatingAdmissionPolicyBindingSpec(
                policy_name=clusters, validation_actions=["Deny"],
                match_resources=k8s.MatchResources(namespace_selector=own)))
