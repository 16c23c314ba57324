"""What the observability layer watches, stated once for the AWS side and the tests.

The transport lines are the deployment gate's own (``verification/evidence.py``, which quotes
each from its NIXL or vLLM source): the same lines that fail the gate, watched continuously in
the container logs the CloudWatch Observability add-on ships to
``/aws/containerinsights/<cluster>/application``. There, Fluent Bit wraps each container line as
JSON, the line in ``log`` and the pod in ``kubernetes`` (``namespace_name``, ``pod_name``,
``container_name``: the add-on's Fluent Bit ``application-log.conf`` with the ``kubernetes``
filter), so the metric filters are JSON patterns on ``$.log``.

CloudWatch Logs filter patterns (user guide, "Filter pattern syntax for metric filters,
subscription filters, filter log events, and Live Tail"): in a JSON pattern, a string value
matches the whole field unless ``*`` stands at its start or end (a ``*`` inside is literal), and
matching is case sensitive; ``&&``, ``||`` and parentheses combine comparisons. Each phrase
below is therefore a literal substring of the line, with no ``*`` inside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import Collector, problem
from .wire import SERVING_METRICS, TRANSPORT_VERIFIED, WORKER_CONTAINER

APPLICATION_LOG_GROUP = "/aws/containerinsights/{cluster}/application"
"""Where the add-on's Fluent Bit sends container logs (chart ``containerLogs.fluentBit``)."""
CONTAINER_INSIGHTS_NAMESPACE = "ContainerInsights"
ADDON_NAME = "amazon-cloudwatch-observability"
AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT = "amazon-cloudwatch", "cloudwatch-agent"
"""Where the add-on runs its agent and Fluent Bit (hostNetwork, host paths, every taint tolerated),
and the account both use (EKS user guide, "eks-add-ons": Pod Identity on amazon-cloudwatch/cloudwatch-agent)."""
AGENT_EXEMPTIONS = tuple(f"{AGENT_NAMESPACE}/{account}" for account in (
    AGENT_SERVICE_ACCOUNT, "dcgm-exporter-service-acct", "neuron-monitor-service-acct", "node-exporter-service-acct",
    "kube-state-metrics-service-acct", "amazon-cloudwatch-observability-controller-manager"))
"""The add-on's accounts the admission policy leaves alone when their controller creates the pod
(``serving.admission_exempt_agents``): every component tolerates every taint (chart
amazon-cloudwatch-observability 6.2.0, ``values.yaml`` ``tolerations: [{operator: Exists}]``), the
agent and Fluent Bit use host paths and hostNetwork. The names are the chart's defaults
(``templates/_helpers.tpl``: ``cloudwatch-agent.serviceAccountName``, ``dcgm-exporter-service-acct``,
``neuron-monitor-service-acct``, ``node-exporter-service-acct``, ``kube-state-metrics-service-acct``;
``templates/operator-deployment.yaml``: the manager's)."""


@dataclass(frozen=True)
class TransportLine:
    """A worker log line that means the KV cache is not (only) crossing EFA."""

    name: str
    phrase: str
    """A literal part of the line, as NIXL or vLLM print it (no ``*`` inside)."""
    source: str


TRANSPORT_FALLBACK_LINES = (
    TransportLine("tcp-fallback", "devices (TCP fallback)", "nixl libfabric_topology.cpp:142"),
    TransportLine("tcp-global", "TCP devices available globally", "nixl libfabric_topology.cpp:122"),
    TransportLine("ucx-on-efa", "were detected, but the UCX backend was configured", "nixl nixl_agent.cpp:350"),
    TransportLine("libfabric-init-failed", "Failed to initialize libfabric backend", "nixl libfabric_backend.cpp:518"),
    TransportLine("no-network-devices", "No network devices found", "nixl libfabric_topology.cpp:145"),
    TransportLine("libfabric-plugin-missing", "Skipping backend registration LIBFABRIC", "nixl _api.py:239"),
    TransportLine("no-plugins", "No plugins available, cannot start transfers!", "nixl _api.py:227"),
    TransportLine("no-common-backend", "no common backend to connect with", "nixl nixl_agent.cpp:652"),
    TransportLine("ucx-backend", "Backend UCX was instantiated", "nixl _api.py:390"),
    TransportLine("tcp-rails", "rails using provider=tcp", "nixl libfabric_rail_manager.cpp:232"),
    TransportLine("sockets-rails", "rails using provider=sockets", "nixl libfabric_rail_manager.cpp:232"),
)
"""The lines that mean the transport changed: a fallback to TCP or UCX, or no LIBFABRIC at all."""

TRANSFER_FAILURE_LINES = (
    TransportLine("transfer-failure", "NIXL transfer failure:", "vLLM kv_connector/v1/nixl/base_worker.py"),
)
"""A KV transfer that failed (vLLM counts it in ``nixl_num_failed_transfers`` too)."""


