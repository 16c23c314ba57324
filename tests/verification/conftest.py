"""Fixtures for the gate: the reference deployment's rendered charts and gate settings, once per session."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import cdk8s
import pytest

from fake_cluster import FakeDeployment, Scenario
from ray_llm_eks.cdk8s_charts import build_serving_charts
from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart
from ray_llm_eks.config import DeploymentConfig, parse_config
from ray_llm_eks.verification import bundle


@dataclass(frozen=True)
class Deployed:
    config: DeploymentConfig
    rayservice: dict[str, Any]
    settings: dict[str, Any]
    settings_config_map: dict[str, Any]
    """The gate settings ConfigMap as the verification chart renders it (name, labels, data)."""


def _deployed(config: DeploymentConfig) -> Deployed:
    specs = config.specs()
    spec = specs.serving
    app = cdk8s.App()
    charts = build_serving_charts(app, spec)
    plan = GatePlan.of(spec, specs.verification, charts)
    rayservice = next(o for o in charts.rayservice.to_json() if o["kind"] == "RayService")
    verification = build_verification_chart(app, spec, specs.verification, plan, charts, signal_url=None)
    settings_map = next(o for o in verification.to_json()
                        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == verification.settings_name)
    return Deployed(config, rayservice, plan.settings.to_json(), settings_map)


@pytest.fixture(scope="session")
def disaggregated() -> Deployed:
    return _deployed(DeploymentConfig())


@pytest.fixture(scope="session")
def colocated() -> Deployed:
    return _deployed(parse_config({"topology": "colocated"}))


@pytest.fixture(scope="session")
def in_cluster_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as the gate's ConfigMap mounts it: the bundle's files in ``rayllmeks_gate/``."""
    root = tmp_path_factory.mktemp("program")
    package = root / bundle.IN_CLUSTER_PACKAGE
    package.mkdir()
    for name, text in bundle.files().items():
        (package / name).write_text(text)
    return root


@pytest.fixture
def fake(tmp_path: Path, request: pytest.FixtureRequest, disaggregated: Deployed) -> Iterator[FakeDeployment]:
    deployed = getattr(request, "param", None) or disaggregated
    scenario = Scenario()
    deployment = FakeDeployment(tmp_path, deployed.rayservice, deployed.settings, scenario)
    yield deployment
    deployment.close()


