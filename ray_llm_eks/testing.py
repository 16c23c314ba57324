"""Helpers for testing stacks built with ray-llm-eks, in this project and in users' apps.

Snapshot a stack so the snapshot changes only when the infrastructure does::

    from aws_cdk import App
    from ray_llm_eks.testing import FAST_SYNTH_CONTEXT, normalized_template

    def test_my_stack(snapshot):
        app = App(context=FAST_SYNTH_CONTEXT)
        stack = MyInferenceStack(app, "Inference")
        assert normalized_template(stack) == snapshot

And check that a change replaces nothing you care about::

    before, after = normalized_template(stack_a), normalized_template(stack_b)
    assert replaced_resources(before, after) == {}
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

# Skips copying the kubectl and awscli layer assets (~57 MB) into cdk.out on every synth;
# templates are unchanged apart from asset paths.
FAST_SYNTH_CONTEXT: dict[str, Any] = {"aws:cdk:disable-asset-staging": True}

ASSET_HASH = re.compile(r"[0-9a-f]{64}")
ASSET_HASH_MASK = "<asset-hash>"

CREATE_ONLY_FILE = Path(__file__).resolve().parent / "data" / "generated" / "create_only_properties.json"
"""Generated from cfn-lint's bundled CloudFormation resource provider schemas (``make generate``)."""

REPLACING_PROPERTIES: dict[str, tuple[str, ...]] = {
    resource_type: tuple(paths)
    for resource_type, paths in json.loads(CREATE_ONLY_FILE.read_text())["properties"].items()
}
"""Properties whose change makes CloudFormation replace the resource: each type's
``createOnlyProperties`` in its resource provider schema, for the resources a platform team must
never lose by accident (the network, the cluster, its node groups, their launch templates,
placement and security groups). Dotted paths reach into nested properties. Taken from the schemas
CloudFormation's handlers declare, not written by hand: a hand-written table missed, for example,
``AWS::EC2::PlacementGroup.Tags``, so a ``Tags.of(app)`` change could replace the placement group
and roll every GPU node unnoticed."""


def _template_json(stack_or_template: Any) -> dict[str, Any]:
    if isinstance(stack_or_template, dict):
        return copy.deepcopy(stack_or_template)
    from aws_cdk.assertions import Template

    return Template.from_stack(stack_or_template).to_json()


def _mask_hashes(value: Any) -> Any:
    if isinstance(value, str):
        return ASSET_HASH.sub(ASSET_HASH_MASK, value)
    if isinstance(value, list):
        return [_mask_hashes(item) for item in value]
    if isinstance(value, dict):
        return {key: _mask_hashes(item) for key, item in value.items()}
    return value


def _expand_serve_config(value: Any) -> Any:
    """serveConfigV2 is a YAML string inside the RayService: parse it so diffs show fields."""
    if isinstance(value, list):
        return [_expand_serve_config(item) for item in value]
    if isinstance(value, dict):
        return {
            key: yaml.safe_load(item) if key == "serveConfigV2" and isinstance(item, str) else _expand_serve_config(item)
            for key, item in value.items()
        }
    return value


def _token_text(part: Any) -> str:
    # A CloudFormation intrinsic inside a joined string, written so it stays valid inside JSON text.
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and len(part) == 1:
        (function, argument), = part.items()
        shown = argument if isinstance(argument, str) else ".".join(str(a) for a in argument) \
            if isinstance(argument, list) and all(isinstance(a, str) for a in argument) else "..."
        return f"<{function}:{shown}>"
    return "<token>"


def _parse_embedded_json(value: Any) -> Any:
    # A plain JSON string parses; a string built with Fn::Join (tokens inside, such as the gate's
    # wait-condition URL) parses with each token written as <Function:argument>.
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        if separator == "" and isinstance(parts, list):
            value = "".join(_token_text(part) for part in parts)
    if isinstance(value, str):
        try:
            return _expand_serve_config(json.loads(value))
        except json.JSONDecodeError:
            return value
    return value


PROGRAM_FILE_STAND_IN = "<in-cluster program file, as in the package>"
"""What :func:`stand_in_program_files` writes for a file of the library's own in-cluster programs."""


def _program_files() -> set[tuple[str, str]]:
    """(ConfigMap key, text) of every file the library's in-cluster programs (the deployment gate,
    the bench) carry into the cluster."""
    from .bench import bundle as bench_bundle
    from .cdk8s_charts.verification import program_archive
    from .verification import bundle as gate_bundle

    archive = (gate_bundle.ARCHIVE, program_archive())
    return {archive, *(item for bundle in (gate_bundle, bench_bundle) for item in bundle.files().items())}


