r"""What the observability layer watches, stated once for the AWS side and the tests.

The transport lines are the deployment gate's own (``verification/evidence.py``, which quotes
each from its NIXL or vLLM source): the same lines that fail the gate, watched continuously in
the container logs the CloudWatch Observability add-on ships to
``/aws/containerinsights/<cluster>/application``. There, Fluent Bit wraps each container line as
JSON, the line in ``log`` and the pod in ``kubernetes`` (``namespace_name``, ``pod_name``,
``container_name``: the add-on's Fluent Bit ``application-log.conf`` with the ``kubernetes``
filter), so the metric filters are JSON patterns on ``$.log``.

CloudWatch Logs filter patterns (user guide, "Filter pattern syntax for metric filters,
subscription filters, filter log events, and Live Tail", its JSON section, and "Supported regular
expressions (regex) syntax",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/FilterAndPatternSyntax.html and
https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/regex-expressions.html): in a JSON
pattern, ``$.log = %<regex>%`` looks for the regex in the field (``{ $.eventType = %Trail% }``
matches ``UpdateTrail``), ``^`` and ``$`` anchor it to the field's start and end, ``|`` is an "or"
of whole alternatives, and there are no groups: "The ( and ) operators are not supported". A regex
may hold only letters, digits, ``: _ # = @ / ; , -`` and the operators ``^ $ ? [ ] { } | \ * + .``
(``\xhh`` for any other ASCII character, ``\d \s \w`` and their inverses); at most 2 regex in a
JSON pattern, and at most 5 filter patterns with a regex on a log group. ``&&``, ``||`` and
parentheses combine comparisons.

**A line counts only in its emitter's format** (as the deployment gate reads it,
``verification/evidence.py``): Ray Serve 2.58 writes a client's ``x-request-id`` verbatim into each
replica's access line, ``INFO <date> <time>,<ms> <deployment> <replica> <request id> -- ...``, so a
phrase anywhere in a line would let one request raise an alarm. Without groups a regex cannot say
"zero or more process prefixes, then the emitter's header, then one of these messages" in one
alternative per message within 1024 characters, so each pattern holds two regex that must both
match the same line (:func:`log_filter_pattern`):

- *the line's structure*: from the start of the line, at most one process prefix
  ``(<name> pid=<n>) `` (vLLM's on an engine subprocess's output, or Ray's), then the emitter's
  header: NIXL's C++ (Abseil) ``I1201 22:19:43.018531   31655 ``, NIXL's Python
  ``2026-12-01 22:19:42 NIXL INFO    ``, vLLM's ``ERROR 12-06 09:13:02 ``;
- *the message*: from the start of the line, through the first ``]`` (C++, vLLM: the one closing
  the emitter's ``<file>:<n>]``) or the first ``.`` (NIXL Python: the one in ``_api.py``), the
  emitting file, then the message's first words.

In an access line the first ``]`` or ``.`` a request could write comes after Ray's own timestamp
(``,<ms>``) and the line starts with ``INFO <year>-``, which is no emitter's header; so the request
id never reaches either regex's anchor. What remains is in ``docs/observability.md``.
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


NIXL_CPP, NIXL_PYTHON, VLLM = "nixl-c++", "nixl-python", "vllm"
"""The emitters whose lines the filters count (``verification/evidence.py`` ``_EMITTER_LINES``)."""


@dataclass(frozen=True)
class TransportLine:
    """A worker log line that means the KV cache is not (only) crossing EFA."""

    name: str
    emitter: str
    """NIXL_CPP, NIXL_PYTHON or VLLM: whose format the whole line is in."""
    file: str
    r"""The emitting file's base name, a filter-pattern regex (``libfabric_\w+\.cpp``: either of two)."""
    message: str
    """How the message starts, as the emitter prints it: ``<N>`` a number, ``<W>`` a word,
    ``<non-efa>`` a libfabric provider other than efa (its first letter is not ``e``)."""
    source: str


TRANSPORT_FALLBACK_LINES = (
    TransportLine("tcp-fallback", NIXL_CPP, r"libfabric_topology\.cpp", "Discovered <N> <W> devices (TCP fallback",
                  "nixl libfabric_topology.cpp:136"),
    TransportLine("tcp-global", NIXL_CPP, r"libfabric_topology\.cpp", "TCP devices available globally",
                  "nixl libfabric_topology.cpp:116"),
    TransportLine("ucx-on-efa", NIXL_CPP, r"nixl_agent\.cpp", "<N> Amazon EFA(s) were detected",
                  "nixl nixl_agent.cpp:274"),
    TransportLine("libfabric-init-failed", NIXL_CPP, r"libfabric_backend\.cpp", "Failed to initialize libfabric",
                  "nixl libfabric_backend.cpp:410"),
    TransportLine("no-network-devices", NIXL_CPP, r"libfabric_\w+\.cpp", "No network devices found",
                  "nixl libfabric_topology.cpp:139, libfabric_common.cpp:111"),
    TransportLine("no-common-backend", NIXL_CPP, r"nixl_agent\.cpp", "<W>: no common backend",
                  "nixl nixl_agent.cpp:569"),
    TransportLine("non-efa-rails", NIXL_CPP, r"libfabric_rail_manager\.cpp",
                  "Created <N> rails using provider=<non-efa>", "nixl libfabric_rail_manager.cpp:232"),
    TransportLine("libfabric-plugin-missing", NIXL_PYTHON, r"_api\.py", "Skipping backend registration LIBFABRIC",
                  "nixl _api.py:239"),
    TransportLine("no-plugins", NIXL_PYTHON, r"_api\.py", "No plugins available", "nixl _api.py:227"),
    TransportLine("ucx-backend", NIXL_PYTHON, r"_api\.py", "Backend UCX was instantiated", "nixl _api.py:390"),
)
"""The lines that mean the transport changed: a fallback to TCP or UCX, or no LIBFABRIC at all. The
C++ line numbers are the NIXL 1.3.1 wheel's, as ``verification/evidence.py`` quotes each line."""

