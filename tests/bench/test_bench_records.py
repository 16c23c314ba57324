"""What ``bench`` records beside latency: per-token cost, utilization per level, the model and its licence.

The recorded runs in ``tests/data/bench/levels`` are real (``record_per_token_level.py``: the
command line and AIPerf against GuideLLM's mock server, the gate's EFA counter reader, a DCGM
page): every figure of their ``summary.json`` is recomputed here from AIPerf's own per-request
records and from what the sources served. The live tests read the real counter reader and a DCGM
page on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from ray_llm_eks import cli
from ray_llm_eks.base.instance_types import INSTANCE_TYPES
from ray_llm_eks.base.models import KNOWN_TERMS
from ray_llm_eks.bench import bundle, cost, runner, utilization
from ray_llm_eks.bench.runner import BenchError, BenchSettings
from ray_llm_eks.cdk8s_charts.bench import MAX_TRACE_BYTES
from ray_llm_eks.config import load_config

from utilization_servers import VETH_COUNTERS, CounterNode, DcgmServer, dcgm_page

LEVELS = Path(__file__).resolve().parents[1] / "data" / "bench" / "levels"
ROOT = Path(__file__).resolve().parents[2]
GPU_KEYS = ("gpu_source", "gpu_utilization_pct", "gpu_memory_used_mib", "gpu_memory_used_fraction")
EFA_KEYS = ("efa_source", "efa_bytes_per_node", "efa_gbps_per_node", "efa_line_rate_gbps_per_node",
            "efa_line_rate_share_max")
cli_runner = CliRunner()


def recorded(name: str) -> tuple[dict, dict, list[dict]]:
    """run.json, the one summary entry, and AIPerf's measured requests of a recorded run."""
    run = json.loads((LEVELS / name / runner.RUN_FILE).read_text())
    (entry,) = json.loads((LEVELS / name / runner.SUMMARY_FILE).read_text())
    rows = [json.loads(line) for line in (LEVELS / name / entry["raw"] / "profile_export.jsonl").read_text().splitlines()]
    return run, entry, [r for r in rows if r["metadata"]["benchmark_phase"] == "profiling"]


def settings_of(run: dict) -> BenchSettings:
    return BenchSettings.from_json({**run["settings"], "model_record": run["model"]})


# --- per-token pricing --------------------------------------------------------------------------

def test_a_per_token_run_costs_the_tokens_it_served():
    run, entry, rows = recorded("per-token")
    prices = run["settings"]["price_per_million_input_tokens_usd"], run["settings"]["price_per_million_output_tokens_usd"]
    assert prices == (0.15, 0.6)
    served = [r for r in rows if not r.get("error")]
    input_tokens = sum(r["metrics"]["input_sequence_length"]["value"] for r in served)
    output_tokens = sum(r["metrics"]["output_sequence_length"]["value"] for r in served)
    assert (entry["input_tokens"], entry["output_tokens"]) == (input_tokens, output_tokens) and input_tokens > 0
    bill = (input_tokens * prices[0] + output_tokens * prices[1]) / 1e6
    assert entry["price_basis"] == "per-token" and entry["hourly_cost_usd"] is None
    assert entry["accepted_responses"] == 8
    assert entry["cost_per_accepted_response_usd"] == pytest.approx(bill / 8, rel=1e-12)
    assert entry["cost_per_million_output_tokens_usd"] == pytest.approx(bill / output_tokens * 1e6, rel=1e-12)


def test_a_per_token_run_without_a_config_is_a_managed_endpoint():
    run, _, _ = recorded("per-token")
    deployment = run["settings"]["deployment"]
    assert (deployment["kind"], deployment["topology"], deployment["nodes"]) == ("managed-endpoint", None, None)
    assert run["settings"]["hourly_cost_usd"] is None
    assert run["model"] == {"source": None, "revision": None, "served_name": "tiny", "image": None, "image_digest": None,
                            "license": {"licence": "apache-2.0", "gated": False, "commercial_use": "unknown",
                                        "source": run["model"]["license"]["source"],
                                        "callout": run["model"]["license"]["callout"]}}
    assert "--license" in run["model"]["license"]["source"] and "model_record" not in run["settings"]


