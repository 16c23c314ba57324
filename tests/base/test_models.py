"""The models people serve P/D with, the memory check's MoE and attention variants, and
``model.architecture: auto`` (a local directory, moto's S3, and no access)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from helpers.pins import unpinned_config
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.instance_types import INSTANCE_TYPES
from ray_llm_eks.base.memory import memory_budget
from ray_llm_eks.base.models import (
    KNOWN_ARCHITECTURES, KNOWN_TERMS, MXFP4_BITS_PER_PARAMETER, ModelArchitecture, architecture_from_config,
    is_gated, known_architecture,
)
from ray_llm_eks.base.serving import ModelSpec
from ray_llm_eks.config import ConfigError
from ray_llm_eks.model_source import architecture_for
from ray_llm_eks.planning import GIB, make_plan

CONFIGS = Path(__file__).parents[1] / "data" / "model_configs"
NEW_MODELS = ("meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B",
              "openai/gpt-oss-120b", "openai/gpt-oss-20b")


def _config_json(name: str) -> dict:
    return json.loads((CONFIGS / (name.replace("/", "--") + ".json")).read_text())


def _facts(architecture: ModelArchitecture) -> dict:
    return {k: v for k, v in dataclasses.asdict(architecture).items() if k not in ("name", "source")}


@pytest.mark.parametrize("name", NEW_MODELS)
def test_each_table_entry_is_what_its_config_json_says(name):
    derived = architecture_from_config(_config_json(name), name=name, source="test")
    assert _facts(derived) == _facts(known_architecture(name))


# docs/plan.md, "The table's models": the hand calculation, bf16, max_model_len 4096. Per model:
# weights (bytes), KV bytes per token of the growing layers (TP 1), the sliding-window layers' bytes
# for one 4096-token sequence (TP 1), one 4096-token sequence (TP 1), the same per GPU at TP 4.
HAND = {
    "meta-llama/Llama-3.3-70B-Instruct": (141_107_412_992, 327_680, 0, 1_342_177_280, 335_544_320),
    "Qwen/Qwen3-32B": (65_524_246_528, 262_144, 0, 1_073_741_824, 268_435_456),
    "Qwen/Qwen3-30B-A3B": (61_064_245_248, 98_304, 0, 402_653_184, 100_663_296),
    "Qwen/Qwen3-235B-A22B": (470_187_269_120, 192_512, 0, 788_529_152, 197_132_288),
    "openai/gpt-oss-120b": (65_248_815_744, 36_864, 4_718_592, 155_713_536, 38_928_384),
    "openai/gpt-oss-20b": (13_761_264_768, 24_576, 3_145_728, 103_809_024, 25_952_256),
}


@pytest.mark.parametrize("name", NEW_MODELS)
def test_memory_figures_match_the_hand_calculation(name):
    weights, per_token, window, sequence, sequence_tp4 = HAND[name]
    model = known_architecture(name)
    assert model.weight_bytes(2) == weights
    assert model.kv_cache_bytes_per_token(2) == per_token
    assert model.sliding_window_bytes_per_sequence(2, 4096) == window
    assert model.sequence_bytes(2, 4096) == sequence
    assert model.sequence_bytes(2, 4096, 4) == sequence_tp4


def test_docs_plan_md_shows_the_same_hand_calculation():
    text = (Path(__file__).parents[2] / "docs" / "plan.md").read_text()
    section = text.split("### The table's models (hand calculation)")[1].split("### Worked example")[0]
    for name, figures in HAND.items():
        model = known_architecture(name)
        assert f"{model.parameter_count:,}" in section, name
        assert f"{figures[0]:,}" in section and f"{figures[0] / GIB:.4f}" in section, name
        for figure in figures[1:]:
            assert figure == 0 or f"{figure:,}" in section, (name, figure)


@pytest.mark.parametrize("name", [n for n in NEW_MODELS if n != "Qwen/Qwen3-235B-A22B"])
def test_plan_prints_the_hand_calculation(name):
    """Every model but Qwen3-235B-A22B fits a g6e.12xlarge with TP 4 (four 44.7 GiB L40S)."""
    weights, per_token, window, _, sequence_tp4 = HAND[name]
    figures = make_plan(unpinned_config({
        "model": {"source": name, "served_name": "m", "tensor_parallel_size": 4, "max_model_len": 4096},
        "prefill": {"instance_type": "g6e.12xlarge"}, "decode": {"instance_type": "g6e.12xlarge"}})).summary()
    assert figures["weights_gib"] == round(weights / GIB, 4)
    assert figures["kv_cache_bytes_per_token"] == per_token
    assert figures["sliding_window_bytes_per_sequence"] == window // 4  # gpt-oss: 8 KV heads, 2 per GPU
    assert figures["bytes_per_max_length_sequence"] == sequence_tp4
    assert figures["parameter_count"] == known_architecture(name).parameter_count


def test_a_moe_keeps_every_expert_resident_on_every_gpu_of_the_leg():
    moe = known_architecture("Qwen/Qwen3-235B-A22B")
    budget = memory_budget("decode", INSTANCE_TYPES["g6e.12xlarge"], 4, moe, max_model_len=4096,
                           gpu_memory_utilization=0.9, dtype="bfloat16")
    assert budget.weights_gib == pytest.approx(470_187_269_120 / 4 / GIB)  # total, not the 22B active
    assert not budget.fits and budget.weights_do_not_fit
    assert moe.parameters_per_token == 22_190_763_520


def test_gpt_oss_experts_count_at_mxfp4_width():
    model = known_architecture("openai/gpt-oss-120b")
    plain = model.parameter_count - model.quantized_parameter_count
    assert model.quantized_bits_per_parameter == MXFP4_BITS_PER_PARAMETER == 4.25
    assert model.weight_bytes(2) == plain * 2 + model.quantized_parameter_count * 17 // 32


def test_sliding_window_layers_stop_growing_at_their_window():
    model = known_architecture("openai/gpt-oss-20b")  # 12 sliding layers, window 128, 2048 B per layer-token
    assert model.sliding_window_bytes_per_sequence(2, 100) == 12 * 100 * 2048
    assert model.sliding_window_bytes_per_sequence(2, 128) == model.sliding_window_bytes_per_sequence(2, 100_000)
    assert model.sequence_bytes(2, 8192) - model.sequence_bytes(2, 4096) == 4096 * 12 * 2048  # the full layers only


DEEPSEEK_LIKE = {  # the MLA keys of DeepSeek-V3's config.json, with fewer layers and experts
    "model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
    "num_key_value_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000, "torch_dtype": "bfloat16",
}


def test_mla_caches_one_latent_per_token_per_layer_on_every_gpu():
    model = architecture_from_config(DEEPSEEK_LIKE, name="x/mla", source="test", checkpoint_bytes=2_000_000)
    assert (model.kv_lora_rank, model.qk_rope_head_dim, model.num_experts) == (512, 64, 8)
    assert model.parameter_count == 1_000_000  # checkpoint bytes / 2 (bf16): no formula for this family
    assert model.kv_cache_bytes_per_token(2) == 4 * (512 + 64) * 2
    assert model.kv_cache_bytes_per_token(2, 8) == model.kv_cache_bytes_per_token(2)  # not split by TP


def test_a_family_with_no_formula_and_no_index_is_refused_naming_what_to_do():
    with pytest.raises(SpecErrors) as caught:
        architecture_from_config(DEEPSEEK_LIKE, name="x/mla", source="test")
    assert "config.json model_type: a family whose parameters the library cannot count" in str(caught.value)
    assert "or model.architecture by hand" in str(caught.value)


@pytest.mark.parametrize(("changes", "field"), [
    ({"sliding_window_layers": 2, "full_attention_layers": 2}, "sliding_window"),
    ({"kv_lora_rank": 512}, "kv_lora_rank"),
    ({"num_experts": 8, "num_experts_per_token": 9}, "num_experts_per_token"),
    ({"quantized_parameter_count": 10}, "quantized_bits_per_parameter"),
    ({"active_parameter_count": 10**12}, "active_parameter_count"),
])
def test_inconsistent_variant_fields_are_refused(changes, field):
    base = {"parameter_count": 10**9, "num_hidden_layers": 4, "full_attention_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 8, "head_dim": 64}
    with pytest.raises(SpecErrors) as caught:
        ModelArchitecture(**{**base, **changes})
    assert [e.field for e in caught.value.errors] == [field]


def test_every_table_model_has_its_licence_and_gate_and_the_rule_agrees():
    assert set(KNOWN_TERMS) == set(KNOWN_ARCHITECTURES)
    for key, terms in KNOWN_TERMS.items():
        assert terms.gated is is_gated(KNOWN_ARCHITECTURES[key].name), key
    assert KNOWN_TERMS["meta-llama/llama-3.3-70b-instruct"].gated
    assert KNOWN_TERMS["openai/gpt-oss-120b"].licence.startswith("apache-2.0")


def test_llama_33_without_a_token_gets_the_gated_warning():
    deployment = unpinned_config({
        "model": {"source": "meta-llama/Llama-3.3-70B-Instruct", "served_name": "llama", "tensor_parallel_size": 4},
        "prefill": {"instance_type": "g6e.12xlarge"}, "decode": {"instance_type": "g6e.12xlarge"}})
    warnings = [w for w in make_plan(deployment).summary()["warnings"] if w.startswith("model.hf_token_secret")]
    assert len(warnings) == 1 and "meta-llama/Llama-3.3-70B-Instruct is gated" in warnings[0]


# --- model.architecture: auto ------------------------------------------------------------------

def _auto(source: str, **model) -> dict:
    return {"model": {"source": source, "served_name": "m", "architecture": "auto", "tensor_parallel_size": 4, **model},
            "prefill": {"instance_type": "g6e.12xlarge"}, "decode": {"instance_type": "g6e.12xlarge"}}


def test_architecture_for_reads_a_local_directory_which_a_configuration_may_not_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_config_json("Qwen/Qwen3-30B-A3B")))
    model = architecture_for(str(tmp_path))
    assert _facts(model) == _facts(known_architecture("Qwen/Qwen3-30B-A3B"))
    assert model.source == f"{tmp_path}/config.json (model.architecture: auto)"
    # As model.source the directory is refused before anything reads it: the pods cannot.
    with pytest.raises(ConfigError) as caught:
        unpinned_config(_auto(str(tmp_path)))
    assert [e.field for e in caught.value.errors] == ["model.source"]
    assert f"  model.source: a local path: the pods cannot read the files of the machine that renders the " \
           f"configuration (got {str(tmp_path)!r}); accepted: a Hugging Face id organisation/name" in str(caught.value)


def test_auto_reads_the_checkpoint_index_for_a_family_with_no_formula(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_LIKE))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2_000_000_000}}))
    model = architecture_for(str(tmp_path))
    assert model.parameter_count == 1_000_000_000 and model.kv_lora_rank == 512
    assert model.source.endswith("config.json and model.safetensors.index.json (model.architecture: auto)")


def test_auto_reads_s3_with_moto(monkeypatch):
    from moto import mock_aws
    import boto3

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="weights")
        s3.put_object(Bucket="weights", Key="gpt-oss-20b/config.json",
                      Body=json.dumps(_config_json("openai/gpt-oss-20b")).encode())
        deployment = unpinned_config(_auto("s3://weights/gpt-oss-20b/"))
        with pytest.raises(ConfigError) as caught:
            unpinned_config(_auto("s3://weights/elsewhere"))
    assert _facts(deployment.model.architecture) == _facts(known_architecture("openai/gpt-oss-20b"))
    assert "s3://weights/elsewhere has no config.json" in str(caught.value)


def test_auto_without_access_says_what_to_do(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as caught:
        unpinned_config(_auto("some-org/not-in-the-table"))
    message = str(caught.value)
    assert ("  model.architecture: 'auto' reads the config.json of model.source 'some-org/not-in-the-table', and could "
            "not: huggingface.co/some-org/not-in-the-table config.json: HF_HUB_OFFLINE is set and the file is not in "
            "the local Hugging Face cache (got 'auto'); accepted: model.architecture written by hand") in message
    assert "or model.source as an s3:// URI holding config.json, or Hub access" in message
    assert [e.field for e in caught.value.errors] == ["model.architecture"]


def test_auto_for_a_table_model_needs_no_access(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    deployment = unpinned_config(_auto("Qwen/Qwen3-32B"))
    assert deployment.model.architecture == known_architecture("Qwen/Qwen3-32B")


def test_the_declared_model_takes_only_a_resolved_architecture():
    with pytest.raises(SpecErrors) as caught:
        ModelSpec(source="x/y", architecture="auto")
    assert "ray_llm_eks.model_source.architecture_for(source, revision)" in str(caught.value)
    assert ModelSpec(source="Qwen/Qwen3-32B", architecture=architecture_for("Qwen/Qwen3-32B")).known_architecture \
        == known_architecture("Qwen/Qwen3-32B")


def test_plan_exits_2_with_the_same_line_when_auto_has_no_access(monkeypatch, tmp_path):
    """``plan`` and ``make synth`` load the file with the same ``load_config``; plan exits 2 (a
    configuration error) and prints the line."""
    import yaml
    from typer.testing import CliRunner

    from helpers.pins import UNPINNED
    from ray_llm_eks import cli

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump({**UNPINNED, **_auto("some-org/not-in-the-table")}))
    result = CliRunner().invoke(cli.app, ["plan", "--config", str(path)], env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert "model.architecture: 'auto' reads the config.json of model.source 'some-org/not-in-the-table'" in \
        " ".join(result.output.split())


def test_plan_states_the_variant_assumptions_it_made():
    assumptions = make_plan(unpinned_config({
        "model": {"source": "openai/gpt-oss-120b", "served_name": "m", "tensor_parallel_size": 4},
        "prefill": {"instance_type": "g6e.12xlarge"}, "decode": {"instance_type": "g6e.12xlarge"}})).assumptions
    assert assumptions[:3] == (
        "weights = 2,167,371,072 parameters x 2 bytes (bfloat16) + 114,661,785,600 quantized parameters x 4.25 bits",
        "MoE: all 128 experts are resident on every worker (1/TP per GPU); compute follows the 5,711,982,912 active "
        "parameters",
        "18 sliding-window layers hold at most 128 tokens per sequence (vLLM's hybrid KV cache manager, kept on with "
        "NIXL, which supports it)")


def test_auto_reads_a_hybrid_vision_language_config_with_its_index(tmp_path):
    """Shaped as Qwen/Qwen3.5-9B's config.json: the language model's facts under ``text_config``,
    ``layer_types`` with linear_attention layers; its family has no formula, so the index counts."""
    layer_types = (["linear_attention"] * 3 + ["full_attention"]) * 8
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5", "text_config": {
        "model_type": "qwen3_5_text", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 16,
        "num_key_value_heads": 4, "head_dim": 256, "layer_types": layer_types, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32", "dtype": "bfloat16",
        "max_position_embeddings": 262_144}}))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 19_306_216_416}}))
    derived = architecture_for(str(tmp_path))
    # config.json and the index do not split the checkpoint: the tower and the MTP head stay in
    # the language model's count, with no vision peak (the table's entry has them split).
    split = ("vision_parameter_count", "mtp_parameter_count", "vision_profile_peak_gib")
    assert all(_facts(derived)[k] == 0 for k in split)
    assert ({k: v for k, v in _facts(derived).items() if k not in split}
            == {k: v for k, v in _facts(known_architecture("Qwen/Qwen3.5-9B")).items() if k not in split})


def test_a_vision_language_model_is_never_counted_by_the_text_formulas():
    """Its text_config may be a counted family (Mistral 3 nests a ``mistral`` one), but the vision
    tower is resident too: only the checkpoint's index sizes it."""
    wrapper = {"model_type": "mistral3", "text_config": {**_config_json("Qwen/Qwen3-32B"), "model_type": "mistral"}}
    with pytest.raises(SpecErrors, match="or a vision-language model"):
        architecture_from_config(wrapper, name="x/vlm", source="test")
    counted = architecture_from_config(wrapper, name="x/vlm", source="test", checkpoint_bytes=2 * 33_000_000_000)
    assert counted.parameter_count == 33_000_000_000


