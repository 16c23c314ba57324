"""disaggregation.min_prompt_tokens: the configuration's refusals, the rendered Serve application and
pods, and the archive the Ray nodes import (unpacked by Ray 2.58's own runtime-env code)."""

from __future__ import annotations

import base64
import io
import sys
import zipfile

import pytest

from helpers.charts import SCENARIOS, render
from ray_llm_eks.base import wire
from ray_llm_eks.config import ConfigError, parse_config
from ray_llm_eks.pd import bundle


@pytest.fixture(scope="module")
def conditional():
    return render(SCENARIOS["conditional"])


@pytest.fixture(scope="module")
def plain():
    return render(SCENARIOS["disaggregated"])


# --- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "says"), [
    ({"disaggregation": {"min_prompt_tokens": -1}}, "not a prompt length in tokens (got -1); accepted: a whole number >= 0"),
    ({"disaggregation": {"min_prompt_tokens": 4097}}, "above model.max_model_len (4096): no request could reach the "
                                                      "prefill leg (got 4097); accepted: 0 to 4096"),
    ({"topology": "colocated", "disaggregation": {"min_prompt_tokens": 1}}, "topology colocated has no prefill leg"),
    ({"disaggregation": {"min_prompt_tokens": "many"}}, "not a whole number (got 'many')"),
    # Up to max_model_len, but the gate must still send a probe that takes the prefill leg.
    ({"disaggregation": {"min_prompt_tokens": 4017}}, "leaves no room for the gate's remote-prefill probe"),
    ({"disaggregation": {"min_prompt_tokens": 4096}}, "accepted: 0 to 4016, or a smaller verification.probe_max_tokens"),
])
def test_refused_naming_the_field(data, says):
    with pytest.raises(ConfigError) as refused:
        parse_config({"strict": False, **data})
    (line,) = [l for l in str(refused.value).splitlines() if l.startswith("  ")]
    assert line.startswith("  disaggregation.min_prompt_tokens: ") and says in line


@pytest.mark.parametrize("value", [0, 1, 1024, 4016])
def test_accepted_from_zero_to_what_leaves_the_gate_a_remote_probe(value):
    assert parse_config({"strict": False, "disaggregation": {"min_prompt_tokens": value}}) \
        .specs().serving.disaggregation.min_prompt_tokens == value


def test_zero_on_colocated_is_todays_behaviour():
    parse_config({"strict": False, "topology": "colocated", "disaggregation": {"min_prompt_tokens": 0}})


# --- the rendered Serve application ------------------------------------------------------------------


def test_zero_renders_rays_own_builder_and_nothing_else(plain):
    application = plain.application
    assert application["import_path"] == "ray.serve.llm:build_pd_openai_app" and "runtime_env" not in application
    assert wire.PD_THRESHOLD_KEY not in application["args"]["decode_config"]["experimental_configs"]
    assert not [o for o in plain.all_objects() if o["metadata"]["name"].endswith("-pd-program")]


def test_the_application_carries_the_threshold_the_builder_and_the_archive(conditional):
    application = conditional.application
    assert application["import_path"] == "rayllmeks_pd.conditional:build_pd_openai_app"
    assert application["args"]["decode_config"]["experimental_configs"] == {
        "NIXL_SIDE_CHANNEL_PORT_BASE": 22000, wire.PD_THRESHOLD_KEY: 1024}
    assert application["args"]["prefill_config"]["experimental_configs"] == {"NIXL_SIDE_CHANNEL_PORT_BASE": 20000}
    assert application["runtime_env"] == {"py_modules": [f"file://{bundle.MOUNT_DIR}/{bundle.archive_name()}"]}


def test_rays_own_schemas_accept_it(conditional):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.schema import ServeDeploySchema

    decode = LLMConfig.model_validate(conditional.application["args"]["decode_config"])
    assert decode.experimental_configs[wire.PD_THRESHOLD_KEY] == 1024
    (application,) = ServeDeploySchema.model_validate(conditional.serve_config).applications
    # The Serve schema admits only remote URIs in py_modules (schema.py:828-850): file:// is one in Ray 2.58.
    assert application.runtime_env == conditional.application["runtime_env"]
    assert application.import_path == bundle.IMPORT_PATH


