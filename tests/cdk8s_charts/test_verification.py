"""The gate's chart: its objects pass Kubernetes 1.35's schemas, ask only for what they need, and
carry what the deployed spec says; and each kind of serving-spec change reaches KubeRay 1.4.0."""

from __future__ import annotations

import json
from typing import Any

import cdk8s
import pytest
from helpers.charts import KUBERNETES_VERSION, leg

from ray_llm_eks.cdk8s_charts import build_serving_charts
from ray_llm_eks.cdk8s_charts.rayservice import CLUSTER_SPEC_HASH_ANNOTATION
from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.observability import ObservabilitySpec
from ray_llm_eks.base.pools import RootVolume
from ray_llm_eks.base.serving import ImageSpec, ModelSpec, SecurityProfile, ServiceSettings, Topology
from ray_llm_eks.base import sizing
from ray_llm_eks.base.verification import VerificationSpec
from ray_llm_eks.base import wire
from ray_llm_eks.verification import bundle

SIGNAL_SECRET = "arn:aws:secretsmanager:us-west-2:123456789012:secret:GateSignal-AbCdEf"


class Rendered:
    def __init__(self, config: Deployment, signal_secret: str | None = SIGNAL_SECRET) -> None:
        self.spec = config.specs().serving
        self.verification = config.specs().verification
        app = cdk8s.App()
        self.charts = build_serving_charts(app, self.spec)
        self.plan = GatePlan.of(self.spec, self.verification, self.charts)
        self.metric_namespace = wire.metric_namespace(config.stack_name, self.spec.namespace, self.spec.service_name)
        self.chart = build_verification_chart(app, self.spec, self.verification, self.plan, self.charts, signal_secret,
                                              self.metric_namespace)
        self.objects = self.chart.to_json()
        self.rayservice = next(o for o in self.charts.rayservice.to_json() if o["kind"] == "RayService")

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        [found] = [o for o in self.objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
        return found

    @property
    def cluster(self) -> dict[str, Any]:
        return self.rayservice["spec"]["rayClusterConfig"]

    def template_hashes(self) -> set[str]:
        templates = [self.cluster["headGroupSpec"]["template"]] + [g["template"] for g in self.cluster["workerGroupSpecs"]]
        return {t["metadata"]["annotations"][CLUSTER_SPEC_HASH_ANNOTATION] for t in templates}


@pytest.fixture(scope="module")
def default() -> Rendered:
    return Rendered(Deployment())


def test_every_object_passes_kubernetes_validate_strict(default):
    import kubernetes_validate

    kinds = [o["kind"] for o in default.objects]
    assert sorted(kinds) == sorted(["ConfigMap", "ConfigMap", "ServiceAccount", "ServiceAccount", "Role",
                                    "RoleBinding", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Job",
                                    # continuous verification (observability, on by default)
                                    "ServiceAccount", "Role", "RoleBinding", "ClusterRoleBinding", "CronJob",
                                    "ConfigMap"])  # ... and its state
    for obj in default.objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_job_is_named_after_the_run_and_bounded_by_the_wait(default):
    job = default.one("Job")
    assert job["metadata"]["name"] == f"ray-llm-gate-{default.plan.run_id}" == default.chart.job_name
    assert len(job["metadata"]["name"]) <= 63
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 3600 == default.verification.timeout_seconds
    # The program stops 120 s earlier, so its FAILURE (with the reason) beats the plain timeout.
    assert default.plan.settings.deadline_seconds == 3480
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"role": "system"} and pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    assert container["image"] == default.spec.image_uri  # the image the head already pulled there
    assert container["command"][-1].endswith("-m rayllmeks_gate run --config /etc/rayllmeks-gate/gate.json")
    assert {"name": "GATE_SIGNAL_SECRET", "value": SIGNAL_SECRET} in container["env"]
    assert container["resources"]["limits"] == {"cpu": sizing.GATE_JOB.cpu_quantity,
                                                 "memory": sizing.GATE_JOB.memory_quantity}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65534


def test_the_job_gets_the_secrets_arn_not_the_url_and_only_when_cloudformation_waits(default):
    """No Kubernetes Secret carries the signal: the Job reads it from Secrets Manager with its own role."""
    assert not [o for o in default.objects if o["kind"] == "Secret"]
    [container] = default.one("Job")["spec"]["template"]["spec"]["containers"]
    assert [e for e in container["env"] if e["name"].startswith("GATE_SIGNAL")] == [
        {"name": "GATE_SIGNAL_SECRET", "value": SIGNAL_SECRET}]
    not_waiting = Rendered(Deployment(verification=VerificationSpec(wait=False)), signal_secret=None)
    assert not [o for o in not_waiting.objects if o["kind"] == "Secret"]
    env = not_waiting.one("Job")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert not [e for e in env if e["name"].startswith("GATE_SIGNAL")]


