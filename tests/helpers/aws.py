"""moto for the preflight and CLI tests: fake credentials, EC2 vCPU quotas moto lacks, and an EKS
client answering the one call moto does not implement (the fixtures are registered in
tests/conftest.py)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from ray_llm_eks.preflight import CDK_DEFAULT_QUALIFIER

REGION = "us-west-2"
MOTO_ACCOUNT = "123456789012"
BOOTSTRAP_PARAMETER = f"/cdk-bootstrap/{CDK_DEFAULT_QUALIFIER}/version"


@pytest.fixture
def aws(monkeypatch):
    """Fake credentials and moto for every AWS call in the test."""
    from moto import mock_aws  # here, not at import: conftest imports this module on every worker

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


@pytest.fixture
def ec2_quotas(monkeypatch):
    """Seed EC2 vCPU quotas into moto's Service Quotas backend (it only knows VPC quotas)."""
    from moto.servicequotas.models import ServiceQuotasBackend

    seeded: dict[str, float] = {}
    original = ServiceQuotasBackend.get_service_quota

    def get_service_quota(self, service_code, quota_code):
        if service_code == "ec2" and quota_code in seeded:
            return {"ServiceCode": "ec2", "QuotaCode": quota_code, "QuotaName": quota_code,
                    "Value": seeded[quota_code], "Unit": "None", "Adjustable": True, "GlobalQuota": False}
        return original(self, service_code, quota_code)

    monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", get_service_quota)
    return seeded


class StubbedEksSession(boto3.Session):
    """A boto3 session whose EKS client answers DescribeClusterVersions from a Stubber (moto cannot)."""

    eks_versions: list[dict] = [{"clusterVersion": "1.35", "versionStatus": "STANDARD_SUPPORT"}]

    def client(self, service_name, *args, **kwargs):
        client = super().client(service_name, *args, **kwargs)
        if service_name == "eks":
            stubber = Stubber(client)
            stubber.add_response("describe_cluster_versions", {"clusterVersions": self.eks_versions})
            stubber.activate()
        return client
