"""The ValidatingAdmissionPolicy, its CEL evaluated case by case with cel-python on the rendered
policy (helpers.admission): what a tenant who can create pods, Jobs, DaemonSets, RayClusters or
namespaces, or patch pods, is refused; and that the pods this deployment renders are admitted as
their controllers create them. Every option's full build is in tests/cdk8s_charts/test_admission_policy_every_build.py.
"""

from __future__ import annotations

import copy

import cdk8s
import pytest
from helpers.admission import (
    DAEMONSET_CONTROLLER,
    DEFAULT_TOLERATION_SECONDS,
    JOB_CONTROLLER,
    OPERATOR,
    REPLICASET_CONTROLLER,
    admits,
    connect,
    controller_pod,
    created_pods,
    daemonset_pod,
    denials,
    kuberay_pod,
    pod,
    policy_of,
    ray_cluster,
)
from helpers.charts import leg, render

from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.placement import GPU_TAINT_KEY
from ray_llm_eks.base.serving import ServiceSettings
from ray_llm_eks.cdk8s_charts import ADMISSION_POLICY_CHART_ID

KUBERNETES_VERSION = "1.35.0"
TENANT = "tenant@example.com"
GPU = {"key": GPU_TAINT_KEY, "operator": "Equal", "value": "decode", "effect": "NoSchedule"}
EVERYTHING = {"operator": "Exists"}


def policy(rendered) -> tuple[dict, list[dict]]:
    return policy_of(rendered.objects[ADMISSION_POLICY_CHART_ID])


@pytest.fixture(scope="module")
def vap(scenario):
    return policy(scenario("disaggregated"))


@pytest.fixture(scope="module")
def worker(scenario) -> dict:
    return kuberay_pod(scenario("disaggregated").worker_group("decode")["template"], "worker")


@pytest.fixture(scope="module")
def head(scenario) -> dict:
    return kuberay_pod(scenario("disaggregated").head_group["template"], "head")


def _verification_objects(deployment: Deployment) -> list[dict]:
    from ray_llm_eks.cdk8s_charts import build_serving_charts
    from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart

    specs = deployment.specs()
    app = cdk8s.App()
    charts = build_serving_charts(app, specs.serving)
    chart = build_verification_chart(app, specs.serving, specs.verification,
                                     GatePlan.of(specs.serving, specs.verification, charts), charts, None)
    return list(cdk8s.Testing.synth(chart))


@pytest.fixture(scope="module")
def counters() -> dict:
    (daemonset,) = [o for o in _verification_objects(Deployment()) if o["kind"] == "DaemonSet"]
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "ray-llm-efa-counters"
    return daemonset_pod(daemonset["spec"]["template"])


def _changed(candidate: dict, path: str, value) -> dict:
    """``candidate`` with ``spec.<path>`` (dotted, list indexes as numbers) set to ``value``."""
    changed = copy.deepcopy(candidate)
    *parents, last = path.split(".")
    node = changed["spec"]
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[int(last) if last.isdigit() else last] = value
    return changed


def plain(account: str | None = None, **spec) -> dict:
    return pod({"containers": [{"name": "c", "image": "i"}], **({"serviceAccountName": account} if account else {}),
                **spec})


# --- every pod the deployment renders, as its controller creates it -----------------------------

@pytest.mark.parametrize("name", ["disaggregated", "colocated", "hardened", "multi_gpu"])
def test_the_rendered_ray_pods_are_admitted_as_kuberay_creates_them(scenario, name):
    rendered = scenario(name)
    found = created_pods(rendered.all_objects())
    assert {what.split(" ", 1)[1] for what, *_ in found if what.startswith(rendered.ray_service["metadata"]["name"])} \
        >= {"head", "prefill", "decode"} - ({"prefill"} if name.endswith("colocated") else set())
    for what, candidate, namespace, user in found:
        assert denials(policy(rendered), namespace, candidate, user=user) == [], what


def test_the_workers_as_kuberay_builds_them_carry_a_privileged_init_container(worker):
    """KubeRay copies the Ray container's securityContext and mounts into wait-gcs-ready: the
    grant covers init containers, or no worker would start."""
    (init,) = [c for c in worker["spec"]["initContainers"] if c["name"] == "wait-gcs-ready"]
    assert init["securityContext"] == {"privileged": True}


def test_an_autoscaled_head_with_kuberays_autoscaler_container_is_admitted():
    rendered = render(Deployment(decode=leg("decode", min_size=1, desired_size=1, max_size=3)))
    found = {what: (candidate, namespace, user) for what, candidate, namespace, user in created_pods(rendered.all_objects())}
    candidate, namespace, user = found["ray-llm head"]
    assert candidate["spec"]["serviceAccountName"] == "ray-llm-head"
    assert [c["name"] for c in candidate["spec"]["containers"]] == ["ray-head", "autoscaler"]
    assert denials(policy(rendered), namespace, candidate, user=user) == []


def test_the_efa_counter_readers_are_admitted_from_the_daemonset_controller_only(vap, counters):
    assert denials(vap, "inference", counters, user=DAEMONSET_CONTROLLER) == []
    # The controller manager's shared identity is no longer a requester (docstring of
    # base.infrastructure.DAEMONSET_CONTROLLER_USER).
    assert not admits(vap, "inference", counters, user="system:kube-controller-manager")
    for user in (TENANT, JOB_CONTROLLER, REPLICASET_CONTROLLER, OPERATOR):
        assert not admits(vap, "inference", counters, user=user), user


