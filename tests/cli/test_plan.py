"""``ray-llm-eks plan`` through typer's CliRunner and as typed: output, JSON keys and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ray_llm_eks.cli import app

PLAN_KEYS = ("hourly_cost_usd", "monthly_cost_usd", "kv_cache_bytes_per_token", "weights_gib", "kv_pool_gib",
             "max_concurrent_sequences", "cold_start_seconds", "kv_transfer_bytes_per_request",
             "kv_transfer_seconds_per_request")


def test_plan_json_has_the_documented_numeric_keys_and_reference_figures(runner):
    result = runner.invoke(app, ["plan", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in PLAN_KEYS:
        assert isinstance(data[key], (int, float)) and not isinstance(data[key], bool), key
    # The worked example in docs/plan.md.
    assert data["weights_gib"] == pytest.approx(16.6778, abs=1e-4)
    assert data["kv_cache_bytes_per_token"] == 32_768
    assert data["kv_pool_gib"] == pytest.approx(1.7892, abs=1e-4)
    assert data["max_concurrent_sequences"] == 10
    assert data["cold_start_seconds"] == pytest.approx(18.412, abs=1e-3)
    assert data["kv_transfer_bytes_per_request"] == 189_923_328
    assert data["kv_transfer_seconds_per_request"] == pytest.approx(189_923_328 * 8 / 25e9, abs=1e-6)
    assert data["hourly_cost_usd"] == pytest.approx(4.715332, abs=1e-6)
    assert data["monthly_cost_usd"] == pytest.approx(3442.192, abs=1e-3)


def test_plan_tables_show_date_source_and_totals(runner):
    result = runner.invoke(app, ["plan", "--tokens-per-second", "500"])
    assert result.exit_code == 0, result.output
    assert "price table as of 2026-11-30" in result.output
    assert "$4.72 per hour" in result.output and "x 730 h" in result.output
    assert "per 1M output tokens" in result.output
    assert "https://aws.amazon.com/eks/pricing/" in result.output


def test_plan_cost_per_million_tokens_in_json(runner):
    data = json.loads(runner.invoke(app, ["plan", "--json", "--tokens-per-second", "500"]).stdout)
    assert data["cost_per_million_output_tokens_usd"] == pytest.approx(4.715332 / (500 * 3600) * 1e6, abs=1e-5)


def test_plan_exits_1_when_a_70b_model_does_not_fit_on_one_l4(runner, write_config):
    config = write_config("""
model:
  source: example/dense-70b
  served_name: dense-70b
  architecture:
    parameter_count: 70553706496
    num_hidden_layers: 80
    full_attention_layers: 80
    num_attention_heads: 64
    num_key_value_heads: 8
    head_dim: 128