TRANSFER_FAILURE_LINES = (
    # vLLM 0.26.0 logs it with stacklevel=2, so the file is the caller's: nixl/base_worker.py,
    # pull_worker.py or push_worker.py (verification/evidence.py _TRANSFER_FAILURE).
    TransportLine("transfer-failure", VLLM, r"[bp][au][sl][ehl]_worker\.py", "NIXL transfer failure:",
                  "vLLM kv_connector/v1/nixl/base_worker.py"),
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
FILTER_PATTERN_REGEX_MAX = 2
"""Regex in one JSON filter pattern (the user guide's regex quotas)."""
LOG_GROUP_REGEX_FILTERS_MAX = 5
"""Filter patterns containing a regex on one log group, metric and subscription filters together
(the same quotas): every deployment on a cluster puts :data:`LOG_METRICS` (two) on the add-on's
application log group, so two deployments fit and a third is refused by PutMetricFilter."""

_REGEX_SYMBOLS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_#=@/;,-")
_REGEX_OPERATORS = frozenset("^$?[]{}|\\*+.")
_MARKERS = {"<N>": r"\d+", "<W>": r"\w+", "<non-efa>": "[^e]", " ": r"\s"}
_PREFIX = r"\x28[^\x29]*\x29\s"
"""One process prefix, ``(<name> pid=<n>) ``: up to the line's first ``)``."""
_HEADER = {
    # Abseil: severity, MMDD, time with microseconds, thread id (nixl 1.3.1 src/utils/common/nixl_log.h).
    NIXL_CPP: r"[IWEF]\d{4}\s[\d:.]+\s+\d+\s",
    # "%(asctime)s NIXL %(levelname)-7s ..." (nixl src/api/python/logging.py).
    NIXL_PYTHON: r"[\d-]+\s[\d:]+\sNIXL\s[A-Z]+\s+",
    # "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] ...", datefmt "%m-%d %H:%M:%S" (vLLM 0.26.0 vllm/logger.py).
    VLLM: r"[A-Z]+\s\d\d-\d\d\s[\d:]+\s",
}
_MESSAGE = {
    # Through the line's first "]", the one after "<file>:<n>" (the base name follows a space), and
    # not through an "X": NIXL's Python header has one ("NIXL"), so no NIXL Python message carries one.
    NIXL_CPP: r"^[^\]X]*\s{file}:\d+\]\s{message}",
    # Through the line's first ".", the one in "_api.py" (date, time and level have none).
    NIXL_PYTHON: r"^[^.]*\s{file}:\d+\s{message}",
    # Through the line's first "]"; the file follows "[" or, at VLLM_LOGGING_LEVEL=DEBUG, a "/" of its path.
    VLLM: r"^[^\]]*[\[/]{file}:\d+\]\s{message}",
}


def _regex_literal(text: str) -> str:
    r"""``text`` in the regex syntax, its markers replaced; a space is ``\s`` (the guide lists no space)."""
    out = []
    for part in re.split(r"(<N>|<W>|<non-efa>| )", text):
        if part in _MARKERS:
            out.append(_MARKERS[part])
            continue
        for char in part:
            if char in _REGEX_SYMBOLS:
                out.append(char)
            elif char in _REGEX_OPERATORS:
                out.append("\\" + char)
            elif char.isascii():
                out.append(f"\\x{ord(char):02X}")
            else:
                raise ValueError(f"a filter-pattern regex may not contain a multi-byte character: {text!r}")
    return "".join(out)


def log_filter_regexes(lines: tuple[TransportLine, ...]) -> tuple[str, str]:
    """The two regex a line must match: its structure, and its file and message (module docstring)."""
    emitters = sorted({line.emitter for line in lines})
    structure = "|".join(f"^{prefix}{_HEADER[emitter]}" for prefix in ("", _PREFIX) for emitter in emitters)
    message = "|".join(_MESSAGE[line.emitter].format(file=line.file, message=_regex_literal(line.message))
                       for line in lines)
    return structure, message


def log_filter_pattern(namespace: str, lines: tuple[TransportLine, ...]) -> str:
    """A JSON filter pattern: a Ray worker's line in ``namespace`` that is one of ``lines``, in its emitter's format."""
    structure, message = log_filter_regexes(lines)
    pattern = (f'{{ $.kubernetes.namespace_name = "{_literal(namespace)}" && '
               f'$.kubernetes.container_name = "{WORKER_CONTAINER}" && $.log = %{structure}% && $.log = %{message}% }}')
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
