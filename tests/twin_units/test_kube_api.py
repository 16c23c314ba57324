"""The twin's Kubernetes API stand-in (ray_llm_eks/twin/kube_api.py) answers what the gate now reads
of Serve: the RayService's stored serveConfigV2, generation and applicationStatuses, and KubeRay's
UpdatedServeApplications Event. Runs without the twin (no Ray, no namespaces)."""

from __future__ import annotations

import json

from ray_llm_eks.twin.kube_api import KubeApi

RAYSERVICE = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "ray-llm", "namespace": "inference"},
              "spec": {"serveConfigV2": "{}", "rayClusterConfig": {"authOptions": {"mode": "token"}}}}
SELECTOR = "involvedObject.kind=RayService,involvedObject.name=ray-llm,reason=UpdatedServeApplications"


def _api() -> KubeApi:
    api = KubeApi(namespace="inference", rayservice=RAYSERVICE, config_maps=[], logs={})
    api.applications = lambda: {"applications": {"llm": {
        "status": "RUNNING", "message": "", "deployments": {"PDProxyServer": {"status": "HEALTHY", "message": ""}}}}}
    return api


def _get(api: KubeApi, path: str):
    status, body, _ = api.route("GET", path, {"Authorization": f"Bearer {api.token}"}, b"")
    return status, body


def test_the_rayservice_carries_the_submitted_config_under_a_new_generation():
    api = _api()
    config = {"applications": [{"name": "llm", "args": {"a": 1}}]}
    api.submitted(config, 1_800_000_000.0)
    status, service = _get(api, "/apis/ray.io/v1/namespaces/inference/rayservices/ray-llm")
    assert status == 200
    assert json.loads(service["spec"]["serveConfigV2"]) == config
    assert service["metadata"]["generation"] == service["status"]["observedGeneration"] == 2
    assert service["status"]["activeServiceStatus"]["applicationStatuses"] == {"llm": {
        "status": "RUNNING", "message": "", "serveDeploymentStatuses": {"PDProxyServer": {"status": "HEALTHY",
                                                                                        "message": ""}}}}
    api.submitted(config, 1_800_000_100.0)  # the same config again: the spec, so the generation, unchanged
    assert _get(api, "/apis/ray.io/v1/namespaces/inference/rayservices/ray-llm")[1]["metadata"]["generation"] == 2


def test_kuberays_event_names_the_cluster_and_the_time_of_the_last_submission():
    api = _api()
    assert _get(api, f"/api/v1/namespaces/inference/events?fieldSelector={SELECTOR}")[1]["items"] == []
    api.submitted({"applications": []}, 1_800_000_000.0)
    (event,) = _get(api, f"/api/v1/namespaces/inference/events?fieldSelector={SELECTOR}")[1]["items"]
    assert event["message"] == f"Updated serve applications to the RayCluster inference/{api.cluster}"
    assert event["lastTimestamp"] == "2027-01-15T08:00:00Z"
    other = SELECTOR.replace("UpdatedServeApplications", "FailedToUpdateServeApplications")
    assert _get(api, f"/api/v1/namespaces/inference/events?fieldSelector={other}")[1]["items"] == []


def test_the_counter_readers_are_controlled_by_the_daemonset_the_api_serves():
    """The gate reads only the readers its DaemonSet controls (verification.checks.Checks.efa_counter_pods):
    the stand-in serves the DaemonSet under the chart's name, and a reader it adds names its uid, unless
    it was made by hand."""
    from ray_llm_eks.base import wire
    from ray_llm_eks.verification import objects

    api = _api()
    labels = {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/component": "efa-counters"}
    api.add_counter_pod("ray-llm-efa-counters-decode", labels, "decode-node", "10.0.0.4")
    api.add_counter_pod("by-hand", labels, "decode-node", "10.0.0.9", controller_uid=None)
    status, daemon_set = _get(api, f"/apis/apps/v1/namespaces/inference/daemonsets/{wire.efa_counters_name('ray-llm')}")
    assert status == 200 and daemon_set["kind"] == "DaemonSet"
    status, pods = _get(api, "/api/v1/namespaces/inference/pods?labelSelector=ray-llm-eks/component%3Defa-counters")
    controlled = {p["metadata"]["name"]: objects.controlled_by(p, "DaemonSet", daemon_set["metadata"]["uid"])
                  for p in pods["items"]}
    assert controlled == {"ray-llm-efa-counters-decode": True, "by-hand": False}


def test_another_cluster_spec_is_served_as_a_new_raycluster_with_its_pods_templates():
    """A deployment whose ``rayClusterConfig`` differs (conditional disaggregation mounts its archive):
    the stand-in serves that spec, a new RayCluster uid and generation, and the pods re-added from the
    new templates carry their hash annotation and name the new RayCluster as their controller."""
    api = _api()
    old_uid, old_generation = api.cluster_uid, api.generation
    template = {"metadata": {"annotations": {"ray.io/hash": "old"}}, "spec": {"containers": [{"name": "ray", "image": "i"}]}}
    api.add_pod("ray-llm-head", template=template, group="headgroup", node="n", ip="10.0.0.1", env={}, created=0.0)
    other = {**RAYSERVICE, "metadata": {"name": "ignored"},
             "spec": {**RAYSERVICE["spec"], "rayClusterConfig": {"authOptions": {"mode": "token"}, "x": 1}}}
    api.recreate_cluster(other)
    api.add_pod("ray-llm-head", template={**template, "metadata": {"annotations": {"ray.io/hash": "new"}}},
                group="headgroup", node="n", ip="10.0.0.1", env={}, created=0.0)
    service = _get(api, "/apis/ray.io/v1/namespaces/inference/rayservices/ray-llm")[1]
    assert service["spec"]["rayClusterConfig"] == other["spec"]["rayClusterConfig"]
    assert service["metadata"]["name"] == "ray-llm" and service["metadata"]["generation"] == old_generation + 1
    assert api.cluster_uid != old_uid and api.ray_cluster_object()["spec"] == other["spec"]["rayClusterConfig"]
    (pod,) = api.pods
    assert pod["metadata"]["annotations"] == {"ray.io/hash": "new"}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == api.cluster_uid
