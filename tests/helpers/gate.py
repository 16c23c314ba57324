"""The reference deployment's rendered RayService and gate settings, as the gate reads them (the
fixtures of tests/verification/conftest.py build each once per session)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cdk8s

from ray_llm_eks.base.wire import metric_namespace

from ray_llm_eks.cdk8s_charts import build_serving_charts
from ray_llm_eks.cdk8s_charts.verification import GatePlan, build_verification_chart
from ray_llm_eks.verification import bundle
from ray_llm_eks.base.deployment import Deployment


@dataclass(frozen=True)
class Deployed:
    config: Deployment
    rayservice: dict[str, Any]
    settings: dict[str, Any]
    settings_config_map: dict[str, Any]
    """The gate settings ConfigMap as the verification chart renders it (name, labels, data)."""
    program_archive: str
    """The program ConfigMap's archive, base64, as rendered."""


def render_deployment(config: Deployment) -> Deployed:
    specs = config.specs()
    spec = specs.serving
    app = cdk8s.App()
    charts = build_serving_charts(app, spec)
    plan = GatePlan.of(spec, specs.verification, charts)
    rayservice = next(o for o in charts.rayservice.to_json() if o["kind"] == "RayService")
    verification = build_verification_chart(app, spec, specs.verification, plan, charts, signal_secret=None,
                                            metric_namespace=metric_namespace(config.stack_name, spec.namespace,
                                                                              spec.service_name))
    settings_map = next(o for o in verification.to_json()
                        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == verification.settings_name)
    (program,) = [o for o in verification.to_json()
                  if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-gate-program")]
    return Deployed(config, rayservice, plan.settings.to_json(), settings_map, program["binaryData"][bundle.ARCHIVE])
