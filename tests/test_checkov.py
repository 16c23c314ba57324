"""checkov 3.3.30 on every option's build (tests/helpers/scanners.py, ``BUILDS``): the template,
every manifest, and the Ray pods (checkov cannot read the RayService CRD, so its head and worker
pod templates are scanned as Pods). Every failure must be in ``tests/checkov_allowlist.yaml`` with
its reason, and every allowlist entry must still match a failure in some build.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers.scanners import BUILDS, checkov_failures, describe, stale, unexplained

pytestmark = pytest.mark.integration

ALLOWLIST = yaml.safe_load((Path(__file__).parent / "checkov_allowlist.yaml").read_text())


def test_every_build_was_scanned_by_both_frameworks_with_the_ray_pods(checkov_scan):
    assert set(checkov_scan) == set(BUILDS)
    for build, checks in checkov_scan.items():
        assert {c["check_type"] for c in checks} == {"cloudformation", "kubernetes"}, build
        resources = {c["resource"] for c in checks}
        for pod in ("head", "prefill", "decode"):
            assert any(r.startswith("Pod.") and r.endswith(f"-{pod}") for r in resources), (build, pod)
        assert any(r.startswith("DaemonSet.") for r in resources), build
        assert any(r.startswith("AWS::EKS::Cluster.") for r in resources), build


def test_every_failure_is_allowlisted_with_a_reason(checkov_scan):
    assert describe(unexplained(ALLOWLIST, checkov_failures(checkov_scan))) == ""
    assert all(isinstance(entry["reason"], str) and len(entry["reason"].split()) >= 8 for entry in ALLOWLIST)


def test_every_allowlist_entry_is_still_needed(checkov_scan):
    assert stale(ALLOWLIST, checkov_failures(checkov_scan)) == []


def test_the_hardening_checks_pass(checkov_scan):
    """What this project fixed must stay fixed: no token in the Ray pods, network policies in the
    namespace, the head without capabilities, probes on the EFA counter readers."""
    passed = {(c["check_id"], c["resource"]) for c in checkov_scan["default"] if c["outcome"] == "passed_checks"}
    assert ("CKV_K8S_38", "Pod.inference.ray-llm-head") in passed  # no service account token
    assert ("CKV_K8S_37", "Pod.inference.ray-llm-head") in passed  # no capabilities
    assert ("CKV_K8S_31", "Pod.inference.ray-llm-head") in passed  # seccomp RuntimeDefault
    assert ("CKV_K8S_8", "DaemonSet.inference.ray-llm-efa-counters") in passed  # liveness probe


def test_the_ipc_lock_profile_passes_what_privileged_fails(checkov_scan):
    passed = {(c["check_id"], c["resource"]) for c in checkov_scan["ipc-lock"] if c["outcome"] == "passed_checks"}
    for worker in ("prefill", "decode"):
        assert ("CKV_K8S_16", f"Pod.inference.ray-llm-{worker}") in passed  # not privileged
        assert ("CKV_K8S_20", f"Pod.inference.ray-llm-{worker}") in passed  # no privilege escalation
