"""The project's own nag rules (RayLlmEks-EKS1 endpoint, -EKS2 control-plane logs) on aws_eks_v2 clusters.

cdk-nag 3's AwsSolutions-EKS1/EKS2 match only the aws_eks (v1) L1 class: the first test shows a
cluster open to the internet and without logs passing AwsSolutions, which is why these rules exist.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import Acknowledgment, Validations, aws_ec2 as ec2, aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from cdk_nag import AwsSolutionsChecks

from ray_llm_eks.constructs.nag_rules import RayLlmEksChecks, acknowledgment_id, endpoint_open_to_internet, missing_log_types


def consumer_app(tmp_path, *, acknowledge: tuple[str, ...] = (), aws_solutions: bool = False, **cluster_props):
    """A user's own app: an aws_eks_v2 cluster defined outside the library, both nag plugins registered."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Consumer", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    cluster = eks.Cluster(stack, "Cluster", version=eks.KubernetesVersion.V1_35, vpc=vpc,
                          kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV35Layer(stack, "L")),
                          default_capacity_type=eks.DefaultCapacityType.NODEGROUP, default_capacity=0, **cluster_props)
    for rule in acknowledge:
        Validations.of(cluster).acknowledge(Acknowledgment(id=acknowledgment_id(rule), reason="a test says so"))
    # The report lists only the failing plugins when one fails: AwsSolutions (which fails on a bare
    # consumer cluster for reasons of its own) only where its findings are the point.
    plugins = [AwsSolutionsChecks(app), RayLlmEksChecks()] if aws_solutions else [RayLlmEksChecks()]
    Validations.of(app).add_plugins(*plugins)
    return app


REPORT_WRITTEN = re.compile(r"A copy of this report can be found in: (?P<path>\S*validation-report\.json)")


def plugin_reports(app, tmp_path) -> dict[str, dict]:
    """The validation report's plugins; CDK leaves out a plugin that passed with nothing to say.

    A failed validation raises after writing the report, with a message that names the report's
    file; any other error (a plugin or a construct that crashed) is raised as it is. The report
    and the exception must agree: a synth raises exactly when some plugin in it failed."""
    report_file = tmp_path / "validation-report.json"
    failed_validation = False
    try:
        app.synth()
    except RuntimeError as error:
        # CDK's UnscopedValidationError: its code, the report, and where the report was written
        # (a path relative to the working directory where there is one).
        written = REPORT_WRITTEN.search(str(error))
        if not str(error).startswith("ValidationFailed: ") or written is None \
                or Path(written["path"]).resolve() != report_file.resolve():
            raise
        failed_validation = True
    report = json.loads(report_file.read_text())
    plugins = {p["pluginName"]: p for p in report["pluginReports"]}
    assert failed_validation == any(p["conclusion"] == "failure" for p in plugins.values()), plugins
    return plugins


def passes(app, tmp_path) -> bool:
    app.synth()  # raises when a plugin fails
    return plugin_reports(app, tmp_path).get("RayLlmEks", {"conclusion": "success"})["conclusion"] == "success"


def test_a_public_cluster_without_logs_passes_aws_solutions_but_not_ours(tmp_path):
    reports = plugin_reports(consumer_app(tmp_path, aws_solutions=True), tmp_path)
    ours = reports["RayLlmEks"]
    assert ours["conclusion"] == "failure"
    assert sorted(v["ruleName"] for v in ours["violations"]) == ["RayLlmEks-EKS1", "RayLlmEks-EKS2"]
    aws_solutions_rules = {v["ruleName"] for v in reports["AwsSolutions"]["violations"]}
    assert not {r for r in aws_solutions_rules if r.startswith("AwsSolutions-EKS")}  # the gap these rules close
    eks1 = next(v for v in ours["violations"] if v["ruleName"] == "RayLlmEks-EKS1")
    assert eks1["violatingConstructs"][0]["constructPath"].startswith("Consumer/Cluster")


