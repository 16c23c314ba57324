"""Snapshots for code review, deterministic synthesis, and replacement safety.

Update snapshots with `make snapshot-update` (see CONTRIBUTING.md for when that is fine).
"""

from __future__ import annotations

import base64

import json
from pathlib import Path

import pytest
from syrupy.extensions.json import JSONSnapshotExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from helpers.pins import unpinned_config
from ray_llm_eks.manifests import render_chart, write_manifests
from ray_llm_eks.stack import build_app
from ray_llm_eks.testing import (
    FAST_SYNTH_CONTEXT,
    PROGRAM_FILE_STAND_IN,
    REPLACING_PROPERTIES,
    normalized_template,
    replaced_resources,
    stand_in_program_files,
)
from ray_llm_eks.verification import bundle as gate_bundle

TOPOLOGIES = ("disaggregated", "colocated")


class YamlSnapshotExtension(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "yaml"


@pytest.fixture
def json_snapshot(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.fixture
def yaml_snapshot(snapshot):
    return snapshot.use_extension(YamlSnapshotExtension)


def test_default_template(default, json_snapshot):
    assert normalized_template(default.template_json) == json_snapshot


class _StoodIn:
    """A chart's objects with the in-cluster program files stood in, for :func:`render_chart`
    (which reads ``to_json()``), so the snapshot is what `make synth` writes but for those files."""

    def __init__(self, chart) -> None:
        self.chart = chart

    def to_json(self) -> list:
        return stand_in_program_files(list(self.chart.to_json()))


def test_charts(synth, yaml_snapshot):
    for topology in TOPOLOGIES:
        for chart in synth({"topology": topology}).stack.charts:
            assert render_chart(_StoodIn(chart)) == yaml_snapshot(name=f"{topology}-{chart.node.id}")


def test_the_snapshots_stand_in_only_for_the_package_s_own_program_files(default):
    """The template carries the gate's program as the package has it; the normalized template and the
    chart snapshots name its files and stand in for their text (a copy that differs stays in full)."""
    def program_config_maps(template: dict) -> list[dict]:
        return [o for r in template["Resources"].values() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
                and isinstance(r["Properties"]["Manifest"], list) for o in r["Properties"]["Manifest"]
                if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-gate-program")]

    (full,) = program_config_maps(normalized_template(default.template_json, program_files=True))
    archive = base64.b64encode(gate_bundle.archive()).decode()
    assert "data" not in full and full["binaryData"] == {gate_bundle.ARCHIVE: archive}
    assert gate_bundle.unpack(base64.b64decode(full["binaryData"][gate_bundle.ARCHIVE])) == gate_bundle.shipped_files()
    (stood_in,) = program_config_maps(normalized_template(default.template_json))
    assert stood_in["binaryData"] == {gate_bundle.ARCHIVE: PROGRAM_FILE_STAND_IN}
    assert {k: v for k, v in stood_in.items() if k != "binaryData"} == {k: v for k, v in full.items() if k != "binaryData"}
    # An archive, or a file, that differs from the package's stays in full.
    stale = base64.b64encode(b"PK not the package's archive").decode()
    (kept,) = stand_in_program_files([{**full, "binaryData": {gate_bundle.ARCHIVE: stale}}])
    assert kept["binaryData"][gate_bundle.ARCHIVE] == stale
    edited = {"kind": "ConfigMap", "data": {**gate_bundle.files(), "gate.py": "# not the package's gate\n"}}
    (kept,) = stand_in_program_files([edited])
    assert kept["data"]["gate.py"] == "# not the package's gate\n"
    assert kept["data"]["kube.py"] == PROGRAM_FILE_STAND_IN
    other = {"kind": "Secret", "data": gate_bundle.files()}  # only ConfigMaps
    assert stand_in_program_files([other]) == [other]


def test_normalized_template_parses_embedded_manifests_and_masks_assets(default):
    normalized = normalized_template(default.template_json)
    assert "BootstrapVersion" not in normalized.get("Parameters", {})
    assert "CheckBootstrapVersion" not in normalized.get("Rules", {})
    text = json.dumps(normalized)
    assert "<asset-hash>" in text
    manifests = [r["Properties"]["Manifest"] for r in normalized["Resources"].values()
                 if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"]
    assert manifests and all(isinstance(m, list) for m in manifests)
    rayservices = [obj for m in manifests for obj in m if obj["kind"] == "RayService"]
    assert rayservices[0]["spec"]["serveConfigV2"]["applications"][0]["import_path"].startswith("ray.serve.llm:")
    helm_values = [r["Properties"]["Values"] for r in normalized["Resources"].values()
                   if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"]
    assert helm_values and all(isinstance(v, dict) for v in helm_values)


def synth_to_files(config_overrides: dict, outdir: Path) -> tuple[bytes, dict[str, bytes]]:
    config = unpinned_config(config_overrides, "determinism")
    app, stack = build_app(config, outdir=str(outdir), context=FAST_SYNTH_CONTEXT, nag=False)
    assembly = app.synth()
    written = write_manifests(stack.charts, assembly.directory)
    template = (Path(assembly.directory) / f"{stack.artifact_id}.template.json").read_bytes()
    return template, {path.name: path.read_bytes() for path in written}


def test_two_synths_of_the_same_config_are_byte_identical(synth, tmp_path):
    # The first is the session's synth of this configuration (``synth()``: unpinned, cdk-nag off, the
    # same context), written out as synth_to_files does; the second is synthesized here.
    built = synth()
    written = write_manifests(built.stack.charts, tmp_path / "first")
    first = ((built.outdir / f"{built.stack.artifact_id}.template.json").read_bytes(),
             {path.name: path.read_bytes() for path in written})
    second = synth_to_files({}, tmp_path / "second")
    assert first[0] == second[0]
    assert first[1] == second[1]
    assert first[1], "expected rendered manifests"


# What users change day to day. None of it may replace the VPC, subnets, cluster, node groups,
# launch templates, placement or security groups.
DAY_TO_DAY = {
    "topology": "colocated",
    "model": {"served_name": "qwen-prod", "max_model_len": 8192, "gpu_memory_utilization": 0.92,
              "enforce_eager": False, "revision": "0123456789abcdef0123456789abcdef01234567"},
    "decode": {"min_size": 1, "desired_size": 2, "max_size": 3},
    "image": {"digest": "sha256:" + "b" * 64},
    "nixl": {"kv_buffer_device": "cpu"},
}


def tracked(template: dict) -> dict[str, str]:
    return {lid: r["Type"] for lid, r in template["Resources"].items() if r["Type"] in REPLACING_PROPERTIES}


def test_day_to_day_changes_replace_no_infrastructure(default, synth):
    before = normalized_template(default.template_json)
    after = normalized_template(synth(DAY_TO_DAY).template_json)
    assert tracked(before) == tracked(after)
    assert replaced_resources(before, after) == {}
    # The change did reach the cluster: the RayService manifest differs.
    assert before != after


@pytest.mark.parametrize(
    ("change", "replaced_type", "reason"),
    [
        ({"decode": {"instance_type": "g6e.8xlarge"}}, "AWS::EKS::Nodegroup", "InstanceTypes"),
        ({"network": {"vpc_cidr": "10.1.0.0/16"}}, "AWS::EC2::VPC", "CidrBlock"),
        ({"system": {"instance_type": "m7i.2xlarge"}}, "AWS::EKS::Nodegroup", "InstanceTypes"),
    ],
)
def test_documented_replacements(default, synth, change, replaced_type, reason):
    """docs/replacement.md lists these as replacing; keep the docs and the code in step."""
    before = normalized_template(default.template_json)
    replaced = replaced_resources(before, normalized_template(synth(change).template_json))
    assert any(before["Resources"][lid]["Type"] == replaced_type and reason in why for lid, why in replaced.items()), replaced


def test_replaced_resources_reports_removed_logical_ids():
    before = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}}}
    assert replaced_resources(before, {"Resources": {}}) == {"Vpc": ["logical ID removed"]}
    renamed = {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.9.0.0/16"}}}}
    assert replaced_resources(before, renamed) == {"Vpc": ["CidrBlock"]}
