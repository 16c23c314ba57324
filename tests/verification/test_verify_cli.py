"""``ray-llm-eks verify``: the same gate, from a workstation, through the API server's proxy.

The kubeconfig uses an ``exec`` credential plugin, as ``aws eks update-kubeconfig`` writes one
(here a Python one-liner printing an ``ExecCredential``; ``aws eks get-token`` needs AWS).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import fake_cluster
from fake_cluster import TCP_LINES, FakeDeployment, Scenario, kubeconfig_for as _kubeconfig, run_cli
from helpers.gate import Deployed

from ray_llm_eks.base import wire

pytestmark = pytest.mark.integration


PACE = json.dumps(fake_cluster.PACE)
"""Poll and wait times only (``verify.PACE_SETTINGS``): the fake answers at once. What is checked is the
local configuration's, as on a cluster."""


def _verify(*args: str) -> subprocess.CompletedProcess[str]:
    """In this process (``run_cli``); test_verify_passes_through_the_api_server_proxy starts the program."""
    return run_cli("verify", "--pace", PACE, *args)


def _apply_deployed(fake: FakeDeployment, deployed: Deployed) -> None:
    """The settings ConfigMap exactly as the deploy applied it (the chart's name, labels and data)."""
    rendered = deployed.settings_config_map
    fake.apply_config_map(rendered["metadata"]["name"], rendered["metadata"]["labels"], dict(rendered["data"]))


def _proxy_ports(policy: dict) -> set[int]:
    (rule,) = policy["spec"]["ingress"]
    return {port["port"] for port in rule["ports"]}


def test_verify_passes_through_the_api_server_proxy(fake: FakeDeployment, disaggregated, tmp_path):
    _apply_deployed(fake, disaggregated)
    done = subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", "verify", "--pace", PACE, "--kubeconfig",
                           str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20"],
                          capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    assert done.returncode == 0, report.get("reasons") or done.stderr
    assert report["probes"]["via_api_server_proxy"] is True
    assert report["probes"]["ok"] == disaggregated.settings["probes"]
    assert report["transport"]["provider"] == "efa"
    assert fake.deleted == []  # read-only: never rolls out
    # The API server was admitted for the run only, to the ports the gate probes, and nothing else.
    (created, deleted) = fake.policy_history
    assert created[0] == "POST" and deleted == ("DELETE", created[1])
    assert created[1].startswith("ray-llm-verify-api-proxy-")
    assert fake.network_policies == {}
    # The local settings' ports: OpenAI, the workers' metrics, the counter readers (never the dashboard).
    (policy,) = fake.policies_created
    assert _proxy_ports(policy) == {8000, disaggregated.settings["metrics_port"],
                                    disaggregated.settings["efa_counter_port"]} == {8000, 8080, 9475}


def test_a_newer_settings_configmap_planted_in_the_cluster_is_not_used(fake: FakeDeployment, disaggregated, tmp_path):
    """The gate's account may create ConfigMaps: one with the deploy's labels, newer, asking for no KV
    and the tcp provider and naming other ports, changes nothing. The run uses the local settings."""
    _apply_deployed(fake, disaggregated)
    planted = {**disaggregated.settings, "run_id": "0bad0bad", "min_kv_fraction": 0, "expected_provider": "tcp",
               "metrics_port": 22, "efa_counter_port": 6379}
    fake.apply_gate_settings(planted, created=time.time() + 60)
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report.get("reasons") or done.stderr
    assert report["transport"]["provider"] == "efa"
    (policy,) = fake.policies_created
    assert _proxy_ports(policy) == {8000, 8080, 9475}


def test_a_cluster_copy_that_differs_is_refused_naming_what_differs(fake: FakeDeployment, disaggregated, tmp_path):
    """The deploy's own ConfigMap name holding other settings: refused before anything is created."""
    rendered = disaggregated.settings_config_map
    changed = {**disaggregated.settings, "min_kv_fraction": 0, "expected_provider": "tcp"}
    fake.apply_config_map(rendered["metadata"]["name"], rendered["metadata"]["labels"],
                          {wire.GATE_SETTINGS_FILE: json.dumps(changed)})
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20")
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert f"the gate settings in the cluster (inference/{rendered['metadata']['name']}) differ from the local " \
           "configuration's, so they are refused" in error
    assert 'expected_provider: cluster "tcp", local "efa"' in error
    assert f"min_kv_fraction: cluster 0, local {disaggregated.settings['min_kv_fraction']}" in error
    assert "probes" not in error  # only what differs
    assert fake.policies_created == []  # nothing admitted, nothing probed