def test_a_managed_endpoint_serving_a_table_model_carries_the_tables_licence():
    """The model table is the one place a licence is written: an endpoint's model id that is a
    table model's gets that entry, and restating it with --license is refused."""
    from ray_llm_eks.base.models import known_terms
    from ray_llm_eks.cli.bench import _model_record

    record = _model_record(None, "us-east-1", managed=True, served_name="Qwen/Qwen3.5-9B", stated=None)
    assert record["license"] == known_terms("Qwen/Qwen3.5-9B").record()
    with pytest.raises(ValueError, match="already states"):
        _model_record(None, "us-east-1", managed=True, served_name="Qwen/Qwen3.5-9B", stated="apache-2.0")


def test_an_hourly_run_keeps_its_formula_and_says_its_basis():
    run, entry, rows = recorded("utilization")
    hourly = run["settings"]["hourly_cost_usd"]
    assert entry["price_basis"] == "hourly" and hourly > 0
    assert entry["cost_per_accepted_response_usd"] == hourly * entry["duration_s"] / 3600 / entry["accepted_responses"]
    assert entry["input_tokens"] == sum(r["metrics"]["input_sequence_length"]["value"] for r in rows if not r.get("error"))


@pytest.mark.parametrize("name", ["per-token", "utilization"])
def test_the_recorded_entry_is_what_summarize_level_makes_of_aiperf_s_files(name):
    run, entry, _ = recorded(name)
    again = runner.summarize_level(LEVELS / name / entry["raw"], settings_of(run), entry["concurrency"])
    # Recorded before the per-class figures: a run without a threshold or a scrape has them null.
    added = set(again) - set(entry)
    assert added <= {"by_prefill_path", "pd_requests"} and all(again[key] is None for key in added)
    assert {k: v for k, v in again.items() if k not in {"utilization", *added}} \
        == {k: v for k, v in entry.items() if k != "utilization"}
    # Summarized again without a meter: every utilization figure is absent, none is 0.
    assert all(again["utilization"][key] is None for key in GPU_KEYS + EFA_KEYS)


def test_the_per_token_formulas():
    assert cost.usd_of_tokens(2_000_000, 500_000, 0.15, 0.6) == pytest.approx(0.3 + 0.3)
    assert cost.usd_per_accepted_response_per_token(2_000_000, 500_000, 0.15, 0.6, 4) == pytest.approx(0.15)
    assert cost.usd_per_million_output_tokens_per_token(2_000_000, 500_000, 0.15, 0.6) == pytest.approx(1.2)
    assert cost.usd_per_accepted_response_per_token(10, 10, 1.0, 1.0, 0) is None
    assert cost.usd_per_million_output_tokens_per_token(10, 0, 1.0, 1.0) is None


def settings(**overrides) -> BenchSettings:
    return BenchSettings(**{"url": "http://127.0.0.1:1", "model": "m", "tokenizer": "t", **overrides})


@pytest.mark.parametrize(("overrides", "field", "says"), [
    ({"price_per_million_input_tokens_usd": 0.1}, "price_per_million_output_tokens_usd", "missing"),
    ({"price_per_million_output_tokens_usd": 0.1}, "price_per_million_input_tokens_usd", "missing"),
    ({"price_per_million_input_tokens_usd": 0.0, "price_per_million_output_tokens_usd": 1.0},
     "price_per_million_input_tokens_usd", "must be a positive price (got 0.0)"),
    ({"price_per_million_input_tokens_usd": 0.1, "price_per_million_output_tokens_usd": 1.0, "hourly_cost_usd": 3.0},
     "hourly_cost_usd", "per hour or per token, not both"),
    ({"efa_counters_urls": {"prefill-0": "10.0.0.1:9475"}}, "efa_counters_urls", "not NODE=URL"),
    ({"gpu_sample_interval_s": 0}, "gpu_sample_interval_s", "positive"),
])
def test_bad_price_and_source_settings_are_refused_naming_the_field(overrides, field, says):
    with pytest.raises(BenchError) as caught:
        settings(**overrides)
    assert [name for name, _ in caught.value.problems] == [field] and says in str(caught.value)


