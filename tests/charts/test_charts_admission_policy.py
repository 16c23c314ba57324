"""The ValidatingAdmissionPolicy, its CEL evaluated on pods (cel-python: no API server here).

Kubernetes evaluates ``variables`` by name and each validation with ``object``, ``request`` and
``variables`` bound; that is what :func:`admits` does, with the expressions as rendered.
"""

from __future__ import annotations

import copy

import celpy
import pytest
from helpers.charts import leg, render
from netpol import selects

from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.cdk8s_charts import ADMISSION_POLICY_CHART_ID
from ray_llm_eks.base.placement import GPU_TAINT_KEY
from ray_llm_eks.base.serving import SERVING_INSTANCE_NAMESPACE_LABEL

KUBERNETES_VERSION = "1.35.0"


def policy(rendered) -> tuple[dict, list[dict]]:
    objects = rendered.objects[ADMISSION_POLICY_CHART_ID]
    (vap,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    return vap, [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]


def _eval(expression: str, activation: dict):
    environment = celpy.Environment()
    return environment.program(environment.compile(expression)).evaluate(activation)


def _namespace_labels(namespace: str, labels: dict[str, str] | None) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": namespace, **(labels or {})}


OPERATOR = "system:serviceaccount:kuberay:kuberay-operator"
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"


def admits(policy_and_bindings, namespace: str, pod: dict, *, namespace_labels: dict[str, str] | None = None,
           operation: str = "CREATE", old: dict | None = None, user: str = OPERATOR) -> bool:
    """Whether the policy, through any of its bindings, lets ``pod`` be written in ``namespace``.

    A binding applies when its namespace selector matches the namespace's labels (the netpol
    module's selector semantics, which are Kubernetes'); an unbound request is admitted."""
    vap, bindings = policy_and_bindings
    labels = _namespace_labels(namespace, namespace_labels)
    if not any(selects(b["spec"]["matchResources"]["namespaceSelector"], labels) for b in bindings):
        return True
    activation = {"object": celpy.json_to_cel(pod), "oldObject": celpy.json_to_cel(old),
                  "request": celpy.json_to_cel({"namespace": namespace, "operation": operation,
                                                "userInfo": {"username": user}})}
    variables = {}
    for variable in vap["spec"]["variables"]:
        variables[variable["name"]] = _eval(variable["expression"], {**activation, "variables": celpy.json_to_cel(variables)})
    activation["variables"] = celpy.json_to_cel({k: bool(v) for k, v in variables.items()})
    return all(bool(_eval(v["expression"], activation)) for v in vap["spec"]["validations"])


def pod(account: str | None = None, *, privileged: bool = False, toleration: dict | None = None,
        init_privileged: bool = False) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "i", **({"securityContext": {"privileged": True}} if privileged else {})}]}
    if account:
        spec["serviceAccountName"] = account
    if toleration:
        spec["tolerations"] = [toleration]
    if init_privileged:
        spec["initContainers"] = [{"name": "init", "image": "i", "securityContext": {"privileged": True}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


GPU = {"key": GPU_TAINT_KEY, "operator": "Equal", "value": "decode", "effect": "NoSchedule"}
EVERYTHING = {"operator": "Exists"}


@pytest.fixture(scope="module")
def vap(scenario):
    return policy(scenario("disaggregated"))


def test_the_rendered_ray_workers_are_admitted(scenario, vap):
    rendered = scenario("disaggregated")
    for role in ("prefill", "decode"):
        template = rendered.worker_group(role)["template"]
        assert admits(vap, "inference", {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": template["spec"]})
    head = rendered.head_group["template"]
    assert admits(vap, "inference", {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": head["spec"]})


def test_the_efa_counter_readers_are_admitted(vap):
    import cdk8s

    from ray_llm_eks.cdk8s_charts import build_serving_charts
    from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart

    specs = Deployment().specs()
    app = cdk8s.App()
    charts = build_serving_charts(app, specs.serving)
    chart = build_verification_chart(app, specs.serving, specs.verification,
                                     GatePlan.of(specs.serving, specs.verification, charts), charts, None)
    daemonset = next(o for o in cdk8s.Testing.synth(chart) if o["kind"] == "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "ray-llm-efa-counters"
    pod_ = {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": spec}
    assert admits(vap, "inference", pod_, user=DAEMONSET_CONTROLLER)
    assert admits(vap, "inference", pod_, user="system:kube-controller-manager")  # without per-controller accounts


@pytest.mark.parametrize(("namespace", "candidate"), [
    ("default", pod(privileged=True)),
    ("default", pod(toleration=GPU)),
    ("default", pod(toleration=EVERYTHING)),  # tolerates every taint
    ("default", pod("ray-llm", privileged=True)),  # the right name in the wrong namespace
    ("inference", pod("default", privileged=True)),  # the right namespace, another account
    ("inference", pod(toleration=GPU)),
    ("inference", pod("notebook", init_privileged=True)),
])
def test_others_may_neither_run_privileged_nor_tolerate_the_gpu_taint(vap, namespace, candidate):
    assert not admits(vap, namespace, candidate)


@pytest.mark.parametrize(("namespace", "candidate"), [
    ("default", pod()),  # an ordinary pod anywhere
    ("inference", pod("default")),
    ("kube-system", pod("aws-node", privileged=True, toleration=EVERYTHING)),  # the CNI and device plugins
    ("default", pod(toleration={"key": "other", "operator": "Exists"})),
])
def test_ordinary_pods_and_kube_system_are_untouched(vap, namespace, candidate):
    assert admits(vap, namespace, candidate)


def test_the_policy_denies_and_applies_to_pods_and_their_ephemeral_containers(scenario):
    vap, bindings = policy(scenario("disaggregated"))
    assert [b["metadata"]["name"] for b in bindings] == [f"{vap['metadata']['name']}-own",
                                                          f"{vap['metadata']['name']}-elsewhere"]
    for binding in bindings:
        assert binding["spec"]["policyName"] == vap["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"]
    assert vap["spec"]["failurePolicy"] == "Fail"
    (rule,) = vap["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], sorted(rule["operations"])) == (["pods", "pods/ephemeralcontainers"],
                                                              ["CREATE", "UPDATE"])


def test_all_pass_kubernetes_validate_strict(scenario):
    import kubernetes_validate

    vap, bindings = policy(scenario("hardened"))
    for obj in (vap, *bindings):
        kubernetes_validate.validate(copy.deepcopy(obj), KUBERNETES_VERSION, strict=True)


def test_the_hardened_scenario_names_its_own_namespace_and_accounts(scenario):
    vap = policy(scenario("hardened"))
    assert admits(vap, "llm", pod("qwen", privileged=True, toleration=GPU))
    assert not admits(vap, "inference", pod("ray-llm", privileged=True))


def _with(candidate: dict, **spec) -> dict:
    changed = copy.deepcopy(candidate)
    changed["spec"].update(spec)
    return changed


HOST_PATH = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}


@pytest.mark.parametrize(("namespace", "account", "spec"), [
    # A hostNetwork pod on the untainted system node would pass the NetworkPolicies (the policy
    # agent admits the node's own traffic): nobody outside the exempt namespaces gets one.
    ("default", None, {"hostNetwork": True}),
    ("inference", "ray-llm", {"hostNetwork": True}),
    ("inference", "ray-llm-efa-counters", {"hostPID": True}),
    ("default", None, {"hostIPC": True}),
    ("default", None, HOST_PATH),
    ("inference", "default", HOST_PATH),
    # nodeName at creation skips the scheduler, and with it the GPU taint.
    ("default", None, {"nodeName": "ip-10-0-1-1.ec2.internal"}),
    ("inference", "ray-llm", {"nodeName": "ip-10-0-1-1.ec2.internal"}),
    ("default", None, {"containers": [{"name": "c", "image": "i",
                                        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}),
    ("inference", "ray-llm-efa-counters", {"containers": [{"name": "c", "image": "i",
                                                            "securityContext": {"privileged": True}}]}),
])
def test_host_access_and_scheduler_bypasses_are_denied_to_whoever_is_not_granted_them(vap, namespace, account, spec):
    assert not admits(vap, namespace, _with(pod(account), **spec))


def test_the_counter_readers_keep_their_hostpath_and_nobody_debugs_a_worker_into_root(scenario, vap):
    assert admits(vap, "inference", _with(pod("ray-llm-efa-counters", toleration=GPU), **HOST_PATH),
                  user=DAEMONSET_CONTROLLER)
    worker = {"apiVersion": "v1", "kind": "Pod", "metadata": {},
              "spec": copy.deepcopy(scenario("disaggregated").worker_group("decode")["template"]["spec"])}
    debugged = copy.deepcopy(worker)
    debugged["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox",
                                                "securityContext": {"privileged": True}}]
    assert not admits(vap, "inference", debugged, operation="UPDATE", old=worker)
    plain = copy.deepcopy(worker)
    plain["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    assert admits(vap, "inference", plain, operation="UPDATE", old=worker)


def test_a_pod_that_predates_the_policy_may_still_be_updated_but_gain_nothing(vap):
    """A node agent outside the exempt namespaces, running before the policy arrived: relabelling
    it is an UPDATE that must not be refused; adding a GPU toleration to a plain pod is."""
    agent = _with(pod("agent", toleration=EVERYTHING), hostNetwork=True, **HOST_PATH)
    relabelled = copy.deepcopy(agent)
    relabelled["metadata"]["labels"] = {"version": "2"}
    assert not admits(vap, "monitoring", agent)
    assert admits(vap, "monitoring", relabelled, operation="UPDATE", old=agent)
    plain = pod("app")
    assert not admits(vap, "default", _with(plain, tolerations=[GPU]), operation="UPDATE", old=plain)
    # The binding stays on the pod's new node name: only a CREATE with nodeName is refused.
    assert admits(vap, "default", _with(plain, nodeName="ip-10-0-1-1"), operation="UPDATE", old=plain)


def test_two_deployments_govern_their_own_namespaces_and_agree_elsewhere(scenario):
    first, second = policy(scenario("disaggregated")), policy(scenario("hardened"))
    label = {SERVING_INSTANCE_NAMESPACE_LABEL: "qwen"}
    # The second deployment's workers in its namespace: the first policy's bindings skip it.
    assert admits(first, "llm", pod("qwen", privileged=True, toleration=GPU), namespace_labels=label)
    assert admits(second, "llm", pod("qwen", privileged=True, toleration=GPU), namespace_labels=label)
    # Elsewhere both deny.
    for vap in (first, second):
        assert not admits(vap, "default", pod(privileged=True))


@pytest.mark.parametrize("namespace", ["kube-system", "agents"])
def test_exempt_namespaces_are_configurable_but_never_the_serving_one(namespace):
    from ray_llm_eks.base.errors import SpecErrors
    from ray_llm_eks.base.serving import ServiceSettings

    vap = policy(render(Deployment(serving=ServiceSettings(admission_exempt_namespaces=("kube-system", "agents")))))
    assert admits(vap, namespace, _with(pod("node-agent", toleration=EVERYTHING), hostNetwork=True))
    assert not admits(vap, "default", _with(pod("node-agent", toleration=EVERYTHING), hostNetwork=True))
    with pytest.raises(SpecErrors, match=r"^admission_exempt_namespaces: the serving namespace itself"):
        ServiceSettings(admission_exempt_namespaces=("inference",))


@pytest.mark.parametrize(("account", "user"), [
    ("ray-llm", "kubernetes-admin"),                                        # kubectl run --overrides
    ("ray-llm", "system:serviceaccount:kube-system:job-controller"),        # a Job in the namespace
    ("ray-llm", "system:serviceaccount:kube-system:replicaset-controller"),  # a Deployment
    ("ray-llm-efa-counters", "system:serviceaccount:kube-system:job-controller"),
    ("ray-llm-efa-counters", OPERATOR),
])
def test_the_right_account_is_not_enough_the_right_controller_must_create_the_pod(scenario, vap, account, user):
    """Whoever may create a Job or a Deployment in the serving namespace cannot borrow the Ray
    pods' privileges by naming their service account."""
    decode = scenario("disaggregated").worker_group("decode")["template"]["spec"]
    candidate = {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {**decode, "serviceAccountName": account}}
    assert not admits(vap, "inference", candidate, user=user)


def test_an_autoscaled_head_with_kuberays_autoscaler_sidecar_is_admitted():
    """KubeRay adds the Ray autoscaler container to the head pod (its image, our
    ``autoscalerOptions``: no privilege, the projected API credentials); the pod as KubeRay builds
    it is admitted, and the workers with their Cluster Autoscaler annotation too."""
    rendered = render(Deployment(decode=leg("decode", min_size=1, desired_size=1, max_size=3)))
    vap_autoscaled = policy(rendered)
    options = rendered.cluster["autoscalerOptions"]
    head = rendered.head_group["template"]
    spec = {**head["spec"], "containers": [*head["spec"]["containers"], {
        "name": "autoscaler", "image": head["spec"]["containers"][0]["image"],
        "securityContext": options["securityContext"], "volumeMounts": options["volumeMounts"],
        "resources": options["resources"]}]}
    assert admits(vap_autoscaled, "inference", {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": spec})
    for role in ("prefill", "decode"):
        template = rendered.worker_group(role)["template"]
        assert admits(vap_autoscaled, "inference", {"apiVersion": "v1", "kind": "Pod",
                                                    "metadata": template["metadata"], "spec": template["spec"]})