def test_the_program_config_map_carries_the_package(default):
    import base64

    program = default.one("ConfigMap", "ray-llm-gate-program")
    assert "data" not in program and set(program["binaryData"]) == {bundle.ARCHIVE}
    files = bundle.unpack(base64.b64decode(program["binaryData"][bundle.ARCHIVE]))
    assert files == bundle.shipped_files()
    assert {"__main__.py", "gate.py", "evidence.py", "efa.py", "metrics.py", "kube.py", "probe.py"} <= set(files)
    # Every pod that runs the program mounts the archive and imports from it.
    for kind in ("Job", "CronJob", "DaemonSet"):
        for obj in [o for o in default.objects if o["kind"] == kind]:
            pod = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"] if kind == "CronJob" else obj["spec"]["template"]["spec"]
            (volume,) = [v for v in pod["volumes"] if v["name"] == "program"]
            assert volume["configMap"]["items"] == [{"key": bundle.ARCHIVE, "path": bundle.ARCHIVE}]
            env = {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}
            assert env["PYTHONPATH"].endswith("/" + bundle.ARCHIVE), (kind, env.get("PYTHONPATH"))


def test_the_settings_say_what_the_deployed_spec_says(default):
    config_map = default.one("ConfigMap", default.chart.job_name)
    assert config_map["immutable"] is True
    assert config_map["metadata"]["labels"][wire.COMPONENT_LABEL] == wire.GATE_SETTINGS_COMPONENT
    assert config_map["metadata"]["labels"][wire.INSTANCE_LABEL] == "ray-llm"
    settings = json.loads(config_map["data"]["gate.json"])
    assert wire.GateSettings.from_json(settings).run_id == default.plan.run_id  # the program reads it as is
    assert settings["cluster_spec_hash"] in default.template_hashes()
    assert settings["image"] == default.spec.image_uri
    assert settings["serve_args"] == default.charts.rayservice.serve_config.to_dict()["applications"][0]["args"]
    assert settings["openai_url"] == "http://ray-llm-openai.inference.svc:8000"
    assert "dashboard_url" not in settings  # the gate reads Serve's state from the RayService
    assert settings["roles"] == {"prefill": {"nodes": 1, "node_selector": {"role": "prefill"}, "gpus_per_node": 1},
                                 "decode": {"nodes": 1, "node_selector": {"role": "decode"}, "gpus_per_node": 1}}
    assert settings["worker_env"]["NIXL_LOG_LEVEL"] == "INFO"
    # The probes leave room for the chat template and the answer inside max_model_len (4096).
    assert settings["probe_prompt_words"] == 2048 and settings["probe_max_tokens"] == 16


def test_the_gate_can_read_what_it_checks_and_delete_only_ray_clusters(default):
    (role,) = [o for o in default.objects if o["kind"] == "Role" and o["metadata"]["name"] == "ray-llm-gate"]
    rules = role["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},  # the report's copy
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["update"],
         "resourceNames": [f"{default.chart.job_name}-report"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"], "resourceNames": [default.chart.job_name]},
        {"apiGroups": ["ray.io"], "resources": ["rayservices"], "verbs": ["get"]},
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},  # KubeRay's Serve submissions
        # The counter readers' DaemonSet, by name: its uid tells its readers from look-alikes.
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"], "resourceNames": ["ray-llm-efa-counters"]},
    ]
    # The name the gate looks it up by is the rendered DaemonSet's.
    assert default.one("DaemonSet")["metadata"]["name"] == wire.efa_counters_name("ray-llm") == "ray-llm-efa-counters"
    assert [r for r in rules if "delete" in r["verbs"]] == [
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get", "delete"]}]
    assert default.one("ClusterRole")["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    binding = default.one("ClusterRoleBinding", "inference-ray-llm-gate")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ray-llm-gate", "namespace": "inference"}]


def test_the_counter_reader_runs_on_every_gpu_node_read_only(default):
    daemon = default.one("DaemonSet")
    pod = daemon["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "role", "operator": "In", "values": ["prefill", "decode"]}]}]
    assert {(t["key"], t["value"]) for t in pod["tolerations"]} == {("ray-llm-eks/gpu-role", "prefill"),
                                                                   ("ray-llm-eks/gpu-role", "decode")}
    assert pod["automountServiceAccountToken"] is False
    [container] = pod["containers"]
    assert {"name": "sys", "mountPath": "/host/sys", "readOnly": True, "recursiveReadOnly": "IfPossible"} \
        in container["volumeMounts"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65534
    assert {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}} in pod["volumes"]
    assert "privileged" not in container["securityContext"] or container["securityContext"]["privileged"] is False
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}
    selector = default.plan.settings.efa_counter_selector
    assert daemon["spec"]["template"]["metadata"]["labels"] == selector


