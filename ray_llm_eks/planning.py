"""What a deployment needs and costs, computed from its config before anything is deployed.

Pure computation: no AWS calls. Inputs are the declared :class:`~ray_llm_eks.base.deployment.Deployment` (or a composed deployment's :class:`Specs` and :class:`Footprint`),
the model architecture table (:mod:`ray_llm_eks.base.models`, or ``model.architecture`` in the
config), the instance facts (:mod:`ray_llm_eks.base.instance_types`) and the dated price table
(:mod:`ray_llm_eks.base.pricing`). ``docs/plan.md`` works the reference deployment by hand.

Every assumption that is not a published fact is a named constant below with the reason.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .base import instance_types, sizing, upstream_defects
from .bench import cost as bench_cost
from .base.deployment import Deployment
from .base.specs import Specs
from .base.models import ModelArchitecture, licence_record
from .base.cost import SIZES, CostLine, Footprint, cost_estimate  # noqa: F401 - this module's names before the move
from .base.cost import CostEstimate as BaseCostEstimate
from .base.pricing import PriceBasis, PriceError, PriceTable, load_price_table  # noqa: F401 - likewise
from .base.errors import SpecError
from .base.memory import DTYPE_BYTES, PROFILE_RESERVE_GIB, MemoryBudget, kv_layout
from .base.composition import check_max_hourly
from .base.spend import SpendSpec
from .base.units import GIB
from .base.placement import DECODE, PREFILL, WORKER_ROLES
from .base.serving import ServingSpec, Topology

MEBIBYTE = 2**20  # gp3 throughput is provisioned in MiB/s (EC2 CreateVolume / launch template "Throughput").
GIGABIT = 10**9

# When NIXL silently falls back to TCP (UCX over the ENA interface), one flow is what moves a
# request's KV cache. EC2 limits single-flow traffic to 5 Gbps between instances, 10 Gbps
# inside one cluster placement group (EC2 User Guide, "Amazon EC2 instance network bandwidth").
TCP_SINGLE_FLOW_GBPS = 5.0
TCP_SINGLE_FLOW_GBPS_IN_PLACEMENT_GROUP = 10.0


class PlanError(ValueError):
    """The plan cannot be computed from these inputs (for example, a non-positive token rate)."""


# --- the throughput model (docs/scaling.md, "How the planner sizes each leg") ---------------------

PREFILL_MFU = 0.5
"""Assumption: the share of a GPU's dense BF16 peak that prefill reaches. Pope et al. 2022
("Efficiently Scaling Transformer Inference", arXiv 2211.05102) report 76% for large-batch
prompt processing on TPU v4; no published figure for vLLM on L4/L40S/A10G was found, so this is a
round, lower figure to be replaced by a measurement (docs/scaling.md says how)."""
DECODE_MBU = 0.6
"""Assumption: the share of a GPU's memory bandwidth that decode reaches. Databricks, "LLM
Inference Performance Engineering: Best Practices" (2023), measured 55-60% on A100 and H100 with
TensorRT-LLM."""


@dataclass(frozen=True)
class Workload:
    """Traffic to size for: mean prompt (input) and answer (output) tokens, and requests per second."""

    isl: int
    osl: int
    rate: float

    def __post_init__(self) -> None:
        for name in ("isl", "osl"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlanError(f"--{name}: not a token count (got {value!r}); accepted: a whole number >= 1")
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or not self.rate > 0:
            raise PlanError(f"--rate: not a request rate (got {self.rate!r}); accepted: requests per second > 0")


@dataclass(frozen=True)
class LegCapacity:
    """What one leg needs for a workload, from the throughput model."""

    role: str
    gpu_model: str
    replicas_per_node: int
    per_replica: dict[str, float]
    """prefill: ``flops_per_request``, ``seconds_per_request``; decode: ``batch`` (sequences the KV
    pool holds at isl + osl), ``step_ms`` (one decode step at that batch), ``tokens_per_second``."""
    replicas_needed: float
    """Replicas busy all the time at this rate (a fraction: what the leg's capacity must cover)."""
    nodes_needed: float
    nodes_recommended: int
    nodes_configured: tuple[int, int, int]
    """The node group's min, desired and max sizes."""


@dataclass(frozen=True)
class CapacityPlan:
    workload: Workload
    prefill: LegCapacity
    decode: LegCapacity
    recommended_prefill_decode_ratio: float
    """Prefill nodes per decode node: the legs' needed nodes divided, before rounding."""
    node_start_seconds: float
    assumptions: tuple[str, ...]


def prefill_seconds(spec: ServingSpec, role: str, prompt_tokens: int) -> float:
    """Seconds one replica of ``role`` takes to prefill a prompt of ``prompt_tokens``, by the roofline
    at :data:`PREFILL_MFU` (the capacity model's prefill leg; the SLO planner's, on either leg)."""
    return prefill_flops(spec, prompt_tokens) / _peak_flops(spec, role)


def prefill_flops(spec: ServingSpec, prompt_tokens: int) -> int:
    model = spec.architecture
    # Kaplan et al. 2020 (arXiv 2001.08361, Table 1): 2N FLOPs per token for the weights, plus the
    # attention scores, 2 x layers x context x d_attn per token, which summed over a causal prompt
    # of L tokens is 2 x layers x L^2 x d_attn; only full-attention layers have it.
    d_attn = model.num_attention_heads * model.head_dim
    # A MoE multiplies each token through its active parameters only (parameters_per_token).
    return 2 * model.parameters_per_token * prompt_tokens + 2 * model.full_attention_layers * prompt_tokens ** 2 * d_attn


def _peak_flops(spec: ServingSpec, role: str) -> float:
    return spec.tensor_parallel_size(role) * spec.pool(role).instance.gpu_dense_bf16_tflops * 1e12 * PREFILL_MFU


def _prefill_capacity(spec: ServingSpec, workload: Workload) -> LegCapacity:
    flops = prefill_flops(spec, workload.isl)
    seconds = flops / _peak_flops(spec, PREFILL)
    return _leg(spec, PREFILL, {"flops_per_request": float(flops), "seconds_per_request": round(seconds, 6)},
                workload.rate * seconds)


def decode_batch(spec: ServingSpec, isl: int, osl: int) -> int:
    """The sequences of ``isl + osl`` tokens one decode replica's KV pool holds (whole blocks, as
    vLLM allocates them); raises :class:`PlanError` when not one fits."""
    dtype = DTYPE_BYTES[spec.model.dtype]
    budget = next(b for b in spec.memory_budgets() if b.role == DECODE)
    layout = kv_layout(spec.architecture, dtype, spec.tensor_parallel_size(DECODE))
    batch = budget.kv_blocks // layout.blocks_per_request(isl + osl)
    if batch < 1:
        raise PlanError(f"--isl {isl} + --osl {osl}: one sequence of {isl + osl} tokens does not fit "
                        f"the decode leg's KV pool ({budget.kv_pool_gib:.2f} GiB per GPU); accepted: fewer tokens, or "
                        "the fixes `plan` lists for model.max_model_len")
    return batch


def decode_step_seconds(spec: ServingSpec, isl: int, osl: int, batch: float) -> tuple[float, float]:
    """One decode step of a replica holding ``batch`` sequences of ``isl`` prompt and ``osl`` answer
    tokens: (memory-bound seconds, compute-bound seconds); the step takes the larger."""
    model, instance, tp = spec.architecture, spec.pool(DECODE).instance, spec.tensor_parallel_size(DECODE)
    dtype = DTYPE_BYTES[spec.model.dtype]
    budget = next(b for b in spec.memory_budgets() if b.role == DECODE)
    kv_per_token, state = budget.kv_cache_bytes_per_token, budget.linear_state_bytes_per_sequence
    # Each step reads the weights once and, per sequence, its KV cache (half the answer written
    # on average) and reads and writes a hybrid model's linear state; memory-bound unless the
    # batch's 2N FLOPs per token take longer (then compute-bound).
    per_sequence = ((isl + osl / 2) * kv_per_token + 2 * state
                    + model.sliding_window_bytes_per_sequence(dtype, isl + osl, tp))
    weights = model.weight_bytes(dtype, vision=spec.model.serve_images)
    memory = (weights / tp + batch * per_sequence) / (instance.gpu_memory_bandwidth_gbps * 1e9 * DECODE_MBU)
    compute = 2 * model.parameters_per_token * batch / (tp * instance.gpu_dense_bf16_tflops * 1e12 * PREFILL_MFU)
    return memory, compute


def _decode_capacity(spec: ServingSpec, workload: Workload) -> LegCapacity:
    batch = decode_batch(spec, workload.isl, workload.osl)
    step = max(decode_step_seconds(spec, workload.isl, workload.osl, batch))
    tokens_per_second = batch / step
    return _leg(spec, DECODE, {"batch": float(batch), "step_ms": round(step * 1000, 3),
                               "tokens_per_second": round(tokens_per_second, 3)},
                workload.rate * workload.osl / tokens_per_second)


def _leg(spec: ServingSpec, role: str, per_replica: dict[str, float], replicas: float) -> LegCapacity:
    pool, per_node = spec.pool(role), spec.replicas_per_node(role)
    nodes = replicas / per_node
    return LegCapacity(role=role, gpu_model=pool.instance.gpu_model or "", replicas_per_node=per_node,
                       per_replica=per_replica, replicas_needed=round(replicas, 6), nodes_needed=round(nodes, 6),
                       nodes_recommended=max(1, math.ceil(nodes)),
                       nodes_configured=(pool.min_size, pool.desired_size, pool.max_size))


def capacity_plan(spec: ServingSpec, workload: Workload) -> CapacityPlan:
    """Prefill and decode capacity for ``workload`` and the P:D ratio (docs/scaling.md works it by hand).

    A roofline at assumed efficiencies (:data:`PREFILL_MFU`, :data:`DECODE_MBU`): prefill is
    FLOP-bound (a request costs its prompt's FLOPs), decode memory-bandwidth-bound (a step reads
    the weights and every sequence's KV cache and state, at the largest batch the KV pool holds).
    Stated error: the efficiencies are assumptions, and each leg's need scales with the inverse of
    its own (half the MFU doubles prefill's need); queueing, chunked prefill and the KV transfer
    are not modelled. Measure with ``ray-llm-eks bench`` and correct the ratio by the measured
    rates (docs/scaling.md, "Checking the model")."""
    if workload.isl + workload.osl > spec.model.max_model_len:
        raise PlanError(f"--isl {workload.isl} + --osl {workload.osl} exceeds model.max_model_len "
                        f"{spec.model.max_model_len}; accepted: a workload the deployment accepts, or a larger "
                        "model.max_model_len")
    for role in WORKER_ROLES:
        instance = spec.pool(role).instance
        if not (instance.gpu_dense_bf16_tflops and instance.gpu_memory_bandwidth_gbps):
            raise PlanError(f"{role}.instance_type {instance.name}: no GPU peak figures in the instance table")
    prefill, decode = _prefill_capacity(spec, workload), _decode_capacity(spec, workload)
    start = max(spec.node_start(role).seconds for role in WORKER_ROLES)
    if decode.nodes_needed <= 0:  # rounding at a vanishing rate
        raise PlanError(f"--rate {workload.rate:g}: too small to size a leg; accepted: a rate of at least 1e-6 "
                        "requests/s")
    return CapacityPlan(
        workload=workload, prefill=prefill, decode=decode,
        recommended_prefill_decode_ratio=round(prefill.nodes_needed / decode.nodes_needed, 4),
        node_start_seconds=round(start, 1),
        assumptions=(
            f"prefill at {PREFILL_MFU:.0%} of the GPU's dense BF16 peak (MFU), decode at {DECODE_MBU:.0%} of its "
            "memory bandwidth (MBU): assumptions to replace with measurements",
            "prefill FLOPs = 2 x parameters x prompt tokens + 2 x full-attention layers x prompt^2 x heads x head_dim",
            "decode batch = the sequences of isl + osl tokens the decode KV pool holds; a step reads the weights and "
            "each sequence's KV cache (prompt + half the answer) and reads and writes its linear state",
            "replicas needed = the busy replicas at this rate, with no headroom: size ranges above them",
        ),
    )


@dataclass(frozen=True)
class NodePlan:
    role: str
    instance_type: str
    count: int
    vcpus: int
    memory_gib: int
    gpus: int
    gpu_model: str | None
    network_gbps: float
    efa: bool


@dataclass(frozen=True)
class KvTransfer:
    bytes_per_request: int
    prompt_tokens: int
    efa_gbps: float
    efa_seconds: float
    tcp_fallback_gbps: float
    tcp_fallback_seconds: float
    applies: bool
    assumption: str
    node_efa_gbps: float = 0.0
    """All the EFA devices of a node together (the slower leg's node): what TP 8 on an 8-GPU node,
    or a node's replicas together, can reach."""
    efa_devices_per_replica: int = 1
    """EFA devices one replica's transfer uses (the fewer of the two legs'): ``efa_gbps`` is their sum."""


@dataclass(frozen=True)
class ColdStart:
    checkpoint_bytes: int
    by_role: dict[str, float]
    """Seconds to read the checkpoint from each leg's root volume."""
    throughput_mibps: dict[str, int]

    @property
    def seconds(self) -> float:
        # The service is ready when its slowest leg has loaded.
        return max(self.by_role.values())


@dataclass(frozen=True)
class CostEstimate(BaseCostEstimate):
    """The base layer's estimate (:mod:`ray_llm_eks.base.cost`), with the per-token price the benchmark shares."""

    def usd_per_million_output_tokens(self, tokens_per_second: float) -> float | None:
        if tokens_per_second <= 0:
            raise ValueError(f"tokens_per_second must be positive; got {tokens_per_second}")
        if self.hourly_usd is None:
            return None
        # One formula for the plan and the benchmark's summary.
        return bench_cost.usd_per_million_output_tokens(self.hourly_usd, tokens_per_second)


def _cost(specs: Specs, footprint: Footprint, table: PriceTable, size: str = "desired") -> CostEstimate:
    """The deployment's cost with every GPU node group at its ``min``, ``desired`` or ``max`` size
    (:func:`ray_llm_eks.base.cost.cost_estimate`)."""
    estimate = cost_estimate(specs, footprint, table, size)
    return CostEstimate(**{f.name: getattr(estimate, f.name) for f in fields(estimate)})

@dataclass(frozen=True)
class IdleCost:
    """What the GPU nodes cost per hour while serving nothing (docs/plan.md, "Idle cost").

    A GPU node is paid by the hour whether it serves or not, so with zero traffic the GPU node
    lines of the cost are all idle: at every GPU node group's ``min_size`` (the floor the
    deployment never goes below, autoscaled or not) and at its ``desired_size`` (what the
    deployment runs until something scales it). The prices are the cost table's GPU node lines
    (a Capacity Block at its configured rate); root volumes, the system node, the control plane
    and the NAT gateway are paid too, and are in the hourly totals, not here. None: price unknown."""

    gpus_min: int
    gpus_desired: int
    usd_per_hour_min: float | None
    usd_per_hour_desired: float | None
    by_role: dict[str, dict[str, Any]]
    """Per leg: ``instance_type``, ``nodes_min``, ``nodes_desired``, ``usd_per_hour_min``, ``usd_per_hour_desired``."""


@dataclass(frozen=True)
class DuplicateModelMemory:
    """GPU memory the model's weights take, in GiB (docs/plan.md, "Duplicate model memory").

    Every model replica holds the whole model (its TP group's GPUs each 1/TP of it), so the
    deployment holds ``copies`` = the replicas of both legs at their desired sizes. A
    disaggregated request passes through one prefill replica and one decode replica: its path
    holds the weights twice where a colocated replica holds them once, and ``duplicate_gib`` is
    that second copy (0 when colocated). That memory is not KV cache."""

    topology: str
    weights_gib_per_replica: float
    replicas: dict[str, int]
    """Model replicas per leg at the node groups' desired sizes."""
    copies: int
    total_gib: float
    per_request_path_gib: float
    """Weights held by the replicas one request passes through: two legs when disaggregated."""
    colocated_per_request_path_gib: float
    duplicate_gib: float
    share_of_worker_gpu_memory: float
    """``total_gib`` over the GPU memory of every worker node at its desired size."""


@dataclass(frozen=True)
class Plan:
    model: ModelArchitecture
    topology: Topology
    region: str
    data_plane_az: str
    endpoint: str
    dtype_bytes: int
    max_model_len: int
    nodes: tuple[NodePlan, ...]
    budgets: tuple[MemoryBudget, ...]
    kv_transfer: KvTransfer
    cold_start: ColdStart
    cost: CostEstimate
    tokens_per_second: float | None = None
    assumptions: tuple[str, ...] = field(default=())
    cost_range: dict[str, float | None] = field(default_factory=dict)
    """Hourly cost with every GPU node group at its min and at its max size (None: price unknown)."""
    capacity: CapacityPlan | None = None
    """With a workload (``plan --isl --osl --rate``): what each leg needs for it."""
    pin_commands: dict[str, str] = field(default_factory=dict)
    """The command that resolves each pin the deployment lacks, by field (``strict: false`` only:
    a strict deployment is refused before it is planned, with the same commands in the message)."""
    warnings: tuple[str, ...] = ()
    """What deploys but will likely fail later (``ServingSpec.warnings``: a gated model without a token)."""
    idle: IdleCost | None = None
    model_memory: DuplicateModelMemory | None = None
    spend: SpendSpec | None = None
    stack_name: str | None = field(default=None, compare=False)
    """The stack's name where the plan knows it (a configuration): the cost-allocation tag's default
    value. Not compared: composed constructs plan like their configuration without it."""
    license: dict[str, Any] | None = None
    """The model's licence from the model table (:func:`~.base.models.licence_record`); None: not in the table."""
    kv_path: dict[str, Any] = field(default_factory=dict)
    """The KV path both legs render and every upstream defect checked against it (:func:`kv_path_plan`)."""

    @property
    def fits(self) -> bool:
        return all(budget.fits for budget in self.budgets)

    @property
    def decode_budget(self) -> MemoryBudget:
        # Decode holds sequences for their whole generation, so it bounds concurrency.
        return next(b for b in self.budgets if b.role == "decode")

    def summary(self) -> dict[str, Any]:
        """The machine-readable plan (``plan --json``)."""
        decode = self.decode_budget
        hours = self.cost.hours_per_month

        def usd(value: float | None, digits: int, times: float = 1) -> float | None:
            # An unknown price stays null (``price_unknown`` says why), never 0.
            return None if value is None else round(value * times, digits)

        result: dict[str, Any] = {
            "fits": self.fits,
            "hourly_cost_usd": usd(self.cost.hourly_usd, 6),
            "monthly_cost_usd": usd(self.cost.monthly_usd, 4),
            "hourly_cost_usd_min": usd(self.cost_range["min"], 6),
            "hourly_cost_usd_max": usd(self.cost_range["max"], 6),
            "monthly_cost_usd_min": usd(self.cost_range["min"], 4, hours),
            "monthly_cost_usd_max": usd(self.cost_range["max"], 4, hours),
            "price_unknown": self.cost.unknown_reason,
            "recommended_prefill_decode_ratio": (self.capacity.recommended_prefill_decode_ratio
                                                 if self.capacity else None),
            "capacity": asdict(self.capacity) if self.capacity else None,
            "hours_per_month": self.cost.hours_per_month,
            "kv_cache_bytes_per_token": self.model.kv_cache_bytes_per_token(self.dtype_bytes),
            "linear_state_bytes_per_sequence": self.model.linear_state_bytes_per_sequence(self.dtype_bytes),
            "weights_gib": round(decode.weights_gib * decode.tensor_parallel_size, 4),
            "checkpoint_gib": round(self.model.checkpoint_bytes(self.dtype_bytes) / GIB, 4),
            "kv_block_tokens": decode.kv_block_tokens,
            "max_concurrency": decode.max_concurrency,
            "sliding_window_bytes_per_sequence": decode.sliding_window_bytes_per_sequence,
            "bytes_per_max_length_sequence": decode.bytes_per_max_length_sequence,
            "parameter_count": self.model.parameter_count,
            "active_parameter_count": self.model.parameters_per_token,
            "kv_pool_gib": round(decode.kv_pool_gib, 4),
            "max_concurrent_sequences": decode.max_concurrent_sequences,
            "cold_start_seconds": round(self.cold_start.seconds, 3),
            "kv_transfer_bytes_per_request": self.kv_transfer.bytes_per_request,
            "kv_transfer_seconds_per_request": round(self.kv_transfer.efa_seconds, 6),
            "kv_transfer_seconds_per_request_tcp_fallback": round(self.kv_transfer.tcp_fallback_seconds, 6),
            "cost_per_million_output_tokens_usd": (
                usd(self.cost.usd_per_million_output_tokens(self.tokens_per_second), 6)
                if self.tokens_per_second else None
            ),
            "model": self.model.name,
            "pin_commands": dict(self.pin_commands),
            "warnings": list(self.warnings),
            "topology": self.topology.value,
            "region": self.region,
            "data_plane_az": self.data_plane_az,
            "max_model_len": self.max_model_len,
            "price_table_as_of": self.cost.price_table_as_of,
            "price_includes_estimates": self.cost.has_estimates if self.cost.known else None,
            "nodes": [asdict(node) for node in self.nodes],
            "memory": [
                {**asdict(b), "fits": b.fits, "fixes": list(b.fixes)} for b in self.budgets
            ],
            "kv_transfer": asdict(self.kv_transfer),
            "cold_start": {**asdict(self.cold_start), "seconds": round(self.cold_start.seconds, 3)},
            "cost_lines": [{**asdict(line), "basis": line.basis.value if line.basis else None}
                           for line in self.cost.lines],
            "cost_excluded": list(self.cost.excluded),
            "assumptions": list(self.assumptions),
            "idle": asdict(self.idle) if self.idle else None,
            "duplicate_model_memory": asdict(self.model_memory) if self.model_memory else None,
            "spend": self.spend_summary(),
        }
        result["license"] = self.license
        result["kv_path"] = self.kv_path
        return result

    def spend_summary(self) -> dict[str, Any] | None:
        """The ``spend`` section as planned: the cap against the cost at max sizes, the budget
        against the monthly cost at desired sizes, the alerts and the tag the budget filters on."""
        spend = self.spend
        if spend is None:
            return None
        hours, high = self.cost.hours_per_month, self.cost_range.get("max")
        monthly = self.cost.monthly_usd
        value = spend.tag_value(self.stack_name) if self.stack_name else spend.cost_allocation_tag_value
        return {
            "max_hourly_usd": spend.max_hourly_usd,
            "hourly_cost_usd_max": None if high is None else round(high, 6),
            "max_hourly_headroom_usd": (None if spend.max_hourly_usd is None or high is None
                                        else round(spend.max_hourly_usd - high, 6)),
            "monthly_budget_usd": spend.monthly_budget_usd,
            "monthly_cost_usd": None if monthly is None else round(monthly, 4),
            "monthly_cost_usd_max": None if high is None else round(high * hours, 4),
            "alerts": [{"type": kind, "percent": percent} for kind, percent in spend.alerts()]
            if spend.monthly_budget_usd is not None else [],
            "cost_allocation_tag": {"key": spend.cost_allocation_tag_key, "value": value},
            "budget_filter": (f"user:{spend.cost_allocation_tag_key}${value}"
                              if spend.monthly_budget_usd is not None and value is not None else None),
        }


# --- transfer and cold start ---------------------------------------------------------------------

def efa_devices_per_replica(instance: instance_types.InstanceType, tensor_parallel_size: int) -> int:
    """The EFA devices one model replica's KV cache moves over: those of its GPUs' PCIe topology.

    NIXL's LIBFABRIC backend opens a rail on every EFA device the pod has and registers a GPU's
    memory on the devices of that GPU's PCIe topology only (ai-dynamo/nixl v1.3.1
    ``src/utils/libfabric/libfabric_rail_manager.cpp`` ``selectRailsForMemory`` ->
    ``getEfaDevicesForPci``), and the devices are spread evenly over the GPUs (p5.48xlarge: "four
    EFA devices that share the same PCIe root with one GPU", EKS user guide, device-management-efa).
    So a replica of ``tensor_parallel_size`` GPUs reaches that share of the node's devices, at
    least one (on g6e.48xlarge two GPUs share a device; with one device, every GPU uses it):
    TP 8 on an 8-GPU node, all of them. A host buffer (``kv_buffer_device: cpu``) is registered on
    the NUMA node's devices or all of them instead (the same file, DRAM), so on a multi-card
    G-series type with TP below its GPU count the figure can be low there."""
    devices = instance.efa_interfaces
    return min(devices, max(1, math.ceil(devices * tensor_parallel_size / instance.gpus)))


def _kv_transfer(specs: Specs) -> KvTransfer:
    serving = specs.serving
    prompt = serving.model.max_model_len
    size = serving.kv_transfer_bytes(prompt)
    legs = {role: (serving.pool(role).instance, serving.tensor_parallel_size(role)) for role in WORKER_ROLES}
    devices = {role: efa_devices_per_replica(instance, tp) for role, (instance, tp) in legs.items()}
    rates = {role: devices[role] * legs[role][0].efa_gbps_per_interface for role in WORKER_ROLES}
    # The sender's and the receiver's rails both carry every byte: the slower side sets the rate.
    link = min(rates.values())
    node_link = min(pool.instance.efa_gbps for pool in serving.pools)
    in_placement_group = all(pool.placement_group for pool in serving.pools)
    tcp = TCP_SINGLE_FLOW_GBPS_IN_PLACEMENT_GROUP if in_placement_group else TCP_SINGLE_FLOW_GBPS
    applies = serving.topology is Topology.disaggregated
    staging = ("GPUDirect RDMA: the NICs read and write GPU memory" if all(
        instance.gpudirect_rdma for instance, _ in legs.values()) else
        "no GPUDirect RDMA on G-series, so the KV cache is staged through host memory")
    per_leg = "; ".join(f"{role}: TP {legs[role][1]} reaches {devices[role]} of {legs[role][0].efa_interfaces} "
                        f"EFA device(s) x {legs[role][0].efa_gbps_per_interface:g} Gbps" for role in WORKER_ROLES)
    assumption = (
        f"EFA at {link:g} Gbps per request, the line rate of the EFA devices one replica's GPUs reach "
        f"({per_leg}; the node's {node_link:g} Gbps over all its EFA devices when TP spans the node). An "
        f"upper bound ({staging}); TP 8 on an 8-GPU node moves the cache over every device. TCP fallback "
        f"= one flow at {tcp:g} Gbps, EC2's single-flow limit {'inside' if in_placement_group else 'outside'} "
        "a cluster placement group"
    )
    if not applies:
        assumption = "colocated topology: prefill and decode run in the same worker, no KV cache crosses the network"
    return KvTransfer(
        bytes_per_request=size if applies else 0,
        prompt_tokens=prompt,
        efa_gbps=link,
        efa_seconds=size * 8 / (link * GIGABIT) if applies else 0.0,
        tcp_fallback_gbps=tcp,
        tcp_fallback_seconds=size * 8 / (tcp * GIGABIT) if applies else 0.0,
        applies=applies,
        assumption=assumption,
        node_efa_gbps=node_link,
        efa_devices_per_replica=min(devices.values()),
    )


def kv_path_plan(serving: ServingSpec) -> dict[str, Any]:
    """``plan``'s KV path: the table's row as rendered (``ServingSpec.kv_path``), whether a KV cache
    crosses at all, and each upstream defect checked. A refused defect never gets here: the
    deployment refuses it when it is built (the KV path's in ``ServingSpec``, the device plugin's
    in ``Versions`` and ``GpuDevicePlugins``); a risk is also among the plan's warnings."""
    summary = serving.kv_path.summary()
    summary["applies"] = serving.topology is Topology.disaggregated
    plugin = upstream_defects.NVIDIA_DEVICE_PLUGIN_MOFED
    summary["defects_checked"].append({
        "key": plugin.key, "action": plugin.action, "applies": False, "affected": plugin.affected,
        "source": plugin.source,
    })
    return summary


def _cold_start(specs: Specs, model: ModelArchitecture, dtype_bytes: int) -> ColdStart:
    checkpoint = model.checkpoint_bytes(dtype_bytes)
    throughput = {role: specs.pool(role).root_volume.throughput_mibps for role in WORKER_ROLES}
    return ColdStart(
        checkpoint_bytes=checkpoint,
        by_role={role: checkpoint / (mibps * MEBIBYTE) for role, mibps in throughput.items()},
        throughput_mibps=throughput,
    )


# --- the plan -------------------------------------------------------------------------------------

def make_plan(deployment: Deployment | Specs, tokens_per_second: float | None = None,
              price_table: PriceTable | None = None, workload: Workload | None = None, *,
              footprint: Footprint | None = None) -> Plan:
    """Compute the plan of a validated deployment: a :class:`Deployment` (a configuration), or the
    :class:`Specs` of one composed from constructs (``RayLlmServing.specs``) with its ``footprint``.
    Raises :class:`PlanError` (bad token rate, no footprint) or
    :class:`~ray_llm_eks.base.pricing.PriceError` (an instance type the table cannot price in the region).
    A region the table has no prices for at all is no error: every figure that does not depend on
    the region is computed, and the cost's lines have no price (``cost.unknown_reason`` says why).

    A model that does not fit never gets here: the model refuses it, as synthesis does
    (``ConfigError.does_not_fit``), with the same figures and fixes (:mod:`ray_llm_eks.base.memory`).
    """
    if tokens_per_second is not None and tokens_per_second <= 0:
        raise PlanError(f"tokens per second must be positive; got {tokens_per_second}")
    if isinstance(deployment, Deployment):
        specs, footprint = deployment.specs(), footprint or deployment.footprint()
    else:
        specs = deployment
        if footprint is None:
            raise PlanError("a plan of composed constructs needs footprint=Footprint(region, data_plane_az, "
                            "nat_gateways): the NAT gateways and the AZ are the network's, not the serving's")
    serving = specs.serving
    model = serving.architecture
    dtype_bytes = DTYPE_BYTES[serving.model.dtype]
    table = price_table or load_price_table()
    cost = _cost(specs, footprint, table)  # first: a type the region cannot price is an error before anything else
    at_size = {"min": _cost(specs, footprint, table, "min"), "desired": cost, "max": _cost(specs, footprint, table, "max")}
    cost_range = {size: at_size[size].hourly_usd for size in ("min", "max")}
    if not isinstance(deployment, Deployment):
        # A configuration checked its cap when it was built; composed constructs' specs here, the same check.
        try:
            check_max_hourly(specs.spend, specs, footprint, table)
        except SpecError as error:
            raise PlanError(str(error.within("spend"))) from None

    nodes = [NodePlan("system", specs.system.instance_type, specs.system.count, *_facts(specs.system.instance))]
    nodes.extend(NodePlan(role, specs.pool(role).instance_type, specs.pool(role).desired_size,
                          *_facts(specs.pool(role).instance)) for role in WORKER_ROLES)

    if model.quantized_parameter_count:
        weights = (f"weights = {model.parameter_count - model.quantized_parameter_count:,} parameters x {dtype_bytes} "
                   f"bytes ({serving.model.dtype}) + {model.quantized_parameter_count:,} quantized parameters x "
                   f"{model.quantized_bits_per_parameter} bits")
    else:
        loaded = model.weight_bytes(dtype_bytes, vision=serving.model.serve_images) // dtype_bytes
        weights = f"weights = {loaded:,} parameters x {dtype_bytes} bytes ({serving.model.dtype})" + (
            f" (of the checkpoint's {model.parameter_count:,}: vLLM loads no MTP head"
            f"{'' if serving.model.serve_images else ', and no vision tower with language_model_only'})"
            if loaded != model.parameter_count else "")
    variants = tuple(text for present, text in (
        (model.num_experts > 0, f"MoE: all {model.num_experts} experts are resident on every worker (1/TP per GPU); "
                                f"compute follows the {model.parameters_per_token:,} active parameters"),
        (model.sliding_window_layers > 0, f"{model.sliding_window_layers} sliding-window layers hold at most "
                                          f"{model.sliding_window} tokens per sequence (vLLM's hybrid KV cache "
                                          "manager, kept on with NIXL, which supports it)"),
        (model.is_mla, f"MLA: one latent of {model.kv_lora_rank + model.qk_rope_head_dim} elements per token per "
                       "layer, whole on every GPU of a TP group"),
    ) if present)
    assumptions = (
        weights,
        *variants,
        f"GPU memory as CUDA reports it to vLLM ({', '.join(sorted({f'{t.gpu_model} {t.gpu_memory_for_vllm_gib:.2f} GiB' for t in instance_types.INSTANCE_TYPES.values() if t.has_gpu}))}), not EC2's figure",
        f"KV pool = CUDA-visible memory x gpu_memory_utilization - weights vLLM loads (no MTP head; the vision tower "
        f"only with model.serve_images) - {PROFILE_RESERVE_GIB} GiB profile reserve (measured for Qwen3.5-9B text-only "
        "on vLLM 0.26.0; an estimate for other models) - the vision tower's profiling peak when images are served; "
        "compare vLLM's 'Available KV cache memory' line",
        "the pool is cut into whole blocks (16 tokens; a hybrid model's attention block holds one GDN layer's state: "
        "528 tokens for Qwen3.5-9B); a request takes whole blocks, plus one per linear-attention layer group",
        "KV transfer = whole blocks of the prompt (a hybrid model's prefill sends all but its last token) + a hybrid "
        "model's fixed linear-attention state",
        "cold start = checkpoint bytes / root-volume throughput (MiB/s = 2^20 B/s), checkpoint already in the node's model cache on the root volume (the first start on a node downloads it through the NAT gateway first)",
        f"monthly = hourly x {table.hours_per_month} hours",
    )
    return Plan(
        model=model, topology=serving.topology, region=footprint.region, data_plane_az=footprint.data_plane_az,
        endpoint=serving.service.endpoint.value, dtype_bytes=dtype_bytes, max_model_len=serving.model.max_model_len,
        nodes=tuple(nodes), budgets=serving.memory_budgets(), kv_transfer=_kv_transfer(specs),
        cold_start=_cold_start(specs, model, dtype_bytes), cost=cost, tokens_per_second=tokens_per_second,
        assumptions=assumptions, cost_range=cost_range,
        capacity=capacity_plan(serving, workload) if workload is not None else None,
        pin_commands=deployment.pin_commands() if isinstance(deployment, Deployment) else serving.pin_commands(),
        warnings=tuple(str(w) for w in serving.warnings()),
        idle=_idle(specs, at_size), model_memory=_model_memory(serving, dtype_bytes), spend=specs.spend,
        stack_name=deployment.stack_name if isinstance(deployment, Deployment) else None,
        license=licence_record(serving.model.source),
        kv_path=kv_path_plan(serving),
    )


def _gpu_node_usd(cost: CostEstimate, role: str) -> float | None:
    """The GPU node line of ``role`` in a cost (None: unknown)."""
    if not cost.known:
        return None
    line = next(line for line in cost.lines if line.item.startswith(f"{role} node "))
    return line.usd_per_hour


def _idle(specs: Specs, at_size: dict[str, CostEstimate]) -> IdleCost:
    by_role: dict[str, dict[str, Any]] = {}
    for role in WORKER_ROLES:
        pool = specs.pool(role)
        by_role[role] = {"instance_type": pool.instance_type, "nodes_min": pool.min_size,
                         "nodes_desired": pool.desired_size,
                         **{f"usd_per_hour_{size}": _gpu_node_usd(at_size[size], role) for size in ("min", "desired")}}

    def total(size: str) -> float | None:
        figures = [by_role[role][f"usd_per_hour_{size}"] for role in WORKER_ROLES]
        return None if any(f is None for f in figures) else round(sum(figures), 6)

    gpus = {size: sum(getattr(specs.pool(role), f"{size}_size") * specs.pool(role).gpus_per_node for role in WORKER_ROLES)
            for size in ("min", "desired")}
    return IdleCost(gpus_min=gpus["min"], gpus_desired=gpus["desired"], usd_per_hour_min=total("min"),
                    usd_per_hour_desired=total("desired"), by_role=by_role)


def _model_memory(serving: ServingSpec, dtype_bytes: int) -> DuplicateModelMemory:
    weights = serving.architecture.weight_bytes(dtype_bytes, vision=serving.model.serve_images) / GIB
    replicas = {role: serving.replicas(role) for role in WORKER_ROLES}
    copies = sum(replicas.values())
    legs = 2 if serving.topology is Topology.disaggregated else 1
    worker_gpu_gib = sum(serving.pool(role).desired_size * serving.pool(role).gpus_per_node
                         * serving.pool(role).instance.gpu_memory_for_vllm_gib for role in WORKER_ROLES)
    return DuplicateModelMemory(
        topology=serving.topology.value, weights_gib_per_replica=round(weights, 4), replicas=replicas,
        copies=copies, total_gib=round(weights * copies, 4), per_request_path_gib=round(weights * legs, 4),
        colocated_per_request_path_gib=round(weights, 4), duplicate_gib=round(weights * (legs - 1), 4),
        share_of_worker_gpu_memory=round(weights * copies / worker_gpu_gib, 4),
    )


def _facts(instance: instance_types.InstanceType) -> tuple[int, int, int, str | None, float, bool]:
    return (instance.vcpus, instance.memory_gib, instance.gpus, instance.gpu_model, instance.network_gbps,
            instance.efa)


def node_budgets(deployment: Deployment | Specs) -> dict[str, sizing.NodeBudget]:
    """Each worker role's GPU node line by line: capacity, kube-reserved, eviction threshold, huge
    pages, allocatable, DaemonSets, the worker's request and the margin it leaves
    (:func:`ray_llm_eks.base.sizing.node_budget`, each figure's source there; ``plan`` prints it,
    docs/plan.md "Node budget")."""
    specs = deployment.specs() if isinstance(deployment, Deployment) else deployment
    return {role: sizing.node_budget(specs.pool(role).instance) for role in WORKER_ROLES}
