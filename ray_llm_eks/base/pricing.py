"""The dated on-demand price table shipped in ``data/prices.yaml``, as typed objects.

The table says for every figure how it was obtained (``basis``): confirmed against public
tables, assumed equal to us-east-1, or an estimate. ``plan`` shows the date and source and
warns about estimates, so nobody budgets on a number we could not check.
An unknown instance type, or a type the region does not offer, is a :class:`PriceError` that
says which, never a guess; a region without prices is an :class:`UnpricedRegion`, which ``plan``
reports as an unknown price beside its other figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from . import instance_types


class PriceError(LookupError):
    """A price the table cannot give, explained for a person."""


class UnpricedRegion(PriceError):
    """The table has no prices at all for the region. ``plan`` still computes everything that does
    not depend on the region and marks the price unknown with this reason (a real region is
    checked against AWS's list before pricing; an instance type the region does not offer stays a
    plain :class:`PriceError`)."""


class UnpricedInstance(PriceError):
    """The region has prices, and offers the instance type, but the table has no price for the type
    there (no source found: prices.yaml gives none rather than a guess). ``plan`` marks the cost
    unknown with this reason, as for an :class:`UnpricedRegion`."""


class PriceBasis(str, Enum):
    confirmed = "confirmed"
    us_parity = "us_parity"
    price_list = "price_list"
    """The AWS Price List API's figure, as a dated file generated from it in a public repository
    records it (prices.yaml ``sources`` names the file and its date)."""
    estimate = "estimate"
    configured = "configured"
    """A price the configuration gives, not the table: a Capacity Block's ``capacity.hourly_rate_usd``."""


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    basis: PriceBasis


@dataclass(frozen=True)
class Gp3Prices:
    """gp3 volume prices; throughput and IOPS are charged only above the free baseline."""

    usd_per_gb_month: float
    usd_per_mbps_month: float
    usd_per_iops_month: float
    basis: PriceBasis

    BASELINE_THROUGHPUT_MIBPS = 125
    BASELINE_IOPS = 3000

    def volume_usd_per_month(self, size_gib: int, throughput_mibps: int, iops: int) -> float:
        # AWS bills gp3 per GB-month of provisioned size; size_gib is what the launch template asks for.
        extra_throughput = max(0, throughput_mibps - self.BASELINE_THROUGHPUT_MIBPS)
        extra_iops = max(0, iops - self.BASELINE_IOPS)
        return (
            size_gib * self.usd_per_gb_month
            + extra_throughput * self.usd_per_mbps_month
            + extra_iops * self.usd_per_iops_month
        )


@dataclass(frozen=True)
class RegionPrices:
    region: str
    eks_cluster_hour: float
    nat_gateway: Price
    public_ipv4_hour: float
    gp3: Gp3Prices
    instances: dict[str, Price]
    unavailable: frozenset[str]
    multiplier_note: str | None = None
    cache_nodes: dict[str, Price] = field(default_factory=dict)
    """ElastiCache for Valkey node types (``serving.gcs_fault_tolerance``)."""

    def cache_node(self, node_type: str) -> Price:
        price = self.cache_nodes.get(node_type)
        if price is None:
            raise PriceError(
                f"the price table has no ElastiCache for Valkey price for {node_type!r} in {self.region}; "
                f"known here: {', '.join(sorted(self.cache_nodes)) or 'none'}"
            )
        return price

    def instance(self, instance_type: str) -> Price:
        if instance_type in self.unavailable:
            raise PriceError(
                f"instance type {instance_type} is not offered in {self.region}; "
                f"choose another region or instance type (offered here: {', '.join(sorted(self.instances))})"
            )
        price = self.instances.get(instance_type)
        if price is None:
            raise UnpricedInstance(
                f"the price table has no price for instance type {instance_type!r} in {self.region}; "
                f"known here: {', '.join(sorted(self.instances))}"
            )
        return price


@dataclass(frozen=True)
class CloudWatchPrices:
    """Monthly, per item (the same in every covered region to within a few cents)."""

    dashboard_month: float
    alarm_month: float
    custom_metric_month: float
    basis: PriceBasis


@dataclass(frozen=True)
class PriceTable:
    as_of: str
    hours_per_month: int
    sources: dict[str, str]
    regions: dict[str, RegionPrices]
    cloudwatch: CloudWatchPrices | None = None

    def region(self, region: str) -> RegionPrices:
        prices = self.regions.get(region)
        if prices is None:
            raise UnpricedRegion(
                f"the price table (as of {self.as_of}) has no prices for region {region!r}; "
                f"covered regions: {', '.join(sorted(self.regions))}"
            )
        return prices


def _basis(value: str, where: str) -> PriceBasis:
    try:
        return PriceBasis(value)
    except ValueError:
        raise ValueError(f"prices.yaml {where}: unknown basis {value!r}") from None


def _region(name: str, raw: dict[str, Any]) -> RegionPrices:
    gp3 = raw["gp3"]
    instances = {
        itype: Price(float(entry["hour"]), _basis(entry["basis"], f"{name}.{itype}"))
        for itype, entry in raw["instances"].items()
    }
    # Which types the region lacks is the library's one offerings table (base.instance_types), not
    # a second list here: every entry point refuses those types before a price is looked up.
    offered = instance_types.offered_in(name)
    unavailable = frozenset() if offered is None else frozenset(instance_types.INSTANCE_TYPES) - offered
    unknown = set(instances) - set(instance_types.INSTANCE_TYPES)
    if unknown:
        raise ValueError(f"prices.yaml {name}: instance types not in instance_types.py: {sorted(unknown)}")
    return RegionPrices(
        region=name,
        eks_cluster_hour=float(raw["eks_cluster_hour"]),
        nat_gateway=Price(float(raw["nat_gateway"]["hour"]), _basis(raw["nat_gateway"]["basis"], f"{name}.nat_gateway")),
        public_ipv4_hour=float(raw["public_ipv4_hour"]),
        gp3=Gp3Prices(
            usd_per_gb_month=float(gp3["gb_month"]),
            usd_per_mbps_month=float(gp3["mbps_month"]),
            usd_per_iops_month=float(gp3["iops_month"]),
            basis=_basis(gp3["basis"], f"{name}.gp3"),
        ),
        instances=instances,
        unavailable=unavailable,
        multiplier_note=raw.get("multiplier_note"),
        cache_nodes={node_type: Price(float(entry["hour"]), _basis(entry["basis"], f"{name}.{node_type}"))
                     for node_type, entry in (raw.get("elasticache_valkey") or {}).items()},
    )


def parse_price_table(raw: dict[str, Any]) -> PriceTable:
    return PriceTable(
        as_of=str(raw["as_of"]),
        hours_per_month=int(raw["hours_per_month"]),
        sources={key: str(value) for key, value in raw["sources"].items()},
        regions={name: _region(name, body) for name, body in raw["regions"].items()},
        cloudwatch=_cloudwatch(raw["cloudwatch"]) if "cloudwatch" in raw else None,
    )


def _cloudwatch(raw: dict[str, Any]) -> CloudWatchPrices:
    return CloudWatchPrices(dashboard_month=float(raw["dashboard_month"]), alarm_month=float(raw["alarm_month"]),
                            custom_metric_month=float(raw["custom_metric_month"]),
                            basis=_basis(raw["basis"], "cloudwatch"))


@lru_cache(maxsize=1)
def load_price_table() -> PriceTable:
    """The table shipped with the package (read once)."""
    text = resources.files("ray_llm_eks").joinpath("data/prices.yaml").read_text()
    return parse_price_table(yaml.safe_load(text))
