"""Two or more benchmark runs side by side, ranked, and the seed's decision: trial, wait or reject.

The rule is the one the review of the AWS launch states: disaggregation pays off only where it
serves more accepted responses per dollar at the same SLOs and quality. Each run's figure is its
best level: the concurrency at which its price buys the most accepted responses, among the levels
that meet the SLOs for at least ``min_attainment`` of their requests (90 %, the attainment goal of
DistServe's goodput, arXiv:2401.09670). That is the operating point a cost-minded operator would
choose and could sell; a level that is cheap only because it rejects a third of its requests is
not one. A run is priced by the hour (a deployment: ``plan``'s hourly total) or per token (a
managed endpoint: ``bench --price-per-million-input-tokens/--output-tokens``); either way its
``summary.json`` carries the cost of an accepted response at each level, so the runs rank on one
figure. Where an hourly and a per-token run meet, :func:`break_even` gives the request rate at
which the hourly bill equals the per-token one.

The decision (:func:`decide`; every rule is in docs/benchmark.md, "The decision"):

- ``wait``: something the comparison rests on is unresolved (no disaggregated run or no colocated
  baseline, different SLOs or workloads, a run with no priced level meeting the goal; and, when
  disaggregation measures a gain: agreement with the first run not measured or not full, the
  transport unverified, the licence not on record or different, the model revision different);
- ``reject``: another run serves at least as many accepted responses per dollar, or the
  disaggregated gain is within ``min_gain`` (run-to-run noise), so the second pool and the transfer
  do not pay; transfer overhead and idle duplication are named where measured;
- ``trial``: a measured gain beyond ``min_gain`` over every other run, at the same SLOs and
  workload, with full agreement, a verified transport and one licence on record.

Matplotlib is imported only to draw, so the rest runs with the standard library.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import agreement as agreement_module
from .cost import SECONDS_PER_HOUR
from .runner import DEPLOYMENT, HOURLY, MANAGED_ENDPOINT, PER_TOKEN, BenchError, load_run  # noqa: F401 - compare.HOURLY etc. stay importable
from .utilization import EFA_SOURCE as EFA_COUNTERS_SOURCE

DEFAULT_MIN_GAIN = 0.05
"""Gains under 5 % are not acted on: two runs of the same deployment differ by a few percent."""
DEFAULT_MIN_ATTAINMENT = 0.9
"""A level counts only if at least 90 % of its requests were accepted (DistServe's goodput goal)."""
SENSITIVITY_GOALS = (0.8, 0.9, 0.95, 0.99)
"""The attainment goals the decision is also given at, with the one used: how it moves with
``--min-attainment`` (one pair of runs gave a 457 % gain at 90 % and none at 80 %, because a level
accepting 85 % of its requests then counted)."""
REPORT_FILE = "report.md"
VERDICT_FILE = "verdict.json"
LATENCY_PLOT = "latency_vs_throughput.png"
COST_PLOT = "cost_per_accepted_response.png"
DISAGGREGATED = "disaggregated"
COLOCATED = "colocated"
TRIAL, WAIT, REJECT = "trial", "wait", "reject"
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")
"""One colour per run, cycling past eight (matplotlib's tab10 without its olive and cyan)."""


@dataclass(frozen=True)
class Run:
    label: str
    path: Path
    info: dict[str, Any]
    entries: list[dict[str, Any]]
    completions: dict[str, Any] | None

    @property
    def settings(self) -> dict[str, Any]:
        return self.info.get("settings") or {}

    @property
    def deployment(self) -> dict[str, Any]:
        return self.settings.get("deployment") or {}

    @property
    def topology(self) -> str | None:
        return self.deployment.get("topology")

    @property
    def price_basis(self) -> str | None:
        """``hourly``, ``per-token`` or ``None`` (unpriced). A run written before per-token prices
        existed has no ``price_basis``: it is hourly when it carries an hourly price."""
        bases = {e.get("price_basis") for e in self.entries} - {None}
        if PER_TOKEN in bases:
            return PER_TOKEN
        if HOURLY in bases or self.hourly_cost_usd is not None:
            return HOURLY
        if self.settings.get("price_per_million_input_tokens_usd") is not None:
            return PER_TOKEN
        return None

    @property
    def kind(self) -> str:
        """``deployment`` or ``managed-endpoint`` (``settings.deployment.kind``; older runs have
        no kind and were all deployments)."""
        return self.deployment.get("kind") or (MANAGED_ENDPOINT if self.price_basis == PER_TOKEN and not self.topology
                                               else DEPLOYMENT)

    @property
    def hourly_cost_usd(self) -> float | None:
        return next((e["hourly_cost_usd"] for e in self.entries if e.get("hourly_cost_usd") is not None),
                    self.settings.get("hourly_cost_usd"))

    @property
    def model(self) -> dict[str, Any] | None:
        """``run.json``'s ``model`` block (source, revision, image digest, licence), if recorded."""
        return self.info.get("model")

    @property
    def license(self) -> dict[str, Any] | None:
        return (self.model or {}).get("license")

    def meeting(self, min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> list[dict[str, Any]]:
        """The levels where at least ``min_attainment`` of the requests were accepted."""
        return [e for e in self.entries if attainment(e) >= min_attainment]

    def best(self, min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> dict[str, Any] | None:
        """Among the levels meeting ``min_attainment``, the one with the most accepted responses
        per dollar (the lowest cost per accepted response)."""
        eligible = [e for e in self.meeting(min_attainment) if e.get("cost_per_accepted_response_usd") is not None]
        return min(eligible, key=lambda e: e["cost_per_accepted_response_usd"]) if eligible else None

    def max_rate(self, min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> dict[str, Any] | None:
        """The level meeting ``min_attainment`` with the most accepted responses per second: the
        highest rate this run is measured to sustain."""
        levels = [e for e in self.meeting(min_attainment) if e.get("accepted_responses_per_s")]
        return max(levels, key=lambda e: e["accepted_responses_per_s"]) if levels else None


def attainment(entry: dict[str, Any]) -> float:
    """The share of a level's measured requests that were accepted."""
    sent = entry["requests_ok"] + entry["requests_failed"]
    return entry["accepted_responses"] / sent if sent else 0.0


def load(path: Path, label: str | None = None) -> Run:
    """A run directory, labelled ``label``, else by its topology, else ``managed-endpoint`` for a
    managed endpoint, else by the directory's name."""
    info, entries, completions = load_run(path)
    run = Run(path.name, path, info, entries, completions)
    return replace(run, label=label or run.topology or (MANAGED_ENDPOINT if run.kind == MANAGED_ENDPOINT else None)
                   or path.name)


def load_all(paths: Sequence[Path], labels: Sequence[str | None] | None = None) -> list[Run]:
    """The runs, each labelled by its topology (or ``managed-endpoint``, or its directory); labels
    that repeat get the run's letter, ``colocated (A)``, ``colocated (B)``."""
    labels = list(labels or []) + [None] * (len(paths) - len(labels or []))
    runs = [load(Path(path), label) for path, label in zip(paths, labels)]
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.label] = counts.get(run.label, 0) + 1
    letters = string.ascii_uppercase
    return [replace(run, label=f"{run.label} ({letters[i % 26]}{i // 26 or ''})") if counts[run.label] > 1 else run
            for i, run in enumerate(runs)]


def responses_per_dollar(entry: dict[str, Any]) -> float:
    return 1 / entry["cost_per_accepted_response_usd"]


def _workload(run: Run) -> dict[str, Any]:
    """What must be equal for two runs to measure the same work."""
    s = run.settings
    lengths = not (s.get("trace") or s.get("mix"))  # a trace or a mix sets each request's lengths
    return {"isl": s.get("isl") if lengths else None, "osl": s.get("osl") if lengths else None, "mix": s.get("mix"),
            "trace": Path(s["trace"]).name if s.get("trace") else None,
            "replay_timestamps": bool(s.get("replay_timestamps")), "ignore_eos": s.get("ignore_eos"),
            "tokenizer": s.get("tokenizer"), "tokenizer_revision": s.get("tokenizer_revision")}


def _workload_differs(first: Run, run: Run) -> list[str]:
    """The workload keys two runs disagree on. A tokenizer revision counts only when both runs
    record one: a managed endpoint's run names its tokenizer by id alone (``--tokenizer``), and a
    pinned deployment must still be comparable with it."""
    a, b = _workload(first), _workload(run)
    return sorted(k for k in a if a[k] != b[k]
                  and not (k == "tokenizer_revision" and (a[k] is None or b[k] is None)))


def _slos(run: Run) -> tuple[Any, Any]:
    return run.settings.get("slo_ttft_ms"), run.settings.get("slo_e2e_ms")


def _goal(goal: float) -> str:
    return f"{goal * 100:g}%"


def _reason(rule: str, text: str, **figures: Any) -> dict[str, Any]:
    return {"rule": rule, "text": text, "figures": figures}


def _level(entry: dict[str, Any]) -> str:
    return "the trace replay" if entry["concurrency"] is None else f"concurrency {entry['concurrency']}"


# --- the figures the decision reads ---------------------------------------------------------------

def ranking(runs: Sequence[Run], min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> list[dict[str, Any]]:
    """Every run, most accepted responses per dollar first (at its best level); runs without a
    priced level meeting the goal last, in the order given."""
    rows = []
    for run in runs:
        best = run.best(min_attainment)
        rows.append({"run": run.label, "kind": run.kind, "topology": run.topology, "price_basis": run.price_basis,
                     "best_concurrency": best["concurrency"] if best else None,
                     "responses_per_dollar": responses_per_dollar(best) if best else None,
                     "cost_per_accepted_response_usd": best["cost_per_accepted_response_usd"] if best else None,
                     "attainment": attainment(best) if best else None,
                     "accepted_responses_per_s": best.get("accepted_responses_per_s") if best else None})
    return sorted(rows, key=lambda row: -(row["responses_per_dollar"] or 0))


def break_even(runs: Sequence[Run], min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> list[dict[str, Any]]:
    """For every (hourly run, per-token run) pair, the request rate at which their costs meet.

    The per-token run pays ``c`` per accepted response (at its best level), whatever the rate; the
    hourly run pays ``hourly / (3600 λ)`` per accepted response at ``λ`` accepted responses per
    second. They are equal at ``λ* = hourly / (3600 c)``. Below ``λ*`` the per-token run is cheaper,
    above it the hourly one, up to ``λmax``, the highest accepted-response rate the hourly run
    sustained at a level meeting the goal; ``λ* / λmax`` is the utilization the deployment must
    reach to pay off. Two hourly runs need no break-even: their ranking holds at every rate.
    """
    pairs = []
    for hourly in (r for r in runs if r.price_basis == HOURLY):
        for per_token in (r for r in runs if r.price_basis == PER_TOKEN):
            best, top = per_token.best(min_attainment), hourly.max_rate(min_attainment)
            price = hourly.hourly_cost_usd
            pair: dict[str, Any] = {
                "hourly_run": hourly.label, "per_token_run": per_token.label, "hourly_cost_usd": price,
                "per_token_best_concurrency": best["concurrency"] if best else None,
                "per_token_cost_per_accepted_response_usd": best["cost_per_accepted_response_usd"] if best else None,
                "max_concurrency": top["concurrency"] if top else None,
                "max_responses_per_s": top["accepted_responses_per_s"] if top else None,
                "break_even_responses_per_s": None, "break_even_utilization": None, "winner_below": per_token.label,
                "winner_above": None}
            if best is None or price is None:
                pair["text"] = (f"No break-even: {per_token.label} has no priced level meeting the "
                                f"{_goal(min_attainment)} goal." if best is None else
                                f"No break-even: {hourly.label} has no hourly price.")
                pairs.append(pair)
                continue
            rate = price / (SECONDS_PER_HOUR * best["cost_per_accepted_response_usd"])
            pair["break_even_responses_per_s"] = rate
            head = (f"{hourly.label} (${price:,.4f} an hour) costs what {per_token.label} charges "
                    f"({_usd(best['cost_per_accepted_response_usd'])} per accepted response at its best level) at "
                    f"{rate:,.2f} accepted responses/s ({rate * SECONDS_PER_HOUR:,.0f} an hour)")
            if top is None:
                pair["text"] = (f"{head}; {hourly.label} has no level meeting the {_goal(min_attainment)} goal, so "
                                "its sustainable rate is unknown.")
            else:
                share = rate / top["accepted_responses_per_s"]
                pair["break_even_utilization"] = share
                ceiling = (f"{top['accepted_responses_per_s']:,.2f}/s, its highest rate meeting the goal "
                           f"({_level(top)})")
                if rate <= top["accepted_responses_per_s"]:
                    pair["winner_above"] = hourly.label
                    pair["text"] = (f"{head}. Below that rate {per_token.label} is cheaper; from it up to {ceiling}, "
                                    f"{hourly.label} is: it pays off above {share:.0%} utilization.")
                else:
                    pair["text"] = (f"{head}, above {ceiling}: {per_token.label} is cheaper at every rate "
                                    f"{hourly.label} sustains (break-even utilization {share:.0%}).")
            pairs.append(pair)
    return pairs


def agreements(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each run's greedy answers against the first run's (the first against itself is not listed)."""
    first = runs[0]
    result = []
    for run in runs[1:]:
        measured = bool(first.completions and run.completions)
        row: dict[str, Any] = {"run": run.label, "against": first.label, "measured": measured}
        if measured:
            row.update(agreement_module.agreement(first.completions, run.completions))
        result.append(row)
    return result


def transfer(entry: dict[str, Any]) -> dict[str, Any]:
    """What a level's records say about the KV transfer and the fabric: the transfers vLLM counted
    (``kv_transfer_ms.count``), their mean and its share of the median TTFT, and the bytes the EFA
    counters moved over the level on all nodes (``utilization.efa_bytes_per_node``)."""
    kv = entry.get("kv_transfer_ms") or {}
    ttft = (entry.get("ttft_ms") or {}).get("p50")
    mean = kv.get("mean")
    per_node = (entry.get("utilization") or {}).get("efa_bytes_per_node")
    return {"kv_transfer_count": kv.get("count"), "kv_transfer_mean_ms": mean, "ttft_p50_ms": ttft,
            "kv_share_of_ttft": mean / ttft if mean is not None and ttft else None,
            "efa_source": (entry.get("utilization") or {}).get("efa_source"),
            "efa_bytes": None if per_node is None else sum(n["sent"] + n["received"] for n in per_node.values())}


PATHS = ("local", "remote")
"""The prefill paths of ``by_prefill_path`` (``runner.by_prefill_path``; ``base/wire.py`` PD_LOCAL, PD_REMOTE)."""


def prefill_paths(runs: Sequence[Run], min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> list[dict[str, Any]]:
    """Each run's requests by prefill path: the classes at its best level (the level the decision
    reads), and the mix over every level (what share of the workload took each path). A run without
    classes says why: a colocated deployment prefills every request where it decodes it (all local
    by definition), a run without a threshold sent every request through the prefill leg, a managed
    endpoint's path is not known."""
    rows = []
    for run in runs:
        split = [e for e in run.entries if e.get("by_prefill_path")]
        row: dict[str, Any] = {"run": run.label, "topology": run.topology, "min_prompt_tokens": None,
                               "concurrency": None, "classes": None, "pd_requests": None, "mix": None, "note": None}
        if not split:
            row["note"] = (
                "no classes: a colocated deployment prefills every request where it decodes it (all local by "
                "definition)" if run.topology == COLOCATED else
                "no classes: no prefill threshold (disaggregation.min_prompt_tokens 0, no --min-prompt-tokens): "
                "every request took the prefill leg" if run.topology == DISAGGREGATED else
                "no classes: the bench had no prefill threshold for this run")
            rows.append(row)
            continue
        counts = {path: sum(e["by_prefill_path"][path]["requests"] for e in split) for path in PATHS}
        total = sum(counts.values())
        row.update(min_prompt_tokens=split[0]["by_prefill_path"]["min_prompt_tokens"],
                   mix={**counts, **{f"{path}_share": counts[path] / total if total else None for path in PATHS}})
        best = run.best(min_attainment)
        if best is not None and best.get("by_prefill_path"):
            row.update(concurrency=best["concurrency"], pd_requests=best.get("pd_requests"),
                       classes={path: best["by_prefill_path"][path] for path in PATHS})
        rows.append(row)
    return rows


def mix_statement(rows: list[dict[str, Any]], candidate: str | None) -> dict[str, Any] | None:
    """What the decision is on when a run has classes: its whole workload, the mix of both paths
    (the candidate's, else the first run with classes); None when no run has classes."""
    with_mix = [r for r in rows if r["mix"]]
    if not with_mix:
        return None
    row = next((r for r in with_mix if r["run"] == candidate), with_mix[0])
    local, remote = row["mix"]["local_share"], row["mix"]["remote_share"]
    text = (f"The decision is on the mix of {_pct(local)} local / {_pct(remote)} remote ({row['run']}: "
            f"{row['mix']['local']} requests under {row['min_prompt_tokens']} prompt tokens, {row['mix']['remote']} "
            "at or above, over every level), the whole workload as without classes; the per-class figures are "
            "stated, not decided on.")
    return {"run": row["run"], "local_share": local, "remote_share": remote, "text": text}


def _pct(share: float | None) -> str:
    return "n/a" if share is None else f"{share * 100:.0f} %"


def class_line(row: dict[str, Any]) -> str:
    """One run's classes in a line: ``disaggregated c4: local 24 (60 %) TTFT p50/p90/p99 ... ms, ...``."""
    if row["note"]:
        return f"{row['run']}: {row['note']}"
    if row["classes"] is None:
        return (f"{row['run']}: no level meeting the goal; over every level {row['mix']['local']} local, "
                f"{row['mix']['remote']} remote (threshold {row['min_prompt_tokens']} prompt tokens)")
    parts = []
    for path in PATHS:
        c = row["classes"][path]
        parts.append(f"{path} {c['requests']} ({_pct(c['share'])}) TTFT p50/p90/p99 "
                     f"{'/'.join(_num(c['ttft_ms'][p], 1) for p in ('p50', 'p90', 'p99'))} ms, ITL p50 "
                     f"{_num(c['itl_ms']['p50'], 2)} ms")
    counted = row["pd_requests"]
    server = "" if counted is None else f"; the decode replica counted local {counted['local']}, remote {counted['remote']}"
    level = "the trace replay" if row["concurrency"] is None else f"concurrency {row['concurrency']}"
    return (f"{row['run']} at {level} (threshold {row['min_prompt_tokens']} prompt tokens): " + "; ".join(parts) + server)


# --- the decision ---------------------------------------------------------------------------------

def _comparability(runs: Sequence[Run], min_attainment: float) -> list[dict[str, Any]]:
    """What must hold before any run can be ranked against another (each failure is a ``wait``)."""
    first, waits = runs[0], []
    if not any(r.topology == DISAGGREGATED for r in runs):
        waits.append(_reason("no-disaggregated-run", "No run is of the disaggregated topology (run.json "
                             "settings.deployment.topology): there is nothing to decide about.",
                             topologies={r.label: r.topology for r in runs}))
    if not any(r.topology == COLOCATED for r in runs):
        waits.append(_reason("no-colocated-baseline", "No run is of the colocated topology: without the baseline on "
                             "the same nodes, a gain cannot be told from the hardware.",
                             topologies={r.label: r.topology for r in runs}))
    for run in runs[1:]:
        if _slos(run) != _slos(first):
            waits.append(_reason("slos-differ", f"The SLOs differ (TTFT/e2e ms: {first.label} {_slos(first)}, "
                                 f"{run.label} {_slos(run)}).", **{first.label: list(_slos(first)),
                                                                   run.label: list(_slos(run))}))
        differ = _workload_differs(first, run)
        if differ:
            waits.append(_reason("workloads-differ", f"The workloads differ in {', '.join(differ)} ({first.label} "
                                 f"{ {k: _workload(first)[k] for k in differ} }, {run.label} "
                                 f"{ {k: _workload(run)[k] for k in differ} }).",
                                 **{k: {first.label: _workload(first)[k], run.label: _workload(run)[k]} for k in differ}))
    for run in runs:
        if run.best(min_attainment) is None:
            waits.append(_reason("no-priced-level", f"{run.label} has no priced level where at least "
                                 f"{_goal(min_attainment)} of the requests were accepted (no price recorded, or the "
                                 "SLOs were missed at every level).", run=run.label, price_basis=run.price_basis,
                                 min_attainment=min_attainment,
                                 attainment={str(e["concurrency"]): attainment(e) for e in run.entries}))
    return waits


def _unresolved(runs: Sequence[Run], candidate: Run, best: dict[str, Any],
                rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a measured gain still waits for: quality, transport, licence and revision."""
    waits = []
    for row in rows:
        if not row["measured"] or row["compared"] == 0:
            waits.append(_reason("agreement-not-measured", f"Output agreement of {row['run']} with {row['against']} "
                                 "was not measured (" + ("a run has no agreement.json: bench ran with "
                                                         "--agreement-prompts 0" if not row["measured"] else
                                                         "the runs share no agreement prompt") + ").",
                                 run=row["run"], against=row["against"], compared=row.get("compared")))
        elif row["identical"] < row["compared"]:
            waits.append(_reason("quality-differs", f"{row['run']}'s greedy answers agree with {row['against']}'s on "
                                 f"{row['identical']} of {row['compared']} prompts ({len(row['divergences'])} "
                                 f"diverge, {len(row['errors'])} failed on a side): the runs are not at the same "
                                 "quality until the divergences are explained.", run=row["run"],
                                 against=row["against"], identical=row["identical"], compared=row["compared"],
                                 divergences=len(row["divergences"]), errors=len(row["errors"])))
    moved = transfer(best)
    missing = [what for what, ok in (("no KV transfer counted in kv_transfer_ms", bool(moved["kv_transfer_count"])),
                                     ("no EFA bytes in utilization", bool(moved["efa_bytes"])),
                                     # A veth's or NIC's bytes moved, but not over EFA: a TCP fallback looks the same.
                                     (f"the bytes counted are not an EFA port's (efa_source {moved['efa_source']})",
                                      not moved["efa_bytes"] or moved["efa_source"] == EFA_COUNTERS_SOURCE)) if not ok]
    if missing:
        waits.append(_reason("transport-unverified", f"{candidate.label}'s transport is unverified at its best level "
                             f"({_level(best)}): {' and '.join(missing)}. A disaggregated run must show its KV cache "
                             "moving, over the fabric.", run=candidate.label, concurrency=best["concurrency"],
                             kv_transfer_count=moved["kv_transfer_count"], efa_bytes=moved["efa_bytes"],
                             efa_source=moved["efa_source"]))
    unrecorded = [r for r in runs if not (r.license or {}).get("licence")]
    if unrecorded:
        why = "; ".join(f"{r.label}: " + ("run.json has no model block, written before the licence was recorded"
                                          if r.model is None else "model.license is null, the model is not in the "
                                          "table and bench had no --license") for r in unrecorded)
        waits.append(_reason("license-not-recorded", f"No licence on record ({why}).",
                             runs=[r.label for r in unrecorded]))
    licences = {r.label: r.license["licence"] for r in runs if (r.license or {}).get("licence")}
    if len(set(licences.values())) > 1:
        waits.append(_reason("license-differs", "The runs record different licences: "
                             + ", ".join(f"{k} {v}" for k, v in licences.items()) + ".", licences=licences))
    revisions = {r.label: (r.model or {}).get("revision") for r in runs if (r.model or {}).get("revision")}
    if len(set(revisions.values())) > 1:
        waits.append(_reason("model-revision-differs", "The runs served different model revisions: "
                             + ", ".join(f"{k} {v}" for k, v in revisions.items()) + ".", revisions=revisions))
    return waits


def _caveats(runs: Sequence[Run], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the report states beside the decision without changing it."""
    first, caveats = runs[0], []
    if _slos(first) == (None, None):
        caveats.append(_reason("no-slo", "No SLO was set, so every completed response counts as accepted; rerun with "
                               "--slo-ttft-ms and --slo-e2e-ms."))
    seen: dict[str, str] = {}
    for run in runs:
        if run.topology and run.topology in seen and run.path.resolve() != Path(seen[run.topology]).resolve():
            caveats.append(_reason("same-topology", f"{seen[run.topology]} and {run.path} both say topology "
                                   f"{run.topology}: was each benchmarked with its own --config?",
                                   topology=run.topology))
        seen.setdefault(run.topology or "", str(run.path))
    deployments = [r for r in runs if r.kind == DEPLOYMENT]
    for key in ("model", "requests"):
        group = runs if key == "requests" else deployments  # a managed endpoint serves under its own name
        values = {r.label: r.settings.get(key) for r in group}
        if len(set(map(json.dumps, values.values()))) > 1:
            caveats.append(_reason(f"{key}-differs", f"{key} differs: "
                                   + ", ".join(f"{k} {v}" for k, v in values.items()) + ".", **{key: values}))
    incomplete = [f"{r.label} c{e['concurrency']}" for r in runs for e in r.entries if e.get("aiperf_exit_code")]
    if incomplete:
        caveats.append(_reason("aiperf-failed", f"AIPerf reported failure at {', '.join(incomplete)} (every request "
                               "failed there).", levels=incomplete))
    for row in rows:
        if row["measured"] and not row["same_max_tokens"]:
            caveats.append(_reason("agreement-max-tokens-differ", f"{row['run']} and {row['against']} recorded their "
                                   "agreement answers with different max_tokens.", run=row["run"]))
    for run in runs:
        callout = (run.license or {}).get("callout")
        if callout:
            caveats.append(_reason("license-terms", f"{run.label}: {callout}", run=run.label,
                                   licence=run.license.get("licence"), gated=run.license.get("gated"),
                                   commercial_use=run.license.get("commercial_use")))
        if run.kind == DEPLOYMENT and run.model is not None and not run.model.get("image_digest"):
            caveats.append(_reason("image-digest-not-recorded", f"{run.label} records no image digest: the image it "
                                   "served cannot be named exactly.", run=run.label, image=run.model.get("image")))
    return caveats


def _reject_reasons(candidate: Run, best: dict[str, Any], rival: Run, rival_best: dict[str, Any],
                    baseline: tuple[Run, dict[str, Any]] | None, gain: float, min_gain: float) -> list[dict[str, Any]]:
    """Why disaggregation does not pay: cost always; transfer overhead and idle duplication when
    their figures were measured and point that way (against the colocated baseline's best level)."""
    ours, theirs = responses_per_dollar(best), responses_per_dollar(rival_best)
    figures = {"run": candidate.label, "responses_per_dollar": ours, "concurrency": best["concurrency"],
               "rival": rival.label, "rival_responses_per_dollar": theirs, "rival_concurrency": rival_best["concurrency"],
               "gain": gain, "min_gain": min_gain}
    if gain <= 0:
        text = (f"{rival.label} serves {theirs:,.0f} accepted responses per dollar at its best level ({_level(rival_best)}), "
                f"{candidate.label} {ours:,.0f} ({_level(best)}): {theirs / ours - 1:.0%} more for {rival.label}.")
    else:
        text = (f"{candidate.label} serves {ours:,.0f} accepted responses per dollar ({_level(best)}), {rival.label} "
                f"{theirs:,.0f} ({_level(rival_best)}): a gain of {gain:.1%}, within --min-gain {min_gain:.0%}, so the "
                "duplicated pool and the KV transfer do not pay.")
    reasons = [_reason("cost", text, **figures)]
    if baseline is None:
        return reasons
    base, base_best = baseline
    moved, theirs_ttft = transfer(best), (base_best.get("ttft_ms") or {}).get("p50")
    if moved["kv_share_of_ttft"] is not None and theirs_ttft is not None and moved["ttft_p50_ms"] > theirs_ttft:
        reasons.append(_reason(
            "transfer-overhead", f"At its best level {candidate.label}'s median TTFT is {moved['ttft_p50_ms']:,.1f} ms, "
            f"{base.label}'s {theirs_ttft:,.1f} ms: the first token comes later without prefill interference, and the KV "
            f"transfer (mean {moved['kv_transfer_mean_ms']:,.2f} ms) is {moved['kv_share_of_ttft']:.1%} of it.",
            run=candidate.label, ttft_p50_ms=moved["ttft_p50_ms"], baseline=base.label, baseline_ttft_p50_ms=theirs_ttft,
            kv_transfer_mean_ms=moved["kv_transfer_mean_ms"], kv_share_of_ttft=moved["kv_share_of_ttft"]))
    ours_gpu = (best.get("utilization") or {}).get("gpu_utilization_pct")
    theirs_gpu = (base_best.get("utilization") or {}).get("gpu_utilization_pct")
    if ours_gpu is not None and theirs_gpu is not None and ours_gpu < theirs_gpu:
        reasons.append(_reason(
            "idle-duplication", f"At its best level {candidate.label}'s GPUs were {ours_gpu:.1f} % utilized on average, "
            f"{base.label}'s {theirs_gpu:.1f} %: the two pools hold GPUs idle that one pool keeps busy.",
            run=candidate.label, gpu_utilization_pct=ours_gpu, baseline=base.label,
            baseline_gpu_utilization_pct=theirs_gpu))
    return reasons


def decide(runs: Sequence[Run], min_gain: float = DEFAULT_MIN_GAIN,
           min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> dict[str, Any]:
    """The decision at one attainment goal, with its reasons and the figures they come from."""
    rows = agreements(runs)
    ranked = ranking(runs, min_attainment)
    result: dict[str, Any] = {
        "runs": [{"run": r.label, "path": str(r.path), "kind": r.kind, "topology": r.topology,
                  "price_basis": r.price_basis} for r in runs],
        "min_gain": min_gain, "min_attainment": min_attainment, "ranking": ranked,
        "best": {r.label: (r.best(min_attainment) or {}).get("concurrency") for r in runs},
        "break_even": break_even(runs, min_attainment), "agreement": rows, "candidate": None, "rival": None,
        "gain": None, "caveats": _caveats(runs, rows)}
    waits = _comparability(runs, min_attainment)
    if waits:
        return _decided(result, WAIT, waits)
    disaggregated = [r for r in runs if r.topology == DISAGGREGATED]
    candidate = max(disaggregated, key=lambda r: responses_per_dollar(r.best(min_attainment)))
    best = candidate.best(min_attainment)
    others = [r for r in runs if r is not candidate]
    rival = max(others, key=lambda r: responses_per_dollar(r.best(min_attainment)))
    rival_best = rival.best(min_attainment)
    gain = responses_per_dollar(best) / responses_per_dollar(rival_best) - 1
    result.update(candidate=candidate.label, rival=rival.label, gain=gain)
    if gain <= min_gain:
        colocated = [r for r in runs if r.topology == COLOCATED]
        base = max(colocated, key=lambda r: responses_per_dollar(r.best(min_attainment)))
        reasons = _reject_reasons(candidate, best, rival, rival_best, (base, base.best(min_attainment)), gain, min_gain)
        # A measured loss needs nothing resolved; what is unresolved is still said.
        result["caveats"] += _unresolved(runs, candidate, best, rows)
        return _decided(result, REJECT, reasons)
    waits = _unresolved(runs, candidate, best, rows)
    gain_reason = _reason(
        "gain", f"{candidate.label} serves {responses_per_dollar(best):,.0f} accepted responses per dollar at its best "
        f"level ({_level(best)}, {attainment(best):.0%} accepted), {gain:.0%} more than the next, {rival.label} "
        f"({responses_per_dollar(rival_best):,.0f} at {_level(rival_best)}), beyond --min-gain {min_gain:.0%}, at the "
        "same SLOs and workload.", run=candidate.label, responses_per_dollar=responses_per_dollar(best),
        concurrency=best["concurrency"], rival=rival.label, rival_responses_per_dollar=responses_per_dollar(rival_best),
        rival_concurrency=rival_best["concurrency"], gain=gain, min_gain=min_gain)
    if waits:
        result["caveats"].insert(0, gain_reason)  # the measured gain the conditions hold back
        return _decided(result, WAIT, waits)
    moved = transfer(best)
    return _decided(result, TRIAL, [
        gain_reason,
        _reason("quality", f"Every run's greedy answers agree with {runs[0].label}'s: "
                + ", ".join(f"{row['run']} {row['identical']} of {row['compared']}" for row in rows) + ".",
                **{row["run"]: {"identical": row["identical"], "compared": row["compared"]} for row in rows}),
        _reason("transport-verified", f"{candidate.label} moved its KV cache at its best level: "
                f"{moved['kv_transfer_count']} transfers counted, {moved['efa_bytes']:,} bytes on the fabric "
                f"({moved['efa_source']}).", run=candidate.label, concurrency=best["concurrency"],
                kv_transfer_count=moved["kv_transfer_count"], efa_bytes=moved["efa_bytes"],
                efa_source=moved["efa_source"]),
        _reason("license", f"One licence on record for every run: {runs[0].license['licence']}.",
                licence=runs[0].license["licence"])])


def _decided(result: dict[str, Any], decision: str, reasons: list[dict[str, Any]]) -> dict[str, Any]:
    return {**result, "decision": decision, "reasons": reasons,
            "reason": " ".join(reason["text"] for reason in reasons)}


def verdict(runs: Sequence[Run], min_gain: float = DEFAULT_MIN_GAIN,
            min_attainment: float = DEFAULT_MIN_ATTAINMENT,
            goals: tuple[float, ...] = SENSITIVITY_GOALS) -> dict[str, Any]:
    """:func:`decide` at ``min_attainment``, with ``sensitivity``: the decision at each of ``goals``
    and at ``min_attainment``, each from :func:`decide` on the same records."""
    decision = decide(runs, min_gain, min_attainment)
    sensitivity = []
    for goal in sorted({*goals, min_attainment}):
        at_goal = decision if goal == min_attainment else decide(runs, min_gain, goal)
        sensitivity.append({
            "min_attainment": goal, "used": goal == min_attainment, "decision": at_goal["decision"],
            "rules": [reason["rule"] for reason in at_goal["reasons"]], "candidate": at_goal["candidate"],
            "rival": at_goal["rival"], "gain": at_goal["gain"], "best": at_goal["best"],
            "ranking": [row["run"] for row in at_goal["ranking"]],
            "without_level": [run.label for run in runs if run.best(goal) is None]})
    paths = prefill_paths(runs, min_attainment)
    return {**decision, "sensitivity": sensitivity, "prefill_paths": paths,
            "mix": mix_statement(paths, decision["candidate"])}


def sensitivity_line(decision: dict[str, Any]) -> str:
    """``Decision at --min-attainment 80%: ...; 90% (used): ...`` from :func:`verdict`'s data."""
    parts = []
    for entry in decision["sensitivity"]:
        rules = list(dict.fromkeys(entry["rules"]))  # a rule that holds for several runs is named once
        if entry["gain"] is not None:
            detail = f"{entry['candidate']} {entry['gain']:+.0%} vs {entry['rival']}"
            if entry["decision"] == WAIT:
                detail += "; " + ", ".join(rules)
        else:
            detail = ", ".join(rules)
            if entry["without_level"]:
                detail = detail.replace("no-priced-level", "no priced level of " + " or ".join(entry["without_level"]))
        parts.append(f"{_goal(entry['min_attainment'])}{' (used)' if entry['used'] else ''}: "
                     f"{entry['decision']} ({detail})")
    return "Decision at --min-attainment " + "; ".join(parts) + "."


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


def _absent(value: Any, text: str) -> str:
    """A figure the records hold as null is absent, never 0."""
    return "absent" if value is None else text


def _price(run: Run) -> str:
    s, d = run.settings, run.deployment
    if run.price_basis == PER_TOKEN:
        return (f"per token: ${_num(s.get('price_per_million_input_tokens_usd'), 2)} per million input tokens, "
                f"${_num(s.get('price_per_million_output_tokens_usd'), 2)} per million output tokens")
    if run.price_basis == HOURLY:
        return (f"hourly {_usd(run.hourly_cost_usd)} ({d.get('hourly_cost_source') or 'given'}"
                + (f", prices of {d['price_table_as_of']})" if d.get("price_table_as_of") else ")"))
    return "not priced"


def _model_rows(runs: Sequence[Run]) -> list[str]:
    lines = ["| run | model source | revision | served as | licence | gated | commercial use | licence source "
             "| image | image digest |", "|---|---|---|---|---|---|---|---|---|---|"]
    callouts = []
    for run in runs:
        model = run.model
        if model is None:
            lines.append(f"| {run.label} | " + " | ".join(["not recorded (run.json has no `model`: written before "
                                                          "the licence was recorded)"] + [""] * 8) + " |")
            continue
        licence = model.get("license")
        cells = [model.get("source") or "not given", model.get("revision") or "not pinned", model.get("served_name")]
        if licence is None:
            cells += ["**not on record**", "", "", ""]
        else:
            cells += [licence.get("licence"), "yes" if licence.get("gated") else "no", licence.get("commercial_use"),
                      licence.get("source")]
            if licence.get("callout"):
                callouts.append(f"- **{run.label}**: {licence['callout']}")
        cells += [model.get("image") or "not recorded", f"`{model['image_digest']}`" if model.get("image_digest")
                  else "not recorded"]
        lines.append(f"| {run.label} | " + " | ".join(str(c) for c in cells) + " |")
    return lines + ([""] + callouts if callouts else [])


def _efa(utilization: dict[str, Any]) -> str:
    per_node = utilization.get("efa_bytes_per_node")
    if per_node is None:
        return "absent"
    gbps = utilization.get("efa_gbps_per_node") or {}
    line = utilization.get("efa_line_rate_gbps_per_node") or {}
    parts = []
    for node, moved in per_node.items():
        rate, ceiling = gbps.get(node), line.get(node)
        share = (f"{rate / ceiling:.2%} of {ceiling:g} Gb/s" if rate is not None and ceiling
                 else "line rate unknown")
        parts.append(f"{node}: {moved['sent']:,} B sent, {moved['received']:,} B received, "
                     + ("rate absent" if rate is None else f"{rate:.3f} Gb/s, {share}"))
    return "; ".join(parts) or "no node"


def _utilization_rows(runs: Sequence[Run]) -> list[str]:
    lines = ["| level | run | GPU utilization % | GPU memory used | KV transfer share of TTFT p50 | EFA per node "
             "(over the level) | max share of line rate |", "|---:|---|---:|---:|---:|---|---:|"]
    for run in runs:
        for e in run.entries:
            level = e["concurrency"] if e["concurrency"] is not None else "trace"
            share = transfer(e)["kv_share_of_ttft"]
            kv = "n/a" if share is None else f"{share:.1%}"
            u = e.get("utilization")
            if u is None:
                lines.append(f"| {level} | {run.label} | not recorded | not recorded | {kv} | not recorded | "
                             "not recorded |")
                continue
            gpu = u.get("gpu_utilization_pct")
            mib, fraction = u.get("gpu_memory_used_mib"), u.get("gpu_memory_used_fraction")
            memory = _absent(mib, f"{mib:,.0f} MiB" + (f" ({fraction:.0%})" if fraction is not None else "")
                             if mib is not None else "")
            top = u.get("efa_line_rate_share_max")
            lines.append(f"| {level} | {run.label} | {_absent(gpu, f'{gpu:.1f}' if gpu is not None else '')} "
                         f"| {memory} | {kv} | {_efa(u)} | {_absent(top, f'{top:.2%}' if top is not None else '')} |")
    return lines


def _prefill_path_lines(decision: dict[str, Any]) -> list[str]:
    """The report's section on prefill paths, when a run has classes (``bench`` with a threshold)."""
    if not decision.get("mix"):
        return []
    lines = ["## By prefill path", "", "Each request is classed by the server's prompt count: local below the "
             "deployment's threshold (prefilled on the decode replica), remote at or above it (the prefill leg). "
             "Figures at each run's best level.", ""]
    lines += [f"- {class_line(row)}" for row in decision["prefill_paths"]]
    return lines + ["", f"**{decision['mix']['text']}**", ""]


def _reason_lines(reasons: list[dict[str, Any]]) -> list[str]:
    return [f"- **{r['rule']}**: {r['text']}" + (f" Figures: `{json.dumps(r['figures'], sort_keys=True)}`"
                                                 if r["figures"] else "") for r in reasons]


def markdown(runs: Sequence[Run], decision: dict[str, Any]) -> str:
    first = runs[0]
    s = first.settings
    slo = f"TTFT ≤ {_num(s.get('slo_ttft_ms'), 0)} ms, end-to-end ≤ {_num(s.get('slo_e2e_ms'), 0)} ms"
    if s.get("trace"):
        work = f"trace `{Path(s['trace']).name}`" + (" at its timestamps" if s.get("replay_timestamps")
                                                      else f", {s.get('requests')} requests per level")
    else:
        work = f"{s.get('isl')} input / {s.get('osl')} output tokens (mean), {s.get('requests')} requests per level"
    lines = [f"# {' vs '.join(r.label for r in runs)}", "",
             f"Workload (of {first.label}): {work}; SLOs: {slo}; a level counts when at least "
             f"{_goal(decision['min_attainment'])} of its requests are accepted; load generator AIPerf "
             f"{first.info.get('aiperf_version', '?')}.", ""]
    for run in runs:
        d = run.deployment
        facts = [f"`{run.path}`", run.kind, f"topology {d.get('topology') or 'not given'}", d.get("nodes"), _price(run)]
        lines.append(f"- **{run.label}**: " + "; ".join(f for f in facts if f))
    lines += ["", "## Ranking: accepted responses per dollar at each run's best level", "",
              "| rank | run | price | best level | accepted there | accepted responses / s | $ per accepted response "
              "| accepted responses per dollar | vs rank 1 |", "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    top = decision["ranking"][0]["responses_per_dollar"]
    for rank, row in enumerate(decision["ranking"], 1):
        if row["responses_per_dollar"] is None:
            lines.append(f"| – | {row['run']} | {row['price_basis'] or 'not priced'} | none meets the goal | | | | | |")
            continue
        level = row["best_concurrency"] if row["best_concurrency"] is not None else "trace"
        lines.append(f"| {rank} | {row['run']} | {row['price_basis']} | {level} | {row['attainment']:.0%} "
                     f"| {_num(row['accepted_responses_per_s'], 2)} | {_usd(row['cost_per_accepted_response_usd'])} "
                     f"| {row['responses_per_dollar']:,.0f} | {row['responses_per_dollar'] / top - 1:+.1%} |")
    lines += ["", f"**Sensitivity.** {sensitivity_line(decision)} Each is the same rule on the same levels; a level "
              "counts at a goal when that share of its requests was accepted.", "",
              "| --min-attainment | decision | gain of the disaggregated run | deciding rules | best level of each run |",
              "|---:|---|---|---|---|"]
    for entry in decision["sensitivity"]:
        gain = "n/a" if entry["gain"] is None else f"{entry['gain']:+.1%} vs {entry['rival']}"
        levels = ", ".join(f"{run} {'none' if level is None else level}" for run, level in entry["best"].items())
        lines.append(f"| {_goal(entry['min_attainment'])}{' (used)' if entry['used'] else ''} | {entry['decision']} "
                     f"| {gain} | {', '.join(dict.fromkeys(entry['rules']))} | {levels} |")
    lines += ["", "## Every level", "",
              "| concurrency | run | ok | failed | accepted | TTFT p50/p95/p99 ms | ITL p50 ms | e2e p50/p95/p99 ms "
              "| output tok/s | KV transfer p50/p95 ms | $ per 1M output tokens | $ per accepted response |",
              "|---:|---|---:|---:|---:|---|---:|---|---:|---|---:|---:|"]
    best = decision.get("best") or {}
    levels = sorted({e["concurrency"] for r in runs for e in r.entries}, key=lambda c: (c is None, c or 0))
    for level in levels:
        for run in runs:
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
    lines += ["", "## Break-even: an hourly deployment against a per-token endpoint", ""]
    if decision["break_even"]:
        lines += [f"- **{pair['hourly_run']} vs {pair['per_token_run']}**: {pair['text']}"
                  for pair in decision["break_even"]]
    else:
        lines.append("No pair of an hourly and a per-token run.")
    lines += ["", "Between two hourly runs there is no break-even: the cheaper per accepted response at its best "
              "level is cheaper at every rate both sustain (the ranking).", "",
              f"## Output agreement with {first.label} (greedy decoding, fixed prompts)", ""]
    for row in decision["agreement"]:
        if not row["measured"]:
            lines.append(f"- **{row['run']}**: not measured (a run has no agreement.json: bench ran with "
                         "--agreement-prompts 0).")
            continue
        rate = row["rate"]
        lines.append(f"- **{row['run']}**: {row['identical']} of {row['compared']} prompts identical "
                     f"({'n/a' if rate is None else f'{rate:.0%}'}), {len(row['divergences'])} diverging, "
                     f"{len(row['errors'])} failed on a side.")
        for d in row["divergences"]:
            lines.append(f"  - prompt `{d['prompt_sha256']}` diverges at character {d['first_difference_at_char']}: "
                         f"{json.dumps(d['a'])} vs {json.dumps(d['b'])}")
        for d in row["errors"]:
            lines.append(f"  - prompt `{d['prompt_sha256']}` failed: {row['against']}: {d['a'] or 'ok'}; "
                         f"{row['run']}: {d['b'] or 'ok'}")
    lines += ["", "## Model, licence and image", "", *_model_rows(runs), "",
              "## Utilization per level", "",
              "GPU figures are DCGM's over the level (absent where no DCGM source answered, as on the twin); EFA "
              "bytes are the counters' difference over the level (on the twin, the node veth's).", "",
              *_utilization_rows(runs), "",
              "## Plots", "", f"![TTFT and end-to-end latency against throughput]({LATENCY_PLOT})", "",
              f"![Cost per accepted response against concurrency]({COST_PLOT})", "",
              *_prefill_path_lines(decision),
              f"## Decision: {decision['decision']}", "", *_reason_lines(decision["reasons"])]
    if decision["caveats"]:
        lines += ["", "Also stated (not deciding):", "", *_reason_lines(decision["caveats"])]
    lines += ["", "How to read this report, and every rule of the decision: docs/benchmark.md.", ""]
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


def colors(runs: Sequence[Run]) -> dict[str, str]:
    """One colour per run, in the order given; :data:`PALETTE` cycles past eight runs."""
    return {run.label: PALETTE[i % len(PALETTE)] for i, run in enumerate(runs)}


def latency_figure(runs: Sequence[Run], min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> Any:
    """TTFT and end-to-end p50/p95/p99 against output tokens per second (see :func:`_load_segments`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    palette = colors(runs)
    styles = {"p50": "-", "p95": "--", "p99": ":"}
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    for axis, metric, title, slo_key in ((axes[0], "ttft_ms", "Time to first token", "slo_ttft_ms"),
                                         (axes[1], "e2e_ms", "End-to-end latency", "slo_e2e_ms")):
        drawn = below_goal = cut = False
        for run in runs:
            for p, style in styles.items():
                points = [(e["output_tokens_per_s"], e[metric][p], e) for e in _swept(run)
                          if e[metric].get(p) is not None]
                if not points:
                    continue
                segments = _load_segments(points)
                cut = cut or len(segments) > 1
                for index, segment in enumerate(segments):
                    axis.plot([x for x, _, _ in segment], [y for _, y, _ in segment], style, color=palette[run.label],
                              label=f"{run.label} {p}" if index == 0 else "_nolegend_", gid=f"{run.label} {p}")
                below_goal = _mark_levels(axis, points, palette[run.label], min_attainment) or below_goal
                drawn = True
            for e in _swept(run):
                if e[metric].get("p50") is not None:
                    axis.annotate(f"c{e['concurrency']}", (e["output_tokens_per_s"], e[metric]["p50"]),
                                  textcoords="offset points", xytext=(4, -10), fontsize=7, color=palette[run.label])
        slo = runs[0].settings.get(slo_key)
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


def cost_figure(runs: Sequence[Run], min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> Any:
    """Dollars per 1,000 accepted responses against concurrency (levels in load order, so x rises)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, ScalarFormatter

    palette = colors(runs)
    figure, axis = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    priced = {run.label: [e for e in _swept(run) if e.get("cost_per_accepted_response_usd") is not None]
              for run in runs}
    below_goal = False
    for run in runs:
        entries = priced[run.label]
        if not entries:
            continue
        points = [(e["concurrency"], e["cost_per_accepted_response_usd"] * 1000, e) for e in entries]
        axis.plot([x for x, _, _ in points], [y for _, y, _ in points], color=palette[run.label],
                  label=f"{run.label} ({run.price_basis})", gid=run.label)
        below_goal = _mark_levels(axis, points, palette[run.label], min_attainment) or below_goal
        best = run.best(min_attainment)
        if best and best["concurrency"] is not None:
            axis.scatter([best["concurrency"]], [best["cost_per_accepted_response_usd"] * 1000], s=140,
                         facecolors="none", edgecolors=palette[run.label], linewidths=1.5, gid="best")
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


def plot(runs: Sequence[Run], out: Path, min_attainment: float = DEFAULT_MIN_ATTAINMENT) -> list[Path]:
    """Two PNGs; levels without a figure (nothing served, nothing accepted, a timestamp replay) are left out."""
    import matplotlib.pyplot as plt

    paths = []
    for build, name in ((latency_figure, LATENCY_PLOT), (cost_figure, COST_PLOT)):
        figure = build(runs, min_attainment)
        figure.savefig(out / name, dpi=110)
        plt.close(figure)
        paths.append(out / name)
    return paths


def compare(runs: Sequence[Path] | Path, *rest: Path, out: Path | None = None, min_gain: float = DEFAULT_MIN_GAIN,
            min_attainment: float = DEFAULT_MIN_ATTAINMENT, labels: Sequence[str | None] | None = None,
            plots: bool = True) -> dict[str, Any]:
    """Rank two or more runs, write ``report.md``, ``verdict.json`` and the plots into ``out``, and
    return the decision. ``compare([a, b, c], out)``; the two-run form of before issue 27,
    ``compare(a, b, out)``, still works."""
    if isinstance(runs, (str, Path)):  # compare(a, b, [c, ...], out), or with out=...
        given = [runs, *rest] if out is not None else [runs, *rest[:-1]]
        paths, out = [Path(p) for p in given], out if out is not None else (rest[-1] if rest else None)
    else:
        paths = [Path(p) for p in runs]
        if rest:
            (out,) = rest
    if out is None:
        raise BenchError("out: the report directory is required", [("out", "the report directory is required")])
    if len(paths) < 2:
        raise BenchError(f"runs: at least two run directories (got {len(paths)})",
                         [("runs", f"at least two run directories (got {len(paths)})")])
    if not 0 <= min_gain < 1:
        raise BenchError(f"min_gain: between 0 and 1 (got {min_gain})", [("min_gain", f"between 0 and 1 (got {min_gain})")])
    if not 0 < min_attainment <= 1:
        raise BenchError(f"min_attainment: above 0 and at most 1 (got {min_attainment})",
                         [("min_attainment", f"above 0 and at most 1 (got {min_attainment})")])
    loaded = load_all(paths, labels)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    decision = verdict(loaded, min_gain, min_attainment)
    (out / VERDICT_FILE).write_text(json.dumps(decision, indent=2) + "\n")
    (out / REPORT_FILE).write_text(markdown(loaded, decision))
    if plots:
        plot(loaded, out, min_attainment)
    return decision
