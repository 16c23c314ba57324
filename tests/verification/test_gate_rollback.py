"""Rollouts that end as docs/verification.md says, against KubeRay 1.4.0's reconcile as the fake
models it (:class:`fake_cluster.FakeKubeRay`, citing ``rayservice_controller.go`` at v1.4.0).

The rollback drill: deploy A and pass; deploy B, whose new RayCluster never serves, and fail with
the reason before the deadline; roll back to A. Under ``upgradeStrategy: None`` KubeRay keeps B's
pending cluster forever, so the old gate must delete it: then the pods run on A's hash again and
the old gate passes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fake_cluster import FakeDeployment, Scenario, run_gate

pytestmark = pytest.mark.integration


def _report(result: Any) -> dict[str, Any]:
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def _gate(program, fake: FakeDeployment, **overrides: Any) -> tuple[int, dict[str, Any]]:
    result = run_gate(program, fake, fake.gate_settings(**{"poll_seconds": 0.1, **overrides}))
    return result.returncode, _report(result)


def _hashes(fake: FakeDeployment, cluster: str) -> set[str]:
    return {p["metadata"]["annotations"]["ray-llm-eks/cluster-spec-hash"] for p in fake.pods()
            if p["metadata"].get("labels", {}).get("ray.io/cluster") == cluster}


@pytest.mark.parametrize("failure", ["ImagePullBackOff", "Unschedulable", "DEPLOY_FAILED"])
def test_a_failed_deploy_rolls_back_to_pods_on_the_old_spec_and_the_old_gate_passes(
        in_cluster_copy, fake: FakeDeployment, disaggregated, another_spec, failure):
    a, b = disaggregated, another_spec
    assert a.settings["cluster_spec_hash"] != b.settings["cluster_spec_hash"]
    fake.scenario = Scenario(promote_after_polls=2, failing_specs={b.settings["cluster_spec_hash"]: failure})

    code, report = _gate(in_cluster_copy, fake)  # deploy A
    assert code == 0, report["reasons"]
    first = fake.active

    fake.deploy(b.rayservice, b.settings)  # deploy B: its cluster never serves
    # 1 s, five polls: the fake's kubelet shows ErrImagePull on every third read of the pods
    # (several a poll), ImagePullBackOff between.
    code, report = _gate(in_cluster_copy, fake, deadline_seconds=60, stuck_pod_seconds=1)
    assert code == 1
    assert report["duration_s"] < 30, "failed at the deadline, not at once"
    said = {"ImagePullBackOff": "waiting for its image", "Unschedulable": "has been Unschedulable for",
            "DEPLOY_FAILED": "failed to deploy on the RayCluster"}[failure]
    assert any(said in r and "built from this spec" in r for r in report["reasons"]), report["reasons"]
    failed = fake.pending
    assert fake.deleted == [first] and failed and _hashes(fake, failed) == {b.settings["cluster_spec_hash"]}

    fake.deploy(a.rayservice, a.settings)  # CloudFormation rolls the RayService back
    fake.scenario.failing_specs = {b.settings["cluster_spec_hash"]: failure}
    code, report = _gate(in_cluster_copy, fake)  # the old gate, re-applied by the rollback
    assert code == 0, report["reasons"]
    assert fake.deleted == [first, failed]  # B's pending cluster, which KubeRay 1.4.0 would have kept
    assert report["service"]["rollout"]["recreated"] == [failed]
    assert fake.pending == "" and _hashes(fake, fake.active) == {a.settings["cluster_spec_hash"]}
    assert {p["cluster_spec_hash"] for p in report["pods"]} == {a.settings["cluster_spec_hash"]}


def test_without_the_gate_kuberay_keeps_the_failed_pending_cluster(fake: FakeDeployment, disaggregated, another_spec):
    """What the fake models, and the gate mends: KubeRay 1.4.0 alone leaves B's cluster pending."""
    a, b = disaggregated, another_spec
    fake.scenario = Scenario(failing_specs={b.settings["cluster_spec_hash"]: "ImagePullBackOff"})
    fake.deploy(b.rayservice, b.settings)
    fake.kuberay.delete(fake.active)  # what deploy B's gate does
    for _ in range(10):
        fake.rayservice_object()
    stuck = fake.pending
    fake.deploy(a.rayservice, a.settings)
    for _ in range(20):
        fake.rayservice_object()
    assert fake.pending == stuck and _hashes(fake, stuck) == {b.settings["cluster_spec_hash"]}
    assert fake.active not in fake.kuberay.clusters  # nothing serves