def test_a_private_cluster_with_the_three_log_types_passes(tmp_path):
    app = consumer_app(tmp_path, endpoint_access=eks.EndpointAccess.PRIVATE,
                       cluster_logging=[eks.ClusterLoggingTypes.API, eks.ClusterLoggingTypes.AUDIT,
                                        eks.ClusterLoggingTypes.AUTHENTICATOR])
    assert passes(app, tmp_path)


def test_an_acknowledged_finding_passes(tmp_path):
    assert passes(consumer_app(tmp_path, acknowledge=("RayLlmEks-EKS1", "RayLlmEks-EKS2")), tmp_path)


def test_acknowledging_one_rule_leaves_the_other(tmp_path):
    reports = plugin_reports(consumer_app(tmp_path, acknowledge=("RayLlmEks-EKS1",)), tmp_path)
    assert [v["ruleName"] for v in reports["RayLlmEks"]["violations"]] == ["RayLlmEks-EKS2"]


@pytest.mark.parametrize(("vpc_config", "open_"), [
    ({}, True),  # CloudFormation's default is a public endpoint open to all
    ({"EndpointPublicAccess": True, "PublicAccessCidrs": ["0.0.0.0/0"]}, True),
    ({"EndpointPublicAccess": True, "PublicAccessCidrs": ["203.0.113.0/24"]}, False),
    ({"EndpointPublicAccess": False, "EndpointPrivateAccess": True}, False),
])
def test_endpoint_rule_reads_cloudformation_semantics(vpc_config, open_):
    assert bool(endpoint_open_to_internet({"ResourcesVpcConfig": vpc_config})) is open_


def test_log_rule_names_the_missing_types():
    enabled = {"Logging": {"ClusterLogging": {"EnabledTypes": [{"Type": "api"}]}}}
    assert missing_log_types(enabled) == ["audit", "authenticator"]
    assert missing_log_types({}) == ["api", "audit", "authenticator"]


def test_the_project_s_own_stack_passes_its_rules(default):
    """The default synthesis ran our plugin once, over the stack's template and its one cluster, and
    it passed: CDK leaves a plugin that passed out of the report, so the report alone cannot show
    that it ran (the synth records each validate call: tests/helpers/synthesis.py)."""
    (run,) = default.validation_runs
    assert [Path(t).name for t in run["templates"]] == [f"{default.stack.artifact_id}.template.json"]
    assert run["clusters"] == list(default.resources("AWS::EKS::Cluster")) and len(run["clusters"]) == 1
    assert (run["success"], run["violations"]) == (True, [])
    report = json.loads((default.outdir / "validation-report.json").read_text())
    assert "RayLlmEks" not in {p["pluginName"] for p in report["pluginReports"]}  # passed, so left out
    assert all(p["conclusion"] == "success" for p in report["pluginReports"])


@pytest.mark.parametrize("acknowledged", ["First", "Second"])
def test_an_acknowledgment_in_one_stack_does_not_hide_the_same_logical_id_in_another(tmp_path, acknowledged):
    app = cdk.App(outdir=str(tmp_path))
    for name in ("First", "Second"):
        stack = cdk.Stack(app, name, env=cdk.Environment(account="111111111111", region="us-west-2"))
        vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
        cluster = eks.Cluster(stack, "Cluster", version=eks.KubernetesVersion.V1_35, vpc=vpc,
                              kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV35Layer(stack, "L")),
                              default_capacity_type=eks.DefaultCapacityType.NODEGROUP, default_capacity=0)
        if name == acknowledged:
            for rule in ("RayLlmEks-EKS1", "RayLlmEks-EKS2"):
                Validations.of(cluster).acknowledge(Acknowledgment(id=acknowledgment_id(rule), reason="a test says so"))
    Validations.of(app).add_plugins(RayLlmEksChecks())
    ours = plugin_reports(app, tmp_path)["RayLlmEks"]
    assert ours["conclusion"] == "failure"
    paths = {c["constructPath"].split("/")[0] for v in ours["violations"] for c in v["violatingConstructs"]}
    assert paths == {"First", "Second"} - {acknowledged}
