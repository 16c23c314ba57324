"""Every pod of every option's build is admitted by that build's own admission policy.

Each build is the stack as ``cdk synth`` makes it (the ``synth`` fixture); the policy and the pod
templates are read back from the template's kubectl manifests, and each pod is built as its
controller creates it (KubeRay's wait-gcs-ready init container and autoscaler container, the
DaemonSet controller's tolerations, the API server's default tolerations: helpers.admission), then
evaluated with cel-python. The refusals are in tests/cdk8s_charts/test_admission_policy.py.
"""

from __future__ import annotations

import copy

import pytest

from helpers.admission import JOB_CONTROLLER, OPERATOR, admits, created_pods, denials, pod, policy_of, ray_cluster

BUILDS = {
    "default": None,  # observability on
    "ipc-lock": {"serving": {"security_profile": "ipc-lock"}},
    "token auth (KubeRay 1.5.1)": {"serving": {"ray_auth": "token"}, "versions": {"kuberay": "1.5.1"}},
    "gcs fault tolerance": {"serving": {"gcs_fault_tolerance": {"enabled": True, "cache_nodes": 1}}},
    "autoscaling": {"decode": {"min_size": 1, "desired_size": 1, "max_size": 3}},
    "hf token": {"model": {"hf_token_secret": "hf/token"}},
    "observability off": {"observability": {"enabled": False}},
}


def _objects(built) -> list[dict]:
    return [o for logical_id in built.resources("Custom::AWSCDK-EKS-KubernetesResource")
            for o in built.manifest_objects(logical_id)]


@pytest.mark.parametrize("build", list(BUILDS))
def test_every_rendered_pod_of_every_build_is_admitted(synth, build):
    objects = _objects(synth(BUILDS[build]))
    policy = policy_of(objects)
    pods = created_pods(objects)
    kinds = {what.split(" ")[0] for what, *_ in pods}
    assert {"DaemonSet", "Job"} <= kinds  # the counter readers, the gate
    assert ("CronJob" in kinds) == (build != "observability off")  # continuous verification
    assert any(what.endswith(" head") for what, *_ in pods) and any(what.endswith(" decode") for what, *_ in pods)
    if build == "gcs fault tolerance":
        assert any("gcs-redis" in what for what, *_ in pods)
    if build == "autoscaling":
        (head,) = [p for what, p, *_ in pods if what.endswith(" head")]
        assert [c["name"] for c in head["spec"]["containers"]][-1] == "autoscaler"
    for what, pod, namespace, user in pods:
        assert denials(policy, namespace, pod, user=user) == [], what
    # The RayCluster the operator makes of the RayService, as it makes it.
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    cluster = ray_cluster(service["spec"]["rayClusterConfig"], service["metadata"]["name"])
    assert denials(policy_of(objects, resource="rayclusters"), service["metadata"]["namespace"], cluster,
                   user=OPERATOR) == []


def _trusted_keys(objects, namespace: str) -> set[str]:
    """Every label key a NetworkPolicy of the namespace selects its own pods by, and the Services'."""
    keys: set[str] = set()

    def add(selector: dict | None) -> None:
        keys.update((selector or {}).get("matchLabels", {}))
        keys.update(e["key"] for e in (selector or {}).get("matchExpressions", []))

    for o in objects:
        if o["metadata"].get("namespace") != namespace:
            continue
        if o["kind"] == "NetworkPolicy":
            add(o["spec"]["podSelector"])
            for rule in o["spec"].get("ingress", []) + o["spec"].get("egress", []):
                for peer in rule.get("from", []) + rule.get("to", []):
                    if "namespaceSelector" not in peer:
                        add(peer.get("podSelector"))
        elif o["kind"] == "Service":
            keys.update(o["spec"].get("selector") or {})
    return keys


TENANT = "tenant@example.com"


@pytest.mark.parametrize("build", ["default", "gcs fault tolerance", "autoscaling"])
def test_no_tenant_makes_or_becomes_one_of_the_deployments_own_pods(synth, build):
    """Each pod the build renders in the serving namespace, its account and the labels its
    NetworkPolicies and Services trust taken from the manifests: a namespace editor's pod (by
    hand, or through a Job, Deployment or DaemonSet) on that account or with those labels, the
    rendered pod with another image, or a relabelled pod of the tenant's, is refused."""
    objects = _objects(synth(BUILDS[build]))
    policy = policy_of(objects)
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    namespace = service["metadata"]["namespace"]
    trusted = _trusted_keys(objects, namespace)
    assert {"ray-llm-eks/ray-role", "ray-llm-eks/serves-http", "ray-llm-eks/component"} <= trusted
    controllers = (TENANT, OPERATOR, JOB_CONTROLLER, "system:serviceaccount:kube-system:replicaset-controller",
                   "system:serviceaccount:kube-system:daemon-set-controller")
    own = [(what, p, user) for what, p, ns, user in created_pods(objects) if ns == namespace]
    assert len(own) >= 5
    for what, running, creator in own:
        account = running["spec"].get("serviceAccountName", "default")
        labels = {k: v for k, v in running["metadata"].get("labels", {}).items() if k in trusted}
        assert labels, what
        if creator != "deployer":  # the teardown guard: a bare Pod, applied by whoever deploys
            for user in controllers:
                assert admits(policy, namespace, running, user=user) == (user == creator), (what, user)
        image = "docker.io/library/python:3.12"
        swapped = copy.deepcopy(running)
        swapped["spec"]["containers"][-1]["image"] = image
        assert not admits(policy, namespace, swapped, user=creator), what
        mine = {"containers": [{"name": "c", "image": image}]}
        for user in controllers:
            if account != "default":
                assert not admits(policy, namespace, pod({**mine, "serviceAccountName": account}), user=user), what
            assert not admits(policy, namespace, pod({**mine, "serviceAccountName": "tenant"}, labels), user=user), what
        ordinary = pod({**mine, "serviceAccountName": "tenant"})
        relabelled = copy.deepcopy(ordinary)
        relabelled["metadata"]["labels"] = labels
        assert not admits(policy, namespace, relabelled, operation="UPDATE", old=ordinary, user=TENANT), what


def test_the_exempt_device_plugin_account_follows_the_release_the_stack_installs(synth):
    """The NVIDIA chart names its account after the release (base.infrastructure); the stack's
    release and the exempt account must agree, or the device plugin is refused on every GPU node."""
    from ray_llm_eks.base.infrastructure import NVIDIA_DEVICE_PLUGIN_RELEASE, NVIDIA_DEVICE_PLUGIN_SERVICE_ACCOUNT
    from ray_llm_eks.base.serving import DEFAULT_ADMISSION_EXEMPT_AGENTS

    built = synth(None)
    releases = {r["Properties"]["Chart"]: r["Properties"]["Release"]
                for r in built.resources("Custom::AWSCDK-EKS-HelmChart").values()}
    assert releases["nvidia-device-plugin"] == NVIDIA_DEVICE_PLUGIN_RELEASE
    assert f"kube-system/{NVIDIA_DEVICE_PLUGIN_SERVICE_ACCOUNT}" in DEFAULT_ADMISSION_EXEMPT_AGENTS
    assert "kube-system/default" in DEFAULT_ADMISSION_EXEMPT_AGENTS  # the EFA device plugin names none