def stand_in_program_files(objects: list[Any]) -> list[Any]:
    """Kubernetes objects with each ConfigMap file that is one of the library's in-cluster program
    files, byte for byte, replaced by :data:`PROGRAM_FILE_STAND_IN` (its key kept).

    The gate's program travels in a ConfigMap of some thousand lines of Python, so a snapshot that
    embeds it changes with every edit of the gate, and the diff buries what else changed. With the
    stand-in, a snapshot shows which files a ConfigMap carries, not their text; the files are
    checked against the package's source by their own tests. A file that differs from the
    package's (a stale or hand-edited copy) is kept in full, so the snapshot shows it.
    """
    program = _program_files()
    result = []
    for obj in objects:
        if isinstance(obj, dict) and obj.get("kind") == "ConfigMap":
            for section in ("data", "binaryData"):  # the gate's program is one archive in binaryData
                if isinstance(obj.get(section), dict):
                    obj = {**obj, section: {key: PROGRAM_FILE_STAND_IN if (key, value) in program else value
                                            for key, value in obj[section].items()}}
        result.append(obj)
    return result


def normalized_template(stack_or_template: Any, *, program_files: bool = False) -> dict[str, Any]:
    """The stack's CloudFormation template, changed only where infrastructure changes.

    - Asset hashes (64 hex characters) are masked, and asset metadata dropped.
    - The ``BootstrapVersion`` parameter and ``CheckBootstrapVersion`` rule are dropped.
    - Every embedded Kubernetes manifest (``Manifest`` of ``Custom::AWSCDK-EKS-KubernetesResource``)
      and Helm ``Values`` string is parsed back into JSON, and a RayService's ``serveConfigV2``
      YAML into a mapping, so a diff shows the changed field rather than one long line.
    - The library's in-cluster program files in those manifests (the deployment gate's Python
      modules) are replaced by a stand-in (:func:`stand_in_program_files`), unless
      ``program_files`` is true: an upgrade that edits the gate does not change your snapshot.

    Accepts a ``Stack`` (synthesized here) or a template already loaded as a dict.
    """
    template = _template_json(stack_or_template)
    template.get("Parameters", {}).pop("BootstrapVersion", None)
    template.get("Rules", {}).pop("CheckBootstrapVersion", None)
    for section in ("Parameters", "Rules"):
        if section in template and not template[section]:
            del template[section]
    for resource in template.get("Resources", {}).values():
        metadata = resource.get("Metadata")
        if metadata:
            for key in [k for k in metadata if k.startswith("aws:asset:")]:
                del metadata[key]
            if not metadata:
                del resource["Metadata"]
        properties = resource.get("Properties", {})
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and "Manifest" in properties:
            properties["Manifest"] = _parse_embedded_json(properties["Manifest"])
            if not program_files and isinstance(properties["Manifest"], list):
                properties["Manifest"] = stand_in_program_files(properties["Manifest"])
        if resource["Type"] == "Custom::AWSCDK-EKS-HelmChart" and "Values" in properties:
            properties["Values"] = _parse_embedded_json(properties["Values"])
    return _mask_hashes(template)


def _dig(properties: dict[str, Any], dotted: str) -> Any:
    value: Any = properties
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def replaced_resources(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[str]]:
    """Logical IDs that a deploy from ``before`` to ``after`` would replace or delete, with why.

    Covers the resource types in ``REPLACING_PROPERTIES`` (VPC, subnets, cluster, node groups,
    launch templates, placement and security groups). A logical ID that disappears counts as
    replaced: CloudFormation deletes the old resource and creates the new one.
    """
    old, new = before.get("Resources", {}), after.get("Resources", {})
    replaced: dict[str, list[str]] = {}
    for logical_id, resource in old.items():
        watched = REPLACING_PROPERTIES.get(resource["Type"])
        if watched is None:
            continue
        if logical_id not in new or new[logical_id]["Type"] != resource["Type"]:
            replaced[logical_id] = ["logical ID removed"]
            continue
        changed = [
            path
            for path in watched
            if _dig(resource.get("Properties", {}), path) != _dig(new[logical_id].get("Properties", {}), path)
        ]
        if changed:
            replaced[logical_id] = changed
    return replaced
