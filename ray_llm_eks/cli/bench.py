"""``ray-llm-eks bench``: AIPerf against an OpenAI endpoint, each level's accepted responses priced
by ``plan``'s hourly cost (or a managed endpoint's per-token prices). ``--emit-job`` renders the same
run as a Kubernetes Job, with cdk8s: only then is jsii started."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from .common import ConfigOption, ExitCode, fail, load, make_console, make_error_console
from .plan import licence_line
from .tables import print_table


def with_flags(error: Any) -> str:
    """A refused bench setting under the flag that sets it (``slo_ttft_ms`` is ``--slo-ttft-ms``)."""
    if not error.problems:
        return str(error)
    return "; ".join(f"{SETTING_FLAGS.get(name, '--' + name.replace('_', '-'))}: {sentence}"
                     for name, sentence in error.problems)


SETTING_FLAGS = {"price_per_million_input_tokens_usd": "--price-per-million-input-tokens",
                 "price_per_million_output_tokens_usd": "--price-per-million-output-tokens",
                 "efa_counters_urls": "--efa-counters-url", "gpu_metrics_urls": "--gpu-metrics-url",
                 "profile_isls": "--profile-isl"}
"""Bench settings whose flag is not the setting's name in dashes."""


def _concurrency_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"not a comma list of whole numbers (got {text!r}); accepted: e.g. 1,4,16,64") from None
    if not levels or any(level < 1 for level in levels):
        raise typer.BadParameter(f"each level must be >= 1 (got {text!r})")
    return levels


