"""The ValidatingAdmissionPolicy, its CEL evaluated on pods (cel-python: no API server here).

Kubernetes evaluates ``variables`` by name and each validation with ``object``, ``request`` and
``variables`` bound; that is what :func:`admits` does, with the expressions as rendered.
"""

from __future__ import annotations

import copy

import celpy
import pytest

from ray_llm_eks.cdk8s_charts import ADMISSION_POLICY_CHART_ID
from ray_llm_eks.spec.placement import GPU_TAINT_KEY

KUBERNETES_VERSION = "1.35.0"


def policy(rendered) -> tuple[dict, dict]:
    objects = {o["kind"]: o for o in rendered.objects[ADMISSION_POLICY_CHART_ID]}
    return objects["ValidatingAdmissionPolicy"], objects["ValidatingAdmissionPolicyBinding"]


def _eval(expression: str, activation: dict):
    environment = celpy.Environment()
    return environment.program(environment.compile(expression)).evaluate(activation)


def admits(vap: dict, namespace: str, pod: dict) -> bool:
    """Whether the policy lets ``pod`` be created in ``namespace`` (namespace exemption included)."""
    excluded = vap["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"][0]["values"]
    if namespace in excluded:
        return True
    activation = {"object": celpy.json_to_cel(pod), "request": celpy.json_to_cel({"namespace": namespace})}
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
    return policy(scenario("disaggregated"))[0]


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
    from ray_llm_eks.config import DeploymentConfig

    specs = DeploymentConfig().specs()
    app = cdk8s.App()
    charts = build_serving_charts(app, specs.serving)
    chart = build_verification_chart(app, specs.serving, specs.verification,
                                     GatePlan.of(specs.serving, specs.verification, charts), charts, None)
    daemonset = next(o for o in cdk8s.Testing.synth(chart) if o["kind"] == "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "ray-llm-efa-counters"
    assert admits(vap, "inference", {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": spec})


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


def test_the_policy_denies_and_applies_to_pods(scenario):
    vap, binding = policy(scenario("disaggregated"))
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    assert vap["spec"]["failurePolicy"] == "Fail"
    (rule,) = vap["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], sorted(rule["operations"])) == (["pods"], ["CREATE", "UPDATE"])


def test_both_pass_kubernetes_validate_strict(scenario):
    import kubernetes_validate

    for obj in policy(scenario("hardened")):
        kubernetes_validate.validate(copy.deepcopy(obj), KUBERNETES_VERSION, strict=True)


def test_the_hardened_scenario_names_its_own_namespace_and_accounts(scenario):
    vap = policy(scenario("hardened"))[0]
    assert admits(vap, "llm", pod("qwen", privileged=True, toleration=GPU))
    assert not admits(vap, "inference", pod("ray-llm", privileged=True))
