"""Each P/D leg runs only on its own worker group: Ray custom resources and placement groups.

Pods are pinned to node groups by nodeSelector and taint; replicas are pinned to pods by a Ray
custom resource that each worker group advertises (``rayStartParams.resources``) and that each
leg's ``placement_group_config`` requires. The schema and the bundle arithmetic are Ray 2.58's:
``ray/llm/_internal/common/placement.py`` (``PlacementGroupConfig``) and
``ray/llm/_internal/serve/core/server/llm_server.py``
(``_merge_replica_actor_and_child_actor_bundles``, loaded from the installed Ray below, since
importing that module needs vLLM).
"""

from __future__ import annotations

import ast
import copy
import json
import math
import shlex
from pathlib import Path
from typing import Any

import pytest

from helpers.charts import SCENARIOS
from ray_llm_eks.base.serving import Topology
from ray_llm_eks.cdk8s_charts import pod_templates, serve_config

ROLES = ("prefill", "decode")
DISAGGREGATED = sorted(name for name, deployment in SCENARIOS.items() if deployment.topology != Topology.colocated)
COLOCATED = sorted(name for name, deployment in SCENARIOS.items() if deployment.topology == Topology.colocated)


def _advertised(rendered, role: str) -> dict[str, float]:
    """The resources ``ray start`` receives, parsed the way bash and Ray parse them.

    KubeRay writes ``--resources=<value>`` into the ``/bin/bash -c`` command line; ``shlex``
    splits it as bash does, and Ray's own ``parse_resources_json`` reads the result.
    """
    from ray._private.utils import parse_resources_json

    value = rendered.worker_group(role)["rayStartParams"]["resources"]
    (argument,) = shlex.split(f"--resources={value}")
    flag, _, text = argument.partition("=")
    assert flag == "--resources"

    class _Logger:
        def error(self, *args):
            raise AssertionError(f"ray start would reject --resources={text}: {args}")

        abort = error

    class _Cf:
        @staticmethod
        def bold(text):
            return text

    return parse_resources_json(text, _Logger(), _Cf())


def _kuberay_resources_map(value: str) -> dict[str, float]:
    """KubeRay's ``getResourcesMap`` (ray-operator/controllers/ray/common/pod.go): trim quotes,
    spaces and backticks, then unmarshal the JSON."""
    return json.loads(value.strip("'\"` "))


def _leg(rendered, role: str) -> dict[str, Any]:
    return rendered.application["args"][f"{role}_config"]


@pytest.fixture(scope="module")
def merge_replica_and_engine_bundles():
    """Ray 2.58's own ``_merge_replica_actor_and_child_actor_bundles``, taken from the installed
    ``llm_server.py`` source (the module itself cannot be imported without vLLM)."""
    import ray.llm._internal.serve.core as core

    source = (Path(core.__file__).parent / "server" / "llm_server.py").read_text()
    (function,) = [
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name == "_merge_replica_actor_and_child_actor_bundles"
    ]
    namespace: dict[str, Any] = {"copy": copy, "Dict": dict, "List": list}
    exec(compile(ast.Module(body=[function], type_ignores=[]), "llm_server.py", "exec"), namespace)
    return namespace[function.name]


# --- Worker groups advertise their role --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("role", ROLES)
def test_each_worker_group_advertises_one_unit_of_its_role_per_gpu(scenario, name, role):
    rendered = scenario(name)
    gpus = rendered.config.specs().pool(role).gpus_per_node
    assert _advertised(rendered, role) == {role: gpus}
    assert rendered.worker_group(role)["rayStartParams"]["num-gpus"] == str(gpus)


@pytest.mark.parametrize("role", ROLES)
def test_the_resources_value_is_kuberays_own_quoting(disaggregated, role):
    value = disaggregated.worker_group(role)["rayStartParams"]["resources"]
    # What KubeRay writes when it fills `resources` itself: fmt.Sprintf("'%s'", json).
    assert value == f"'{{\"{role}\":1}}'"
    assert _kuberay_resources_map(value) == {role: 1}


def test_the_head_advertises_no_role_resource(disaggregated):
    assert "resources" not in disaggregated.head_group["rayStartParams"]


