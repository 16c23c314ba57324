"""Every validation rule of the configuration, fed as a YAML file as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers.pins import unpinned
from ray_llm_eks.config import REFERENCE_CONFIG, ConfigError, Topology, load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deployment.yaml"
    path.write_text(text)
    return path


def error_for(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    return str(caught.value)


def test_defaults_are_the_reference_deployment():
    config = load_config(None)
    assert config.region == "us-west-2"
    assert config.control_plane_azs == ("us-west-2a", "us-west-2b")
    assert config.data_plane_az == "us-west-2a"
    assert config.cluster.kubernetes_version == "1.35"
    assert (config.system.instance_type, config.system.count) == ("m7i.xlarge", 1)
    for leg in (config.prefill, config.decode):
        role = leg.pool
        assert (leg.tensor_parallel_size, leg.target_ongoing_requests) == (None, None)
        assert role.instance_type == "g6.8xlarge"
        assert (role.min_size, role.desired_size, role.max_size) == (1, 1, 1)
        assert (role.root_volume.size_gib, role.root_volume.throughput_mibps, role.root_volume.iops) == (200, 1000, 16000)
        assert role.placement_group is True
    assert config.topology is Topology.disaggregated
    model = config.model
    assert (model.served_name, model.source, model.revision) == ("qwen3.5-9b", "Qwen/Qwen3.5-9B", None)
    assert (model.dtype, model.max_model_len, model.gpu_memory_utilization) == ("bfloat16", 4096, 0.9)
    assert model.enforce_eager is True and model.tensor_parallel_size == 1
    assert config.specs().serving.image_uri == "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"
    assert (config.versions.ray, config.versions.kuberay) == ("2.58.0", "1.5.1")
    assert config.nixl.backends is None and config.specs().serving.kv_path.backends == ("LIBFABRIC",)
    assert config.serving.namespace == "inference"
    assert config.strict is False


def test_no_file_is_the_shipped_reference_file_which_says_strict_false():
    assert load_config(None) == load_config(REFERENCE_CONFIG) == unpinned()
    assert yaml.safe_load(REFERENCE_CONFIG.read_text()) == {"strict": False}  # nothing else, no invented pin


def test_an_empty_mapping_is_the_library_default_which_is_strict(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "{}\n"))
    assert "image.digest: strict mode refuses it" in str(caught.value)
    assert "model.revision: strict mode refuses it" in str(caught.value)
    # The device plugins' images too (both privileged on every GPU node): strict covers every image
    # a GPU node runs privileged, as docs/deploying.md's Pinning section says.
    assert "versions.nvidia_device_plugin_image_digest: strict mode refuses it" in str(caught.value)
    assert "versions.efa_device_plugin_image_digest: strict mode refuses it" in str(caught.value)
    assert parse_config({"strict": False}) == unpinned()


def test_the_deploying_doc_says_when_strict_applies_as_the_reference_does():
    """No configuration means the reference file, which says strict false: docs/deploying.md says so
    in its Pinning section (the README's until issue 39), and names every field strict requires."""
    deploying = (Path(__file__).resolve().parents[1] / "docs" / "deploying.md").read_text()
    pinning = deploying.split("### Pinning", 1)[1].split("\n### ", 1)[0]
    assert load_config(None).strict is False
    assert "**Strict does not apply when no\nconfiguration is given:**" in pinning
    for field in ("image.digest", "versions.nvidia_device_plugin_image_digest",
                  "versions.efa_device_plugin_image_digest", "model.revision"):
        assert f"`{field}`" in pinning, field


def test_a_full_valid_file_loads(tmp_path):
    config = load_config(
        write(
            tmp_path,
            """
region: us-east-1
control_plane_azs: [us-east-1a, us-east-1b]
data_plane_az: us-east-1b
topology: disaggregated
decode: {instance_type: g6e.8xlarge, min_size: 1, desired_size: 2, max_size: 3}
image: {digest: "sha256:%s"}
model: {revision: 0123456789abcdef0123456789abcdef01234567}
versions: {nvidia_device_plugin_image_digest: "sha256:%s", efa_device_plugin_image_digest: "sha256:%s"}
"""
            % ("a" * 64, "b" * 64, "c" * 64),
        )
    )
    assert config.decode.pool.desired_size == 2
    assert config.specs().serving.image_uri == "763104351884.dkr.ecr.us-east-1.amazonaws.com/ray@sha256:" + "a" * 64
    assert config.reproducibility_problems() == []


@pytest.mark.parametrize(
    ("text", "field", "fragments"),
    [
        ("prefil: {}", "prefil", ["unknown key"]),
        ("model: {max_model_length: 8192}", "model.max_model_length", ["unknown key"]),
        ("data_plane_az: us-west-2c", "data_plane_az", ["us-west-2c", "us-west-2a", "us-west-2b"]),
        ("data_plane_az: eu-west-1a", "data_plane_az", ["eu-west-1a", "not an availability zone of region us-west-2"]),
        ("control_plane_azs: [us-west-2a]", "control_plane_azs", ["at least two", "us-west-2a"]),
        ("prefill: {instance_type: m7i.xlarge}", "prefill.instance_type", ["m7i.xlarge", "no GPU", "g6.8xlarge"]),
        ("decode: {instance_type: g6.xlarge}", "decode.instance_type", ["g6.xlarge", "does not support EFA", "g6.8xlarge"]),
        ("decode: {instance_type: p9.huge}", "decode.instance_type", ["p9.huge", "not in the library's instance table", "g6.8xlarge"]),
        ("topology: pipelined", "topology", ["pipelined", "disaggregated", "colocated"]),
        ("model: {max_model_len: 0}", "model.max_model_len", ["(got 0)", "a whole number >= 1"]),
        ("model: {max_model_len: -5}", "model.max_model_len", ["(got -5)", "a whole number >= 1"]),
        ("model: {gpu_memory_utilization: 0}", "model.gpu_memory_utilization", ["(got 0.0)", "(0, 1]"]),
        ("model: {gpu_memory_utilization: 1.2}", "model.gpu_memory_utilization", ["(got 1.2)", "(0, 1]"]),
        ("model: {tensor_parallel_size: 2}", "model.tensor_parallel_size", ["2", "1 GPU", "g6.8xlarge"]),
        ("image: {tag: null}", "image.tag", ["tag or a digest", "None"]),
        ("image: {digest: 'sha256:abc'}", "image.digest", ["sha256:abc", "64"]),
        ("prefill: {min_size: 2}", "prefill.min_size", ["above max_size (1)", "(got 2)", "raise max_size to at least 2"]),
        ("decode: {desired_size: 3, max_size: 2}", "decode.desired_size", ["(got 3)", "max_size 2"]),
        ("serving: {service_name: %s}" % ("r" * 48), "serving.service_name", ["48 characters", "at most 47"]),
        ("network: {flow_log_retention_days: 31}", "network.flow_log_retention_days", ["31", "accepted"]),
        ("versions: {nvidia_device_plugin: 0.19.1}", "versions.nvidia_device_plugin", ["0.19.1", "MOFED", "0.20"]),
        ("prefill: {root_volume: {throughput_mibps: 2000}}", "prefill.root_volume.throughput_mibps", ["2000", "1000"]),
        (
            "decode: {instance_type: g6.12xlarge, tensor_parallel_size: 2}",
            "decode.tensor_parallel_size",
            ["hybrid", "'prefill': 1", "'decode': 2"],
        ),
    ],
)
def test_bad_input_names_the_field_the_value_and_what_is_accepted(tmp_path, text, field, fragments):
    message = error_for(tmp_path, text)
    assert f"  {field}:" in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_malformed_yaml_reports_line_and_column(tmp_path):
    message = error_for(tmp_path, "region: us-west-2\nmodel:\n  max_model_len: [1, 2\n")
    assert "malformed YAML" in message
    assert "line 4" in message or "line 3" in message
    assert "column" in message


def test_top_level_must_be_a_mapping(tmp_path):
    assert "must be a mapping" in error_for(tmp_path, "- a\n- b\n")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


@pytest.mark.integration
def test_the_app_reports_config_errors_without_a_jsii_traceback(tmp_path):
    bad = write(tmp_path, "prefill: {instance_type: g6.xlarge}\n")
    env = dict(os.environ, CDK_CONTEXT_JSON=json.dumps({"config": str(bad)}), CDK_OUTDIR=str(tmp_path / "out"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # the venv's Node 24 for jsii
    result = subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2
    assert "prefill.instance_type" in result.stderr
    assert "g6.xlarge" in result.stderr
    assert "Traceback" not in result.stderr
    assert "jsii" not in result.stderr.lower()


def test_configuration_reference_is_generated_from_the_model():
    from ray_llm_eks.docgen import configuration_reference

    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == configuration_reference(), "run `make docs` and commit docs/configuration.md"
    assert "|  |" not in committed, "every field needs a docstring saying why"


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path):
    message = error_for(tmp_path, "strict: false\nregion: us-west-2\nmodel:\n  max_model_len: 4096\nregion: eu-west-1\n")
    assert "malformed YAML" in message and "key 'region' is given twice (lines 2 and 5)" in message, message
    nested = error_for(tmp_path, "model:\n  max_model_len: 4096\n  max_model_len: 8192\n")
    assert "key 'max_model_len' is given twice (lines 2 and 3)" in nested, nested


def test_the_same_key_in_two_sections_is_not_a_duplicate(tmp_path):
    config = load_config(write(tmp_path, "strict: false\nprefill:\n  desired_size: 1\ndecode:\n  desired_size: 1\n"))
    assert config is not None


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "~\n"])
def test_an_empty_file_is_refused_with_what_to_write_instead(tmp_path, text):
    message = error_for(tmp_path, text)
    assert "the file is empty" in message and "`{}`" in message, message


