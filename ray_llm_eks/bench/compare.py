"""Two benchmark runs side by side, and the verdict: does the added topology pay for itself?

The rule is the one the review of the AWS launch states: disaggregation pays off only where it
serves more accepted responses per dollar at the same SLOs. Each run's figure is its best level:
the concurrency at which its hourly price buys the most accepted responses, among the levels
that meet the SLOs for at least ``min_attainment`` of their requests (90 %, the attainment goal
of DistServe's goodput, arXiv:2401.09670). That is the operating point a cost-minded operator
would choose and could sell; a level that is cheap only because it rejects a third of its
requests is not one. A difference smaller than ``min_gain`` either way is run-to-run noise and
keeps the simpler topology.

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
DEFAULT_MIN_ATTAINMENT = 0.9
"""A level counts only if at least 90 % of its requests were accepted (DistServe's goodput goal)."""
SENSITIVITY_GOALS = (0.8, 0.9, 0.95, 0.99)
"""The attainment goals the verdict is also given at, with the one used: how the verdict moves with
``--min-attainment`` (one pair of runs gave adopt-disaggregation +457 % at 90 % and no-difference at
80 %, because a level accepting 85 % of its requests then counted)."""
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

    def best(self, min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> dict[str, Any] | None:
        """Among the levels meeting ``min_attainment``, the one with the most accepted responses
        per dollar (the lowest cost per accepted response)."""
        eligible = [e for e in self.entries if e.get("cost_per_accepted_response_usd") is not None
                    and attainment(e) >= min_attainment]
        return min(eligible, key=lambda e: e["cost_per_accepted_response_usd"]) if eligible else None


def attainment(entry: dict[str, Any]) -> float:
    """The share of a level's measured requests that were accepted."""
    sent = entry["requests_ok"] + entry["requests_failed"]
    return entry["accepted_responses"] / sent if sent else 0.0


def load(path: Path, label: str | None = None) -> Run:
    info, entries, completions = load_run(path)
    topology = info.get("settings", {}).get("deployment", {}).get("topology")
    return Run(label or topology or path.name, path, info, entries, completions)


def responses_per_dollar(entry: dict[str, Any]) -> float:
    return 1 / entry["cost_per_accepted_response_usd"]


def _workload(run: Run) -> dict[str, Any]:
    """What must be equal for two runs to measure the same work."""
    s = run.settings
    return {"isl": None if s.get("trace") else s.get("isl"), "osl": None if s.get("trace") else s.get("osl"),
            "trace": Path(s["trace"]).name if s.get("trace") else None,
            "replay_timestamps": bool(s.get("replay_timestamps")), "ignore_eos": s.get("ignore_eos"),
            "tokenizer": s.get("tokenizer"), "tokenizer_revision": s.get("tokenizer_revision")}


def _slos(run: Run) -> tuple[Any, Any]:
    return run.settings.get("slo_ttft_ms"), run.settings.get("slo_e2e_ms")


def _agreement_warning(agreement: dict[str, Any] | None) -> str | None:
    if agreement is None:
        return None
    if agreement["compared"] == 0:
        return "Warning: the runs share no agreement prompt, so output agreement was not measured."
    if agreement["rate"] < 1:
        failed = f", {len(agreement['errors'])} failed on a side" if agreement["errors"] else ""
        return (f"Warning: greedy outputs agree on {agreement['identical']} of {agreement['compared']} prompts"
                f"{failed}; look at where they diverge before trusting the faster run (a corrupted KV "
                "transfer shows here first).")
    return None


def verdict(a: Run, b: Run, min_gain: float = DEFAULT_MIN_GAIN,
            min_attainment: float = DEFAULT_MIN_ATTAINMENT,
            goals: tuple[float, ...] = SENSITIVITY_GOALS) -> dict[str, Any]:
    """The decision and its reason, as data (``verdict.json``) and as a sentence, with
    ``sensitivity``: the decision at each of ``goals`` and at ``min_attainment``, each from
    :func:`decide` on the same records (the verdict itself is the entry of ``min_attainment``)."""
    decision = decide(a, b, min_gain, min_attainment)
    sensitivity = []
    for goal in sorted({*goals, min_attainment}):
        at_goal = decision if goal == min_attainment else decide(a, b, min_gain, goal)
        per_dollar = at_goal.get("responses_per_dollar")
        sensitivity.append({
            "min_attainment": goal, "used": goal == min_attainment, "decision": at_goal["decision"],
            "winner": at_goal["winner"], "best": at_goal.get("best"),
            # The winner's margin, whichever run was named first (as the verdict's threshold reads it).
            "ratio": max(per_dollar.values()) / min(per_dollar.values()) - 1 if per_dollar else None,
            "without_level": [run.label for run in (a, b) if run.best(goal) is None],
        })
    return {**decision, "sensitivity": sensitivity}


def _goal(goal: float) -> str:
    return f"{goal * 100:g}%"


def sensitivity_line(decision: dict[str, Any]) -> str:
    """``verdict at --min-attainment 80 %: ...; 90 % (used): ...`` from :func:`verdict`'s data."""
    parts = []
    for entry in decision["sensitivity"]:
        if entry["decision"] == "not-comparable":
            margin = (f" (no priced level of {' or '.join(entry['without_level'])} meets it)" if entry["without_level"]
                      else "")
        else:
            margin = f" (+{entry['ratio']:.0%})"
        parts.append(f"{_goal(entry['min_attainment'])}{' (used)' if entry['used'] else ''}: "
                     f"{entry['decision']}{margin}")
    return "Verdict at --min-attainment " + "; ".join(parts) + "."


def decide(a: Run, b: Run, min_gain: float = DEFAULT_MIN_GAIN,
           min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> dict[str, Any]:
    """The decision and its reason at one attainment goal."""
    blocking, caveats = [], []
    if _slos(a) != _slos(b):
        blocking.append(f"the SLOs differ (TTFT/e2e ms: {a.label} {_slos(a)}, {b.label} {_slos(b)})")
    if _workload(a) != _workload(b):
        differ = sorted(k for k in _workload(a) if _workload(a)[k] != _workload(b)[k])
        blocking.append(f"the workloads differ in {', '.join(differ)} ({a.label} "
                        f"{ {k: _workload(a)[k] for k in differ} }, {b.label} { {k: _workload(b)[k] for k in differ} })")
    best_a, best_b = a.best(min_attainment), b.best(min_attainment)
    for run, best in ((a, best_a), (b, best_b)):
        if best is None:
            blocking.append(f"{run.label} has no priced level where at least {min_attainment:.0%} of the requests "
                            "were accepted (no --config/--hourly-cost-usd, or the SLOs were missed at every level)")
    if _slos(a) == (None, None):
        caveats.append("no SLO was set, so every completed response counts as accepted; "
                       "rerun with --slo-ttft-ms and --slo-e2e-ms")
    if a.topology and a.topology == b.topology and a.path.resolve() != b.path.resolve():
        caveats.append(f"both runs say topology {a.topology}: was each benchmarked with its own --config?")
    for key in ("model", "requests"):
        if a.settings.get(key) != b.settings.get(key):
            caveats.append(f"{key} differs ({a.settings.get(key)} vs {b.settings.get(key)})")
    incomplete = [f"{r.label} c{e['concurrency']}" for r in (a, b) for e in r.entries if e.get("aiperf_exit_code")]
    if incomplete:
        caveats.append(f"AIPerf reported failure at {', '.join(incomplete)} (every request failed there)")
    agreement = (agreement_module.agreement(a.completions, b.completions)
                 if a.completions and b.completions else None)
    result: dict[str, Any] = {"a": a.label, "b": b.label, "min_gain": min_gain, "min_attainment": min_attainment,
                              "agreement": agreement}
    warning = _agreement_warning(agreement)
    if blocking or best_a is None or best_b is None:
        reason = "Not comparable: " + "; ".join(blocking + caveats) + "."
        return {**result, "decision": "not-comparable", "winner": None, "gain": None,
                "reason": reason + (f" {warning}" if warning else "")}
    per_dollar_a, per_dollar_b = responses_per_dollar(best_a), responses_per_dollar(best_b)
    gain = per_dollar_a / per_dollar_b - 1
    # Symmetric: the larger over the smaller, whichever run was named first.
    ratio = max(per_dollar_a, per_dollar_b) / min(per_dollar_a, per_dollar_b) - 1
    winner = (a if per_dollar_a > per_dollar_b else b) if ratio > min_gain else None
    figures = (f"{a.label} serves {per_dollar_a:,.0f} accepted responses per dollar at its best level "
               f"(concurrency {best_a['concurrency']}, {attainment(best_a):.0%} accepted), {b.label} "
               f"{per_dollar_b:,.0f} (concurrency {best_b['concurrency']}, {attainment(best_b):.0%} accepted)")
    if winner is None:
        decision = "no-difference"
        simpler = next((r.label for r in (a, b) if r.topology and r.topology != DISAGGREGATED), None)
        reason = (f"No difference beyond {min_gain:.0%}: {figures}. "
                  + (f"Keep {simpler}, the simpler topology: the gain does not pay for the second GPU pool "
                     "and the KV transfer." if simpler and DISAGGREGATED in {a.topology, b.topology} else
                     "Keep the simpler or cheaper deployment."))
    else:
        loser = b if winner is a else a
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
    if warning:
        reason += " " + warning
    if caveats:
        reason += " Caveat: " + "; ".join(caveats) + "."
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


def _triple(values: dict[str, Any], digits: int) -> str:
    return "/".join(_num(values.get(p), digits) for p in ("p50", "p95", "p99"))


def markdown(a: Run, b: Run, decision: dict[str, Any]) -> str:
    lines = [f"# {a.label} vs {b.label}", "", f"**Verdict ({decision['decision']}).** {decision['reason']}", "",
             f"**Sensitivity.** {sensitivity_line(decision)} Each is the same rule on the same levels; a level "
             "counts at a goal when that share of its requests was accepted.", ""]
    s = a.settings
    slo = f"TTFT ≤ {_num(s.get('slo_ttft_ms'), 0)} ms, end-to-end ≤ {_num(s.get('slo_e2e_ms'), 0)} ms"
    if s.get("trace"):
        work = f"trace `{Path(s['trace']).name}`" + (" at its timestamps" if s.get("replay_timestamps")
                                                      else f", {s.get('requests')} requests per level")
    else:
        work = f"{s.get('isl')} input / {s.get('osl')} output tokens (mean), {s.get('requests')} requests per level"
    lines += [f"Workload: {work}; SLOs: {slo}; a level counts when at least {decision['min_attainment']:.0%} of "
              f"its requests are accepted; load generator AIPerf {a.info.get('aiperf_version', '?')}.", ""]
    for run in (a, b):
        d = run.settings.get("deployment", {})
        hourly = next((e["hourly_cost_usd"] for e in run.entries if e.get("hourly_cost_usd") is not None), None)
        facts = [f"`{run.path}`", f"topology {d.get('topology') or 'not given'}", d.get("nodes"),
                 f"hourly cost {_usd(hourly)} ({d.get('hourly_cost_source', 'given')}"
                 + (f", prices of {d['price_table_as_of']})" if d.get("price_table_as_of") else ")")]
        lines.append(f"- **{run.label}**: " + "; ".join(f for f in facts if f))
    lines += ["", "| concurrency | run | ok | failed | accepted | TTFT p50/p95/p99 ms | ITL p50 ms | e2e p50/p95/p99 ms "
              "| output tok/s | KV transfer p50/p95 ms | $ per 1M output tokens | $ per accepted response |",
              "|---:|---|---:|---:|---:|---|---:|---|---:|---|---:|---:|"]
    best = decision.get("best") or {}
    levels = sorted({e["concurrency"] for r in (a, b) for e in r.entries}, key=lambda c: (c is None, c or 0))
    for level in levels:
        for run in (a, b):
            e = next((x for x in run.entries if x["concurrency"] == level), None)
            if e is None:
                continue
            kv = e.get("kv_transfer_ms")
            marker = " **best**" if best.get(run.label) == level and level is not None else ""
            lines.append(
                f"| {level if level is not None else 'trace'} | {run.label}{marker} | {e['requests_ok']} "
                f"| {e['requests_failed']} | {e['accepted_responses']} ({attainment(e):.0%}) | {_triple(e['ttft_ms'], 1)} "
                f"| {_num(e['itl_ms'].get('p50'), 2)} | {_triple(e['e2e_ms'], 0)} | {_num(e['output_tokens_per_s'])} "
                f"| {'/'.join(_num(kv[p], 2) for p in ('p50', 'p95')) if kv else 'n/a'} "
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
        for d in agreement.get("errors", []):
            lines.append(f"- prompt `{d['prompt_sha256']}` failed: {a.label}: {d['a'] or 'ok'}; {b.label}: {d['b'] or 'ok'}")
    lines += ["", "## Plots", "", f"![TTFT and end-to-end latency against throughput]({LATENCY_PLOT})", "",
              f"![Cost per accepted response against concurrency]({COST_PLOT})", "",
              "How to read this report: docs/benchmark.md.", ""]
    return "\n".join(lines)


def _swept(run: Run) -> list[dict[str, Any]]:
    """The levels of a concurrency sweep that served something (a timestamp replay has no x)."""
    return sorted((e for e in run.entries if e["concurrency"] is not None and e["requests_ok"] > 0),
                  key=lambda e: e["concurrency"])


def _no_data(axis: Any, what: str) -> None:
    axis.text(0.5, 0.5, f"no {what} to plot", ha="center", va="center", transform=axis.transAxes, color="gray")


BELOW_GOAL_MARKER = "x"
"""Levels that accepted fewer than ``min_attainment`` of their requests: drawn, but not as the others."""
AT_GOAL_MARKER = "o"


def _load_segments(points: list[tuple[float, float, dict[str, Any]]]) -> list[list[tuple[float, float, dict[str, Any]]]]:
    """Points in load order (concurrency), cut wherever the throughput (x) goes back.

    Joining levels in load order draws a long backward line where an overloaded level serves
    less than the one before; joining them in throughput order would put, say, c64 between c8
    and c16, a curve nobody measured. So consecutive levels are joined only while throughput
    does not fall, and a level after a fall starts a new line: every point is still drawn and
    labelled with its concurrency, and every line reads left to right as added load.
    """
    segments: list[list[tuple[float, float, dict[str, Any]]]] = []
    for point in points:
        if segments and point[0] >= segments[-1][-1][0]:
            segments[-1].append(point)
        else:
            segments.append([point])
    return segments


def _mark_levels(axis: Any, points: list[tuple[float, float, dict[str, Any]]], color: str,
                 min_attainment: float) -> bool:
    """The level markers: filled circles at or above the attainment goal, crosses below it (gid
    ``at-goal`` / ``below-goal``). Returns whether any level is below the goal."""
    below = [(x, y) for x, y, e in points if attainment(e) < min_attainment]
    meets = [(x, y) for x, y, e in points if attainment(e) >= min_attainment]
    if meets:
        axis.scatter(*zip(*meets), marker=AT_GOAL_MARKER, s=18, color=color, zorder=3, gid="at-goal")
    if below:
        axis.scatter(*zip(*below), marker=BELOW_GOAL_MARKER, s=70, linewidths=1.6, color=color, zorder=4,
                     gid="below-goal")
    return bool(below)


def _legend(axis: Any, below_goal: bool, min_attainment: float, **options: Any) -> None:
    from matplotlib.lines import Line2D

    handles, _ = axis.get_legend_handles_labels()
    if below_goal:
        handles.append(Line2D([], [], color="gray", marker=BELOW_GOAL_MARKER, markersize=8, linestyle="none",
                              markeredgewidth=1.6, label=f"level below the {min_attainment:.0%} attainment goal"))
    axis.legend(handles=handles, **options)


def latency_figure(a: Run, b: Run, min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> Any:
    """TTFT and end-to-end p50/p95/p99 against output tokens per second (see :func:`_load_segments`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {a.label: "#1f77b4", b.label: "#d62728"}
    styles = {"p50": "-", "p95": "--", "p99": ":"}
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    for axis, metric, title, slo_key in ((axes[0], "ttft_ms", "Time to first token", "slo_ttft_ms"),
                                         (axes[1], "e2e_ms", "End-to-end latency", "slo_e2e_ms")):
        drawn = below_goal = cut = False
        for run in (a, b):
            for p, style in styles.items():
                points = [(e["output_tokens_per_s"], e[metric][p], e) for e in _swept(run)
                          if e[metric].get(p) is not None]
                if not points:
                    continue
                segments = _load_segments(points)
                cut = cut or len(segments) > 1
                for index, segment in enumerate(segments):
                    axis.plot([x for x, _, _ in segment], [y for _, y, _ in segment], style, color=colors[run.label],
                              label=f"{run.label} {p}" if index == 0 else "_nolegend_", gid=f"{run.label} {p}")
                below_goal = _mark_levels(axis, points, colors[run.label], min_attainment) or below_goal
                drawn = True
            for e in _swept(run):
                if e[metric].get("p50") is not None:
                    axis.annotate(f"c{e['concurrency']}", (e["output_tokens_per_s"], e[metric]["p50"]),
                                  textcoords="offset points", xytext=(4, -10), fontsize=7, color=colors[run.label])
        slo = a.settings.get(slo_key)
        if slo:
            axis.axhline(slo, color="black", linewidth=0.8, alpha=0.6)
            axis.annotate(f"SLO {slo:g} ms", (0.01, slo), xycoords=("axes fraction", "data"),
                          textcoords="offset points", xytext=(0, 3), fontsize=8)
        if cut:
            axis.annotate("a level serving less than the one before starts a new line", (0.01, 0.01),
                          xycoords="axes fraction", fontsize=7, color="gray")
        axis.set(title=f"{title} vs throughput", xlabel="output tokens / s", ylabel="ms")
        axis.grid(alpha=0.3)
        if drawn:
            _legend(axis, below_goal, min_attainment, fontsize=7, ncol=2)
        else:
            _no_data(axis, "concurrency level that served a request")
    return figure


def cost_figure(a: Run, b: Run, min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> Any:
    """Dollars per 1,000 accepted responses against concurrency (levels in load order, so x rises)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, ScalarFormatter

    colors = {a.label: "#1f77b4", b.label: "#d62728"}
    figure, axis = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    priced = {run.label: [e for e in _swept(run) if e.get("cost_per_accepted_response_usd") is not None]
              for run in (a, b)}
    below_goal = False
    for run in (a, b):
        entries = priced[run.label]
        if not entries:
            continue
        points = [(e["concurrency"], e["cost_per_accepted_response_usd"] * 1000, e) for e in entries]
        axis.plot([x for x, _, _ in points], [y for _, y, _ in points], color=colors[run.label], label=run.label,
                  gid=run.label)
        below_goal = _mark_levels(axis, points, colors[run.label], min_attainment) or below_goal
        best = run.best(min_attainment)
        if best and best["concurrency"] is not None:
            axis.scatter([best["concurrency"]], [best["cost_per_accepted_response_usd"] * 1000], s=140,
                         facecolors="none", edgecolors=colors[run.label], linewidths=1.5, gid="best")
    levels = sorted({e["concurrency"] for entries in priced.values() for e in entries})
    if levels:
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")  # equal ratios look equal: "70 % more per dollar" is the same gap at every level
        axis.set_xticks(levels)
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_major_formatter(ScalarFormatter())
        _legend(axis, below_goal, min_attainment)
    else:
        _no_data(axis, "priced level with an accepted response")
    axis.set(title=f"Cost per accepted response (circled: best level with >= {min_attainment:.0%} accepted)",
             xlabel="concurrency", ylabel="USD per 1,000 accepted responses (log)")
    axis.grid(alpha=0.3, which="both")
    return figure


def plot(a: Run, b: Run, out: Path, min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> list[Path]:
    """Two PNGs; levels without a figure (nothing served, nothing accepted, a timestamp replay) are left out."""
    import matplotlib.pyplot as plt

    paths = []
    for build, name in ((latency_figure, LATENCY_PLOT), (cost_figure, COST_PLOT)):
        figure = build(a, b, min_attainment)
        figure.savefig(out / name, dpi=110)
        plt.close(figure)
        paths.append(out / name)
    return paths


def compare(path_a: Path, path_b: Path, out: Path, *, min_gain: float = DEFAULT_MIN_GAIN,
            min_attainment: float = DEFAULT_MIN_ATTAINMENT, labels: tuple[str | None, str | None] = (None, None),
            plots: bool = True) -> dict[str, Any]:
    a, b = load(path_a, labels[0]), load(path_b, labels[1])
    if a.label == b.label:
        a, b = load(path_a, labels[0] or f"{a.label} (A)"), load(path_b, labels[1] or f"{b.label} (B)")
    if not 0 <= min_gain < 1:
        raise BenchError(f"min_gain: between 0 and 1 (got {min_gain})", [("min_gain", f"between 0 and 1 (got {min_gain})")])
    if not 0 < min_attainment <= 1:
        raise BenchError(f"min_attainment: above 0 and at most 1 (got {min_attainment})",
                         [("min_attainment", f"above 0 and at most 1 (got {min_attainment})")])
    out.mkdir(parents=True, exist_ok=True)
    decision = verdict(a, b, min_gain, min_attainment)
    (out / VERDICT_FILE).write_text(json.dumps(decision, indent=2) + "\n")
    (out / REPORT_FILE).write_text(markdown(a, b, decision))
    if plots:
        plot(a, b, out, min_attainment)
    return decision
