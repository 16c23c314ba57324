"""Run the deployment gate now, from a workstation, against any deployment of the model.

``ray-llm-eks verify`` calls :func:`verify_deployment` with the deployment its ``--config`` loads;
an app composed from the constructs calls it with the serving construct's spec
(``verify_deployment(serving.spec)``), so both are verified alike. Only the namespace and the
RayService name come from the spec: the gate's settings are the ones the cluster was deployed with
(the ``gate-settings`` ConfigMap the chart rendered), so a workstation cannot verify against a
spec other than the deployed one.

Read-only but for one object: unlike the gate Job after a deploy, it never deletes a stale
RayCluster. Probes go through the API server's proxy, so their latencies include it (the Job's do
not), and for the run a NetworkPolicy admits the API server's addresses to the probed ports
(deleted at the end; ``verification/api_proxy.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ContextManager

from .base.deployment import Deployment
from .base.serving import ServingSpec
from .base.wire import INSTANCE_LABEL, GateSettings, read_only_run
from .kubeconfig import load_access
from .verification.api_proxy import admitted, port_of
from .verification.gate import Gate
from .verification.kube import Endpoints, Kube
from .verification.report import Report
from .verification.rollout import deployed_settings

DEFAULT_TIMEOUT_S = 300.0
"""Seconds to wait for the service before probing (``verify --timeout``)."""


def verify_deployment(deployment: Deployment | ServingSpec, *,
                      kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None,
                      namespace: str | None = None, service: str | None = None,
                      timeout_s: float = DEFAULT_TIMEOUT_S, probes: int | None = None,
                      expected_provider: str | None = None,
                      log: Callable[[str], None] = lambda message: None) -> Report:
    """The gate's report for the deployment in the cluster ``kubeconfig`` (default: ``$KUBECONFIG`` or
    ``~/.kube/config``) and ``context`` (default: its current one) reach.

    :param deployment: the declared deployment, or the serving spec of a composed app
        (``RayLlmServing.spec``); its namespace and service name say where to look, unless
        ``namespace`` or ``service`` are given.
    :param probes: default: the deployed gate's count.
    :param expected_provider: default: the deployed gate's (``efa``), e.g. ``tcp`` where no EFA device exists.
    :raises NoClusterAccess: the kubeconfig gives no access.
    :raises LookupError: no gate settings in the cluster for that service.
    :raises ApiError: the API server refused a request.
    :raises ValueError: the settings in the cluster are ones this version cannot read.
    """
    kube, gate_settings = deployed_gate(deployment, kubeconfig=kubeconfig, context=context, namespace=namespace,
                                        service=service, timeout_s=timeout_s, probes=probes,
                                        expected_provider=expected_provider)
    with proxied(kube, gate_settings, log=log):
        return Gate(gate_settings, kube, Endpoints(kube, via_api_proxy=True), log=log).run()


def deployed_gate(deployment: Deployment | ServingSpec, *, kubeconfig: str | os.PathLike[str] | None = None,
                  context: str | None = None, namespace: str | None = None, service: str | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S, **overrides: Any) -> tuple[Kube, GateSettings]:
    """The API client for the cluster, and the gate settings the deployment was deployed with, as a
    read-only run (:func:`~ray_llm_eks.base.wire.read_only_run`) with ``overrides`` (None: the deployed value)."""
    serving = deployment.specs().serving if isinstance(deployment, Deployment) else deployment
    namespace = namespace or serving.namespace
    service = service or serving.service_name
    kube = Kube(load_access(kubeconfig, context))
    settings = deployed_settings(kube, namespace, service)
    chosen = read_only_run(float(timeout_s), **{k: v for k, v in overrides.items() if v is not None})
    return kube, GateSettings.from_json({**settings, **chosen})


def proxied(kube: Kube, gate_settings: GateSettings, *, log: Callable[[str], None]) -> ContextManager[None]:
    """While inside: the NetworkPolicy that admits the API server to the ports the gate reaches
    through its proxy (the OpenAI Service, the workers' metrics, the counter readers; never Ray's
    dashboard, which the gate does not call)."""
    ports = [port_of(gate_settings.openai_url),
             gate_settings.metrics_port, gate_settings.efa_counter_port]
    return admitted(kube, gate_settings.namespace, gate_settings.ray_service, INSTANCE_LABEL, ports, log=log)
