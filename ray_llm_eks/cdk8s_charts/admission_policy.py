"""Who may run privileged, reach the host, land on the GPU nodes, be one of this deployment's pods,
or exec into them (``serving-admission-policy``).

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
- anyone else in the serving namespace: none of it;
- anyone else in any other namespace: what Pod Security ``baseline`` allows (added capabilities
  from its list, :data:`BASELINE_CAPABILITIES`, in any container, ephemeral ones too: EKS's
  CoreDNS adds ``NET_BIND_SERVICE``), and nothing more of the rest.

Nobody outside the exempt agents gets ``hostNetwork``, ``hostPID``, ``hostIPC``, a ``hostPort``
or a privileged ephemeral container (baseline allows none of them either). Two rules are
stricter than baseline everywhere, each for its risk: tolerating the GPU taint (a pod on a GPU
node takes the GPUs and EFA interfaces the workers need, and an EFA interface there joins the EFA
security group, whose traffic to the workers no NetworkPolicy sees), and ``spec.nodeName`` at
creation (it skips the scheduler and so the taint), but for a kubelet's mirror pod on its own
node. A toleration "reaches the GPU taint" when its key is the GPU taint's, or it has no key and
``operator: Exists`` (it tolerates every taint); the granted ones must equal a rendered
toleration field by field. Tolerations of other keys (the ``node.kubernetes.io/*`` ones the
DaemonSet controller and ``DefaultTolerationSeconds`` add) are not grants. A host path must be
one of the account's, byte for byte, and every container that mounts a read-only one must mount
it ``readOnly``. Where a user is named above, every container (init and ephemeral too) must run
with ``runAsNonRoot`` and that ``runAsUser`` (container's or pod's), whoever creates the pod.

The deployment's own pods (:func:`own_pods`). In the serving namespace, a pod on one of the
deployment's accounts, or carrying a label its NetworkPolicies or the OpenAI Service trust
(``ray-llm-eks/ray-role`` present, ``ray-llm-eks/serves-http: "true"``, ``ray-llm-eks/component``
of the gate, continuous verification, the counter readers, the benchmark Job, the teardown guard
or the GCS password copy), is admitted only from that kind's creator (the KubeRay operator for
the Ray pods, the DaemonSet controller for the counter readers, the Job controller for the gate,
continuous verification, the password copy and the benchmark; whoever applies the manifest for
the teardown guard, a bare Pod), on that kind's account, and with no image but the rendered
one in any container. Those labels are fixed once the pod exists: nobody relabels a pod into a
role. So a namespace editor's ``kubectl run`` on the gate's account (its AWS role), a pod that
copies the workers' labels (the OpenAI Service's endpoints, the Ray mesh), or the operator's pod
with another image is refused. Not refused: an editor's own Job, CronJob or DaemonSet that
copies a rendered one, image and all, but runs its own command (its controller creates the pods
as it would the real ones), or one that edits the programs' ConfigMaps: those rights stay with
the deploy (RBAC).

Updates. A pod's spec is immutable but for container images, added tolerations and a few
timers (``ValidatePodUpdate``, kubernetes ``pkg/apis/core/validation/validation.go``), and
ephemeral containers arrive through ``pods/ephemeralcontainers`` (matched here). Status goes
through ``pods/status``, which is not matched: the kubelet is untouched. So:

- an UPDATE that leaves ``spec`` and the trusted labels as they were (other labels,
  annotations, owner references, finalizers: what controllers and the garbage collector write)
  is admitted;
- any other UPDATE of a pod of a granted account, of the deployment's own or of an exempt agent
  (an image swap, a toleration, an ephemeral container: ``kubectl debug`` included) is admitted
  only from its controller, and then only within its grants and image. KubeRay 1.5.1's head
  account, which may patch pods for the autoscaler, is not a controller here.

Node agents (``serving.admission_exempt_agents``, ``namespace/service-account``) are exempt only
when the DaemonSet or ReplicaSet controller creates their pods; a pod someone creates by hand
under the same account gets the "anyone else" row.

Scope. One policy per deployment, bound twice, by namespace name (the API server sets
``kubernetes.io/metadata.name``; nobody can forge it):

- ``<name>-own`` to the serving namespace;
- ``<name>-elsewhere`` to every other namespace but the serving namespaces of other deployments
  named in ``serving.other_serving_namespaces`` (which their own policies govern). kube-system is
  governed too: its agents are exempt by account, not the namespace.

RayClusters and RayJobs. The operator turns a RayCluster in the serving namespace into pods of
the granted accounts, so a second policy (``<name>-ray-clusters``, bound to the serving namespace
by name) admits a RayCluster there only from the operator and owned by this deployment's
RayService (its controller reference), and an UPDATE of one from anyone else only if it changes
nothing but the worker groups' replica counts and ``scaleStrategy`` (what the Ray autoscaler
patches, from the head's account) or leaves the spec alone (metadata). It refuses every new
RayJob there: the operator would run its entrypoint on a cluster of its own, or on this one
through ``clusterSelector``.

Exec. A third policy (``<namespace>-<svc>-pod-connect``, bound to the serving namespace) refuses
``pods/exec``, ``pods/attach`` and ``pods/portforward`` (CONNECT, which the API server passes to
ValidatingAdmissionPolicy) to all but ``serving.exec_admins`` (default: the group
``system:masters``), and for ``exec`` the benchmark Job's pods (``<svc>-bench-*``), whose results
you ``kubectl cp``. A CONNECT carries the pod's name, not the pod: the whole namespace is governed.

Not covered: ``pods/binding`` (a Binding carries no pod spec; only the scheduler holds that right
by default), and the RayService in the serving namespace: whoever may change it has the operator
make privileged pods of it, so that right stays with the deploy.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
from cdk8s_plus_35 import k8s

from ..base.infrastructure import AGENT_CONTROLLER_USERS, DAEMONSET_CONTROLLER_USER, KUBERAY_OPERATOR_SERVICE_ACCOUNT
from ..base.placement import GPU_TAINT_KEY
from ..base.serving import SecurityProfile, ServingSpec
from ..base.wire import (
    BENCH_COMPONENT,
    COMPONENT_LABEL,
    EFA_COUNTERS_COMPONENT,
    GATE_COMPONENT,
    GCS_REDIS_SECRET_COMPONENT,
    MONITOR_COMPONENT,
    RAY_ROLE_LABEL,
    SERVES_HTTP_LABEL,
    TEARDOWN_GUARD_COMPONENT,
)
from .containers import NOBODY
from .gcs_redis import sync_account_name
from .labels import (APP_INSTANCE_LABEL, APP_NAME_LABEL, NAME, bench_job_prefix, efa_counters_name, gate_name,
                     monitor_name)
from .model_cache import HF_CACHE_CAPABILITIES, HF_CACHE_HOST_PATH
from .pod_templates import head_service_account
from .teardown_guard import teardown_guard_name

ADMISSION_POLICY_CHART_ID = "serving-admission-policy"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
RAY_NODE_TYPE_LABEL, RAY_HEAD = "ray.io/node-type", "head"
"""The label KubeRay sets on every Ray pod it creates (v1.4.0 and v1.5.1
``ray-operator/controllers/ray/utils/constant.go``, ``RayNodeTypeLabelKey``), ``head`` or ``worker``."""
EFA_COUNTERS_HOST_PATH = "/sys"
"""What the EFA counter readers mount, read-only (``cdk8s_charts.verification``)."""
IPC_LOCK = "IPC_LOCK"
BASELINE_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT")
"""What Pod Security ``baseline`` lets any container add, init and ephemeral ones included
(kubernetes/pod-security-admission ``policy/check_capabilities_baseline.go:62-76`` and
``policy/visitor.go:27-37`` at v0.35.6, the staging copy of Kubernetes 1.35.6)."""
JOB_CONTROLLER_USER = "system:serviceaccount:kube-system:job-controller"
"""Who creates a Job's pods (kube-controller-manager's per-controller credentials, as
``DAEMONSET_CONTROLLER_USER``); a CronJob's Jobs come from the cronjob controller, their pods from it."""
FIXED_LABELS = (RAY_ROLE_LABEL, SERVES_HTTP_LABEL, COMPONENT_LABEL)
"""The label keys the NetworkPolicies and the OpenAI Service select by (``network_policy``,
``serving.openai_service_name``): set when a pod is created, never changed afterwards."""


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
_BASELINE_ADDS = f"(!{_ADDS} || c.securityContext.capabilities.add.all(x, x in {_quoted(BASELINE_CAPABILITIES)}))"
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


