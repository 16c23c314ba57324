"""The AWS half checked by upstream tools: cfn-lint and cdk-nag AwsSolutions."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

# Warnings cfn-lint may raise on our templates, each with the reason it is acceptable.
ACCEPTED_CFN_LINT_WARNINGS = {
    # aws-cdk-lib's own constructs (EKS cluster subnets, Lambda roles of its providers) add a
    # DependsOn beside a Ref/GetAtt to the same resource; harmless and outside this library.
    "W3005": "redundant DependsOn emitted by aws-cdk-lib constructs",
    # AZ names are configuration on purpose: no lookups, so `cdk synth` runs offline, and
    # the single-AZ data plane must name its AZ (EFA cannot cross AZs).
    "W3010": "explicit availability zones from the configuration",
}


def cfn_lint(template_path: Path) -> list[tuple[str, str]]:
    """(rule id, message) of every cfn-lint finding: what ``cfnlint.api.lint_file(template_path,
    config=ManualArgs(regions=["us-west-2"]))`` returns, with the rules loaded once per process."""
    from cfnlint.config import ConfigMixIn

    runner = _cfn_lint_runner()
    # lint_file is ``Runner(ConfigMixIn(["--template", path], **config)).run()`` (cfnlint/api.py
    # @v1.58.0, as installed); the Runner's rules depend on the options only, so one Runner serves each template.
    runner.config = ConfigMixIn(["--template", str(template_path)], **CFN_LINT_OPTIONS)
    return [(match.rule.id, match.message) for match in runner.run()]


CFN_LINT_OPTIONS = {"regions": ["us-west-2"]}


@functools.cache
def _cfn_lint_runner():
    # Imported here: cfnlint takes about 1 s of CPU to import, and only the synth worker lints.
    from cfnlint.config import ConfigMixIn
    from cfnlint.runner import Runner

    return Runner(ConfigMixIn([], **CFN_LINT_OPTIONS))  # loading the rules is about 0.6 s of CPU


# W3005 is accepted only where aws-cdk-lib adds the redundant DependsOn itself: its VPC
# default-security-group provider, the EKS cluster's dependency on its subnets, and the kubectl
# provider's and LogRetention's Lambda roles. A redundant dependency of our own still fails the test.
AWS_CDK_LIB_W3005 = re.compile(
    r"^'(CustomVpcRestrictDefaultSG\w+|NetworkVpcPrivateSubnet\dSubnet\w+|ClusterKubectlProvider\w+ServiceRole\w+|LogRetention[0-9a-f]{32}ServiceRole\w+)' "
    r"dependency already enforced"
)


def test_default_template_has_no_cfn_lint_errors_and_only_explained_warnings(default):
    findings = cfn_lint(default.outdir / f"{default.stack.artifact_id}.template.json")
    assert [f for f in findings if f[0].startswith("E")] == []
    assert [f for f in findings if f[0] not in ACCEPTED_CFN_LINT_WARNINGS] == []
    ours = [f for f in findings if f[0] == "W3005" and not AWS_CDK_LIB_W3005.match(f[1])]
    assert ours == []


def test_cdk_nag_awssolutions_passes_with_only_scoped_acknowledgments(default):
    report = json.loads((default.outdir / "validation-report.json").read_text())
    assert {p["pluginName"]: p["conclusion"] for p in report["pluginReports"]}["AwsSolutions"] == "success"
    assert all(p["conclusion"] == "success" for p in report["pluginReports"])
    (plugin,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert plugin["conclusion"] == "success"
    assert plugin["violations"] == []
    stack_path = default.stack.node.path
    for suppressed in plugin["suppressedViolations"]:
        for construct in suppressed["violatingConstructs"]:
            # Acknowledged on the exact resource, never at stack level.
            assert construct["constructPath"].startswith(stack_path + "/")
            assert construct["constructPath"].endswith("/Resource")
        if suppressed["ruleName"] == "AwsSolutions-SMG4":
            # A rule without findings data, acknowledged on one resource: the gate signal's secret, a
            # presigned URL CloudFormation issues per run, which nothing can rotate.
            assert [c["constructPath"] for c in suppressed["violatingConstructs"]] == [
                default.stack.serving.gate_signal.node.default_child.node.path]
            continue
        assert "[" in suppressed["ruleName"] or suppressed["ruleName"].endswith("-L1")


def test_every_acknowledgment_carries_a_reason(default):
    from aws_cdk import Validations

    metadata_key = Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    reasons = []
    for construct in default.stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == metadata_key:
                reasons.append(entry.data)
    assert reasons, "expected acknowledgments on the EKS and node roles"
    flat = json.dumps(reasons)
    assert "EKS requires" in flat
