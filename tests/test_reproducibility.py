"""A tag-only image or an unpinned model revision: one visible warning, or an error with strict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ray_llm_eks.config import ConfigError, parse_config
from ray_llm_eks.stack import build_app
from ray_llm_eks.testing import FAST_SYNTH_CONTEXT

DIGEST = "sha256:" + "c" * 64
REVISION = "0123456789abcdef0123456789abcdef01234567"
PLUGINS = {"nvidia_device_plugin_image_digest": "sha256:" + "d" * 64, "efa_device_plugin_image_digest": "sha256:" + "e" * 64}
"""The device plugins' images by digest (tests/constructs/test_cluster_pins.py tests those pins themselves)."""


WARNING = re.compile("ray-llm-eks:reproducibility|tags are mutable|no revision")


def reproducibility_warnings(stack) -> list[str]:
    """The warnings in the construct tree's metadata, read in Python: the assertions module's
    find_warning hands back jsii proxies that failed to resolve in some test orders.
    ``find_all`` includes the stack itself, so each construct is read once."""
    return [str(entry.data) for construct in stack.node.find_all() for entry in construct.node.metadata
            if entry.type == "aws:cdk:warning" and WARNING.search(str(entry.data))]


def test_unpinned_default_gives_one_warning_naming_both_fixes(default):
    (text,) = reproducibility_warnings(default.stack)
    assert "pinned by tag only" in text and "image.digest" in text
    assert "no revision" in text and "model.revision" in text


def test_pinned_image_and_revision_give_no_warning(synth):
    pinned = synth({"image": {"digest": DIGEST}, "model": {"revision": REVISION}, "versions": PLUGINS})
    assert reproducibility_warnings(pinned.stack) == []


@pytest.mark.parametrize(
    ("overrides", "named", "not_named"),
    [
        ({"model": {"revision": REVISION}}, "image.digest", "model.revision"),
        ({"image": {"digest": DIGEST}}, "model.revision", "image.digest"),
    ],
)
def test_strict_refuses_what_it_would_warn_about(overrides, named, not_named):
    # Refused while the configuration is read, so `make synth` and `plan` refuse it alike.
    with pytest.raises(ConfigError, match="strict") as caught:
        parse_config({"strict": True, **overrides})
    assert f"  {named}: strict mode refuses it" in str(caught.value) and not_named not in str(caught.value)


def test_strict_refuses_a_branch_as_revision():
    with pytest.raises(ConfigError, match="model.revision: strict mode refuses it: a branch or tag, not a commit; it can move \\(got 'main'\\)"):
        parse_config({"strict": True, "image": {"digest": DIGEST}, "model": {"revision": "main"}})


def test_strict_with_everything_pinned_builds():
    config = parse_config({"strict": True, "image": {"digest": DIGEST}, "model": {"revision": REVISION},
                           "versions": PLUGINS})
    _, stack = build_app(config, context=FAST_SYNTH_CONTEXT, nag=False)
    assert stack.config.strict


def test_strict_is_the_library_default_and_names_the_commands_that_resolve_both_pins():
    with pytest.raises(ConfigError) as caught:
        parse_config({"region": "us-east-2", "control_plane_azs": ["us-east-2a", "us-east-2b"],
                      "data_plane_az": "us-east-2a"})
    lines = str(caught.value).splitlines()[1:]
    (image,) = [line for line in lines if line.strip().startswith("image.digest: strict mode refuses it")]
    assert ("resolve it with: aws ecr describe-images --registry-id 763104351884 --repository-name ray "
            "--image-ids imageTag=serve-llm-cuda-v1.0 --region us-east-2 "
            "--query 'imageDetails[0].imageDigest' --output text") in image
    (model,) = [line for line in lines if line.strip().startswith("model.revision: strict mode refuses it")]
    assert "HfApi().model_info('Qwen/Qwen3.5-9B', revision='main').sha" in model
    assert all("or strict false" in line for line in (image, model))


def test_a_branch_revision_is_resolved_at_that_branch_and_a_custom_registry_by_buildx():
    config = parse_config({"strict": False, "model": {"revision": "v2"},
                           "image": {"repository": "registry.example.com/team/ray", "tag": "2.58"}})
    commands = config.specs().serving.pin_commands()
    assert commands["image.digest"] == ("docker buildx imagetools inspect registry.example.com/team/ray:2.58 "
                                        "--format '{{json .Manifest.Digest}}'")
    assert "model_info('Qwen/Qwen3.5-9B', revision='v2').sha" in commands["model.revision"]
    ecr = parse_config({"strict": False, "image": {"repository": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/ray"}})
    assert ("--registry-id 123456789012 --repository-name ray --image-ids imageTag=serve-llm-cuda-v1.0 "
            "--region eu-west-1") in ecr.specs().serving.pin_commands()["image.digest"]


def test_a_pinned_deployment_has_no_command_to_run():
    pinned = parse_config({"image": {"digest": DIGEST}, "model": {"revision": REVISION}, "versions": PLUGINS})
    assert pinned.strict and pinned.specs().serving.pin_commands() == {} and pinned.pin_commands() == {}


def test_plan_prints_the_commands_for_an_unpinned_configuration_and_refuses_a_strict_one(tmp_path):
    from typer.testing import CliRunner

    from ray_llm_eks.cli import app

    unpinned = CliRunner().invoke(app, ["plan", "--json"])  # the reference file: strict false
    assert unpinned.exit_code == 0, unpinned.output
    commands = json.loads(unpinned.stdout)["pin_commands"]
    assert commands["image.digest"].startswith("aws ecr describe-images --registry-id 763104351884 ")
    assert commands["model.revision"].startswith("python3 -c \"from huggingface_hub import HfApi;")
    text = CliRunner().invoke(app, ["plan"])
    assert commands["image.digest"] in text.stdout and commands["model.revision"] in text.stdout
    strict = tmp_path / "strict.yaml"
    strict.write_text("decode: {desired_size: 1}\n")
    refused = CliRunner().invoke(app, ["plan", "--config", str(strict)])
    assert refused.exit_code == 2
    assert commands["image.digest"] in refused.stderr and commands["model.revision"] in refused.stderr


def test_the_shipped_examples_that_deploy_unpinned_say_so():
    root = Path(__file__).resolve().parents[1]
    for example in ("examples/benchmark/colocated.yaml", "examples/benchmark/disaggregated.yaml",
                    "examples/twin/twin.yaml", "examples/quickstart.yaml", "ray_llm_eks/data/reference.yaml"):
        assert yaml.safe_load((root / example).read_text())["strict"] is False, example
