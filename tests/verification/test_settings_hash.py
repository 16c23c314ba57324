"""Continuous verification runs only on the settings rendered beside it: its CronJob's pod carries
their SHA-256, and a settings ConfigMap replaced since (deleted and created again, same name, other
thresholds) is refused before anything is checked or published."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import cdk8s
import pytest
from fake_cluster import FakeDeployment, program_env

from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base import wire
from ray_llm_eks.base.observability import ObservabilitySpec
from ray_llm_eks.cdk8s_charts import build_serving_charts
from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart
from ray_llm_eks.verification import bundle

pytestmark = pytest.mark.integration

OWN_NAMESPACE = "RayLlmEks/RayLlmEks/inference/ray-llm"


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    """The reference deployment with continuous verification, rendered: its CronJob's container env,
    its settings ConfigMap's ``gate.json`` text, and the program archive, alone in a folder."""
    specs = Deployment(observability=ObservabilitySpec(verify_every_minutes=10)).specs()
    app = cdk8s.App()
    charts = build_serving_charts(app, specs.serving)
    chart = build_verification_chart(app, specs.serving, specs.verification,
                                     GatePlan.of(specs.serving, specs.verification, charts), charts, None,
                                     OWN_NAMESPACE)
    objects = chart.to_json()
    (cron,) = [o for o in objects if o["kind"] == "CronJob"]
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    (settings,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == chart.settings_name]
    (program,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-gate-program")]
    folder = tmp_path_factory.mktemp("program")
    (folder / bundle.ARCHIVE).write_bytes(base64.b64decode(program["binaryData"][bundle.ARCHIVE]))
    return env, settings["data"][wire.GATE_SETTINGS_FILE], folder


def _run(folder, env: dict[str, str], text: str, tmp_path) -> subprocess.CompletedProcess[str]:
    """The in-cluster program (``python -S``, the rendered archive) with the pod's env, on ``text``;
    no cluster at all: a refused run must not reach one."""
    config = tmp_path / "gate.json"
    config.write_text(text)
    return subprocess.run(
        [sys.executable, "-S", "-m", bundle.IN_CLUSTER_PACKAGE, "run", "--config", str(config),
         "--kube-api", "http://127.0.0.1:9", "--kube-token-file", str(tmp_path / "absent-token"),
         "--publish", OWN_NAMESPACE],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", **program_env(folder), wire.SETTINGS_SHA256_ENV: env[wire.SETTINGS_SHA256_ENV]})


@pytest.mark.parametrize(("key", "value"), [
    ("probes", 1),  # fewer probes: an easier bar
    ("expected_provider", "tcp"),  # libfabric's tcp provider would pass as the KV path
    ("min_kv_fraction", 0.0),  # any KV byte count would do
])
def test_a_replaced_settings_config_map_is_refused_before_the_cluster_is_read(monitored, tmp_path, key, value):
    env, rendered, folder = monitored
    tampered = {**json.loads(rendered), key: value}
    assert json.loads(rendered)[key] != value
    done = _run(folder, env, json.dumps(tampered, indent=2), tmp_path)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["verdict"] == "fail"
    (reason,) = report["reasons"]
    assert f"not {env[wire.SETTINGS_SHA256_ENV]}, the hash rendered into this pod" in reason
    assert "the settings ConfigMap was replaced after the deploy" in reason
    assert "published" not in done.stderr  # nothing reached CloudWatch under the replaced settings


def test_matching_settings_verify_and_publish(fake: FakeDeployment, monkeypatch):
    """In process against the loopback deployment: one setting changed under the pod's hash fails
    without asking the deployment anything or publishing; the settings of that hash, written as the
    chart writes them (indented, sorted) or compactly, verify and publish as before."""
    import datetime

    import boto3
    from moto import mock_aws

    from ray_llm_eks.verification.__main__ import main

    settings = fake.gate_settings()
    config = fake.tmp / "gate.json"
    for name, value in {"AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing",
                        wire.SETTINGS_SHA256_ENV: wire.settings_sha256(settings)}.items():
        monkeypatch.setenv(name, value)
    overrides = json.dumps({"rollout": False, "as_deploy_job": False, "deadline_seconds": 60})
    now = datetime.datetime.now(datetime.timezone.utc)
    codes = []
    with mock_aws():
        for text in (json.dumps({**settings, "probes": 1}), json.dumps(settings, indent=2, sort_keys=True),
                     json.dumps(settings)):
            config.write_text(text)
            codes.append(main(["run", "--config", str(config), "--kube-api", fake.api_url, "--kube-token-file",
                               str(fake.token_file), "--set", overrides, "--publish", OWN_NAMESPACE]))
            if len(codes) == 1:
                assert fake.requests_served == 0  # the refused run asked the deployment nothing
        client = boto3.client("cloudwatch", region_name="us-west-2")
        dimensions = [{"Name": "Namespace", "Value": settings["namespace"]},
                      {"Name": "RayService", "Value": settings["ray_service"]}]
        data = client.get_metric_statistics(Namespace=OWN_NAMESPACE, MetricName="TransportVerified",
                                            Dimensions=dimensions, StartTime=now - datetime.timedelta(minutes=5),
                                            EndTime=now + datetime.timedelta(minutes=5), Period=600,
                                            Statistics=["SampleCount", "Minimum"])
    assert codes == [1, 0, 0]
    (point,) = data["Datapoints"]
    assert (point["SampleCount"], point["Minimum"]) == (2, 1.0)  # the two passing runs; none from the refused one
