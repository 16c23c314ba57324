"""The `ray-llm-eks` command line through typer's CliRunner: output, JSON keys and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import pytest
from typer.testing import CliRunner

from ray_llm_eks import cli
from ray_llm_eks.preflight import G_AND_VT_QUOTA, STANDARD_QUOTA

from helpers.aws import BOOTSTRAP_PARAMETER, REGION, StubbedEksSession

runner = CliRunner()

PLAN_KEYS = ("hourly_cost_usd", "monthly_cost_usd", "kv_cache_bytes_per_token", "weights_gib", "kv_pool_gib",
             "max_concurrent_sequences", "cold_start_seconds", "kv_transfer_bytes_per_request",
             "kv_transfer_seconds_per_request")


def _write(tmp_path, text: str):
    """A configuration for a test about something else than pinning: strict false unless it says."""
    path = tmp_path / "deployment.yaml"
    path.write_text(text if "strict:" in text else f"strict: false\n{text}")
    return str(path)


def test_main_exists_and_shows_both_commands():
    result = runner.invoke(cli.app, ["--help"])
    assert result.exit_code == 0
    assert "plan" in result.output and "preflight" in result.output
    assert callable(cli.main)


def test_plan_json_has_the_documented_numeric_keys_and_reference_figures():
    result = runner.invoke(cli.app, ["plan", "--json"])
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


def test_plan_tables_show_date_source_and_totals():
    result = runner.invoke(cli.app, ["plan", "--tokens-per-second", "500"])
    assert result.exit_code == 0, result.output
    assert "price table as of 2026-11-30" in result.output
    assert "$4.72 per hour" in result.output and "x 730 h" in result.output
    assert "per 1M output tokens" in result.output
    assert "https://aws.amazon.com/eks/pricing/" in result.output


def test_plan_cost_per_million_tokens_in_json():
    data = json.loads(runner.invoke(cli.app, ["plan", "--json", "--tokens-per-second", "500"]).stdout)
    assert data["cost_per_million_output_tokens_usd"] == pytest.approx(4.715332 / (500 * 3600) * 1e6, abs=1e-5)


def test_plan_exits_1_when_a_70b_model_does_not_fit_on_one_l4(tmp_path):
    config = _write(tmp_path, """
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
    result = runner.invoke(cli.app, ["plan", "--config", config])
    assert result.exit_code == 1
    assert "prefill.instance_type: prefill: the weights" in result.output
    assert "do not fit" in result.output
    assert "short by 112.95 GiB" in result.output  # 131.42 - (22.03 x 0.9 - 1.36)
    assert "g6e.12xlarge with tensor_parallel_size 4" in result.output
    as_json = runner.invoke(cli.app, ["plan", "--config", config, "--json"])
    assert as_json.exit_code == 1
    data = json.loads(as_json.stdout)
    assert data["exit_code"] == 1
    assert "decode.instance_type: decode: the weights" in data["error"]


def test_plan_exits_2_for_a_config_error(tmp_path):
    result = runner.invoke(cli.app, ["plan", "--config", _write(tmp_path, "regoin: us-west-2\n")])
    assert result.exit_code == 2
    assert "regoin: unknown key" in result.output


