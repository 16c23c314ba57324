"""Write ray_llm_eks/data/generated/regions.json: the AWS regions aws-cdk-lib's region facts know
(``aws_cdk.region_info.RegionInfo.regions``), so a configuration naming a region that does not
exist (``us-west-3``) is refused at once by every entry point, not only by ``plan``'s price table.

Run with ``make generate`` after upgrading aws-cdk-lib; tests/base/test_infrastructure_regions.py fails while the file
and the installed region facts disagree.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "ray_llm_eks" / "data" / "generated" / "regions.json"


def regions() -> list[str]:
    from aws_cdk import region_info

    return sorted(info.name for info in region_info.RegionInfo.regions)


def main() -> None:
    document = {"source": f"aws-cdk-lib {version('aws-cdk-lib')} region_info.RegionInfo.regions",
                "regions": regions()}
    TARGET.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {TARGET} ({len(document['regions'])} regions)")


if __name__ == "__main__":
    main()