def _label(obj: str, key: str) -> str:
    """CEL: the value of label ``key`` on ``obj``, or ``<none>`` (no label value can be that)."""
    return (f"(has({obj}.metadata.labels) && '{key}' in {obj}.metadata.labels ? "
            f"{obj}.metadata.labels['{key}'] : '<none>')")


@dataclass(frozen=True)
class OwnPods:
    """One kind of this deployment's own pods in the serving namespace: a pod on one of its
    ``accounts`` (when ``by_account``) or carrying one of its ``labels`` (what the NetworkPolicies
    and the OpenAI Service trust) is admitted only from its ``creators`` (None: whoever applies
    the manifest), on its accounts, with nothing but the rendered image in any container."""

    name: str
    what: str
    accounts: tuple[str, ...]
    labels: tuple[tuple[str, str | None], ...]
    """``(key, value)``; value None: the key present, with any value (a selector's ``Exists``)."""
    creators: tuple[str, ...] | None
    image: str
    by_account: bool = True

    def applies(self, namespace: str) -> str:
        marks = [f"{_label('object', key)} != '<none>'" if value is None else f"{_label('object', key)} == '{value}'"
                 for key, value in self.labels]
        if self.by_account:
            marks.insert(0, f"variables.account in {_quoted(self.accounts)}")
        return f"(request.namespace == '{namespace}' && (" + " || ".join(marks) + "))"

    def conforms(self) -> str:
        parts = [f"variables.account in {_quoted(self.accounts)}",
                 f"{_containers()}.all(c, c.image == '{self.image}')"]
        if self.creators is not None:
            parts.insert(0, f"request.userInfo.username in {_quoted(self.creators)}")
        return "(" + " && ".join(parts) + ")"


