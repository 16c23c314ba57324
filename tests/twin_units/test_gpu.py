"""The GPU profile offline (part of `make test`): what it renders and changes, and its command's refusals.

The profile itself needs one NVIDIA GPU (docs/twin.md, "The GPU profile", records each run); here
the reference deployment is rendered as ``prepare`` renders it, and the profile's changes are
checked value by value against that render.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from ray_llm_eks import cli
from ray_llm_eks.twin import gpu, gpu_profile, render, tiny_model
from ray_llm_eks.twin.run import DEFAULT_CONFIG as TWIN_CONFIG

REFERENCE = gpu.DEFAULT_CONFIG
ADDRESSES = {"head": "127.0.0.2", "prefill": "127.0.0.3", "decode": "127.0.0.4"}
PATHS = gpu_profile.Paths(model="/gpu/model", library_path="/gpu/venv/lib/mpich", hf_home="/gpu/hf", preload="")
runner = CliRunner()


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """The reference (Qwen3.5-9B) as ``prepare`` renders it: the tiny hybrid, disaggregated."""
    tiny = render.tiny_config(REFERENCE, tmp_path_factory.mktemp("prepared"), runs_hybrid=True)
    return tiny, render.render(tiny.path, "disaggregated")


def test_the_cpu_twin_of_a_hybrid_model_runs_the_dense_tiny_and_says_why(tmp_path):
    tiny = render.tiny_config(REFERENCE, tmp_path, runs_hybrid=False)
    assert (tiny.configured_kind, tiny.kind, tiny.configured_model) == ("hybrid", "dense", "Qwen/Qwen3.5-9B")
    assert tiny.notes == (render.HYBRID_ON_CPU,) and "make twin-gpu" in render.HYBRID_ON_CPU
    model = yaml.safe_load(tiny.path.read_text())["model"]
    assert model["source"] == tiny_model.SOURCES["dense"] and model["architecture"] == tiny_model.ARCHITECTURE


def test_the_twins_own_configuration_is_unchanged_by_the_derivation(tmp_path):
    tiny = render.tiny_config(TWIN_CONFIG, tmp_path, runs_hybrid=False)
    original = yaml.safe_load(TWIN_CONFIG.read_text())
    assert tiny.notes == () and yaml.safe_load(tiny.path.read_text()) == original


def test_prepare_keeps_the_hybrid_and_renders_its_kv_path(hybrid):
    tiny, charts = hybrid
    assert tiny.kind == tiny.configured_kind == "hybrid" and tiny.notes == ()
    service = next(o for o in charts[render.RAYSERVICE_CHART] if o["kind"] == "RayService")
    serve = yaml.safe_load(service["spec"]["serveConfigV2"])
    configs = [serve["applications"][0]["args"][f"{role}_config"] for role in ("prefill", "decode")]
    for llm in configs:
        transfer = llm["engine_kwargs"]["kv_transfer_config"]
        # The hybrid KV path as the reference renders it (docs/kv-path.md): GPU memory over LIBFABRIC.
        assert transfer["kv_buffer_device"] == "cuda"
        assert transfer["kv_connector_extra_config"]["backends"] == ["LIBFABRIC"]
    workers = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    env = {e["name"]: e.get("value") for e in workers[0]["template"]["spec"]["containers"][0]["env"]}
    assert env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"


@pytest.mark.parametrize("keep_libfabric", [False, True])
def test_the_gpu_profile_changes_what_it_lists(hybrid, keep_libfabric):
    _, charts = hybrid
    deployment = gpu_profile.gpu_deployment(charts[render.RAYSERVICE_CHART], charts[render.VERIFICATION_CHART],
                                            ADDRESSES, PATHS, hybrid=True, keep_libfabric=keep_libfabric)
    for role in ("prefill", "decode"):
        llm = deployment.serve_config["applications"][0]["args"][f"{role}_config"]
        engine = llm["engine_kwargs"]
        assert "accelerator_type" not in llm and llm["model_loading_config"]["model_source"] == "/gpu/model"
        assert engine["gpu_memory_utilization"] == gpu_profile.ENGINE_MEMORY_SHARE
        assert engine["language_model_only"] is True and engine["gdn_prefill_backend"] == "triton"
        transfer = engine["kv_transfer_config"]
        assert transfer["kv_buffer_device"] == "cuda"  # as rendered: never the host buffer for a hybrid
        backends = transfer["kv_connector_extra_config"]["backends"]
        assert backends == (["LIBFABRIC"] if keep_libfabric else ["UCX"])
        node = deployment.nodes[role]
        assert node.env["FI_PROVIDER"] == "tcp" and node.env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
        assert ("UCX_TLS" in node.env) is not keep_libfabric
        assert node.address == ADDRESSES[role] and node.metrics_port == gpu_profile.METRICS_PORTS[role]
    assert deployment.serve_config["http_options"]["location"] == "HeadOnly"
    assert deployment.gate_settings["openai_url"] == "http://127.0.0.2:8000"
    assert bool(deployment.notes) is not keep_libfabric
    listed = " ".join(what for what, _ in gpu_profile.GPU_CHANGES)
    for change in ("model_source", "accelerator_type", "gpu_memory_utilization", "language_model_only",
                   "gdn_prefill_backend", "HeadOnly", "UCX", "FI_PROVIDER", "object-store-memory"):
        assert change in listed


def test_only_the_profiles_own_backend_change_is_explained():
    ucx = {"notes": ["backend UCX (UCX_TLS tcp,cuda_copy): the rendered kv_buffer_device is cuda"],
           "gate": {"reasons": [f"transport: decode-0: {gpu.PROFILE_REASON}", "probe 1 failed: HTTP 500"]}}
    assert gpu.unexplained_reasons(ucx, keep_libfabric=False) == ["probe 1 failed: HTTP 500"]
    assert len(gpu.unexplained_reasons({**ucx, "notes": []}, keep_libfabric=False)) == 2
    assert gpu.unexplained_reasons({"serve_status": "DEPLOY_FAILED", "serve_message": "engine died"},
                                   keep_libfabric=False) == ["Serve status DEPLOY_FAILED: engine died"]


def test_a_wheel_folder_must_hold_the_image_stack(tmp_path):
    assert "lacks vllm==0.26.0" in gpu.wheel_folder_problem(tmp_path)
    for name in ("vllm-0.26.0-cp38-abi3-manylinux_2_31_x86_64.whl", "nixl_cu13-1.3.1-cp312-cp312-manylinux.whl",
                 "nixl-1.3.1-py3-none-any.whl", "ray-2.58.0-cp312-cp312-manylinux2014_x86_64.whl",
                 "mpich-5.0.2-py3-none-manylinux.whl"):
        (tmp_path / name).write_bytes(b"")
    assert gpu.wheel_folder_problem(tmp_path) is None
    assert "not a folder" in gpu.wheel_folder_problem(tmp_path / "missing")


@pytest.mark.integration
@pytest.mark.parametrize(("args", "message"), [
    (["--wheels", "/w"], "--wheels: only with --gpu (got /w)"),
    (["--keep-libfabric"], "--keep-libfabric: only with --gpu"),
    (["--topology", "both-ways"], "--topology: not a topology (got 'both-ways')"),
    (["--gpu", "--prepared", "/nowhere"], "--prepared: no prepared.json in '/nowhere'"),
    (["--config", "/no/such.yaml"], "--config: no such file (got '/no/such.yaml')"),
])
def test_twin_refuses_bad_options_with_exit_2(args, message):
    result = runner.invoke(cli.app, ["twin", *args], env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_prepared_json_records_the_plan_budget(tmp_path):
    meta = gpu.prepare(REFERENCE, tmp_path)
    assert meta["kind"] == "hybrid" and meta["configured_model"] == "Qwen/Qwen3.5-9B"
    budgets = {b["role"]: b for b in meta["plan_budgets"]}
    assert budgets["decode"]["gpu_memory_gib"] == pytest.approx(22.03)
    assert budgets["decode"]["max_concurrent_sequences"] == 10
    assert json.loads((tmp_path / "prepared.json").read_text()) == meta
    assert {p.name for p in tmp_path.iterdir()} >= {"config.yaml", "disaggregated.json", "colocated.json"}
