"""The serving namespace's NetworkPolicies, evaluated (tests/cdk8s_charts/netpol.py), not string-matched.

The reference deployment (namespace ``inference``, service ``ray-llm``) and the hardened scenario
(namespace ``llm``, service ``qwen``, internal NLB, clients from namespace ``apps`` and from a
peered network, 10.50.0.0/16). Pods have VPC addresses (10.0.0.0/16) under the VPC CNI.
"""

from __future__ import annotations

import dataclasses

import pytest

from cdk8s_charts.netpol import Endpoint, allowed, policy_types
from ray_llm_eks.cdk8s_charts import NETWORK_POLICY_CHART_ID
from ray_llm_eks.base.infrastructure import KUBERAY_NAMESPACE, KUBERAY_OPERATOR_POD_LABELS
from ray_llm_eks.base import wire
from ray_llm_eks.base.wire import COMPONENT_LABEL, INSTANCE_LABEL, RAY_ROLE_LABEL, SERVES_HTTP_LABEL

KUBERNETES_VERSION = "1.35.0"
GCS, DASHBOARD, SERVE, METRICS, EFA_COUNTERS = 6379, 8265, 8000, 8080, 9475
RAY_ONLY_PORTS = (GCS, DASHBOARD, 10001, 52365)
"""GCS, the dashboard and Jobs API, the Ray Client server, the dashboard agent."""


def policies(rendered) -> list[dict]:
    return rendered.objects[NETWORK_POLICY_CHART_ID]


def pods(namespace: str, service: str) -> dict[str, Endpoint]:
    """This deployment's pods as KubeRay and the charts label them, and a few strangers."""
    own = {INSTANCE_LABEL: service}
    return {
        "head": Endpoint("10.0.1.10", namespace, {**own, RAY_ROLE_LABEL: "head", SERVES_HTTP_LABEL: "false"}),
        "prefill": Endpoint("10.0.1.11", namespace, {**own, RAY_ROLE_LABEL: "prefill", SERVES_HTTP_LABEL: "true"}),
        "decode": Endpoint("10.0.1.12", namespace, {**own, RAY_ROLE_LABEL: "decode", SERVES_HTTP_LABEL: "true"}),
        "gate": Endpoint("10.0.1.13", namespace, {**own, COMPONENT_LABEL: "gate"}),
        "efa-counters": Endpoint("10.0.1.14", namespace, {**own, COMPONENT_LABEL: "efa-counters"}),
        "continuous-verification": Endpoint("10.0.1.15", namespace, {**own, COMPONENT_LABEL: "continuous-verification"}),
        "bench": Endpoint("10.0.1.16", namespace, {**own, COMPONENT_LABEL: "bench"}),
        "teardown-guard": Endpoint("10.0.1.17", namespace, {**own, COMPONENT_LABEL: "teardown-guard"}),
        "gcs-redis-secret": Endpoint("10.0.1.18", namespace, {**own, COMPONENT_LABEL: "gcs-redis-secret"}),
        # A pod someone else runs in the namespace carrying this deployment's instance label.
        "stranger-with-instance-label": Endpoint("10.0.1.19", namespace, dict(own)),
        "operator": Endpoint("10.0.1.20", KUBERAY_NAMESPACE, dict(KUBERAY_OPERATOR_POD_LABELS)),
        "coredns": Endpoint("10.0.1.30", "kube-system", {"k8s-app": "kube-dns"}),
        # A pod someone else runs in the same namespace, and one in another namespace.
        "stranger-same-namespace": Endpoint("10.0.1.40", namespace, {"app": "notebook"}),
        "neighbour": Endpoint("10.0.1.41", "default", {"app": "web"}),
        # A neighbour that copies the other KubeRay labels but not this deployment's.
        "impostor": Endpoint("10.0.1.42", "default", {"ray.io/node-type": "worker", **KUBERAY_OPERATOR_POD_LABELS}),
    }


@pytest.fixture(params=["disaggregated", "hardened"])
def case(request, scenario):
    rendered = scenario(request.param)
    spec = rendered.config.specs().serving
    return policies(rendered), pods(spec.namespace, spec.service_name), spec


@pytest.mark.parametrize("intruder", ["neighbour", "stranger-same-namespace", "impostor"])
@pytest.mark.parametrize("port", [GCS, DASHBOARD, 10001, 52365])
def test_a_neighbour_pod_cannot_reach_the_ray_head(case, intruder, port):
    """The audit's first finding: any pod could submit a Ray job through 8265 or join GCS on 6379."""
    rules, endpoints, _ = case
    assert not allowed(rules, endpoints[intruder], endpoints["head"], port)