def test_the_head_runs_as_the_images_user_and_the_cache_init_container_is_confined(scenario, head, worker):
    spec = scenario("disaggregated").config.specs().serving
    assert head["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": spec.image.user_id,
                                               "runAsGroup": spec.image.group_id,
                                               "seccompProfile": {"type": "RuntimeDefault"}}
    (cache,) = [c for c in worker["spec"]["initContainers"] if c["name"] == "hf-cache-permissions"]
    assert cache["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"add": ["CHOWN", "FOWNER"], "drop": ["ALL"]},
        "privileged": False, "readOnlyRootFilesystem": True, "runAsNonRoot": False, "runAsUser": 0,
        "seccompProfile": {"type": "RuntimeDefault"}}


# --- the tenant's attempts ----------------------------------------------------------------------

HOST_ROOT = [{"name": "root", "hostPath": {"path": "/"}}]


def test_the_audits_daemonset_on_the_counter_readers_account_is_refused(vap, counters):
    """The audit's case: a DaemonSet in the serving namespace on the efa-counters account, hostPath
    ``/`` read-write, uid 0, a catch-all toleration. Each part alone is refused too."""
    root = _changed(_changed(counters, "volumes", HOST_ROOT), "securityContext.runAsUser", 0)
    root["spec"]["containers"][0]["volumeMounts"] = [{"name": "root", "mountPath": "/host"}]
    root["spec"]["tolerations"] = [EVERYTHING]
    assert len(denials(vap, "inference", root, user=DAEMONSET_CONTROLLER)) >= 3


@pytest.mark.parametrize(("what", "path", "value"), [
    ("the host's root, read-only", "volumes.1.hostPath.path", "/"),
    ("/sys/ is not /sys", "volumes.1.hostPath.path", "/sys/"),
    ("/sys/kernel", "volumes.1.hostPath.path", "/sys/kernel"),
    ("/sys read-write", "containers.0.volumeMounts.1.readOnly", False),
    ("the cache's path, granted to the workers only", "volumes.1.hostPath.path", "/var/lib/ray-llm-eks/hf-cache"),
    ("root", "securityContext.runAsUser", 0),
    ("root in the container", "containers.0.securityContext.runAsUser", 0),
    ("runAsNonRoot off", "securityContext.runAsNonRoot", False),
    ("every taint", "tolerations.0", EVERYTHING),
    ("every GPU role", "tolerations.0", {"key": GPU_TAINT_KEY, "operator": "Exists"}),
    ("the GPU taint with every effect", "tolerations.0", {"key": GPU_TAINT_KEY, "operator": "Equal", "value": "prefill"}),
    ("every NoSchedule taint", "tolerations.0", {"operator": "Exists", "effect": "NoSchedule"}),
    ("privileged", "containers.0.securityContext.privileged", True),
    ("a capability", "containers.0.securityContext.capabilities", {"add": ["SYS_ADMIN"]}),
    ("the host's network", "hostNetwork", True),
    ("the host's PIDs", "hostPID", True),
    ("a host port", "containers.0.ports.0.hostPort", 9475),
])
def test_the_counter_readers_account_gets_exactly_its_grant(vap, counters, what, path, value):
    assert admits(vap, "inference", counters, user=DAEMONSET_CONTROLLER)
    assert not admits(vap, "inference", _changed(counters, path, value), user=DAEMONSET_CONTROLLER), what


@pytest.mark.parametrize(("what", "path", "value"), [
    ("another host path", "volumes.1.hostPath.path", "/var/lib/kubelet"),
    ("the host's root", "volumes.1.hostPath.path", "/"),
    ("every taint", "tolerations.0", EVERYTHING),
    ("a host port", "containers.0.ports.0.hostPort", 8000),
    ("the host's network", "hostNetwork", True),
    ("the host's PIDs", "hostPID", True),
    ("the host's IPC", "hostIPC", True),
    ("a capability it does not use", "containers.0.securityContext.capabilities", {"add": ["SYS_ADMIN"]}),
])
def test_the_ray_workers_get_exactly_their_grant_even_from_the_operator(vap, worker, what, path, value):
    assert admits(vap, "inference", worker)
    assert not admits(vap, "inference", _changed(worker, path, value)), what


@pytest.mark.parametrize(("what", "path", "value"), [
    ("root", "securityContext.runAsUser", 0),
    ("privileged", "containers.0.securityContext.privileged", True),
    ("the GPU taint", "tolerations", [GPU]),
    ("the workers' host path", "volumes", [{"name": "c", "hostPath": {"path": "/var/lib/ray-llm-eks/hf-cache"}}]),
])
def test_the_head_gets_nothing_and_runs_as_the_images_user(vap, head, what, path, value):
    assert admits(vap, "inference", head)
    assert not admits(vap, "inference", _changed(head, path, value)), what


