"""The default stack synthesized for a configuration, once per scenario per process (the fixtures
``synth`` and ``default`` of tests/conftest.py hand these out).

Test apps load cdk.json's context (the same feature flags as `cdk synth`) and disable asset
staging, so no 57 MB of kubectl/awscli layers are copied per synth.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import assertions

from ray_llm_eks.base.deployment import Deployment
from ray_llm_eks.constructs import nag_rules
from ray_llm_eks.constructs.nag_rules import RayLlmEksChecks
from ray_llm_eks.stack import RayLlmEksStack, build_app
from ray_llm_eks.testing import FAST_SYNTH_CONTEXT as TEST_CONTEXT


@dataclass
class Synthesized:
    config: Deployment
    stack: RayLlmEksStack
    template: assertions.Template
    template_json: dict[str, Any]
    outdir: Path
    validation_runs: list[dict[str, Any]] = field(default_factory=list)
    """Each call CDK made to the project's nag plugin during the synth (``nag=True`` only)."""

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.template_json["Resources"].items()
            if resource["Type"] == resource_type
        }

    def manifest_objects(self, logical_id: str) -> list[dict[str, Any]]:
        """The Kubernetes objects of a kubectl manifest resource, in the order kubectl applies and
        deletes them; a CloudFormation token in a value reads as ``"<token>"``."""
        manifest = self.template_json["Resources"][logical_id]["Properties"]["Manifest"]
        text, inside, escaped = "", False, False
        for part in manifest["Fn::Join"][1] if isinstance(manifest, dict) else [manifest]:
            if not isinstance(part, str):  # a token inside a JSON string, or a value of its own
                text += "<token>" if inside else '"<token>"'
                continue
            for char in part:
                if escaped:
                    escaped = False
                elif char == "\\" and inside:
                    escaped = True
                elif char == '"':
                    inside = not inside
            text += part
        return json.loads(text)

    def logical_id(self, construct) -> str:
        """The logical ID of an L1, or of an L2's default child."""
        element = construct
        while not hasattr(element, "logical_id"):  # an L2 (or a CustomResource): descend to its L1
            element = element.node.default_child
        return self.stack.get_logical_id(element)


class RecordingChecks(RayLlmEksChecks):
    """The project's nag plugin, recording each validation CDK runs: a plugin that passed is left
    out of validation-report.json, so only this shows that it ran, and on what."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[dict[str, Any]] = []

    def validate(self, context):
        report = super().validate(context)
        templates = list(context.template_paths)
        clusters = [logical_id for path in templates
                    for logical_id, resource in json.loads(Path(path).read_text()).get("Resources", {}).items()
                    if resource.get("Type") == "AWS::EKS::Cluster"]
        self.runs.append({"templates": templates, "clusters": clusters, "success": report.success,
                          "violations": [v.rule_name for v in report.violations]})
        return report


_cache: dict[tuple[str, bool], Synthesized] = {}


def synthesize(config: Deployment, outdir: Path, *, nag: bool = False) -> Synthesized:
    """Synthesize the default stack for ``config`` (cached: one synth per scenario per session)."""
    key = (config, nag)
    if key not in _cache:
        recorder = RecordingChecks()
        with pytest.MonkeyPatch.context() as patch:  # build_app imports the plugin when nag is on
            patch.setattr(nag_rules, "RayLlmEksChecks", lambda: recorder)
            app, stack = build_app(config, outdir=str(outdir), context=TEST_CONTEXT, nag=nag)
        assembly = app.synth()
        template_json = json.loads((Path(assembly.directory) / f"{stack.artifact_id}.template.json").read_text())
        _cache[key] = Synthesized(
            config=config,
            stack=stack,
            template=assertions.Template.from_json(template_json),
            template_json=template_json,
            outdir=Path(assembly.directory),
            validation_runs=recorder.runs,
        )
    return _cache[key]


def nodegroups_by_role(synthesized: Synthesized) -> dict[str, dict]:
    """Each EKS node group's properties by its ``role`` label (tests/constructs/test_cluster.py and
    tests/test_hardware_builds.py read the node groups this way)."""
    return {
        n["Properties"]["Labels"]["role"]: n["Properties"]
        for n in synthesized.resources("AWS::EKS::Nodegroup").values()
    }


def launch_template_of(synthesized: Synthesized, nodegroup: dict) -> dict:
    """The ``LaunchTemplateData`` of a node group's launch template."""
    lt_id = nodegroup["LaunchTemplate"]["Id"]["Ref"]
    return synthesized.template_json["Resources"][lt_id]["Properties"]["LaunchTemplateData"]