def _prompt_lengths(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"not a comma list of whole numbers (got {text!r}); accepted: e.g. "
                                 "128,512,2048") from None
    if not lengths or any(length < 1 for length in lengths):
        raise typer.BadParameter(f"each prompt length must be >= 1 (got {text!r})")
    return lengths


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
    mix: Annotated[str | None, typer.Option(
        "--mix", metavar="ISL,OSL:PCT;...",
        help="A mixed workload instead of --isl/--osl: each request's prompt and answer lengths drawn from these "
             "pairs (AIPerf's --seq-dist), e.g. 32,64:70;512,64:30 (docs/benchmark.md).")] = None,
    min_prompt_tokens: Annotated[int | None, typer.Option(
        "--min-prompt-tokens", min=1,
        help="The deployment's prefill threshold: TTFT reported per class, local (fewer prompt tokens) and remote; "
             "default with --config: its disaggregation.min_prompt_tokens.")] = None,
    concurrency: Annotated[str | None, typer.Option("--concurrency", help="One level or a comma list for a sweep; "
                                                                            "default 1,4,16 (1 with --replay-timestamps).")] = None,
    requests: Annotated[int, typer.Option("--requests", min=1, help="Measured requests per level.")] = 100,
    slo_ttft_ms: Annotated[float | None, typer.Option("--slo-ttft-ms", min=0.0, help="Time-to-first-token SLO.")] = None,
    slo_e2e_ms: Annotated[float | None, typer.Option("--slo-e2e-ms", min=0.0, help="End-to-end latency SLO.")] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="Replay a Mooncake-format trace (JSON lines: "
                                                               "input_length, output_length, hash_ids, timestamp).")] = None,
    replay_timestamps: Annotated[bool, typer.Option("--replay-timestamps", help="With --trace: send at the trace's "
                                                                                "timestamps instead of at each concurrency.")] = False,
    metrics_url: Annotated[list[str] | None, typer.Option(
        "--metrics-url", metavar="URL",
        help="Prometheus endpoint to scrape for vllm:nixl_* (repeatable; under Ray: each worker's :8080/metrics).")] = None,
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
    efa_counters_url: Annotated[list[str] | None, typer.Option(
        "--efa-counters-url", metavar="NODE=URL",
        help="NODE=URL of the EFA counter reader on a GPU node (repeatable; NODE is ROLE-N, e.g. "
             "prefill-0=http://10.0.1.7:9475/counters).")] = None,
    gpu_metrics_url: Annotated[list[str] | None, typer.Option(
        "--gpu-metrics-url", metavar="NODE=URL",
        help="NODE=URL of the DCGM exporter on a GPU node (repeatable; e.g. "
             "decode-0=http://10.0.1.9:9400/metrics).")] = None,
    license_id: Annotated[str | None, typer.Option("--license", help="The model's licence, for a model the model "
                                                   "table does not list (a managed endpoint's, say).")] = None,
    agreement_prompts: Annotated[int, typer.Option("--agreement-prompts", min=0, help="Fixed prompts to complete "
                                                                                     "greedily for `compare` (0: skip).")] = 16,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--allow-eos", help="Ask for exactly --osl tokens.")] = True,
    profile_isl: Annotated[str | None, typer.Option(
        "--profile-isl", metavar="ISL,ISL,...",
        help="Also measure the planner's profile: TTFT at concurrency 1 for each prompt length (after the "
             "concurrency levels, whose ITL by concurrency it records too), into profile.json for "
             "`plan --profile RUN_DIR` (docs/benchmark.md).")] = None,
    aiperf: Annotated[str | None, typer.Option("--aiperf", help="The aiperf program; default: installed beside this one.")] = None,
    emit_job: Annotated[bool, typer.Option("--emit-job", help="Print a Kubernetes Job that runs this bench next to "
                                                              "the service, instead of running it here.")] = False,
) -> None:
    """Benchmark an OpenAI endpoint with AIPerf: latency percentiles, accepted responses, cost per accepted response."""
    from ..bench import runner
    from ..bench.runner import BenchError, BenchSettings, run
    from ..bench.workloads import PRESETS
    from ..base.pricing import PriceError
    from ..planning import PlanError, make_plan

    if workload not in PRESETS:
        fail(ExitCode.CONFIG_ERROR, f"--workload: unknown preset (got {workload!r}); accepted: {', '.join(PRESETS)}", False)
    levels = _concurrency_levels(concurrency or ("1" if replay_timestamps else "1,4,16"))
    try:
        profile_isls = _prompt_lengths(profile_isl)
    except typer.BadParameter as error:
        fail(ExitCode.CONFIG_ERROR, f"--profile-isl: {error}", False)
    if trace is not None and not trace.is_file():
        fail(ExitCode.CONFIG_ERROR, f"--trace: no such file (got {str(trace)!r}); accepted: a Mooncake-format "
                                    "JSON-lines trace", False)
    deployment = load(config, False)
    specs = deployment.specs()
    serving = specs.serving
    preset = PRESETS[workload]
    mix_pairs = _mix_pairs(mix, isl, osl, trace)
    if mix_pairs:
        isl, osl = runner.mix_means(mix_pairs)
    isl, osl = isl or preset.isl, osl or preset.osl
    per_token = price_input is not None or price_output is not None
    # Per-token prices without --config: a managed endpoint, not this deployment. Nothing of the
    # reference deployment describes it (model, context length, price), so none of it is used.
    managed = per_token and config is None
    if managed and emit_job and url is None:
        fail(ExitCode.CONFIG_ERROR, "--url: a managed endpoint has no cluster address to default to; accepted: "
                                    "the endpoint's base URL", False)
    if managed and (model is None or tokenizer is None):
        fail(ExitCode.CONFIG_ERROR, "--model and --tokenizer: a managed endpoint (per-token prices without "
                                    "--config) needs both; accepted: its model id and a tokenizer of the model", False)
    too_long_pairs = [f"{i},{o}" for i, o, _ in mix_pairs if i + o > serving.model.max_model_len]
    if not managed and too_long_pairs:
        fail(ExitCode.CONFIG_ERROR, f"--mix: {'; '.join(too_long_pairs)} (ISL,OSL) exceed model.max_model_len "
                                    f"({serving.model.max_model_len}) (got {mix!r}); accepted: pairs whose ISL + OSL "
                                    "is within it", False)
    threshold = _threshold(min_prompt_tokens, serving if config else None)
    if not managed and not mix_pairs and not trace and isl + osl > serving.model.max_model_len:
        fail(ExitCode.CONFIG_ERROR, f"--isl + --osl: {isl} + {osl} tokens exceed model.max_model_len "
                                    f"({serving.model.max_model_len}); accepted: a sum within it", False)
    too_long = [n for n in profile_isls if n + runner.PREFILL_LEVEL_OSL > serving.model.max_model_len]
    if not managed and too_long:
        fail(ExitCode.CONFIG_ERROR, f"--profile-isl: {', '.join(map(str, too_long))} tokens and the prefill level's "
                                    f"{runner.PREFILL_LEVEL_OSL} answer tokens exceed model.max_model_len "
                                    f"({serving.model.max_model_len}); accepted: prompt lengths of at most "
                                    f"{serving.model.max_model_len - runner.PREFILL_LEVEL_OSL}", False)
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
            fail(ExitCode.CONFIG_ERROR, str(error), False)
        hourly = plan_result.cost.hourly_usd if hourly_cost_usd is None else hourly_cost_usd
        if hourly is None:  # a region without prices: the bench prices responses, so it needs one
            fail(ExitCode.CONFIG_ERROR, f"{plan_result.cost.unknown_reason}; accepted: --hourly-cost-usd with the "
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
        fail(ExitCode.CONFIG_ERROR, f"--license: {error}", False)
    if emit_job:
        from ..cdk8s_charts.bench import in_cluster_url

        url = url or in_cluster_url(serving)
    elif not url:
        fail(ExitCode.CONFIG_ERROR, "--url: missing; accepted: the endpoint's base URL, e.g. http://localhost:8000", False)
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
            model_record=model_record, profile_isls=profile_isls,
            mix=runner.canonical_mix(mix_pairs) if mix_pairs else None, min_prompt_tokens=threshold)
    except BenchError as error:
        fail(ExitCode.CONFIG_ERROR, with_flags(error), False)
    if emit_job:
        from ..cdk8s_charts.bench import MAX_TRACE_BYTES, OUT_DIR, render_bench_job

        trace_text = None
        if trace:
            from ..config import ConfigError, read_text

            try:  # a file a person wrote: UTF-8 or UTF-16 with a BOM, or one line saying why not
                trace_text = read_text(trace, what="--trace file")
            except ConfigError as error:
                fail(ExitCode.CONFIG_ERROR, str(error), False)
            if len(trace_text.encode()) > MAX_TRACE_BYTES:
                fail(ExitCode.CONFIG_ERROR, f"--trace: {len(trace_text.encode()):,} bytes do not fit in the Job's "
                                            f"ConfigMap (got {str(trace)!r}); accepted: at most {MAX_TRACE_BYTES:,} "
                                            "bytes (sample it, or run the bench from a pod that has the file)", False)
        name, manifest = render_bench_job(serving, settings.to_json(), trace_text=trace_text)
        typer.echo(manifest, nl=False)
        ns = f"kubectl -n {serving.namespace}"
        pod = f"$({ns} get pod -l job-name={name} -o name | cut -d/ -f2)"
        # Plain text: the hint quotes "[bench]", which rich would take for markup.
        make_error_console().print(escape(
                f"kubectl apply -f the output (a Job of the same name must be deleted first), then:\n"
                f"  {ns} logs -f job/{name}\n"
                f"when it prints '[bench] exit 0':\n"
                f"  {ns} cp {pod}:{OUT_DIR} {out}\n"
                f"  {ns} exec {pod} -- touch {OUT_DIR}/.fetched\n"
                f"  {ns} delete job/{name} configmap/{name}\n"
                "(docs/benchmark.md)"), soft_wrap=True)
        return
    if not config and not managed:
        make_error_console().print("warning: no --config: priced as the reference deployment, topology not recorded",
                                   soft_wrap=True)
    console = make_console()
    price = (f"${price_input:g} / ${price_output:g} per million input / output tokens" if per_token
             else f"hourly cost ${hourly:.2f} ({escape(described['hourly_cost_source'])})")
    shape = (f"mix {settings.mix} (mean isl {isl}, osl {osl})" if settings.mix
             else f"{workload if not trace else 'trace'} (isl {isl}, osl {osl})")
    classes = (f", prefill threshold {threshold} prompt tokens (TTFT per class: local below, remote at or above)"
               if threshold else "")
    console.print(f"bench {escape(url)} model {escape(settings.model)}: {escape(shape)}{classes}, concurrency {', '.join(map(str, levels))}, {price}; licence "
                  f"{escape(licence_line(model_record['license']))}")
    try:
        entries = run(settings, out, progress=lambda line: console.print(escape(line)),
                      ui="simple" if console.is_terminal else "none")
    except BenchError as error:
        # The tokenizer check names --tokenizer; without the flag, say where the name came from.
        source = (" (--tokenizer not given: model.source of --config, or of the reference deployment)"
                  if tokenizer is None and any(name == "tokenizer" for name, _ in error.problems) else "")
        fail(ExitCode.CHECK_FAILED, with_flags(error) + source, False)
    _print_summary(console, out, entries)
    if profile_isls:
        console.print(f"profile: {escape(str(out / runner.PROFILE_FILE))} (TTFT at concurrency 1 for prompts of "
                      f"{', '.join(map(str, profile_isls))} tokens, ITL at concurrency {', '.join(map(str, levels))}); "
                      f"plan it with `ray-llm-eks plan --profile {escape(str(out))} --slo-ttft-ms ... --slo-itl-ms ...`")