""")
    result = runner.invoke(app, ["plan", "--config", config])
    assert result.exit_code == 1
    assert "prefill.instance_type: prefill: the weights" in result.output
    assert "do not fit" in result.output
    assert "short by 112.95 GiB" in result.output  # 131.42 - (22.03 x 0.9 - 1.36)
    assert "g6e.12xlarge with tensor_parallel_size 4" in result.output
    as_json = runner.invoke(app, ["plan", "--config", config, "--json"])
    assert as_json.exit_code == 1
    data = json.loads(as_json.stdout)
    assert data["exit_code"] == 1
    assert "decode.instance_type: decode: the weights" in data["error"]


def test_plan_exits_2_for_a_config_error(runner, write_config):
    result = runner.invoke(app, ["plan", "--config", write_config("regoin: us-west-2\n")])
    assert result.exit_code == 2
    assert "regoin: unknown key" in result.output


def test_plan_in_a_region_missing_from_the_price_table_prints_every_other_figure(runner, write_config):
    config = write_config("region: ap-east-2\ncontrol_plane_azs: [ap-east-2a, ap-east-2b]\n"
                          "data_plane_az: ap-east-2a\n")
    as_json = runner.invoke(app, ["plan", "--config", config, "--json", "--tokens-per-second", "500"])
    assert as_json.exit_code == 0, as_json.output  # as for a priced plan that fits
    data = json.loads(as_json.stdout)
    assert "no prices for region 'ap-east-2'" in data["price_unknown"]
    assert data["hourly_cost_usd"] is None and data["monthly_cost_usd"] is None
    assert data["cost_per_million_output_tokens_usd"] is None
    assert all(line["usd_per_hour"] is None and line["basis"] is None for line in data["cost_lines"])
    assert data["kv_cache_bytes_per_token"] == 32_768 and data["max_concurrent_sequences"] == 10
    assert data["kv_transfer_bytes_per_request"] == 189_923_328
    result = runner.invoke(app, ["plan", "--config", config, "--tokens-per-second", "500"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = result.output
    for figure in ("32,768 B", "1.79 GiB", "189,923,328 bytes", "60.8 ms over EFA", "17.98 GiB -> 18 s"):
        assert figure in text, figure
    assert "Price unknown: the price table (as of 2026-11-30) has no prices for region 'ap-east-2'" in text
    total = next(line for line in text.splitlines() if "total" in line)
    assert "unknown" in total and "0.0000" not in text
    assert "unknown per 1M output tokens" in text and "per hour, $" not in text


def test_plan_prices_p5_in_us_west_2_and_labels_the_estimate_in_text_and_json(runner, write_config):
    config = write_config("prefill: {instance_type: p5.48xlarge}\ndecode: {instance_type: p5.48xlarge}\n"
                          "model: {tensor_parallel_size: 8}\n")
    as_json = runner.invoke(app, ["plan", "--config", config, "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["price_unknown"] is None and data["price_includes_estimates"] is True
    node = next(line for line in data["cost_lines"] if line["item"] == "decode node p5.48xlarge")
    assert (node["usd_per_hour"], node["basis"]) == (pytest.approx(55.04), "estimate")
    text = " ".join(runner.invoke(app, ["plan", "--config", config], env={"COLUMNS": "200"}).output.split())
    assert ("warning: these prices for us-west-2 are estimates, not confirmed against the AWS price list: prefill "
            "node p5.48xlarge, decode node p5.48xlarge, CloudWatch: 1 dashboard") in text
    assert "(Estimated by rule (ray_llm_eks/base/pricing.py), the region's own ratio to us-east-1 in this table" in text
    assert "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5en.48xlarge: us-east-1 GPU x 1;" in text


def test_plan_exits_2_for_an_instance_type_the_region_does_not_offer(runner, write_config):
    config = write_config("region: eu-west-1\ncontrol_plane_azs: [eu-west-1a, eu-west-1b]\n"
                          "data_plane_az: eu-west-1a\n")
    result = runner.invoke(app, ["plan", "--config", config])
    assert result.exit_code == 2
    assert "not offered in eu-west-1" in result.output


def test_plan_warns_about_estimated_prices(runner, write_config):
    config = write_config("region: sa-east-1\ncontrol_plane_azs: [sa-east-1a, sa-east-1b]\n"
                          "data_plane_az: sa-east-1a\n")
    result = runner.invoke(app, ["plan", "--config", config])
    assert result.exit_code == 0
    assert "estimates, not confirmed" in result.output


def test_plan_with_a_workload_reports_each_legs_capacity_and_the_ratio(runner):
    data = json.loads(runner.invoke(app, ["plan", "--json", "--isl", "2048", "--osl", "256", "--rate", "2"]).stdout)
    assert data["recommended_prefill_decode_ratio"] == pytest.approx(0.2982, abs=1e-4)
    capacity = data["capacity"]
    assert capacity["workload"] == {"isl": 2048, "osl": 256, "rate": 2.0}
    assert (capacity["prefill"]["nodes_recommended"], capacity["decode"]["nodes_recommended"]) == (2, 5)
    assert capacity["node_start_seconds"] == pytest.approx(573.3, abs=0.1)
    text = runner.invoke(app, ["plan", "--isl", "2048", "--osl", "256", "--rate", "2"])
    assert text.exit_code == 0 and "recommended_prefill_decode_ratio 0.2982" in text.output
    # Without a workload, no ratio; a partial workload is refused with what is missing.
    assert json.loads(runner.invoke(app, ["plan", "--json"]).stdout)["recommended_prefill_decode_ratio"] is None
    partial = runner.invoke(app, ["plan", "--isl", "2048", "--rate", "2"])
    assert partial.exit_code != 0 and "missing --osl" in partial.output


def test_plan_names_each_estimated_price_never_a_dangling_warning(runner, tmp_path):
    config = tmp_path / "gcs.yaml"
    config.write_text("strict: false\nserving:\n  gcs_fault_tolerance:\n    enabled: true\n")
    result = runner.invoke(app, ["plan", "--config", str(config)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.output.splitlines() if "are estimates" in line]
    assert not warning.rstrip().endswith(":"), warning
    assert "GCS cache cache.t4g.small" in warning, warning


# --- tables that fit the terminal ---------------------------------------------------------------

def _plan_as_typed(width: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``ray-llm-eks plan ...`` in a terminal ``width`` columns wide, as a user types it."""
    return subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", "plan", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": str(width)}, timeout=120, check=False)


def _plan_figures(data: dict) -> list[str]:
    """Every figure of ``plan --json`` that the tables show, formatted as the tables format it."""
    figures = [f"{data['kv_cache_bytes_per_token']:,} B", f"{data['kv_transfer_bytes_per_request']:,} bytes",
               f"{data['hourly_cost_usd']:.4f}"]
    for node in data["nodes"]:
        figures += [node["instance_type"], f"{node['memory_gib']} GiB", f"{node['network_gbps']:g} Gbps"]
    for leg in data["memory"]:
        figures += [f"{leg[key]:.2f} GiB" for key in ("gpu_memory_gib", "usable_gib", "weights_gib", "reserve_gib",
                                                       "kv_pool_gib")]
        figures += [f"{leg['kv_cache_bytes_per_token']:,} B", f"{leg['linear_state_bytes_per_sequence'] / 2**20:.1f} MiB",
                    f"{leg['bytes_per_max_length_sequence'] / 2**20:.1f} MiB"]
    figures += [f"{line['usd_per_hour']:.4f}" for line in data["cost_lines"]]
    for leg in (data["capacity"]["prefill"], data["capacity"]["decode"]):
        figures += [f"{leg['replicas_needed']:.2f}", f"{leg['nodes_needed']:.2f}",
                    "/".join(map(str, leg["nodes_configured"]))]
    return figures


@pytest.mark.integration
@pytest.mark.parametrize("width", [60, 80, 120])
def test_plan_cuts_no_figure_at_any_width(width, write_config):
    # A GCS cache adds a priced line; a workload adds the capacity table: every table plan prints.
    config = write_config("serving:\n  gcs_fault_tolerance:\n    enabled: true\n")
    workload = ("--isl", "2048", "--osl", "256", "--rate", "2", "--tokens-per-second", "500")
    data = json.loads(_plan_as_typed(200, "--config", config, "--json", *workload).stdout)
    done = _plan_as_typed(width, "--config", config, *workload)
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    missing = [figure for figure in _plan_figures(data) if figure not in done.stdout]
    assert not missing, missing
    tables = [line for line in done.stdout.splitlines() if line.startswith(("┃", "│", "┏", "└"))]
    assert tables and all(len(line) <= width for line in tables)