@pytest.mark.parametrize("intruder", ["neighbour", "stranger-same-namespace"])
def test_a_neighbour_pod_cannot_reach_the_workers(case, intruder):
    rules, endpoints, _ = case
    for worker in ("prefill", "decode"):
        for port in (SERVE, METRICS, GCS, 20000):
            assert not allowed(rules, endpoints[intruder], endpoints[worker], port)


def test_the_operator_reaches_the_dashboard_and_nothing_else(case):
    rules, endpoints, _ = case
    assert allowed(rules, endpoints["operator"], endpoints["head"], DASHBOARD)
    for port in (GCS, SERVE, 10001):
        assert not allowed(rules, endpoints["operator"], endpoints["head"], port)
    assert not allowed(rules, endpoints["operator"], endpoints["prefill"], SERVE)


@pytest.mark.parametrize(("source", "destination", "port"), [
    ("prefill", "head", GCS), ("decode", "head", GCS), ("head", "decode", 10005),
    ("prefill", "decode", 20000),  # NIXL's side channel (TCP) between the legs
    ("decode", "prefill", 20001), ("head", "prefill", 52365), ("prefill", "head", DASHBOARD),
])
def test_the_ray_pods_reach_each_other_on_any_port(case, source, destination, port):
    rules, endpoints, _ = case
    assert allowed(rules, endpoints[source], endpoints[destination], port)


NOT_RAY = ("gate", "continuous-verification", "efa-counters", "bench", "teardown-guard", "gcs-redis-secret",
           "stranger-with-instance-label", "stranger-same-namespace", "neighbour", "impostor", "coredns")


@pytest.mark.parametrize("source", NOT_RAY)
def test_no_pod_but_the_ray_pods_reaches_a_ray_port(case, source):
    """The acceptance: only the Ray pods (and the operator to 8265) reach 6379, 8265, 10001, 52365,
    on the head or a worker; every role this library renders, and strangers."""
    rules, endpoints, _ = case
    reached = [(ray, port) for ray in ("head", "prefill", "decode") for port in RAY_ONLY_PORTS
               if allowed(rules, endpoints[source], endpoints[ray], port)]
    assert reached == []


def test_every_role_label_this_library_renders_is_covered():
    """A new component must be added to the acceptance test above (and given its own policy)."""
    components = {v for k, v in vars(wire).items() if k.endswith("_COMPONENT") and isinstance(v, str)}
    pod_components = components - {wire.GATE_SETTINGS_COMPONENT, wire.GATE_REPORT_COMPONENT,
                                   wire.VERIFY_API_PROXY_COMPONENT}  # ConfigMaps and a policy, not pods
    assert pod_components <= set(NOT_RAY)


@pytest.mark.parametrize(("source", "destination", "port"), [
    ("gate", "prefill", SERVE), ("gate", "decode", METRICS), ("gate", "efa-counters", EFA_COUNTERS),
    ("continuous-verification", "decode", SERVE), ("continuous-verification", "prefill", METRICS),
    ("continuous-verification", "efa-counters", EFA_COUNTERS),
    ("bench", "prefill", SERVE), ("bench", "decode", METRICS),
    ("bench", "efa-counters", EFA_COUNTERS),  # each level's EFA bytes per node (summary.json "utilization")
])
def test_each_role_reaches_the_ports_it_uses(case, source, destination, port):
    rules, endpoints, _ = case
    assert allowed(rules, endpoints[source], endpoints[destination], port)


@pytest.mark.parametrize(("source", "destination", "port"), [
    ("gate", "head", METRICS), ("gate", "prefill", 20000), ("gate", "prefill", 10005),
    ("bench", "prefill", 20000), ("bench", "head", EFA_COUNTERS),
    ("efa-counters", "prefill", SERVE), ("efa-counters", "gate", 443), ("efa-counters", "head", METRICS),
    ("teardown-guard", "prefill", SERVE), ("gcs-redis-secret", "prefill", METRICS),
    ("stranger-with-instance-label", "prefill", SERVE), ("stranger-with-instance-label", "efa-counters", EFA_COUNTERS),
    ("prefill", "efa-counters", EFA_COUNTERS), ("head", "gate", 8000),
])
def test_no_role_reaches_a_port_it_does_not_use(case, source, destination, port):
    rules, endpoints, _ = case
    assert not allowed(rules, endpoints[source], endpoints[destination], port)