def test_the_new_settings_round_trip_through_json_for_the_in_cluster_job():
    original = settings(price_per_million_input_tokens_usd=0.1, price_per_million_output_tokens_usd=0.4,
                        efa_counters_urls={"prefill-0": "http://10.0.1.7:9475/counters"},
                        gpu_metrics_urls={"decode-0": "http://10.0.1.9:9400/metrics"},
                        nodes={"prefill-0": {"role": "prefill", "instance_type": "p5.48xlarge", "efa_line_rate_gbps": 3200.0}},
                        model_record={"source": "s", "license": None})
    assert BenchSettings.from_json(json.loads(json.dumps(original.to_json()))) == original
    assert original.price_basis == "per-token" and settings(hourly_cost_usd=1.0).price_basis == "hourly"
    assert settings().price_basis is None


def test_run_json_carries_the_model_block_at_the_top_not_in_the_settings():
    model = {"source": "Qwen/Qwen3.5-9B", "revision": None, "served_name": "qwen", "image": "i", "image_digest": None,
             "license": KNOWN_TERMS["qwen/qwen3.5-9b"].record()}
    record = runner.run_record(settings(model_record=model), 1.0)
    assert record["model"] == model and "model_record" not in record["settings"]


# --- utilization --------------------------------------------------------------------------------

def test_the_recorded_utilization_is_what_the_sources_served():
    run, entry, _ = recorded("utilization")
    u = entry["utilization"]
    # The DCGM pages (record_per_token_level.GPUS): constant, so the mean and maxima are exact.
    assert (u["gpu_source"], u["gpu_utilization_pct"]) == ("dcgm", (62 + 58 + 35 + 41) / 4)
    assert u["gpu_memory_used_mib"] == max(40100 + 40200, 43000 + 42800)
    assert u["gpu_memory_used_fraction"] == pytest.approx((43000 + 42800) / (43000 + 42800 + 2600 + 2800))
    assert u["gpu_samples"] >= 4  # both nodes at the start and the end
    # EFA: prefill's counters rose as sending (RDMA read responses), decode's as receiving.
    sent, received = u["efa_bytes_per_node"]["prefill-0"]["sent"], u["efa_bytes_per_node"]["decode-0"]["received"]
    assert sent == received > 0 and sent % 3_000_000 == 0
    assert u["efa_bytes_per_node"]["prefill-0"]["received"] == u["efa_bytes_per_node"]["decode-0"]["sent"] == 0
    for node in ("prefill-0", "decode-0"):
        assert u["efa_gbps_per_node"][node] == pytest.approx(sent * 8 / u["window_s"] / 1e9, rel=1e-3)
    # Line rate: the instance table's EFA bandwidth of the type the config gives each role.
    specs = load_config(ROOT / "examples" / "benchmark" / "disaggregated.yaml").specs()
    for node, role in (("prefill-0", "prefill"), ("decode-0", "decode")):
        instance_type = specs.serving.pool(role).instance_type
        assert u["nodes"][node] == {"role": role, "instance_type": instance_type}
        assert u["efa_line_rate_gbps_per_node"][node] == INSTANCE_TYPES[instance_type].efa_gbps > 0
    assert u["efa_line_rate_share_max"] == pytest.approx(
        max(u["efa_gbps_per_node"][n] / u["efa_line_rate_gbps_per_node"][n] for n in u["nodes"]))
    assert run["settings"]["nodes"]["prefill-0"]["efa_line_rate_gbps"] == u["efa_line_rate_gbps_per_node"]["prefill-0"]
    assert u["window_s"] >= entry["duration_s"]  # the window holds AIPerf's whole run


