"""Ray token authentication (serving.ray_auth: token, the default) with KubeRay 1.5.1 (the default), and why
1.4.0, still selectable with ray_auth: disabled, cannot have it."""

from __future__ import annotations

import cdk8s
import pytest

from helpers.charts import CRD_FILE_V1_4_0, CRD_FILE_V1_5_1, strict_validator
from ray_llm_eks.cdk8s_charts import build_serving_charts
from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.deployment import Versions
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.serving import ServiceSettings

TOKEN_AUTH = ServiceSettings(ray_auth="token")
TOKEN = Deployment()
KUBERAY_1_4_0 = Deployment(serving=ServiceSettings(ray_auth="disabled"), versions=Versions(kuberay="1.4.0"))


def _render(deployment: Deployment) -> tuple[dict, list[dict]]:
    specs = deployment.specs()
    app = cdk8s.App()
    charts = build_serving_charts(app, specs.serving)
    (service,) = [o for o in cdk8s.Testing.synth(charts.rayservice) if o["kind"] == "RayService"]
    chart = build_verification_chart(app, specs.serving, specs.verification,
                                     GatePlan.of(specs.serving, specs.verification, charts), charts, None)
    return service, cdk8s.Testing.synth(chart)


@pytest.fixture(scope="module")
def token():
    return _render(TOKEN)


def test_token_mode_is_rendered_and_is_what_the_kuberay_1_5_1_crd_accepts(token):
    service, _ = token
    assert service["spec"]["rayClusterConfig"]["authOptions"] == {"mode": "token"}
    assert list(strict_validator(CRD_FILE_V1_5_1).iter_errors(service)) == []
    # KubeRay 1.4.0's CRD has no such field: the API server would prune it and Ray would run open.
    errors = [e.message for e in strict_validator(CRD_FILE_V1_4_0).iter_errors(service)]
    assert any("authOptions" in e for e in errors)


def test_token_mode_is_the_default_on_kuberay_1_5_1():
    specs = Deployment().specs()
    assert (specs.serving.service.ray_auth.value, specs.serving.kuberay_version) == ("token", "1.5.1")


def test_kuberay_1_4_0_with_auth_disabled_renders_what_its_crd_accepts():
    service, _ = _render(KUBERAY_1_4_0)
    assert "authOptions" not in service["spec"]["rayClusterConfig"]
    assert list(strict_validator(CRD_FILE_V1_4_0).iter_errors(service)) == []


def test_the_mode_is_part_of_the_cluster_spec_hash(token):
    """A changed mode needs a new RayCluster (the gate rolls one out when the hash changes)."""
    service, _ = token
    annotation = "ray-llm-eks/cluster-spec-hash"
    hashed = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["metadata"]["annotations"]
    default = _render(KUBERAY_1_4_0)[0]["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["metadata"]["annotations"]
    assert hashed[annotation] != default[annotation]


@pytest.mark.parametrize("serving", [ServiceSettings(), TOKEN_AUTH], ids=["default", "explicit"])
@pytest.mark.parametrize("kuberay", ["1.4.0", "1.5.0"])
def test_token_mode_needs_kuberay_1_5_1_and_the_error_names_both_fields(serving, kuberay):
    with pytest.raises(SpecErrors) as raised:
        Deployment(serving=serving, versions=Versions(kuberay=kuberay))
    (error,) = raised.value
    assert error.field == "serving.ray_auth"
    assert f"KubeRay {kuberay} (versions.kuberay" in str(error)
    assert "ray_auth: disabled" in str(error) and "versions.kuberay 1.5.1 or later" in str(error)


@pytest.mark.parametrize("deployment", [TOKEN, KUBERAY_1_4_0], ids=["token", "kuberay-1.4.0"])
def test_no_account_of_the_gate_or_continuous_verification_may_read_a_secret(deployment):
    """Serve's state comes from the RayService (verification.rollout): no Ray token, so no Secret."""
    import json

    _, objects = _render(deployment)  # continuous verification is on by default (observability)
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    assert {o["metadata"]["name"] for o in roles} >= {"ray-llm-gate", "ray-llm-cv"}
    assert [r for o in roles for r in o["rules"] if "secrets" in r["resources"] or "*" in r["resources"]] == []
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and "gate.json" in (o.get("data") or {})]
    assert json.loads(config_map["data"]["gate.json"])["ray_auth"] == deployment.specs().serving.service.ray_auth.value
