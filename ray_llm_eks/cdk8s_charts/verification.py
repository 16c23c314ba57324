"""The deployment gate in the cluster: its program, settings, identity, EFA counter readers and Job.

Applied after the RayService, once per change of the serving spec (``serving-verification``):

- ConfigMap ``<service>-gate-program``: the modules of :mod:`ray_llm_eks.verification` as one
  zip archive (``binaryData``, :func:`~ray_llm_eks.verification.bundle.archive`), imported from as
  the package ``rayllmeks_gate`` and run with the serving image's Python, which the system and
  GPU nodes pull anyway for the Ray pods (no other image, nothing downloaded at run time).
- ConfigMap ``<service>-gate-<run>``: ``gate.json``, what the deployed spec says (image, cluster
  spec hash, worker environment, Serve arguments, node counts, predicted KV bytes, thresholds).
- No Secret: when CloudFormation waits, the Job gets only the ARN of the Secrets Manager secret
  that holds the wait condition's presigned URL (``GATE_SIGNAL_SECRET``), and reads the URL with
  its own EKS Pod Identity role when it signals (``RayLlmServing.gate_role``). The URL is in no
  manifest, so in no kubectl handler log, CloudFormation event or ``last-applied-configuration``.
- ServiceAccount ``<service>-gate`` with a Role (read pods, their logs and the RayService; get and
  delete RayClusters, for the rollout; get its own Job, whose creation started CloudFormation's
  wait; create its report's ConfigMap, and update that one by name; get the counter readers'
  DaemonSet by name, whose uid tells its readers from look-alikes) and a ClusterRole (read
  nodes, for allocatable EFA).
- DaemonSet ``<service>-efa-counters`` on the GPU nodes: serves the node's EFA hardware counters
  (``/sys`` mounted read-only) on port 9475 of the pod IP; no API access, no capabilities.
- Job ``<service>-gate-<run>`` on the system node: one attempt (``backoffLimit: 0``; the program
  signals even when it fails), bounded by ``activeDeadlineSeconds`` = the wait condition's timeout.

``<run>`` is the hash of the rendered serving charts and the gate settings: every change of the
serving spec (image, model, engine settings, security profile, node counts, topology) renames the
Job, so the deploy applies a new one, and the old Job and ConfigMap are pruned with it
(``kubectl apply --prune``, which the kubectl provider runs on update). The report is on the
Job's stdout and, so that a rollback's prune cannot take it, in the ConfigMap
``<service>-gate-<run>-report`` that the gate creates (``wire.report_command``).
"""

from __future__ import annotations

import base64
import functools
import shlex

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

import cdk8s
from cdk8s_plus_35 import k8s
from constructs import Construct

from ..base import sizing
from ..base.placement import ROLE_LABEL, WORKER_ROLES
from ..base.serving import SERVE_PORT, ServingSpec, Topology
from ..base.infrastructure import DEFAULT_STACK_NAME
from ..base.verification import VerificationSpec
from ..base.wire import (
    COMPONENT_LABEL,
    EFA_COUNTER_PORT,
    EFA_COUNTERS_COMPONENT,
    EXPECTED_BACKEND,
    EXPECTED_PROVIDER,
    GATE_COMPONENT,
    GATE_RUN_LABEL,
    GATE_SETTINGS_COMPONENT,
    GATE_SETTINGS_FILE,
    INSTANCE_LABEL,
    METRICS_PORT,
    MONITOR_COMPONENT,
    SETTINGS_SHA256_ENV,
    WORKER_CONTAINER,
    GateSettings,
    RoleExpectation,
    read_only_run,
    report_config_map,
    settings_sha256,
)
from ..base.wire import metric_namespace as wire_metric_namespace
from ..verification import bundle
from . import pod_templates
from .containers import guaranteed, locked_down, non_root
from .labels import efa_counters_name, gate_name, monitor_name
from .rayservice import CLUSTER_SPEC_HASH_ANNOTATION
from .serving import ServingCharts, openai_service_name