@pytest.fixture
def sources(tmp_path):
    nodes = {"prefill-0": CounterNode(tmp_path / "prefill"), "decode-0": CounterNode(tmp_path / "decode")}
    pages = {"prefill-0": DcgmServer(dcgm_page([{"util": 90, "used": 30000, "free": 10000}])),
             "decode-0": DcgmServer(dcgm_page([{"util": 20, "used": 20000, "free": 20000},
                                               {"util": 40, "used": 21000, "free": 19000}]))}
    yield nodes, pages
    for server in [*nodes.values(), *pages.values()]:
        server.stop()


FACTS = {"prefill-0": {"role": "prefill", "instance_type": "p5.48xlarge", "efa_line_rate_gbps": 3200.0},
         "decode-0": {"role": "decode", "instance_type": "p5.48xlarge", "efa_line_rate_gbps": 3200.0}}


def test_a_level_meter_reads_the_real_counter_reader_before_and_after_and_samples_dcgm(sources):
    nodes, pages = sources
    nodes["prefill-0"].set(tx_bytes=10**9, rdma_read_resp_bytes=5 * 10**9)  # before the level: not counted
    meter = utilization.LevelMeter({n: c.url for n, c in nodes.items()}, {n: p.url for n, p in pages.items()}, FACTS,
                                   gpu_interval_s=0.05)
    with meter:
        nodes["prefill-0"].add(tx_bytes=1000, send_bytes=1000, rdma_read_resp_bytes=7_000_000)
        nodes["decode-0"].add(rx_bytes=2000, recv_bytes=2000, rdma_read_bytes=7_000_000)
        pages["decode-0"].page = dcgm_page([{"util": 60, "used": 25000, "free": 15000},
                                            {"util": 80, "used": 26000, "free": 14000}])
    u = meter.record()
    assert u["efa_bytes_per_node"] == {"prefill-0": {"sent": 7_000_000, "received": 0},
                                       "decode-0": {"sent": 0, "received": 7_000_000}}
    assert u["efa_gbps_per_node"]["decode-0"] == pytest.approx(7_000_000 * 8 / meter.window_s / 1e9)
    assert u["efa_line_rate_share_max"] == pytest.approx(7_000_000 * 8 / meter.window_s / 1e9 / 3200)
    # Memory: the largest node total seen (decode after the change), and its share of the frame buffer.
    assert u["gpu_memory_used_mib"] == 51000 and u["gpu_memory_used_fraction"] == pytest.approx(0.75)
    assert pages["decode-0"].reads >= 2 and pages["prefill-0"].reads >= 2
    assert 20 <= u["gpu_utilization_pct"] <= 90 and u["gpu_source"] == "dcgm" and u["efa_source"] == "efa-counters"
    assert u["nodes"]["prefill-0"] == {"role": "prefill", "instance_type": "p5.48xlarge"} and u["notes"] == []


def test_without_sources_every_utilization_figure_is_null_never_zero():
    meter = utilization.LevelMeter({}, {}, {})
    with meter:
        pass
    u = meter.record()
    assert all(u[key] is None for key in GPU_KEYS + EFA_KEYS)
    assert u["notes"] == ["no --efa-counters-url: EFA figures not measured",
                          "no --gpu-metrics-url: GPU figures not measured"]


