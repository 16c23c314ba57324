"""The log metric filters, matched as CloudWatch Logs would (cwlogs_filter.py) against the gate's own lines.

Every line the gate's classifier fails a healthy worker for is caught by exactly one filter, and
no line of a healthy worker is; the filters see the events as the CloudWatch Observability
add-on's Fluent Bit writes them (the container line in ``log``, the pod in ``kubernetes``).
"""

from __future__ import annotations

import json

import pytest
import test_evidence as lines
from cwlogs_filter import PatternError, compile_pattern

from ray_llm_eks.base.observability import TRANSFER_FAILURE_LINES, TRANSPORT_FALLBACK_LINES, log_filter_pattern
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


def test_the_gates_own_report_quoting_a_phrase_is_not_a_worker_line():
    """Continuous verification prints its reasons, which quote the phrases, from its own container."""
    report_line = "  - ray-llm-decode-x1: libfabric fell back to TCP ('Discovered 1 tcp devices (TCP fallback)')"
    assert FALLBACK(fluent_bit_event(report_line))  # as a worker's line it would count
    assert not FALLBACK(fluent_bit_event(report_line, container="verify"))
    assert not FALLBACK(fluent_bit_event(report_line, container="gate"))

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


@pytest.mark.parametrize("pattern", ['{ $.latency > 5 }', '{ $.log = %NIXL% }', 'ERROR', '{ $.a IS NULL }'])
def test_syntax_outside_the_subset_is_refused(pattern):
    with pytest.raises(PatternError):
        compile_pattern(pattern)


def test_the_patterns_fit_cloudwatchs_length_limit_with_the_longest_namespace():
    from ray_llm_eks.base.observability import FILTER_PATTERN_MAX

    for lines_ in (TRANSPORT_FALLBACK_LINES, TRANSFER_FAILURE_LINES):
        assert len(log_filter_pattern("n" * 63, lines_)) <= FILTER_PATTERN_MAX
    with pytest.raises(ValueError, match="at most 1024"):
        log_filter_pattern("inference", TRANSPORT_FALLBACK_LINES * 3)
