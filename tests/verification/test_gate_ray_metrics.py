"""The gate program end to end against workers that export vLLM's NIXL metrics as Ray Serve LLM
2.58 does (fake_cluster): labelled series, the NIXL histograms on decode only and from its first
transfer, the failure counters only from their first count, replaced replicas' series frozen after
a redeploy; and the expected libfabric provider as a setting of the in-cluster program.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any
from urllib.request import Request, urlopen

import pytest

from fake_cluster import DECODE_IP, EFA_LINES, PREFILL_IP, TCP_LINES, FakeDeployment, Scenario, program_env, run_gate

from ray_llm_eks.verification import bundle
from ray_llm_eks.verification.metrics import NixlTotals

pytestmark = pytest.mark.integration


def _report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def test_before_the_probes_no_worker_exports_nixl(fake: FakeDeployment):
    """The shape itself: a fresh deployment exports no NIXL series; decode's first completion makes
    its histograms appear; prefill never has any."""
    def read(ip: str) -> NixlTotals:
        return NixlTotals.of(urlopen(f"http://{ip}:{fake.metrics_port}/metrics", timeout=5).read().decode())

    assert not read(DECODE_IP).present and not read(PREFILL_IP).present
    body = json.dumps({"model": fake.settings["model"], "messages": [{"role": "user", "content": "hi"}]}).encode()
    urlopen(Request(f"{fake.api_url}/openai/v1/chat/completions", data=body, method="POST",
                    headers={"Content-Type": "application/json"}), timeout=5).read()
    decode, prefill = read(DECODE_IP), read(PREFILL_IP)
    assert decode.transfers_exported and decode.failed is None  # nothing failed: not exported
    assert '"ReplicaId"' in next(iter(decode.series["bytes_transferred"]))
    assert not prefill.present


def test_a_healthy_deployment_passes_with_no_warning_about_prefills_missing_nixl(in_cluster_copy, fake: FakeDeployment):
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "pass", report["reasons"]
    assert report["warnings"] == []
    nixl = report["kv"]["nixl"]
    assert nixl["bytes_transferred"] == report["kv"]["predicted_bytes"]
    assert (nixl["failed_transfers"], nixl["failed_notifications"], nixl["kv_expired_reqs"]) == (0, 0, 0)
    by_role = {entry["role"]: entry for entry in nixl["by_pod"].values()}
    assert by_role["prefill"]["exports_transfers"] is False and by_role["prefill"]["bytes_transferred"] is None
    assert by_role["decode"]["transfers"] == 3


def test_the_first_failed_transfers_fail_the_gate_though_the_counter_did_not_exist_before(in_cluster_copy,
                                                                                          fake: FakeDeployment):
    """No failure line in the logs (rate-limited, or rotated away): vLLM's counter, absent before the
    probes because nothing had failed, is the only witness."""
    fake.scenario = Scenario(failed_transfers=1)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "fail"
    assert report["reasons"] == ["vLLM counted 3 failed NIXL transfer(s) during the probes"]


def test_failed_notifications_and_expired_requests_are_warnings(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(failed_notifications=1, kv_expired_reqs=1)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "pass", report["reasons"]
    nixl = report["kv"]["nixl"]
    assert (nixl["failed_notifications"], nixl["kv_expired_reqs"]) == (3, 3)
    assert {entry["role"]: entry["kv_expired_reqs"] for entry in nixl["by_pod"].values()} == {"prefill": 3,
                                                                                              "decode": 0}
    assert len(report["warnings"]) == 2


def test_decode_without_nixl_metrics_is_a_warning_that_names_it(in_cluster_copy, fake: FakeDeployment):
    """The EFA counters moved the predicted bytes (the proof), but decode's metrics never counted a
    transfer: a warning naming the decode pod, not a failure."""
    fake.scenario = Scenario(nixl_fraction=0.0)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "pass", report["reasons"]
    (warning,) = report["warnings"]
    assert f"no decode worker exports ray_vllm_nixl_bytes_transferred after 3 successful probe(s) " \
           f"({fake.active}-decode-worker-d1)" in warning


def test_after_a_serve_redeploy_the_frozen_series_do_not_double_the_figures(in_cluster_copy, fake: FakeDeployment):
    first = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    fake.redeploy_replicas()  # new replicas; the replaced ones' series stay exported, frozen
    second = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert second["verdict"] == "pass", second["reasons"]
    for report in (first, second):
        kv = report["kv"]
        assert kv["nixl"]["bytes_transferred"] == kv["predicted_bytes"] and kv["nixl"]["transfers"] == 3
        assert kv["nixl_fraction_of_predicted"] == 1.0


def test_the_expected_provider_can_be_set_on_the_in_cluster_program(in_cluster_copy, fake: FakeDeployment):
    """``run --expect-provider``: workers on efa then fail a gate that expects tcp, and say so."""
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(), "--expect-provider", "tcp"))
    assert report["verdict"] == "fail"
    assert any("NIXL rails use provider efa, not tcp" in r for r in report["reasons"]), report["reasons"]


def test_libfabric_on_tcp_passes_the_in_cluster_program_expecting_tcp(in_cluster_copy, fake: FakeDeployment):
    fake.scenario = Scenario(worker_log=list(TCP_LINES))
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings(), "--expect-provider", "tcp"))
    assert report["transport"]["provider"] == "tcp"
    assert report["verdict"] == "pass", report["reasons"]


def _classify(program, tmp_path, lines: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    log = tmp_path / "decode.log"
    log.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, "-S", "-m", bundle.IN_CLUSTER_PACKAGE, "classify", str(log), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, env=program_env(program))


def test_the_in_cluster_classifier_takes_the_expected_provider(in_cluster_copy, tmp_path):
    assert _classify(in_cluster_copy, tmp_path, EFA_LINES).returncode == 0
    done = _classify(in_cluster_copy, tmp_path, EFA_LINES, "--expect-provider", "tcp")
    assert done.returncode == 1
    assert json.loads(done.stdout)["expected"] == {"backend": "LIBFABRIC", "provider": "tcp"}
    missing = subprocess.run([sys.executable, "-S", "-m", bundle.IN_CLUSTER_PACKAGE, "classify",
                              str(tmp_path / "absent.log")], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60, env=program_env(in_cluster_copy))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_the_in_cluster_classifier_passes_libfabric_on_tcp_when_tcp_is_expected(in_cluster_copy, tmp_path):
    assert _classify(in_cluster_copy, tmp_path, TCP_LINES, "--expect-provider", "tcp").returncode == 0
