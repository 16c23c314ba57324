"""The model's licence on record: the model table's facts, ``plan --json``'s ``license`` and plan's text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ray_llm_eks import cli
from ray_llm_eks.base.models import COMMERCIAL_USE, KNOWN_TERMS, ModelTerms, licence_record

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
LLAMA = {"strict": False, "model": {"source": "meta-llama/Llama-3.3-70B-Instruct", "served_name": "llama",
                                    "tensor_parallel_size": 4},
         "prefill": {"instance_type": "g6e.12xlarge"}, "decode": {"instance_type": "g6e.12xlarge"}}


def test_every_table_model_says_whether_commercial_use_is_granted_and_where_that_was_read():
    for key, terms in KNOWN_TERMS.items():
        assert terms.commercial_use in COMMERCIAL_USE, key
        assert terms.commercial_use_source, key
        # A gated or restricted licence is called out; a plain one is not.
        assert (terms.callout is not None) == (terms.gated or terms.commercial_use != "yes"), key


@pytest.mark.parametrize(("key", "path"), [("meta-llama/llama-3.1-8b-instruct", "models/llama3_1/LICENSE"),
                                           ("meta-llama/llama-3.3-70b-instruct", "models/llama3_3/LICENSE")])
def test_the_llama_licences_are_restricted_by_their_700_million_user_clause(key, path):
    terms = KNOWN_TERMS[key]
    assert (terms.gated, terms.commercial_use) == (True, "restricted")
    assert "700 million monthly active users" in terms.callout and "gated" in terms.callout
    assert f"meta-llama/llama-models {path}@" in terms.commercial_use_source
    assert "section 2" in terms.commercial_use_source


def test_a_gated_licence_without_a_callout_is_refused():
    with pytest.raises(ValueError, match="needs its callout"):
        ModelTerms(licence="x", gated=True, source="s", commercial_use="yes", commercial_use_source="s")
    with pytest.raises(ValueError, match="accepted: yes, restricted, no, unknown"):
        ModelTerms(licence="x", gated=False, source="s", commercial_use="maybe", commercial_use_source="s")


def test_the_record_is_the_table_s_else_the_stated_one_else_none():
    record = licence_record("Qwen/Qwen3.5-9B")
    assert record == {"licence": "apache-2.0", "gated": False, "commercial_use": "yes",
                      "source": KNOWN_TERMS["qwen/qwen3.5-9b"].source + "; commercial use: "
                      + KNOWN_TERMS["qwen/qwen3.5-9b"].commercial_use_source, "callout": None}
    assert licence_record("acme/private-model") is None  # never guessed
    stated = licence_record("mistralai/Some-Model", "mistral-research")
    assert (stated["licence"], stated["gated"], stated["commercial_use"]) == ("mistral-research", True, "unknown")
    assert "mistral-research" in stated["callout"]
    with pytest.raises(ValueError, match="already states Qwen/Qwen3.5-9B's licence"):
        licence_record("Qwen/Qwen3.5-9B", "mit")


def plan(*args: str):
    result = runner.invoke(cli.app, ["plan", *args])
    assert result.exit_code == 0, result.output
    return result


def test_plan_json_carries_the_licence_of_the_reference_model():
    summary = json.loads(plan("--json").stdout)
    assert summary["license"] == KNOWN_TERMS["qwen/qwen3.5-9b"].record()


def test_plan_json_and_text_call_out_a_gated_restricted_licence(tmp_path):
    config = tmp_path / "llama.yaml"
    config.write_text(yaml.safe_dump(LLAMA))
    summary = json.loads(plan("--json", "--config", str(config)).stdout)
    assert summary["license"] == KNOWN_TERMS["meta-llama/llama-3.3-70b-instruct"].record()
    text = " ".join(plan("--config", str(config)).stdout.replace("│", " ").split())
    assert "licence llama3.3 (Llama 3.3 Community License) (commercial use: restricted)" in text
    assert "700 million monthly active users" in text


def test_a_model_outside_the_table_has_no_licence_in_the_plan():
    summary = json.loads(plan("--json", "--config", str(ROOT / "examples" / "twin" / "twin.yaml")).stdout)
    assert summary["license"] is None