VERIFICATION_CHART_ID = "serving-verification"
PROGRAM_DIR = "/opt/rayllmeks"
SETTINGS_DIR = "/etc/rayllmeks-gate"
SIGNAL_SECRET_ENV = "GATE_SIGNAL_SECRET"
"""The gate reads it (``verification.__main__.SIGNAL_SECRET_ENV``)."""
SIGNAL_SECRET_PLACEHOLDER = "arn:aws:secretsmanager:region:account:secret:gate-signal"
"""Where the secret's ARN goes in the Job spec the run id hashes (the secret is made after the id)."""
RUN_ID_LENGTH = 8
POST_SYNC_HOOK_ANNOTATIONS = {
    # Argo CD runs a PostSync hook once every other resource of the sync is applied and healthy, and
    # marks the sync failed when the hook fails (argo-cd docs, user-guide/resource_hooks and
    # sync-waves): the gate's exit status becomes the sync's. HookSucceeded deletes a passed Job (its
    # report stays in the ConfigMap the gate writes); BeforeHookCreation deletes a failed one
    # before the next sync runs the gate again under the same name. Flux ignores these
    # annotations and health-checks the Job like any other object (docs/gitops.md).
    "argocd.argoproj.io/hook": "PostSync",
    "argocd.argoproj.io/hook-delete-policy": "HookSucceeded,BeforeHookCreation",
}
"""The gate Job's annotations when a GitOps tool applies it (``kubernetes_owner: gitops``)."""

def gate_job_name(service_name: str, run_id: str) -> str:
    """At most 47 + 6 + 8 = 61 characters: a Job name must fit the 63 of its pods' job-name label."""
    return f"{gate_name(service_name)}-{run_id}"



def gate_settings(spec: ServingSpec, verification: VerificationSpec, charts: ServingCharts) -> GateSettings:
    """What the deployed spec says, for the gate to compare the cluster with (``gate.json``)."""
    rayservice = charts.rayservice
    serve = rayservice.serve_config.to_dict()["applications"][0]
    namespace, name = spec.namespace, spec.service_name
    disaggregated = spec.topology is Topology.disaggregated
    threshold = spec.disaggregation.min_prompt_tokens
    probe_words = verification.probe_prompt_words(spec.model.max_model_len, threshold)
    return GateSettings(
        namespace=namespace,
        ray_service=name,
        topology=spec.topology.value,
        model=spec.model.served_name,
        application=serve["name"],
        openai_url=f"http://{openai_service_name(name)}.{namespace}.svc:{SERVE_PORT}",
        image=spec.image_uri,
        image_digest=spec.image.digest,
        cluster_spec_hash=rayservice.spec.ray_cluster_config.spec_hash,
        hash_annotation=CLUSTER_SPEC_HASH_ANNOTATION,
        worker_container=WORKER_CONTAINER,
        worker_env=pod_templates.worker_env(spec),
        serve_args=serve["args"],
        roles={
            role: RoleExpectation(
                nodes=spec.pool(role).desired_size, node_selector={ROLE_LABEL: role},
                gpus_per_node=spec.pool(role).gpus_per_node, efa_per_node=spec.pool(role).efa_per_node,
                min_nodes=spec.pool(role).min_size if spec.autoscaled(role) else None,
                max_nodes=spec.pool(role).max_size if spec.autoscaled(role) else None)
            for role in WORKER_ROLES
        },
        metrics_port=METRICS_PORT,
        efa_counter_port=EFA_COUNTER_PORT,
        efa_counter_selector={INSTANCE_LABEL: name, COMPONENT_LABEL: EFA_COUNTERS_COMPONENT},
        kv_bytes_per_token=spec.kv_bytes_per_prompt_token if disaggregated else 0,
        kv_bytes_per_sequence=spec.kv_bytes_per_sequence if disaggregated else 0,
        kv_block_tokens=spec.kv_block_tokens,
        kv_tokens_withheld=spec.kv_tokens_withheld if disaggregated else 0,
        min_kv_fraction=verification.min_kv_fraction,
        probes=verification.probes,
        probe_prompt_words=probe_words,
        probe_max_tokens=verification.probe_max_tokens,
        deadline_seconds=verification.gate_deadline_seconds,
        expected_backend=EXPECTED_BACKEND,
        expected_provider=EXPECTED_PROVIDER,
        ray_auth=spec.service.ray_auth.value,
        min_prompt_tokens=threshold,
    )


