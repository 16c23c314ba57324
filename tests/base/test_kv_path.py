"""The KV path chosen from upstream facts (base/kv_path.py) and the upstream defects it is checked
against (base/upstream_defects.py): what each deployment renders, what synth and plan refuse."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from helpers.pins import unpinned_config
from ray_llm_eks.base import kv_path, upstream_defects
from ray_llm_eks.base.kv_path import IMAGE_STACKS, KV_PATHS, AttentionKind, resolve
from ray_llm_eks.base.serving import DEFAULT_IMAGE_TAG, DLC_TAG_RAY_VERSIONS
from ray_llm_eks.cdk8s_charts.serve_config import build_serve_config
from ray_llm_eks.cli import app
from ray_llm_eks.config import ConfigError, load_config

STACK = IMAGE_STACKS[DEFAULT_IMAGE_TAG]
LLAMA_70B = {"source": "meta-llama/Llama-3.3-70B-Instruct", "served_name": "llama-70b", "tensor_parallel_size": 8}
LLAMA_8B = {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "llama-8b"}


def legs(instance_type: str) -> dict:
    return {"prefill": {"instance_type": instance_type}, "decode": {"instance_type": instance_type}}


def kv_of(serving) -> dict:
    args = build_serve_config(serving).to_dict()["applications"][0]["args"]
    return {role: args[f"{role}_config"]["engine_kwargs"]["kv_transfer_config"] for role in ("prefill", "decode")}


# --- the table ------------------------------------------------------------------------------------

@pytest.mark.parametrize("row", KV_PATHS, ids=lambda r: f"{r.attention.value}-gdr-{r.gpudirect_rdma}")
def test_no_row_renders_a_combination_a_defect_refuses(row):
    for stack in (STACK, None):  # the image's versions, and an image whose versions are not known
        path = resolve(row.attention, row.gpudirect_rdma, stack, disaggregated=True)
        assert path.refusals == (), (row, stack)


def test_a_row_for_every_kind_with_and_without_gpudirect_rdma():
    assert {(r.attention, r.gpudirect_rdma) for r in KV_PATHS} == {(k, g) for k in AttentionKind for g in (True, False)}


def test_hybrid_models_never_take_the_host_buffer_and_every_row_sets_the_ds_layout():
    for row in KV_PATHS:
        assert dict(row.env) == {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}  # a model change keeps the pods
        if row.attention is AttentionKind.hybrid:
            assert row.kv_buffer_device == "cuda"


def test_the_image_tags_ray_is_the_stacks():
    assert DLC_TAG_RAY_VERSIONS == {tag: stack.ray for tag, stack in IMAGE_STACKS.items()}
    assert (STACK.ray, STACK.vllm, STACK.nixl) == ("2.58.0", "0.26.0", "1.3.1")


# --- what deployments render ----------------------------------------------------------------------

def test_the_reference_renders_gpu_memory_with_the_ds_layout_and_warns_that_it_is_unmeasured():
    serving = load_config(None).specs().serving
    path = serving.kv_path
    assert (path.kv_buffer_device, path.backends, dict(path.env)) == ("cuda", ("LIBFABRIC",),
                                                                      {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"})
    assert path.known == kv_path.UPSTREAM_CODE
    assert [d.key for d in path.defects] == [upstream_defects.LIBFABRIC_VRAM_WITHOUT_GDR.key]
    assert all(kv["kv_buffer_device"] == "cuda" for kv in kv_of(serving).values())
    warnings = [w for w in serving.warnings() if w.field == "nixl.kv_buffer_device"]
    assert len(warnings) == 1 and "GPUDirect RDMA" in warnings[0].message


def test_a_dense_model_on_g_series_keeps_the_measured_host_buffer():
    serving = unpinned_config({"model": LLAMA_8B}).specs().serving
    assert serving.kv_path.known == kv_path.MEASURED and serving.kv_path.defects == ()
    assert {kv["kv_buffer_device"] for kv in kv_of(serving).values()} == {"cpu"}
    assert not [w for w in serving.warnings() if w.field == "nixl.kv_buffer_device"]


def test_the_l40s_tp4_variant_renders_gpu_memory_for_the_hybrid_model():
    serving = unpinned_config({**legs("g6e.12xlarge"), "model": {"tensor_parallel_size": 4}}).specs().serving
    assert {kv["kv_buffer_device"] for kv in kv_of(serving).values()} == {"cuda"}
    assert serving.kv_path.env == {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}


def test_the_p5_dense_70b_variant_renders_gpu_memory_without_a_kv_path_warning():
    serving = unpinned_config({**legs("p5.48xlarge"), "model": LLAMA_70B}).specs().serving
    assert serving.kv_path.kv_buffer_device == "cuda" and serving.kv_path.known == kv_path.DOCUMENTED
    assert serving.kv_path.defects == ()
    assert not [w for w in serving.warnings() if w.field == "nixl.kv_buffer_device"]


def test_gpudirect_rdma_on_one_leg_only_is_no_gpudirect_rdma():
    serving = unpinned_config({"prefill": {"instance_type": "p5.48xlarge"}, "decode": {"instance_type": "g6e.48xlarge"},
                               "model": LLAMA_70B}).specs().serving
    assert serving.kv_path.row.gpudirect_rdma is False and serving.kv_path.kv_buffer_device == "cpu"


# --- what synth and plan refuse -------------------------------------------------------------------

def test_an_explicit_host_buffer_for_a_hybrid_model_is_refused_naming_the_field_and_what_to_do():
    with pytest.raises(ConfigError) as raised:
        unpinned_config({"nixl": {"kv_buffer_device": "cpu"}})
    text = str(raised.value)
    assert "nixl.kv_buffer_device" in text and "'list' object has no attribute 'shape'" in text
    assert "nixl.kv_buffer_device: cuda" in text and "vllm-hybrid-host-buffer" in text


def test_an_explicit_host_buffer_is_fine_colocated_and_for_a_dense_model():
    assert unpinned_config({"nixl": {"kv_buffer_device": "cpu"}, "topology": "colocated"}).specs()
    assert unpinned_config({"nixl": {"kv_buffer_device": "cpu"}, "model": LLAMA_8B}).specs()


def test_an_image_of_unknown_versions_counts_as_affected():
    with pytest.raises(ConfigError, match="vllm-hybrid-host-buffer"):
        unpinned_config({"nixl": {"kv_buffer_device": "cpu"},
                         "image": {"repository": "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-ray", "tag": "x"}})


def test_plan_refuses_the_host_buffer_for_a_hybrid_model(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("strict: false\nnixl:\n  kv_buffer_device: cpu\n")
    result = CliRunner().invoke(app, ["plan", "--config", str(config), "--json"])
    assert result.exit_code == 2, result.output
    assert "vllm-hybrid-host-buffer" in result.output


def test_the_device_plugin_versions_that_break_efa_are_refused_with_their_source():
    for version in sorted(upstream_defects.BROKEN_NVIDIA_DEVICE_PLUGIN_VERSIONS):
        with pytest.raises(ConfigError) as raised:
            unpinned_config({"versions": {"nvidia_device_plugin": version}})
        assert "versions.nvidia_device_plugin" in str(raised.value)
        assert "NVIDIA/k8s-device-plugin#1692" in str(raised.value)


# --- the defects' own checks, on facts ------------------------------------------------------------

def _facts(**changes) -> upstream_defects.Facts:
    return replace(resolve(AttentionKind.dense, True, STACK, disaggregated=True).facts, **changes)


def test_gpu_memory_over_libfabric_on_a_tcp_provider_is_refused():
    assert upstream_defects.LIBFABRIC_VRAM_ON_TCP in upstream_defects.applicable(_facts(libfabric_provider="tcp"))
    assert upstream_defects.applicable(_facts(libfabric_provider="tcp", kv_buffer_device="cpu")) == []
    assert upstream_defects.applicable(_facts(libfabric_provider="tcp", backends=("UCX",))) == []


def test_the_push_connector_is_refused_on_nixl_1_3_1_and_the_rendered_connector_pulls():
    push = _facts(kv_connector="NixlPushConnector")
    assert upstream_defects.NIXL_1921_PUSH_DEADLOCK in upstream_defects.applicable(push)
    assert upstream_defects.applicable(replace(push, nixl="1.3.2")) == []
    assert upstream_defects.applicable(replace(push, nixl=None)) != []  # unknown: affected
    serving = load_config(None).specs().serving
    assert {kv["kv_connector"] for kv in kv_of(serving).values()} == {upstream_defects.PULL_KV_CONNECTOR}


def test_a_hybrid_model_without_the_ds_layout_is_refused():
    hybrid = resolve(AttentionKind.hybrid, True, STACK, disaggregated=True).facts
    assert upstream_defects.applicable(hybrid) == []
    assert upstream_defects.CONV_STATE_LAYOUT in upstream_defects.applicable(replace(hybrid, worker_env={}))


def test_versions_compare_as_numbers_and_unknown_counts():
    assert upstream_defects.at_least("0.27.1", "0.26.0") and not upstream_defects.at_least("0.9.2", "0.26.0")
    assert upstream_defects.at_least(None, "0.26.0") and upstream_defects.at_least("main", "0.26.0")


# --- plan shows it ---------------------------------------------------------------------------------

def test_plan_json_carries_the_kv_path_and_every_defect_checked():
    result = CliRunner().invoke(app, ["plan", "--json"])
    assert result.exit_code == 0, result.output
    path = json.loads(result.output)["kv_path"]
    assert (path["kv_buffer_device"], path["env"], path["vllm"], path["nixl"]) == (
        "cuda", {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}, "0.26.0", "1.3.1")
    assert [d["key"] for d in path["defects_checked"]] == [d.key for d in upstream_defects.DEFECTS]
    applying = {d["key"]: d["applies"] for d in path["defects_checked"]}
    assert applying == {d.key: d is upstream_defects.LIBFABRIC_VRAM_WITHOUT_GDR for d in upstream_defects.DEFECTS}


def test_plan_text_prints_the_kv_path_and_the_defects():
    result = CliRunner().invoke(app, ["plan"], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("KV path:"))
    assert "kv_buffer_device cuda" in line and "VLLM_SSM_CONV_STATE_LAYOUT=DS" in line and "vLLM 0.26.0" in line
    assert "applying: nixl-libfabric-vram-without-gdr (warn)" in result.output
