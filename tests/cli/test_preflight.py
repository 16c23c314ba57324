"""``ray-llm-eks preflight`` against moto's AWS: exit codes, the fixes it prints, a narrow terminal."""

from __future__ import annotations

import json

import boto3
import pytest

from ray_llm_eks.cli import app
from ray_llm_eks.preflight import G_AND_VT_QUOTA, STANDARD_QUOTA

from helpers.aws import BOOTSTRAP_PARAMETER, REGION, StubbedEksSession


def test_preflight_exits_3_without_credentials(runner, no_aws_credentials):
    result = runner.invoke(app, ["preflight"])
    assert result.exit_code == 3
    assert "no AWS credentials found" in result.output
    assert "AWS_PROFILE" in result.output


def test_preflight_exits_0_when_every_check_passes(runner, aws, ec2_quotas, monkeypatch):  # noqa: F811
    ec2_quotas.update({G_AND_VT_QUOTA: 64, STANDARD_QUOTA: 32})
    boto3.client("ssm", region_name=REGION).put_parameter(Name=BOOTSTRAP_PARAMETER, Value="27", Type="String")
    monkeypatch.setattr(boto3, "Session", StubbedEksSession)
    result = runner.invoke(app, ["preflight"])
    assert result.exit_code == 0, result.output
    assert result.output.count("PASS") == 5
    assert "all 5 checks passed" in result.output


def test_preflight_exits_1_and_prints_the_fix_when_a_check_fails(runner, aws, ec2_quotas, monkeypatch):  # noqa: F811
    ec2_quotas.update({G_AND_VT_QUOTA: 32, STANDARD_QUOTA: 32})
    monkeypatch.setattr(boto3, "Session", StubbedEksSession)
    result = runner.invoke(app, ["preflight", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    by_name = {check["name"]: check for check in data["checks"]}
    assert by_name["vcpu-quotas"]["status"] == "fail"
    assert "L-DB2E81BA" in by_name["vcpu-quotas"]["fix"]
    assert by_name["cdk-bootstrap"]["status"] == "fail"
    assert by_name["instance-types-offered"]["status"] == "pass"


@pytest.mark.integration
def test_preflight_exits_3_when_the_credential_process_fails(runner, no_aws_credentials, tmp_path, monkeypatch):
    config_file = tmp_path / "aws-config"
    config_file.write_text("[profile broken]\ncredential_process = /bin/false\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    result = runner.invoke(app, ["preflight", "--profile", "broken"])
    assert result.exit_code == 3, result.output
    assert "no usable AWS credentials" in result.output
    assert "Traceback" not in result.output


def test_preflight_cuts_nothing_at_60_columns(runner, aws, ec2_quotas, monkeypatch):  # noqa: F811
    ec2_quotas.update({G_AND_VT_QUOTA: 32, STANDARD_QUOTA: 32})
    monkeypatch.setattr(boto3, "Session", StubbedEksSession)
    result = runner.invoke(app, ["preflight"], env={"COLUMNS": "60"})
    assert result.exit_code == 1
    assert "…" not in result.output and "L-DB2E81BA" in result.output