def test_plan_in_a_region_missing_from_the_price_table_prints_every_other_figure(tmp_path):
    config = _write(tmp_path, "region: ap-east-2\ncontrol_plane_azs: [ap-east-2a, ap-east-2b]\n"
                              "data_plane_az: ap-east-2a\n")
    as_json = runner.invoke(cli.app, ["plan", "--config", config, "--json", "--tokens-per-second", "500"])
    assert as_json.exit_code == 0, as_json.output  # as for a priced plan that fits
    data = json.loads(as_json.stdout)
    assert "no prices for region 'ap-east-2'" in data["price_unknown"]
    assert data["hourly_cost_usd"] is None and data["monthly_cost_usd"] is None
    assert data["cost_per_million_output_tokens_usd"] is None
    assert all(line["usd_per_hour"] is None and line["basis"] is None for line in data["cost_lines"])
    assert data["kv_cache_bytes_per_token"] == 32_768 and data["max_concurrent_sequences"] == 10
    assert data["kv_transfer_bytes_per_request"] == 189_923_328
    result = runner.invoke(cli.app, ["plan", "--config", config, "--tokens-per-second", "500"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = result.output
    for figure in ("32,768 B", "1.79 GiB", "189,923,328 bytes", "60.8 ms over EFA", "17.98 GiB -> 18 s"):
        assert figure in text, figure
    assert "Price unknown: the price table (as of 2026-11-30) has no prices for region 'ap-east-2'" in text
    total = next(line for line in text.splitlines() if "total" in line)
    assert "unknown" in total and "0.0000" not in text
    assert "unknown per 1M output tokens" in text and "per hour, $" not in text


def test_plan_prices_p5_in_us_west_2_and_labels_the_estimate_in_text_and_json(tmp_path):
    config = _write(tmp_path, "prefill: {instance_type: p5.48xlarge}\ndecode: {instance_type: p5.48xlarge}\n"
                              "model: {tensor_parallel_size: 8}\n")
    as_json = runner.invoke(cli.app, ["plan", "--config", config, "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["price_unknown"] is None and data["price_includes_estimates"] is True
    node = next(line for line in data["cost_lines"] if line["item"] == "decode node p5.48xlarge")
    assert (node["usd_per_hour"], node["basis"]) == (pytest.approx(55.04), "estimate")
    text = " ".join(runner.invoke(cli.app, ["plan", "--config", config], env={"COLUMNS": "200"}).output.split())
    assert ("warning: these prices for us-west-2 are estimates, not confirmed against the AWS price list: prefill "
            "node p5.48xlarge, decode node p5.48xlarge, CloudWatch: 1 dashboard") in text
    assert "(Estimated by rule (ray_llm_eks/base/pricing.py), the region's own ratio to us-east-1 in this table" in text
    assert "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5en.48xlarge: us-east-1 GPU x 1;" in text


def test_bench_in_a_region_without_prices_needs_the_hourly_cost(tmp_path):
    config = _write(tmp_path, "region: ap-east-2\ncontrol_plane_azs: [ap-east-2a, ap-east-2b]\n"
                              "data_plane_az: ap-east-2a\n")
    result = runner.invoke(cli.app, ["bench", "--config", config, "--url", "http://127.0.0.1:9",
                                     "--out", str(tmp_path / "run")], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "no prices for region 'ap-east-2'" in result.output and "accepted: --hourly-cost-usd" in result.output


def test_plan_exits_2_for_an_instance_type_the_region_does_not_offer(tmp_path):
    config = _write(tmp_path, "region: eu-west-1\ncontrol_plane_azs: [eu-west-1a, eu-west-1b]\n"
                              "data_plane_az: eu-west-1a\n")
    result = runner.invoke(cli.app, ["plan", "--config", config])
    assert result.exit_code == 2
    assert "not offered in eu-west-1" in result.output


def test_plan_warns_about_estimated_prices(tmp_path):
    config = _write(tmp_path, "region: sa-east-1\ncontrol_plane_azs: [sa-east-1a, sa-east-1b]\n"
                              "data_plane_az: sa-east-1a\n")
    result = runner.invoke(cli.app, ["plan", "--config", config])
    assert result.exit_code == 0
    assert "estimates, not confirmed" in result.output


def test_preflight_exits_3_without_credentials(no_aws_credentials):
    result = runner.invoke(cli.app, ["preflight"])
    assert result.exit_code == 3
    assert "no AWS credentials found" in result.output
    assert "AWS_PROFILE" in result.output


def test_preflight_exits_0_when_every_check_passes(aws, ec2_quotas, monkeypatch):  # noqa: F811
    ec2_quotas.update({G_AND_VT_QUOTA: 64, STANDARD_QUOTA: 32})
    boto3.client("ssm", region_name=REGION).put_parameter(Name=BOOTSTRAP_PARAMETER, Value="27", Type="String")
    monkeypatch.setattr(boto3, "Session", StubbedEksSession)
    result = runner.invoke(cli.app, ["preflight"])
    assert result.exit_code == 0, result.output
    assert result.output.count("PASS") == 5
    assert "all 5 checks passed" in result.output


def test_preflight_exits_1_and_prints_the_fix_when_a_check_fails(aws, ec2_quotas, monkeypatch):  # noqa: F811
    ec2_quotas.update({G_AND_VT_QUOTA: 32, STANDARD_QUOTA: 32})
    monkeypatch.setattr(boto3, "Session", StubbedEksSession)
    result = runner.invoke(cli.app, ["preflight", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    by_name = {check["name"]: check for check in data["checks"]}
    assert by_name["vcpu-quotas"]["status"] == "fail"
    assert "L-DB2E81BA" in by_name["vcpu-quotas"]["fix"]
    assert by_name["cdk-bootstrap"]["status"] == "fail"
    assert by_name["instance-types-offered"]["status"] == "pass"


def test_preflight_exits_3_when_the_credential_process_fails(no_aws_credentials, tmp_path, monkeypatch):
    config_file = tmp_path / "aws-config"
    config_file.write_text("[profile broken]\ncredential_process = /bin/false\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    result = runner.invoke(cli.app, ["preflight", "--profile", "broken"])
    assert result.exit_code == 3, result.output
    assert "no usable AWS credentials" in result.output
    assert "Traceback" not in result.output


def test_plan_with_a_workload_reports_each_legs_capacity_and_the_ratio():
    data = json.loads(runner.invoke(cli.app, ["plan", "--json", "--isl", "2048", "--osl", "256", "--rate", "2"]).stdout)
    assert data["recommended_prefill_decode_ratio"] == pytest.approx(0.2982, abs=1e-4)
    capacity = data["capacity"]
    assert capacity["workload"] == {"isl": 2048, "osl": 256, "rate": 2.0}
    assert (capacity["prefill"]["nodes_recommended"], capacity["decode"]["nodes_recommended"]) == (2, 5)
    assert capacity["node_start_seconds"] == pytest.approx(573.3, abs=0.1)
    text = runner.invoke(cli.app, ["plan", "--isl", "2048", "--osl", "256", "--rate", "2"])
    assert text.exit_code == 0 and "recommended_prefill_decode_ratio 0.2982" in text.output
    # Without a workload, no ratio; a partial workload is refused with what is missing.
    assert json.loads(runner.invoke(cli.app, ["plan", "--json"]).stdout)["recommended_prefill_decode_ratio"] is None
    partial = runner.invoke(cli.app, ["plan", "--isl", "2048", "--rate", "2"])
    assert partial.exit_code != 0 and "missing --osl" in partial.output


# --- verify-logs and verify: the expected libfabric provider -------------------------------------------------

EFA_LOG = [
    "I1130 21:03:46.090211     412 libfabric_topology.cpp:140] Discovered 1 EFA devices",
    "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=efa",
    "2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated",
]
TCP_LOG = [
    "I1130 21:03:46.090100     412 libfabric_topology.cpp:122] TCP devices available globally - "
    "no accelerator-specific mapping required",
    "I1130 21:03:46.090211     412 libfabric_topology.cpp:142] Discovered 1 tcp devices (TCP fallback)",
    "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=tcp",
    "2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated",
]


def _log(tmp_path, lines: list[str], name: str = "decode.log") -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_verify_logs_expects_efa_by_default(tmp_path):
    assert runner.invoke(cli.app, ["verify-logs", _log(tmp_path, EFA_LOG)]).exit_code == 0
    result = runner.invoke(cli.app, ["verify-logs", "--json", _log(tmp_path, TCP_LOG)])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["expected"] == {"backend": "LIBFABRIC", "provider": "efa"}


def test_verify_logs_expect_provider_tcp_fails_logs_on_efa(tmp_path):
    result = runner.invoke(cli.app, ["verify-logs", "--json", "--expect-provider", "tcp", _log(tmp_path, EFA_LOG)])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["expected"]["provider"] == "tcp"
    assert any("NIXL rails use provider efa, not tcp" in r for r in data["reasons"])


def test_verify_logs_expect_provider_tcp_passes_libfabric_on_tcp(tmp_path):
    result = runner.invoke(cli.app, ["verify-logs", "--expect-provider", "tcp", _log(tmp_path, TCP_LOG)])
    assert result.exit_code == 0, result.output
    assert "PASS: LIBFABRIC on the tcp provider" in result.output


def test_verify_logs_refuses_a_provider_that_is_no_name_and_an_unreadable_file(tmp_path):
    result = runner.invoke(cli.app, ["verify-logs", "--expect-provider", "efa tcp", _log(tmp_path, EFA_LOG)])
    assert result.exit_code == 2 and "not a libfabric provider name" in result.output
    assert runner.invoke(cli.app, ["verify-logs", str(tmp_path / "absent.log")]).exit_code == 2


@pytest.mark.parametrize("command", ["verify", "verify-logs"])
def test_expect_provider_and_the_exit_codes_are_in_the_help(command):
    result = runner.invoke(cli.app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--expect-provider" in result.output and "Exit codes" in result.output


def test_plan_names_each_estimated_price_never_a_dangling_warning(tmp_path):
    config = tmp_path / "gcs.yaml"
    config.write_text("strict: false\nserving:\n  gcs_fault_tolerance:\n    enabled: true\n")
    result = runner.invoke(cli.app, ["plan", "--config", str(config)], env={"COLUMNS": "200"})
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


@pytest.mark.parametrize("width", [60, 80, 120])
def test_plan_cuts_no_figure_at_any_width(width, tmp_path):
    # A GCS cache adds a priced line; a workload adds the capacity table: every table plan prints.
    config = _write(tmp_path, "serving:\n  gcs_fault_tolerance:\n    enabled: true\n")
    workload = ("--isl", "2048", "--osl", "256", "--rate", "2", "--tokens-per-second", "500")
    data = json.loads(_plan_as_typed(200, "--config", config, "--json", *workload).stdout)
    done = _plan_as_typed(width, "--config", config, *workload)
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    missing = [figure for figure in _plan_figures(data) if figure not in done.stdout]
    assert not missing, missing
    tables = [line for line in done.stdout.splitlines() if line.startswith(("┃", "│", "┏", "└"))]
    assert tables and all(len(line) <= width for line in tables)


def test_preflight_and_the_gate_report_cut_nothing_at_60_columns(aws, ec2_quotas, monkeypatch):  # noqa: F811
    ec2_quotas.update({G_AND_VT_QUOTA: 32, STANDARD_QUOTA: 32})
    monkeypatch.setattr(boto3, "Session", StubbedEksSession)
    result = runner.invoke(cli.app, ["preflight"], env={"COLUMNS": "60"})
    assert result.exit_code == 1
    assert "…" not in result.output and "L-DB2E81BA" in result.output
    console = cli.Console(width=60, record=True, highlight=False)
    cli._print_rows(console, [("EFA bytes moved", "185729024123 (0.9999873 of predicted)"),
                              ("NIXL bytes / mean transfer", "185729024 / 59.43361 ms")])
    text = console.export_text()
    assert "…" not in text and "185729024123" in text and "59.43361" in text and "0.9999873" in text


@pytest.mark.parametrize("width", [60, 80, 120])
def test_bench_summary_cuts_no_figure_at_any_width(width):
    # A real run's summary.json (tests/data/bench/runs); the table bench prints after its levels.
    from pathlib import Path

    out = Path(__file__).parent / "data" / "bench" / "runs" / "disaggregated"
    entries = json.loads((out / "summary.json").read_text())
    console = cli.Console(width=width, record=True, highlight=False)
    cli._print_summary(console, out, entries)
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines() if line.startswith(("┃", "│", "┏", "└")))
    for entry in entries:
        if entry["cost_per_accepted_response_usd"] is not None:
            assert f"{entry['cost_per_accepted_response_usd']:.6f}" in text
        assert f"{entry['output_tokens_per_s']:.1f}" in text
    if width < 100:
        assert "concurrency 32" in text  # the list names each level, not a bare "32"