def test_every_pod_resolves_names_and_nothing_else_on_53(case):
    rules, endpoints, _ = case
    for pod in ("head", "prefill", "gate", "stranger-same-namespace"):
        assert allowed(rules, endpoints[pod], endpoints["coredns"], 53, "UDP")
        assert allowed(rules, endpoints[pod], endpoints["coredns"], 53, "TCP")
        assert not allowed(rules, endpoints[pod], Endpoint("8.8.8.8"), 53, "UDP")


def test_https_out_for_the_download_and_the_apis_but_no_instance_metadata(case):
    rules, endpoints, _ = case
    huggingface, api_server = Endpoint("18.239.50.1"), Endpoint("10.0.2.7")
    for pod in ("head", "prefill", "decode", "gate", "continuous-verification", "bench", "teardown-guard",
                "gcs-redis-secret"):
        assert allowed(rules, endpoints[pod], huggingface, 443)
        assert allowed(rules, endpoints[pod], api_server, 443)
        assert not allowed(rules, endpoints[pod], huggingface, 80)
        # IMDS would hand out the node role's credentials; the Pod Identity agent hands out the pod's own.
        assert not allowed(rules, endpoints[pod], Endpoint("169.254.169.254"), 80)
        assert allowed(rules, endpoints[pod], Endpoint("169.254.170.23"), 80)
    for pod in ("stranger-same-namespace", "stranger-with-instance-label", "efa-counters"):
        assert not allowed(rules, endpoints[pod], huggingface, 443)
        assert not allowed(rules, endpoints[pod], api_server, 443)
        assert not allowed(rules, endpoints[pod], Endpoint("169.254.170.23"), 80)


def test_clients_reach_the_openai_port_of_the_workers_only_from_where_the_config_says(scenario):
    hardened = scenario("hardened")
    rules, spec = policies(hardened), hardened.config.specs().serving
    endpoints = pods(spec.namespace, spec.service_name)
    app_pod = Endpoint("10.0.3.5", "apps", {"app": "chat"})
    in_client_cidr, elsewhere = Endpoint("10.50.200.9"), Endpoint("192.168.1.1")
    for client in (app_pod, in_client_cidr):
        assert allowed(rules, client, endpoints["prefill"], SERVE)
        assert not allowed(rules, client, endpoints["head"], DASHBOARD)
        assert not allowed(rules, client, endpoints["prefill"], GCS)
    assert not allowed(rules, elsewhere, endpoints["decode"], SERVE)
    # The reference deployment names no client: only port-forward (inside the pod's own network) reaches it.
    reference = scenario("disaggregated")
    assert not allowed(policies(reference), app_pod, pods("inference", "ray-llm")["prefill"], SERVE)


def test_a_client_cidr_that_covers_pod_addresses_admits_those_pods_to_8000_only(scenario):
    """Under the VPC CNI pods take VPC addresses, and ipBlock matches them: naming the VPC CIDR as a
    client network lets every pod in the VPC call the API (docs/threat-model.md), never more."""
    from ray_llm_eks.cdk8s_charts.network_policy import NetworkPolicyChart
    import cdk8s
    from dataclasses import replace

    hardened_spec = scenario("hardened").config.specs().serving
    spec = replace(hardened_spec, service=replace(hardened_spec.service, client_cidrs=("10.0.0.0/16",)))
    rules = list(cdk8s.Testing.synth(NetworkPolicyChart(cdk8s.App(), "p", spec=spec)))
    endpoints = pods(spec.namespace, spec.service_name)
    assert allowed(rules, endpoints["neighbour"], endpoints["prefill"], SERVE)
    assert not allowed(rules, endpoints["neighbour"], endpoints["head"], DASHBOARD)
    assert not allowed(rules, endpoints["neighbour"], endpoints["prefill"], GCS)


def test_the_nlb_admits_only_the_client_cidrs_and_keeps_their_addresses(scenario):
    service = next(o for o in scenario("hardened").objects["serving-rayservice"] if o["kind"] == "Service")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.50.0.0/16"]
    assert service["spec"]["externalTrafficPolicy"] == "Local"


def test_the_policies_pass_kubernetes_validate_strict(case):
    import kubernetes_validate

    rules, _, _ = case
    assert {r["kind"] for r in rules} == {"NetworkPolicy"}
    for rule in rules:
        kubernetes_validate.validate(rule, KUBERNETES_VERSION, strict=True)


def test_the_namespace_enforces_privileged_and_audits_restricted(scenario):
    namespace = next(o for o in scenario("disaggregated").objects["serving-namespace"] if o["kind"] == "Namespace")
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == labels["pod-security.kubernetes.io/warn"] == "restricted"


