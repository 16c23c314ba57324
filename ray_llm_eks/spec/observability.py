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

from dataclasses import dataclass

APPLICATION_LOG_GROUP = "/aws/containerinsights/{cluster}/application"
"""Where the add-on's Fluent Bit sends container logs (chart ``containerLogs.fluentBit``)."""
METRIC_NAMESPACE = "RayLlmEks"
"""The namespace of this library's own metrics (log metric filters, the monitor CronJob)."""
CONTAINER_INSIGHTS_NAMESPACE = "ContainerInsights"


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


def _literal(value: str) -> str:
    if '"' in value or "*" in value or "\\" in value:
        raise ValueError(f"a filter-pattern literal may not contain a quote, '*' or a backslash: {value!r}")
    return value


def log_filter_pattern(namespace: str, lines: tuple[TransportLine, ...]) -> str:
    """A JSON filter pattern: a container line of ``namespace`` that contains any of ``lines``."""
    alternatives = " || ".join(f'$.log = "*{_literal(line.phrase)}*"' for line in lines)
    return f'{{ $.kubernetes.namespace_name = "{_literal(namespace)}" && ({alternatives}) }}'
