"""Combinations the spec layer refuses (so the charts are never built from them), each with a message that says why."""

from __future__ import annotations

import cdk8s
import pytest
from cdk8s_plus_35 import k8s

from ray_llm_eks.cdk8s_charts import build_serving_charts
from ray_llm_eks.cdk8s_charts.rayservice import (
    HeadGroupSpec,
    RayClusterConfig,
    RayService,
    RayServiceSpec,
    WorkerGroupSpec,
)
from helpers.charts import leg
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.serving import ModelSpec, ServiceSettings, Topology
from ray_llm_eks.base.instance_types import INSTANCE_TYPES
from ray_llm_eks.base import SpecError, sizing


def build(deployment: Deployment):
    return build_serving_charts(cdk8s.App(), deployment.specs().serving)


LLAMA = ModelSpec(source="meta-llama/Llama-3.1-8B-Instruct")


def test_hybrid_model_refuses_different_tensor_parallel_sizes():
    with pytest.raises(SpecErrors, match=r"decode.tensor_parallel_size: .*hybrid.*same tensor_parallel_size"):
        Deployment(prefill=leg("prefill", instance_type="g6.12xlarge", tensor_parallel_size=2),
                   decode=leg("decode", instance_type="g6.12xlarge", tensor_parallel_size=4))


def test_rayservice_name_over_47_characters_is_refused_by_config_and_by_the_object():
    with pytest.raises(SpecErrors, match="at most 47"):
        ServiceSettings(service_name="r" * 48)
    template = k8s.PodTemplateSpec(spec=k8s.PodSpec(containers=[k8s.Container(name="ray", image="ray")]))
    spec = RayServiceSpec(
        serve_config_v2="applications: []",
        ray_cluster_config=RayClusterConfig(
            ray_version="2.58.0", head_group_spec=HeadGroupSpec({}, template), worker_group_specs=[]
        ),
    )
    chart = cdk8s.Chart(cdk8s.App(), "c")
    with pytest.raises(ValueError, match="at most 47"):
        RayService(chart, "rs", name="r" * 48, spec=spec)
    assert RayService(chart, "ok", name="r" * 47, spec=spec).name == "r" * 47


def test_worker_group_replicas_outside_min_max_are_refused():
    template = k8s.PodTemplateSpec(spec=k8s.PodSpec(containers=[k8s.Container(name="ray", image="ray")]))
    with pytest.raises(ValueError, match="min <= replicas <= max"):
        WorkerGroupSpec("prefill", replicas=3, min_replicas=1, max_replicas=2, ray_start_params={}, template=template)


def test_tensor_parallel_size_that_leaves_gpus_idle_is_refused():
    with pytest.raises(SpecErrors, match="model.tensor_parallel_size: .*does not divide the 4 GPUs"):
        Deployment(model=ModelSpec(source="meta-llama/Llama-3.1-8B-Instruct", tensor_parallel_size=3),
                   prefill=leg("prefill", instance_type="g6.12xlarge"), decode=leg("decode", instance_type="g6.12xlarge"))


def test_a_leg_without_nodes_is_refused():
    with pytest.raises(SpecErrors, match=r"prefill.desired_size: the prefill leg would have no GPU"):
        Deployment(prefill=leg("prefill", min_size=0, desired_size=0))


def test_colocated_refuses_legs_with_different_tensor_parallel_sizes():
    with pytest.raises(SpecErrors, match=r"decode.tensor_parallel_size: topology colocated .*same tensor_parallel_size"):
        Deployment(topology=Topology.colocated, model=LLAMA,
                   prefill=leg("prefill", instance_type="g6.12xlarge", tensor_parallel_size=2),
                   decode=leg("decode", instance_type="g6.12xlarge", tensor_parallel_size=4))


def test_colocated_refuses_different_gpu_models_but_disaggregated_accepts_them():
    mixed = {"prefill": leg("prefill", instance_type="g6e.8xlarge"), "decode": leg("decode", instance_type="g6.8xlarge")}
    with pytest.raises(SpecErrors, match=r"decode.instance_type: topology colocated .*one GPU model"):
        Deployment(topology=Topology.colocated, **mixed)
    charts = build(Deployment(**mixed))
    args = charts.rayservice.serve_config.applications[0].args
    assert args["prefill_config"]["accelerator_type"] == "L40S"
    assert args["decode_config"]["accelerator_type"] == "L4"


def test_a_system_node_too_small_for_the_head_is_refused():
    tiny = INSTANCE_TYPES["m7i.large"]
    # m7i.large still fits (0.9 CPU, 4.5 GiB); a hypothetical 1-vCPU node does not.
    assert sizing.head_resources(tiny).cpu_millis >= sizing.HEAD_MINIMUM.cpu_millis
    from dataclasses import replace

    with pytest.raises(SpecError, match="system.instance_type: .*needs at least"):
        sizing.head_resources(replace(tiny, name="t.tiny", vcpus=1, memory_gib=2))


def test_reference_deployment_builds():
    charts = build_serving_charts(cdk8s.App(), Deployment().specs().serving)
    assert len(charts.charts) == 4