def own_pods(spec: ServingSpec) -> tuple[OwnPods, ...]:
    """The deployment's own kinds of pod, each as its chart renders it: the Ray pods
    (``serving``), the counter readers, the gate and continuous verification (``verification``),
    the GCS password copy (``gcs_redis``), the teardown guard and the benchmark Job (``bench``,
    on the namespace's ``default`` account, which it alone does not claim)."""
    operator = (f"system:serviceaccount:{spec.operator_namespace}:{KUBERAY_OPERATOR_SERVICE_ACCOUNT}",)
    jobs = (JOB_CONTROLLER_USER,)
    image, svc = spec.image_uri, spec.service_name
    ray = (svc, head_service_account(spec)) if spec.autoscaling else (svc,)

    def component(value: str) -> tuple[tuple[str, str | None], ...]:
        return ((COMPONENT_LABEL, value),)

    return (
        # A RayJob or RayService makes the operator create pods too: the RayCluster policy keeps
        # those to this deployment's RayService, and refuses RayJobs in the namespace.
        OwnPods("ray", "Ray pods", ray, ((RAY_ROLE_LABEL, None), (SERVES_HTTP_LABEL, "true")), operator, image),
        OwnPods("efaCounters", "EFA counter readers", (efa_counters_name(svc),), component(EFA_COUNTERS_COMPONENT),
                (DAEMONSET_CONTROLLER_USER,), image),
        OwnPods("gate", "deployment gate pods", (gate_name(svc),), component(GATE_COMPONENT), jobs, image),
        OwnPods("monitor", "continuous verification pods", (monitor_name(svc),), component(MONITOR_COMPONENT),
                jobs, image),
        OwnPods("gcsRedisSecret", "GCS password copy pods", (sync_account_name(svc),),
                component(GCS_REDIS_SECRET_COMPONENT), jobs, image),
        # A bare Pod the deploy applies (teardown_guard: ``kubectl delete`` waits for it), so its
        # creator is whoever applies the manifest; its account may read the RayService only.
        OwnPods("teardownGuard", "teardown guard pods", (teardown_guard_name(svc),),
                component(TEARDOWN_GUARD_COMPONENT), None, image),
        OwnPods("bench", "benchmark Job pods", ("default",), component(BENCH_COMPONENT), jobs, image,
                by_account=False),
    )


@dataclass(frozen=True)
class Grant:
    """One thing a pod may ask for: ``uses`` over ``object``; ``allows(profile)`` is the CEL
    that the pod asks for no more of it than the profile grants ("false" for nobody)."""

    name: str
    description: str
    uses: str
    baseline: str | None = None
    """CEL: the pod asks for no more of it than Pod Security ``baseline`` allows, which is all
    anyone gets outside the serving namespace; None: baseline allows none of it, or the policy
    keeps it from everyone there for a risk of its own (the grant's comment)."""

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


