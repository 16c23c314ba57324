"""A credential pasted where the configuration asks for a secret's name or ARN (a first-day trial put
its Hugging Face token in ``model.hf_token_secret``, and it reached the manifests, the IAM policy and
the GitOps output) is refused before anything renders it, by one rule of the base layer
(``errors.not_a_credential``), through the YAML and the constructs alike; the refusal never repeats it."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from ray_llm_eks.base.errors import SpecErrors, credential_kind, shown
from ray_llm_eks.base.serving import ModelSpec
from ray_llm_eks.cli import app

# Shaped as the scanners' rules match them (gitleaks huggingface.go, aws.go), not real: a token made
# of the alphabet, and the access key pair AWS documents as its example (IAM user guide).
HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
AWS_EXAMPLE_ACCESS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_EXAMPLE_SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SECRET_ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:hf/token-AbCdEf"


@pytest.mark.parametrize(("value", "kind"), [
    (HF_TOKEN, "a Hugging Face access token"),
    ("api_org_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "a Hugging Face access token"),
    (AWS_EXAMPLE_ACCESS_KEY_ID, "an AWS access key id"),
    ("ASIA" + "Q" * 16, "an AWS access key id"),
    (AWS_EXAMPLE_SECRET_KEY, "an AWS secret access key"),
    # Inside a name: still the token.
    (f"prod/{HF_TOKEN}", "a Hugging Face access token"),
])
def test_credentials_are_told_by_shape(value, kind):
    assert credential_kind(value) == kind
    assert value not in shown(value) and f"{len(value)} characters, redacted" in shown(value)


@pytest.mark.parametrize("value", ["hf/token", "hf_token", "hf-token-prod", "my/hf_read_token", SECRET_ARN,
                                   "ray-llm/" + "a" * 40, None])
def test_secret_names_are_not_credentials(value):
    assert credential_kind(value) is None
    assert ModelSpec(hf_token_secret=value).hf_token_secret == value


@pytest.mark.parametrize("value", [HF_TOKEN, AWS_EXAMPLE_ACCESS_KEY_ID, AWS_EXAMPLE_SECRET_KEY])
def test_the_yaml_path_exits_2_with_one_line_naming_the_field_and_not_the_value(tmp_path, value):
    config = tmp_path / "trial.yaml"
    config.write_text(f"strict: false\nmodel:\n  hf_token_secret: {value}\n")
    for command in (["plan", "--config", str(config)],
                    ["render", "--out", str(tmp_path / "out"), "--config", str(config)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert value not in result.output
        (line,) = [line for line in result.output.splitlines() if "hf_token_secret" in line]
        assert line.strip().startswith("model.hf_token_secret: ")
        assert f"(got <{credential_kind(value)}, {len(value)} characters, redacted>)" in line
        assert "accepted: arn:aws:secretsmanager:" in line
    assert not (tmp_path / "out").exists()  # nothing rendered


def test_the_construct_path_refuses_it_through_the_same_rule():
    # A construct takes the model as a ModelSpec (RayLlmServing(model=...)): built, or replaced
    # into another, it refuses the token before any construct exists.
    for build in (lambda: ModelSpec(hf_token_secret=HF_TOKEN),
                  lambda: dataclasses.replace(ModelSpec(), hf_token_secret=HF_TOKEN)):
        with pytest.raises(SpecErrors) as caught:
            build()
        (error,) = caught.value.errors
        assert error.field == "hf_token_secret"
        assert error.message.startswith("a Hugging Face access token where the name or ARN of the secret")
        assert HF_TOKEN not in str(caught.value)


def test_any_refusal_shows_a_credential_redacted():
    """A token pasted in another field is refused by that field's own check, never echoed."""
    from ray_llm_eks.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as caught:
        parse_config({"strict": False, "cluster": {"admin_role_arn": HF_TOKEN}, "region": AWS_EXAMPLE_ACCESS_KEY_ID})
    text = str(caught.value)
    assert HF_TOKEN not in text and AWS_EXAMPLE_ACCESS_KEY_ID not in text
    assert "cluster.admin_role_arn: not an IAM role ARN (got <a Hugging Face access token, 37 characters, redacted>)" \
        in text
