"""The SLO planner (``plan --slo-ttft-ms --slo-itl-ms --rate --isl --osl``): replicas per leg for a
TTFT and an ITL target, the prompt length below which a request is prefilled on its decode replica
(``disaggregation.min_prompt_tokens``), and what that costs (docs/plan.md, "SLO plan").

The performance model is either the capacity model's roofline (:mod:`ray_llm_eks.planning`:
:func:`~ray_llm_eks.planning.prefill_seconds`, :func:`~ray_llm_eks.planning.decode_step_seconds`)
or a ``bench --profile-isl`` run's measured levels (:class:`ProfileModel`): TTFT at concurrency 1 by
prompt length, ITL by concurrency. Queueing is M/M/c (Erlang C), every figure's source is a named
constant or a line of the printed assumptions.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from .base.cost import Footprint
from .base.placement import DECODE, PREFILL, WORKER_ROLES
from .base.pricing import PriceTable
from .base.serving import Topology
from .base.specs import Specs
from .bench import cost as bench_cost
from .planning import (GIGABIT, PlanError, Workload, _cost, _kv_transfer, decode_batch, decode_step_seconds,
                       prefill_seconds)

PERCENTILE = 0.9
"""The planner sizes for p90 TTFT and ITL, as the issue's ``ttft_ms_p90`` and ``itl_ms_p90`` say."""
PREFILL_QUEUE_UTILIZATION = 0.5
"""Assumption of the default threshold only: the prefill leg runs half busy, so a remote prompt
waits, on average, as long as its own prefill (M/M/1 mean wait rho/(1-rho) x service). A busier
prefill leg raises the threshold; the planner prints this figure with the threshold."""
MAX_REPLICAS = 4096
"""The search's bound: past it a leg is called infeasible rather than searched further."""
PROFILE_FILE = "profile.json"  # ray_llm_eks.bench.runner.PROFILE_FILE (the in-cluster tier is not imported here)
PROFILE_FORMAT = 1


class PerformanceModel(Protocol):
    """What the planner asks of a performance model; milliseconds throughout."""

    name: str

    def prefill_service_ms(self, role: str, prompt_tokens: int) -> float:
        """How long a replica of ``role`` is busy with one prompt (what its queue serves)."""

    def ttft_unloaded_ms(self, prompt_tokens: int, remote: bool) -> float:
        """TTFT with no queue: prefill, the KV transfer when ``remote``, the first token."""

    def itl_ms(self, concurrency: float) -> float:
        """ITL p90 of a decode replica holding ``concurrency`` sequences, without local prefills."""

    def assumptions(self) -> list[str]: ...

    def warnings(self) -> list[str]: ...


# --- the built-in model: the capacity model's roofline ------------------------------------------

@dataclass
class BuiltinModel:
    """The capacity model at the workload's prompt and answer lengths (:func:`~ray_llm_eks.planning.capacity_plan`)."""

    specs: Specs
    workload: Workload
    link_gbps: float
    name: str = "built-in capacity model"

    def prefill_service_ms(self, role: str, prompt_tokens: int) -> float:
        return prefill_seconds(self.specs.serving, role, prompt_tokens) * 1000

    def transfer_ms(self, prompt_tokens: int) -> float:
        return self.specs.serving.kv_transfer_bytes(prompt_tokens) * 8 / (self.link_gbps * GIGABIT) * 1000

    def ttft_unloaded_ms(self, prompt_tokens: int, remote: bool) -> float:
        if remote:
            return (self.prefill_service_ms(PREFILL, prompt_tokens) + self.transfer_ms(prompt_tokens)
                    + self.itl_ms(1))
        # Local: the prompt runs in one of the decode replica's steps, which yields its first token.
        return self.prefill_service_ms(DECODE, prompt_tokens)

    def itl_ms(self, concurrency: float) -> float:
        return max(decode_step_seconds(self.specs.serving, self.workload.isl, self.workload.osl,
                                       max(1.0, concurrency))) * 1000

    def assumptions(self) -> list[str]:
        return ["performance: the capacity model's roofline (prefill at its MFU, a decode step at its MBU); its ITL "
                "is the mean step, taken as the p90 (no variance modelled)",
                f"remote TTFT = prefill on the prefill leg + the KV transfer at {self.link_gbps:g} Gbps + one decode "
                "step; local TTFT = the prefill on the decode leg"]

    def warnings(self) -> list[str]:
        return []


# --- a measured profile ---------------------------------------------------------------------------

