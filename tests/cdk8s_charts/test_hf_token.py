"""The optional Hugging Face token: from Secrets Manager at pod start, never in the template or manifests."""

from __future__ import annotations

import json
import os
import stat

import pytest
from helpers.charts import render

from ray_llm_eks.cdk8s_charts import hf_token, model_cache
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.serving import ModelSpec

SECRET_ARN = "arn:aws:secretsmanager:us-east-1:111122223333:secret:hf/token-AbCdEf"


def test_without_a_secret_the_workers_are_unchanged(scenario):
    for role in ("prefill", "decode"):
        spec = scenario("disaggregated").worker_group(role)["template"]["spec"]
        assert [c["name"] for c in spec["initContainers"]] == [model_cache.HF_CACHE_INIT_CONTAINER]
        assert "HF_TOKEN_PATH" not in {e["name"] for e in spec["containers"][0]["env"]}


@pytest.fixture(scope="module")
def with_secret():
    return render(Deployment(model=ModelSpec(hf_token_secret=SECRET_ARN)))


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_each_worker_reads_the_token_into_a_memory_volume_only_it_mounts(with_secret, role):
    spec = with_secret.worker_group(role)["template"]["spec"]
    init = {c["name"]: c for c in spec["initContainers"]}[hf_token.HF_TOKEN_INIT_CONTAINER]
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env == {"HF_TOKEN_SECRET": SECRET_ARN, "AWS_REGION": "us-east-1",  # the secret's own region
                   "HF_TOKEN_PATH": hf_token.HF_TOKEN_FILE}
    assert init["image"] == spec["containers"][0]["image"]  # nothing else to pull
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    volume = {v["name"]: v for v in spec["volumes"]}[hf_token.HF_TOKEN_VOLUME]
    assert volume["emptyDir"]["medium"] == "Memory"
    (worker,) = spec["containers"]
    assert {e["name"]: e.get("value") for e in worker["env"]}["HF_TOKEN_PATH"] == hf_token.HF_TOKEN_FILE
    mount = {m["name"]: m for m in worker["volumeMounts"]}[hf_token.HF_TOKEN_VOLUME]
    assert mount == {"name": "hf-token", "mountPath": hf_token.HF_TOKEN_DIR, "readOnly": True}
    # Guaranteed QoS holds with the extra init container (requests equal limits).
    assert init["resources"]["requests"] == init["resources"]["limits"]
    assert "HF_TOKEN" not in {e["name"] for e in worker["env"]}  # it would win over the file


def test_the_head_carries_no_token(with_secret):
    spec = with_secret.head_group["template"]["spec"]
    assert hf_token.HF_TOKEN_VOLUME not in {v["name"] for v in spec.get("volumes", [])}


@pytest.mark.parametrize("value", ["", "arn:aws:s3:::bucket/token", "has space", "x" * 513])
def test_a_bad_secret_is_refused_with_the_field(value):
    with pytest.raises(SpecErrors, match=r"^ModelSpec: hf_token_secret: not a Secrets Manager secret ARN or name"):
        ModelSpec(hf_token_secret=value)


def test_the_script_writes_the_secret_for_huggingface_hub_mode_0400(tmp_path, monkeypatch):
    """The init container's program, run against moto's Secrets Manager (in-process)."""
    import boto3
    from moto import mock_aws

    path = tmp_path / "token"
    for name, value in {"HF_TOKEN_SECRET": "hf/token", "AWS_REGION": "us-west-2", "HF_TOKEN_PATH": str(path),
                        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        boto3.client("secretsmanager", region_name="us-west-2").create_secret(Name="hf/token",
                                                                               SecretString="hf_abc123\n")
        exec(compile(hf_token.HF_TOKEN_SCRIPT, "hf-token", "exec"), {"__name__": "__main__"})
    assert path.read_text() == "hf_abc123"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o400
    # huggingface_hub reads exactly that variable for the token file (v0.23+).
    hub_constants = pytest.importorskip("huggingface_hub.constants")
    assert "HF_TOKEN_PATH" in open(hub_constants.__file__).read()


def test_an_empty_secret_stops_the_pod_with_a_reason(tmp_path, monkeypatch):
    import boto3
    from moto import mock_aws

    for name, value in {"HF_TOKEN_SECRET": "hf/empty", "AWS_REGION": "us-west-2", "HF_TOKEN_PATH": str(tmp_path / "t"),
                        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        boto3.client("secretsmanager", region_name="us-west-2").create_secret(Name="hf/empty", SecretString=" ")
        with pytest.raises(SystemExit, match="has no SecretString"):
            exec(compile(hf_token.HF_TOKEN_SCRIPT, "hf-token", "exec"), {"__name__": "__main__"})


def test_only_the_secret_id_reaches_the_template_and_the_role_may_read_only_it(synth):
    synthesized = synth({"model": {"hf_token_secret": "hf/token"}})
    text = json.dumps(synthesized.template_json)
    assert "hf/token" in text
    policies = [r["Properties"]["PolicyDocument"] for k, r in synthesized.template_json["Resources"].items()
                if r["Type"] == "AWS::IAM::Policy" and k.startswith("ServingPodRole")]
    (document,) = policies
    (statement,) = document["Statement"]
    assert statement["Action"] == "secretsmanager:GetSecretValue"
    assert statement["Resource"] == {"Fn::Join": ["", [
        "arn:aws:secretsmanager:us-west-2:", {"Ref": "AWS::AccountId"}, ":secret:hf/token-??????"]]}


@pytest.mark.integration
def test_the_script_runs_again_as_a_non_root_user():
    """Init containers run again when the pod sandbox restarts, and the memory volume keeps the
    first run's read-only file: the rerun must replace it, as the image's (non-root) user."""
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and util-linux setpriv to run the script as another user")
    import tempfile
    from pathlib import Path

    tmp_path = Path(tempfile.mkdtemp(prefix="hf-token-test-"))  # pytest's own tmp is private to root
    tmp_path.chmod(0o755)
    volume = tmp_path / "hf-token"
    volume.mkdir()
    volume.chmod(0o777)  # an emptyDir's mode
    script = tmp_path / "hf_token.py"
    script.write_text(hf_token.HF_TOKEN_SCRIPT)
    program = (
        "import boto3, sys\n"
        "from moto import mock_aws\n"
        "code = compile(open(sys.argv[1]).read(), 'hf-token', 'exec')\n"
        "with mock_aws():\n"
        "    boto3.client('secretsmanager', region_name='us-west-2').create_secret(Name='hf/token', SecretString='hf_x')\n"
        "    for _ in range(2):\n"
        "        exec(code, {'__name__': '__main__'})\n"
    )
    env = {**os.environ, "HF_TOKEN_SECRET": "hf/token", "AWS_REGION": "us-west-2",
           "HF_TOKEN_PATH": str(volume / "token"), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", sys.executable, "-c", program,
                               str(script)],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        token = volume / "token"
        assert token.read_text() == "hf_x" and token.stat().st_uid == 1000
        assert stat.S_IMODE(token.stat().st_mode) == 0o400
    finally:
        shutil.rmtree(tmp_path)
