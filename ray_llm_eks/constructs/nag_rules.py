"""The project's own nag rules: what cdk-nag's AwsSolutions pack misses on ``aws_eks_v2`` clusters.

cdk-nag 3's EKS rules (AwsSolutions-EKS1, endpoint not public; -EKS2, control-plane logs) match
only the ``aws_eks`` (v1) L1 class, so the same ``AWS::EKS::Cluster`` that ``aws_eks_v2``
creates passes unflagged. This plugin reads the synthesized templates, so it judges every
``AWS::EKS::Cluster`` in the app, whichever construct made it, the project's or the user's own:

- ``RayLlmEks-EKS1``: the API endpoint is public to the whole internet: ``EndpointPublicAccess``
  true (CloudFormation's default when absent) with no ``PublicAccessCidrs`` or with ``0.0.0.0/0``.
- ``RayLlmEks-EKS2``: the control plane does not log ``api``, ``audit`` and ``authenticator``
  (who called the API, what changed, who authenticated: the minimum an incident needs).

A finding fails synthesis like cdk-nag's. Acknowledge one on the cluster (or any construct above
it) with ``Validations.of(cluster).acknowledge(Acknowledgment(id="RayLlmEks::RayLlmEks-EKS1",
reason=...))``; the report lists acknowledged findings with their reason.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsii
from aws_cdk import (
    CfnResource,
    IPolicyValidationContext,
    IPolicyValidationPlugin,
    PolicyValidationPluginReport,
    PolicyViolatingResource,
    PolicyViolation,
    Stack,
    Validations,
)
from constructs import IConstruct

PLUGIN_NAME = "RayLlmEks"
REQUIRED_LOG_TYPES = ("api", "audit", "authenticator")
INTERNET = ("0.0.0.0/0", "::/0")
RULES = {
    "RayLlmEks-EKS1": (
        "The EKS API endpoint is public to the whole internet.",
        "Make the endpoint private, or public only for named CIDRs (endpoint_access='public-and-private' with "
        "public_access_cidrs=['203.0.113.0/24']; aws_eks_v2: EndpointAccess.PUBLIC_AND_PRIVATE.only_from(...)).",
    ),
    "RayLlmEks-EKS2": (
        f"The EKS control plane does not log {', '.join(REQUIRED_LOG_TYPES)}.",
        f"Enable the control-plane log types {', '.join(REQUIRED_LOG_TYPES)} (cluster_logging on aws_eks_v2.Cluster).",
    ),
}


def acknowledgment_id(rule: str) -> str:
    return f"{PLUGIN_NAME}::{rule}"


def endpoint_open_to_internet(properties: dict[str, Any]) -> list[str]:
    """The template locations that make the endpoint internet-wide (empty when it is not)."""
    vpc = properties.get("ResourcesVpcConfig") or {}
    if vpc.get("EndpointPublicAccess", True) is False:
        return []
    cidrs = vpc.get("PublicAccessCidrs")
    if not cidrs or any(c in INTERNET for c in cidrs):
        return ["Properties/ResourcesVpcConfig/PublicAccessCidrs" if cidrs
                else "Properties/ResourcesVpcConfig/EndpointPublicAccess"]
    return []


def missing_log_types(properties: dict[str, Any]) -> list[str]:
    logging = ((properties.get("Logging") or {}).get("ClusterLogging") or {}).get("EnabledTypes") or []
    enabled = {entry.get("Type") for entry in logging if isinstance(entry, dict)}
    return [t for t in REQUIRED_LOG_TYPES if t not in enabled]


def _acknowledged(construct: IConstruct, rule: str) -> str | None:
    """The reason ``rule`` was acknowledged on the construct or an ancestor, if it was."""
    for node in reversed(construct.node.scopes):
        for entry in node.node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY and isinstance(entry.data, dict):
                reason = entry.data.get(acknowledgment_id(rule))
                if reason:
                    return reason
    return None


def _clusters_by_template(app: IConstruct) -> dict[tuple[str, str], CfnResource]:
    """(template file name, logical id) → the cluster: logical ids repeat across stacks, so an
    acknowledgment in one stack must not hide another stack's cluster of the same id."""
    found = {}
    for construct in app.node.find_all():
        if isinstance(construct, CfnResource) and construct.cfn_resource_type == "AWS::EKS::Cluster":
            stack = Stack.of(construct)
            found[(stack.template_file, stack.resolve(construct.logical_id))] = construct
    return found


@jsii.implements(IPolicyValidationPlugin)
class RayLlmEksChecks:
    """The validation plugin (register with ``Validations.of(app).add_plugins(RayLlmEksChecks())``)."""

    @property
    def name(self) -> str:
        return PLUGIN_NAME

    @property
    def rule_ids(self) -> list[str]:
        return list(RULES)

    @property
    def version(self) -> str:
        return "1.0.0"

    def validate(self, context: IPolicyValidationContext) -> PolicyValidationPluginReport:
        clusters = _clusters_by_template(context.app_construct)
        violations: dict[str, list[PolicyViolatingResource]] = {rule: [] for rule in RULES}
        acknowledged: dict[str, str] = {}
        for template_path in context.template_paths:
            resources = json.loads(open(template_path).read()).get("Resources", {})
            for logical_id, resource in resources.items():
                if resource.get("Type") != "AWS::EKS::Cluster":
                    continue
                properties = resource.get("Properties") or {}
                findings = {"RayLlmEks-EKS1": endpoint_open_to_internet(properties),
                            "RayLlmEks-EKS2": ["Properties/Logging"] if missing_log_types(properties) else []}
                for rule, locations in findings.items():
                    if not locations:
                        continue
                    construct = clusters.get((os.path.basename(template_path), logical_id))
                    reason = _acknowledged(construct, rule) if construct is not None else None
                    if reason:
                        acknowledged[f"{rule} {construct.node.path}"] = reason
                        continue
                    violations[rule].append(PolicyViolatingResource(
                        resource_logical_id=logical_id, template_path=template_path, locations=locations))
        report = [PolicyViolation(rule_name=rule, description=RULES[rule][0], fix=RULES[rule][1],
                                  violating_resources=resources, severity="error")
                  for rule, resources in violations.items() if resources]
        return PolicyValidationPluginReport(success=not report, violations=report,
                                            metadata={f"acknowledged {k}": v for k, v in acknowledged.items()} or None)
