"""``rollout.deployed_settings``: which gate settings ConfigMap ``ray-llm-eks verify`` runs with.

The fake API server stores ConfigMaps with their labels and lists them by ``labelSelector`` as
the API server does, so the lookup's selector is exercised: a ConfigMap it does not select (another
deployment's, a gate report) cannot be picked, whatever it holds.
"""

from __future__ import annotations

import json
import time

import pytest
from fake_cluster import FakeDeployment, parse_selector

from ray_llm_eks.base import wire
from ray_llm_eks.verification import rollout
from ray_llm_eks.verification.kube import Kube, KubeAccess


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


def test_the_rendered_settings_are_found_by_the_lookup(fake: FakeDeployment, disaggregated):
    """The labels the chart renders are the ones the lookup selects."""
    _apply_rendered(fake, disaggregated.settings_config_map)
    found = rollout.deployed_settings(_kube(fake), fake.namespace, fake.name)
    assert found == disaggregated.settings


def test_the_settings_of_the_spec_the_rayservice_runs_win_over_an_older_spec(fake: FakeDeployment, disaggregated):
    """An old spec's settings (another cluster hash), newer in the store, are not the running spec's."""
    now = time.time()
    _apply_rendered(fake, disaggregated.settings_config_map, created=now - 3600)
    old = {**disaggregated.settings, "cluster_spec_hash": "0ld0ld0l", "run_id": "0ld0ld0l", "probes": 9}
    fake.apply_gate_settings(old, name=f"{fake.name}-gate-0ld0ld0l", created=now)
    found = rollout.deployed_settings(_kube(fake), fake.namespace, fake.name)
    assert found["run_id"] == disaggregated.settings["run_id"] and found["probes"] != 9


def test_two_runs_of_one_cluster_spec_take_the_newest(fake: FakeDeployment, disaggregated):
    """A change to the Serve config alone keeps the cluster hash: the newest applied settings are the deployed ones."""
    now = time.time()
    _apply_rendered(fake, disaggregated.settings_config_map, created=now - 3600)
    newer = {**disaggregated.settings, "run_id": "5e7e5e7e", "probes": 7}
    fake.apply_gate_settings(newer, created=now)
    assert rollout.deployed_settings(_kube(fake), fake.namespace, fake.name)["probes"] == 7


def test_another_deployments_settings_are_not_selected(fake: FakeDeployment, disaggregated):
    """A second deployment in the namespace renders the same cluster hash for the same spec; its
    settings (newer, for its own RayService) carry its instance label, which the lookup does not select."""
    now = time.time()
    _apply_rendered(fake, disaggregated.settings_config_map, created=now - 3600)
    theirs = {**disaggregated.settings, "ray_service": "other-llm", "run_id": "07e407e4", "probes": 5}
    fake.apply_gate_settings(theirs, name="other-llm-gate-07e407e4", created=now, labels={
        wire.INSTANCE_LABEL: "other-llm", wire.COMPONENT_LABEL: wire.GATE_SETTINGS_COMPONENT})
    found = rollout.deployed_settings(_kube(fake), fake.namespace, fake.name)
    assert found["ray_service"] == fake.name and found["probes"] != 5


def test_no_matching_settings_is_refused(fake: FakeDeployment, disaggregated):
    """Only another deployment's settings, and a gate report of ours (another component), holding
    what would match: none is ours, so the lookup refuses rather than guesses."""
    settings = json.dumps(disaggregated.settings)
    fake.apply_config_map("other-llm-gate-07e407e4", {wire.INSTANCE_LABEL: "other-llm",
                                                      wire.COMPONENT_LABEL: wire.GATE_SETTINGS_COMPONENT},
                          {wire.GATE_SETTINGS_FILE: settings})
    fake.apply_config_map(f"{fake.name}-gate-1a2b3c4d-report", {wire.INSTANCE_LABEL: fake.name,
                                                                wire.COMPONENT_LABEL: wire.GATE_REPORT_COMPONENT},
                          {wire.GATE_SETTINGS_FILE: settings})
    with pytest.raises(LookupError, match=r"no gate settings in inference match the RayService ray-llm \(0 found\)"):
        rollout.deployed_settings(_kube(fake), fake.namespace, fake.name)


def test_settings_of_an_older_spec_only_are_refused(fake: FakeDeployment, disaggregated):
    old = {**disaggregated.settings, "cluster_spec_hash": "0ld0ld0l"}
    fake.apply_gate_settings(old, name=f"{fake.name}-gate-0ld0ld0l")
    with pytest.raises(LookupError, match=r"\(1 found\)"):
        rollout.deployed_settings(_kube(fake), fake.namespace, fake.name)
