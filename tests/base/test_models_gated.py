"""A gated model without ``model.hf_token_secret`` deploys, then fails at download: one warning,
decided once (``ServingSpec.warnings``, by the rule in ``base.models``), reaches the user of
``make synth`` (a CDK warning annotation, which ``cdk synth`` prints), ``ray-llm-eks plan`` (printed
and under ``warnings`` in ``--json``) and the constructs (``Annotations.add_warning_v2``)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from helpers.pins import UNPINNED, unpinned_config
from ray_llm_eks import cli
from ray_llm_eks.base.models import is_gated

runner = CliRunner()
LLAMA = {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "llama"}
WARNING = ("model.hf_token_secret: model meta-llama/Llama-3.1-8B-Instruct is gated on the Hugging Face Hub (every "
           "repository under meta-llama/ is): without a token the workers' download is refused (401) once the nodes "
           "are up (got None); accepted: the name or ARN of a Secrets Manager secret holding a Hugging Face token of "
           "an account that accepted the model's terms")
ANNOTATION = f"{WARNING} [ack: ray-llm-eks:model.hf_token_secret]"  # cdk's add_warning_v2 names how to acknowledge it


def _warnings(scope) -> list[str]:
    """The warning annotations under ``scope``, as ``cdk synth`` would print them."""
    return [entry.data for node in scope.node.find_all() for entry in node.node.metadata
            if entry.type == "aws:cdk:warning"]


@pytest.mark.parametrize(("source", "gated"), [
    ("meta-llama/Llama-3.1-8B-Instruct", True), ("META-LLAMA/Llama-3.3-70B-Instruct", True),
    ("mistralai/Mistral-7B-Instruct-v0.3", True), ("Qwen/Qwen3.5-9B", False), ("/models/meta-llama/x", False),
    ("my-org/meta-llama-finetune", False)])
def test_the_rule_is_the_hub_organisation(source, gated):
    assert is_gated(source) is gated


def test_synth_annotates_it_once_and_not_with_a_token():
    from ray_llm_eks.stack import build_app

    _, stack = build_app(unpinned_config({"model": LLAMA}), nag=False)
    assert [w for w in _warnings(stack) if "hf_token_secret" in w] == [ANNOTATION]
    _, stack = build_app(unpinned_config({"model": {**LLAMA, "hf_token_secret": "hf/token"}}), nag=False)
    assert not [w for w in _warnings(stack) if "hf_token_secret" in w]


def test_plan_prints_it_and_lists_it_in_json(tmp_path):
    path = tmp_path / "llama.yaml"
    path.write_text(yaml.safe_dump({**UNPINNED, "model": LLAMA}))
    printed = runner.invoke(cli.app, ["plan", "--config", str(path)], env={"COLUMNS": "200"})
    assert printed.exit_code == 0, printed.output
    assert f"warning: {WARNING}" in " ".join(printed.output.split())
    as_json = runner.invoke(cli.app, ["plan", "--config", str(path), "--json"])
    assert as_json.exit_code == 0 and _token_warnings(json.loads(as_json.output)["warnings"]) == [WARNING]
    path.write_text(yaml.safe_dump({**UNPINNED}))
    ungated = json.loads(runner.invoke(cli.app, ["plan", "--config", str(path), "--json"]).output)["warnings"]
    assert _token_warnings(ungated) == []


def _token_warnings(warnings):
    """The gated-model warnings among plan's (the reference also carries the KV path's risk, docs/kv-path.md)."""
    return [w for w in warnings if w.startswith("model.hf_token_secret")]


def test_the_serving_construct_annotates_it():
    from helpers.composition import cluster_stack
    from ray_llm_eks.base import WorkerPool
    from ray_llm_eks.base.serving import ModelSpec
    from ray_llm_eks.constructs import RayLlmServing

    stack, _, cluster = cluster_stack("Gated")
    serving = RayLlmServing(stack, "Serving", cluster=cluster, strict=False, prefill=WorkerPool("prefill"),
                            decode=WorkerPool("decode"), model=ModelSpec(**LLAMA))
    assert [w for w in _warnings(serving) if "hf_token_secret" in w] == [ANNOTATION]
    assert serving.spec.warnings()[0].field == "model.hf_token_secret"