def test_an_unreadable_node_has_no_figure_and_a_note_and_the_others_are_read(sources, tmp_path):
    nodes, _ = sources
    closed = CounterNode(tmp_path / "gone")
    closed.stop()
    meter = utilization.LevelMeter({"prefill-0": nodes["prefill-0"].url, "decode-0": closed.url},
                                   {"decode-0": closed.url.replace("/counters", "/metrics")}, FACTS, timeout_s=2)
    with meter:
        nodes["prefill-0"].add(tx_bytes=4096)
    u = meter.record()
    assert u["efa_bytes_per_node"] == {"prefill-0": {"sent": 4096, "received": 0}}
    assert all(u[key] is None for key in GPU_KEYS)
    assert any(n.startswith("decode-0: EFA counters unreadable before the level") for n in u["notes"])
    assert any(n.startswith("decode-0: GPU metrics unreadable") for n in u["notes"])


def test_veth_counters_as_on_the_twin_get_bytes_but_no_line_rate(tmp_path):
    node = CounterNode(tmp_path / "twin", device="veth0", names=VETH_COUNTERS)
    try:
        meter = utilization.LevelMeter({"prefill": node.url}, {}, {"prefill": {**FACTS["prefill-0"]}})
        with meter:
            node.add(tx_bytes=123_456, rx_bytes=789)
        u = meter.record()
    finally:
        node.stop()
    assert u["efa_bytes_per_node"] == {"prefill": {"sent": 123_456, "received": 789}}
    assert u["efa_line_rate_gbps_per_node"] == {"prefill": None} and u["efa_line_rate_share_max"] is None
    assert all(u[key] is None for key in GPU_KEYS)
    assert any("not an EFA port's" in note for note in u["notes"])
    assert u["efa_source"] == "interface-counters"  # compare does not take them for EFA's


@pytest.mark.parametrize(("page", "says"), [
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} NaN\n', "not a count"),
    ('DCGM_FI_DEV_FB_USED{gpu="0"} -1\n', "not a count"),
    ("vllm:num_requests_running 3\n", "none of DCGM_FI_DEV_GPU_UTIL"),
])
def test_a_page_that_is_not_dcgm_s_counts_is_refused(page, says):
    with pytest.raises(ValueError, match=says):
        utilization.parse_dcgm(page)


# --- the in-cluster bundle ----------------------------------------------------------------------

@pytest.mark.integration
def test_the_utilization_reader_imports_in_the_cluster_layout(tmp_path):
    """The ConfigMap's files as the pod mounts them: the gate's modules and the base layer's
    histogram beside the bench's, each imported from there (not from the repository)."""
    package = tmp_path / bundle.IN_CLUSTER_PACKAGE
    package.mkdir()
    for name, text in bundle.files().items():
        (package / name).write_text(text)
    code = (f"import {bundle.IN_CLUSTER_PACKAGE}.utilization as u, {bundle.IN_CLUSTER_PACKAGE}.runner as r; "
            "print(u.efa.__name__, u.metrics.__name__, u.reads.__name__, r.histogram.__name__)")
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [f"{bundle.IN_CLUSTER_PACKAGE}.{m}" for m in ("efa", "metrics", "reads",
                                                                                  "histogram")]


def test_the_program_and_the_largest_trace_fit_in_one_config_map():
    program = sum(len(text.encode()) for text in bundle.files().values())
    settings_json = len(json.dumps(settings().to_json(), indent=2).encode())
    assert program + MAX_TRACE_BYTES + 4 * settings_json < 1 << 20


# --- the command line ---------------------------------------------------------------------------

def emitted_settings(*args: str) -> dict:
    result = cli_runner.invoke(cli.app, ["bench", "--emit-job", "--out", "/tmp/unused", *args])
    assert result.exit_code == 0, result.output
    documents = [d for d in yaml.safe_load_all(result.stdout.split("kubectl apply")[0]) if d]
    return json.loads(documents[0]["data"]["bench.json"])