def test_an_image_name_that_cannot_parse_fails_at_once(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(failing_specs={fake.hash: "InvalidImageName"})
    fake.pod_hash = "0ld0ld0ld0ld"
    code, report = _gate(in_cluster_copy, fake, deadline_seconds=60)  # stuck_pod_seconds: the default 600
    assert code == 1 and report["duration_s"] < 30
    assert any("has been InvalidImageName:" in r for r in report["reasons"]), report["reasons"]


def test_a_pod_that_waits_less_than_the_limit_is_waited_for(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(failing_specs={fake.hash: "ImagePullBackOff"})
    fake.pod_hash = "0ld0ld0ld0ld"
    code, report = _gate(in_cluster_copy, fake, deadline_seconds=3)
    assert code == 1
    assert [r for r in report["reasons"] if "was not ready within" in r], report["reasons"]
    assert not [r for r in report["reasons"] if "waiting for its image" in r]
    # The reason is still reported: whichever of the two the kubelet showed last (the fake alternates them).
    assert re.search(r"ImagePullBackOff|ErrImagePull", report["service"]["last_state"]), report["service"]


def test_a_planted_pod_with_the_clusters_labels_triggers_no_delete_and_is_not_counted(
        in_cluster_copy, fake: FakeDeployment):
    decoy = json.loads(json.dumps(fake._pod(fake.kuberay.clusters[fake.active], "decoy", "127.0.0.8", "decode",
                                            "ip-10-0-1-12.decode")))
    decoy["metadata"]["annotations"]["ray-llm-eks/cluster-spec-hash"] = "0ld0ld0ld0ld"
    decoy["metadata"]["ownerReferences"] = []  # created by hand, not by KubeRay
    fake.planted.append(decoy)
    code, report = _gate(in_cluster_copy, fake)
    assert code == 0, report["reasons"]
    assert fake.deleted == []
    assert "decoy" not in {p["name"] for p in report["pods"]}


def test_a_read_only_run_reports_a_pending_cluster_of_another_spec_and_deletes_nothing(
        in_cluster_copy, fake: FakeDeployment, disaggregated, another_spec):
    a, b = disaggregated, another_spec
    fake.scenario = Scenario(failing_specs={b.settings["cluster_spec_hash"]: "ImagePullBackOff"})
    fake.deploy(b.rayservice, b.settings)
    fake.kuberay.delete(fake.active)
    for _ in range(3):
        fake.rayservice_object()
    fake.deploy(a.rayservice, a.settings)
    code, report = _gate(in_cluster_copy, fake, rollout=False, as_deploy_job=False, deadline_seconds=60)
    assert code == 1 and fake.deleted == []
    assert any("was built from cluster spec" in r and "never replaces" in r for r in report["reasons"]), \
        report["reasons"]


def test_a_rollback_that_applies_the_gate_before_the_rayservice_still_rolls_back(
        in_cluster_copy, fake: FakeDeployment, disaggregated, another_spec):
    """CloudFormation does not document its rollback order. If it re-applies the old gate's
    manifest first, the old gate sees the failed deploy's RayService for a while: it waits for its
    own spec to come back (``replaced_grace_seconds``) instead of failing at once."""
    import threading

    a, b = disaggregated, another_spec
    fake.scenario = Scenario(promote_after_polls=2, failing_specs={b.settings["cluster_spec_hash"]: "ImagePullBackOff"})
    fake.deploy(b.rayservice, b.settings)
    fake.kuberay.delete(fake.active)
    for _ in range(3):
        fake.rayservice_object()  # B's cluster is pending, never serving
    old_gate = _old_gate_settings(fake, a.settings)
    restore = threading.Timer(2.0, fake.deploy, (a.rayservice, a.settings))
    restore.start()
    try:
        result = run_gate(in_cluster_copy, fake, old_gate)
    finally:
        restore.cancel()
    report = _report(result)
    assert result.returncode == 0, report["reasons"]
    assert fake.pending == "" and _hashes(fake, fake.active) == {a.settings["cluster_spec_hash"]}


def _old_gate_settings(fake: FakeDeployment, settings: dict[str, Any]) -> dict[str, Any]:
    """The old gate's settings (A's spec) with the fake's loopback endpoints."""
    current = fake.settings
    fake.settings = settings
    try:
        return fake.gate_settings()
    finally:
        fake.settings = current


def test_a_rayservice_without_the_hash_annotation_is_refused_not_rolled_out_forever(in_cluster_copy, fake):
    """Every cluster KubeRay built from such a spec would read as stale: deleting them would never end."""
    service = json.loads(json.dumps(fake.rayservice))
    for group in [service["spec"]["rayClusterConfig"]["headGroupSpec"], *service["spec"]["rayClusterConfig"]["workerGroupSpecs"]]:
        group["template"]["metadata"]["annotations"].pop("ray-llm-eks/cluster-spec-hash")
    fake.rayservice = service
    code, report = _gate(in_cluster_copy, fake, replaced_grace_seconds=0)
    assert code == 1 and fake.deleted == []
    assert any("carries cluster spec hash ['(none)']" in r for r in report["reasons"]), report["reasons"]