@pytest.mark.parametrize("text, field, expected", [
    ("prefill: 3\n", "prefill", "not a section (got 3); accepted: a mapping of the section's settings"),
    ("network: yes\n", "network", "not a section (got True); accepted: a mapping"),
    ("model:\n  max_model_len: 4096.5\n", "model.max_model_len",
     "not a whole number (got 4096.5); accepted: a whole number, such as 4096"),
    ("model:\n  max_model_len: many\n", "model.max_model_len", "not a whole number (got 'many')"),
])
def test_a_value_of_the_wrong_type_is_named_in_the_configurations_words(tmp_path, text, field, expected):
    message = error_for(tmp_path, "strict: false\n" + text)
    assert f"  {field}: {expected}" in message, message
    assert "Input should be" not in message and "instance of" not in message, message


# --- the file a person writes: encodings, YAML's merge keys and aliases, bounds, JSON ----------------

SMALL = "strict: false\nregion: us-west-2\nmodel:\n  max_model_len: 8192\n"
ALIAS_BOMB = "\n".join(  # "billion laughs": nine levels of nine aliases, 9**9 values expanded
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi")]) + "\n"
ACCEPTED = "accepted: UTF-8 (with or without a byte-order mark) or UTF-16 with a byte-order mark"


@pytest.mark.parametrize("data", [
    SMALL.encode(),
    b"\xef\xbb\xbf" + SMALL.encode(),
    b"\xff\xfe" + SMALL.encode("utf-16-le"),  # what PowerShell 5.1's Out-File writes
    b"\xfe\xff" + SMALL.encode("utf-16-be"),
    SMALL.replace("\n", "\r\n").encode(),
    b"\xff\xfe" + SMALL.replace("\n", "\r\n").encode("utf-16-le"),
    b'{\n\t"strict": false,\n\t"region": "us-west-2",\n\t"model": {"max_model_len": 8192}\n}\n',  # JSON, tab-indented
    b'{"strict":false,"region":"us-west-2","model":{"max_model_len":8.192e3}}',
], ids=["utf8", "utf8-bom", "utf16le-bom", "utf16be-bom", "crlf", "utf16-crlf", "json-tabs", "json-exponent"])
def test_every_accepted_encoding_and_form_reads_the_same_deployment(tmp_path, data):
    path = tmp_path / "deployment.yaml"
    path.write_bytes(data)
    config = load_config(path)
    assert (config.region, config.model.max_model_len, config.strict) == ("us-west-2", 8192, False)


@pytest.mark.parametrize("data, problem", [
    ("region: us-west-2\n# caf\u00e9\n".encode("latin-1"),
     "it is not UTF-8 (byte 0xE9 on line 2 is invalid continuation byte; Latin-1 or Windows-1252 perhaps)"),
    (SMALL.encode("utf-16-le"), "it looks like UTF-16 without a byte-order mark (every other byte is NUL)"),
    (b"\xff\xfe\x00\x00" + SMALL.encode("utf-32-le"), "it is UTF-32 (its byte-order mark says so)"),
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "it is binary, not text (a NUL byte at offset 7)"),
    (b"\xff\xfe" + "region: x\x00\n".encode("utf-16-le"), "it is binary, not text (a NUL character at character 9)"),
    (b"\xff\xfe" + SMALL.encode("utf-16-le") + b"\x00\xd8", "it starts with a UTF-16 byte-order mark and is not "
                                                            "UTF-16 (unexpected end of data at byte"),
], ids=["latin-1", "utf16-no-bom", "utf32", "binary", "utf16-with-nul", "utf16-broken"])
def test_another_encoding_or_a_binary_file_is_refused_naming_the_file_and_what_it_is(tmp_path, data, problem):
    path = tmp_path / "deployment.yaml"
    path.write_bytes(data)
    message = str(pytest.raises(ConfigError, load_config, path).value)
    assert message.startswith(f"cannot read configuration file {path}: {problem}"), message
    assert message.endswith(f"{ACCEPTED} (PowerShell: Out-File -Encoding utf8)") and "\n" not in message