# Privileged containers, host paths, host namespaces and host ports: baseline allows none of them
# (pod-security-admission policy/check_privileged.go, check_hostPathVolumes.go,
# check_hostNamespaces.go, check_hostPorts.go at v0.35.6), so neither does this policy elsewhere.
PRIVILEGED = Grant("privileged", "privileged containers", f"{_containers()}.exists(c, {_PRIVILEGED})")
CAPABILITIES = Grant("capabilities", "added Linux capabilities", f"{_containers()}.exists(c, {_ADDS})",
                     baseline=f"{_containers()}.all(c, {_BASELINE_ADDS})")
HOST_PATH = Grant("hostPath", "hostPath volumes", f"{_list('object', 'volumes')}.exists(v, has(v.hostPath))")
# Stricter than baseline, which says nothing of tolerations, everywhere: a pod on a GPU node takes
# the GPUs and EFA interfaces (device plugin resources) the workers need, and an EFA interface
# there is a member of the EFA security group that admits its members to the workers' NIXL
# endpoints, which no NetworkPolicy governs (network_policy, "Not governed").
GPU_TOLERATION = Grant("gpuToleration", f"tolerating the GPU taint ({GPU_TAINT_KEY}) or every taint",
                       f"{_list('object', 'tolerations')}.exists(t, {_REACHES_GPU})")
HOST_NAMESPACES = Grant("hostNamespaces", "hostNetwork, hostPID or hostIPC",
                        " || ".join(_flag(f) for f in ("hostNetwork", "hostPID", "hostIPC")))
HOST_PORT = Grant("hostPort", "host ports", f"{_containers()}.exists(c, has(c.ports) && "
                  "c.ports.exists(p, has(p.hostPort) && p.hostPort != 0))")
EPHEMERAL_PRIVILEGES = Grant("ephemeralPrivileges", "privileged or capability-adding ephemeral containers",
                             f"{_list('object', 'ephemeralContainers')}.exists(c, {_PRIVILEGED} || {_ADDS})",
                             baseline=f"{_list('object', 'ephemeralContainers')}.all(c, !{_PRIVILEGED} && {_BASELINE_ADDS})")
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
    # (The deployment's own pods: their own validations, ``own_pods``.)
    controller = " || ".join([*(f"({p.selects(spec.namespace)} && {users} in {_quoted(p.creators)})"
                                for p in profiles(spec)),
                              f"(({agents}) && {users} in {_quoted(AGENT_CONTROLLER_USERS)})"])
    variables = [
        ("account", "has(object.spec.serviceAccountName) && object.spec.serviceAccountName != '' ? "
                    "object.spec.serviceAccountName : 'default'"),
        ("rayHead", f"has(object.metadata.labels) && '{RAY_NODE_TYPE_LABEL}' in object.metadata.labels && "
                    f"object.metadata.labels['{RAY_NODE_TYPE_LABEL}'] == '{RAY_HEAD}'"),
        ("specUnchanged", "request.operation == 'UPDATE' && object.spec == oldObject.spec"),
        ("elsewhere", f"request.namespace != '{spec.namespace}'"),
        ("exempt", f"({agents}) && {users} in {_quoted(AGENT_CONTROLLER_USERS)}"),
        ("governed", governed),
        ("byController", controller),
    ]
    variables += [(p.name, f"{p.selects(spec.namespace)} && {users} in {_quoted(p.creators)}")
                  for p in profiles(spec)]
    return [k8s.Variable(name=name, expression=expression) for name, expression in variables]


