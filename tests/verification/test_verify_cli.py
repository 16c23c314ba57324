"""``ray-llm-eks verify``: the same gate, from a workstation, through the API server's proxy.

The kubeconfig uses an ``exec`` credential plugin, as ``aws eks update-kubeconfig`` writes one
(here a Python one-liner printing an ``ExecCredential``; ``aws eks get-token`` needs AWS).
"""

from __future__ import annotations

import json
import subprocess
import sys

from fake_cluster import TCP_LINES, FakeDeployment, Scenario, kubeconfig_for as _kubeconfig


def _verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", "verify", *args],
                          capture_output=True, text=True, timeout=120)


def _deployed_settings(fake: FakeDeployment) -> dict:
    # What the ConfigMap in the cluster holds: in-cluster Service URLs, reached here through the proxy.
    return {**fake.gate_settings(), "openai_url": fake.settings["openai_url"]}


def test_verify_passes_through_the_api_server_proxy(fake: FakeDeployment, tmp_path):
    fake.apply_gate_settings(_deployed_settings(fake))
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report.get("reasons") or done.stderr
    assert report["probes"]["via_api_server_proxy"] is True and report["probes"]["ok"] == 3
    assert report["transport"]["provider"] == "efa"
    assert fake.deleted == []  # read-only: never rolls out
    # The API server was admitted for the run only, to the ports the gate probes, and nothing else.
    (created, deleted) = fake.policy_history
    assert created[0] == "POST" and deleted == ("DELETE", created[1])
    assert created[1].startswith("ray-llm-verify-api-proxy-")
    assert fake.network_policies == {}


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


def test_verify_with_ray_token_auth_needs_neither_the_token_nor_the_dashboard(fake: FakeDeployment, tmp_path):
    fake.ray_auth_token = "s3cr3t-token"
    fake.stored_auth_options = {"mode": "token"}
    fake.apply_gate_settings({**_deployed_settings(fake), "ray_auth": "token"})
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report.get("reasons") or done.stderr
    assert (fake.dashboard_calls, fake.secret_reads) == ([], [])
    # Its temporary admission of the API server never opened the dashboard's port.
    opened = {p.get("port") for policy in fake.policy_history_bodies for rule in policy["spec"].get("ingress") or []
              for p in rule.get("ports") or []}
    assert 8265 not in opened and opened


def test_verify_fails_on_a_tcp_fallback(fake: FakeDeployment, tmp_path):
    fake.scenario = Scenario(worker_log=["INFO Backend LIBFABRIC was instantiated",
                                         "I1130 libfabric_topology.cpp:142] Discovered 1 tcp devices (TCP fallback)"])
    fake.apply_gate_settings(_deployed_settings(fake))
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


def test_settings_this_version_cannot_read_fail_with_a_sentence(fake: FakeDeployment, tmp_path):
    fake.apply_gate_settings({**_deployed_settings(fake), "a_newer_setting": 1})
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json")
    assert done.returncode == 1
    assert "cannot use the gate settings found in the cluster: unknown gate settings: a_newer_setting" in \
        json.loads(done.stdout)["error"]


def test_verify_expect_provider_reaches_the_gate(fake: FakeDeployment, tmp_path):
    """``--expect-provider tcp`` against workers on efa: the gate now expects tcp, and says why it failed."""
    fake.apply_gate_settings(_deployed_settings(fake))
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20",
                   "--expect-provider", "tcp")
    report = json.loads(done.stdout)
    assert done.returncode == 1
    assert any("NIXL rails use provider efa, not tcp" in r for r in report["reasons"]), report["reasons"]


def test_verify_expecting_tcp_passes_libfabric_on_tcp(fake: FakeDeployment, tmp_path):
    fake.scenario = Scenario(worker_log=list(TCP_LINES))
    fake.apply_gate_settings(_deployed_settings(fake))
    done = _verify("--kubeconfig", str(_kubeconfig(tmp_path, fake.api_url)), "--json", "--timeout", "20",
                   "--expect-provider", "tcp")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report.get("reasons") or done.stderr
    assert report["transport"]["provider"] == "tcp"


def test_a_composed_deployment_is_verified_through_its_serving_spec(tmp_path):
    """An app composed from the constructs has no YAML file: it verifies with the serving construct's
    spec, and the gate reads the settings that app's own charts rendered (here in the namespace the
    app chose, not the reference deployment's)."""
    from helpers.composition import compose
    from ray_llm_eks.base.serving import ServiceSettings
    from ray_llm_eks.verify import verify_deployment

    serving = compose(ServiceSettings(namespace="team-a")).serving
    rayservice = next(o for o in serving.serving_charts.rayservice.to_json() if o["kind"] == "RayService")
    settings = serving.gate.settings.to_json()
    assert settings["namespace"] == "team-a"
    fake = FakeDeployment(tmp_path, rayservice, settings, Scenario())
    try:
        fake.apply_gate_settings(_deployed_settings(fake))
        report = verify_deployment(serving.spec, kubeconfig=_kubeconfig(tmp_path, fake.api_url), timeout_s=20)
    finally:
        fake.close()
    assert report.verdict == "pass", report.reasons
    document = report.to_json()
    assert (document["namespace"], document["ray_service"]) == ("team-a", serving.spec.service_name)
    assert document["probes"]["via_api_server_proxy"] is True
    assert fake.deleted == [] and fake.network_policies == {}