@dataclass
class _Curve:
    """Measured points made non-decreasing (a cumulative maximum: noise must not make a longer
    prompt or a fuller batch faster), interpolated linearly; queries outside are remembered."""

    what: str
    unit: str
    points: list[tuple[float, float]]
    beyond: Callable[[list[tuple[float, float]], float], float]
    below: list[float] = field(default_factory=list)
    above: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        ordered, top = [], -math.inf
        for x, y in sorted(self.points):
            top = max(top, y)
            ordered.append((x, top))
        self.points = ordered

    def __call__(self, x: float) -> float:
        xs = [p[0] for p in self.points]
        if x < xs[0]:
            self.below.append(x)
            return self.points[0][1]
        if x > xs[-1]:
            self.above.append(x)
            return self.beyond(self.points, x)
        for (x0, y0), (x1, y1) in zip(self.points, self.points[1:]):
            if x0 <= x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        return self.points[-1][1]  # one point, x on it

    def warnings(self) -> list[str]:
        low, high = self.points[0][0], self.points[-1][0]
        lines = []
        if self.below:
            lines.append(f"{self.what} {min(self.below):g} {self.unit} is below the measured range ({low:g}..{high:g}): "
                         f"the figure at {low:g} is used")
        if self.above:
            lines.append(f"{self.what} {max(self.above):g} {self.unit} is beyond the measured range ({low:g}..{high:g}): "
                         "extrapolated, measure it (bench --profile-isl / --concurrency)")
        return lines


def _proportional(points: list[tuple[float, float]], x: float) -> float:
    # A prompt's prefill grows at least in proportion to its length (2N FLOPs a token).
    x1, y1 = points[-1]
    return y1 * x / x1


def _last_slope(points: list[tuple[float, float]], x: float) -> float:
    # ITL past the fullest measured batch: the last segment's growth goes on (memory-bound steps).
    if len(points) < 2:
        return points[-1][1]
    (x0, y0), (x1, y1) = points[-2], points[-1]
    return y1 + (y1 - y0) / (x1 - x0) * (x - x1)


@dataclass
class ProfileModel:
    """A ``bench --profile-isl`` run's ``profile.json`` as the performance model."""

    run_dir: Path
    prefill: _Curve
    decode: _Curve
    decode_shape: tuple[int, int]
    workload: Workload
    topology: str | None
    name: str = "measured profile"

    def prefill_service_ms(self, role: str, prompt_tokens: int) -> float:
        # The measured TTFT at concurrency 1: an upper bound of a replica's busy time per prompt.
        return self.prefill(prompt_tokens)

    def ttft_unloaded_ms(self, prompt_tokens: int, remote: bool) -> float:
        return self.prefill(prompt_tokens)

    def itl_ms(self, concurrency: float) -> float:
        return self.decode(max(1.0, concurrency))

    def assumptions(self) -> list[str]:
        return [f"performance: measured levels of {self.run_dir} (topology {self.topology or 'not recorded'}): TTFT "
                "p90 at concurrency 1 by prompt length, ITL p90 by concurrency, each made non-decreasing and "
                "interpolated linearly between measured points",
                "the measured TTFT holds the prefill, the KV transfer (when the run was disaggregated) and the first "
                "token, and serves as both the unloaded TTFT and a replica's busy time per prompt, on either leg"]

    def warnings(self) -> list[str]:
        lines = self.prefill.warnings() + self.decode.warnings()
        if self.decode_shape != (self.workload.isl, self.workload.osl):
            lines.append(f"ITL was measured at prompt {self.decode_shape[0]} + answer {self.decode_shape[1]} tokens, "
                         f"the workload is {self.workload.isl} + {self.workload.osl}: measure at the workload's shape")
        return lines


