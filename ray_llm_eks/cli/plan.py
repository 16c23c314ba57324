"""``ray-llm-eks plan``: memory, KV-transfer, cold-start and cost figures, with a workload the
capacity per leg, and with TTFT and ITL targets the SLO plan (docs/plan.md, "SLO plan"). No AWS
calls, no synth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from .common import ConfigOption, ExitCode, JsonOption, fail, load, make_console
from .tables import print_table

if TYPE_CHECKING:
    from ..base.sizing import NodeBudget
    from ..planning import CapacityPlan, Plan
    from ..slo_planning import SloPlan


def plan(
    config: ConfigOption = None,
    as_json: JsonOption = False,
    tokens_per_second: Annotated[
        float | None,
        typer.Option("--tokens-per-second", min=0.0, clamp=False,
                     help="Measured output tokens per second of the whole deployment, to price 1M output tokens."),
    ] = None,
    isl: Annotated[int | None, typer.Option("--isl", help="Mean prompt (input) tokens of the workload to size for.")] = None,
    osl: Annotated[int | None, typer.Option("--osl", help="Mean answer (output) tokens of the workload.")] = None,
    rate: Annotated[float | None, typer.Option("--rate", help="Requests per second of the workload.")] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(
        "--slo-ttft-ms", help="With the workload and --slo-itl-ms: the p90 time-to-first-token target the SLO plan "
                              "sizes the legs for.")] = None,
    slo_itl_ms: Annotated[float | None, typer.Option(
        "--slo-itl-ms", help="The p90 inter-token latency target of the SLO plan.")] = None,
    profile: Annotated[Path | None, typer.Option(
        "--profile", metavar="RUN_DIR", help="A `bench --profile-isl` run directory: its measured levels are the SLO "
                                              "plan's performance model instead of the built-in one.")] = None,
) -> None:
    """Memory, KV-transfer, cold-start and cost figures for a deployment; with --isl, --osl and
    --rate, the prefill and decode capacity the workload needs and the prefill:decode node ratio
    (docs/scaling.md); with --slo-ttft-ms and --slo-itl-ms, the replicas per leg that meet them, the
    prompt length below which prefill stays on the decode replica, and the cost (docs/plan.md). No AWS calls."""
    from ..base.pricing import PriceError
    from ..planning import PlanError, Workload, make_plan, node_budgets

    deployment = load(config, as_json)
    given = {"--isl": isl, "--osl": osl, "--rate": rate}
    if any(v is not None for v in given.values()) and any(v is None for v in given.values()):
        missing = ", ".join(k for k, v in given.items() if v is None)
        fail(ExitCode.CONFIG_ERROR, f"a workload needs --isl, --osl and --rate together; missing {missing}", as_json)
    slo_flags = {"--slo-ttft-ms": slo_ttft_ms, "--slo-itl-ms": slo_itl_ms}
    if any(v is not None for v in slo_flags.values()) or profile is not None:
        missing = [k for k, v in {**slo_flags, **given}.items() if v is None]
        if missing:
            fail(ExitCode.CONFIG_ERROR, f"an SLO plan{' (--profile)' if profile is not None else ''} needs "
                                        "--slo-ttft-ms, --slo-itl-ms, --isl, --osl and --rate together; missing "
                                        f"{', '.join(missing)}", as_json)
    slo = None
    try:
        workload = Workload(isl, osl, rate) if isl is not None else None  # type: ignore[arg-type]
        result = make_plan(deployment, tokens_per_second=tokens_per_second, workload=workload)
        if slo_ttft_ms is not None and workload is not None:
            from ..base.pricing import load_price_table
            from ..slo_planning import SloTargets, slo_plan

            slo = slo_plan(deployment.specs(), deployment.footprint(), load_price_table(), workload,
                           SloTargets(slo_ttft_ms, slo_itl_ms), profile=profile)  # type: ignore[arg-type]
    except (PlanError, PriceError) as error:
        fail(ExitCode.CONFIG_ERROR, str(error), as_json)
    budgets = node_budgets(deployment)
    if as_json:
        extra = {"slo_plan": slo.summary()} if slo is not None else {}
        typer.echo(json.dumps({**result.summary(), "node_budget": {role: b.to_dict() for role, b in budgets.items()},
                               **extra}, indent=2))
    else:
        _print_plan(result, budgets)
        if slo is not None:
            _print_slo_plan(make_console(), slo)
    if slo is not None and not slo.feasible:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


def _gib(value_bytes: float) -> str:
    from ..base.units import GIB

    return f"{value_bytes / GIB:.2f} GiB"


def licence_line(licence: dict[str, Any] | None) -> str:
    """The licence as plan and bench print it: its name, commercial use, and the callout if any."""
    if licence is None:
        return "not in the model table (unknown; bench --license states it)"
    line = f"{licence['licence']} (commercial use: {licence['commercial_use']})"
    return f"{line}. {licence['callout']}" if licence["callout"] else line


def _print_node_budget(console: Console, budgets: dict[str, NodeBudget]) -> None:
    """Each worker node's resources as the kubelet computes allocatable, then the pods on it
    (docs/plan.md "Node budget" gives each line's source)."""
    roles = list(budgets)
    rows = []
    for name, _ in next(iter(budgets.values())).lines():
        cells = []
        for role in roles:
            line = dict(budgets[role].lines())[name]
            cpu = f"{line.cpu_millis:,}m" if line.cpu_millis else "-"
            cells.append(f"{cpu} / {line.memory_mib:,} MiB")
        bold = name in ("allocatable", "worker request")
        rows.append([f"[bold]{name}[/]" if bold else name, *(f"[bold]{c}[/]" if bold else c for c in cells)])
    header = [("line", False), *((f"{role} ({budgets[role].instance_type}) CPU / memory", True) for role in roles)]
    print_table(console, "Node budget per GPU node (allocatable = capacity - kube-reserved - eviction - huge pages)",
                header, rows)


def _print_kv_path(console: Console, path: dict[str, Any]) -> None:
    """The KV path as the table decided it (docs/kv-path.md), and the upstream defects checked."""
    if not path:
        return
    env = ", ".join(f"{k}={v}" for k, v in path["env"].items()) or "none"
    stack = (f"vLLM {path['vllm']}, NIXL {path['nixl']}" if path["vllm"] else "vLLM and NIXL of the image not known")
    where = "every worker node has GPUDirect RDMA" if path["gpudirect_rdma"] else "no GPUDirect RDMA on both legs"
    if not path["applies"]:
        console.print(f"[bold]KV path[/]: none crosses (colocated); worker env {escape(env)}")
    else:
        console.print(f"[bold]KV path[/]: kv_buffer_device [bold]{path['kv_buffer_device']}[/], backends "
                      f"{', '.join(path['backends'])}, worker env {escape(env)} ({path['attention']} model, {where}; "
                      f"{stack}); known: {escape(path['known'])}\n  [dim]{escape(path['basis'])}[/]")
    applying = [f"{d['key']} ({d['action']})" for d in path["defects_checked"] if d["applies"]]
    console.print(f"[bold]Upstream defects checked[/]: {len(path['defects_checked'])} "
                  f"({', '.join(d['key'] for d in path['defects_checked'])}); "
                  + (f"[yellow]applying: {escape(', '.join(applying))}[/] (warnings below)" if applying else "none applies"))


def _print_plan(result: Plan, budgets: dict[str, NodeBudget] | None = None) -> None:
    from ..base.pricing import PriceBasis

    console = make_console()
    model = result.model
    console.print(Panel.fit(
        f"[bold]{model.name}[/] ({model.parameter_count / 1e9:.2f} B parameters, "
        f"{model.shape})\n"
        f"topology [bold]{result.topology.value}[/], region {result.region}, data-plane AZ {result.data_plane_az}, "
        f"endpoint {result.endpoint} on port 8000 (OpenAI /v1/chat/completions)\n"
        f"licence {escape(licence_line(result.license))}",
        title="ray-llm-eks plan", border_style="cyan",
    ))

    nodes = [[node.role, node.instance_type, str(node.count), str(node.vcpus), f"{node.memory_gib} GiB",
              f"{node.gpus} x {node.gpu_model}" if node.gpus else "-", f"{node.network_gbps:g} Gbps",
              "[green]yes[/]" if node.efa else "no"] for node in result.nodes]
    print_table(console, "Nodes", [("role", False), ("instance type", False), ("count", True), ("vCPU", True),
                                   ("memory", True), ("GPU", False), ("network", True), ("EFA", False)], nodes)
    if budgets:
        _print_node_budget(console, budgets)

    memory = []
    for b in result.budgets:
        pool = f"[green]{b.kv_pool_gib:.2f} GiB[/]" if b.fits else f"[red]{b.kv_pool_gib:.2f} GiB[/]"
        memory.append([
            f"{b.role} ({b.instance_type}, TP {b.tensor_parallel_size})", f"{b.gpu_memory_gib:.2f} GiB",
            f"{b.usable_gib:.2f} GiB", f"{b.weights_gib:.2f} GiB", f"{b.reserve_gib:.2f} GiB", pool,
            f"{b.kv_cache_bytes_per_token:,} B", f"{b.linear_state_bytes_per_sequence / 2**20:.1f} MiB",
            f"{b.bytes_per_max_length_sequence / 2**20:.1f} MiB",
            f"[bold]{b.max_concurrent_sequences}[/]" if b.fits else "[red]0[/]",
        ])
    print_table(console, f"GPU memory per worker GPU (max_model_len {result.max_model_len})",
                [("leg", False), *((name, True) for name in (
                    "GPU memory", "x utilization", "weights", "reserve", "KV pool", "KV / token", "state / seq",
                    "per max-len seq", "max concurrent"))], memory)

    transfer = result.kv_transfer
    if transfer.applies:
        console.print(
            f"[bold]KV transfer per request[/] ({transfer.prompt_tokens} prompt tokens): "
            f"{_gib(transfer.bytes_per_request)} ({transfer.bytes_per_request:,} bytes) -> "
            f"[green]{transfer.efa_seconds * 1000:.1f} ms[/] over EFA at {transfer.efa_gbps:g} Gbps "
            f"({transfer.efa_devices_per_replica} EFA device(s) per replica; {transfer.node_efa_gbps:g} Gbps per node), "
            f"[yellow]{transfer.tcp_fallback_seconds * 1000:.1f} ms[/] on the TCP fallback at "
            f"{transfer.tcp_fallback_gbps:g} Gbps\n  [dim]{transfer.assumption}[/]"
        )
    else:
        console.print(f"[bold]KV transfer[/]: none ({transfer.assumption})")
    _print_kv_path(console, result.kv_path)
    cold = result.cold_start
    per_role = ", ".join(f"{role} {cold.by_role[role]:.0f} s at {cold.throughput_mibps[role]} MiB/s" for role in cold.by_role)
    console.print(f"[bold]Cold start[/] (model load from the root volume): {_gib(cold.checkpoint_bytes)} -> "
                  f"[bold]{cold.seconds:.0f} s[/] ({per_role})")

    cost = result.cost
    lines = []
    for line in cost.lines:
        if line.usd_per_hour is None or line.basis is None:
            lines.append([line.item, f"{line.quantity:g}", "[yellow]unknown[/]", "no price"])
            continue
        basis = f"[yellow]{line.basis.value}[/]" if line.basis is PriceBasis.estimate else line.basis.value
        lines.append([line.item, f"{line.quantity:g}", f"{line.usd_per_hour:.4f}", basis])
    hourly, monthly = cost.hourly_usd, cost.monthly_usd
    lines.append(["[bold]total[/]", "", "[bold yellow]unknown[/]" if hourly is None else f"[bold]{hourly:.4f}[/]", ""])
    print_table(console, f"All-in cost, {cost.region} on-demand (price table as of {cost.price_table_as_of})",
                [("item", False), ("qty", True), ("USD / hour", True), ("basis", False)], lines)
    if hourly is None or monthly is None:
        console.print(f"[bold yellow]Price unknown[/]: {escape(cost.unknown_reason or '')}. Every other figure "
                      "above and below does not depend on the region.")
    else:
        console.print(f"[bold]${hourly:.2f} per hour, ${monthly:,.2f} per month[/] "
                      f"(monthly = hourly x {cost.hours_per_month} h)")
    low, high = result.cost_range["min"], result.cost_range["max"]
    if low is not None and high is not None and (low, high) != (hourly, hourly):
        console.print(f"[bold]Autoscaled range[/]: ${low:.2f} per hour with every GPU node group at its min_size, "
                      f"${high:.2f} at its max_size (${low * cost.hours_per_month:,.2f} to "
                      f"${high * cost.hours_per_month:,.2f} per month)")
    _print_idle_and_spend(console, result)
    if result.capacity is not None:
        _print_capacity(console, result.capacity)
    if result.tokens_per_second:
        per_million = cost.usd_per_million_output_tokens(result.tokens_per_second)
        shown = "unknown" if per_million is None else f"${per_million:.2f}"
        console.print(f"[bold]{shown} per 1M output tokens[/] at {result.tokens_per_second:g} tokens/s, running 24/7")
    console.print("[dim]Not included: " + "; ".join(cost.excluded) + "[/]")
    console.print("[dim]Price sources: " + " | ".join(f"{k}: {v}" for k, v in cost.price_sources.items()) + "[/]")
    if cost.has_estimates:
        note = f" ({cost.estimate_note})" if cost.estimate_note else ""
        console.print(f"[yellow]warning:[/] these prices for {cost.region} are estimates, not confirmed against the "
                      f"AWS price list: {', '.join(cost.estimated_items)}{escape(note)}")
    console.print("[dim]Assumptions: " + "; ".join(result.assumptions) + "[/]")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    if result.pin_commands:
        # Printed plainly (no markup, no wrapping) so each command can be copied as it stands.
        console.print("[bold yellow]Unpinned (strict: false)[/]: resolve each pin with its command and set the field:")
        for field_name, command in result.pin_commands.items():
            console.print(f"  {field_name}:", markup=False)
            console.print(f"    {command}", markup=False, soft_wrap=True)


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.2f}"