def run_id(charts: ServingCharts, settings: GateSettings, job_spec: dict[str, Any]) -> str:
    """Hash of everything the gate checks and runs with: the rendered serving charts, the gate
    settings (before the run has an id) and the gate Job's own spec (with a placeholder where its
    name goes)."""
    rendered = [chart.to_json() for chart in charts.charts]
    text = json.dumps([rendered, settings.to_json(), job_spec], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:RUN_ID_LENGTH]


@dataclass(frozen=True)
class GatePlan:
    """The gate of one serving spec: its settings and its run id (computed before any CDK resource)."""

    settings: GateSettings
    run_id: str

    @classmethod
    def of(cls, spec: ServingSpec, verification: VerificationSpec, charts: ServingCharts) -> GatePlan:
        settings = gate_settings(spec, verification, charts)
        identifier = run_id(charts, settings, _job_spec_json(spec, verification))
        job_name = gate_job_name(spec.service_name, identifier)
        return cls(settings=replace(settings, run_id=identifier, job_name=job_name), run_id=identifier)


def _python_command(*args: str) -> list[str]:
    # The serving image's interpreter, whichever name it goes by.
    return ["/bin/sh", "-c", 'exec "$(command -v python3 || command -v python)" -m '
            + bundle.IN_CLUSTER_PACKAGE + " " + " ".join(args)]


def _program_volume(config_map: str) -> k8s.Volume:
    return k8s.Volume(name="program", config_map=k8s.ConfigMapVolumeSource(
        name=config_map, items=[k8s.KeyToPath(key=bundle.ARCHIVE, path=bundle.ARCHIVE)]))


# Python imports the package from the archive itself (zipimport), with -S and without site-packages.
PYTHON_ENV = [k8s.EnvVar(name="PYTHONPATH", value=f"{PROGRAM_DIR}/{bundle.ARCHIVE}"), k8s.EnvVar(name="PYTHONDONTWRITEBYTECODE", value="1"),
              k8s.EnvVar(name="PYTHONUNBUFFERED", value="1")]


def program_archive() -> str:
    """The gate's program archive (:func:`~ray_llm_eks.verification.bundle.archive`), base64, as its
    ConfigMap carries it: made once per process for the same package files, since stripping their
    docstrings parses and tokenizes every module (about 0.15 s of CPU per chart otherwise)."""
    return _archive_of(tuple(bundle.files().items()))


@functools.lru_cache(maxsize=1)
def _archive_of(files: tuple[tuple[str, str], ...]) -> str:
    return base64.b64encode(bundle.archive(dict(files))).decode()


