"""Two benchmark runs side by side, and the verdict: does the added topology pay for itself?

The rule is the one the review of the AWS launch states: disaggregation pays off only where it
serves more accepted responses per dollar at the same SLOs. Each run's figure is its best level
(the concurrency at which its hourly price buys the most accepted responses: the operating point
a cost-minded operator would choose), so neither run is judged at a load it was not sized for.
A difference smaller than ``min_gain`` is run-to-run noise and keeps the simpler topology.

Matplotlib is imported only to draw, so the rest runs with the standard library.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import agreement as agreement_module
from .runner import BenchError, load_run

DEFAULT_MIN_GAIN = 0.05
"""Gains under 5 % are not acted on: two runs of the same deployment differ by a few percent."""
REPORT_FILE = "report.md"
VERDICT_FILE = "verdict.json"
LATENCY_PLOT = "latency_vs_throughput.png"
COST_PLOT = "cost_per_accepted_response.png"
DISAGGREGATED = "disaggregated"


@dataclass(frozen=True)
class Run:
    label: str
    path: Path
    info: dict[str, Any]
    entries: list[dict[str, Any]]
    completions: dict[str, Any] | None

    @property
    def settings(self) -> dict[str, Any]:
        return self.info.get("settings", {})

    @property
    def topology(self) -> str | None:
        return self.settings.get("deployment", {}).get("topology")

    def best(self) -> dict[str, Any] | None:
        """The level with the most accepted responses per dollar (the lowest cost per accepted response)."""
        priced = [e for e in self.entries if e.get("cost_per_accepted_response_usd")]
        return min(priced, key=lambda e: e["cost_per_accepted_response_usd"]) if priced else None


def load(path: Path, label: str | None = None) -> Run:
    info, entries, completions = load_run(path)
    topology = info.get("settings", {}).get("deployment", {}).get("topology")
    return Run(label or topology or path.name, path, info, entries, completions)


def responses_per_dollar(entry: dict[str, Any]) -> float:
    return 1 / entry["cost_per_accepted_response_usd"]


def _workload(run: Run) -> dict[str, Any]:
    s = run.settings
    return {"isl": None if s.get("trace") else s.get("isl"), "osl": None if s.get("trace") else s.get("osl"),
            "trace": Path(s["trace"]).name if s.get("trace") else None, "ignore_eos": s.get("ignore_eos")}


def _slos(run: Run) -> tuple[Any, Any]:
    return run.settings.get("slo_ttft_ms"), run.settings.get("slo_e2e_ms")


def verdict(a: Run, b: Run, min_gain: float = DEFAULT_MIN_GAIN) -> dict[str, Any]:
    """The decision and its reason, as data (``verdict.json``) and as a sentence."""
    problems = []
    if _slos(a) != _slos(b):
        problems.append(f"the SLOs differ (TTFT/e2e ms: {a.label} {_slos(a)}, {b.label} {_slos(b)})")
    if _slos(a) == (None, None):
        problems.append("no SLO was set, so every completed response counts as accepted; "
                        "rerun with --slo-ttft-ms and --slo-e2e-ms")
    if _workload(a) != _workload(b):
        problems.append(f"the workloads differ ({a.label} {_workload(a)}, {b.label} {_workload(b)})")
    if a.topology and a.topology == b.topology and a.path.resolve() != b.path.resolve():
        problems.append(f"both runs say topology {a.topology}: was each benchmarked with its own --config?")
    best_a, best_b = a.best(), b.best()
    for run, best in ((a, best_a), (b, best_b)):
        if best is None:
            problems.append(f"{run.label} has no priced level with an accepted response "
                            "(no --config/--hourly-cost-usd, or nothing met the SLOs)")
    agreement = (agreement_module.agreement(a.completions, b.completions)
                 if a.completions and b.completions else None)
    result: dict[str, Any] = {"a": a.label, "b": b.label, "min_gain": min_gain, "agreement": agreement}
    if problems and (best_a is None or best_b is None or _slos(a) != _slos(b) or _workload(a) != _workload(b)):
        return {**result, "decision": "not-comparable", "winner": None, "gain": None,
                "reason": "Not comparable: " + "; ".join(problems) + "."}
    assert best_a is not None and best_b is not None
    per_dollar_a, per_dollar_b = responses_per_dollar(best_a), responses_per_dollar(best_b)
    gain = per_dollar_a / per_dollar_b - 1
    winner = a if gain > min_gain else b if gain < -min_gain else None
    figures = (f"{a.label} serves {per_dollar_a:,.0f} accepted responses per dollar at its best level "
               f"(concurrency {best_a['concurrency']}), {b.label} {per_dollar_b:,.0f} "
               f"(concurrency {best_b['concurrency']})")
    topologies = {a.topology, b.topology}
    if winner is None:
        decision = "no-difference"
        simpler = next((r.label for r in (a, b) if r.topology and r.topology != DISAGGREGATED), None)
        reason = (f"No difference beyond {min_gain:.0%}: {figures}. "
                  + (f"Keep {simpler}, the simpler topology: the gain does not pay for the second GPU pool "
                     "and the KV transfer." if simpler and DISAGGREGATED in topologies else
                     "Keep the simpler or cheaper deployment."))
    else:
        loser = b if winner is a else a
        ratio = max(per_dollar_a, per_dollar_b) / min(per_dollar_a, per_dollar_b) - 1
        if winner.topology == DISAGGREGATED and loser.topology != DISAGGREGATED:
            decision = "adopt-disaggregation"
            reason = (f"Disaggregation pays off for this workload: {figures}; {ratio:.0%} more accepted responses "
                      "per dollar at the same SLOs.")
        elif loser.topology == DISAGGREGATED and winner.topology != DISAGGREGATED:
            decision = "reject-disaggregation"
            reason = (f"Reject disaggregation for this workload: {figures}; {winner.label} serves {ratio:.0%} more "
                      "accepted responses per dollar at the same SLOs, so the transfer overhead and idle "
                      "duplication outweigh the gain.")
        else:
            decision = "prefer-" + winner.label
            reason = f"{winner.label} serves {ratio:.0%} more accepted responses per dollar at the same SLOs: {figures}."
    if agreement and agreement["rate"] is not None and agreement["rate"] < 1:
        reason += (f" Warning: greedy outputs agree on {agreement['identical']} of {agreement['compared']} prompts; "
                   "look at where they diverge before trusting the faster run (a corrupted KV transfer shows here first).")
    if problems:
        reason += " Caveat: " + "; ".join(problems) + "."
    return {**result, "decision": decision, "winner": winner.label if winner else None, "gain": gain,
            "best": {a.label: best_a["concurrency"], b.label: best_b["concurrency"]},
            "responses_per_dollar": {a.label: per_dollar_a, b.label: per_dollar_b}, "reason": reason}


# --- the report -----------------------------------------------------------------------------------

def _num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def _usd(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"${value:.6f}" if value < 0.01 else f"${value:,.4f}"


def markdown(a: Run, b: Run, decision: dict[str, Any]) -> str:
    lines = [f"# {a.label} vs {b.label}", "", f"**Verdict ({decision['decision']}).** {decision['reason']}", ""]
    s = a.settings
    slo = f"TTFT ≤ {_num(s.get('slo_ttft_ms'), 0)} ms, end-to-end ≤ {_num(s.get('slo_e2e_ms'), 0)} ms"
    work = (f"trace `{Path(s['trace']).name}`" if s.get("trace")
            else f"{s.get('isl')} input / {s.get('osl')} output tokens (mean)")
    lines += [f"Workload: {work}; SLOs: {slo}; {s.get('requests')} requests per level; load generator "
              f"AIPerf {a.info.get('aiperf_version', '?')}.", ""]
    for run in (a, b):
        d = run.settings.get("deployment", {})
        hourly = next((e["hourly_cost_usd"] for e in run.entries if e.get("hourly_cost_usd") is not None), None)
        facts = [f"`{run.path}`", f"topology {d.get('topology', '?')}", d.get("nodes"),
                 f"hourly cost {_usd(hourly)} ({d.get('hourly_cost_source', 'given')}"
                 + (f", prices of {d['price_table_as_of']})" if d.get("price_table_as_of") else ")")]
        lines.append(f"- **{run.label}**: " + "; ".join(f for f in facts if f))
    lines += ["", "| concurrency | run | ok | failed | accepted | TTFT p50/p95/p99 ms | ITL p50 ms | e2e p50/p95/p99 ms "
              "| output tok/s | KV transfer p50/p95 ms | $ per 1M output tokens | $ per accepted response |",
              "|---:|---|---:|---:|---:|---|---:|---|---:|---|---:|---:|"]
    levels = sorted({e["concurrency"] for r in (a, b) for e in r.entries}, key=lambda c: (c is None, c or 0))
    for level in levels:
        for run in (a, b):
            e = next((x for x in run.entries if x["concurrency"] == level), None)
            if e is None:
                continue
            kv = e.get("kv_transfer_ms")
            lines.append(
                f"| {level if level is not None else 'trace'} | {run.label} | {e['requests_ok']} | {e['requests_failed']} "
                f"| {e['accepted_responses']} | {'/'.join(_num(e['ttft_ms'][p]) for p in ('p50', 'p95', 'p99'))} "
                f"| {_num(e['itl_ms']['p50'], 2)} | {'/'.join(_num(e['e2e_ms'][p], 0) for p in ('p50', 'p95', 'p99'))} "
                f"| {_num(e['output_tokens_per_s'])} | {'/'.join(_num(kv[p], 2) for p in ('p50', 'p95')) if kv else 'n/a'} "
                f"| {_usd(e['cost_per_million_output_tokens_usd'])} | {_usd(e['cost_per_accepted_response_usd'])} |")
    agreement = decision.get("agreement")
    lines += ["", "## Output agreement (greedy decoding, fixed prompts)", ""]
    if agreement is None:
        lines.append("Not measured: a run has no agreement.json (bench ran with --agreement-prompts 0).")
    else:
        rate = agreement["rate"]
        lines.append(f"{agreement['identical']} of {agreement['compared']} prompts identical "
                     f"({'n/a' if rate is None else f'{rate:.0%}'}).")
        for d in agreement["divergences"]:
            lines.append(f"- prompt `{d['prompt_sha256']}` diverges at character {d['first_difference_at_char']}: "
                         f"{json.dumps(d['a'])} vs {json.dumps(d['b'])}")
    lines += ["", "## Plots", "", f"![TTFT and end-to-end latency against throughput]({LATENCY_PLOT})", "",
              f"![Cost per accepted response against concurrency]({COST_PLOT})", "",
              "How to read this report: docs/benchmark.md.", ""]
    return "\n".join(lines)


def plot(a: Run, b: Run, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {a.label: "#1f77b4", b.label: "#d62728"}
    styles = {"p50": "-", "p95": "--", "p99": ":"}
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    for axis, metric, title, slo_key in ((axes[0], "ttft_ms", "Time to first token", "slo_ttft_ms"),
                                         (axes[1], "e2e_ms", "End-to-end latency", "slo_e2e_ms")):
        for run in (a, b):
            entries = sorted((e for e in run.entries if e["concurrency"] is not None), key=lambda e: e["concurrency"])
            x = [e["output_tokens_per_s"] for e in entries]
            for p, style in styles.items():
                axis.plot(x, [e[metric][p] for e in entries], style, marker="o", color=colors[run.label],
                          label=f"{run.label} {p}")
            for e in entries:
                axis.annotate(f"c{e['concurrency']}", (e["output_tokens_per_s"], e[metric]["p50"]),
                              textcoords="offset points", xytext=(4, -10), fontsize=7, color=colors[run.label])
        slo = a.settings.get(slo_key)
        if slo:
            axis.axhline(slo, color="black", linewidth=0.8, alpha=0.6)
            axis.annotate(f"SLO {slo:g} ms", (0.01, slo), xycoords=("axes fraction", "data"),
                          textcoords="offset points", xytext=(0, 3), fontsize=8)
        axis.set(title=f"{title} vs throughput", xlabel="output tokens / s", ylabel="ms")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, ncol=2)
    latency = out / LATENCY_PLOT
    figure.savefig(latency, dpi=110)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    for run in (a, b):
        entries = sorted((e for e in run.entries if e["concurrency"] is not None
                          and e.get("cost_per_accepted_response_usd")), key=lambda e: e["concurrency"])
        axis.plot([e["concurrency"] for e in entries], [e["cost_per_accepted_response_usd"] * 1000 for e in entries],
                  marker="o", color=colors[run.label], label=run.label)
        best = run.best()
        if best and best["concurrency"] is not None:
            axis.scatter([best["concurrency"]], [best["cost_per_accepted_response_usd"] * 1000], s=140,
                         facecolors="none", edgecolors=colors[run.label], linewidths=1.5)
    from matplotlib.ticker import FuncFormatter, ScalarFormatter

    levels = sorted({e["concurrency"] for r in (a, b) for e in r.entries if e["concurrency"] is not None})
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")  # equal ratios look equal: "70 % more per dollar" is the same gap at every level
    axis.set_xticks(levels)
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_major_formatter(ScalarFormatter())
    axis.set(title="Cost per accepted response (circled: each run's best level)", xlabel="concurrency",
             ylabel="USD per 1,000 accepted responses (log)")
    axis.grid(alpha=0.3, which="both")
    axis.legend()
    cost_plot = out / COST_PLOT
    figure.savefig(cost_plot, dpi=110)
    plt.close(figure)
    return [latency, cost_plot]


def compare(path_a: Path, path_b: Path, out: Path, *, min_gain: float = DEFAULT_MIN_GAIN,
            labels: tuple[str | None, str | None] = (None, None), plots: bool = True) -> dict[str, Any]:
    a, b = load(path_a, labels[0]), load(path_b, labels[1])
    if a.label == b.label:
        a, b = load(path_a, labels[0] or f"{a.label} (A)"), load(path_b, labels[1] or f"{b.label} (B)")
    if not 0 <= min_gain < 1:
        raise BenchError(f"min_gain: between 0 and 1 (got {min_gain})")
    out.mkdir(parents=True, exist_ok=True)
    decision = verdict(a, b, min_gain)
    (out / VERDICT_FILE).write_text(json.dumps(decision, indent=2) + "\n")
    (out / REPORT_FILE).write_text(markdown(a, b, decision))
    if plots:
        plot(a, b, out)
    return decision