def test_the_job_carries_per_token_prices_sources_and_the_model_block():
    data = emitted_settings("--price-per-million-input-tokens", "0.2", "--price-per-million-output-tokens", "0.8",
                            "--config", str(ROOT / "examples" / "benchmark" / "disaggregated.yaml"),
                            "--efa-counters-url", "prefill-0=http://10.0.1.7:9475/counters",
                            "--gpu-metrics-url", "decode-0=http://10.0.1.9:9400/metrics")
    assert (data["price_per_million_input_tokens_usd"], data["price_per_million_output_tokens_usd"]) == (0.2, 0.8)
    assert data["hourly_cost_usd"] is None and data["deployment"]["kind"] == "deployment"
    deployment = load_config(ROOT / "examples" / "benchmark" / "disaggregated.yaml")
    specs = deployment.specs()
    decode_type = specs.serving.pool("decode").instance_type
    assert data["nodes"]["decode-0"] == {"role": "decode", "instance_type": decode_type,
                                         "efa_line_rate_gbps": float(INSTANCE_TYPES[decode_type].efa_gbps) or None}
    assert data["efa_counters_urls"] == {"prefill-0": "http://10.0.1.7:9475/counters"}
    model = data["model_record"]
    assert model["source"] == specs.serving.model.source and model["served_name"] == specs.serving.model.served_name
    assert model["image"] == specs.serving.image.uri(deployment.region) and model["image"].startswith(
        str(specs.serving.image.repository_in(deployment.region)))
    assert model["image_digest"] == specs.serving.image.digest
    assert model["license"] == KNOWN_TERMS[specs.serving.model.source.lower()].record()


def test_a_managed_endpoint_s_job_sends_to_its_url_and_needs_one(tmp_path):
    prices = ["--price-per-million-input-tokens", "0.1", "--price-per-million-output-tokens", "0.4",
              "--model", "provider/model", "--tokenizer", "Qwen/Qwen3.5-9B"]
    data = emitted_settings(*prices, "--url", "https://endpoint.example.com", "--license", "apache-2.0")
    assert (data["url"], data["deployment"]["kind"], data["model_record"]["license"]["licence"]) == (
        "https://endpoint.example.com", "managed-endpoint", "apache-2.0")
    assert data["model_record"]["source"] is None and data["tokenizer_revision"] is None
    result = cli_runner.invoke(cli.app, ["bench", "--emit-job", "--out", str(tmp_path), *prices])
    assert result.exit_code == 2 and "--url: a managed endpoint has no cluster address" in result.output


def test_an_hourly_job_is_a_deployment_and_unnamed_roles_have_no_facts():
    data = emitted_settings("--efa-counters-url", "node-a=http://10.0.1.7:9475/counters")
    assert data["deployment"]["kind"] == "deployment" and data["price_per_million_input_tokens_usd"] is None
    assert data["nodes"] == {"node-a": {"role": None, "instance_type": None, "efa_line_rate_gbps": None}}