def _who(spec: ServingSpec, grant: Grant) -> str:
    granted = [p for p in profiles(spec) if grant.allows(p) != "false"]
    baseline = (f"outside {spec.namespace} as Pod Security baseline allows ({', '.join(BASELINE_CAPABILITIES)}); "
                if grant.baseline else "")
    if not granted:
        return baseline + "to nobody but the exempt node agents (serving.admission_exempt_agents)"
    return (baseline + "only to pods of " + ", ".join(f"{spec.namespace}/{p.account}" for p in granted) +
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
        if grant.baseline:
            allowed = f"(variables.elsewhere && {grant.baseline}) || {allowed}"
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
    for own in own_pods(spec):
        labels = ", ".join(key if value is None else f"{key}={value}" for key, value in own.labels)
        claim = (f"on {', '.join(own.accounts)} or labelled {labels}" if own.by_account else f"labelled {labels}")
        creator = "whoever applies the manifest" if own.creators is None else ", ".join(own.creators)
        validations.append(k8s.Validation(
            expression=f"!{own.applies(spec.namespace)} || variables.specUnchanged || {own.conforms()}",
            reason="Forbidden",
            message=f"{own.what} ({claim}) are created and changed only by {creator}, "
                    f"run as {', '.join(own.accounts)} and run only {own.image}"))
    fixed = " && ".join(f"{_label('object', k)} == {_label('oldObject', k)}" for k in FIXED_LABELS)
    validations.append(k8s.Validation(
        expression=f"request.operation != 'UPDATE' || variables.elsewhere || ({fixed})",
        reason="Forbidden",
        message=f"the labels the NetworkPolicies and Services of {spec.namespace} select by "
                f"({', '.join(FIXED_LABELS)}) are set when a pod is created, never changed"))
    # Stricter than baseline, everywhere: a nodeName skips the scheduler and so the GPU taint
    # (GPU_TOLERATION's risk). The kubelet's mirror pods of its static pods carry their node's
    # name, and the NodeRestriction plugin lets a kubelet create them for its own node only.
    validations.append(k8s.Validation(
        expression="variables.exempt || request.operation != 'CREATE' || !has(object.spec.nodeName) || "
                   "object.spec.nodeName == '' || request.userInfo.username == 'system:node:' + object.spec.nodeName",
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
    # The operator makes the RayService's clusters with the RayService as their controller
    # (kuberay ray-operator/controllers/ray/rayservice_controller.go, constructRayClusterForRayService:
    # ctrl.SetControllerReference, v1.4.0:791 and v1.5.1:1180); a RayJob's cluster names the RayJob.
    owned = ("has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
             f"o.kind == 'RayService' && o.name == '{spec.service_name}' && has(o.controller) && o.controller == true)")
    return [
        # A RayJob here would have the operator run its entrypoint on a cluster of this namespace:
        # its own (a privileged one, were it admitted), or this deployment's through
        # ``clusterSelector``, submitted by the operator itself in HTTPMode (the NetworkPolicy
        # admits the operator to the head's 8265). This deployment runs none.
        k8s.Validation(
            expression="request.resource.resource != 'rayjobs' || request.operation != 'CREATE'",
            reason="Forbidden",
            message=f"no RayJob in {spec.namespace}: the KubeRay operator would run its entrypoint on the "
                    "privileged GPU workers (a cluster of its own, or this one through clusterSelector)"),
        k8s.Validation(
            expression=(f"request.resource.resource != 'rayclusters' || request.operation != 'CREATE' || "
                        f"(request.userInfo.username == '{operator}' && {owned})"),
            reason="Forbidden",
            message=f"RayClusters in {spec.namespace} come from its RayService {spec.service_name} (the KubeRay "
                    "operator creates them, owned by it): here a RayCluster is privileged pods on the GPU nodes"),
        k8s.Validation(
            expression=(f"request.resource.resource != 'rayclusters' || "
                        f"request.operation != 'UPDATE' || object.spec == oldObject.spec || "
                        f"request.userInfo.username == '{operator}' || {updaters}"),
            reason="Forbidden",
            message=f"a RayCluster in {spec.namespace} changes only by the KubeRay operator" +
                    (" (and its worker groups' size by the Ray autoscaler)" if spec.autoscaling else "")),
    ]


def connect_policy_name(spec: ServingSpec) -> str:
    return f"{spec.namespace}-{spec.service_name}-pod-connect"


CONNECT_SUBRESOURCES = ("pods/exec", "pods/attach", "pods/portforward")


def _exec_admins(spec: ServingSpec) -> str:
    """CEL: the requester is one of ``serving.exec_admins``."""
    users, prefixes, groups = [], [], []
    for admin in spec.service.exec_admins:
        kind, name = admin.split(":", 1)
        (groups if kind == "group" else prefixes if name.endswith("*") else users).append(name.rstrip("*"))
    tests = [f"request.userInfo.username in {_quoted(users)}"] if users else []
    tests += [f"request.userInfo.username.startsWith('{p}')" for p in prefixes]
    if groups:
        tests.append(f"(has(request.userInfo.groups) ? request.userInfo.groups : []).exists(g, g in {_quoted(groups)})")
    return " || ".join(tests) or "false"


def _connect_validations(spec: ServingSpec) -> list[k8s.Validation]:
    # The benchmark Job's pod, which docs/benchmark.md has you ``kubectl cp`` from (an exec): the
    # Job controller names it ``<job>-<5 random>`` and the Job is ``<svc>-bench-<hash>``. No other
    # pod here starts so: KubeRay's are ``<svc>-<5 random>-...`` (ray-operator/controllers/ray/utils/util.go
    # GenerateRayClusterName, v1.5.1:366), from apimachinery's rand alphabet, which has no vowels.
    bench = bench_job_prefix(spec.service_name)
    return [k8s.Validation(
        expression=(f"{_exec_admins(spec)} || "
                    f"(request.subResource == 'exec' && request.name.startsWith('{bench}'))"),
        reason="Forbidden",
        message=(f"exec, attach and port-forward into pods of {spec.namespace} are for serving.exec_admins "
                 f"({', '.join(spec.service.exec_admins) or 'nobody'}): a worker is privileged on a GPU node, "
                 "the gate holds its AWS role, the head's ports reach the Ray cluster"))]


class AdmissionPolicyChart(cdk8s.Chart):
    """The pod policy and its two bindings, the RayCluster policy and the CONNECT policy, each with
    its binding (cluster-scoped; see the module docstring)."""

    def __init__(self, scope: cdk8s.App, construct_id: str, *, spec: ServingSpec) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        self._labels = {APP_NAME_LABEL: NAME, APP_INSTANCE_LABEL: spec.service_name}
        own = k8s.LabelSelector(match_expressions=[k8s.LabelSelectorRequirement(
            key=NAMESPACE_NAME_LABEL, operator="In", values=[spec.namespace])])
        elsewhere = k8s.LabelSelector(match_expressions=[k8s.LabelSelectorRequirement(
            key=NAMESPACE_NAME_LABEL, operator="NotIn",
            values=sorted({spec.namespace, *spec.service.other_serving_namespaces}))])
        name = policy_name(spec)
        self._policy("Policy", name, k8s.NamedRuleWithOperations(
            api_groups=[""], api_versions=["v1"], operations=["CREATE", "UPDATE"],
            resources=["pods", "pods/ephemeralcontainers"]), _validations(spec), variables=_variables(spec),
            bindings=(("BindingOwn", f"{name}-own", own), ("BindingElsewhere", f"{name}-elsewhere", elsewhere)))
        clusters = ray_cluster_policy_name(spec)
        self._policy("RayClusterPolicy", clusters, k8s.NamedRuleWithOperations(
            api_groups=["ray.io"], api_versions=["*"], operations=["CREATE", "UPDATE"],
            resources=["rayclusters", "rayjobs"]), _ray_cluster_validations(spec),
            bindings=(("RayClusterBinding", clusters, own),))
        # CONNECT reaches ValidatingAdmissionPolicy: the API server's connect handler validates
        # the request's options (PodExecOptions, ...) with the pod's name (k8s.io/apiserver
        # pkg/endpoints/handlers/rest.go:199-215, ConnectResource) and the policy plugin handles
        # admission.Connect (pkg/admission/plugin/policy/validating/plugin.go:82), at v0.35.7
        # (Kubernetes 1.35.7). The pod itself is not in the request: the whole namespace is governed.
        connect = connect_policy_name(spec)
        self._policy("ConnectPolicy", connect, k8s.NamedRuleWithOperations(
            api_groups=[""], api_versions=["v1"], operations=["CONNECT"], resources=list(CONNECT_SUBRESOURCES)),
            _connect_validations(spec), bindings=(("ConnectBinding", connect, own),))

    def _policy(self, construct_id: str, name: str, rule: k8s.NamedRuleWithOperations,
                validations: list[k8s.Validation], *, bindings: tuple[tuple[str, str, k8s.LabelSelector], ...],
                variables: list[k8s.Variable] | None = None) -> None:
        """A policy (``failurePolicy: Fail``) on ``rule`` and its Deny bindings, each
        ``(construct id, name, namespace selector)``."""
        k8s.KubeValidatingAdmissionPolicy(self, construct_id, metadata=k8s.ObjectMeta(name=name, labels=self._labels),
                                          spec=k8s.ValidatingAdmissionPolicySpec(
            failure_policy="Fail", match_constraints=k8s.MatchResources(resource_rules=[rule]),
            variables=variables, validations=validations))
        for binding_id, binding_name, selector in bindings:
            k8s.KubeValidatingAdmissionPolicyBinding(
                self, binding_id, metadata=k8s.ObjectMeta(name=binding_name, labels=self._labels),
                spec=k8s.ValidatingAdmissionPolicyBindingSpec(
                    policy_name=name, validation_actions=["Deny"],
                    match_resources=k8s.MatchResources(namespace_selector=selector)))