def test_the_gate_job_fits_the_room_the_system_node_keeps_for_small_pods():
    # CoreDNS 2 x 100m/70Mi + KubeRay 100m/512Mi (sizing.SYSTEM_POD_BUDGET's docstring), the gate
    # Job and the teardown guard.
    used = sizing.PodResources(300 + sizing.GATE_JOB.cpu_millis + sizing.TEARDOWN_GUARD.cpu_millis,
                               140 + 512 + sizing.GATE_JOB.memory_mib + sizing.TEARDOWN_GUARD.memory_mib)
    assert used.cpu_millis <= sizing.SYSTEM_POD_BUDGET.cpu_millis
    assert used.memory_mib <= sizing.SYSTEM_POD_BUDGET.memory_mib


# --- item 4: every kind of serving-spec change reaches the pods ----------------------------------------------

CLUSTER_CHANGES = {
    "image digest": Deployment(image=ImageSpec(digest="sha256:" + "ab" * 32)),
    "security profile": Deployment(serving=ServiceSettings(security_profile=SecurityProfile.ipc_lock)),
    "node count": Deployment(decode=leg("decode", desired_size=2, max_size=2)),
    "instance type": Deployment(prefill=leg("prefill", instance_type="g6.12xlarge")),
}
SERVE_CONFIG_CHANGES = {
    "model": Deployment(model=ModelSpec(source="meta-llama/Llama-3.1-8B-Instruct", served_name="llama-8b")),
    "engine settings": Deployment(model=ModelSpec(max_model_len=2048, gpu_memory_utilization=0.92)),
    # The user's engine arguments (base.engine_args) are in the serve config, so in the run id.
    "user engine arguments": Deployment(model=ModelSpec(engine_kwargs={"max_num_seqs": 64})),
    "topology": Deployment(topology=Topology.colocated),
}


@pytest.mark.parametrize("change", sorted(CLUSTER_CHANGES))
def test_a_cluster_change_renames_the_pods_spec_hash_so_the_gate_recreates_the_cluster(default, change):
    """KubeRay 1.4.0 (upgradeStrategy None) ignores these in a running cluster; the annotation
    differs on every pod template, so the gate deletes the active RayCluster and KubeRay builds
    a new one from the new spec; the run id changes, so a new gate Job runs."""
    changed = Rendered(CLUSTER_CHANGES[change])
    assert changed.template_hashes() != default.template_hashes()
    assert len(changed.template_hashes()) == 1
    assert changed.plan.settings.cluster_spec_hash in changed.template_hashes()
    assert changed.plan.run_id != default.plan.run_id
    assert changed.chart.job_name != default.chart.job_name


def test_a_replica_only_change_still_changes_the_hash_although_kuberays_own_ignores_replicas(default):
    changed = Rendered(Deployment(prefill=leg("prefill", desired_size=2, max_size=2)))
    groups = {g["groupName"]: g for g in changed.cluster["workerGroupSpecs"]}
    assert groups["prefill"]["replicas"] == 2
    assert changed.template_hashes() != default.template_hashes()


@pytest.mark.parametrize("change", sorted(SERVE_CONFIG_CHANGES))
def test_a_serve_config_change_is_applied_in_place_by_kuberay_and_reverified(default, change):
    """KubeRay 1.4.0 resubmits serveConfigV2 when its text differs from the one it cached
    (rayservice_controller.go), so these reach the replicas without a new cluster; the gate runs again."""
    changed = Rendered(SERVE_CONFIG_CHANGES[change])
    assert changed.rayservice["spec"]["serveConfigV2"] != default.rayservice["spec"]["serveConfigV2"]
    assert changed.template_hashes() == default.template_hashes()  # pods stay: no needless downtime
    assert changed.plan.run_id != default.plan.run_id


def test_a_change_that_rolls_the_nodes_gives_the_gate_a_new_run(default):
    """The pool's node identity (what its launch template is built from) is on every pod template,
    so the cluster spec hash and the gate's run (and so its wait condition) change with it."""
    bigger = Rendered(Deployment(prefill=leg("prefill", root_volume=RootVolume(size_gib=300))))
    assert bigger.plan.run_id != default.plan.run_id
    assert bigger.plan.settings.cluster_spec_hash != default.plan.settings.cluster_spec_hash
    assert bigger.rayservice["spec"]["serveConfigV2"] == default.rayservice["spec"]["serveConfigV2"]


