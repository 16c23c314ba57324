"""``ray-llm-eks bench``: what it refuses before running AIPerf, and the summary table it prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from ray_llm_eks.cli import app
from ray_llm_eks.cli.bench import _print_summary

RUNS = Path(__file__).resolve().parents[1] / "data" / "bench" / "runs"


def test_bench_in_a_region_without_prices_needs_the_hourly_cost(runner, write_config, tmp_path):
    config = write_config("region: ap-east-2\ncontrol_plane_azs: [ap-east-2a, ap-east-2b]\n"
                          "data_plane_az: ap-east-2a\n")
    result = runner.invoke(app, ["bench", "--config", config, "--url", "http://127.0.0.1:9",
                                 "--out", str(tmp_path / "run")], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "no prices for region 'ap-east-2'" in result.output and "accepted: --hourly-cost-usd" in result.output


@pytest.mark.parametrize("width", [60, 80, 120])
def test_bench_summary_cuts_no_figure_at_any_width(width):
    # A real run's summary.json (tests/data/bench/runs); the table bench prints after its levels.
    out = RUNS / "disaggregated"
    entries = json.loads((out / "summary.json").read_text())
    console = Console(width=width, record=True, highlight=False)
    _print_summary(console, out, entries)
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines() if line.startswith(("┃", "│", "┏", "└")))
    for entry in entries:
        if entry["cost_per_accepted_response_usd"] is not None:
            assert f"{entry['cost_per_accepted_response_usd']:.6f}" in text
        assert f"{entry['output_tokens_per_s']:.1f}" in text
    if width < 100:
        assert "concurrency 32" in text  # the list names each level, not a bare "32"