@pytest.mark.parametrize(("args", "message"), [
    (["--price-per-million-input-tokens", "0.1", "--price-per-million-output-tokens", "0.2"],
     "--model and --tokenizer: a managed endpoint (per-token prices without --config) needs both"),
    (["--price-per-million-input-tokens", "0.1", "--model", "m", "--tokenizer", "t"],
     "--price-per-million-output-tokens: missing"),
    (["--price-per-million-input-tokens", "0.1", "--price-per-million-output-tokens", "0.2", "--model", "m",
      "--tokenizer", "t", "--hourly-cost-usd", "4"], "--hourly-cost-usd: a run is priced per hour or per token"),
    (["--efa-counters-url", "prefill-0"], "--efa-counters-url: not NODE=URL (got 'prefill-0')"),
    (["--gpu-metrics-url", "a=http://x", "--gpu-metrics-url", "a=http://y"], "--gpu-metrics-url: node 'a' named twice"),
    (["--license", "mit"], "--license: the model table already states Qwen/Qwen3.5-9B's licence (apache-2.0)"),
])
def test_bad_record_flags_exit_2_naming_the_flag(tmp_path, args, message):
    result = cli_runner.invoke(cli.app, ["bench", "--url", "http://127.0.0.1:1", "--out", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_the_summary_table_has_a_utilization_column_that_is_never_cut():
    _, entry, _ = recorded("utilization")
    _, managed, _ = recorded("per-token")
    for width in (200, 80):
        console = Console(width=width, record=True, force_terminal=False)
        cli.bench._print_summary(console, Path("out"), [entry, managed])
        text = console.export_text()
        u = entry["utilization"]
        cell = f"49% / {max(u['efa_gbps_per_node'].values()):.3f} ({u['efa_line_rate_share_max']:.1%})"
        # A figure never wraps: whole in the wide table, and in the turned one at 80 columns.
        assert cell in text and "n/a / n/a" in text, text


# --- by prefill path: a mixed workload against a threshold -------------------------------------------

MIXED = Path(__file__).resolve().parents[1] / "data" / "bench" / "runs"
"""``record_mixed.py``'s two runs: ``mixed-disaggregated`` (threshold 64, the decode counter scraped) and
``mixed-colocated`` (no threshold), AIPerf's per-request records of each level kept under ``raw/``."""


def mixed(name: str) -> tuple[dict, list[dict]]:
    run = json.loads((MIXED / name / runner.RUN_FILE).read_text())
    return run, json.loads((MIXED / name / runner.SUMMARY_FILE).read_text())


def measured(run_dir: Path, entry: dict) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / entry["raw"] / "profile_export.jsonl").read_text().splitlines()]
    return [r for r in rows if r["metadata"]["benchmark_phase"] == "profiling"]


def prompt_tokens(record: dict) -> int:
    return record["metrics"]["input_sequence_length"]["value"]


def test_a_mixed_run_records_its_mix_its_means_and_the_configuration_s_threshold():
    run, _ = mixed("mixed-disaggregated")
    settings = run["settings"]
    assert (settings["mix"], settings["min_prompt_tokens"]) == ("8,16:60;160,16:40", 64)
    assert (settings["isl"], settings["osl"]) == (69, 16)  # 0.6 x 8 + 0.4 x 160 = 68.8; 16
    assert settings["deployment"]["topology"] == "disaggregated"


def test_each_level_s_classes_add_up_to_its_requests_split_by_the_server_s_prompt_count():
    run_dir = MIXED / "mixed-disaggregated"
    _, summary = mixed("mixed-disaggregated")
    for entry in summary:
        split, rows = entry["by_prefill_path"], measured(run_dir, entry)
        assert split["min_prompt_tokens"] == 64 and split["unclassified"] == 0
        assert split["local"]["requests"] + split["remote"]["requests"] == entry["requests_ok"] + entry["requests_failed"]
        assert split["local"]["requests"] == sum(1 for r in rows if prompt_tokens(r) < 64) > 0
        assert split["remote"]["requests"] == sum(1 for r in rows if prompt_tokens(r) >= 64) > 0
        assert split["local"]["prompt_tokens"]["max"] < 64 <= split["remote"]["prompt_tokens"]["min"]
        assert split["local"]["share"] + split["remote"]["share"] == pytest.approx(1.0)
        # The class follows the server's count (after the chat template), not the pair AIPerf drew:
        # the mock's count of a 160-token prompt is not 160.
        assert {prompt_tokens(r) for r in rows} - {8, 160}
        assert "usage.prompt_tokens" in split["prompt_tokens_source"]


