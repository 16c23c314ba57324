"""The teardown guard: a small pod in the RayService's manifest that holds ``cdk destroy`` back
until KubeRay has finished with the RayClusters (the program: :mod:`ray_llm_eks.teardown.guard`).

- In the namespace's chart (:class:`TeardownGuardAccess`), so that they outlive the pod:
  ServiceAccount, Role and RoleBinding ``<svc>-teardown-guard`` (``get`` on this RayService and
  ``list`` on RayClusters in the namespace, nothing else) and ConfigMap ``<svc>-teardown-guard``
  (the program).
- In the RayService's chart (:class:`TeardownGuard`), after the RayService: Pod ``<svc>-teardown-guard-<digest>``: a shell that sleeps on the system node (10m CPU, 48 MiB);
  its preStop hook runs the program. A bare Pod, so that ``kubectl delete -f`` waits for the pod
  itself (a Deployment would be gone at once). Its spec cannot change in place, so its name
  carries the digest of the spec: a deploy that changes it applies a new pod and prunes the old
  one, whose hook sees the RayService alive and returns at once.

Delete order and why: docs/rayservice.md, "Delete order".
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_35 import k8s
from constructs import Construct

from ..base import sizing
from ..base.digest import canonical_digest
from ..base.serving import ServingSpec
from ..base.wire import COMPONENT_LABEL, INSTANCE_LABEL, TEARDOWN_GUARD_COMPONENT
from ..teardown import PROGRAM, PROGRAM_FILE
from ..teardown.guard import DEFAULT_DEADLINE_SECONDS
from .containers import env_vars, guaranteed, locked_down, non_root

PROGRAM_DIR = "/opt/rayllmeks-teardown"
GRACE_MARGIN_SECONDS = 60
"""After the hook returns (at the latest at its deadline), the kubelet sends SIGTERM and the shell
exits within a second; the margin keeps the kubelet's SIGKILL from cutting the hook short."""
SLEEPER = 'trap "exit 0" TERM; while :; do sleep 1; done'
"""PID 1 without a handler ignores SIGTERM; this shell exits on it at once."""


def teardown_guard_name(service_name: str) -> str:
    return f"{service_name}-teardown-guard"


class TeardownGuardAccess(Construct):
    """What the guard pod needs, in the namespace's chart: deleted after the RayService's manifest,
    so the hook can still read the program and the API while it waits."""

    def __init__(self, scope: Construct, construct_id: str, *, spec: ServingSpec) -> None:
        super().__init__(scope, construct_id)
        self.name = teardown_guard_name(spec.service_name)
        self.labels = {INSTANCE_LABEL: spec.service_name, COMPONENT_LABEL: TEARDOWN_GUARD_COMPONENT}
        meta = k8s.ObjectMeta(name=self.name, namespace=spec.namespace, labels=self.labels)
        self.service_account = k8s.KubeServiceAccount(self, "ServiceAccount", metadata=meta,
                                                      automount_service_account_token=False)
        self.role = k8s.KubeRole(self, "Role", metadata=meta, rules=[
            k8s.PolicyRule(api_groups=["ray.io"], resources=["rayservices"], resource_names=[spec.service_name],
                           verbs=["get"]),
            k8s.PolicyRule(api_groups=["ray.io"], resources=["rayclusters"], verbs=["list"]),
        ])
        k8s.KubeRoleBinding(self, "RoleBinding", metadata=meta,
                            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=self.name),
                            subjects=[k8s.Subject(kind="ServiceAccount", name=self.name, namespace=spec.namespace)])
        self.program_text = PROGRAM.read_text()
        self.program = k8s.KubeConfigMap(self, "Program", metadata=meta, data={PROGRAM_FILE: self.program_text})


class TeardownGuard(Construct):
    """The guard pod, in the RayService's chart after the RayService (``add_dependency``), so
    ``kubectl delete -f`` deletes it after the RayService and waits for it."""

    def __init__(self, scope: Construct, construct_id: str, *, spec: ServingSpec, access: TeardownGuardAccess,
                 deadline_seconds: float = DEFAULT_DEADLINE_SECONDS) -> None:
        super().__init__(scope, construct_id)
        python = 'exec "$(command -v python3 || command -v python)" -S '
        pod_spec = k8s.PodSpec(
            service_account_name=access.name,
            automount_service_account_token=True,  # the hook reads the API with it
            node_selector=spec.system.labels,
            security_context=non_root(),
            termination_grace_period_seconds=int(deadline_seconds) + GRACE_MARGIN_SECONDS,
            containers=[k8s.Container(
                name="guard", image=spec.image_uri,
                command=["/bin/sh", "-c", SLEEPER],
                env=env_vars({"GUARD_NAMESPACE": spec.namespace, "GUARD_SERVICE": spec.service_name,
                              "GUARD_DEADLINE_SECONDS": str(int(deadline_seconds)),
                              "PYTHONDONTWRITEBYTECODE": "1"}),
                lifecycle=k8s.Lifecycle(pre_stop=k8s.LifecycleHandler(exec=k8s.ExecAction(
                    command=["/bin/sh", "-c", f"{python}{PROGRAM_DIR}/{PROGRAM_FILE}"]))),
                resources=guaranteed(sizing.TEARDOWN_GUARD),
                security_context=locked_down(),
                volume_mounts=[k8s.VolumeMount(name="program", mount_path=PROGRAM_DIR, read_only=True)],
            )],
            volumes=[k8s.Volume(name="program", config_map=k8s.ConfigMapVolumeSource(name=access.name))],
        )
        # The program is in the ConfigMap, and a running pod keeps the one it started with: a new
        # program renames the pod too.
        self.pod_name = f"{access.name}-{canonical_digest([_to_json(pod_spec), access.program_text])[:8]}"
        self.pod = k8s.KubePod(self, "Pod", metadata=k8s.ObjectMeta(name=self.pod_name, labels=access.labels),
                               spec=pod_spec)


def _to_json(pod_spec: k8s.PodSpec) -> dict:
    scratch = cdk8s.Chart(cdk8s.App(), "teardown-guard")
    return dict(k8s.KubePod(scratch, "Pod", spec=pod_spec).to_json()["spec"])
