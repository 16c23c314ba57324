"""The gate reads the deploy's signal URL from Secrets Manager with its Pod Identity credentials,
standard library only (``verification/aws_secret.py``).

Against moto's server on loopback (``ThreadedMotoServer``) and a loopback stand-in for the EKS Pod
Identity agent that, like the agent, answers only a request carrying the pod's token. The SigV4
signature is compared with botocore's ``SigV4Auth`` for the same request and instant.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
import uuid
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
from fake_cluster import FakeDeployment, program_env

from ray_llm_eks.verification import aws_secret, bundle

REGION = "us-west-2"
POD_TOKEN = "eks-pod-identity-token-abc"
URL = "https://cloudformation-waitcondition-us-west-2.s3.amazonaws.com/arn%3Aaws/GateHandle?X-Amz-Signature=x"


class _Agent(BaseHTTPRequestHandler):
    """The Pod Identity agent's credentials endpoint: 401 without the pod's token."""

    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != POD_TOKEN:
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({"AccessKeyId": "ASIATESTKEY", "SecretAccessKey": "testsecret", "Token": "session-token",
                           "Expiration": "2099-01-01T00:00:00Z"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def agent() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Agent)
    _Agent.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1/credentials"
    server.shutdown()
    server.server_close()


@pytest.fixture()
def moto_server() -> Iterator[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "install moto[server]": flask and flask-cors are what it needs here
        from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def secret(moto_server: str) -> str:
    import boto3

    client = boto3.client("secretsmanager", region_name=REGION, endpoint_url=moto_server,
                          aws_access_key_id="x", aws_secret_access_key="x")
    # moto's backends are per process, not per server: a name of this test's own.
    return client.create_secret(Name=f"GateSignal{uuid.uuid4().hex[:8]}", SecretString=URL)["ARN"]


def _env(agent: str, moto_server: str, tmp_path: Path, token: str = POD_TOKEN) -> dict[str, str]:
    token_file = tmp_path / "eks-pod-identity-token"
    token_file.write_text(token + "\n")
    return {aws_secret.FULL_URI_ENV: agent, aws_secret.TOKEN_FILE_ENV: str(token_file),
            aws_secret.ENDPOINT_ENV: moto_server}


def test_the_url_is_read_with_the_pods_credentials(agent, moto_server, secret, tmp_path):
    assert aws_secret.get_secret_string(secret, env=_env(agent, moto_server, tmp_path)) == URL
    assert _Agent.seen == [POD_TOKEN]


def test_without_the_pods_token_the_agent_refuses_and_nothing_is_read(agent, moto_server, secret, tmp_path):
    with pytest.raises(aws_secret.SecretReadError, match="cannot get credentials from .*HTTP Error 401"):
        aws_secret.get_secret_string(secret, env=_env(agent, moto_server, tmp_path, token="another-pods-token"))


def test_without_pod_identity_the_error_says_what_is_missing(secret):
    with pytest.raises(aws_secret.SecretReadError, match="AWS_CONTAINER_CREDENTIALS_FULL_URI .* unset"):
        aws_secret.get_secret_string(secret, env={})


def test_a_missing_secret_names_aws_s_error(agent, moto_server, secret, tmp_path):
    other = secret.replace(":secret:GateSignal", ":secret:NoSuchSecret")
    with pytest.raises(aws_secret.SecretReadError, match=r"refused \(HTTP \d+\): ResourceNotFoundException"):
        aws_secret.get_secret_string(other, env=_env(agent, moto_server, tmp_path))


@pytest.mark.parametrize("arn", ["", "GateSignal", "arn:aws:s3:::bucket", "arn:aws:secretsmanager::123:secret:x"])
def test_only_a_secret_arn_is_accepted(arn):
    with pytest.raises(aws_secret.SecretReadError, match="not a Secrets Manager secret ARN"):
        aws_secret.endpoint_of(arn)


def test_the_endpoint_follows_the_arns_partition_and_region():
    assert aws_secret.endpoint_of("arn:aws:secretsmanager:eu-west-1:1:secret:s-AbCdEf") == \
        ("eu-west-1", "https://secretsmanager.eu-west-1.amazonaws.com/")
    assert aws_secret.endpoint_of("arn:aws-cn:secretsmanager:cn-north-1:1:secret:s-AbCdEf") == \
        ("cn-north-1", "https://secretsmanager.cn-north-1.amazonaws.com.cn/")


@pytest.mark.parametrize("token", ["session-token", None])
def test_the_signature_is_botocores(token):
    """The same request, credentials and instant signed by botocore's SigV4Auth: the same Authorization."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    url = "https://secretsmanager.us-west-2.amazonaws.com/"
    body = json.dumps({"SecretId": "arn:aws:secretsmanager:us-west-2:123456789012:secret:GateSignal-AbCdEf"}).encode()
    headers = {"Content-Type": aws_secret.CONTENT_TYPE, "X-Amz-Target": aws_secret.TARGET}
    now = datetime.datetime(2026, 12, 3, 13, 45, 7, tzinfo=datetime.timezone.utc)
    ours = aws_secret.signed_headers(url, body, headers, aws_secret.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG",
                                                                                token), REGION, "secretsmanager", now)
    request = AWSRequest(method="POST", url=url, data=body, headers=dict(headers))
    auth = SigV4Auth(BotoCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", token), "secretsmanager", REGION)
    request.context["timestamp"] = now.strftime("%Y%m%dT%H%M%SZ")
    # add_auth reads the clock itself; these are its steps with the instant fixed.
    request.headers["X-Amz-Date"] = request.context["timestamp"]
    if token:
        request.headers["X-Amz-Security-Token"] = token
    canonical = auth.canonical_request(request)
    signature = auth.signature(auth.string_to_sign(request, canonical), request)
    expected = (f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261203/{REGION}/secretsmanager/aws4_request, "
                f"SignedHeaders={auth.signed_headers(auth.headers_to_sign(request))}, Signature={signature}")
    assert ours["Authorization"] == expected
    assert ours["X-Amz-Date"] == "20261203T134507Z"
    assert ("X-Amz-Security-Token" in ours) is bool(token)


def test_an_oversized_answer_is_refused(agent, tmp_path):
    """A credentials endpoint (or anything at the URL) that sends more than any real answer is not read on."""
    class Huge(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{" + b" " * (aws_secret.MAX_ANSWER_BYTES + 10) + b"}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Huge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(aws_secret.SecretReadError, match="more than 65536 bytes"):
            aws_secret.container_credentials(_env(f"http://127.0.0.1:{server.server_port}/", "", tmp_path))
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_the_gate_signals_through_the_secret(in_cluster_copy, fake: FakeDeployment, agent, moto_server, tmp_path):
    """The in-cluster program (python -S, standard library only) with the Job's environment: the ARN,
    never the URL. It reads the URL with the pod's credentials and signals the verdict there."""
    import boto3

    client = boto3.client("secretsmanager", region_name=REGION, endpoint_url=moto_server,
                          aws_access_key_id="x", aws_secret_access_key="x")
    arn = client.create_secret(Name=f"GateSignal{uuid.uuid4().hex[:8]}", SecretString=fake.signal_url)["ARN"]
    config = fake.tmp / "gate.json"
    config.write_text(json.dumps(fake.gate_settings()))
    env = {"PATH": "/usr/bin:/bin", **program_env(in_cluster_copy), "GATE_SIGNAL_SECRET": arn,
           **_env(agent, moto_server, tmp_path)}
    result = subprocess.run([sys.executable, "-S", "-m", bundle.IN_CLUSTER_PACKAGE, "run", "--config", str(config),
                             "--kube-api", fake.api_url, "--kube-token-file", str(fake.token_file)],
                            cwd=fake.tmp, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    [(_, body)] = fake.signals
    assert json.loads(body)["Status"] == "SUCCESS"
    assert "signalled CloudFormation: SUCCESS" in result.stderr
    assert fake.signal_url not in result.stdout + result.stderr  # the URL is never logged