def test_a_cluster_without_this_runs_settings_is_refused(fake: FakeDeployment, another_spec, tmp_path):
    """The cluster runs another spec (another image here) than the local configuration."""
    _apply_deployed(fake, another_spec)
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20")
    assert done.returncode == 1
    assert "the cluster has no gate settings ConfigMap inference/ray-llm-gate-" in json.loads(done.stdout)["error"]
    assert fake.policies_created == []


def test_pace_may_not_change_what_is_checked(fake: FakeDeployment, disaggregated, tmp_path):
    from ray_llm_eks.verify import deployed_gate

    _apply_deployed(fake, disaggregated)
    with pytest.raises(ValueError, match="pace may set only poll_seconds, metrics_settle_seconds, "
                                         "post_probe_reserve_seconds, serve_settle_seconds \\(got min_kv_fraction\\)"):
        deployed_gate(disaggregated.config, kubeconfig=_kubeconfig(tmp_path, fake.api_url),
                      pace={"min_kv_fraction": 0})


def test_verify_admits_only_the_api_server_to_the_probed_ports(fake: FakeDeployment, tmp_path):
    from ray_llm_eks.verification.api_proxy import admitted
    from ray_llm_eks.verification.kube import Kube, KubeAccess

    kube = Kube(KubeAccess.with_token_file(fake.api_url, str(fake.token_file)))
    with admitted(kube, fake.namespace, fake.name, "ray-llm-eks/instance", [8000, 8265, 8080, 8000]) as body:
        assert fake.network_policies[body["metadata"]["name"]] == body
        (rule,) = body["spec"]["ingress"]
        assert rule == {"from": [{"ipBlock": {"cidr": "10.0.32.17/32"}}, {"ipBlock": {"cidr": "10.0.96.201/32"}}],
                        "ports": [{"protocol": "TCP", "port": p} for p in (8000, 8080, 8265)]}
        assert body["spec"]["podSelector"] == {"matchLabels": {"ray-llm-eks/instance": fake.name}}
    assert fake.network_policies == {}


def test_the_policy_is_removed_when_the_run_fails_and_two_runs_do_not_share_one(fake: FakeDeployment, tmp_path):
    import pytest

    from ray_llm_eks.verification.api_proxy import admitted
    from ray_llm_eks.verification.kube import Kube, KubeAccess

    kube = Kube(KubeAccess.with_token_file(fake.api_url, str(fake.token_file)))
    with admitted(kube, fake.namespace, fake.name, "ray-llm-eks/instance", [8000]) as first:
        with admitted(kube, fake.namespace, fake.name, "ray-llm-eks/instance", [8000]) as second:
            assert first["metadata"]["name"] != second["metadata"]["name"]
        assert list(fake.network_policies) == [first["metadata"]["name"]]  # the other run's is still there
    with pytest.raises(RuntimeError), admitted(kube, fake.namespace, fake.name, "ray-llm-eks/instance", [8000]):
        raise RuntimeError("the gate crashed")
    assert fake.network_policies == {}


def test_sigterm_still_removes_the_policy(fake: FakeDeployment, tmp_path):
    import os
    import signal

    import pytest

    from ray_llm_eks.verification.api_proxy import admitted
    from ray_llm_eks.verification.kube import Kube, KubeAccess

    kube = Kube(KubeAccess.with_token_file(fake.api_url, str(fake.token_file)))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit), admitted(kube, fake.namespace, fake.name, "ray-llm-eks/instance", [8000]):
        os.kill(os.getpid(), signal.SIGTERM)
    assert fake.network_policies == {}
    assert signal.getsignal(signal.SIGTERM) is before