def test_an_unchanged_spec_keeps_its_run_id(default):
    again = Rendered(Deployment())
    assert again.plan.run_id == default.plan.run_id
    assert again.template_hashes() == default.template_hashes()


def test_switching_the_wait_renames_the_job_whose_pod_template_changes(default):
    """A Job's pod template is immutable: the signal secret's env var comes and goes with ``wait``."""
    relaxed = Rendered(Deployment(verification=VerificationSpec(wait=False)), signal_secret=None)
    assert relaxed.plan.run_id != default.plan.run_id


def test_gate_settings_changes_rerun_the_gate_without_touching_the_pods(default):
    changed = Rendered(Deployment(verification=VerificationSpec(probes=8)))
    assert changed.plan.run_id != default.plan.run_id
    assert changed.template_hashes() == default.template_hashes()


def test_probe_prompts_fit_short_contexts():
    short = VerificationSpec(probe_prompt_fraction=0.9, probe_max_tokens=64)
    assert short.probe_prompt_words(256) == 256 - 64 - 64


def test_continuous_verification_is_a_read_only_cronjob_that_publishes():
    """The gate's checks on observability.verify_every_minutes: never a rollout, its own account."""
    import shlex

    rendered = Rendered(Deployment(observability=ObservabilitySpec(verify_every_minutes=10)), signal_secret=None)
    objects = rendered.objects
    (cron,) = [o for o in objects if o["kind"] == "CronJob"]
    assert (cron["spec"]["schedule"], cron["spec"]["concurrencyPolicy"], cron["spec"]["timeZone"]) == (
        "*/10 * * * *", "Forbid", "Etc/UTC")
    job = cron["spec"]["jobTemplate"]["spec"]
    # The run's own deadline (420 s), then 150 s for its report and the bounded publish: 570 s,
    # inside the 10-minute period.
    assert job["activeDeadlineSeconds"] == 570
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == "ray-llm-cv"
    (container,) = pod["containers"]
    arguments = shlex.split(container["command"][2].split(" -m ", 1)[1])
    assert arguments[:4] == ["rayllmeks_gate", "run", "--config", "/etc/rayllmeks-gate/gate.json"]
    (gate_job,) = [o for o in objects if o["kind"] == "Job"]
    assert json.loads(arguments[arguments.index("--set") + 1]) == {
        "rollout": False, "as_deploy_job": False, "deadline_seconds": 420,
        "log_window_seconds": 720,  # the last period and two minutes of each worker's log
        "wait_for_job": gate_job["metadata"]["name"],  # nothing while the deploy's gate runs
        "state_config_map": "ray-llm-cv-state"}  # the previous run's reading, for the window's figures
    # Into this deployment's own namespace, the only one its role may write.
    assert arguments[-2:] == ["--publish", "RayLlmEks/RayLlmEks/inference/ray-llm"]
    # The account automounts no token (a pod merely naming it gets none); the one container gets
    # the API credentials, projected where the program reads them.
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "ray-llm-cv"]
    assert account["automountServiceAccountToken"] is False and pod["automountServiceAccountToken"] is False
    (api,) = [v for v in pod["volumes"] if v["name"] == "kube-api-access"]
    assert [sorted(source) for source in api["projected"]["sources"]] == [
        ["serviceAccountToken"], ["configMap"], ["downwardAPI"]]
    assert {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True} in container["volumeMounts"]
    from ray_llm_eks.verification.kube import SERVICE_ACCOUNT_DIR

    assert str(SERVICE_ACCOUNT_DIR) == "/var/run/secrets/kubernetes.io/serviceaccount"
    # The settings of this deploy's gate, mounted read-only.
    (settings,) = [v for v in pod["volumes"] if v["name"] == "settings"]
    assert settings["configMap"]["name"] == gate_job["metadata"]["name"]
    # Its account reads what the gate reads and deletes nothing.
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "ray-llm-cv"]
    state_rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
                  "resourceNames": ["ray-llm-cv-state"]}
    assert state_rule in role["rules"]  # its own state, by name; nothing else it may write
    assert all(set(rule["verbs"]) <= {"get", "list"} for rule in role["rules"] if rule != state_rule)
    # The state ConfigMap is rendered without data: the runs own its data, and a later apply
    # (which never sets data) leaves it alone.
    (state,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "ray-llm-cv-state"]
    assert "data" not in state
    assert {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"],
            "resourceNames": [gate_job["metadata"]["name"]]} in role["rules"]
    # As the gate, it reads the counters only of the pods the readers' DaemonSet controls.
    assert {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"],
            "resourceNames": ["ray-llm-efa-counters"]} in role["rules"]
    # A 47-character service still gives a CronJob name within Kubernetes' 52.
    from ray_llm_eks.cdk8s_charts.verification import monitor_name

    assert len(monitor_name("s" * 47)) <= 52
    import copy

    import kubernetes_validate

    kubernetes_validate.validate(copy.deepcopy(cron), "1.35.0", strict=True)


