"""Run the deployment gate now, from a workstation, against any deployment of the model.

``ray-llm-eks verify`` calls :func:`verify_deployment` with the deployment its ``--config`` loads;
an app composed from the constructs calls it with the serving construct's specs
(``verify_deployment(serving.specs)``), so both are verified alike. The gate's settings are the
local configuration's, rendered as the deploy renders them (the same charts, the same run id), not
the cluster's: the gate's own account may create ConfigMaps, so a settings ConfigMap in the cluster
proves nothing (a planted one could ask for ``min_kv_fraction: 0`` or the ``tcp`` provider, and
open verify's API-proxy NetworkPolicy to the ports it names). The cluster's copy (the ConfigMap the
deploy applied, ``<service>-gate-<run>``) is still read, and a run refuses to start when it is
missing (the cluster runs another spec than the local configuration) or differs from the local
rendering, naming every field that differs.

Read-only but for one object: unlike the gate Job after a deploy, it never deletes a stale
RayCluster. Probes go through the API server's proxy, so their latencies include it (the Job's do
not), and for the run a NetworkPolicy admits the API server's addresses to the probed ports
(deleted at the end; ``verification/api_proxy.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ContextManager

import json
from dataclasses import replace
from typing import Mapping

from .base.deployment import Deployment
from .base.specs import Specs
from .base.serving import ServingSpec
from .base.verification import VerificationSpec
from .base.wire import GATE_SETTINGS_FILE, INSTANCE_LABEL, GateSettings, read_only_run
from .kubeconfig import load_access
from .verification.api_proxy import admitted, port_of
from .verification.gate import Gate
from .verification.kube import ApiError, Endpoints, Kube
from .verification.report import Report

DEFAULT_TIMEOUT_S = 300.0
"""Seconds to wait for the service before probing (``verify --timeout``)."""
PACE_SETTINGS = ("poll_seconds", "metrics_settle_seconds", "post_probe_reserve_seconds", "serve_settle_seconds")
"""The only settings ``pace`` may change: how often the run polls and how long it waits, never what
it checks or where (the loopback tests' fake cluster answers at once, so they run faster)."""


class SettingsMismatch(LookupError):
    """The cluster's copy of the gate settings is missing or differs from the local rendering."""


def local_settings(deployment: Deployment | Specs | ServingSpec, *, namespace: str | None = None,
                   service: str | None = None) -> GateSettings:
    """The gate settings the deploy of ``deployment`` renders (``GatePlan.of``, as ``RayLlmServing``
    does), optionally in another ``namespace`` or under another RayService name. A bare
    ``ServingSpec`` gets the default ``VerificationSpec``; pass ``RayLlmServing.specs`` otherwise."""
    import cdk8s

    from .cdk8s_charts import build_serving_charts
    from .cdk8s_charts.verification import GatePlan

    specs = deployment.specs() if isinstance(deployment, Deployment) else deployment
    serving, verification = (specs.serving, specs.verification) if isinstance(specs, Specs) \
        else (specs, VerificationSpec())
    if (namespace or serving.namespace) != serving.namespace or (service or serving.service_name) != serving.service_name:
        serving = replace(serving, service=replace(serving.service, namespace=namespace or serving.namespace,
                                                   service_name=service or serving.service_name))
    return GatePlan.of(serving, verification, build_serving_charts(cdk8s.App(), serving)).settings


def cluster_copy_differences(kube: Kube, settings: GateSettings) -> None:
    """Refuse (:class:`SettingsMismatch`) unless the cluster holds the settings ConfigMap of this very
    run (``settings.job_name``) with the same settings."""
    where = f"{settings.namespace}/{settings.job_name}"
    try:
        found = kube.config_map(settings.namespace, settings.job_name)
    except ApiError as error:
        if error.status != 404:
            raise
        raise SettingsMismatch(
            f"the cluster has no gate settings ConfigMap {where} (run {settings.run_id}): it runs another spec than "
            "the local configuration, or that deploy has not applied its gate yet; verify with the configuration "
            "the cluster was deployed from") from None
    try:
        theirs = json.loads((found.get("data") or {}).get(GATE_SETTINGS_FILE) or "")
    except ValueError:
        raise SettingsMismatch(f"the gate settings ConfigMap {where} holds no readable {GATE_SETTINGS_FILE}") from None
    ours = json.loads(json.dumps(settings.to_json()))  # as the ConfigMap holds them (tuples as lists)
    differing = sorted(key for key in set(ours) | set(theirs if isinstance(theirs, dict) else {})
                       if not isinstance(theirs, dict) or theirs.get(key) != ours.get(key))
    if differing:
        shown = "; ".join(f"{key}: cluster {json.dumps(theirs.get(key) if isinstance(theirs, dict) else None)}, "
                          f"local {json.dumps(ours.get(key))}" for key in differing[:12])
        more = f" (and {len(differing) - 12} more)" if len(differing) > 12 else ""
        raise SettingsMismatch(f"the gate settings in the cluster ({where}) differ from the local configuration's, "
                               f"so they are refused: {shown}{more}")


def verify_deployment(deployment: Deployment | Specs | ServingSpec, *,
                      kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None,
                      namespace: str | None = None, service: str | None = None,
                      timeout_s: float = DEFAULT_TIMEOUT_S, probes: int | None = None,
                      expected_provider: str | None = None, pace: Mapping[str, float] | None = None,
                      log: Callable[[str], None] = lambda message: None) -> Report:
    """The gate's report for the deployment in the cluster ``kubeconfig`` (default: ``$KUBECONFIG`` or
    ``~/.kube/config``) and ``context`` (default: its current one) reach.

    :param deployment: the declared deployment, or the specs of a composed app
        (``RayLlmServing.specs``; its ``spec`` alone takes the default verification settings);
        its settings are the gate's, and its namespace and service name say where to look, unless
        ``namespace`` or ``service`` are given.
    :param probes: default: the configuration's count.
    :param expected_provider: default: the configuration's (``efa``), e.g. ``tcp`` where no EFA device exists.
    :param pace: only :data:`PACE_SETTINGS` (poll and wait times), for a cluster that answers at once.
    :raises NoClusterAccess: the kubeconfig gives no access.
    :raises SettingsMismatch: the cluster's copy of the settings is missing or differs from the local one.
    :raises ApiError: the API server refused a request.
    :raises ValueError: the settings in the cluster are ones this version cannot read.
    """
    kube, gate_settings = deployed_gate(deployment, kubeconfig=kubeconfig, context=context, namespace=namespace,
                                        service=service, timeout_s=timeout_s, probes=probes,
                                        expected_provider=expected_provider, pace=pace)
    with proxied(kube, gate_settings, log=log):
        return Gate(gate_settings, kube, Endpoints(kube, via_api_proxy=True), log=log).run()


def deployed_gate(deployment: Deployment | Specs | ServingSpec, *, kubeconfig: str | os.PathLike[str] | None = None,
                  context: str | None = None, namespace: str | None = None, service: str | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S, pace: Mapping[str, float] | None = None,
                  **overrides: Any) -> tuple[Kube, GateSettings]:
    """The API client for the cluster, and the local configuration's gate settings
    (:func:`local_settings`), once the cluster's copy matches them (:func:`cluster_copy_differences`),
    as a read-only run (:func:`~ray_llm_eks.base.wire.read_only_run`) with ``overrides`` (None: the
    configuration's value) and ``pace`` (:data:`PACE_SETTINGS` only)."""
    settings = local_settings(deployment, namespace=namespace, service=service)
    unknown = sorted(set(pace or {}) - set(PACE_SETTINGS))
    if unknown:
        raise ValueError(f"pace may set only {', '.join(PACE_SETTINGS)} (got {', '.join(unknown)})")
    kube = Kube(load_access(kubeconfig, context))
    cluster_copy_differences(kube, settings)
    chosen = read_only_run(float(timeout_s), **dict(pace or {}),
                           **{k: v for k, v in overrides.items() if v is not None})
    return kube, GateSettings.from_json({**settings.to_json(), **chosen})


def proxied(kube: Kube, gate_settings: GateSettings, *, log: Callable[[str], None]) -> ContextManager[None]:
    """While inside: the NetworkPolicy that admits the API server to the ports the gate reaches
    through its proxy (the OpenAI Service, the workers' metrics, the counter readers; never Ray's
    dashboard, which the gate does not call)."""
    ports = [port_of(gate_settings.openai_url),
             gate_settings.metrics_port, gate_settings.efa_counter_port]
    return admitted(kube, gate_settings.namespace, gate_settings.ray_service, INSTANCE_LABEL, ports, log=log)