def test_a_prompt_of_exactly_the_threshold_takes_the_prefill_leg():
    """The decode replica prefills locally only below the threshold (``pd/conditional.py``): a
    threshold equal to a recorded count puts that request in ``remote``, one more token in ``local``."""
    _, summary = mixed("mixed-disaggregated")
    rows = measured(MIXED / "mixed-disaggregated", summary[0])
    counts = sorted({prompt_tokens(r) for r in rows})
    boundary = counts[len(counts) // 2]
    at = sum(1 for r in rows if prompt_tokens(r) == boundary)
    split = runner.by_prefill_path(rows, boundary)
    above = runner.by_prefill_path(rows, boundary + 1)
    assert split["remote"]["prompt_tokens"]["min"] == boundary and split["local"]["prompt_tokens"]["max"] < boundary
    assert above["local"]["requests"] == split["local"]["requests"] + at
    assert above["local"]["prompt_tokens"]["max"] == boundary


def test_one_class_holding_every_request_has_aiperf_s_own_percentiles():
    """A threshold of one token puts every request in ``remote``: its percentiles, interpolated here,
    are AIPerf's of the whole level (``profile_export_aiperf.json``)."""
    run_dir = MIXED / "mixed-disaggregated"
    _, summary = mixed("mixed-disaggregated")
    for entry in summary:
        aggregate = json.loads((run_dir / entry["raw"] / "profile_export_aiperf.json").read_text())
        every = runner.by_prefill_path(measured(run_dir, entry), 1)
        assert every["local"]["requests"] == 0 and every["local"]["ttft_ms"] == {"p50": None, "p90": None, "p99": None}
        for key, metric in (("ttft_ms", "time_to_first_token"), ("itl_ms", "inter_token_latency")):
            for p in runner.PATH_PERCENTILES:
                assert every["remote"][key][p] == pytest.approx(aggregate[metric][p], rel=1e-9), (key, p)


def test_the_decode_replica_s_counts_are_the_per_series_deltas_aiperf_scraped():
    run_dir = MIXED / "mixed-disaggregated"
    _, summary = mixed("mixed-disaggregated")
    for entry in summary:
        exported = json.loads((run_dir / entry["raw"] / "server_metrics_export.json").read_text())
        series = exported["metrics"]["ray_rayllmeks_pd_requests"]["series"]
        assert exported["metrics"]["ray_rayllmeks_pd_requests"]["type"] == "counter" and len(series) == 4
        for path in ("local", "remote"):
            assert entry["pd_requests"][path] == sum(s["stats"]["total"] for s in series
                                                     if s["labels"]["prefill"] == path) > 0
        assert entry["pd_requests"]["metric"] == runner.PD_REQUESTS_SERIES and entry["pd_requests"]["series"] == 4


def test_a_run_without_a_threshold_or_a_scrape_has_neither_figure():
    _, summary = mixed("mixed-colocated")
    assert all(e["by_prefill_path"] is None and e["pd_requests"] is None for e in summary)


@pytest.mark.parametrize("name", ["mixed-disaggregated", "mixed-colocated"])
def test_the_recorded_mixed_entry_is_what_summarize_level_makes_of_aiperf_s_files(name):
    run, summary = mixed(name)
    for entry in summary:
        again = runner.summarize_level(MIXED / name / entry["raw"], settings_of(run), entry["concurrency"])
        assert {k: v for k, v in again.items() if k not in ("utilization", "server")} \
            == {k: v for k, v in entry.items() if k not in ("utilization", "server")}


def test_bench_prints_a_row_per_level_and_class():
    from ray_llm_eks.cli.bench import _print_summary

    _, summary = mixed("mixed-disaggregated")
    console = Console(width=200, record=True)
    _print_summary(console, MIXED / "mixed-disaggregated", summary)
    text = console.export_text()
    assert "by prefill path: local < 64 prompt tokens (the server's count) <= remote" in text
    for entry in summary:
        for path in ("local", "remote"):
            c = entry["by_prefill_path"][path]
            ttft = " / ".join(f"{c['ttft_ms'][p]:.1f}" for p in ("p50", "p90", "p99"))
            cells = [str(entry["concurrency"]), path, f"{c['requests']} ({c['share']:.0%})", ttft,
                     f"{c['itl_ms']['p50']:.2f}", str(entry["pd_requests"][path])]
            assert any([cell.strip() for cell in line.split("│")[1:-1]] == cells for line in text.splitlines()), cells