def _print_idle_and_spend(console: Any, result: Plan) -> None:
    """Idle cost, the weights' copies, and the spend limits (docs/plan.md explains each)."""
    idle, memory = result.idle, result.model_memory
    if idle is not None:
        console.print(f"[bold]Idle cost[/] (GPU nodes paid while serving nothing): {_usd(idle.usd_per_hour_min)} per "
                      f"hour at min sizes ({idle.gpus_min} GPUs), {_usd(idle.usd_per_hour_desired)} per hour at desired "
                      f"sizes ({idle.gpus_desired} GPUs) with zero traffic")
    if memory is not None:
        legs = ", ".join(f"{role} {n}" for role, n in memory.replicas.items())
        twice = (f"a request's path holds them twice (a prefill and a decode replica): {memory.per_request_path_gib:.2f} "
                 f"GiB against {memory.colocated_per_request_path_gib:.2f} GiB colocated, {memory.duplicate_gib:.2f} "
                 "GiB duplicated" if memory.duplicate_gib else "colocated: each request's replica holds them once")
        console.print(f"[bold]Model memory[/]: weights {memory.weights_gib_per_replica:.2f} GiB per replica, "
                      f"{memory.copies} copies ({legs}) = {memory.total_gib:.2f} GiB, "
                      f"{memory.share_of_worker_gpu_memory:.0%} of the workers' GPU memory; {twice}")
    spend = result.spend_summary()
    if spend is None:
        return
    if spend["max_hourly_usd"] is not None:
        console.print(f"[bold]Spend cap[/]: max_hourly_usd ${spend['max_hourly_usd']:.2f}, "
                      f"{_usd(spend['hourly_cost_usd_max'])} per hour at max sizes "
                      f"(headroom {_usd(spend['max_hourly_headroom_usd'])})")
    if spend["monthly_budget_usd"] is not None:
        alerts = ", ".join(f"{a['type'].lower()} {a['percent']:g}%" for a in spend["alerts"])
        console.print(f"[bold]Budget[/]: ${spend['monthly_budget_usd']:,.2f} per month on {spend['budget_filter']} "
                      f"(alerts: {alerts}); the deployment costs {_usd(spend['monthly_cost_usd'])} a month at desired "
                      f"sizes. Activate the tag first (docs/deploying.md, \"Spend limits and the cost allocation tag\")", markup=True)
        monthly = spend["monthly_cost_usd"]
        if monthly is not None and monthly > spend["monthly_budget_usd"]:
            console.print("[yellow]warning:[/] the budget is below the month's cost at desired sizes: its 100% alert "
                          "will fire every month")