def test_the_ray_pods_mount_no_kubernetes_api_token(scenario):
    account = next(o for o in scenario("disaggregated").objects["serving-namespace"] if o["kind"] == "ServiceAccount")
    assert account["automountServiceAccountToken"] is False


def test_the_head_has_no_capability_and_the_default_seccomp_profile(scenario):
    context = scenario("disaggregated").head_container["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False


def test_an_operator_installed_elsewhere_is_admitted_from_its_own_namespace_only():
    """RayLlmServing(operator_namespace=...) for a KubeRay the library did not install."""
    import cdk8s

    from ray_llm_eks.cdk8s_charts.network_policy import NetworkPolicyChart
    from helpers.pins import unpinned

    spec = dataclasses.replace(unpinned().specs().serving, operator_namespace="ray-system")
    rules = cdk8s.Testing.synth(NetworkPolicyChart(cdk8s.App(), "p", spec=spec))
    head = pods(spec.namespace, spec.service_name)["head"]
    theirs = Endpoint("10.0.1.21", "ray-system", dict(KUBERAY_OPERATOR_POD_LABELS))
    ours = Endpoint("10.0.1.20", KUBERAY_NAMESPACE, dict(KUBERAY_OPERATOR_POD_LABELS))
    assert allowed(rules, theirs, head, DASHBOARD)
    assert not allowed(rules, ours, head, DASHBOARD)


def _policy(**spec) -> dict:
    return {"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": "team"},
            "spec": {"podSelector": {"matchLabels": {"app": "api"}}, **spec}}


@pytest.mark.parametrize(("spec", "types"), [
    ({}, ["Ingress"]),
    ({"policyTypes": []}, ["Ingress"]),  # an empty list is unspecified too
    ({"ingress": [{}]}, ["Ingress"]),
    ({"egress": []}, ["Ingress"]),  # an empty egress section has no egress rule
    ({"egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}, ["Ingress", "Egress"]),
    ({"policyTypes": ["Egress"], "ingress": [{}]}, ["Egress"]),  # given: taken as written
])
def test_the_evaluator_defaults_policy_types_as_the_api_server_does(spec, types):
    """No ``policyTypes``: Ingress always, Egress only when the policy has egress rules."""
    assert policy_types(_policy(**spec)) == types


def test_a_policy_without_policy_types_isolates_egress_only_when_it_has_egress_rules():
    api = Endpoint("10.0.2.10", "team", {"app": "api"})
    peer = Endpoint("10.0.2.11", "team", {"app": "db"})
    outside = Endpoint("198.51.100.7")
    # Ingress rules only: the pod is isolated for ingress, and its egress stays open.
    ingress_only = [_policy(ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}])]
    assert not allowed(ingress_only, peer, api, 8080)
    assert allowed(ingress_only, api, outside, 443) and allowed(ingress_only, api, peer, 5432)
    # An egress rule and no policyTypes: egress is isolated too (the old Ingress-only default let this out).
    with_egress = [_policy(egress=[{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}],
                                    "ports": [{"port": 5432, "protocol": "TCP"}]}])]
    assert allowed(with_egress, api, peer, 5432)
    assert not allowed(with_egress, api, outside, 443)
    assert not allowed(with_egress, api, peer, 6379)
    assert not allowed(with_egress, peer, api, 8080)  # and ingress, which it lists no rule for