def test_merge_keys_and_aliases_are_yaml_and_a_written_key_overrides_a_merged_one(tmp_path):
    config = load_config(write(tmp_path, (
        "strict: false\n"
        "prefill: &pool {instance_type: g6e.12xlarge, desired_size: 2, max_size: 3}\n"
        "decode:\n  <<: *pool\n  desired_size: 1\n"
        "model: {source: Qwen/Qwen3-32B, served_name: q, tensor_parallel_size: 4}\n")))
    assert (config.decode.pool.instance_type, config.decode.pool.desired_size, config.decode.pool.max_size) == \
        ("g6e.12xlarge", 1, 3)
    several = load_config(write(tmp_path, (
        "strict: false\nmodel: &a {max_model_len: 8192}\n"
        "prefill: &b {max_size: 4}\n"
        "decode: {<<: [*b, {desired_size: 2}], min_size: 1}\n")))
    assert (several.decode.pool.desired_size, several.decode.pool.max_size, several.decode.pool.min_size) == (2, 4, 1)
    # Repeats are still refused among the keys a mapping writes itself.
    repeated = error_for(tmp_path, "prefill: &p {desired_size: 1}\ndecode:\n  <<: *p\n  max_size: 2\n  max_size: 3\n")
    assert "key 'max_size' is given twice (lines 4 and 5)" in repeated, repeated