def _print_capacity(console: Any, capacity: CapacityPlan) -> None:
    w = capacity.workload
    p, d = capacity.prefill, capacity.decode
    rows = [[f"prefill ({p.gpu_model})", f"{p.per_replica['seconds_per_request'] * 1000:.0f} ms per prompt",
             f"{p.replicas_needed:.2f}", f"{p.nodes_needed:.2f}", str(p.nodes_recommended),
             "/".join(map(str, p.nodes_configured))],
            [f"decode ({d.gpu_model})", f"{d.per_replica['tokens_per_second']:.0f} tokens/s at batch "
             f"{d.per_replica['batch']:.0f} ({d.per_replica['step_ms']:.0f} ms a step)",
             f"{d.replicas_needed:.2f}", f"{d.nodes_needed:.2f}", str(d.nodes_recommended),
             "/".join(map(str, d.nodes_configured))]]
    print_table(console, f"Capacity for {w.rate:g} requests/s of {w.isl} prompt + {w.osl} answer tokens",
                [("leg", False), ("per replica", False), ("replicas needed", True), ("nodes needed", True),
                 ("recommended nodes", True), ("configured (min/desired/max)", True)], rows)
    console.print(f"[bold]recommended_prefill_decode_ratio {capacity.recommended_prefill_decode_ratio:g}[/] "
                  f"(prefill nodes per decode node); a new node serves in about {capacity.node_start_seconds:.0f} s")
    console.print("[dim]Throughput model: " + "; ".join(capacity.assumptions) + "[/]")