def test_resource_names_are_checked():
    with pytest.raises(ValueError, match="not a worker role"):
        serve_config.role_resource("prefil")
    with pytest.raises(ValueError, match="single quote"):
        pod_templates.ray_resources_param({"it's": 1})


# --- Each leg requires its own role ------------------------------------------------------------


@pytest.mark.parametrize("name", DISAGGREGATED)
@pytest.mark.parametrize("role", ROLES)
def test_each_leg_needs_its_role_beside_every_gpu_all_on_one_node(scenario, name, role):
    rendered = scenario(name)
    leg = _leg(rendered, role)
    tp = leg["engine_kwargs"]["tensor_parallel_size"]
    assert leg["placement_group_config"] == {"bundles": [{"GPU": 1, role: 1}] * tp, "strategy": "STRICT_PACK"}
    other = "decode" if role == "prefill" else "prefill"
    assert all(other not in bundle for bundle in leg["placement_group_config"]["bundles"])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_placement_group_configs_pass_rays_placement_schema_unchanged(scenario, name):
    """``VLLMEngineConfig`` validates ``placement_group_config`` with ``PlacementGroupConfig`` and
    keeps ``model_dump(exclude_unset=True)``; LLMConfig keeps it as given and still resolves a GPU
    accelerator (bundles without a GPU would turn ``accelerator_type: L4`` into an error)."""
    from ray.llm._internal.common.placement import PlacementGroupConfig
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    args = scenario(name).application["args"]
    legs = args.get("llm_configs") or [args["prefill_config"], args["decode_config"]]
    for leg in legs:
        ours = leg["placement_group_config"]
        assert PlacementGroupConfig(**ours).model_dump(exclude_unset=True) == ours
        validated = LLMConfig.model_validate(leg)
        assert validated.placement_group_config == ours
        assert validated.accelerator_config.kind == "gpu"


@pytest.mark.parametrize("name", DISAGGREGATED)
@pytest.mark.parametrize("role", ROLES)
def test_a_node_admits_exactly_the_replicas_it_can_host_and_the_other_role_none(
    scenario, merge_replica_and_engine_bundles, name, role
):
    """Ray's arithmetic: the replica actor (1 CPU, Serve's default) joins the first engine
    bundle, Ray adds the accelerator hint to each bundle, and STRICT_PACK puts the whole
    placement group on one node; count how many fit a node of each worker group."""
    rendered = scenario(name)
    leg = _leg(rendered, role)
    accelerator = f"accelerator_type:{leg['accelerator_type']}"
    engine_bundles = [{**bundle, accelerator: 0.001} for bundle in leg["placement_group_config"]["bundles"]]
    bundles = merge_replica_and_engine_bundles(engine_bundles, {"CPU": 1, "GPU": 0})
    demand: dict[str, float] = {}
    for bundle in bundles:
        for key, amount in bundle.items():
            demand[key] = demand.get(key, 0) + amount

    def fits(node_role: str) -> int:
        params = rendered.worker_group(node_role)["rayStartParams"]
        capacity = {
            "CPU": float(params["num-cpus"]),
            "GPU": float(params["num-gpus"]),
            accelerator: 1.0,  # Ray advertises 1 unit of the node's accelerator type
            **_advertised(rendered, node_role),
        }
        return min(math.floor(capacity.get(key, 0) / amount) for key, amount in demand.items() if amount)

    group = rendered.config.specs().pool(role)
    tp = leg["engine_kwargs"]["tensor_parallel_size"]
    assert fits(role) == group.gpus_per_node // tp
    assert fits(role) * group.desired_size == leg["deployment_config"]["num_replicas"]
    other = "decode" if role == "prefill" else "prefill"
    assert fits(other) == 0


# --- Colocated: either group ------------------------------------------------------------------


@pytest.mark.parametrize("name", COLOCATED)
def test_colocated_replicas_may_use_either_group_but_stay_on_one_node(scenario, name):
    rendered = scenario(name)
    (model,) = rendered.application["args"]["llm_configs"]
    tp = model["engine_kwargs"]["tensor_parallel_size"]
    assert model["placement_group_config"] == {"bundles": [{"GPU": 1}] * tp, "strategy": "STRICT_PACK"}
    # The workers still advertise their roles: the pods are the same in both topologies.
    for role in ROLES:
        assert _advertised(rendered, role) == {role: rendered.config.specs().pool(role).gpus_per_node}
