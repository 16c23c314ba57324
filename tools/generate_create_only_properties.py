"""Write ray_llm_eks/data/generated/create_only_properties.json from cfn-lint's bundled
CloudFormation resource provider schemas: for each resource type the library must never replace by
accident, the ``createOnlyProperties`` (a change to one replaces the resource), in every region the
schemas cover, as dotted paths.

Run with ``make generate`` after upgrading cfn-lint; tests/test_testing.py fails while
the file and the installed schemas disagree.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "ray_llm_eks" / "data" / "generated" / "create_only_properties.json"
WATCHED_TYPES = (
    "AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EKS::Cluster", "AWS::EKS::Nodegroup",
    "AWS::EC2::LaunchTemplate", "AWS::EC2::PlacementGroup", "AWS::EC2::SecurityGroup",
)
"""The network, the cluster, its node groups and what they run on: losing one interrupts serving."""


def create_only_properties() -> dict[str, list[str]]:
    """Dotted paths of the create-only properties of each watched type, the union over regions."""
    from cfnlint.helpers import REGIONS
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    table: dict[str, list[str]] = {}
    for resource_type in WATCHED_TYPES:
        paths: set[str] = set()
        for region in REGIONS:
            try:
                schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, resource_type).schema
            except Exception:  # noqa: BLE001 - a region without the type
                continue
            for pointer in schema.get("createOnlyProperties") or ():
                parts = pointer.split("/")
                assert parts[:2] == ["", "properties"], pointer
                paths.add(".".join(parts[2:]))
        if not paths:
            raise SystemExit(f"{resource_type}: no schema lists it; is cfn-lint installed?")
        table[resource_type] = sorted(paths)
    return table


def document() -> dict[str, object]:
    return {
        "generated_by": "make generate (tools/generate_create_only_properties.py)",
        "source": f"cfn-lint {version('cfn-lint')} bundled resource provider schemas, createOnlyProperties, "
                  "union over every region",
        "properties": create_only_properties(),
    }


def main() -> int:
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(json.dumps(document(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {TARGET.relative_to(Path.cwd()) if TARGET.is_relative_to(Path.cwd()) else TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
