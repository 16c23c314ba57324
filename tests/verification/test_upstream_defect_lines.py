"""The deployment gate names each upstream defect (``base/upstream_defects.py``) from the line its
emitter prints, first among its reasons, with the field and value to change; from ``ray-llm-eks
verify-logs`` and from the in-cluster gate alike. Lines count only in their emitter's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ray_llm_eks.base import upstream_defects
from ray_llm_eks.cli import app
from ray_llm_eks.verification.evidence import classify, classify_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"

DEFECT_FIXTURES = {
    # file: (the provider the run expected, the defect, the field and value the reason names)
    "vllm-hybrid-host-buffer.log": ("efa", upstream_defects.HYBRID_HOST_BUFFER, "nixl.kv_buffer_device: cuda"),
    "vllm-mamba-conv-layout.log": ("efa", upstream_defects.CONV_STATE_LAYOUT, "VLLM_SSM_CONV_STATE_LAYOUT=DS"),
    "nixl-libfabric-vram-tcp.log": ("tcp", upstream_defects.LIBFABRIC_VRAM_ON_TCP, "nixl.kv_buffer_device: cpu"),
}


def test_every_logged_defect_has_a_fixture():
    assert {d.key for d in upstream_defects.LOGGED} == {d.key for _, d, _ in DEFECT_FIXTURES.values()}


@pytest.mark.parametrize("name", sorted(DEFECT_FIXTURES))
def test_verify_logs_leads_with_the_defect_and_what_to_change(name):
    provider, defect, change = DEFECT_FIXTURES[name]
    result = CliRunner().invoke(app, ["verify-logs", "--json", "--expect-provider", provider, str(FIXTURES / name)])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    first = report["reasons"][0]
    assert f"upstream defect {defect.key}:" in first and "; change: " in first and change in first, report["reasons"]
    assert report["by_source"][str(FIXTURES / name)]["upstream_defects"] == [defect.key]


@pytest.mark.parametrize("name", sorted(DEFECT_FIXTURES))
def test_verify_logs_text_prints_the_defect_first(name):
    provider, defect, _ = DEFECT_FIXTURES[name]
    result = CliRunner().invoke(app, ["verify-logs", "--expect-provider", provider, str(FIXTURES / name)],
                                env={"COLUMNS": "1000"})
    assert result.exit_code == 1
    reasons = [line for line in result.output.split("FAIL", 1)[1].splitlines() if line.startswith("- ")]
    assert reasons[0].startswith(f"- {FIXTURES / name}: upstream defect {defect.key}:"), result.output


def test_the_host_buffer_line_counts_only_after_its_frame():
    """``'list' object has no attribute 'shape'`` can come from anywhere: it names the host-buffer
    defect only when the same process's innermost frame was initialize_host_xfer_buffer."""
    lines = (FIXTURES / "vllm-hybrid-host-buffer.log").read_text().splitlines()
    frame = next(i for i, line in enumerate(lines) if "in initialize_host_xfer_buffer" in line)
    other = lines[frame].replace("initialize_host_xfer_buffer", "register_kv_caches")
    assert classify([*lines[:frame], other, *lines[frame + 1:]]).upstream_defects == []
    # Another process's frame does not count for this one's exception.
    elsewhere = lines[frame].replace("pid=377", "pid=999")
    assert classify([*lines[:frame], elsewhere, *lines[frame + 1:]]).upstream_defects == []
    assert classify(lines).upstream_defects == [upstream_defects.HYBRID_HOST_BUFFER.key]


@pytest.mark.parametrize("line", [
    # The same words quoted inside another line are not the emitter's line.
    "INFO 12-06 09:12:40 [server.py:1] request failed: AssertionError: 3-read Mamba conv transfer requires DS conv "
    "state layout. Set VLLM_SSM_CONV_STATE_LAYOUT=DS",
    'W1206 09:20:04.918359 31655 app.py:1] saw "E1206 09:20:04.918359   31655 libfabric_backend.cpp:696] Memory '
    'type 1 is not supported by libfabric backend."',
    "Memory type 1 is not supported by libfabric backend.",
])
def test_a_defect_line_counts_only_in_its_emitters_shape(line):
    assert classify([line]).upstream_defects == []


def test_the_lines_match_with_ray_and_vllm_prefixes_and_colour():
    line = ("\x1b[36m(ServeReplica:llm:Prefill:qwen3_5-9b pid=377)\x1b[0m (EngineCore_DP0 pid=401) "
            "AssertionError: 3-read Mamba conv transfer requires DS conv state layout. Set VLLM_SSM_CONV_STATE_LAYOUT=DS")
    assert classify([line]).upstream_defects == [upstream_defects.CONV_STATE_LAYOUT.key]


def test_a_defect_leads_even_when_a_backend_failure_is_found_too():
    lines = [*(FIXTURES / "efa-provider-without-device.log").read_text().splitlines(),
             *(FIXTURES / "vllm-mamba-conv-layout.log").read_text().splitlines()]
    report = classify_logs({"w": "\n".join(lines)})
    assert report["reasons"][0].startswith("w: upstream defect vllm-mamba-conv-layout"), report["reasons"]


@pytest.mark.integration
@pytest.mark.parametrize("name", ["vllm-hybrid-host-buffer.log", "vllm-mamba-conv-layout.log"])
def test_the_in_cluster_gate_leads_a_failed_deploy_with_the_defect(in_cluster_copy, fake, name):
    """The engines die at KV registration, so Serve's deploy fails: the gate (run from its archive,
    as in the cluster) reads the worker logs and names the defect before the deploy failure."""
    from fake_cluster import Scenario, run_gate

    _, defect, change = DEFECT_FIXTURES[name]
    fake.scenario = Scenario(serve_final=("DEPLOY_FAILED", True), worker_log=(FIXTURES / name).read_text().splitlines())
    result = run_gate(in_cluster_copy, fake, fake.gate_settings(deadline_seconds=60))
    report = json.loads(result.stdout)
    assert report["verdict"] == "fail"
    assert f"upstream defect {defect.key}:" in report["reasons"][0] and change in report["reasons"][0], report["reasons"]
    assert "failed to deploy the spec's config" in report["reasons"][-1]