def test_the_formulas_other_branches_equal_transformers_counts():
    """Counts transformers 5.24.0 gave for these small configs (tools/check_parameter_counts.py,
    ``VARIANTS``, run 2026-12-03 on the meta device): the branches the table's models do not take."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check", Path(__file__).parents[2] / "tools" / "check_parameter_counts.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    from ray_llm_eks.base.models import count_parameters

    measured = {"llama, attention and MLP biases": 9_956_864, "qwen2 (q/k/v biases)": 9_944_576,
                "qwen3, attention biases": 9_947_136, "qwen3_moe, a dense layer and sparse step 2": 13_095_936,
                "mistral, tied embeddings": 9_429_504}
    assert {label: count_parameters(config)[0] for label, config in check.VARIANTS.items()} == measured


def test_a_hub_that_does_not_answer_is_reported_at_the_deadline(monkeypatch):
    """huggingface_hub retries with backoff on its own; ``auto`` stops waiting at its deadline."""
    import threading

    import huggingface_hub

    from ray_llm_eks import model_source

    released = threading.Event()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *args, **kwargs: released.wait())
    monkeypatch.setattr(model_source, "HUB_DEADLINE_SECONDS", 0.05)
    try:
        with pytest.raises(model_source.ArchitectureUnavailable, match=r"config.json: no answer within 0.05 s"):
            architecture_for("some-org/slow-hub")
    finally:
        released.set()


def test_a_gated_repository_without_a_token_names_the_hub_error(monkeypatch):
    import httpx
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    url = "https://huggingface.co/some-org/gated/resolve/main/config.json"

    def refuse(*args, **kwargs):
        raise GatedRepoError(f"401 Client Error. Cannot access gated repo for url {url}.\nAccess is restricted.",
                             response=httpx.Response(401, request=httpx.Request("HEAD", url)))

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    with pytest.raises(ConfigError) as caught:
        unpinned_config(_auto("some-org/gated"))
    assert (f"could not: huggingface.co/some-org/gated config.json: GatedRepoError: 401 Client Error. Cannot access "
            f"gated repo for url {url}. (got 'auto')") in str(caught.value)
    assert "HF_TOKEN for a gated repository" in str(caught.value)


@pytest.mark.parametrize(("name", "shape"), [
    ("Qwen/Qwen3-32B", "dense"),
    ("Qwen/Qwen3.5-9B", "hybrid: 8 of 32 layers full attention"),
    ("Qwen/Qwen3-30B-A3B", "MoE: 128 experts, 8 per token, 3.35 B active"),
    ("openai/gpt-oss-20b", "MoE: 32 experts, 4 per token, 4.19 B active; 12 of 24 layers sliding window (128 tokens)"),
])
def test_plan_heading_names_the_kind_of_model(name, shape):
    assert known_architecture(name).shape == shape


TINY_QWEN3_5 = dict(parameter_count=4_745_584, num_hidden_layers=4, full_attention_layers=1, linear_attention_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=256, linear_num_key_heads=4,
                    linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4)
"""The tiny random-weight Qwen3_5ForConditionalGeneration run on an H100 with vLLM 0.26.0 and NIXL 1.3.1
(ray_llm_eks/twin/tiny_model.py, HYBRID_ARCHITECTURE): 2,048 attention bytes a token, 6,144 + 131,072
bytes of GDN state a layer."""


def test_hybrid_kv_transfer_is_the_measured_bytes_of_the_tiny_qwen3_5():
    tiny = ModelArchitecture(name="x/tiny", source="test", **TINY_QWEN3_5)
    assert tiny.linear_state_bytes_per_layer(2) == 6_144 + 131_072
    assert tiny.kv_block_tokens(2) == 80 == 16 * -(-137_216 // (16 * 2_048))  # 163,840 B a block
    # 313 prompt tokens: prefill sends 312, in 4 whole blocks, and each GDN layer's state once.
    assert tiny.kv_transfer_bytes(2, 313) == 4 * 163_840 + 3 * (6_144 + 131_072) == 1_067_008


def test_qwen3_5_9b_blocks_are_528_tokens_and_it_loads_no_mtp_head():
    model = known_architecture("Qwen/Qwen3.5-9B")
    assert model.kv_block_tokens(2) == 528
    assert model.weight_bytes(2, vision=False) == 8_953_803_264 * 2
    assert model.weight_bytes(2) == (8_953_803_264 + 456_010_480) * 2
    assert model.checkpoint_bytes(2) == 19_306_216_416


def test_more_kv_heads_than_attention_heads_is_refused():
    with pytest.raises(SpecErrors, match="num_key_value_heads: more than num_attention_heads"):
        ModelArchitecture(name="x/bad", source="test", **{**TINY_QWEN3_5, "num_key_value_heads": 8})


@pytest.mark.parametrize("source, why", [
    ("./models/x", "a local path: the pods cannot read the files of the machine that renders the configuration"),
    ("/data/m", "a local path: the pods cannot read the files of the machine that renders the configuration"),
    ("~/m", "a local path: the pods cannot read the files of the machine that renders the configuration"),
    ("file:///data/m", "a local path: the pods cannot read the files of the machine that renders the configuration"),
    ("C:\\models\\m", "a local path: the pods cannot read the files of the machine that renders the configuration"),
    ("gs://bucket/m", "a URI the pods do not fetch"),
    ("s3://Not_A_Bucket/m", "a URI the pods do not fetch"),
    ("gpt2", "not a Hugging Face id (organisation/name) or an s3:// URI"),
    ("", "empty model source"),
])
def test_a_source_the_pods_cannot_fetch_is_refused_by_the_declared_model(source, why):
    """The rule is the declared model's, so a construct built in code refuses what a file does."""
    with pytest.raises(SpecErrors) as caught:
        ModelSpec(source=source, served_name="m")
    (error,) = [e for e in caught.value.errors if e.field == "source"]
    assert error.message.startswith(f"{why} (got {source!r}); accepted: a Hugging Face id organisation/name "
                                    "such as Qwen/Qwen3.5-9B, or an s3:// URI of the weights"), error.message


@pytest.mark.parametrize("source", ["Qwen/Qwen3.5-9B", "s3://weights/qwen3.5-9b/", "s3://my.bucket-1", "org/name.v2"])
def test_a_hub_id_or_an_s3_uri_is_a_source_the_pods_fetch(source):
    assert ModelSpec(source=source, served_name="m", architecture=known_architecture("Qwen/Qwen3.5-9B")).source == source
