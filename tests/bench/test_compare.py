"""``ray-llm-eks compare`` on two recorded runs whose winner is known (tests/bench/record_example.py)."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from ray_llm_eks.bench import compare
from ray_llm_eks.bench.runner import SUMMARY_FILE

RUNS = Path(__file__).resolve().parents[1] / "data" / "bench" / "runs"
DISAGGREGATED, COLOCATED = RUNS / "disaggregated", RUNS / "colocated"


ROOT = RUNS.parents[3]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """From the repository root with relative paths, as record_example.py runs it (the report names them)."""
    out = tmp_path_factory.mktemp("report")
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        return out, compare.compare(DISAGGREGATED.relative_to(ROOT), COLOCATED.relative_to(ROOT), out)
    finally:
        os.chdir(here)


def best_per_dollar(run: Path, min_attainment: float = 0.9) -> tuple[int, float]:
    """By hand: among levels with at least 90 % of requests accepted, the lowest cost per accepted response."""
    entries = json.loads((run / SUMMARY_FILE).read_text())
    eligible = [e for e in entries if e["cost_per_accepted_response_usd"] is not None
                and e["accepted_responses"] / (e["requests_ok"] + e["requests_failed"]) >= min_attainment]
    best = min(eligible, key=lambda e: e["cost_per_accepted_response_usd"])
    return best["concurrency"], 1 / best["cost_per_accepted_response_usd"]


def test_a_level_that_misses_the_slos_too_often_is_not_a_best_level(tmp_path):
    """The cheapest level per accepted response is not a best level when fewer than 90 % of its
    requests were accepted: a load nobody could sell."""
    def overloaded(run, summary, _):
        top = max(summary, key=lambda e: e["concurrency"])
        top["accepted_responses"] = int(0.85 * (top["requests_ok"] + top["requests_failed"]))
        top["cost_per_accepted_response_usd"] = min(e["cost_per_accepted_response_usd"] for e in summary) / 2
    run = compare.load(copy_run(COLOCATED, tmp_path / "overloaded", overloaded))
    top = max(e["concurrency"] for e in run.entries)
    assert run.best(min_attainment=0.8)["concurrency"] == top
    assert run.best()["concurrency"] == max(e["concurrency"] for e in run.entries if e["concurrency"] != top)


def test_the_known_winner_wins_for_the_stated_reason(report):
    _, decision = report
    assert decision["decision"] == "adopt-disaggregation"
    assert decision["winner"] == "disaggregated"
    level_a, per_dollar_a = best_per_dollar(DISAGGREGATED)
    level_b, per_dollar_b = best_per_dollar(COLOCATED)
    assert decision["best"] == {"disaggregated": level_a, "colocated": level_b}
    assert decision["gain"] == pytest.approx(per_dollar_a / per_dollar_b - 1)
    assert f"{per_dollar_a:,.0f} accepted responses per dollar" in decision["reason"]
    assert "at the same SLOs" in decision["reason"]


def test_swapping_the_runs_rejects_the_loser_not_the_topology(tmp_path):
    decision = compare.compare(COLOCATED, DISAGGREGATED, tmp_path, plots=False)
    assert decision["decision"] == "adopt-disaggregation" and decision["winner"] == "disaggregated"
    assert decision["gain"] < 0


@pytest.mark.parametrize("first_is_better", [True, False])
def test_the_threshold_is_the_same_whichever_run_is_named_first(tmp_path, first_is_better):
    """5.2 % better must win in either order (a/b - 1 = 5.2 % but b/a - 1 = -4.9 %)."""
    def cheaper(run, summary, _):
        for entry in summary:
            entry["cost_per_accepted_response_usd"] /= 1.052
    better = copy_run(COLOCATED, tmp_path / "better", cheaper)
    a, b = (better, COLOCATED) if first_is_better else (COLOCATED, better)
    decision = compare.compare(a, b, tmp_path / "o", plots=False)
    assert decision["winner"] == ("colocated (A)" if first_is_better else "colocated (B)")


def test_the_same_run_twice_is_no_difference_and_keeps_it_simple(tmp_path):
    decision = compare.compare(COLOCATED, COLOCATED, tmp_path, plots=False)
    assert decision["decision"] == "no-difference" and decision["gain"] == 0
    assert decision["a"] != decision["b"]  # labelled apart


def test_a_gain_below_the_threshold_keeps_the_colocated_baseline(tmp_path):
    def colocated_3_percent_dearer(run, summary, _):
        run["settings"]["deployment"]["topology"] = "colocated"
        for entry in summary:
            entry["cost_per_accepted_response_usd"] *= 1.03
    baseline = copy_run(DISAGGREGATED, tmp_path / "colocated", colocated_3_percent_dearer)
    decision = compare.compare(DISAGGREGATED, baseline, tmp_path / "o", plots=False)
    assert decision["decision"] == "no-difference" and decision["gain"] == pytest.approx(0.03)
    assert "Keep colocated, the simpler topology" in decision["reason"]


def copy_run(source: Path, target: Path, edit) -> Path:
    shutil.copytree(source, target)
    run = json.loads((target / "run.json").read_text())
    summary = json.loads((target / SUMMARY_FILE).read_text())
    completions = json.loads((target / "agreement.json").read_text())
    edit(run, summary, completions)
    (target / "run.json").write_text(json.dumps(run))
    (target / SUMMARY_FILE).write_text(json.dumps(summary))
    (target / "agreement.json").write_text(json.dumps(completions))
    return target


def test_runs_at_different_slos_are_not_compared(tmp_path):
    def loosen(run, summary, _):
        run["settings"]["slo_ttft_ms"] = 10_000
    other = copy_run(COLOCATED, tmp_path / "loose", loosen)
    decision = compare.compare(DISAGGREGATED, other, tmp_path / "out", plots=False)
    assert decision["decision"] == "not-comparable" and decision["winner"] is None
    assert "the SLOs differ" in decision["reason"]


def test_two_runs_of_one_topology_get_no_topology_verdict(tmp_path):
    def relabel(run, summary, _):
        run["settings"]["deployment"]["topology"] = "disaggregated"
    decision = compare.compare(DISAGGREGATED, copy_run(COLOCATED, tmp_path / "same", relabel), tmp_path / "o", plots=False)
    assert decision["decision"] == "prefer-disaggregated (A)"
    assert "both runs say topology disaggregated: was each benchmarked with its own --config?" in decision["reason"]


def test_runs_of_different_workloads_are_not_compared(tmp_path):
    def longer(run, summary, _):
        run["settings"]["isl"] = 4096
    decision = compare.compare(DISAGGREGATED, copy_run(COLOCATED, tmp_path / "long", longer), tmp_path / "o", plots=False)
    assert decision["decision"] == "not-comparable" and "the workloads differ" in decision["reason"]


def test_unpriced_runs_are_not_compared(tmp_path):
    def unpriced(run, summary, _):
        for entry in summary:
            entry["cost_per_accepted_response_usd"] = None
    decision = compare.compare(DISAGGREGATED, copy_run(COLOCATED, tmp_path / "free", unpriced), tmp_path / "o", plots=False)
    assert decision["decision"] == "not-comparable" and "no priced level" in decision["reason"]


def test_diverging_greedy_outputs_are_reported_with_a_warning(tmp_path):
    def corrupt(run, summary, completions):
        completions["completions"][3]["text"] = completions["completions"][3]["text"][:5] + "#corrupted"
    decision = compare.compare(DISAGGREGATED, copy_run(COLOCATED, tmp_path / "bad", corrupt), tmp_path / "o", plots=False)
    agreement = decision["agreement"]
    assert (agreement["identical"], agreement["compared"]) == (15, 16)
    assert agreement["divergences"][0]["first_difference_at_char"] == 5
    assert "Warning: greedy outputs agree on 15 of 16 prompts;" in decision["reason"]
    report = (tmp_path / "o" / compare.REPORT_FILE).read_text()
    assert "15 of 16 prompts identical (94%)" in report


def test_failed_agreement_prompts_warn_even_when_the_rest_agree(tmp_path):
    def failing(run, summary, completions):
        for completion in completions["completions"]:
            completion["text"], completion["error"] = "", "HTTPError: HTTP Error 500"
    decision = compare.compare(DISAGGREGATED, copy_run(COLOCATED, tmp_path / "f", failing), tmp_path / "o", plots=False)
    assert decision["agreement"]["rate"] == 0.0 and len(decision["agreement"]["errors"]) == 16
    assert "agree on 0 of 16 prompts, 16 failed on a side" in decision["reason"]
    report = (tmp_path / "o" / compare.REPORT_FILE).read_text()
    assert "0 of 16 prompts identical (0%)" in report
    assert "failed: disaggregated: ok; colocated: HTTPError: HTTP Error 500" in report


def test_the_report_shows_every_level_of_both_runs(report):
    out, decision = report
    text = (out / compare.REPORT_FILE).read_text()
    assert text.startswith("# disaggregated vs colocated")
    assert decision["reason"] in text
    for run in (DISAGGREGATED, COLOCATED):
        for entry in json.loads((run / SUMMARY_FILE).read_text()):
            assert f"| {entry['concurrency']} | {run.name} | {entry['requests_ok']} |" in text.replace(" **best**", "")
    for run in (DISAGGREGATED, COLOCATED):
        assert f"| {best_per_dollar(run)[0]} | {run.name} **best** |" in text
    assert "16 of 16 prompts identical (100%)" in text
    assert json.loads((out / compare.VERDICT_FILE).read_text()) == json.loads(json.dumps(decision))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_both_plots_are_rendered(report):
    out, _ = report
    width, height = png_size(out / compare.LATENCY_PLOT)
    assert width > 1000 and height > 400
    width, height = png_size(out / compare.COST_PLOT)
    assert width > 600 and height > 400


@pytest.mark.parametrize("case", ["every-request-failed", "unpriced", "trace-replay"])
def test_levels_without_figures_are_reported_and_plotted_without_a_crash(tmp_path, case):
    def edit(run, summary, _):
        for entry in summary:
            if case == "every-request-failed" and entry["concurrency"] == 32:
                entry.update(requests_ok=0, requests_failed=64, accepted_responses=0, output_tokens_per_s=0.0,
                             cost_per_accepted_response_usd=None, cost_per_million_output_tokens_usd=None,
                             aiperf_exit_code=1, **{m: {"p50": None, "p95": None, "p99": None}
                                                   for m in ("ttft_ms", "itl_ms", "e2e_ms")})
            if case == "unpriced":
                entry.update(cost_per_accepted_response_usd=None, cost_per_million_output_tokens_usd=None,
                             hourly_cost_usd=None)
        if case == "trace-replay":
            del summary[1:]
            summary[0]["concurrency"] = None
            run["settings"].update(trace="/t.jsonl", replay_timestamps=True)
    runs = [copy_run(r, tmp_path / r.name, edit) for r in (DISAGGREGATED, COLOCATED)]
    decision = compare.compare(*runs, tmp_path / "out")
    for name in (compare.LATENCY_PLOT, compare.COST_PLOT):
        assert png_size(tmp_path / "out" / name)[0] > 600
    report = (tmp_path / "out" / compare.REPORT_FILE).read_text()
    if case == "every-request-failed":
        assert "| 32 | colocated | 0 | 64 | 0 (0%) | n/a/n/a/n/a |" in report
        assert "AIPerf reported failure at disaggregated c32, colocated c32" in decision["reason"]
    elif case == "unpriced":
        assert decision["decision"] == "not-comparable"
    else:
        assert "| trace | disaggregated |" in report and "at its timestamps" in report


def test_the_committed_worked_example_is_this_comparison(report):
    """docs/benchmark-example is `compare` of the recorded runs: regenerate both together."""
    out, decision = report
    committed = Path(__file__).resolve().parents[2] / "docs" / "benchmark-example"
    assert json.loads((committed / compare.VERDICT_FILE).read_text()) == json.loads(json.dumps(decision))
    assert (committed / compare.REPORT_FILE).read_text() == (out / compare.REPORT_FILE).read_text()


# --- sensitivity to the attainment goal ----------------------------------------------------------

def cheap_but_overloaded(run, summary, _):
    """colocated's c32 accepts 85 % of its requests at a third of disaggregated's best cost: a
    level that counts at an 80 % goal and not at 90 %."""
    top = max(summary, key=lambda e: e["concurrency"])
    top["accepted_responses"] = int(0.85 * (top["requests_ok"] + top["requests_failed"]))
    top["cost_per_accepted_response_usd"] = 1 / best_per_dollar(DISAGGREGATED)[1] / 3


def test_the_sensitivity_is_the_verdict_at_each_goal_from_the_same_records(tmp_path):
    colocated = copy_run(COLOCATED, tmp_path / "colocated", cheap_but_overloaded)
    decision = compare.compare(DISAGGREGATED, colocated, tmp_path / "o", plots=False)
    a, b = compare.load(DISAGGREGATED), compare.load(colocated)
    goals = [entry["min_attainment"] for entry in decision["sensitivity"]]
    assert goals == [0.8, 0.9, 0.95, 0.99]
    for entry in decision["sensitivity"]:
        alone = compare.decide(a, b, min_attainment=entry["min_attainment"])
        assert (entry["decision"], entry["winner"], entry["best"]) == (alone["decision"], alone["winner"], alone.get("best"))
        assert entry["used"] is (entry["min_attainment"] == 0.9)
    by_goal = {entry["min_attainment"]: entry for entry in decision["sensitivity"]}
    # The verdict moves: at 80 % colocated's cheap, overloaded c32 counts and wins.
    assert by_goal[0.8]["decision"] == "reject-disaggregation" and by_goal[0.8]["best"]["colocated"] == 32
    assert by_goal[0.8]["ratio"] == pytest.approx(2.0)
    assert by_goal[0.9]["decision"] == decision["decision"] == "adopt-disaggregation"
    assert by_goal[0.9]["ratio"] == pytest.approx(best_per_dollar(DISAGGREGATED)[1] / best_per_dollar(colocated)[1] - 1)
    line = compare.sensitivity_line(decision)
    assert line.startswith("Verdict at --min-attainment 80%: reject-disaggregation (+200%); 90% (used): "
                           "adopt-disaggregation (+")
    assert line.endswith("99%: not-comparable (no priced level of colocated meets it).")
    report = (tmp_path / "o" / compare.REPORT_FILE).read_text()
    assert f"**Sensitivity.** {line}" in report
    assert json.loads((tmp_path / "o" / compare.VERDICT_FILE).read_text())["sensitivity"] == \
        json.loads(json.dumps(decision["sensitivity"]))


def test_a_goal_outside_the_usual_ones_is_listed_in_its_place(tmp_path):
    decision = compare.compare(DISAGGREGATED, COLOCATED, tmp_path, min_attainment=0.85, plots=False)
    assert [(e["min_attainment"], e["used"]) for e in decision["sensitivity"]] == \
        [(0.8, False), (0.85, True), (0.9, False), (0.95, False), (0.99, False)]
    assert "85% (used): adopt-disaggregation (+" in compare.sensitivity_line(decision)


# --- the plots, read from matplotlib's Figure objects --------------------------------------------

def throughput_falls_at_the_top(run, summary, _):
    """An overloaded top level serving less than c8 did: joined in load order, its line went back."""
    top = max(summary, key=lambda e: e["concurrency"])
    c8 = next(e for e in summary if e["concurrency"] == 8)
    top["output_tokens_per_s"] = c8["output_tokens_per_s"] * 0.6


def lines(axis, gid_prefix: str):
    return [line for line in axis.get_lines() if (line.get_gid() or "").startswith(gid_prefix)]


def markers(axis, gid: str) -> set[tuple[float, float]]:
    return {(round(float(x), 6), round(float(y), 6)) for collection in axis.collections
            if collection.get_gid() == gid for x, y in collection.get_offsets()}


def test_latency_lines_never_go_back_and_a_fallen_level_starts_a_new_line(tmp_path):
    import matplotlib.pyplot as plt

    fallen = copy_run(COLOCATED, tmp_path / "colocated", throughput_falls_at_the_top)
    a, b = compare.load(DISAGGREGATED), compare.load(fallen)
    xs_in_load_order = [e["output_tokens_per_s"] for e in sorted(b.entries, key=lambda e: e["concurrency"])]
    assert xs_in_load_order != sorted(xs_in_load_order)  # the case: a level's throughput went back
    figure = compare.latency_figure(a, b)
    try:
        for axis, metric in zip(figure.axes, ("ttft_ms", "e2e_ms")):
            for run in (a, b):
                for p in ("p50", "p95", "p99"):
                    drawn = lines(axis, f"{run.label} {p}")
                    for line in drawn:
                        x = list(line.get_xdata())
                        assert x == sorted(x), (run.label, p, x)
                    # Every level is on a line, each once, in load order.
                    points = [(x, y) for line in drawn for x, y in zip(line.get_xdata(), line.get_ydata())]
                    assert points == [(e["output_tokens_per_s"], e[metric][p]) for e in compare._swept(run)]
                    assert len(drawn) == (2 if run is b else 1)
            texts = [t.get_text() for t in axis.texts]
            assert "a level serving less than the one before starts a new line" in texts
    finally:
        plt.close(figure)


def test_levels_below_the_goal_carry_their_own_marker_and_legend_entry():
    import matplotlib.pyplot as plt

    a, b = compare.load(DISAGGREGATED), compare.load(COLOCATED)
    below = [e for run in (a, b) for e in compare._swept(run) if compare.attainment(e) < 0.9]
    meets = [e for run in (a, b) for e in compare._swept(run) if compare.attainment(e) >= 0.9]
    assert sorted(e["concurrency"] for e in below) == [1, 2, 4]  # colocated's, the TTFT tail
    figure = compare.latency_figure(a, b)
    try:
        for axis, metric in zip(figure.axes, ("ttft_ms", "e2e_ms")):
            expected = {(round(e["output_tokens_per_s"], 6), round(e[metric][p], 6)) for e in below
                        for p in ("p50", "p95", "p99")}
            assert markers(axis, "below-goal") == expected
            assert markers(axis, "at-goal").isdisjoint(expected)
            assert len(markers(axis, "at-goal")) == 3 * len(meets)
            assert "level below the 90% attainment goal" in [t.get_text() for t in axis.get_legend().get_texts()]
    finally:
        plt.close(figure)
    figure = compare.cost_figure(a, b)
    try:
        (axis,) = figure.axes
        assert markers(axis, "below-goal") == {(e["concurrency"], round(e["cost_per_accepted_response_usd"] * 1000, 6))
                                               for e in below}
        for line in lines(axis, ""):
            x = list(line.get_xdata())
            assert x == sorted(x)
        assert "level below the 90% attainment goal" in [t.get_text() for t in axis.get_legend().get_texts()]
        # The marker is the one the legend shows.
        legend_marker = next(h for h, t in zip(axis.get_legend().legend_handles, axis.get_legend().get_texts())
                             if t.get_text().startswith("level below"))
        assert legend_marker.get_marker() == compare.BELOW_GOAL_MARKER
    finally:
        plt.close(figure)


def test_at_a_lower_goal_the_same_levels_are_not_marked():
    import matplotlib.pyplot as plt

    figure = compare.cost_figure(compare.load(DISAGGREGATED), compare.load(COLOCATED), min_attainment=0.8)
    try:
        (axis,) = figure.axes
        assert markers(axis, "below-goal") == set()
        assert all(not t.get_text().startswith("level below") for t in axis.get_legend().get_texts())
    finally:
        plt.close(figure)