def _mix_pairs(mix: str | None, isl: int | None, osl: int | None, trace: Path | None) -> list[tuple[int, int, float]]:
    """``--mix`` parsed, or [] without it; a bad value, or one beside --isl/--osl/--trace, exits 2."""
    from ..bench import runner

    if mix is None:
        return []
    beside = [flag for flag, value in (("--isl", isl), ("--osl", osl), ("--trace", trace)) if value is not None]
    if beside:
        fail(ExitCode.CONFIG_ERROR, f"--mix: not with {' or '.join(beside)} (got --mix {mix!r}); accepted: --mix "
                                    "alone (its pairs set every request's lengths), or --isl/--osl without it", False)
    try:
        return runner.parse_mix(mix)
    except ValueError as error:
        fail(ExitCode.CONFIG_ERROR, f"--mix: {error} (got {mix!r}); accepted: {runner.MIX_FORM}", False)


def _threshold(flag: int | None, serving: Any) -> int | None:
    """The prefill threshold the requests are classed by: ``--min-prompt-tokens``, else (with
    --config) ``disaggregation.min_prompt_tokens``; None when neither sets one (0 in the
    configuration: every request takes the prefill leg, there is nothing to split). A flag that
    contradicts --config exits 2."""
    if serving is None:
        return flag
    configured = serving.disaggregation.min_prompt_tokens if serving.topology.value == "disaggregated" else 0
    if flag is not None and serving.topology.value != "disaggregated":
        fail(ExitCode.CONFIG_ERROR, f"--min-prompt-tokens: topology {serving.topology.value} of --config has no "
                                    f"prefill leg: every request is prefilled where it is decoded (got {flag}); "
                                    "accepted: leave it out", False)
    if flag is not None and flag != configured:
        fail(ExitCode.CONFIG_ERROR, f"--min-prompt-tokens: {flag} differs from --config's "
                                    f"disaggregation.min_prompt_tokens ({configured}) (got {flag}); accepted: "
                                    f"{configured or 'leave it out'}, or leave it out to use the configuration's", False)
    return configured or None


NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _node_urls(flag: str, values: list[str] | None) -> dict[str, str]:
    """``NODE=URL`` flags as a map; a bad pair or a node named twice fails, naming the flag."""
    result: dict[str, str] = {}
    for value in values or ():
        node, sep, node_url = value.partition("=")
        if not sep or not NODE_NAME.match(node) or not node_url.startswith(("http://", "https://")):
            fail(ExitCode.CONFIG_ERROR, f"{flag}: not NODE=URL (got {value!r}); accepted: e.g. "
                                        "prefill-0=http://10.0.1.7:9475/counters (NODE: ROLE-N, letters, digits, "
                                        "'.', '_', '-')", False)
        if node in result:
            fail(ExitCode.CONFIG_ERROR, f"{flag}: node {node!r} named twice; accepted: one URL per node", False)
        result[node] = node_url
    return result


def node_role(node: str) -> str | None:
    """A node's role from its name: ``prefill-0`` is a prefill node; a name without a known role has none."""
    from ..base.placement import WORKER_ROLES

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
    from ..base.models import licence_record

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
    print_table(console, escape(f"{out}/summary.json"),
                [(column, True) for column in ("concurrency", "ok", "failed", "accepted", "TTFT p50/p99 ms",
                                               "e2e p99 ms", "output tok/s", "KV p50 ms", "$ / accepted",
                                               "GPU % / EFA Gbps")], rows)
    _print_prefill_paths(console, entries)


def _print_prefill_paths(console: Console, entries: list[dict[str, Any]]) -> None:
    """The per-class table (``by_prefill_path``): one row per level and class, with the decode
    replica's own count of that path when its metrics were scraped (``pd_requests``)."""
    split = [e for e in entries if e.get("by_prefill_path")]
    if not split:
        return
    rows = []
    for e in split:
        classes, counted = e["by_prefill_path"], e.get("pd_requests")
        for path in ("local", "remote"):
            c = classes[path]
            ttft = " / ".join("n/a" if c["ttft_ms"][p] is None else f"{c['ttft_ms'][p]:.1f}" for p in ("p50", "p90", "p99"))
            itl = "n/a" if c["itl_ms"]["p50"] is None else f"{c['itl_ms']['p50']:.2f}"
            share = "n/a" if c["share"] is None else f"{c['share']:.0%}"
            rows.append([str(e["concurrency"]), path, f"{c['requests']} ({share})", ttft, itl,
                         "n/a" if counted is None else str(counted[path])])
    threshold = split[0]["by_prefill_path"]["min_prompt_tokens"]
    print_table(console, escape(f"by prefill path: local < {threshold} prompt tokens (the server's count) <= remote"),
                [(column, column != "class") for column in ("concurrency", "class", "requests (share)", "TTFT p50/p90/p99 ms",
                                               "ITL p50 ms", "server count")], rows)
