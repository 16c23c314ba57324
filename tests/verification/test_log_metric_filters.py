"""The log metric filters, matched as CloudWatch Logs would (cwlogs_filter.py) against the gate's own lines.

Every line the gate's classifier fails a healthy worker for is caught by exactly one filter, and
no line of a healthy worker is; the filters see the events as the CloudWatch Observability
add-on's Fluent Bit writes them (the container line in ``log``, the pod in ``kubernetes``). A line
counts only in its emitter's format, as the gate reads it (``evidence._said``): Ray Serve's own
access lines carrying a client's ``x-request-id`` (``fixtures/logs/serve-access-forged.log``)
never do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import test_evidence as lines
from cwlogs_filter import REGEX_PER_PATTERN, PatternError, compile_pattern, translate_regex

from ray_llm_eks.base.observability import (
    FILTER_PATTERN_MAX,
    LOG_GROUP_REGEX_FILTERS_MAX,
    LOG_METRICS,
    TRANSFER_FAILURE_LINES,
    TRANSPORT_FALLBACK_LINES,
    log_filter_pattern,
    log_filter_regexes,
)
from ray_llm_eks.verification import evidence
from ray_llm_eks.verification.evidence import classify

NAMESPACE = "inference"
CORPUS = {name: getattr(lines, name) for name in dir(lines) if name.isupper() and isinstance(getattr(lines, name), str)}


def fluent_bit_event(line: str, namespace: str = NAMESPACE, container: str = "ray-worker") -> str:
    return json.dumps({"log": line, "stream": "stdout", "time": "2026-11-30T21:03:46.090211Z",
                       "kubernetes": {"namespace_name": namespace, "pod_name": "ray-llm-abcde-decode-worker-x1",
                                      "container_name": container, "host": "ip-10-0-1-12"}})


FALLBACK = compile_pattern(log_filter_pattern(NAMESPACE, TRANSPORT_FALLBACK_LINES))
FAILURE = compile_pattern(log_filter_pattern(NAMESPACE, TRANSFER_FAILURE_LINES))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_a_filter_fires_exactly_when_the_gate_would_fail_a_healthy_worker_for_the_line(name):
    line = CORPUS[name]
    gate_fails = bool(classify([*lines.HEALTHY, line]).problems())
    fired = [f for f, pattern in (("fallback", FALLBACK), ("failure", FAILURE)) if pattern(fluent_bit_event(line))]
    assert bool(fired) == gate_fails, (name, fired)
    assert len(fired) <= 1
    if fired:
        assert fired == (["failure"] if name == "TRANSFER_FAILURE" else ["fallback"])


def test_the_gates_own_report_quoting_a_line_is_not_a_worker_line():
    """Continuous verification prints its reasons, which quote the lines, from its own container."""
    quoted = "I1130 21:03:46.090211     412 libfabric_topology.cpp:142] Discovered 1 tcp devices (TCP fallback)"
    report_line = f"  - ray-llm-decode-x1: libfabric fell back to TCP ('{quoted}')"
    assert not FALLBACK(fluent_bit_event(report_line))  # not NIXL's format, even in a worker's log
    assert FALLBACK(fluent_bit_event(quoted))
    assert not FALLBACK(fluent_bit_event(quoted, container="verify"))
    assert not FALLBACK(fluent_bit_event(quoted, container="gate"))

    from ray_llm_eks.base.wire import WORKER_CONTAINER
    from ray_llm_eks.base.observability import WORKER_CONTAINER as WATCHED

    assert WATCHED == WORKER_CONTAINER


def test_lines_of_other_namespaces_and_unparsed_events_are_ignored():
    assert not FALLBACK(fluent_bit_event(lines.TCP_FALLBACK, namespace="other"))
    assert not FALLBACK(lines.TCP_FALLBACK)  # not JSON: no JSON pattern matches


# --- the matcher itself, on the user guide's own examples -----------------------------------------


EVENT = json.dumps({"eventType": "UpdateTrail", "sourceIPAddress": "123.123.123.123",
                    "user": {"name": "Administrator"}, "log": "Ev*ent here"})


@pytest.mark.parametrize(("pattern", "expected"), [
    ('{ $.eventType = "UpdateTrail" }', True),
    ('{ $.eventType = "Update" }', False),          # whole value without a wildcard
    ('{ $.eventType = "Update*" }', True),
    ('{ $.eventType = "*Trail" }', True),
    ('{ $.eventType = "*date*" }', True),
    ('{ $.eventType = "updatetrail" }', False),     # case sensitive
    ('{ $.log = "Ev*ent*" }', True),               # a * inside is literal
    ('{ $.log = "Eve*" }', False),
    ('{ $.eventType != "UpdateTrail" }', False),
    ('{ $.missing != "x" }', False),               # no such field: false either way (assumed)
    ('{ $.user != "x" }', False),                  # an object matches neither = nor !=
    ('{ $.user.name = "Administrator" && $.eventType = "UpdateTrail" }', True),
    ('{ $.user.name = "x" || $.eventType = "UpdateTrail" && $.sourceIPAddress = "1.1.1.1" }', False),
    ('{ ($.user.name = "x" || $.eventType = "UpdateTrail") && $.sourceIPAddress = "123.123.123.123" }', True),
])
def test_the_matcher_follows_the_user_guide(pattern, expected):
    assert compile_pattern(pattern)(EVENT) is expected


@pytest.mark.parametrize(("pattern", "expected"), [
    ('{ $.eventType = %Trail% }', True),            # the guide's JSON example: anywhere in the value
    ('{ $.eventType = %^Trail% }', False),
    ('{ $.eventType = %^Update% }', True),
    ('{ $.eventType = %Trail$% }', True),
    ('{ $.eventType = %Updat$% }', False),
    ('{ $.eventType = %^[Uu]pdate[A-Z]r?a?il$% }', True),
    ('{ $.eventType = %^Trail|^Update% }', True),   # each alternative whole, each anchored
    ('{ $.eventType = %^Trail|^update% }', False),  # case sensitive
    ('{ $.sourceIPAddress = %^\\d{1,3}\\.123\\.\\d{3,}\\.\\d+$% }', True),
    ('{ $.sourceIPAddress = %^123\\.123\\.123\\.12$% }', False),
    ('{ $.log = %Ev\\x2Aent\\shere% }', True),   # \\xhh for a character the regex may not hold
    ('{ $.log = %^[^\\x2A]*\\x2A% }', True),
    ('{ $.log = %^[^\\x2A]*\\s% }', False),       # the class stops at the first *
    ('{ $.log = %Ev.ent% }', True),
    ('{ $.log = %\\Shere% }', False),
    ('{ $.user = %Admin% }', False),                # an object is no string
    ('{ $.eventType = %Trail% && $.log = %here$% }', True),
])
def test_the_regex_matcher_follows_the_user_guide(pattern, expected):
    assert compile_pattern(pattern)(EVENT) is expected


@pytest.mark.parametrize("pattern", [
    '{ $.latency > 5 }', 'ERROR', '{ $.a IS NULL }', '%NIXL%',
    '{ $.log = %a(b)% }',                                            # no ( ) operators
    '{ $.log = %a!% }',                                              # '!' is no character the guide lists
    '{ $.log = %a b% }',                                             # nor a space
    '{ $.log = %caf\u00e9% }',                                      # multi-byte
    '{ $.log = %a\\q% }',                                            # no such escape
    '{ $.log = %[ab% }',
    '{ $.log != %a% }',
    '{ $.a = %a% && $.b = %b% && $.c = %c% }',                        # three regex
])
def test_syntax_outside_the_subset_is_refused(pattern):
    with pytest.raises(PatternError):
        compile_pattern(pattern)


@pytest.mark.parametrize("lines_", [TRANSPORT_FALLBACK_LINES, TRANSFER_FAILURE_LINES], ids=["fallback", "failure"])
def test_the_patterns_fit_cloudwatchs_limits_with_the_longest_namespace(lines_):
    pattern = log_filter_pattern("n" * 63, lines_)
    assert len(pattern) <= FILTER_PATTERN_MAX
    regexes = re.findall(r"%([^%]*)%", pattern)
    assert list(log_filter_regexes(lines_)) == regexes and len(regexes) <= REGEX_PER_PATTERN
    for regex in regexes:
        translate_regex(regex)  # only what the guide lists
    compile_pattern(pattern)


def test_the_deployments_on_one_cluster_share_the_log_groups_regex_filter_quota():
    """Each deployment puts one regex filter per log metric on the cluster's application log group."""
    assert len(LOG_METRICS) == 2 and 2 * len(LOG_METRICS) <= LOG_GROUP_REGEX_FILTERS_MAX < 3 * len(LOG_METRICS)