class VerificationChart(cdk8s.Chart):
    """The gate of ``spec`` (see the module docstring); ``signal_secret`` is the ARN of the secret
    holding the wait condition's URL, or None when CloudFormation does not wait."""

    def __init__(self, scope: Construct, construct_id: str, *, spec: ServingSpec, plan: GatePlan,
                 verification: VerificationSpec, signal_secret: str | None, metric_namespace: str,
                 post_sync_hook: bool = False) -> None:
        super().__init__(scope, construct_id, namespace=spec.namespace, disable_resource_name_hashes=True)
        name = spec.service_name
        labels = {INSTANCE_LABEL: name}
        self.plan = plan
        self.job_name = gate_job_name(name, plan.run_id)
        self.settings_name = self.job_name
        program_name = f"{gate_name(name)}-program"

        k8s.KubeConfigMap(self, "Program", metadata=k8s.ObjectMeta(name=program_name, labels=labels),
                          binary_data={bundle.ARCHIVE: program_archive()})
        k8s.KubeConfigMap(self, "Settings", metadata=k8s.ObjectMeta(
            name=self.settings_name, labels={**labels, COMPONENT_LABEL: GATE_SETTINGS_COMPONENT, GATE_RUN_LABEL: plan.run_id}),
            immutable=True, data={GATE_SETTINGS_FILE: json.dumps(plan.settings.to_json(), indent=2, sort_keys=True)})

        account = gate_name(name)
        k8s.KubeServiceAccount(self, "ServiceAccount", metadata=k8s.ObjectMeta(name=account, labels=labels),
                               automount_service_account_token=False)
        k8s.KubeRole(self, "Role", metadata=k8s.ObjectMeta(name=account, labels=labels), rules=[
            k8s.PolicyRule(api_groups=[""], resources=["pods", "pods/log"], verbs=["get", "list"]),
            # The report's copy outlives the Job, which a rollback prunes (create cannot name its object;
            # update can: a Job run again under the same name replaces its own report).
            k8s.PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["create"]),
            k8s.PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["update"],
                           resource_names=[report_config_map(self.job_name)]),
            # Its own Job's creation time: CloudFormation's wait began then.
            k8s.PolicyRule(api_groups=["batch"], resources=["jobs"], verbs=["get"], resource_names=[self.job_name]),
            k8s.PolicyRule(api_groups=["ray.io"], resources=["rayservices"], verbs=["get"]),
            # delete: the rollout of a changed cluster spec (rayservice.CLUSTER_SPEC_HASH_ANNOTATION).
            k8s.PolicyRule(api_groups=["ray.io"], resources=["rayclusters"], verbs=["get", "delete"]),
            # When KubeRay last submitted the Serve config (its Events on the RayService). No Secret:
            # Serve's state comes from the RayService, so the gate needs no Ray token (rollout).
            k8s.PolicyRule(api_groups=[""], resources=["events"], verbs=["list"]),
            # The counter readers' DaemonSet, by name: its uid tells the readers it made from any pod
            # that merely carries their labels (verification.checks.Checks.efa_counter_pods).
            k8s.PolicyRule(api_groups=["apps"], resources=["daemonsets"], verbs=["get"],
                           resource_names=[efa_counters_name(name)]),
        ])
        subject = k8s.Subject(kind="ServiceAccount", name=account, namespace=spec.namespace)
        k8s.KubeRoleBinding(self, "RoleBinding", metadata=k8s.ObjectMeta(name=account, labels=labels),
                            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=account),
                            subjects=[subject])
        cluster_role = f"{spec.namespace}-{account}"
        k8s.KubeClusterRole(self, "NodeReader", metadata=k8s.ObjectMeta(name=cluster_role, labels=labels), rules=[
            k8s.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list"]),
        ])
        k8s.KubeClusterRoleBinding(self, "NodeReaderBinding", metadata=k8s.ObjectMeta(name=cluster_role, labels=labels),
                                   role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                                        name=cluster_role),
                                   subjects=[subject])

        counter_labels = {**labels, COMPONENT_LABEL: EFA_COUNTERS_COMPONENT}
        gpu_nodes = k8s.NodeSelector(node_selector_terms=[k8s.NodeSelectorTerm(match_expressions=[
            k8s.NodeSelectorRequirement(key=ROLE_LABEL, operator="In", values=list(WORKER_ROLES))])])
        # Its own account (no token, no RBAC): the admission policy lets this account, and the Ray
        # pods', tolerate the GPU taint (serving-admission-policy).
        k8s.KubeServiceAccount(self, "EfaCountersAccount", metadata=k8s.ObjectMeta(
            name=efa_counters_name(name), labels=labels), automount_service_account_token=False)
        k8s.KubeDaemonSet(self, "EfaCounters", metadata=k8s.ObjectMeta(name=efa_counters_name(name), labels=labels),
                          spec=k8s.DaemonSetSpec(
            selector=k8s.LabelSelector(match_labels=counter_labels),
            template=k8s.PodTemplateSpec(
                metadata=k8s.ObjectMeta(labels=counter_labels),
                spec=k8s.PodSpec(
                    service_account_name=efa_counters_name(name),
                    automount_service_account_token=False,
                    security_context=non_root(),
                    affinity=k8s.Affinity(node_affinity=k8s.NodeAffinity(
                        required_during_scheduling_ignored_during_execution=gpu_nodes)),
                    tolerations=[k8s.Toleration(key=pool.taint.key, operator="Equal", value=pool.taint.value,
                                                effect=pool.taint.effect) for pool in spec.pools],
                    containers=[k8s.Container(
                        name="efa-counters", image=spec.image_uri,
                        command=_python_command("efa-counters", "--sysfs", "/host/sys", "--port", str(EFA_COUNTER_PORT)),
                        env=[*PYTHON_ENV, k8s.EnvVar(name="NODE_NAME", value_from=k8s.EnvVarSource(
                            field_ref=k8s.ObjectFieldSelector(field_path="spec.nodeName")))],
                        ports=[k8s.ContainerPort(name="efa-counters", container_port=EFA_COUNTER_PORT, protocol="TCP")],
                        readiness_probe=k8s.Probe(http_get=k8s.HttpGetAction(
                            path="/healthz", port=k8s.IntOrString.from_number(EFA_COUNTER_PORT))),
                        # A reader that stops answering is restarted, not left for the gate to time out on.
                        liveness_probe=k8s.Probe(http_get=k8s.HttpGetAction(
                            path="/healthz", port=k8s.IntOrString.from_number(EFA_COUNTER_PORT)),
                            period_seconds=20, failure_threshold=3),
                        # Within the GPU nodes' DaemonSet budget (sizing.DAEMONSET_BUDGET).
                        resources=guaranteed(sizing.EFA_COUNTER_READER),
                        security_context=locked_down(),
                        volume_mounts=[k8s.VolumeMount(name="program", mount_path=PROGRAM_DIR, read_only=True),
                                       # Submounts such as /sys/fs/cgroup read-only too, where the
                                       # runtime can (Kubernetes 1.33+ recursiveReadOnly).
                                       k8s.VolumeMount(name="sys", mount_path="/host/sys", read_only=True,
                                                       recursive_read_only="IfPossible")],
                    )],
                    volumes=[_program_volume(program_name),
                             k8s.Volume(name="sys", host_path=k8s.HostPathVolumeSource(path="/sys", type="Directory"))],
                ),
            ),
        ))

        self.job = k8s.KubeJob(self, "Job", metadata=k8s.ObjectMeta(
            name=self.job_name, labels=_job_labels(name, plan.run_id),
            annotations=dict(POST_SYNC_HOOK_ANNOTATIONS) if post_sync_hook else None),
            spec=gate_job_spec(spec, verification, self.job_name, signal_secret=signal_secret))

        self.cron_job: k8s.KubeCronJob | None = None
        if verification.every_minutes is not None:
            self.cron_job = self._continuous(spec, verification, labels, cluster_role, metric_namespace)

    def _continuous(self, spec: ServingSpec, verification: VerificationSpec, labels: dict[str, str],
                    node_reader: str, metric_namespace: str) -> k8s.KubeCronJob:
        """The gate's checks every ``every_minutes``, read-only, publishing TransportVerified.

        Its own account: read what the gate reads, never delete a RayCluster (``rollout`` off),
        no ConfigMap writes (``as_deploy_job`` off); EKS Pod Identity gives it a role that may only
        put metrics into this deployment's own namespace (``metric_namespace``,
        ``RayLlmServing.monitor_role``). The account does not automount a token: its one container
        gets the API credentials by a projected volume, so a pod merely naming the account gets none."""
        account = monitor_name(spec.service_name)
        state = monitor_state_name(spec.service_name)
        k8s.KubeServiceAccount(self, "MonitorAccount", metadata=k8s.ObjectMeta(name=account, labels=labels),
                               automount_service_account_token=False)
        # Rendered empty, so the Role can name it (``create`` cannot be limited to one name); the
        # runs write its data, which a later apply leaves alone (the manifest never sets data).
        self.state_config_map = k8s.KubeConfigMap(self, "MonitorState", metadata=k8s.ObjectMeta(
            name=state, labels={**labels, COMPONENT_LABEL: MONITOR_COMPONENT}))
        k8s.KubeRole(self, "MonitorRole", metadata=k8s.ObjectMeta(name=account, labels=labels), rules=[
            k8s.PolicyRule(api_groups=[""], resources=["pods", "pods/log"], verbs=["get", "list"]),
            k8s.PolicyRule(api_groups=["ray.io"], resources=["rayservices", "rayclusters"], verbs=["get"]),
            # Whether the deploy's gate Job has finished: until it has, a run does nothing.
            k8s.PolicyRule(api_groups=["batch"], resources=["jobs"], verbs=["get"], resource_names=[self.job_name]),
            # The previous run's reading of the metrics, for the window's serving figures.
            k8s.PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "update"], resource_names=[state]),
            k8s.PolicyRule(api_groups=[""], resources=["events"], verbs=["list"]),
            # The counter readers' DaemonSet (its uid: which pods are readers), as the gate's Role.
            k8s.PolicyRule(api_groups=["apps"], resources=["daemonsets"], verbs=["get"],
                           resource_names=[efa_counters_name(spec.service_name)]),
        ])
        subject = k8s.Subject(kind="ServiceAccount", name=account, namespace=spec.namespace)
        k8s.KubeRoleBinding(self, "MonitorRoleBinding", metadata=k8s.ObjectMeta(name=account, labels=labels),
                            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=account),
                            subjects=[subject])
        k8s.KubeClusterRoleBinding(self, "MonitorNodeReaderBinding",
                                   metadata=k8s.ObjectMeta(name=f"{spec.namespace}-{account}", labels=labels),
                                   role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                                        name=node_reader),
                                   subjects=[subject])
        overrides = json.dumps(read_only_run(verification.continuous_deadline_seconds,
                                             # The last period (and a little more) of each worker's log.
                                             log_window_seconds=verification.every_minutes * 60 + 120,
                                             wait_for_job=self.job_name, state_config_map=state),
                               separators=(",", ":"))
        pod_labels = {INSTANCE_LABEL: spec.service_name, COMPONENT_LABEL: MONITOR_COMPONENT}
        return k8s.KubeCronJob(self, "Continuous", metadata=k8s.ObjectMeta(name=account, labels=labels),
                               spec=k8s.CronJobSpec(
            schedule=verification.schedule or "", time_zone="Etc/UTC", concurrency_policy="Forbid",
            starting_deadline_seconds=300, successful_jobs_history_limit=1, failed_jobs_history_limit=3,
            job_template=k8s.JobTemplateSpec(spec=k8s.JobSpec(
                # The program's own deadline, then room for the report and the (bounded) publish.
                backoff_limit=0, active_deadline_seconds=verification.continuous_deadline_seconds + 150,
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=pod_labels),
                    spec=k8s.PodSpec(
                        service_account_name=account, automount_service_account_token=False,
                        restart_policy="Never", node_selector=spec.system.labels,
                        security_context=non_root(),
                        containers=[k8s.Container(
                            name="verify", image=spec.image_uri,
                            command=_python_command("run", "--config", f"{SETTINGS_DIR}/{GATE_SETTINGS_FILE}",
                                                    "--set", f"'{overrides}'", "--publish", shlex.quote(metric_namespace)),
                            env=[*PYTHON_ENV, k8s.EnvVar(name="AWS_REGION", value=spec.region),
                                 # boto3 reads ~/.aws; nobody's home is not writable
                                 k8s.EnvVar(name="HOME", value="/tmp"),
                                 # What the settings ConfigMap must hold: a namespace editor can
                                 # replace that ConfigMap, not this pod template (wire.SETTINGS_SHA256_ENV).
                                 k8s.EnvVar(name=SETTINGS_SHA256_ENV, value=settings_sha256(self.plan.settings.to_json()))],
                            resources=guaranteed(sizing.GATE_JOB),
                            security_context=locked_down(),
                            volume_mounts=[
                                k8s.VolumeMount(name="program", mount_path=PROGRAM_DIR, read_only=True),
                                k8s.VolumeMount(name="settings", mount_path=SETTINGS_DIR, read_only=True),
                                k8s.VolumeMount(name="tmp", mount_path="/tmp"),
                                k8s.VolumeMount(name=MONITOR_API_VOLUME, mount_path=pod_templates.SERVICE_ACCOUNT_DIR,
                                                read_only=True)],
                        )],
                        volumes=[_program_volume(f"{gate_name(spec.service_name)}-program"),
                                 pod_templates.autoscaler_api_volume(MONITOR_API_VOLUME),
                                 k8s.Volume(name="settings", config_map=k8s.ConfigMapVolumeSource(name=self.job_name)),
                                 k8s.Volume(name="tmp", empty_dir=k8s.EmptyDirVolumeSource(
                                     medium="Memory", size_limit=k8s.Quantity.from_string("16Mi")))],
                    ),
                ),
            )),
        ))


