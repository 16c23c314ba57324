"""``ray_llm_eks.testing.REPLACING_PROPERTIES`` is CloudFormation's own: the create-only properties
of each watched type in the resource provider schemas that cfn-lint bundles."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

from ray_llm_eks import testing

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("generate", ROOT / "tools" / "generate_create_only_properties.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_table_is_what_the_installed_schemas_say():
    """Fails after a cfn-lint upgrade that changed a schema: run ``make generate``."""
    committed = json.loads(testing.CREATE_ONLY_FILE.read_text())
    assert committed == _generator().document()


def test_the_table_holds_what_a_hand_written_one_missed():
    assert "Tags" in testing.REPLACING_PROPERTIES["AWS::EC2::PlacementGroup"]
    assert "VpcEncryptionControl" in testing.REPLACING_PROPERTIES["AWS::EC2::VPC"]
    assert {"Ipv4IpamPoolId", "Ipv6IpamPoolId", "Ipv4NetmaskLength"} <= set(testing.REPLACING_PROPERTIES["AWS::EC2::Subnet"])


def test_a_tag_change_on_the_placement_group_is_reported_as_a_replacement(default):
    before = testing.normalized_template(default.template_json)
    after = copy.deepcopy(before)
    (group,) = [lid for lid, r in after["Resources"].items() if r["Type"] == "AWS::EC2::PlacementGroup"]
    properties = after["Resources"][group].setdefault("Properties", {})
    properties["Tags"] = [*properties.get("Tags", []), {"Key": "team", "Value": "inference"}]
    assert testing.replaced_resources(before, after) == {group: ["Tags"]}