def test_a_pattern_too_long_for_cloudwatch_is_refused():
    with pytest.raises(ValueError, match="at most 1024"):
        log_filter_pattern("inference", TRANSPORT_FALLBACK_LINES * 2)


# --- evidence only from its emitter --------------------------------------------------------------


FIXTURES = Path(__file__).parent / "fixtures" / "logs"
FORGED = FIXTURES / "serve-access-forged.log"
FILTERS = {"fallback": (FALLBACK, TRANSPORT_FALLBACK_LINES), "failure": (FAILURE, TRANSFER_FAILURE_LINES)}
_MARKER = {"<N>": r"\d+", "<W>": r"\w+", "<non-efa>": "[^e]"}


def _gate_reads_as(line: str, listed) -> bool:
    """The gate reads ``line`` as its emitter's, from the listed file, its message starting as listed."""
    said = evidence._said(line)
    if said is None:
        return False
    emitter, file, message = said
    return any(emitter == entry.emitter and re.fullmatch(entry.file, file) and re.match(
        "".join(_MARKER.get(part, re.escape(part)) for part in re.split(r"(<N>|<W>|<non-efa>)", entry.message)),
        message) for entry in listed)


def test_rays_access_lines_carrying_forged_request_ids_count_nowhere():
    forged = FORGED.read_text().split("\n")[:-1]
    assert len(forged) == 39
    for line in forged:
        assert evidence._said(line) is None
        for name, (pattern, _) in FILTERS.items():
            assert not pattern(fluent_bit_event(line)), (name, line)


