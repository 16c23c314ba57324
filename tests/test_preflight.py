"""Every preflight check against moto, in process, with no network: one passing and one
failing scenario each.

Where moto 5.2.5 lacks the data or the API, the test says so and fills the gap at the
narrowest level:
* Service Quotas: moto implements GetServiceQuota only for the ``vpc`` service, so
  :func:`helpers.aws.ec2_quotas` seeds EC2 quota values into moto's backend; the boto3 call still goes
  through moto's request parsing and response serialisation.
* EKS DescribeClusterVersions: not implemented by moto ("Not yet implemented"), so that one
  call is answered by botocore's Stubber, which validates request and response against the
  real EKS service model.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from helpers.aws import BOOTSTRAP_PARAMETER, MOTO_ACCOUNT, REGION, StubbedEksSession
from helpers.pins import unpinned, unpinned_config
from ray_llm_eks.preflight import (
    G_AND_VT_QUOTA,
    P_QUOTA,
    STANDARD_QUOTA,
    CheckStatus,
    NoCredentials,
    check_cdk_bootstrap,
    check_efa_supported,
    check_eks_version,
    check_instance_types_offered,
    check_vcpu_quotas,
    planned_vcpus_by_quota,
    run_preflight,
)

def _eks_with_versions(versions: list[dict]) -> tuple[object, Stubber]:
    eks = boto3.client("eks", region_name=REGION)
    stubber = Stubber(eks)
    stubber.add_response("describe_cluster_versions", {"clusterVersions": versions}, {"clusterVersions": ["1.35"]})
    stubber.activate()
    return eks, stubber


# --- instance types offered in the data-plane AZ ---------------------------------------------

def test_offered_passes_for_the_reference_types_in_us_west_2a(aws):
    result = check_instance_types_offered(boto3.client("ec2", region_name=REGION), "us-west-2a",
                                          ["m7i.xlarge", "g6.8xlarge"])
    assert result.status is CheckStatus.passed


def test_offered_fails_in_an_az_without_g6_and_names_the_azs_that_have_it(aws):
    # moto's offering data (a snapshot of EC2's): Tokyo offers g6.8xlarge in 1a and 1c only.
    result = check_instance_types_offered(boto3.client("ec2", region_name="ap-northeast-1"), "ap-northeast-1d",
                                          ["m7i.xlarge", "g6.8xlarge"])
    assert result.status is CheckStatus.failed
    assert "not offered in ap-northeast-1d: g6.8xlarge" in result.detail
    assert "g6.8xlarge: ap-northeast-1a, ap-northeast-1c" in result.fix


# --- EFA support --------------------------------------------------------------------------------

def test_efa_passes_for_g6_8xlarge(aws):
    # moto's DescribeInstanceTypes data reports EfaSupported: true for g6.8xlarge.
    result = check_efa_supported(boto3.client("ec2", region_name=REGION), ["g6.8xlarge"])
    assert result.status is CheckStatus.passed


def test_efa_fails_for_a_type_ec2_reports_without_efa(aws):
    # g6.4xlarge has no EFA (the config refuses it for GPU roles, so the check is called directly).
    result = check_efa_supported(boto3.client("ec2", region_name=REGION), ["g6.8xlarge", "g6.4xlarge"])
    assert result.status is CheckStatus.failed
    assert result.detail == "EC2 reports no EFA support for g6.4xlarge"
    assert "g6.8xlarge" in result.fix


# --- vCPU quotas -------------------------------------------------------------------------------

def test_two_g6_8xlarge_need_64_g_vcpus():
    needs = planned_vcpus_by_quota(unpinned())
    assert needs[G_AND_VT_QUOTA].planned_vcpus == 64
    assert needs[STANDARD_QUOTA].planned_vcpus == 4


def test_quotas_pass_when_they_cover_the_plan(aws, ec2_quotas):
    ec2_quotas.update({G_AND_VT_QUOTA: 64, STANDARD_QUOTA: 32})
    result = check_vcpu_quotas(boto3.client("ec2", region_name=REGION),
                               boto3.client("service-quotas", region_name=REGION), unpinned())
    assert result.status is CheckStatus.passed, result.detail
    assert "L-DB2E81BA" in result.detail and "needed 64" in result.detail


def test_quotas_fail_when_the_g_quota_is_too_small(aws, ec2_quotas):
    ec2_quotas.update({G_AND_VT_QUOTA: 32, STANDARD_QUOTA: 32})
    result = check_vcpu_quotas(boto3.client("ec2", region_name=REGION),
                               boto3.client("service-quotas", region_name=REGION), unpinned())
    assert result.status is CheckStatus.failed
    assert "L-DB2E81BA: 64 vCPUs needed, 32 available" in result.detail
    assert "--quota-code L-DB2E81BA --desired-value 64" in result.fix


def _running(instance_type: str, **options):
    """An EC2 client of the mocked account, with one ``instance_type`` instance already running in it."""
    ec2 = boto3.client("ec2", region_name=REGION)
    # One of moto's own Amazon images (listing all of them, about 1,300, took 2 s a call).
    image = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])
    image = image["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=image, InstanceType=instance_type, MinCount=1, MaxCount=1, **options)
    return ec2


def test_quotas_count_instances_already_running(aws, ec2_quotas):
    ec2_quotas.update({G_AND_VT_QUOTA: 64, STANDARD_QUOTA: 32})
    ec2 = _running("g6.8xlarge")
    result = check_vcpu_quotas(ec2, boto3.client("service-quotas", region_name=REGION), unpinned())
    assert result.status is CheckStatus.failed
    assert "64 vCPUs needed, 32 available (quota 64, in use 32)" in result.detail


def test_quotas_ignore_spot_instances(aws, ec2_quotas):
    ec2_quotas.update({G_AND_VT_QUOTA: 64, STANDARD_QUOTA: 32})
    ec2 = _running("g6.8xlarge", InstanceMarketOptions={"MarketType": "spot"})
    result = check_vcpu_quotas(ec2, boto3.client("service-quotas", region_name=REGION), unpinned())
    assert result.status is CheckStatus.passed, result.detail


def _p5_pair():
    return unpinned_config({"prefill": {"instance_type": "p5.48xlarge"}, "decode": {"instance_type": "p5.48xlarge"},
                            "model": {"tensor_parallel_size": 8}})


def test_p_series_counts_against_the_p_quota(aws, ec2_quotas):
    needs = planned_vcpus_by_quota(_p5_pair())
    assert needs[P_QUOTA].planned_vcpus == 2 * 192 and G_AND_VT_QUOTA not in needs
    ec2_quotas.update({P_QUOTA: 384, STANDARD_QUOTA: 32})
    ec2 = _running("p4d.24xlarge")
    result = check_vcpu_quotas(ec2, boto3.client("service-quotas", region_name=REGION), _p5_pair())
    assert result.status is CheckStatus.failed
    assert "L-417A185B: 384 vCPUs needed, 288 available (quota 384, in use 96)" in result.detail
    assert "--quota-code L-417A185B --desired-value 480" in result.fix


# --- EKS version -----------------------------------------------------------------------------

def test_eks_version_passes_in_standard_support():
    eks, stubber = _eks_with_versions([{"clusterVersion": "1.35", "versionStatus": "STANDARD_SUPPORT"}])
    result = check_eks_version(eks, "1.35", REGION)
    stubber.assert_no_pending_responses()
    assert result.status is CheckStatus.passed


def test_eks_version_in_extended_support_passes_with_the_price_warning():
    eks, _ = _eks_with_versions([{"clusterVersion": "1.35", "versionStatus": "EXTENDED_SUPPORT"}])
    result = check_eks_version(eks, "1.35", REGION)
    assert result.status is CheckStatus.passed
    assert "$0.60/h" in result.detail


def test_eks_version_fails_when_the_region_does_not_offer_it():
    eks, _ = _eks_with_versions([])
    result = check_eks_version(eks, "1.35", REGION)
    assert result.status is CheckStatus.failed
    assert result.detail == f"EKS does not offer Kubernetes 1.35 in {REGION}"


def test_eks_permission_problem_names_the_permission():
    eks = boto3.client("eks", region_name=REGION)
    stubber = Stubber(eks)
    stubber.add_client_error("describe_cluster_versions", service_error_code="AccessDeniedException",
                             http_status_code=403)
    stubber.activate()
    result = check_eks_version(eks, "1.35", REGION)
    assert result.status is CheckStatus.failed
    assert result.fix == "grant the caller eks:DescribeClusterVersions"


# --- CDK bootstrap -----------------------------------------------------------------------------

def test_bootstrap_passes_when_the_version_parameter_exists(aws):
    ssm = boto3.client("ssm", region_name=REGION)
    ssm.put_parameter(Name=BOOTSTRAP_PARAMETER, Value="27", Type="String")
    result = check_cdk_bootstrap(ssm, boto3.client("sts", region_name=REGION), MOTO_ACCOUNT, REGION)
    assert result.status is CheckStatus.passed
    assert result.detail == "bootstrap version 27; the caller can assume the CDK deploy role"


def test_bootstrap_fails_when_the_environment_was_never_bootstrapped(aws):
    result = check_cdk_bootstrap(boto3.client("ssm", region_name=REGION), boto3.client("sts", region_name=REGION),
                                 MOTO_ACCOUNT, REGION)
    assert result.status is CheckStatus.failed
    assert result.fix == f"run `cdk bootstrap aws://{MOTO_ACCOUNT}/{REGION}` with administrator credentials"


def test_bootstrap_fails_when_the_bootstrap_stack_is_too_old(aws):
    ssm = boto3.client("ssm", region_name=REGION)
    ssm.put_parameter(Name=BOOTSTRAP_PARAMETER, Value="5", Type="String")
    result = check_cdk_bootstrap(ssm, boto3.client("sts", region_name=REGION), MOTO_ACCOUNT, REGION)
    assert result.status is CheckStatus.failed
    assert "older than the 6" in result.detail


def test_bootstrap_fails_when_the_caller_cannot_assume_the_deploy_role(aws):
    # moto allows every AssumeRole, so the refusal comes from a Stubber on STS alone; the SSM
    # side stays on moto.
    ssm = boto3.client("ssm", region_name=REGION)
    ssm.put_parameter(Name=BOOTSTRAP_PARAMETER, Value="27", Type="String")
    sts = boto3.client("sts", region_name=REGION)
    role = f"arn:aws-cn:iam::{MOTO_ACCOUNT}:role/cdk-hnb659fds-deploy-role-{MOTO_ACCOUNT}-{REGION}"
    with Stubber(sts) as stub:
        stub.add_client_error(
            "assume_role", service_error_code="AccessDenied", http_status_code=403,
            expected_params={"RoleArn": role, "RoleSessionName": "ray-llm-eks-preflight", "DurationSeconds": 900},
        )
        result = check_cdk_bootstrap(ssm, sts, MOTO_ACCOUNT, REGION, partition="aws-cn")
    assert result.status is CheckStatus.failed
    assert role in result.detail and "AccessDenied" in result.detail
    assert "assume the CDK deploy role" in result.fix


# --- the whole run ---------------------------------------------------------------------------

def test_run_preflight_all_pass_for_a_ready_account(aws, ec2_quotas):
    ec2_quotas.update({G_AND_VT_QUOTA: 64, STANDARD_QUOTA: 32})
    boto3.client("ssm", region_name=REGION).put_parameter(Name=BOOTSTRAP_PARAMETER, Value="27", Type="String")
    seen: list[str] = []
    report = run_preflight(unpinned(), StubbedEksSession(region_name=REGION), on_check=seen.append)
    assert report.passed, report.summary()
    assert report.account == MOTO_ACCOUNT
    assert [r.name for r in report.results] == [
        "instance-types-offered", "efa-supported", "vcpu-quotas", "eks-version", "cdk-bootstrap"]
    assert len(seen) == 5


def test_run_preflight_reports_each_failure(aws, ec2_quotas):
    ec2_quotas.update({G_AND_VT_QUOTA: 0, STANDARD_QUOTA: 32})
    config = unpinned_config({"region": "ap-northeast-1", "control_plane_azs": ["ap-northeast-1c", "ap-northeast-1d"],
                           "data_plane_az": "ap-northeast-1d"})
    report = run_preflight(config, StubbedEksSession(region_name="ap-northeast-1"))
    assert not report.passed
    failed = {r.name for r in report.results if r.status is CheckStatus.failed}
    assert failed == {"instance-types-offered", "vcpu-quotas", "cdk-bootstrap"}


def test_no_credentials_is_its_own_error(no_aws_credentials):
    with pytest.raises(NoCredentials, match="no AWS credentials"):
        run_preflight(unpinned(), boto3.Session(region_name=REGION))