def test_without_the_policy_the_proxy_is_dropped_as_on_a_cluster(fake: FakeDeployment, tmp_path):
    """The fake enforces like the VPC CNI: the API server's proxy reaches nothing no policy admits."""
    import urllib.error
    import urllib.request

    import pytest

    request = urllib.request.Request(f"{fake.api_url}/api/v1/namespaces/{fake.namespace}/services/x-openai:8000/proxy/v1/models",
                                     headers={"Authorization": "Bearer test-token"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 503


def test_verify_with_ray_token_auth_needs_neither_the_token_nor_the_dashboard(tmp_path):
    from helpers.gate import render_deployment

    from ray_llm_eks.config import load_config

    config = tmp_path / "token.yaml"
    config.write_text("strict: false\nversions:\n  kuberay: \"1.5.1\"\nserving:\n  ray_auth: token\n")
    deployed = render_deployment(load_config(config))
    assert deployed.settings["ray_auth"] == "token"
    fake = FakeDeployment(tmp_path, deployed.rayservice, deployed.settings, Scenario())
    try:
        fake.ray_auth_token = "s3cr3t-token"
        fake.stored_auth_options = {"mode": "token"}
        _apply_deployed(fake, deployed)
        done = _verify("--config", str(config), "--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json",
                       "--timeout", "20")
    finally:
        fake.close()
    report = json.loads(done.stdout)
    assert done.returncode == 0, report.get("reasons") or done.stderr
    assert (fake.dashboard_calls, fake.secret_reads) == ([], [])
    # Its temporary admission of the API server never opened the dashboard's port.
    opened = {p.get("port") for policy in fake.policy_history_bodies for rule in policy["spec"].get("ingress") or []
              for p in rule.get("ports") or []}
    assert 8265 not in opened and opened


def test_verify_fails_on_a_tcp_fallback(fake: FakeDeployment, disaggregated, tmp_path):
    fake.scenario = Scenario(worker_log=[TCP_LINES[3], TCP_LINES[1]])  # LIBFABRIC, on tcp
    _apply_deployed(fake, disaggregated)
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--timeout", "20")
    assert done.returncode == 1
    assert "FAIL" in done.stdout and "fell back to TCP" in done.stdout


def test_refused_credentials_exit_3(fake: FakeDeployment, tmp_path):
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url, fail=True)), "--json")
    assert done.returncode == 3
    assert "credential plugin" in json.loads(done.stdout)["error"]


def test_a_wrong_token_exits_3(fake: FakeDeployment, tmp_path):
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url, token="expired")), "--json")
    assert done.returncode == 3


def test_an_unreachable_api_server_exits_3(tmp_path):
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, "http://127.0.0.1:9")), "--json")
    assert done.returncode == 3
    assert "cannot reach the API server" in json.loads(done.stdout)["error"]


def test_settings_a_newer_version_deployed_are_refused_with_a_sentence(fake: FakeDeployment, disaggregated, tmp_path):
    rendered = disaggregated.settings_config_map
    fake.apply_config_map(rendered["metadata"]["name"], rendered["metadata"]["labels"],
                          {wire.GATE_SETTINGS_FILE: json.dumps({**disaggregated.settings, "a_newer_setting": 1})})
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json")
    assert done.returncode == 1
    assert "differ from the local configuration's, so they are refused: a_newer_setting: cluster 1, local null" in \
        json.loads(done.stdout)["error"]


def test_verify_expect_provider_reaches_the_gate(fake: FakeDeployment, disaggregated, tmp_path):
    """``--expect-provider tcp`` against workers on efa: the gate now expects tcp, and says why it failed."""
    _apply_deployed(fake, disaggregated)
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20",
                   "--expect-provider", "tcp")
    report = json.loads(done.stdout)
    assert done.returncode == 1
    assert any("NIXL rails use provider efa, not tcp" in r for r in report["reasons"]), report["reasons"]


def test_verify_expecting_tcp_passes_libfabric_on_tcp(fake: FakeDeployment, disaggregated, tmp_path):
    fake.scenario = Scenario(worker_log=list(TCP_LINES))
    _apply_deployed(fake, disaggregated)
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20",
                   "--expect-provider", "tcp")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report.get("reasons") or done.stderr
    assert report["transport"]["provider"] == "tcp"


def test_a_composed_deployment_is_verified_through_its_serving_spec(tmp_path):
    """An app composed from the constructs has no YAML file: it verifies with the serving construct's
    specs, rendered as its charts were (here in the namespace the app chose, not the reference
    deployment's): the same run, so the cluster's copy matches."""
    from helpers.composition import compose
    from ray_llm_eks.base.serving import ServiceSettings
    from ray_llm_eks.verify import verify_deployment

    serving = compose(ServiceSettings(namespace="team-a")).serving
    rayservice = next(o for o in serving.serving_charts.rayservice.to_json() if o["kind"] == "RayService")
    settings = serving.gate.settings.to_json()
    assert settings["namespace"] == "team-a"
    fake = FakeDeployment(tmp_path, rayservice, settings, Scenario())
    try:
        (rendered,) = [o for o in serving.verification_chart.to_json()
                       if o["kind"] == "ConfigMap" and o["metadata"]["name"] == serving.gate_job_name]
        fake.apply_config_map(rendered["metadata"]["name"], rendered["metadata"]["labels"], dict(rendered["data"]))
        report = verify_deployment(serving.specs, kubeconfig=_kubeconfig(tmp_path, fake.api_url), timeout_s=20,
                                   pace=json.loads(PACE))
    finally:
        fake.close()
    assert report.verdict == "pass", report.reasons
    document = report.to_json()
    assert (document["namespace"], document["ray_service"]) == ("team-a", serving.spec.service_name)
    assert document["probes"]["via_api_server_proxy"] is True
    assert fake.deleted == [] and fake.network_policies == {}
