"""The gate with no wait condition (``kubernetes_owner: gitops``): its exit status is the signal.

The in-cluster program (``python -S``, standard library only) against the loopback fake cluster,
with the Job's environment of GitOps mode: neither ``GATE_SIGNAL_URL`` nor ``GATE_SIGNAL_SECRET``.
The Job (``backoffLimit: 0``) then succeeds or fails with the gate, which is what Argo CD's
PostSync hook and Flux's health check read; the report is in the report ConfigMap as in CDK mode.
"""

from __future__ import annotations

import json

import pytest

from fake_cluster import FakeDeployment, Scenario, run_gate

from ray_llm_eks.base import wire

pytestmark = pytest.mark.integration


def _report_config_map(fake: FakeDeployment) -> dict:
    (config_map,) = [c for c in fake.created_config_maps
                     if c["metadata"]["labels"].get(wire.COMPONENT_LABEL) == wire.GATE_REPORT_COMPONENT]
    return json.loads(config_map["data"][wire.GATE_REPORT_FILE])


def test_a_passing_gate_exits_0_and_signals_nothing(in_cluster_copy, fake: FakeDeployment):
    result = run_gate(in_cluster_copy, fake, fake.gate_settings())
    assert result.returncode == 0, result.stderr
    assert fake.signals == []  # no PUT anywhere: there is no wait condition
    assert "no wait condition to signal: the verdict is this Job's exit status (0: the Job succeeds)" in result.stderr
    assert _report_config_map(fake)["verdict"] == "pass"
    assert json.loads(result.stdout)["verdict"] == "pass"


def test_a_failing_gate_exits_1_so_the_job_and_the_sync_fail(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(serve_final=("DEPLOY_FAILED", True))
    result = run_gate(in_cluster_copy, fake, fake.gate_settings(deadline_seconds=60))
    assert result.returncode == 1
    assert fake.signals == []
    assert "(1: the Job fails)" in result.stderr
    report = _report_config_map(fake)
    assert report["verdict"] == "fail"
    assert any("failed to deploy the spec's config" in r for r in report["reasons"]), report["reasons"]
