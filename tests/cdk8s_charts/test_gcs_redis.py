"""The Kubernetes half of serving.gcs_fault_tolerance: KubeRay's options, the alias, the egress, the copy Job."""

from __future__ import annotations

import base64
import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cdk8s
import pytest
from helpers.charts import render
from cdk8s_charts.netpol import Endpoint, allowed

from ray_llm_eks.cdk8s_charts import NETWORK_POLICY_CHART_ID
from ray_llm_eks.cdk8s_charts.admission_policy import ADMISSION_POLICY_CHART_ID
from ray_llm_eks.cdk8s_charts.gcs_redis import SYNC_SCRIPT, GcsRedisChart
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.serving import GcsFaultTolerance, ServiceSettings
from ray_llm_eks.base.wire import INSTANCE_LABEL, RAY_ROLE_LABEL

KUBERNETES_VERSION = "1.35.0"
ENDPOINT = "master.ray-gcs.abc123.usw2.cache.amazonaws.com"


@pytest.fixture(scope="module")
def rendered():
    serving = render(Deployment(serving=ServiceSettings(gcs_fault_tolerance=GcsFaultTolerance(enabled=True))))
    spec = serving.config.specs().serving
    gcs = GcsRedisChart(cdk8s.App(), "serving-gcs-redis", spec=spec, endpoint=ENDPOINT, vpc_cidr="10.0.0.0/16",
                        secret_id="arn:aws:secretsmanager:us-west-2:111122223333:secret:gcs-AbCdEf", run_id="abc123")
    return spec, {**serving.objects, "serving-gcs-redis": cdk8s.Testing.synth(gcs)}


def _one(objects, chart, kind):
    (found,) = [o for o in objects[chart] if o["kind"] == kind]
    return found


def test_kuberay_gets_the_alias_and_the_secret_and_the_crd_accepts_it(rendered, strict_rayservice_validator):
    _, objects = rendered
    service = _one(objects, "serving-rayservice", "RayService")
    assert service["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"] == {
        "redisAddress": "rediss://ray-llm-gcs-redis.inference.svc.cluster.local:6379",
        "redisPassword": {"valueFrom": {"secretKeyRef": {"name": "ray-llm-gcs-redis", "key": "password"}}},
    }
    (head,) = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert head["env"] == [{"name": "RAY_REDIS_CA_CERT", "value": "/etc/ssl/certs/ca-certificates.crt"}]
    # What KubeRay 1.4.0 refuses beside gcsFaultToleranceOptions (utils/validation.go) is absent.
    assert "redis-password" not in service["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]
    assert list(strict_rayservice_validator.iter_errors(service)) == []


def test_the_alias_points_at_the_cache(rendered):
    _, objects = rendered
    alias = _one(objects, "serving-gcs-redis", "Service")
    assert alias["metadata"]["name"] == "ray-llm-gcs-redis"
    assert alias["spec"] == {"type": "ExternalName", "externalName": ENDPOINT}


def test_only_the_head_may_reach_the_cache(rendered):
    _, objects = rendered
    policies = [o for chart in (NETWORK_POLICY_CHART_ID, "serving-gcs-redis") for o in objects[chart]
                if o["kind"] == "NetworkPolicy"]
    own = {INSTANCE_LABEL: "ray-llm"}
    head = Endpoint("10.0.1.10", "inference", {**own, RAY_ROLE_LABEL: "head"})
    worker = Endpoint("10.0.1.11", "inference", {**own, RAY_ROLE_LABEL: "decode"})
    cache = Endpoint("10.0.70.5")
    assert allowed(policies, head, cache, 6379)
    assert not allowed(policies, worker, cache, 6379)
    assert not allowed(policies, head, Endpoint("192.0.2.1"), 6379)  # not outside the VPC
    assert not allowed(policies, head, cache, 6380)


def test_the_copy_job_runs_unprivileged_and_may_write_only_its_secret(rendered):
    spec, objects = rendered
    job = _one(objects, "serving-gcs-redis", "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ray-llm-gcs-redis-secret"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    role = _one(objects, "serving-gcs-redis", "Role")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["update"], "resourceNames": ["ray-llm-gcs-redis"]},
    ]
    # Its pod carries the deployment's label: DNS and HTTPS egress (Secrets Manager, the API) apply.
    assert job["spec"]["template"]["metadata"]["labels"][INSTANCE_LABEL] == "ray-llm"
    # The admission policy lets it run (it asks for nothing).
    from helpers.admission import JOB_CONTROLLER, admits, policy_of

    vap = policy_of(objects[ADMISSION_POLICY_CHART_ID])
    assert admits(vap, "inference", {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": pod}, user=JOB_CONTROLLER)


def test_every_object_passes_kubernetes_validate_strict(rendered):
    import kubernetes_validate

    _, objects = rendered
    for obj in objects["serving-gcs-redis"]:
        kubernetes_validate.validate(copy.deepcopy(obj), KUBERNETES_VERSION, strict=True)


class _FakeApi(BaseHTTPRequestHandler):
    """Just enough of the API server for the copy Job: create, or 409 then replace."""

    secrets: dict[str, dict] = {}
    calls: list[tuple[str, str, str | None]] = []

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_POST(self) -> None:  # noqa: N802
        body = self._body()
        self.calls.append(("POST", self.path, self.headers.get("Authorization")))
        if body["metadata"]["name"] in self.secrets:
            return self._reply(409)
        self.secrets[body["metadata"]["name"]] = body
        self._reply(201)

    def do_PUT(self) -> None:  # noqa: N802
        body = self._body()
        self.calls.append(("PUT", self.path, self.headers.get("Authorization")))
        self.secrets[body["metadata"]["name"]] = body
        self._reply(200)

    def _reply(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


def test_the_copy_program_creates_then_replaces_the_secret(tmp_path, monkeypatch):
    """SYNC_SCRIPT as the Job runs it, against moto's Secrets Manager and a loopback API server."""
    import boto3
    from moto import mock_aws

    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    env = {"SECRET_ID": "gcs/password", "SECRET_NAME": "ray-llm-gcs-redis", "NAMESPACE": "inference",
           "KEY": "password", "AWS_REGION": "us-west-2", "LABELS": '{"app.kubernetes.io/name": "ray-llm-eks"}',
           "KUBE_API": f"http://127.0.0.1:{server.server_address[1]}", "KUBE_TOKEN_FILE": str(token),
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        with mock_aws():
            client = boto3.client("secretsmanager", region_name="us-west-2")
            client.create_secret(Name="gcs/password", SecretString="first-password")
            exec(compile(SYNC_SCRIPT, "copy-password", "exec"), {"__name__": "__main__"})
            client.put_secret_value(SecretId="gcs/password", SecretString="second-password")
            exec(compile(SYNC_SCRIPT, "copy-password", "exec"), {"__name__": "__main__"})
    finally:
        server.shutdown()
    secret = _FakeApi.secrets["ray-llm-gcs-redis"]
    assert base64.b64decode(secret["data"]["password"]).decode() == "second-password"
    assert secret["metadata"]["labels"] == {"app.kubernetes.io/name": "ray-llm-eks"}
    assert [(m, p) for m, p, _ in _FakeApi.calls] == [
        ("POST", "/api/v1/namespaces/inference/secrets"), ("POST", "/api/v1/namespaces/inference/secrets"),
        ("PUT", "/api/v1/namespaces/inference/secrets/ray-llm-gcs-redis")]
    assert {auth for _, _, auth in _FakeApi.calls} == {"Bearer sa-token"}