def test_continuous_verification_carries_the_hash_of_the_settings_rendered_beside_it():
    """The CronJob's pod template holds the SHA-256 of the settings ConfigMap's content (canonical
    JSON: sorted keys, no spaces), which a namespace editor who replaces the ConfigMap cannot change;
    the deploy's own Job, which runs at once on what the same apply wrote, carries none."""
    import hashlib

    rendered = Rendered(Deployment(observability=ObservabilitySpec(verify_every_minutes=10)), signal_secret=None)
    chart, objects = rendered.chart, rendered.objects
    (settings,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == chart.settings_name]
    assert settings["immutable"] is True
    content = json.loads(settings["data"]["gate.json"])
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    (cron,) = [o for o in objects if o["kind"] == "CronJob"]
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert {"name": "GATE_SETTINGS_SHA256", "value": hashlib.sha256(canonical).hexdigest()} in container["env"]
    (job,) = [o for o in objects if o["kind"] == "Job"]
    (gate,) = job["spec"]["template"]["spec"]["containers"]
    assert all(e["name"] != "GATE_SETTINGS_SHA256" for e in gate["env"])
    # Other thresholds render another hash: the pod template changes with the settings.
    other_objects = Rendered(Deployment(observability=ObservabilitySpec(verify_every_minutes=10),
                                        verification=VerificationSpec(probes=2)), signal_secret=None).objects
    (other_cron,) = [o for o in other_objects if o["kind"] == "CronJob"]
    (other_container,) = other_cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    hashes = [{e["name"]: e.get("value") for e in c["env"]}["GATE_SETTINGS_SHA256"] for c in (container, other_container)]
    assert hashes[0] != hashes[1]


def test_autoscaled_roles_give_the_gate_their_bounds():
    from ray_llm_eks.cdk8s_charts.verification import GatePlan

    specs = Deployment(prefill=leg("prefill", min_size=1, desired_size=1, max_size=3)).specs()
    charts = build_serving_charts(cdk8s.App(), specs.serving)
    roles = GatePlan.of(specs.serving, specs.verification, charts).settings.to_json()["roles"]
    assert (roles["prefill"]["nodes"], roles["prefill"]["min_nodes"], roles["prefill"]["max_nodes"]) == (1, 1, 3)
    assert "min_nodes" not in roles["decode"]  # fixed: exactly its nodes


def test_with_a_threshold_the_settings_carry_it_and_the_long_probe_reaches_it():
    from ray_llm_eks.base.serving import DisaggregationSpec

    assert "min_prompt_tokens" not in json.loads(json.dumps(Rendered(Deployment()).plan.settings.to_json()))
    conditional = Rendered(Deployment(disaggregation=DisaggregationSpec(min_prompt_tokens=1024)))
    assert conditional.plan.settings.min_prompt_tokens == 1024
    assert conditional.plan.settings.probe_prompt_words == 2048  # half of max_model_len 4096 already reaches it
    # A threshold above the probe's usual length: the long probes grow to it, inside max_model_len.
    high = Rendered(Deployment(disaggregation=DisaggregationSpec(min_prompt_tokens=4000)))
    assert high.plan.settings.probe_prompt_words == 4000
    assert 4000 + 64 + high.plan.settings.probe_max_tokens <= 4096


def test_a_threshold_that_leaves_no_room_for_a_remote_probe_is_refused_by_name():
    from ray_llm_eks.base import SpecErrors
    from ray_llm_eks.base.serving import DisaggregationSpec

    with pytest.raises(SpecErrors) as caught:
        Deployment(disaggregation=DisaggregationSpec(min_prompt_tokens=4017))
    assert [e.field for e in caught.value] == ["disaggregation.min_prompt_tokens"]
    assert "leaves no room for the gate's remote-prefill probe" in str(caught.value)
    assert "accepted: 0 to 4016, or a smaller verification.probe_max_tokens" in str(caught.value)
    Deployment(disaggregation=DisaggregationSpec(min_prompt_tokens=4016))  # the largest that fits
    Deployment(disaggregation=DisaggregationSpec(min_prompt_tokens=4031), verification=VerificationSpec(probe_max_tokens=1))