@pytest.mark.parametrize(("account", "user"), [
    ("ray-llm", TENANT),                 # kubectl run --overrides
    ("ray-llm", JOB_CONTROLLER),         # a Job in the namespace
    ("ray-llm", REPLICASET_CONTROLLER),  # a Deployment
    ("ray-llm", DAEMONSET_CONTROLLER),   # a DaemonSet
    ("ray-llm", "system:serviceaccount:inference:ray-llm-head"),  # KubeRay 1.5.1's autoscaler account
    ("ray-llm-efa-counters", JOB_CONTROLLER),
    ("ray-llm-efa-counters", OPERATOR),
])
def test_the_right_account_is_not_enough_the_right_controller_must_create_the_pod(worker, vap, account, user):
    assert not admits(vap, "inference", _changed(worker, "serviceAccountName", account), user=user)


@pytest.mark.parametrize("namespace", ["inference", "tenant"])
@pytest.mark.parametrize(("what", "spec"), [
    ("privileged", {"containers": [{"name": "c", "image": "i", "securityContext": {"privileged": True}}]}),
    ("privileged init", {"initContainers": [{"name": "i", "image": "i", "securityContext": {"privileged": True}}]}),
    ("a capability", {"containers": [{"name": "c", "image": "i",
                                      "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}),
    ("a host path", {"volumes": HOST_ROOT}),
    ("the GPU taint", {"tolerations": [GPU]}),
    ("every taint", {"tolerations": [EVERYTHING]}),
    ("host network", {"hostNetwork": True}),
    ("host PIDs", {"hostPID": True}),
    ("host IPC", {"hostIPC": True}),
    ("a host port", {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
    ("nodeName", {"nodeName": "ip-10-0-1-1.ec2.internal"}),
])
@pytest.mark.parametrize("user", [TENANT, DAEMONSET_CONTROLLER, OPERATOR])
def test_a_tenant_gets_none_of_the_host_anywhere(vap, namespace, what, spec, user):
    """Whatever the tenant creates (a pod; a Job or a DaemonSet, whose controller creates the pod;
    a RayCluster the operator turns into pods; a namespace of any name and labels), under an
    account of its own. (A Job's pod is the DaemonSet's case with another controller.)"""
    assert not admits(vap, namespace, plain("tenant", **spec), user=user), what


def test_a_namespace_labelled_as_a_serving_namespace_is_governed(vap):
    """The bindings select by ``kubernetes.io/metadata.name`` alone: a label exempts nothing."""
    for binding in vap[1]:
        (requirement,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert requirement["key"] == "kubernetes.io/metadata.name"
    assert not admits(vap, "forged", plain("ray-llm", hostNetwork=True), user=OPERATOR)


@pytest.mark.parametrize(("namespace", "account", "user"), [
    ("kube-system", "aws-node", DAEMONSET_CONTROLLER),
    ("kube-system", "kube-proxy", DAEMONSET_CONTROLLER),
    ("kube-system", "default", DAEMONSET_CONTROLLER),  # the EFA device plugin
    ("kube-system", "nvidia-device-plugin-service-account", DAEMONSET_CONTROLLER),
    ("kube-system", "eks-pod-identity-agent", DAEMONSET_CONTROLLER),
])
def test_node_agents_are_exempt_by_account_and_controller(vap, namespace, account, user):
    agent = plain(account, hostNetwork=True, tolerations=[EVERYTHING], volumes=HOST_ROOT,
                  containers=[{"name": "c", "image": "i", "securityContext": {"privileged": True},
                               "ports": [{"containerPort": 61678, "hostPort": 61678}]}])
    assert admits(vap, namespace, agent, user=user)
    assert not admits(vap, namespace, agent, user=TENANT)                   # by hand
    assert not admits(vap, namespace, agent, user=JOB_CONTROLLER)           # a Job
    assert not admits(vap, namespace, _changed(agent, "serviceAccountName", "tenant"), user=user)  # another account
    assert not admits(vap, "tenant", agent, user=user)                      # another namespace
    patched = _changed(agent, "containers.0.image", "evil")
    assert not admits(vap, namespace, patched, operation="UPDATE", old=agent, user=TENANT)  # an image swap


@pytest.mark.parametrize("user", [TENANT, "system:serviceaccount:inference:ray-llm-head", REPLICASET_CONTROLLER])
def test_nobody_but_the_operator_swaps_a_workers_image_or_adds_to_it(vap, worker, head, user):
    """KubeRay 1.5.1's head account may patch pods (for the autoscaler): not their spec."""
    for running in (worker, head):
        for changed in (_changed(running, "containers.0.image", "evil:latest"),
                        _changed(running, "initContainers", [{"name": "i", "image": "evil"}])
                        if running is worker else _changed(running, "containers.0.image", "evil:1"),
                        _changed(running, "tolerations", [*running["spec"]["tolerations"], {"key": "x", "operator": "Exists"}])):
            assert not admits(vap, "inference", changed, operation="UPDATE", old=running, user=user)
    # The operator itself: a toleration of another taint, but no image but the rendered one.
    tolerant = _changed(worker, "tolerations", [*worker["spec"]["tolerations"], {"key": "x", "operator": "Exists"}])
    assert admits(vap, "inference", tolerant, operation="UPDATE", old=worker)
    assert not admits(vap, "inference", _changed(worker, "containers.0.image", "new"), operation="UPDATE", old=worker)


@pytest.mark.parametrize("debugger", [
    {"name": "debug", "image": "busybox"},
    {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}},
    {"name": "debug", "image": "busybox", "volumeMounts": [{"name": "hf-cache", "mountPath": "/c"}]},
])
def test_no_ephemeral_container_on_a_granted_pod(vap, worker, head, counters, debugger):
    """``kubectl debug`` (pods/ephemeralcontainers) on a worker, the head or a counter reader:
    refused whatever the container, to everyone (their controllers never add one)."""
    for running, controller in ((worker, OPERATOR), (head, OPERATOR), (counters, DAEMONSET_CONTROLLER)):
        debugged = _changed(running, "ephemeralContainers", [debugger])
        for user in (TENANT, "system:serviceaccount:inference:ray-llm-head"):
            assert not admits(vap, "inference", debugged, operation="UPDATE", old=running, user=user)


@pytest.mark.parametrize("namespace", ["inference", "tenant"])
def test_an_unprivileged_ephemeral_container_on_an_ordinary_pod_is_fine_a_privileged_one_is_not(vap, namespace):
    app = plain("app")
    assert admits(vap, namespace, _changed(app, "ephemeralContainers", [{"name": "d", "image": "b"}]),
                  operation="UPDATE", old=app, user=TENANT)
    assert not admits(vap, namespace, _changed(app, "ephemeralContainers", [
        {"name": "d", "image": "b", "securityContext": {"privileged": True}}]), operation="UPDATE", old=app, user=TENANT)


def test_metadata_updates_are_never_refused(vap, worker, counters):
    """Labels, annotations, owner references and finalizers (controllers, the garbage collector,
    a person) change no spec; a node agent that predates the policy is not frozen either."""
    agent = plain("node-exporter", hostNetwork=True, tolerations=[EVERYTHING], volumes=HOST_ROOT)
    for running, namespace in ((worker, "inference"), (counters, "inference"), (agent, "monitoring")):
        relabelled = copy.deepcopy(running)
        relabelled["metadata"]["labels"] = {**relabelled["metadata"].get("labels", {}), "version": "2"}
        relabelled["metadata"]["ownerReferences"] = []
        assert admits(vap, namespace, relabelled, operation="UPDATE", old=running,
                      user="system:serviceaccount:kube-system:generic-garbage-collector")
    assert not admits(vap, "monitoring", agent, user=DAEMONSET_CONTROLLER)  # but not created again
    ordinary = plain("app")
    assert not admits(vap, "default", _changed(ordinary, "tolerations", [GPU]), operation="UPDATE", old=ordinary,
                      user=TENANT)
    assert admits(vap, "default", _changed(ordinary, "containers.0.image", "v2"), operation="UPDATE", old=ordinary,
                  user=TENANT)


@pytest.mark.parametrize("candidate", [
    plain(),
    plain("default", tolerations=[{"key": "other", "operator": "Exists"}]),
    plain("coredns", tolerations=[{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                  {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                                  *DEFAULT_TOLERATION_SECONDS]),
])
@pytest.mark.parametrize("namespace", ["default", "kube-system", "inference"])
def test_ordinary_pods_are_untouched(vap, candidate, namespace):
    assert admits(vap, namespace, candidate, user=REPLICASET_CONTROLLER)


# --- the policy's shape, configuration and two deployments --------------------------------------

def test_the_policy_denies_and_applies_to_pods_and_their_ephemeral_containers(vap):
    policy_, bindings = vap
    assert [b["metadata"]["name"] for b in bindings] == [f"{policy_['metadata']['name']}-own",
                                                          f"{policy_['metadata']['name']}-elsewhere"]
    for binding in bindings:
        assert binding["spec"]["policyName"] == policy_["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy_["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy_["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], sorted(rule["operations"])) == (["pods", "pods/ephemeralcontainers"],
                                                              ["CREATE", "UPDATE"])
    assert "system:kube-controller-manager" not in str(policy_)


def test_all_pass_kubernetes_validate_strict(scenario):
    import kubernetes_validate

    objects = scenario("hardened").objects[ADMISSION_POLICY_CHART_ID]
    assert sorted(o["kind"] for o in objects) == ["ValidatingAdmissionPolicy"] * 3 + \
        ["ValidatingAdmissionPolicyBinding"] * 4
    for obj in objects:
        kubernetes_validate.validate(copy.deepcopy(obj), KUBERNETES_VERSION, strict=True)


def test_the_hardened_scenario_names_its_own_namespace_and_accounts(scenario):
    hardened = scenario("hardened")
    qwen = policy(hardened)
    worker = kuberay_pod(hardened.worker_group("decode")["template"], "worker")
    assert worker["spec"]["containers"][0]["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}
    assert admits(qwen, "llm", worker)
    assert not admits(qwen, "inference", worker)
    assert not admits(qwen, "llm", _changed(worker, "containers.0.securityContext.privileged", True))


def test_two_deployments_name_each_other_and_agree_elsewhere(scenario):
    hardened = scenario("hardened")
    theirs = kuberay_pod(hardened.worker_group("decode")["template"], "worker")
    alone = policy(scenario("disaggregated"))
    assert not admits(alone, "llm", theirs)  # unnamed, the other's namespace is "elsewhere"
    neighbour = policy(render(Deployment(serving=ServiceSettings(other_serving_namespaces=("llm",)))))
    assert admits(neighbour, "llm", theirs) and admits(policy(hardened), "llm", theirs)
    assert not admits(neighbour, "default", theirs)


def test_observability_exempts_the_cloudwatch_add_ons_accounts_not_its_namespace(vap):
    from ray_llm_eks.base.observability import AGENT_EXEMPTIONS

    assert "amazon-cloudwatch/cloudwatch-agent" in AGENT_EXEMPTIONS
    assert set(AGENT_EXEMPTIONS) <= set(Deployment().specs().serving.service.admission_exempt_agents)
    agent = plain("cloudwatch-agent", hostNetwork=True, tolerations=[EVERYTHING], volumes=HOST_ROOT)
    assert admits(vap, "amazon-cloudwatch", agent, user=DAEMONSET_CONTROLLER)
    assert not admits(vap, "amazon-cloudwatch", _changed(agent, "serviceAccountName", "tenant"),
                      user=DAEMONSET_CONTROLLER)
    assert not admits(vap, "amazon-cloudwatch", agent, user=TENANT)


def test_agents_are_configurable_by_account():
    vap = policy(render(Deployment(serving=ServiceSettings(
        admission_exempt_agents=("kube-system/aws-node", "monitoring/node-exporter")))))
    exporter = plain("node-exporter", hostNetwork=True, hostPID=True, tolerations=[EVERYTHING], volumes=HOST_ROOT)
    assert admits(vap, "monitoring", exporter, user=DAEMONSET_CONTROLLER)
    assert not admits(vap, "monitoring", _changed(exporter, "serviceAccountName", "other"), user=DAEMONSET_CONTROLLER)
    assert not admits(vap, "kube-system", _changed(exporter, "serviceAccountName", "kube-proxy"),
                      user=DAEMONSET_CONTROLLER)  # no longer listed


# A spec object built alone names its type first (base.errors.SpecErrors.owner).
@pytest.mark.parametrize(("settings", "message"), [
    ({"admission_exempt_namespaces": ("kube-system",)},
     r"^ServiceSettings: admission_exempt_namespaces: replaced by serving\.admission_exempt_agents"),
    ({"admission_exempt_agents": ("inference/ray-llm",)}, r"^ServiceSettings: admission_exempt_agents: an account in the serving namespace"),
    ({"admission_exempt_agents": ("aws-node",)}, r"^ServiceSettings: admission_exempt_agents: not 'namespace/service-account'"),
    ({"other_serving_namespaces": ("inference",)}, r"^ServiceSettings: other_serving_namespaces: this deployment's own"),
    ({"other_serving_namespaces": ("Llm!",)}, r"^ServiceSettings: other_serving_namespaces: not a namespace name"),
])
def test_the_settings_refuse_what_would_open_the_serving_namespace(settings, message):
    with pytest.raises(SpecErrors, match=message):
        ServiceSettings(**settings)


# --- RayClusters in the serving namespace -------------------------------------------------------

def _ray_cluster(rendered, owner: str = "ray-llm", *, owner_kind: str = "RayService") -> dict:
    return ray_cluster(rendered.cluster, owner, owner_kind=owner_kind)


@pytest.fixture(scope="module")
def autoscaled():
    return render(Deployment(decode=leg("decode", min_size=1, desired_size=1, max_size=3)))


def test_only_the_operator_creates_a_ray_cluster_in_the_serving_namespace(scenario):
    rendered = scenario("disaggregated")
    clusters = policy_of(rendered.objects[ADMISSION_POLICY_CHART_ID], resource="rayclusters")
    (binding,) = clusters[1]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["inference"]}]}
    cluster = _ray_cluster(rendered)
    assert denials(clusters, "inference", cluster, user=OPERATOR) == []
    for user in (TENANT, "system:serviceaccount:inference:ray-llm"):
        assert not admits(clusters, "inference", cluster, user=user)
    assert admits(clusters, "tenant", cluster, user=TENANT)  # elsewhere the operator ignores it (watchNamespace)


def test_the_autoscaler_may_resize_a_worker_group_and_change_nothing_else(autoscaled):
    clusters = policy_of(autoscaled.objects[ADMISSION_POLICY_CHART_ID], resource="rayclusters")
    running = _ray_cluster(autoscaled)
    autoscaler = "system:serviceaccount:inference:ray-llm-head"
    resized = copy.deepcopy(running)
    (decode,) = [g for g in resized["spec"]["workerGroupSpecs"] if g["groupName"] == "decode"]
    decode["replicas"] = 2
    decode["scaleStrategy"] = {"workersToDelete": ["ray-llm-abcde-decode-xyz"]}
    assert denials(clusters, "inference", resized, operation="UPDATE", old=running, user=autoscaler) == []
    relabelled = copy.deepcopy(running)
    relabelled["metadata"]["labels"] = {"x": "y"}
    assert admits(clusters, "inference", relabelled, operation="UPDATE", old=running, user=TENANT)
    swapped = copy.deepcopy(resized)
    swapped["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = "evil"
    started = copy.deepcopy(running)
    started["spec"]["workerGroupSpecs"][0]["rayStartParams"]["num-cpus"] = "64"
    head = copy.deepcopy(running)
    head["spec"]["headGroupSpec"]["rayStartParams"]["block"] = "true"
    for changed in (swapped, started, head):
        for user in (autoscaler, TENANT):
            assert not admits(clusters, "inference", changed, operation="UPDATE", old=running, user=user)
        assert admits(clusters, "inference", changed, operation="UPDATE", old=running, user=OPERATOR)
    assert not admits(clusters, "inference", resized, operation="UPDATE", old=running, user=TENANT)


# --- outside the serving namespace: nothing stricter than Pod Security baseline -----------------

BASELINE_CAPABILITIES = ["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"]
"""kubernetes/pod-security-admission ``policy/check_capabilities_baseline.go:62-76`` at v0.35.6."""

COREDNS_TEMPLATE = {
    "metadata": {"labels": {"eks.amazonaws.com/component": "coredns", "k8s-app": "kube-dns"}},
    "spec": {
        "containers": [{
            "name": "coredns", "image": "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/coredns:v1.14.3-eksbuild.11",
            "args": ["-conf", "/etc/coredns/Corefile"],
            "ports": [{"containerPort": 53, "name": "dns", "protocol": "UDP"},
                      {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                      {"containerPort": 9153, "name": "metrics", "protocol": "TCP"}],
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                "readOnlyRootFilesystem": True},
            "volumeMounts": [{"mountPath": "/etc/coredns", "name": "config-volume", "readOnly": True}]}],
        "dnsPolicy": "Default", "priorityClassName": "system-cluster-critical", "securityContext": {},
        "serviceAccount": "coredns", "serviceAccountName": "coredns",
        "tolerations": [{"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane"},
                        {"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "volumes": [{"name": "config-volume", "configMap": {"name": "coredns", "defaultMode": 420,
                                                              "items": [{"key": "Corefile", "path": "Corefile"}]}}],
    },
}
"""EKS's CoreDNS pod template as eksctl ships it for Kubernetes 1.35 (eksctl-io/eksctl
``pkg/addons/default/assets/coredns-1.35.json`` at v0.230.0, the Deployment ``coredns``; probes and
resources left out, the image's account and region filled in)."""


def test_eks_coredns_as_eksctl_ships_it_is_admitted(vap):
    """It adds NET_BIND_SERVICE (port 53 without root), which baseline allows; it is in no
    exempt list, and needs none."""
    coredns = controller_pod(COREDNS_TEMPLATE)
    assert "kube-system/coredns" not in Deployment().specs().serving.service.admission_exempt_agents
    assert denials(vap, "kube-system", coredns, user=REPLICASET_CONTROLLER) == []
    assert admits(vap, "kube-system", coredns, user=TENANT)  # as baseline: whoever creates it


def _adding(*capabilities: str, where: str = "containers") -> dict:
    return plain("app", **{where: [{"name": "c", "image": "i",
                                     "securityContext": {"capabilities": {"add": list(capabilities)}}}]})


@pytest.mark.parametrize("capability", BASELINE_CAPABILITIES)
@pytest.mark.parametrize("namespace", ["kube-system", "default", "tenant"])
def test_outside_the_serving_namespace_anyone_adds_what_baseline_allows(vap, capability, namespace):
    for where in ("containers", "initContainers"):
        assert admits(vap, namespace, _adding(capability, where=where), user=TENANT), where
    app = plain("app")
    debug = _changed(app, "ephemeralContainers", [{"name": "d", "image": "b",
                                                   "securityContext": {"capabilities": {"add": [capability]}}}])
    assert admits(vap, namespace, debug, operation="UPDATE", old=app, user=TENANT)
    # The serving namespace (Pod Security privileged) keeps capabilities for the deployment's grants.
    assert not admits(vap, "inference", _adding(capability), user=TENANT)


@pytest.mark.parametrize("capabilities", [["SYS_ADMIN"], ["NET_ADMIN"], ["NET_RAW"], ["SYS_PTRACE"], ["ALL"],
                                          ["NET_BIND_SERVICE", "SYS_ADMIN"]])
@pytest.mark.parametrize("namespace", ["kube-system", "tenant"])
def test_outside_the_serving_namespace_beyond_baseline_is_refused(vap, capabilities, namespace):
    for where in ("containers", "initContainers"):
        assert not admits(vap, namespace, _adding(*capabilities, where=where), user=REPLICASET_CONTROLLER), where
    app = plain("app")
    for context in ({"capabilities": {"add": capabilities}}, {"privileged": True}):
        debug = _changed(app, "ephemeralContainers", [{"name": "d", "image": "b", "securityContext": context}])
        assert not admits(vap, namespace, debug, operation="UPDATE", old=app, user=TENANT), context


def test_a_kubelet_may_create_the_mirror_pod_of_its_own_static_pod_only(vap):
    """A static pod's mirror carries its node's name; the NodeRestriction plugin lets a kubelet
    create mirror pods for its own node only. Anyone else's nodeName skips the GPU taint."""
    static = pod({"nodeName": "ip-10-0-1-1.ec2.internal", "containers": [{"name": "c", "image": "i"}]})
    for namespace in ("kube-system", "tenant"):
        assert admits(vap, namespace, static, user="system:node:ip-10-0-1-1.ec2.internal")
        assert not admits(vap, namespace, static, user="system:node:ip-10-0-9-9.ec2.internal")
        assert not admits(vap, namespace, static, user=TENANT)


# --- the deployment's own pods: its controllers, its accounts, its image --------------------------

IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"


@pytest.fixture(scope="module")
def own_pods() -> dict[str, tuple[dict, str]]:
    """The gate's, continuous verification's and the counter readers' pods, as their
    controllers create them from the rendered templates: ``{component: (pod, requester)}``."""
    found = {}
    for what, candidate, namespace, user in created_pods(_verification_objects(Deployment())):
        assert namespace == "inference"
        found[candidate["metadata"]["labels"]["ray-llm-eks/component"]] = (candidate, user)
    assert set(found) == {"gate", "continuous-verification", "efa-counters"}
    return found


def test_the_rendered_image_is_the_one_every_own_pod_runs(own_pods, worker, head):
    for candidate in (worker, head, *(p for p, _ in own_pods.values())):
        spec = candidate["spec"]
        assert {c["image"] for c in spec["containers"] + spec.get("initContainers", [])} == {IMAGE}


@pytest.mark.parametrize("component", ["gate", "continuous-verification", "efa-counters"])
def test_an_own_pod_comes_only_from_its_controller_with_its_image(vap, own_pods, component):
    running, controller = own_pods[component]
    assert denials(vap, "inference", running, user=controller) == []
    for user in (TENANT, OPERATOR, REPLICASET_CONTROLLER, JOB_CONTROLLER, DAEMONSET_CONTROLLER):
        if user != controller:
            assert not admits(vap, "inference", running, user=user), user  # kubectl run, or another controller
    assert not admits(vap, "inference", _changed(running, "containers.0.image", "python:3.12"), user=controller)
    assert not admits(vap, "inference", _changed(running, "initContainers", [{"name": "i", "image": "busybox"}]),
                      user=controller)
    # A Job of the tenant's on that account, or with those labels on its own account.
    account = running["spec"]["serviceAccountName"]
    assert not admits(vap, "inference", plain(account), user=controller)
    assert not admits(vap, "inference", pod({**plain("tenant")["spec"], "containers": [{"name": "c", "image": IMAGE}]},
                                            running["metadata"]["labels"]), user=controller)
    # kubectl debug: an ephemeral container could read the pod's token and Pod Identity files.
    debugged = _changed(running, "ephemeralContainers", [{"name": "d", "image": IMAGE}])
    assert not admits(vap, "inference", debugged, operation="UPDATE", old=running, user=TENANT)


@pytest.mark.parametrize("labels", [
    {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/ray-role": "decode"},       # the Ray mesh: GCS, 8265, 10001
    {"ray-llm-eks/ray-role": ""},                                                 # Exists: any value
    {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/serves-http": "true"},       # the OpenAI Service's endpoints
    {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/component": "gate"},         # the workers' 8000 and 8080
    {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/component": "teardown-guard"},  # HTTPS out
    {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/component": "gcs-redis-secret"},
    {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/component": "bench"},
])
def test_a_tenant_pod_neither_carries_nor_takes_a_trusted_label(vap, labels):
    mine = plain("tenant")
    assert not admits(vap, "inference", pod(mine["spec"], labels), user=TENANT)
    assert not admits(vap, "inference", pod(mine["spec"], labels), user=JOB_CONTROLLER)
    relabelled = copy.deepcopy(mine)
    relabelled["metadata"]["labels"] = labels
    assert not admits(vap, "inference", relabelled, operation="UPDATE", old=mine, user=TENANT)
    assert admits(vap, "tenant", pod(mine["spec"], labels), user=TENANT)  # only the serving namespace trusts them


def test_the_instance_label_alone_is_no_claim(vap):
    assert admits(vap, "inference", pod(plain("tenant")["spec"], {"ray-llm-eks/instance": "ray-llm"}), user=TENANT)


def test_the_ray_pods_run_only_the_rendered_image_even_from_the_operator(vap, worker, head):
    """A RayJob or another RayCluster would have the operator make them (refused below); the
    operator's own pods carry the rendered image in every container."""
    for running in (worker, head):
        assert not admits(vap, "inference", _changed(running, "containers.0.image", "rayproject/ray:2.58.0"))
    assert not admits(vap, "inference", _changed(worker, "initContainers.1.image", "busybox"))


def test_the_benchmark_job_is_admitted_and_its_label_claimed_by_no_one_else(vap):
    from ray_llm_eks.cdk8s_charts.bench import BenchJobChart

    chart = BenchJobChart(cdk8s.App(), "bench", spec=Deployment().specs().serving, settings={"workload": "chat"})
    (job,) = [o for o in cdk8s.Testing.synth(chart) if o["kind"] == "Job"]
    bench = controller_pod(job["spec"]["template"])
    assert "serviceAccountName" not in bench["spec"]  # the namespace's default account
    assert denials(vap, "inference", bench, user=JOB_CONTROLLER) == []
    assert not admits(vap, "inference", bench, user=TENANT)
    assert not admits(vap, "inference", _changed(bench, "containers.0.image", "python:3.12"), user=JOB_CONTROLLER)
    assert not admits(vap, "inference", _changed(bench, "serviceAccountName", "ray-llm-gate"), user=JOB_CONTROLLER)


# --- RayJobs and RayClusters that are not this deployment's ---------------------------------------

def test_no_ray_job_in_the_serving_namespace(scenario):
    rendered = scenario("disaggregated")
    clusters = policy_of(rendered.objects[ADMISSION_POLICY_CHART_ID], resource="rayjobs")
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"},
           "spec": {"entrypoint": "python -c 1", "submissionMode": "HTTPMode",
                    "clusterSelector": {"ray.io/cluster": "ray-llm-bcdfg"}}}
    for user in (TENANT, OPERATOR):
        assert not admits(clusters, "inference", job, user=user)
    assert admits(clusters, "tenant", job, user=TENANT)


@pytest.mark.parametrize(("owner", "kind"), [("j", "RayJob"), ("evil", "RayService"), ("ray-llm", "RayJob")])
def test_the_operator_makes_a_ray_cluster_here_only_for_this_ray_service(scenario, owner, kind):
    rendered = scenario("disaggregated")
    clusters = policy_of(rendered.objects[ADMISSION_POLICY_CHART_ID], resource="rayclusters")
    assert admits(clusters, "inference", _ray_cluster(rendered), user=OPERATOR)
    assert not admits(clusters, "inference", _ray_cluster(rendered, owner, owner_kind=kind), user=OPERATOR)
    unowned = _ray_cluster(rendered)
    del unowned["metadata"]["ownerReferences"]
    assert not admits(clusters, "inference", unowned, user=OPERATOR)


# --- exec, attach and port-forward ----------------------------------------------------------------

def _connect_policy(rendered):
    return policy_of(rendered.objects[ADMISSION_POLICY_CHART_ID], resource="pods/exec")


PODS = ("ray-llm-bcdfg-decode-worker-x2k4z", "ray-llm-bcdfg-head-x2k4z", "ray-llm-gate-cdc90a7c-x2k4z",
        "ray-llm-efa-counters-x2k4z", "ray-llm-bench-0123abcd-x2k4z")
EKS_ADMIN = "arn:aws:sts::111122223333:assumed-role/Admin/alice"


@pytest.mark.parametrize("sub_resource", ["exec", "attach", "portforward"])
def test_only_the_exec_admins_connect_to_pods_of_the_serving_namespace(scenario, sub_resource):
    policy_ = _connect_policy(scenario("disaggregated"))
    (rule,) = policy_[0]["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["operations"], rule["resources"]) == (["CONNECT"], ["pods/exec", "pods/attach", "pods/portforward"])
    (binding,) = policy_[1]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["inference"]
    for name in PODS:
        bench_exec = sub_resource == "exec" and "-bench-" in name  # docs/benchmark.md: kubectl cp the results
        for user, groups in ((TENANT, ("system:authenticated",)), (EKS_ADMIN, ("system:authenticated",)),
                             ("system:serviceaccount:inference:ray-llm-head", ())):
            assert connect(policy_, "inference", name, sub_resource, user=user, groups=groups) == bench_exec, name
        assert connect(policy_, "inference", name, sub_resource, user="kubernetes-admin",
                       groups=("system:masters", "system:authenticated"))
        assert connect(policy_, "tenant", name, sub_resource, user=TENANT)  # not this deployment's namespace


def test_exec_admins_are_configurable_by_user_prefix_and_group():
    admins = ("user:arn:aws:sts::111122223333:assumed-role/Admin/*", "user:bob", "group:ray-llm-operators")
    policy_ = _connect_policy(render(Deployment(serving=ServiceSettings(exec_admins=admins))))
    worker_ = PODS[0]
    assert connect(policy_, "inference", worker_, "exec", user=EKS_ADMIN)
    assert connect(policy_, "inference", worker_, "exec", user="bob")
    assert connect(policy_, "inference", worker_, "attach", user="carol", groups=("ray-llm-operators",))
    assert not connect(policy_, "inference", worker_, "exec", user="bobby")
    assert not connect(policy_, "inference", worker_, "exec", user="arn:aws:sts::111122223333:assumed-role/AdminX/eve")
    assert not connect(policy_, "inference", worker_, "exec", user="kubernetes-admin", groups=("system:masters",))
    nobody = _connect_policy(render(Deployment(serving=ServiceSettings(exec_admins=()))))
    assert not connect(nobody, "inference", worker_, "exec", user="kubernetes-admin", groups=("system:masters",))
    assert connect(nobody, "inference", PODS[-1], "exec", user=TENANT)


@pytest.mark.parametrize("admin", ["system:masters", "group:ops*", "user:*", "user:", "user:a'b", "user:a b",
                                   "role:admin", 7])
def test_exec_admins_refuse_what_is_not_a_user_or_group(admin):
    with pytest.raises(SpecErrors, match=r"^ServiceSettings: exec_admins: not 'user:<name>' or 'group:<name>'"):
        ServiceSettings(exec_admins=(admin,))
