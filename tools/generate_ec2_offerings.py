"""Write ray_llm_eks/data/generated/ec2_offerings.json: for each region, its availability zones and
which of the library's instance types (``ray_llm_eks.base.instance_types``) EC2 offers there.

Source: the snapshots of the EC2 API that moto ships (real ``DescribeAvailabilityZones`` and
``DescribeInstanceTypeOfferings`` answers, recorded by moto's maintainers):

- zones: ``moto/ec2/models/availability_zones_and_regions.py`` (``RegionsAndZonesBackend.zones``,
  zone type ``availability-zone`` only: Local Zones and Wavelength Zones are not AZ letters) and the
  ``Location``s of ``moto/ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz``;
- instance types: ``moto/ec2/resources/instance_type_offerings/region/<region>.json.gz``.

Those answers come from one AWS account. In the regions where AWS maps AZ letters to zones per
account (https://docs.aws.amazon.com/global-infrastructure/latest/regions/az-ids.html, "Regions with
independently mapped Availability Zones"), an older account can see a letter that account did not:
``ACCOUNT_MAPPED_LETTERS`` adds those, each with its source, so a real AZ of some account is never
refused. A region without a snapshot is absent from the table, and the checks accept it.

Run with ``make generate`` after upgrading moto or adding an instance type; tests/base/test_infrastructure_regions.py
fails while the file and the installed snapshots disagree.
"""

from __future__ import annotations

import gzip
import json
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "ray_llm_eks" / "data" / "generated" / "ec2_offerings.json"

ACCOUNT_MAPPED_LETTERS = {
    # usw1-az1/az2/az3: an account sees two of the three, as us-west-1a/1b or us-west-1b/1c (older
    # accounts); moto's account has a and b. Listed as a, b, c by github.com/jsonmaur/aws-regions.
    "us-west-1": ["us-west-1c"],
    # apne1-az3 is open only to accounts that used it before it was closed to new ones; those see it
    # as ap-northeast-1b (github.com/jsonmaur/aws-regions lists a, b, c, d); moto's account has a, c, d.
    "ap-northeast-1": ["ap-northeast-1b"],
}
ACCOUNT_MAPPED_SOURCE = ("AWS, AZ IDs, 'Regions with independently mapped Availability Zones' "
                         "(docs.aws.amazon.com/global-infrastructure/latest/regions/az-ids.html); "
                         "github.com/jsonmaur/aws-regions")


def _offerings(kind: str) -> dict[str, list[dict[str, str]]]:
    folder = files("moto.ec2.resources.instance_type_offerings") / kind
    return {entry.name.removesuffix(".json.gz"): json.loads(gzip.decompress(entry.read_bytes()))
            for entry in folder.iterdir() if entry.name.endswith(".json.gz")}


def availability_zones() -> dict[str, list[str]]:
    from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend

    zones: dict[str, set[str]] = {}
    for region_name, region_zones in RegionsAndZonesBackend.zones.items():
        zones.setdefault(region_name, set()).update(
            z.name for z in region_zones if z.zone_type == "availability-zone")
    for region_name, offerings in _offerings("availability-zone").items():
        zones.setdefault(region_name, set()).update(o["Location"] for o in offerings)
    for region_name, extra in ACCOUNT_MAPPED_LETTERS.items():
        zones[region_name].update(extra)
    return {name: sorted(azs) for name, azs in sorted(zones.items()) if azs}


def instance_types() -> dict[str, list[str]]:
    from ray_llm_eks.base.instance_types import INSTANCE_TYPES

    return {region_name: sorted({o["InstanceType"] for o in offerings} & set(INSTANCE_TYPES))
            for region_name, offerings in sorted(_offerings("region").items())}


def document() -> dict:
    moto = f"moto {version('moto')}"
    return {
        "source": {
            "availability_zones": f"{moto} ec2/models/availability_zones_and_regions.py and "
                                  "ec2/resources/instance_type_offerings/availability-zone (EC2 "
                                  f"DescribeAvailabilityZones, DescribeInstanceTypeOfferings); plus {ACCOUNT_MAPPED_SOURCE}",
            "instance_types": f"{moto} ec2/resources/instance_type_offerings/region (EC2 "
                              "DescribeInstanceTypeOfferings, LocationType region), the library's instance types only",
        },
        "account_mapped_letters": ACCOUNT_MAPPED_LETTERS,
        "availability_zones": availability_zones(),
        "instance_types": instance_types(),
    }


def main() -> None:
    doc = document()
    TARGET.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {TARGET} ({len(doc['availability_zones'])} regions with zones, "
          f"{len(doc['instance_types'])} with instance offerings)")


if __name__ == "__main__":
    main()
