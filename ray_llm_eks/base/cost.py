"""What a deployment costs per hour, from its specs and the dated price table (``base/pricing.py``).

In the base layer because a spend limit (``spend.max_hourly_usd``, :mod:`.spend`) is checked by
every entry point: the configuration (``make synth``), ``ray-llm-eks plan`` and the constructs
used directly all price the node groups here, at their ``min``, ``desired`` or ``max`` sizes.
``ray_llm_eks.planning`` prints these figures (its ``CostEstimate`` adds the per-token price the
benchmark shares).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .observability import ALARM_METRICS, DASHBOARDS, LOG_METRICS, alarm_names, published_metrics
from .placement import WORKER_ROLES
from .pricing import PriceBasis, PriceError, PriceTable, RegionPrices, UnpricedInstance, UnpricedRegion
from .serving import EndpointType, Topology
from .specs import Specs

@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: float
    unit: str
    usd_per_hour: float | None
    """None: unknown (a region the price table has no prices for), never 0."""
    basis: PriceBasis | None


@dataclass(frozen=True)
class CostEstimate:
    region: str
    lines: tuple[CostLine, ...]
    hours_per_month: int
    price_table_as_of: str
    price_sources: dict[str, str]
    excluded: tuple[str, ...]
    estimate_note: str | None
    unknown_reason: str | None = None
    """Why the lines have no prices (the region is not in the price table); None when priced."""

    @property
    def known(self) -> bool:
        return self.unknown_reason is None

    @property
    def hourly_usd(self) -> float | None:
        """None when the price is unknown (:attr:`unknown_reason`)."""
        if not self.known:
            return None
        return sum(line.usd_per_hour or 0.0 for line in self.lines)

    @property
    def monthly_usd(self) -> float | None:
        hourly = self.hourly_usd
        return None if hourly is None else hourly * self.hours_per_month

    @property
    def has_estimates(self) -> bool:
        return bool(self.estimated_items)

    @property
    def estimated_items(self) -> tuple[str, ...]:
        """The lines whose price is an estimate (``basis: estimate`` in prices.yaml), by item."""
        return tuple(line.item for line in self.lines if line.basis is PriceBasis.estimate)


SIZES = ("min", "desired", "max")


def _nodes(pool: Any, size: str) -> int:
    return {"min": pool.min_size, "desired": pool.desired_size, "max": pool.max_size}[size]


@dataclass(frozen=True)
class Footprint:
    """What a plan needs beyond the constructs' specs: where the nodes run and the NAT gateways paid for.

    A configuration gives it (``Deployment.footprint()``); a deployment composed from constructs
    passes its own, for example ``Footprint(region, vpc.data_plane_az, nat_gateways=1)``.
    """

    region: str
    data_plane_az: str
    nat_gateways: int


def cost_estimate(specs: Specs, footprint: Footprint, table: PriceTable, size: str = "desired") -> CostEstimate:
    """The deployment's cost with every GPU node group at its ``min``, ``desired`` or ``max`` size.

    In a region the table has no prices for (:class:`~ray_llm_eks.base.pricing.UnpricedRegion`), every
    line keeps its item and quantity and has no price (None), and the estimate carries the reason."""
    try:
        prices: RegionPrices | None = table.region(footprint.region)
        unknown = None
    except UnpricedRegion as error:
        prices, unknown = None, str(error)
    hours = table.hours_per_month
    lines: list[CostLine] = []

    def line(item: str, quantity: float, unit: str,
             price: Callable[[RegionPrices], tuple[float, PriceBasis]]) -> None:
        """One line; ``price`` gives its USD per hour and basis from the region's prices, when there are any."""
        nonlocal unknown
        if prices is None:
            lines.append(CostLine(item, quantity, unit, None, None))
            return
        try:
            usd, basis = price(prices)
        except UnpricedInstance as error:
            # An offered type without a known price (a P-series outside us-east-1): this line and
            # so the total are unknown, with the reason; the other lines keep their prices.
            unknown = unknown or str(error)
            lines.append(CostLine(item, quantity, unit, None, None))
            return
        lines.append(CostLine(item, quantity, unit, usd, basis))

    def per_node(instance_type: str, count: int) -> Callable[[RegionPrices], tuple[float, PriceBasis]]:
        return lambda p: (p.instance(instance_type).usd_per_hour * count, p.instance(instance_type).basis)

    line("EKS control plane", 1, "cluster", lambda p: (p.eks_cluster_hour, PriceBasis.confirmed))
    system = specs.system
    line(f"system node {system.instance_type}", system.count, "node", per_node(system.instance_type, system.count))
    for role in WORKER_ROLES:
        pool = specs.pool(role)
        count, capacity = _nodes(pool, size), pool.capacity
        if capacity.capacity_block:
            # A Capacity Block has its own price, paid upfront for the whole block; the table's
            # On-Demand rate does not apply, so the configuration's rate prices the plan's nodes.
            rate = capacity.hourly_rate_usd
            line(f"{role} node {pool.instance_type} (Capacity Block {capacity.reservation_id}: "
                 f"{role}.capacity.hourly_rate_usd; the block is paid for in full, used or not)", count, "node",
                 lambda p, r=rate, n=count: (r * n, PriceBasis.configured))
        elif capacity.reserved:
            # EC2 user guide, "Capacity Reservation pricing and billing": a Capacity Reservation is
            # charged at the equivalent On-Demand rate whether instances run in it or not.
            line(f"{role} node {pool.instance_type} (ODCR: the On-Demand rate, billed for the whole "
                 "reservation whether used or not)", count, "node", per_node(pool.instance_type, count))
        else:
            line(f"{role} node {pool.instance_type}", count, "node", per_node(pool.instance_type, count))
    nat = footprint.nat_gateways
    line("NAT gateway (hours only)", nat, "gateway", lambda p: (p.nat_gateway.usd_per_hour * nat, p.nat_gateway.basis))
    line("public IPv4 of the NAT gateway", nat, "address", lambda p: (p.public_ipv4_hour * nat, PriceBasis.confirmed))
    for role in WORKER_ROLES:
        pool = specs.pool(role)
        volume, count = pool.root_volume, _nodes(pool, size)
        line(f"{role} root gp3 {volume.size_gib} GiB, {volume.throughput_mibps} MiB/s, {volume.iops} IOPS",
             count, "volume",
             lambda p, v=volume, n=count: (p.gp3.volume_usd_per_month(v.size_gib, v.throughput_mibps, v.iops)
                                           / hours * n, p.gp3.basis))
    line(f"system root gp3 {system.root_volume_size_gib} GiB", system.count, "volume",
         lambda p: (p.gp3.volume_usd_per_month(system.root_volume_size_gib, p.gp3.BASELINE_THROUGHPUT_MIBPS,
                                               p.gp3.BASELINE_IOPS) / hours * system.count, p.gp3.basis))
    gcs = specs.serving.service.gcs_fault_tolerance
    if gcs.enabled:
        line(f"GCS cache {gcs.cache_node_type} (ElastiCache for Valkey)", gcs.cache_nodes, "node",
             lambda p: (p.cache_node(gcs.cache_node_type).usd_per_hour * gcs.cache_nodes,
                        p.cache_node(gcs.cache_node_type).basis))
    if specs.observability.enabled:
        if table.cloudwatch is None:
            raise PriceError("the price table has no CloudWatch prices, which observability needs")
        cw = table.cloudwatch
        disaggregated = specs.serving.topology is Topology.disaggregated
        continuous = specs.verification.every_minutes is not None
        alarms = alarm_names(disaggregated, continuous)
        alarm_metrics = sum(ALARM_METRICS.get(name, 1) for name in alarms)  # a math alarm: per metric
        metrics = len(LOG_METRICS) + (len(published_metrics(disaggregated)) if continuous else 0)
        monthly = DASHBOARDS * cw.dashboard_month + alarm_metrics * cw.alarm_month + metrics * cw.custom_metric_month
        # The table's CloudWatch figures hold for the covered regions only: unknown elsewhere too.
        line(f"CloudWatch: {DASHBOARDS} dashboard, {len(alarms)} alarms, {metrics} custom metrics", 1, "set",
             lambda p: (monthly / hours, cw.basis))
    excluded = [
        "NAT gateway data processing and internet data transfer (per GB, traffic-dependent)",
        "CloudWatch Logs for VPC flow logs and the control plane (per GB ingested)",
        "ECR storage and image pulls; Hugging Face downloads go through the NAT gateway",
    ]
    if specs.observability.enabled:
        excluded.append("Container Insights observations and container log ingestion (per observation / per GB, "
                        "traffic-dependent)")
    if gcs.enabled:
        excluded.append("the GCS cache's backup storage beyond the free allowance and its cross-AZ replication traffic")
    if specs.serving.service.endpoint is EndpointType.internal_nlb:
        excluded.append("the internal Network Load Balancer (hourly + LCU; not in the price table)")
    return CostEstimate(
        region=footprint.region, lines=tuple(lines), hours_per_month=hours, price_table_as_of=table.as_of,
        price_sources=table.sources, excluded=tuple(excluded),
        estimate_note=prices.multiplier_note if prices is not None else None, unknown_reason=unknown,
    )