BINDING_TEXT = {"ttft": "TTFT", "itl": "ITL", "throughput": "throughput (the rate alone)",
                "none": "none (one replica a leg meets both targets)"}


def _print_slo_plan(console: Any, slo: SloPlan) -> None:
    """The SLO plan: replicas per leg, the binding constraint, the threshold and its assumptions."""
    w, s = slo.workload, slo.summary()

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f} ms"

    rows = [[f"prefill ({slo.binding_by_leg['prefill']})", str(slo.prefill_replicas), str(slo.nodes["prefill"])],
            [f"decode ({slo.binding_by_leg['decode']})", str(slo.decode_replicas), str(slo.nodes["decode"])]]
    print_table(console, f"SLO plan for {w.rate:g} requests/s of {w.isl} prompt + {w.osl} answer tokens: TTFT p90 <= "
                         f"{slo.slo.ttft_ms:g} ms, ITL p90 <= {slo.slo.itl_ms:g} ms ({escape(slo.performance_model)})",
                [("leg (binding)", False), ("replicas", True), ("nodes", True)], rows)
    console.print(f"[bold]Binding constraint: {BINDING_TEXT[slo.binding]}[/]; predicted TTFT p90 "
                  f"{ms(s['ttft_ms_p90'])}, ITL p90 {ms(s['itl_ms_p90'])} at "
                  f"{'n/a' if slo.decode_concurrency_per_replica is None else f'{slo.decode_concurrency_per_replica:.2f}'} "
                  f"sequences per decode replica ({slo.path})")
    cost = ("unknown" if slo.hourly_cost_usd is None else
            f"${slo.hourly_cost_usd:.2f} per hour, ${slo.cost_per_million_output_tokens_usd:.2f} per 1M output tokens")
    console.print(f"[bold]Cost[/]: {cost}")
    threshold = slo.threshold
    never = (" (a remote prefill pays at no prompt length up to model.max_model_len: every prompt stays on its "
             "decode replica)" if threshold.never_pays else "")
    console.print(f"[bold]disaggregation.min_prompt_tokens {slo.min_prompt_tokens}[/]: shorter prompts are prefilled "
                  f"on the decode replica{never}")
    if not slo.feasible:
        console.print(f"[bold red]Infeasible[/]: {escape(slo.reason or '')}")
    for warning in slo.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    console.print("[dim]SLO plan: " + escape("; ".join((*slo.assumptions, *threshold.assumptions))) + "[/]")
