"""The in-cluster bench Job (``ray-llm-eks bench --emit-job``): what it runs, where, with what rights."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from ray_llm_eks.bench import bundle
from ray_llm_eks.cdk8s_charts import bench as chart
from ray_llm_eks.base.wire import INSTANCE_LABEL
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base import instance_types, sizing
from ray_llm_eks.base.pools import DEFAULT_SYSTEM_INSTANCE_TYPE

KUBERNETES_VERSION = "1.35.0"


@pytest.fixture(scope="module")
def rendered():
    spec = Deployment().specs().serving
    settings = {"url": chart.in_cluster_url(spec), "model": spec.model.served_name, "tokenizer": spec.model.source,
                "concurrency": [1, 8], "hourly_cost_usd": 4.7}
    name, text = chart.render_bench_job(spec, settings)
    objects = {o["kind"]: o for o in yaml.safe_load_all(text)}
    return spec, name, objects


def test_it_is_a_config_map_and_a_job_of_the_same_name_in_the_serving_namespace(rendered):
    spec, name, objects = rendered
    assert set(objects) == {"ConfigMap", "Job"}
    for obj in objects.values():
        assert obj["metadata"]["name"] == name and obj["metadata"]["namespace"] == spec.namespace
        assert obj["metadata"]["labels"][INSTANCE_LABEL] == spec.service_name
    assert name.startswith(f"{spec.service_name}-bench-")


def test_both_pass_kubernetes_validate_strict(rendered):
    import kubernetes_validate

    for obj in rendered[2].values():
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_program_and_settings_are_mounted_as_the_package(rendered):
    _, _, objects = rendered
    data = objects["ConfigMap"]["data"]
    assert set(bundle.files()) <= set(data)
    settings = json.loads(data[chart.SETTINGS_FILE])
    assert settings["aiperf"] == chart.AIPERF_IN_POD
    volume = objects["Job"]["spec"]["template"]["spec"]["volumes"][0]
    paths = {item["path"] for item in volume["configMap"]["items"]}
    assert {f"{bundle.IN_CLUSTER_PACKAGE}/{f}" for f in bundle.files()} | {chart.SETTINGS_FILE} == paths


def test_the_url_is_the_openai_service_s_cluster_address(rendered):
    from ray_llm_eks.cdk8s_charts.serving import openai_service_name

    spec, _, objects = rendered
    settings = json.loads(objects["ConfigMap"]["data"][chart.SETTINGS_FILE])
    assert settings["url"] == f"http://{openai_service_name(spec.service_name)}.{spec.namespace}.svc:8000"


def test_the_pod_runs_on_the_system_node_unprivileged_without_api_access(rendered):
    spec, _, objects = rendered
    pod = objects["Job"]["spec"]["template"]["spec"]
    assert objects["Job"]["spec"]["backoffLimit"] == 0
    assert pod["nodeSelector"] == spec.system.labels
    assert "tolerations" not in pod  # never on a GPU node
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["image"] == spec.image_uri  # already on the node: nothing new to pull
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] and context["capabilities"]["drop"] == ["ALL"]
    assert not context["allowPrivilegeEscalation"]
    assert container["resources"]["requests"] == container["resources"]["limits"] == {
        "cpu": sizing.BENCH_JOB.cpu_quantity, "memory": sizing.BENCH_JOB.memory_quantity}


def test_the_job_fits_beside_the_head_on_the_default_system_node():
    instance = instance_types.INSTANCE_TYPES[DEFAULT_SYSTEM_INSTANCE_TYPE]
    room = (sizing.estimated_allocatable(instance) - sizing.SYSTEM_DAEMONSET_BUDGET - sizing.SYSTEM_POD_BUDGET
            - sizing.head_resources(instance))
    assert room.cpu_millis >= sizing.BENCH_JOB.cpu_millis and room.memory_mib >= sizing.BENCH_JOB.memory_mib


@pytest.mark.integration
def test_the_script_is_valid_shell_pins_aiperf_and_holds_for_the_copy(rendered):
    _, _, objects = rendered
    command = objects["Job"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    subprocess.run(["sh", "-n", "-c", command[2]], check=True)
    assert "'aiperf==0.13.0'" in command[2]
    assert f"-m {bundle.IN_CLUSTER_PACKAGE} {chart.PROGRAM_DIR}/{chart.SETTINGS_FILE} {chart.OUT_DIR}" in command[2]
    assert f"{chart.OUT_DIR}/{chart.FETCHED_MARKER}" in command[2]


def test_other_settings_are_another_job():
    spec = Deployment().specs().serving
    first, _ = chart.render_bench_job(spec, {"url": "u", "model": "m", "tokenizer": "t", "concurrency": [1]})
    second, _ = chart.render_bench_job(spec, {"url": "u", "model": "m", "tokenizer": "t", "concurrency": [2]})
    assert first != second