def test_every_ray_pod_mounts_the_archive_the_uri_names(conditional):
    (config_map,) = [o for o in conditional.all_objects()
                     if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "ray-llm-pd-program"]
    name = bundle.archive_name()
    assert base64.b64decode(config_map["binaryData"][name]) == bundle.archive()
    templates = [conditional.head_group["template"], *(g["template"] for g in conditional.cluster["workerGroupSpecs"])]
    assert len(templates) == 3
    for template in templates:
        (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "pd-program"]
        assert volume["configMap"] == {"name": "ray-llm-pd-program", "items": [{"key": name, "path": name}]}
        (mount,) = [m for c in template["spec"]["containers"] for m in c.get("volumeMounts", ())
                    if m["name"] == "pd-program"]
        assert mount == {"name": "pd-program", "mountPath": bundle.MOUNT_DIR, "readOnly": True}


# --- the archive --------------------------------------------------------------------------------------


def test_the_archive_is_the_same_bytes_for_the_same_files_and_named_by_them():
    assert bundle.archive() == bundle.archive()
    assert bundle.archive_name().startswith("rayllmeks_pd-") and bundle.archive_name(b"other") != bundle.archive_name()
    names = zipfile.ZipFile(io.BytesIO(bundle.archive())).namelist()
    assert names == ["py_modules/rayllmeks_pd/__init__.py", "py_modules/rayllmeks_pd/conditional.py",
                     "py_modules/rayllmeks_pd/wire.py"]


def test_ray_unpacks_it_into_an_importable_package(tmp_path):
    """What a node's runtime-env agent does with the file:// URI (packaging.py:941-950): copy, then unzip
    without the top-level directory; the result goes on PYTHONPATH (py_modules.py:225-242)."""
    from ray._private.runtime_env.packaging import unzip_package
    from ray._private.runtime_env.protocol import Protocol

    mounted = tmp_path / "mount" / bundle.archive_name()
    mounted.parent.mkdir()
    mounted.write_bytes(bundle.archive())
    copied = tmp_path / "copied.zip"
    Protocol.FILE.download_remote_uri(source_uri=f"file://{mounted}", dest_file=str(copied))
    module_dir = tmp_path / "module_dir"
    unzip_package(str(copied), str(module_dir), remove_top_level_directory=True, unlink_zip=True)
    package = module_dir / bundle.IN_CLUSTER_PACKAGE
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "conditional.py", "wire.py"]
    # The in-cluster wire is the repository's, and the module reads it from beside itself.
    sys.path.insert(0, str(module_dir))
    try:
        import rayllmeks_pd.wire as shipped_wire  # the archive's own copy
        assert shipped_wire.PD_REQUESTS_METRIC == wire.PD_REQUESTS_METRIC
        assert shipped_wire.PD_THRESHOLD_KEY == wire.PD_THRESHOLD_KEY
        assert "from . import wire" in (package / "conditional.py").read_text()
    finally:
        sys.path.remove(str(module_dir))
        for name in [n for n in sys.modules if n.startswith("rayllmeks_pd")]:
            del sys.modules[name]


def test_the_twin_profile_moves_the_archive_from_the_mount_to_the_runs_folder(conditional):
    from ray_llm_eks.twin import twin_profile

    serve, files = twin_profile.pd_program_for_twin(conditional.serve_config, conditional.objects["serving-rayservice"],
                                                    "/run/twin")
    name = bundle.archive_name()
    assert files == {name: bundle.archive()}
    assert serve["applications"][0]["runtime_env"] == {"py_modules": [f"file:///run/twin/{name}"]}
    assert conditional.application["runtime_env"]["py_modules"] == [bundle.uri()]  # the input is left as it was