def load_profile(run_dir: Path, workload: Workload) -> ProfileModel:
    """The profile of a run directory; :class:`PlanError` (naming ``--profile``) when it has none or it is malformed."""
    path = Path(run_dir) / PROFILE_FILE
    if not path.is_file():
        raise PlanError(f"--profile: {str(run_dir)!r} has no {PROFILE_FILE}; accepted: a run directory that "
                        "`ray-llm-eks bench --profile-isl ISL,...` wrote")
    try:
        data = json.loads(path.read_text())
        if data.get("format") != PROFILE_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {PROFILE_FORMAT}")
        prefill = [(float(p["isl"]), float(p["ttft_ms"]["p90"])) for p in data["prefill"]]
        decode = [(float(d["concurrency"]), float(d["itl_ms"]["p90"])) for d in data["decode"]]
        shapes = {(int(d["isl"]), int(d["osl"])) for d in data["decode"]}
        if not prefill or not decode or len(shapes) != 1:
            raise ValueError("it needs prefill and decode levels, the decode levels of one shape")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise PlanError(f"--profile: {str(path)!r} is not a profile ({error}); accepted: the {PROFILE_FILE} "
                        "`ray-llm-eks bench --profile-isl` wrote (docs/benchmark.md)") from None
    return ProfileModel(run_dir=Path(run_dir), prefill=_Curve("prompt", "tokens", prefill, _proportional),
                        decode=_Curve("decode concurrency", "sequences", decode, _last_slope),
                        decode_shape=shapes.pop(), workload=workload,
                        topology=(data.get("deployment") or {}).get("topology"))


# --- queueing -------------------------------------------------------------------------------------

def erlang_c(servers: int, load: float) -> float:
    """The probability that an arrival waits in an M/M/c queue of ``servers`` at offered ``load``
    (arrival rate x service time), by Erlang B's recursion (stable for large ``servers``)."""
    if load <= 0:
        return 0.0
    if load >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    return servers * b / (servers - load * (1 - b))


def wait_quantile_ms(rate_per_s: float, service_ms: float, servers: int, quantile: float = PERCENTILE) -> float:
    """The ``quantile`` of the wait in an M/M/c queue: P(W > t) = C exp(-(c mu - lambda) t); infinite
    when the servers cannot keep up."""
    if rate_per_s <= 0:
        return 0.0
    load = rate_per_s * service_ms / 1000
    if load >= servers:
        return math.inf
    waits = erlang_c(servers, load)
    if waits <= 1 - quantile:
        return 0.0
    drain_per_ms = servers / service_ms - rate_per_s / 1000
    return math.log(waits / (1 - quantile)) / drain_per_ms


# --- the default threshold ------------------------------------------------------------------------

@dataclass(frozen=True)
class Threshold:
    min_prompt_tokens: int
    never_pays: bool
    """True when a remote prefill does not pay at any prompt length up to ``max_model_len``."""
    decode_batch: float
    link_gbps: float
    assumptions: tuple[str, ...]


def default_threshold(specs: Specs, link_gbps: float | None = None,
                      queue_utilization: float = PREFILL_QUEUE_UTILIZATION) -> Threshold:
    """The prompt length from which a remote prefill pays: the KV transfer and the prefill queue it
    costs the request are less than the decode interference it saves (docs/plan.md, "The threshold").

    A property of the deployment (model, instances, fabric), not of a workload. For a prompt of L
    tokens, by the capacity model's roofline, on a decode replica at its scaling target (b
    sequences: ``decode.target_ongoing_requests``, by default those of ``max_model_len`` tokens its
    KV pool holds, each read whole every step): a local prefill rides in one decode step,
    ``max(memory, compute(b) + prefill(L))``, so it is free while the step stays memory-bound and
    past that stalls each of the b sequences by the step's growth; the request's own TTFT is that
    step. A remote one costs the request the prefill leg's wait (M/M/1 mean at
    ``queue_utilization``), its prefill there, the transfer at ``link_gbps`` and one decode step.
    The threshold is the smallest L (in KV blocks) from which local (b stalls + own TTFT) exceeds
    remote for every longer prompt. Chunked prefill (several steps share a long prompt) is not
    modelled: one step absorbs the prompt, which spares compute once, not per chunk."""
    serving = specs.serving
    link = _kv_transfer(specs).efa_gbps if link_gbps is None else link_gbps
    if not link > 0:
        raise PlanError(f"fabric bandwidth: not a rate (got {link!r}); accepted: Gbps > 0")
    batch = serving.target_ongoing_requests(DECODE)
    memory, compute = decode_step_seconds(serving, serving.model.max_model_len, 0, batch)
    step = max(memory, compute)
    wait_factor = queue_utilization / (1 - queue_utilization)
    block = next(b for b in serving.memory_budgets() if b.role == DECODE).kv_block_tokens
    limit = serving.model.max_model_len

    def pays(tokens: int) -> bool:
        mixed = max(memory, compute + prefill_seconds(serving, DECODE, tokens))
        local = batch * (mixed - step) + mixed
        remote_prefill = prefill_seconds(serving, PREFILL, tokens)
        transfer = serving.kv_transfer_bytes(tokens) * 8 / (link * GIGABIT)
        remote = wait_factor * remote_prefill + remote_prefill + transfer + step
        return local > remote

    lengths = list(range(block, limit + 1, block)) or [limit]
    if lengths[-1] != limit:
        lengths.append(limit)
    threshold, never = limit, True
    for tokens in reversed(lengths):
        if not pays(tokens):
            break
        threshold, never = tokens, False
    assumptions = (
        f"threshold: a decode replica at its scaling target, {batch:g} sequences of up to {serving.model.max_model_len} "
        "tokens (decode.target_ongoing_requests); a local prefill rides one decode step (the roofline's max(memory, compute)) and stalls each of "
        f"them by that step's growth",
        f"threshold: a remote prefill waits rho/(1-rho) x its prefill (M/M/1 mean, prefill leg {queue_utilization:.0%} "
        f"busy), then moves its KV cache at {link:g} Gbps (the EFA line rate one replica reaches) and waits one decode "
        "step",
        "threshold: the smallest prompt length, in KV blocks, from which the remote path's total latency is less than "
        "the local one's (the request's TTFT + the stalls) for every longer prompt; chunked prefill not modelled",
    )
    return Threshold(min_prompt_tokens=threshold, never_pays=never, decode_batch=batch, link_gbps=link,
                     assumptions=assumptions)