MONITOR_API_VOLUME = "kube-api-access"
"""Continuous verification's projected API credentials (token, CA, namespace), where the kubelet would
automount them (``verification/kube.py``'s ``SERVICE_ACCOUNT_DIR``)."""


def monitor_state_name(service_name: str) -> str:
    """The ConfigMap holding the previous continuous verification run's reading: ``<svc>-cv-state``."""
    return f"{monitor_name(service_name)}-state"




def _job_labels(service_name: str, run: str) -> dict[str, str]:
    return {INSTANCE_LABEL: service_name, COMPONENT_LABEL: GATE_COMPONENT, GATE_RUN_LABEL: run}


def gate_job_spec(spec: ServingSpec, verification: VerificationSpec, job_name: str, *,
                  signal_secret: str | None) -> k8s.JobSpec:
    """The gate Job's spec; its settings ConfigMap shares the Job's name. ``signal_secret``: the ARN of
    the secret holding the wait condition's URL (not the URL), or None."""
    env = list(PYTHON_ENV)
    if signal_secret is not None:
        env.append(k8s.EnvVar(name=SIGNAL_SECRET_ENV, value=signal_secret))
    run = job_name.rsplit("-", 1)[-1]
    return k8s.JobSpec(
        backoff_limit=0,
        # CloudFormation's wait and this deadline start together, when the Job is created; the
        # program stops GATE_MARGIN_SECONDS earlier, counted from the same instant.
        active_deadline_seconds=verification.timeout_seconds,
        template=k8s.PodTemplateSpec(
            metadata=k8s.ObjectMeta(labels=_job_labels(spec.service_name, run)),
            spec=k8s.PodSpec(
                service_account_name=gate_name(spec.service_name),
                automount_service_account_token=True,  # the gate reads the API with it
                restart_policy="Never",
                node_selector=spec.system.labels,
                security_context=non_root(),
                containers=[k8s.Container(
                    name="gate", image=spec.image_uri,
                    command=_python_command("run", "--config", f"{SETTINGS_DIR}/{GATE_SETTINGS_FILE}"),
                    env=env,
                    # Within the system node's room for small pods (sizing.SYSTEM_POD_BUDGET).
                    resources=guaranteed(sizing.GATE_JOB),
                    security_context=locked_down(),
                    volume_mounts=[k8s.VolumeMount(name="program", mount_path=PROGRAM_DIR, read_only=True),
                                   k8s.VolumeMount(name="settings", mount_path=SETTINGS_DIR, read_only=True)],
                )],
                volumes=[_program_volume(f"{gate_name(spec.service_name)}-program"),
                         k8s.Volume(name="settings", config_map=k8s.ConfigMapVolumeSource(name=job_name))],
            ),
        ),
    )