def _pod_labels(obj: dict) -> dict | None:
    """The labels of the pod an object makes (a Pod, or the template of a Job, DaemonSet, CronJob)."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "Pod":
        return obj["metadata"].get("labels") or {}
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    template = spec.get("template")
    return ((template or {}).get("metadata") or {}).get("labels") if obj["kind"] in ("Job", "DaemonSet", "CronJob") \
        else None


def test_the_rendered_pods_carry_the_labels_the_policies_are_evaluated_with():
    """Every pod this library renders, with its real labels: the endpoints above are what renders."""
    import cdk8s
    import yaml

    from helpers.pins import unpinned as Deployment
    from ray_llm_eks.cdk8s_charts import build_serving_charts
    from ray_llm_eks.cdk8s_charts.bench import render_bench_job
    from ray_llm_eks.cdk8s_charts.gcs_redis import GcsRedisChart
    from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart

    specs = Deployment().specs()
    spec = specs.serving
    app = cdk8s.App()
    charts = build_serving_charts(app, spec)
    verification = build_verification_chart(app, spec, specs.verification,
                                            GatePlan.of(spec, specs.verification, charts), charts, None)
    objects = [o for chart in (*charts.charts, verification) for o in cdk8s.Testing.synth(chart)]
    objects += cdk8s.Testing.synth(GcsRedisChart(cdk8s.App(), "g", spec=spec, endpoint="e.cache.amazonaws.com",
                                                 vpc_cidr="10.0.0.0/16", secret_id="s", run_id="r"))
    objects += [o for o in yaml.safe_load_all(render_bench_job(spec, {"url": "u", "model": "m", "tokenizer": "t",
                                                                      "concurrency": [1]})[1]) if o]
    rendered = [labels for o in objects if (labels := _pod_labels(o)) is not None]
    ray = ray_pod_labels(charts)
    endpoints = pods(spec.namespace, spec.service_name)
    by_role = {labels.get(COMPONENT_LABEL) or labels[RAY_ROLE_LABEL]: labels for labels in [*rendered, *ray]}
    assert set(by_role) == {"head", "prefill", "decode", "gate", "continuous-verification", "efa-counters",
                            "bench", "teardown-guard", "gcs-redis-secret"}
    for role, labels in by_role.items():
        selected_by = (INSTANCE_LABEL, COMPONENT_LABEL, RAY_ROLE_LABEL, SERVES_HTTP_LABEL)  # the policies' keys
        ours = {k: v for k, v in labels.items() if k in selected_by}
        assert ours == endpoints[role].labels, role


def ray_pod_labels(charts) -> list[dict]:
    service = next(o for o in cdk8s_synth(charts.rayservice) if o["kind"] == "RayService")
    cluster = service["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [g["template"]["metadata"]["labels"] for g in groups]


def cdk8s_synth(chart) -> list[dict]:
    import cdk8s

    return cdk8s.Testing.synth(chart)


@pytest.mark.parametrize(("serving", "expected"), [
    ({}, "none yet: name the namespaces of your client pods in serving.client_namespaces (they call "
         "http://ray-llm-openai.inference.svc:8000/v1)"),
    ({"client_namespaces": ("apps",)},
     "curl -s http://ray-llm-openai.inference.svc:8000/v1/models  # from a pod in namespace apps"),
    ({"endpoint": "internal-nlb", "client_cidrs": ("10.50.0.0/16",)},
     "kubectl -n inference get svc ray-llm-openai -o jsonpath='{.status.loadBalancer.ingress[0].hostname}'"
     "  # then http://<that name>:8000/v1 from 10.50.0.0/16"),
])
def test_the_endpoint_command_never_port_forwards(serving, expected):
    from helpers.pins import unpinned as Deployment
    from ray_llm_eks.base.serving import ServiceSettings
    from ray_llm_eks.cdk8s_charts import endpoint_command

    command = endpoint_command(Deployment(serving=ServiceSettings(**serving)).specs().serving)
    assert command.startswith(expected)
    assert "port-forward" not in command


def test_the_readme_client_namespace_policy_reaches_the_api_and_no_ray_port():
    """examples/client-policy.yaml, which the README's quick start applies ("Call the API") and
    docs/deploying.md shows: the policy a client namespace needs under strict mode, evaluated with
    the rendered serving policies (a client in ``apps`` of the reference deployment)."""
    import re
    import textwrap
    from pathlib import Path

    import cdk8s
    import yaml

    from helpers.pins import unpinned as Deployment
    from ray_llm_eks.base.serving import ServiceSettings
    from ray_llm_eks.cdk8s_charts.network_policy import NetworkPolicyChart

    root = Path(__file__).resolve().parents[2]
    example = (root / "examples" / "client-policy.yaml").read_text()
    deploying = (root / "docs" / "deploying.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", deploying, re.S) if "name: call-ray-llm" in b]
    assert textwrap.dedent(block) == example  # the doc shows the file, as it is
    client_policy = yaml.safe_load(example)
    spec = Deployment(serving=ServiceSettings(client_namespaces=("apps",))).specs().serving
    rules = [*cdk8s.Testing.synth(NetworkPolicyChart(cdk8s.App(), "p", spec=spec)), client_policy]
    endpoints = pods(spec.namespace, spec.service_name)
    client = Endpoint("10.0.3.5", "apps", {"app": "chat"})
    assert allowed(rules, client, endpoints["prefill"], SERVE)
    assert allowed(rules, client, endpoints["coredns"], 53, "UDP")
    for port in RAY_ONLY_PORTS:
        assert not allowed(rules, client, endpoints["head"], port)
    assert not allowed(rules, client, Endpoint("18.239.50.1"), 443)  # its own rules add anything else