FIXTURE_LINES = [(path.name, number, line) for path in sorted(FIXTURES.glob("*.log")) if path != FORGED
                 for number, line in enumerate(path.read_text().split("\n")[:-1], 1)]


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_the_filters_count_the_emitters_real_lines_in_the_fixtures_as_the_gate_reads_them(name):
    pattern, listed = FILTERS[name]
    counted = {(file, number) for file, number, line in FIXTURE_LINES if pattern(fluent_bit_event(line))}
    assert counted == {(file, number) for file, number, line in FIXTURE_LINES if _gate_reads_as(line, listed)}
    assert counted if name == "fallback" else not counted


@pytest.mark.parametrize("line", [
    "(Worker pid=31655) 2026-12-01 22:22:01 NIXL INFO    _api.py:390 Backend UCX was instantiated",
    "(ServeReplica:llm:Decode:qwen3_5-9b pid=412, ip=10.0.1.12) I1206 09:13:02.417000     412 "
    "libfabric_topology.cpp:136] Discovered 1 tcp devices (TCP fallback)",
    "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=sockets",
    "E1130 21:03:46.090211     412 libfabric_common.cpp:111] No network devices found with any provider",
    "(EngineCore pid=412) ERROR 11-30 21:04:02 [distributed/.../nixl/pull_worker.py:283] NIXL transfer failure: "
    "handshake_failed | Context: {}",
])
def test_an_emitters_line_counts_under_one_process_prefix(line):
    assert _gate_reads_as(line, TRANSPORT_FALLBACK_LINES + TRANSFER_FAILURE_LINES)
    assert FALLBACK(fluent_bit_event(line)) or FAILURE(fluent_bit_event(line))


