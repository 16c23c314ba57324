"""The gate settings ``ray-llm-eks verify`` runs with: the local configuration's, rendered as the
deploy renders them, and the cluster's copy that must match (``ray_llm_eks.verify``).

The fake API server stores ConfigMaps with their labels and lists them by ``labelSelector`` as
the API server does. Whatever ConfigMaps the cluster holds (the gate's account may create any),
the run's settings are the local ones; the deploy's own copy is only compared with them.
"""

from __future__ import annotations

import json
import time

import pytest
from fake_cluster import FakeDeployment, parse_selector

from ray_llm_eks.base import wire
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.verification.kube import Kube, KubeAccess
from ray_llm_eks.verify import SettingsMismatch, cluster_copy_differences, local_settings


def _kube(fake: FakeDeployment) -> Kube:
    return Kube(KubeAccess.with_token_file(fake.api_url, str(fake.token_file)))


def _apply_rendered(fake: FakeDeployment, rendered: dict, settings: dict | None = None,
                    created: float | None = None) -> None:
    """The chart's settings ConfigMap as ``kubectl apply`` leaves it (optionally with other settings)."""
    data = dict(rendered["data"])
    if settings is not None:
        data[wire.GATE_SETTINGS_FILE] = json.dumps(settings)
    fake.apply_config_map(rendered["metadata"]["name"], rendered["metadata"]["labels"], data, created)


def test_the_selector_is_parsed_as_the_api_server_does():
    assert parse_selector("a=b,c==d, e = f ,") == {"a": "b", "c": "d", "e": "f"}
    assert parse_selector("") == {}
    with pytest.raises(ValueError):
        parse_selector("a!=b")


def test_the_fake_lists_only_what_the_selector_selects(fake: FakeDeployment):
    fake.apply_config_map("one", {"app": "x", "tier": "a"}, {})
    fake.apply_config_map("two", {"app": "x", "tier": "b"}, {})
    kube = _kube(fake)
    assert [c["metadata"]["name"] for c in kube.config_maps(fake.namespace, {"app": "x"})] == ["one", "two"]
    assert [c["metadata"]["name"] for c in kube.config_maps(fake.namespace, {"app": "x", "tier": "b"})] == ["two"]
    assert kube.config_maps(fake.namespace, {"app": "y"}) == []
    assert [n["metadata"]["name"] for n in kube.nodes({"role": "decode"})] == ["ip-10-0-1-12.decode"]
    assert kube.nodes({"role": "decode", "other": "x"}) == []
    pods = kube.pods(fake.namespace, {"ray.io/group": "prefill", "ray.io/node-type": "worker"})
    assert [p["metadata"]["name"] for p in pods] == [f"{fake.active}-prefill-worker-p1"]


def test_the_local_settings_are_the_rendered_ones(disaggregated):
    """The same run id and settings as the chart the deploy applies."""
    settings = local_settings(Deployment())
    assert settings.to_json() == disaggregated.settings
    assert settings.job_name == disaggregated.settings_config_map["metadata"]["name"]


def test_another_namespace_or_service_renders_its_own_run(disaggregated):
    moved = local_settings(Deployment(), namespace="team-a", service="other-llm")
    assert (moved.namespace, moved.ray_service) == ("team-a", "other-llm")
    assert moved.openai_url == "http://other-llm-openai.team-a.svc:8000"
    assert moved.run_id != disaggregated.settings["run_id"]


def test_the_deploys_own_copy_matches(fake: FakeDeployment, disaggregated):
    _apply_rendered(fake, disaggregated.settings_config_map)
    cluster_copy_differences(_kube(fake), local_settings(Deployment()))


def test_newer_settings_of_this_deployment_do_not_stand_in_for_its_copy(fake: FakeDeployment, disaggregated):
    """A newer ConfigMap with the deploy's labels (a planted one) is not the run's copy: without the
    deploy's own, the run is refused, whatever the planted one holds."""
    planted = {**disaggregated.settings, "run_id": "5e7e5e7e", "min_kv_fraction": 0}
    fake.apply_gate_settings(planted, created=time.time())
    with pytest.raises(SettingsMismatch, match=r"the cluster has no gate settings ConfigMap "
                                               rf"inference/{disaggregated.settings_config_map['metadata']['name']}"):
        cluster_copy_differences(_kube(fake), local_settings(Deployment()))


def test_a_copy_that_differs_is_refused_naming_each_field(fake: FakeDeployment, disaggregated):
    changed = {**disaggregated.settings, "min_kv_fraction": 0, "expected_provider": "tcp", "metrics_port": 22}
    _apply_rendered(fake, disaggregated.settings_config_map, settings=changed)
    with pytest.raises(SettingsMismatch) as refused:
        cluster_copy_differences(_kube(fake), local_settings(Deployment()))
    message = str(refused.value)
    assert message.split(": ", 1)[1].split("; ") == [
        'expected_provider: cluster "tcp", local "efa"', "metrics_port: cluster 22, local 8080",
        f"min_kv_fraction: cluster 0, local {disaggregated.settings['min_kv_fraction']}"]


def test_a_copy_that_is_not_json_is_refused(fake: FakeDeployment, disaggregated):
    rendered = disaggregated.settings_config_map
    fake.apply_config_map(rendered["metadata"]["name"], rendered["metadata"]["labels"],
                          {wire.GATE_SETTINGS_FILE: "{not json"})
    with pytest.raises(SettingsMismatch, match="holds no readable gate.json"):
        cluster_copy_differences(_kube(fake), local_settings(Deployment()))
