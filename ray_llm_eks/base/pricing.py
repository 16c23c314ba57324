"""The dated on-demand price table shipped in ``data/prices.yaml``, as typed objects.

The table says for every figure how it was obtained (``basis``): confirmed against public
tables, assumed equal to us-east-1, or an estimate. ``plan`` shows the date and source and
warns about estimates, so nobody budgets on a number we could not check.
An unknown instance type, or a type the region does not offer, is a :class:`PriceError` that
says which, never a guess; a region without prices is an :class:`UnpricedRegion`, which ``plan``
reports as an unknown price beside its other figures.

Every type a region of ``data/generated/ec2_offerings.json`` offers has a price: where the table
has no figure, :func:`parse_price_table` estimates one (basis ``estimate``, and the region's
``multiplier_note`` says how): the us-east-1 figure (:data:`STAND_INS` for a type us-east-1 does
not offer) times the region's ratio to us-east-1 in the table, by family (``g6e``), else by class
(GPU or CPU); for a region the table has no figures for, the highest ratio of any region in it, and
its highest NAT, gp3 and cache figures. No public price source for every region was reachable
offline (prices.yaml says what was checked), so these are labelled, never passed off as prices.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
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


BASE_REGION = "us-east-1"
"""The region every estimate scales from: the table's most complete one (every type it offers has a figure)."""

STAND_INS = {"p5e.48xlarge": "p5en.48xlarge"}
"""A type with no us-east-1 figure (EC2 does not offer it there, ec2_offerings.json), priced where
it is offered as its nearest type that has one: p5e.48xlarge and p5en.48xlarge both carry 8 H200
GPUs (141 GB each); p5en adds a newer CPU and EFAv3 (https://aws.amazon.com/ec2/instance-types/p5/)."""


def _class_of(instance_type: str) -> str:
    return "GPU" if instance_types.INSTANCE_TYPES[instance_type].gpus else "CPU"


def _ratios(table: dict[str, RegionPrices], region: str) -> dict[str, float]:
    """The region's price over us-east-1's, from the figures the table has for both, by family
    (``g6e``) and by class (``GPU``/``CPU``); the highest where they differ, so an estimate errs high."""
    base, here = table[BASE_REGION].instances, table[region].instances
    found: dict[str, float] = {}
    for itype, price in here.items():
        if itype in base:  # the table's own estimates too: their multipliers are stated (multiplier_note)
            ratio = round(price.usd_per_hour / base[itype].usd_per_hour, 4)
            for key in (itype.split(".")[0], _class_of(itype)):
                found[key] = max(found.get(key, 0.0), ratio)
    return found


def _estimated(table: dict[str, RegionPrices], region: str, offered: frozenset[str]) -> RegionPrices:
    """The region's prices with every offered type the table lacks priced by the documented rule
    (this module's docstring): the us-east-1 figure (or :data:`STAND_INS`'s) times the region's ratio
    for the family, else for the class; for a region the table has no figures for at all, the
    highest ratio any region of the table has, and the highest of its NAT, gp3 and cache figures."""
    base = table[BASE_REGION]
    known = table.get(region)
    if known is not None:
        ratios = _ratios(table, region)
    else:
        everywhere = [_ratios(table, name) for name in table if name != BASE_REGION]
        ratios = {key: max(r.get(key, 0.0) for r in everywhere) for key in ("GPU", "CPU")}
    filled: dict[str, Price] = {}
    how: dict[str, list[str]] = {}
    for itype in sorted(offered):
        if known is not None and itype in known.instances:
            continue
        source = itype if itype in base.instances else STAND_INS.get(itype)
        if source is None or source not in base.instances:
            continue  # no figure to scale: UnpricedInstance says so
        family = itype.split(".")[0]
        key = family if family in ratios else _class_of(itype)
        factor = ratios.get(key, max(ratios.values(), default=1.0))
        filled[itype] = Price(round(base.instances[source].usd_per_hour * factor, 5), PriceBasis.estimate)
        label = f"{key} x {factor:g}" + (f" ({itype} as {source})" if source != itype else "")
        how.setdefault(label, []).append(itype)
    if not filled:
        return known
    rule = "; ".join(f"{', '.join(types)}: us-east-1 {label}" for label, types in how.items())
    origin = ("the region's own ratio to us-east-1 in this table" if known is not None
              else "the highest ratio to us-east-1 of any region in this table, as are NAT, gp3 and cache figures")
    note = f"Estimated by rule (ray_llm_eks/base/pricing.py), {origin}: {rule}"
    if known is not None:
        return replace(known, instances={**known.instances, **filled},
                       multiplier_note=f"{known.multiplier_note} {note}" if known.multiplier_note else note)
    others = [prices for name, prices in table.items() if name != BASE_REGION] or [base]

    def highest(get):
        return max(others, key=lambda prices: get(prices))

    nat, gp3 = highest(lambda p: p.nat_gateway.usd_per_hour).nat_gateway, highest(lambda p: p.gp3.usd_per_gb_month).gp3
    return RegionPrices(
        region=region, eks_cluster_hour=base.eks_cluster_hour,  # one price in every commercial region (eks/pricing)
        nat_gateway=Price(nat.usd_per_hour, PriceBasis.estimate), public_ipv4_hour=base.public_ipv4_hour,
        gp3=Gp3Prices(gp3.usd_per_gb_month, gp3.usd_per_mbps_month, gp3.usd_per_iops_month, PriceBasis.estimate),
        instances=filled, unavailable=frozenset(instance_types.INSTANCE_TYPES) - offered, multiplier_note=note,
        cache_nodes={node: Price(max(p.cache_nodes[node].usd_per_hour for p in others if node in p.cache_nodes),
                                 PriceBasis.estimate) for node in base.cache_nodes})


def parse_price_table(raw: dict[str, Any]) -> PriceTable:
    regions = {name: _region(name, body) for name, body in raw["regions"].items()}
    if BASE_REGION in regions:
        listed = instance_types.offerings()["instance_types"]
        regions = {**regions, **{name: _estimated(regions, name, frozenset(types))
                                 for name, types in sorted(listed.items()) if types}}
    return PriceTable(
        as_of=str(raw["as_of"]),
        hours_per_month=int(raw["hours_per_month"]),
        sources={key: str(value) for key, value in raw["sources"].items()},
        regions=regions,
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