FORGED_FAILURE = "(EngineCore pid=412) ERROR 12-06 09:13:02 [base_worker.py:888] NIXL transfer failure: INJECTED | Context: {}"
FORGED_FALLBACK = "I1206 09:13:02.417000     412 libfabric_topology.cpp:136] Discovered 1 tcp devices (TCP fallback)"


@pytest.mark.parametrize("line", [
    # A request id inside an emitter's own line, after its message starts (vLLM names requests).
    f"(Worker pid=31655) WARNING 12-06 09:13:02 [scheduler.py:412] Releasing expired KV blocks for request {FORGED_FAILURE}",
    f"(Worker pid=31655) WARNING 12-06 09:13:02 [base_worker.py:412] Releasing KV blocks for request {FORGED_FAILURE}",
    f"(Worker pid=31655) WARNING 12-06 09:13:02 [base_worker.py:412] Releasing KV blocks for request {FORGED_FALLBACK}",
    f"(Worker pid=31655) 2026-12-06 09:13:02 NIXL INFO    _api.py:268 Initialized NIXL agent: {FORGED_FALLBACK}",
    # An emitter's line from a file that does not print it.
    "(EngineCore pid=412) ERROR 12-06 09:13:02 [gpu_worker.py:888] NIXL transfer failure: x | Context: {}",
    "I1206 09:13:02.417000     412 nixl_agent.cpp:136] Discovered 1 tcp devices (TCP fallback)",
    "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=efa",
    # Forged text after a prefix that is not a process's, or after two prefixes.
    f"INFO 2026-12-06 21:26:31,079 llm_Decode:qwen3_5-9b k3v9x2ab (x) {FORGED_FALLBACK}",
    f"(ServeReplica:llm:Decode:qwen3_5-9b pid=412) INFO 2026-12-06 21:26:31,079 llm_Decode k3v9x2ab (x) {FORGED_FAILURE}",
])
def test_a_phrase_after_an_emitters_message_starts_or_from_another_file_counts_nowhere(line):
    for name, (pattern, _) in FILTERS.items():
        assert not pattern(fluent_bit_event(line)), name


@pytest.mark.parametrize("line", [
    # Two process prefixes (a Ray driver printing an engine subprocess's line): the gate reads it.
    "(ServeReplica:llm:Decode:qwen3_5-9b pid=412) (EngineCore pid=413) ERROR 12-06 09:13:02 [base_worker.py:888] "
    "NIXL transfer failure: x | Context: {}",
    # vLLM's colours (a terminal, or VLLM_LOGGING_COLOR=1).
    "\x1b[36m(EngineCore pid=412)\x1b[0m \x1b[31mERROR\x1b[0m \x1b[90m12-06 09:13:02\x1b[0m "
    "\x1b[90m[base_worker.py:888]\x1b[0m NIXL transfer failure: x | Context: {}",
    # A NIXL Python line under Ray's prefix for another node (the first '.' is the address's).
    "(ServeReplica:llm:Decode:qwen3_5-9b pid=412, ip=10.0.1.12) 2026-12-06 09:13:02 NIXL INFO    _api.py:390 "
    "Backend UCX was instantiated",
])
def test_what_the_filters_miss_that_the_gate_reads(line):
    """docs/observability.md lists these: none is in a worker's container log as the workers run."""
    assert _gate_reads_as(line, TRANSPORT_FALLBACK_LINES + TRANSFER_FAILURE_LINES)
    assert not FALLBACK(fluent_bit_event(line)) and not FAILURE(fluent_bit_event(line))