@pytest.mark.parametrize("text, problem", [
    (ALIAS_BOMB, "at line 5, column 4: its aliases expand to more than 10,000 values (an alias bomb?); "
                 "accepted: at most 10,000"),
    ("".join("  " * i + f"k{i}:\n" for i in range(5000)) + "  " * 5000 + "v\n",
     "at line 64, column 127: nested more than 64 levels deep; accepted: at most 64 (a configuration needs about 4)"),
    ("a: &x [*x]\n", "at line 1, column 4: an alias refers to a node that contains it (a loop)"),
    ("a: &a " + "[" * 60 + "1" + "]" * 60 + "\nb: " + "[" * 10 + "*a" + "]" * 10 + "\n", "nested more than 64 levels deep once its aliases are expanded; accepted: at most 64"),
    ("region: 2026-13-45\n", "month must be in 1..12; accepted: a value YAML can read (quote it to make it text)"),
    ("region: \x07\n", "unacceptable character #x0007: special characters are not allowed"),
])
def test_yaml_past_its_bounds_is_refused_with_the_reason(tmp_path, text, problem):
    message = error_for(tmp_path, text)
    assert message.startswith(f"malformed YAML in {tmp_path / 'deployment.yaml'}"), message
    assert problem in message and "\n" not in message, message


@pytest.mark.parametrize("text, problem", [
    ("[" * 5000 + "]" * 5000, "nested more than 64 levels deep; accepted: at most 64"),
    ("[" * 65 + "]" * 65, "nested more than 64 levels deep; accepted: at most 64"),
    ('{"region": "us-west-2", "region": "eu-west-1"}',
     "key 'region' is given twice in one object; accepted: each key once in its section"),
])
def test_json_past_its_bounds_is_refused_with_the_reason(tmp_path, text, problem):
    assert error_for(tmp_path, text) == f"malformed JSON in {tmp_path / 'deployment.yaml'}: {problem}"


CLI_CASES = {
    "utf16-bom": (b"\xff\xfe" + SMALL.encode("utf-16-le"), 0, None),
    "latin-1": ("region: us-west-2\n# caf\u00e9\n".encode("latin-1"), 2, "it is not UTF-8"),
    "binary": (bytes(range(256)) * 4, 2, "it is binary, not text"),
    "deep": (("".join("  " * i + f"k{i}:\n" for i in range(5000)) + "  " * 5000 + "v\n").encode(), 2,
             "nested more than 64 levels deep"),
    "alias-bomb": (ALIAS_BOMB.encode(), 2, "its aliases expand to more than 10,000 values"),
    "local-source": (b"strict: false\nmodel: {source: ./models/x, served_name: m, architecture: auto}\n", 2,
                     "model.source: a local path: the pods cannot read the files of the machine that renders"),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", CLI_CASES)
def test_plan_reads_or_refuses_each_file_with_exit_2_and_no_traceback(tmp_path, case):
    """Through the real command in a process of its own: ``plan`` loads the file as synth does."""
    data, code, problem = CLI_CASES[case]
    path = tmp_path / "deployment.yaml"
    path.write_bytes(data)
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="400")
    result = subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", "plan", "--config", str(path)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    if problem is not None:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(path) in errors[0], result.stderr
        # A file that cannot be read is one line; a setting the model refuses is its own line below.
        assert problem in (errors[0] if code == 2 and case != "local-source" else result.stderr), result.stderr