LOG_METRICS = ("TransportFallbackLines", "TransferFailureLines")
"""The metric filters' metrics (``RayLlmEks``, dimension ``Namespace``)."""
SERVING_METRIC = {key: metric for key, (metric, _) in SERVING_METRICS.items()}
"""What continuous verification publishes of the window since its previous run, by figure
(``verification/serving_window.py``), with the same dimensions as ``TransportVerified``."""
KV_TRANSFER_FIGURES = ("kv_transfer_bytes", "kv_transfer_mean_ms", "nixl_failed_transfers", "min_node_efa_bytes")
"""The window figures only a disaggregated deployment has."""


def published_metrics(disaggregated: bool) -> tuple[str, ...]:
    """Continuous verification's metrics for a topology."""
    figures = [key for key in SERVING_METRIC if disaggregated or key not in KV_TRANSFER_FIGURES]
    return (TRANSPORT_VERIFIED, *(SERVING_METRIC[key] for key in figures))


ALARMS = ("TransportFallback", "TransferFailures", "PodRestarts", "NodeNotReady")
"""The alarms ``InferenceObservability`` always makes (docs/observability.md explains each)."""
CONTINUOUS_ALARMS = ("TransportNotVerified", "TtftP99AboveSlo", "RayPodsReplaced")
"""On continuous verification's metrics."""
KV_TRANSFER_ALARMS = ("NixlFailedTransfers", "EfaIdleWhileServing")
"""On continuous verification's KV transfer figures: disaggregated only."""
ALARM_METRICS = {"EfaIdleWhileServing": 2}
"""Alarms that evaluate more than one metric (CloudWatch charges a math alarm per metric)."""


def alarm_names(disaggregated: bool, continuous: bool) -> tuple[str, ...]:
    """Every alarm made for a deployment; ``plan`` prices them."""
    return (*ALARMS, *(CONTINUOUS_ALARMS if continuous else ()),
            *(KV_TRANSFER_ALARMS if continuous and disaggregated else ()))


EFA_IDLE_REQUESTS_PER_REPLICA = 20
"""The EFA alarm judges a window only when it served at least this many requests per model replica
of the larger leg: Ray Serve's router picks the less busy of two random replicas (power of two
choices), so each replica then received some with near certainty, and each GPU node must have
moved some KV cache."""


DASHBOARDS = 1


def _literal(value: str) -> str:
    if '"' in value or "*" in value or "\\" in value:
        raise ValueError(f"a filter-pattern literal may not contain a quote, '*' or a backslash: {value!r}")
    return value


FILTER_PATTERN_MAX = 1024
"""CloudWatch Logs' limit on a filter pattern's length (PutMetricFilter, ``filterPattern``)."""


def log_filter_pattern(namespace: str, lines: tuple[TransportLine, ...]) -> str:
    """A JSON filter pattern: a Ray worker's line in ``namespace`` that contains any of ``lines``."""
    alternatives = " || ".join(f'$.log = "*{_literal(line.phrase)}*"' for line in lines)
    pattern = (f'{{ $.kubernetes.namespace_name = "{_literal(namespace)}" && '
               f'$.kubernetes.container_name = "{WORKER_CONTAINER}" && ({alternatives}) }}')
    if len(pattern) > FILTER_PATTERN_MAX:
        raise ValueError(f"the filter pattern is {len(pattern)} characters; CloudWatch Logs takes at most "
                         f"{FILTER_PATTERN_MAX}: split the lines over two filters")
    return pattern


DEFAULT_TTFT_P99_SLO_MS = 2000
"""A chat-grade first-token bound; set it from your own SLO (the bench uses the same figure)."""
DEFAULT_VERIFY_EVERY_MINUTES = 15
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


@dataclass(frozen=True)
class ObservabilitySpec:
    """Metrics, logs, alarms and a dashboard for one deployment (docs/observability.md)."""

    __pydantic_config__ = {"extra": "forbid"}

    enabled: bool = True
    """The CloudWatch Observability add-on, the alarms and the dashboard; ``plan`` adds their cost."""
    alarm_email: str | None = None
    """Subscribed to the alarm topic (SNS sends a confirmation mail first)."""
    ttft_p99_slo_ms: int = DEFAULT_TTFT_P99_SLO_MS
    """Time to first token, p99, that the deployment should meet: the TTFT p99 alarm's threshold."""
    verify_every_minutes: int = DEFAULT_VERIFY_EVERY_MINUTES
    """How often the deployment gate's checks run again and publish ``TransportVerified``: 5, 10, 15, 20, 30 or 60 (``VerificationSpec.every_minutes``, which checks it)."""

    def __post_init__(self) -> None:
        found = Collector()
        if not isinstance(self.enabled, bool):
            found.add(problem("enabled", self.enabled, "not a boolean", "true or false"))
        if self.alarm_email is not None and not (isinstance(self.alarm_email, str) and _EMAIL.match(self.alarm_email)):
            found.add(problem("alarm_email", self.alarm_email, "not an e-mail address", "name@example.com, or none"))
        if isinstance(self.ttft_p99_slo_ms, bool) or not isinstance(self.ttft_p99_slo_ms, int) \
                or not 1 <= self.ttft_p99_slo_ms <= 600_000:
            found.add(problem("ttft_p99_slo_ms", self.ttft_p99_slo_ms, "not a latency in milliseconds",
                              "a whole number from 1 to 600000"))
        found.raise_if_any(self)