# --- the plan -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SloTargets:
    ttft_ms: float
    itl_ms: float

    def __post_init__(self) -> None:
        for flag, value in (("--slo-ttft-ms", self.ttft_ms), ("--slo-itl-ms", self.itl_ms)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
                raise PlanError(f"{flag}: not a latency target (got {value!r}); accepted: milliseconds > 0")


@dataclass(frozen=True)
class SloPlan:
    workload: Workload
    slo: SloTargets
    feasible: bool
    binding: str
    """``ttft``, ``itl``, ``throughput`` (the rate alone sets the replicas) or ``none`` (one replica a leg suffices)."""
    binding_by_leg: dict[str, str]
    prefill_replicas: int
    decode_replicas: int
    nodes: dict[str, int]
    min_prompt_tokens: int
    path: str
    """``remote-prefill`` (the workload's prompts reach min_prompt_tokens) or ``local-prefill``."""
    ttft_ms_p90: float | None
    itl_ms_p90: float | None
    decode_concurrency_per_replica: float | None
    hourly_cost_usd: float | None
    cost_per_million_output_tokens_usd: float | None
    performance_model: str
    profile: str | None
    threshold: Threshold
    reason: str | None
    assumptions: tuple[str, ...]
    warnings: tuple[str, ...]

    def summary(self) -> dict[str, Any]:
        """``plan --json``'s ``slo_plan``."""

        def ms(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else round(value, 3)

        return {
            "prefill_replicas": self.prefill_replicas, "decode_replicas": self.decode_replicas,
            "min_prompt_tokens": self.min_prompt_tokens,
            "ttft_ms_p90": ms(self.ttft_ms_p90), "itl_ms_p90": ms(self.itl_ms_p90),
            "hourly_cost_usd": None if self.hourly_cost_usd is None else round(self.hourly_cost_usd, 6),
            "cost_per_million_output_tokens_usd": (None if self.cost_per_million_output_tokens_usd is None
                                                   else round(self.cost_per_million_output_tokens_usd, 6)),
            "feasible": self.feasible, "binding": self.binding, "binding_by_leg": dict(self.binding_by_leg),
            "reason": self.reason, "nodes": dict(self.nodes), "path": self.path,
            "decode_concurrency_per_replica": (None if self.decode_concurrency_per_replica is None
                                               else round(self.decode_concurrency_per_replica, 4)),
            "slo": {"ttft_ms": self.slo.ttft_ms, "itl_ms": self.slo.itl_ms},
            "workload": {"isl": self.workload.isl, "osl": self.workload.osl, "rate": self.workload.rate},
            "performance_model": self.performance_model, "profile": self.profile,
            "threshold": {"min_prompt_tokens": self.threshold.min_prompt_tokens,
                          "never_pays": self.threshold.never_pays, "decode_batch": self.threshold.decode_batch,
                          "link_gbps": self.threshold.link_gbps, "assumptions": list(self.threshold.assumptions)},
            "assumptions": list(self.assumptions), "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class _Decode:
    replicas: int
    concurrency: float
    itl_ms: float
    ttft_ms: float | None


def _decode_at(model: PerformanceModel, workload: Workload, replicas: int, local_prompt: int | None,
               capacity: int) -> _Decode | None:
    """The decode leg at ``replicas``: the steady concurrency per replica (Little's law, b = rate per
    replica x osl x ITL(b), its smallest fixed point), ITL inflated by the local prefills' share of
    the replica's time, and a local prompt's TTFT; None when it cannot keep up or the KV pool cannot
    hold the batch."""
    rate = workload.rate / replicas
    busy, ttft = 0.0, None
    if local_prompt is not None:
        service = model.prefill_service_ms(DECODE, local_prompt)
        busy = rate * service / 1000
        if busy >= 1:
            return None
        ttft = model.ttft_unloaded_ms(local_prompt, remote=False) + wait_quantile_ms(rate, service, 1)

    def itl(b: float) -> float:
        return model.itl_ms(b) / (1 - busy)

    concurrency = 0.0
    for _ in range(10_000):
        following = rate * workload.osl * itl(concurrency) / 1000
        if following > capacity:
            return None
        if abs(following - concurrency) <= 1e-9 * max(1.0, following):
            concurrency = following
            break
        concurrency = following
    else:
        return None
    return _Decode(replicas, concurrency, itl(concurrency), ttft)


def _smallest(test: Callable[[int], bool]) -> int | None:
    """The smallest count in 1..MAX_REPLICAS passing an upward-closed ``test`` (doubling, then bisection)."""
    high = 1
    while not test(high):
        high *= 2
        if high > MAX_REPLICAS:
            return None
    low = high // 2 + 1 if high > 1 else 1
    while low < high:
        middle = (low + high) // 2
        if test(middle):
            high = middle
        else:
            low = middle + 1
    return high


def _leg_binding(count: int, unconstrained: int, slo_name: str) -> str:
    if count > unconstrained:
        return slo_name
    return "throughput" if count > 1 else "none"


def slo_plan(specs: Specs, footprint: Footprint, table: PriceTable, workload: Workload, slo: SloTargets,
             profile: Path | None = None, link_gbps: float | None = None) -> SloPlan:
    """Replicas per leg meeting ``slo`` at ``workload``, with the threshold and the cost (docs/plan.md, "SLO plan")."""
    serving = specs.serving
    if serving.topology is not Topology.disaggregated:
        raise PlanError(f"--slo-ttft-ms: the SLO planner sizes the prefill and decode legs of a disaggregated "
                        f"deployment (got topology {serving.topology.value}); accepted: topology disaggregated")
    if workload.isl + workload.osl > serving.model.max_model_len:
        raise PlanError(f"--isl {workload.isl} + --osl {workload.osl} exceeds model.max_model_len "
                        f"{serving.model.max_model_len}; accepted: a workload the deployment accepts")
    threshold = default_threshold(specs, link_gbps)
    model: PerformanceModel = (load_profile(profile, workload) if profile is not None
                               else BuiltinModel(specs, workload, threshold.link_gbps))
    capacity = decode_batch(serving, workload.isl, workload.osl)
    remote = workload.isl >= threshold.min_prompt_tokens and not threshold.never_pays
    local_prompt = None if remote else workload.isl

    # Prefill: the smallest pool whose p90 queue wait plus the unloaded TTFT meets the target.
    reason: str | None = None
    prefill, prefill_binding, ttft = 0, "none", None
    if remote:
        service = model.prefill_service_ms(PREFILL, workload.isl)
        floor = model.ttft_unloaded_ms(workload.isl, remote=True)

        def remote_ttft(c: int) -> float:
            return floor + wait_quantile_ms(workload.rate, service, c)

        stable = _smallest(lambda c: math.isfinite(remote_ttft(c)))
        meets = _smallest(lambda c: remote_ttft(c) <= slo.ttft_ms) if floor <= slo.ttft_ms else None
        if stable is None:
            reason = f"the prefill leg cannot keep up with {workload.rate:g} requests/s within {MAX_REPLICAS} replicas"
        elif meets is None:
            reason = (f"TTFT: a {workload.isl}-token prompt takes {floor:.1f} ms unqueued ({model.name}), above "
                      f"--slo-ttft-ms {slo.ttft_ms:g}")
            prefill, prefill_binding, ttft = stable, "ttft", remote_ttft(stable)
        else:
            prefill, ttft = meets, remote_ttft(meets)
            prefill_binding = _leg_binding(meets, stable, "ttft")

    # Decode: the smallest pool meeting the ITL target (and a local prompt's TTFT), upward-closed in replicas.
    def at(n: int) -> _Decode | None:
        return _decode_at(model, workload, n, local_prompt, capacity)

    stable_d = _smallest(lambda n: at(n) is not None)
    decode, decode_binding, state = 0, "none", None
    if stable_d is None:
        reason = reason or (f"the decode leg cannot keep up with {workload.rate:g} requests/s within {MAX_REPLICAS} "
                            "replicas")
    else:
        by_itl = _smallest(lambda n: (s := at(n)) is not None and s.itl_ms <= slo.itl_ms)
        by_ttft = (_smallest(lambda n: (s := at(n)) is not None and s.ttft_ms is not None and s.ttft_ms <= slo.ttft_ms)
                   if local_prompt is not None else stable_d)
        if by_itl is None:
            reason = reason or (f"ITL: {model.itl_ms(1):.1f} ms at one sequence ({model.name}), above --slo-itl-ms "
                                f"{slo.itl_ms:g}")
            decode, decode_binding = stable_d, "itl"
        elif by_ttft is None:
            reason = reason or (f"TTFT: a {workload.isl}-token prompt prefilled on the decode leg takes "
                                f"{model.ttft_unloaded_ms(workload.isl, remote=False):.1f} ms unqueued, above "
                                f"--slo-ttft-ms {slo.ttft_ms:g}")
            decode, decode_binding = max(stable_d, by_itl), "ttft"
        else:
            decode = max(by_itl, by_ttft)
            decode_binding = ("ttft" if by_ttft > max(by_itl, stable_d) else
                              _leg_binding(decode, stable_d, "itl"))
        state = at(decode)
        if local_prompt is not None and state is not None:
            ttft = state.ttft_ms

    feasible = reason is None
    order = ("ttft", "itl", "throughput", "none")
    binding = min((prefill_binding, decode_binding), key=order.index)
    nodes = {PREFILL: math.ceil(prefill / serving.replicas_per_node(PREFILL)),
             DECODE: math.ceil(decode / serving.replicas_per_node(DECODE))}
    hourly = _hourly(specs, footprint, table, nodes)
    per_million = (bench_cost.usd_per_million_output_tokens(hourly, workload.rate * workload.osl)
                   if hourly is not None else None)
    assumptions = (
        *model.assumptions(),
        f"sized for p{PERCENTILE * 100:.0f}: a prefill queue is M/M/c (Erlang C) over the prefill replicas; a decode "
        "replica holds rate x osl x ITL sequences (Little's law), at most what its KV pool holds",
        "a prompt prefilled on its decode replica slows that replica's decode by the share of its time prefills take "
        "(ITL / (1 - that share)), and waits in an M/M/1 queue of prefills there",
        f"every prompt is {workload.isl} tokens: all of them take one path, {'remote' if remote else 'local'} prefill",
        "cost = the GPU nodes the replicas need (whole nodes) and their root volumes, plus the control plane, the "
        "system node and the NAT gateway as in the plan",
    )
    return SloPlan(
        workload=workload, slo=slo, feasible=feasible, binding=binding,
        binding_by_leg={PREFILL: prefill_binding, DECODE: decode_binding},
        prefill_replicas=prefill, decode_replicas=decode, nodes=nodes,
        min_prompt_tokens=threshold.min_prompt_tokens, path="remote-prefill" if remote else "local-prefill",
        ttft_ms_p90=ttft, itl_ms_p90=state.itl_ms if state else None,
        decode_concurrency_per_replica=state.concurrency if state else None,
        hourly_cost_usd=hourly, cost_per_million_output_tokens_usd=per_million,
        performance_model=model.name, profile=str(profile) if profile is not None else None,
        threshold=threshold, reason=reason, assumptions=assumptions, warnings=tuple(model.warnings()),
    )


def _hourly(specs: Specs, footprint: Footprint, table: PriceTable, nodes: dict[str, int]) -> float | None:
    """The deployment's hourly cost with ``nodes`` GPU nodes a leg: each leg's node and root-volume
    lines at max size give its price per node; the other lines are the plan's."""
    estimate = _cost(specs, footprint, table, "max")
    if estimate.hourly_usd is None:
        return None
    total = estimate.hourly_usd
    for role in WORKER_ROLES:
        per_leg = [line for line in estimate.lines
                   if line.item.startswith((f"{role} node ", f"{role} root gp3 "))]
        leg = sum(line.usd_per_hour or 0.0 for line in per_leg)
        size = specs.pool(role).max_size
        total += leg / size * nodes[role] - leg
    return total