def _job_spec_json(spec: ServingSpec, verification: VerificationSpec) -> dict[str, Any]:
    """The Job spec with a placeholder run, for the run id: a change to the Job itself (the signal
    switched on or off, a new command or size after a library upgrade) must rename it, since a
    Job's pod template cannot be changed in place."""
    scratch = cdk8s.Chart(cdk8s.App(), "job-spec")
    job = k8s.KubeJob(scratch, "Job", spec=gate_job_spec(spec, verification, gate_job_name(spec.service_name, "RUN"),
                                                         signal_secret=SIGNAL_SECRET_PLACEHOLDER if verification.wait else None))
    return dict(job.to_json()["spec"])


def build_verification_chart(app: cdk8s.App, spec: ServingSpec, verification: VerificationSpec, plan: GatePlan,
                             charts: ServingCharts, signal_secret: str | None,
                             metric_namespace: str | None = None, post_sync_hook: bool = False) -> VerificationChart:
    """``metric_namespace``: this deployment's own (``wire.metric_namespace``), where continuous
    verification publishes; ``RayLlmServing`` passes its stack's. Charts rendered outside a stack
    (``cdk8s`` alone) get the default stack name's. ``post_sync_hook``: annotate the gate Job as an
    Argo CD PostSync hook (:data:`POST_SYNC_HOOK_ANNOTATIONS`), for a GitOps tool that applies it."""
    chart = VerificationChart(app, VERIFICATION_CHART_ID, spec=spec, plan=plan, verification=verification,
                              signal_secret=signal_secret, post_sync_hook=post_sync_hook,
                              metric_namespace=metric_namespace or wire_metric_namespace(
                                  DEFAULT_STACK_NAME, spec.namespace, spec.service_name))
    chart.add_dependency(charts.rayservice)
    return chart
