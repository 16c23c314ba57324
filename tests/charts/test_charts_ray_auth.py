"""Ray token authentication (serving.ray_auth: token) with KubeRay 1.5.1, and why 1.4.0 cannot have it."""

from __future__ import annotations

import cdk8s
import pytest

from helpers.charts import CRD_FILE, CRD_FILE_V1_5_1, strict_validator
from ray_llm_eks.cdk8s_charts import build_serving_charts
from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.deployment import Versions
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.serving import ServiceSettings

TOKEN_AUTH = ServiceSettings(ray_auth="token")
TOKEN = Deployment(serving=TOKEN_AUTH, versions=Versions(kuberay="1.5.1"))


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
    errors = [e.message for e in strict_validator(CRD_FILE).iter_errors(service)]
    assert any("authOptions" in e for e in errors)


def test_the_default_renders_no_auth_options(scenario):
    assert "authOptions" not in scenario("disaggregated").cluster


def test_the_mode_is_part_of_the_cluster_spec_hash(token, scenario):
    """A changed mode needs a new RayCluster (the gate rolls one out when the hash changes)."""
    service, _ = token
    annotation = "ray-llm-eks/cluster-spec-hash"
    hashed = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["metadata"]["annotations"]
    default = scenario("disaggregated").head_group["template"]["metadata"]["annotations"]
    assert hashed[annotation] != default[annotation]


@pytest.mark.parametrize(("versions", "accepted"), [
    (Versions(), "KubeRay 1.5.1 or later"),  # the default operator is 1.4.0
    (Versions(kuberay="1.5.0"), "KubeRay 1.5.1 or later"),
])
def test_token_mode_needs_kuberay_1_5_1(versions, accepted):
    with pytest.raises(SpecErrors, match=r"serving\.ray_auth.*has no authOptions.*" + accepted):
        Deployment(serving=TOKEN_AUTH, versions=versions)


def test_the_gate_may_read_the_token_only_when_token_mode_is_on(token):
    _, objects = token
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-gate")]
    secrets = [r for r in role["rules"] if "secrets" in r["resources"]]
    assert secrets == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and "gate.json" in (o.get("data") or {})]
    import json

    assert json.loads(config_map["data"]["gate.json"])["ray_auth"] == "token"
    _, default_objects = _render(Deployment())
    (default_role,) = [o for o in default_objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-gate")]
    assert not [r for r in default_role["rules"] if "secrets" in r["resources"]]
