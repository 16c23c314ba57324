"""Every synthesized object passes the upstream checkers, for every scenario."""

from __future__ import annotations

import copy

import pytest

from helpers.charts import CRD_FILE, KUBERNETES_VERSION, SCENARIOS, crd_document

ALL = sorted(SCENARIOS)


def _errors(validator, instance) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


# --- KubeRay v1.4.0 CRD, closed like kubectl --validate=strict ----------------------------------


@pytest.mark.parametrize("name", ALL)
def test_rayservice_matches_the_strict_kuberay_crd_schema(scenario, strict_rayservice_validator, name):
    assert _errors(strict_rayservice_validator, scenario(name).ray_service) == []


def test_the_strict_schema_rejects_an_unknown_field_anywhere(disaggregated, strict_rayservice_validator):
    """Proves the closing works: a typo deep inside a pod template, and at the top of the spec."""
    typo_in_container = copy.deepcopy(disaggregated.ray_service)
    container = typo_in_container["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    container["securityContxt"] = {"privileged": True}
    assert any("securityContxt" in e for e in _errors(strict_rayservice_validator, typo_in_container))

    typo_in_spec = copy.deepcopy(disaggregated.ray_service)
    typo_in_spec["spec"]["serveConfig"] = "applications: []"
    assert any("serveConfig" in e for e in _errors(strict_rayservice_validator, typo_in_spec))


def test_upgrade_strategy_none_is_a_value_the_crd_knows(disaggregated):
    (v1,) = [v for v in crd_document(CRD_FILE)["spec"]["versions"] if v["name"] == "v1"]
    upgrade = v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["upgradeStrategy"]
    # The CRD only types it as a string; KubeRay's webhook/controller accept NewCluster and None.
    assert upgrade["properties"]["type"]["type"] == "string"
    assert disaggregated.ray_service["spec"]["upgradeStrategy"] == {"type": "None"}


# --- Ray 2.58's own models ---------------------------------------------------------------------


def _llm_configs(rendered) -> list[dict]:
    args = rendered.application["args"]
    if "llm_configs" in args:
        return args["llm_configs"]
    return [args["prefill_config"], args["decode_config"]]


@pytest.mark.parametrize("name", ALL)
def test_every_llm_config_passes_ray_llmconfig(scenario, name):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    for llm_config in _llm_configs(scenario(name)):
        validated = LLMConfig.model_validate(llm_config)
        # Nothing was dropped or renamed on the way in.
        assert validated.model_id == llm_config["model_loading_config"]["model_id"]
        assert validated.engine_kwargs == llm_config["engine_kwargs"]
        assert validated.deployment_config == llm_config["deployment_config"]
        assert validated.placement_group_config == llm_config["placement_group_config"]


@pytest.mark.parametrize("name", ALL)
def test_the_serve_config_passes_ray_serve_deploy_schema(scenario, name):
    from ray.serve.schema import ServeDeploySchema

    rendered = scenario(name)
    schema = ServeDeploySchema.model_validate(rendered.serve_config)
    # ServeDeploySchema allows extra keys for forward compatibility: check ours were all understood.
    assert set(rendered.serve_config) <= set(ServeDeploySchema.model_fields)
    (application,) = schema.applications
    assert set(rendered.application) <= set(type(application).model_fields)
    assert schema.http_options.port == 8000
    assert schema.http_options.host == "0.0.0.0"


def test_accelerator_types_we_emit_are_the_ones_ray_accepts():
    from ray.llm._internal.serve.core.configs.accelerators import AcceleratorType

    from ray_llm_eks.cdk8s_charts.serve_config import RAY_ACCELERATOR_TYPES
    from ray_llm_eks.base.instance_types import INSTANCE_TYPES

    ray_values = {t.value for t in AcceleratorType}
    assert RAY_ACCELERATOR_TYPES <= ray_values
    gpu_models = {t.gpu_model for t in INSTANCE_TYPES.values() if t.gpu_model}
    # Every GPU of the instance table is known to Ray, so none silently loses its pinning.
    assert gpu_models <= RAY_ACCELERATOR_TYPES


# --- Kubernetes 1.35 (kubernetes-validate) -----------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_core_objects_pass_kubernetes_validate_strict(scenario, name):
    import kubernetes_validate

    core = [o for o in scenario(name).all_objects() if o["apiVersion"] in ("v1", "rbac.authorization.k8s.io/v1")]
    assert {o["kind"] for o in core} == {"Namespace", "ServiceAccount", "Service", "ConfigMap", "Pod", "Role",
                                         "RoleBinding"}
    for obj in core:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", ALL)
def test_pod_templates_pass_kubernetes_validate_strict(scenario, name):
    """The CRD embeds an older PodTemplateSpec schema; also check the templates against 1.35."""
    import kubernetes_validate

    cluster = scenario(name).cluster
    templates = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for template in templates:
        pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        kubernetes_validate.validate(pod_template, KUBERNETES_VERSION, strict=True)
