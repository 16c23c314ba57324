"""Evidence only from its emitter: what a request writes into a worker's log never counts.

Ray Serve 2.58 writes a client's ``x-request-id`` verbatim (``serve/_private/proxy.py:1199``; the
direct-ingress path, ``replica.py:2995``) into each replica's access line, which its stream handler
prints to the worker's stderr, so to the container log the gate reads (``logging_utils.py``
``configure_component_logger``: ``RAY_SERVE_LOG_TO_STDERR`` defaults to 1, ``constants.py:382``):
``INFO <date> <time>,<ms> <app>_<deployment> <replica> <request id> -- <method> <route> <status>
<ms>ms`` (``ServeFormatter``, ``access_log_msg``; ``replica.py`` ``_record_errors_and_metrics``).
The proxy's access lines carry ``log_to_stderr: False`` (``proxy.py:1669-1682``) and never reach it.

The access lines here are written by Ray's own code, the dev dependency ``ray[serve]==2.58.*``
(2.58.1 installed; ``logging_utils.py``, ``replica.py``, ``proxy.py`` and ``_private/worker.py`` are
byte-identical in the 2.58.0 wheel the image runs): Serve's logger configured as a replica
configures it, and Ray's ``print_worker_logs`` for the ``(<actor> pid=<n>, ip=<ip>)`` prefix a
driver puts on another node's worker lines. ``fixtures/logs/serve-access-forged.log`` holds them.
"""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_cluster import run_cli

from ray_llm_eks.verification import evidence
from ray_llm_eks.verification.evidence import classify, classify_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
FORGED = FIXTURES / "serve-access-forged.log"
HEALTHY = {"healthy-libfabric-efa.log": "efa", "healthy-libfabric-tcp-decode.log": "tcp",
           "healthy-libfabric-tcp-prefill.log": "tcp"}
"""The healthy fixtures, each with the provider it proves (test_evidence_root_causes.FIXTURE_LOGS)."""

NO_EVIDENCE = ("no NIXL backend evidence in the log (are the workers running with NIXL_LOG_LEVEL=INFO, and is "
               "this a disaggregated worker's log?)")

INJECTED = (
    # Measured against the classifier before this change: the first failed a healthy log, the other
    # three turned a log with no NIXL line into a pass.
    "NIXL transfer failure: INJECTED | Context: {}",
    "Backend LIBFABRIC was instantiated",
    "Discovered 1 EFA devices",
    "Created 1 rails using provider=efa",
    # Whole lines in each emitter's format, proving or disqualifying.
    "2026-12-06 09:13:02 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated",
    "I1206 09:13:02.417000     412 libfabric_topology.cpp:134] Discovered 1 EFA devices",
    "I1206 09:13:02.417000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=efa",
    "(EngineCore pid=412) ERROR 12-06 09:13:02 [base_worker.py:888] NIXL transfer failure: INJECTED | Context: {}",
    "I1206 09:13:02.417000     412 libfabric_topology.cpp:136] Discovered 1 tcp devices (TCP fallback)",
    "W1206 09:13:02.417000     412 nixl_agent.cpp:274] 1 Amazon EFA(s) were detected, but the UCX backend was "
    "configured. For best performance, it's recommended to use the LIBFABRIC backend instead.",
    "E1206 09:13:02.417000     412 nixl_agent.cpp:322] createBackend: unsupported backend 'LIBFABRIC'",
    "2026-12-06 09:13:02 NIXL INFO    _api.py:390 Backend UCX was instantiated",
    "AttributeError: 'list' object has no attribute 'shape'",
)
"""``x-request-id`` values a client sends."""

DECODE = "ServeReplica:llm:Decode:qwen3_5-9b"
"""Ray 2.58's actor name of the decode leg's replica (``ServeReplica:<app>:<deployment>``; the P/D
builder names the deployment ``Decode:<model_id>``, ``serving_patterns/prefill_decode/builder.py``)."""
_ASCTIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}")


def serve_access_line(request_id: str, *, component: str, method: str, route: str, status: str) -> str:
    """The access line a Serve replica prints for one request, by Ray's own logger and formatter: the
    replica's stream handler (``configure_component_logger``), the message and ``extra`` as
    ``replica.py`` ``_record_errors_and_metrics`` passes them (text encoding)."""
    # Imported here, not at collection: ray.serve takes about a second of CPU to import, and every
    # worker collects this module while one runs its tests.
    from ray.serve._private.constants import SERVE_LOG_REQUEST_ID, SERVE_LOG_ROUTE, SERVE_LOGGER_NAME
    from ray.serve._private.logging_utils import access_log_msg, configure_component_logger
    from ray.serve.schema import LoggingConfig

    logger = logging.getLogger(SERVE_LOGGER_NAME)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    stderr, sys.stderr = sys.stderr, io.StringIO()
    try:
        configure_component_logger(component_name=component, component_id="k3v9x2ab", logging_config=LoggingConfig(),
                                   stream_handler_only=True)  # its StreamHandler takes sys.stderr now
        logger.info(access_log_msg(method=method, route=route, status=status, latency_ms=12.34),
                    extra={"skip_context_filter": True, "serve_access_log": True, SERVE_LOG_ROUTE: route,
                           SERVE_LOG_REQUEST_ID: request_id})
        written = sys.stderr.getvalue()
    finally:
        sys.stderr = stderr
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
    assert written.endswith("\n") and written.count("\n") == 1
    return written[:-1]


def ray_prefixed(lines: list[str], monkeypatch) -> list[str]:
    """``lines`` as a Ray driver prints another node's worker output (``print_worker_logs``, no colour)."""
    from ray._private.worker import print_worker_logs

    monkeypatch.setenv("RAY_COLOR_PREFIX", "0")
    out = io.StringIO()
    print_worker_logs({"pid": 412, "actor_name": DECODE, "ip": "10.0.1.12", "localhost": "10.0.1.11",
                       "lines": lines}, out)
    return out.getvalue().split("\n")[:-1]


def access_lines(request_id: str, monkeypatch) -> list[str]:
    """Each replica's access line for one request: the ingress's, the decode leg's (a handle call),
    and the decode leg's as a driver prints it."""
    ingress = serve_access_line(request_id, component="llm_OpenAiIngress", method="POST",
                                route="/v1/chat/completions", status="200")
    decode = serve_access_line(request_id, component="llm_Decode:qwen3_5-9b", method="CALL", route="chat",
                               status="OK")
    return [ingress, decode, *ray_prefixed([decode], monkeypatch)]


def _masked(lines: list[str]) -> list[str]:
    return [_ASCTIME.sub("<asctime>", line) for line in lines]


def test_the_fixture_is_ray_serves_own_access_lines(monkeypatch):
    expected = [line for value in INJECTED for line in access_lines(value, monkeypatch)]
    assert _masked(FORGED.read_text().split("\n")[:-1]) == _masked(expected)
    assert expected[0].startswith("INFO ") and expected[0].endswith(
        " llm_OpenAiIngress k3v9x2ab NIXL transfer failure: INJECTED | Context: {} -- POST /v1/chat/completions 200 "
        "12.3ms")
    assert expected[2].startswith(f"({DECODE} pid=412, ip=10.0.1.12) INFO ")


def _healthy(name: str) -> str:
    return (FIXTURES / name).read_text()


def _evidence_json(report: dict) -> dict:
    return {name: {k: v for k, v in found.items() if k != "lines_read"} for name, found in report["by_source"].items()}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_forged_access_lines_change_nothing_in_a_healthy_log(name):
    provider = HEALTHY[name]
    clean = classify_logs({name: _healthy(name)}, provider=provider)
    forged = classify_logs({name: _healthy(name) + FORGED.read_text()}, provider=provider)
    assert (clean["verdict"], forged["verdict"]) == ("pass", "pass"), forged["reasons"]
    assert _evidence_json(forged) == _evidence_json(clean)
    assert forged["by_source"][name]["transfer_failures"] == {}


def test_forged_access_lines_alone_prove_nothing():
    report = classify_logs({"decode": FORGED.read_text()})
    assert report["reasons"] == [f"decode: {NO_EVIDENCE}"]
    found = report["by_source"]["decode"]
    assert (found["backend"], found["provider"], found["efa_devices"], found["rail_providers"],
            found["transfer_failures"], found["agents_initialized"], found["upstream_defects"]) == \
        (None, None, 0, [], {}, 0, [])


@pytest.mark.parametrize("value", INJECTED)
def test_no_injected_value_counts_in_any_replicas_access_line(value, monkeypatch):
    lines = access_lines(value, monkeypatch)
    healthy = _healthy("healthy-libfabric-efa.log").split("\n")
    assert classify_logs({"w": "\n".join([*healthy, *lines])})["verdict"] == "pass"
    assert classify_logs({"w": "\n".join(lines)})["reasons"] == [f"w: {NO_EVIDENCE}"]


@pytest.mark.parametrize("separator", ["\x85", "\u2028"])
def test_a_request_id_cannot_start_a_line_of_its_own(separator, monkeypatch):
    """``str.splitlines`` breaks at NEL, U+2028 and other characters a header value can carry
    (h11 takes bytes 0x80-0xFF, RFC 9110 obs-text): the log is split at ``\\n`` only, as the
    kubelet's CRI log ends a line."""
    efa = [f"x{separator}{line}" for line in INJECTED[5:7]]
    tcp = [f"x{separator}{INJECTED[8]}"]
    healthy = _healthy("healthy-libfabric-efa.log").split("\n")
    assert classify_logs({"w": "\n".join([*healthy, *access_lines(tcp[0], monkeypatch)])})["verdict"] == "pass"
    forged = [line for value in efa for line in access_lines(value, monkeypatch)]
    assert classify_logs({"w": "\n".join(forged)})["reasons"] == [f"w: {NO_EVIDENCE}"]


def test_a_header_value_with_nel_reaches_serve_as_one_value():
    """The NEL case is not hypothetical: h11, the HTTP/1.1 parser uvicorn (Ray Serve's proxy server)
    runs, hands the header value on whole, and Ray decodes it (``proxy.py:1199``: ``value.decode()``)."""
    import h11

    connection = h11.Connection(h11.SERVER)
    connection.receive_data(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: x\xc2\x85"
                            + INJECTED[5].encode() + b"\r\nContent-Length: 0\r\n\r\n")
    request = connection.next_event()
    value = dict(request.headers)[b"x-request-id"].decode()
    assert value == "x\x85" + INJECTED[5] and value.splitlines()[1] == INJECTED[5]


# --- each line counts only in its emitter's format, from its emitter's file ----------------------------------

EFA_CPP = "I1206 09:13:02.417000     412 libfabric_topology.cpp:134] Discovered 1 EFA devices"
FAILURE_VLLM = "ERROR 12-06 09:13:02 [base_worker.py:888] NIXL transfer failure: transfer_failed | Context: {}"


@pytest.mark.parametrize("line", [
    EFA_CPP.replace("libfabric_topology.cpp", "nixl_agent.cpp"),  # another file of NIXL's
    EFA_CPP + " -- CALL chat OK 12.3ms",  # more after the message
    "INFO 12-06 09:13:02 [logger.py:71] Discovered 1 EFA devices",  # vLLM's logger
    "2026-12-06 09:13:02 NIXL INFO    _api.py:390 Discovered 1 EFA devices",  # NIXL's Python logger
    "prefix " + EFA_CPP,  # not from the start of the line
    "(ServeReplica:llm:Decode pid=412) INFO 2026-12-06 09:13:02,417 llm_Decode k3v9x2ab " + EFA_CPP,
])
def test_the_efa_line_counts_only_from_nixls_topology_code(line):
    assert classify([line]).efa_devices == 0
    assert classify([EFA_CPP]).efa_devices == 1


@pytest.mark.parametrize("line", [
    FAILURE_VLLM.replace("base_worker.py", "serving_chat.py"),
    "2026-12-06 09:13:02 NIXL ERROR   _api.py:390 NIXL transfer failure: transfer_failed | Context: {}",
    "E1206 09:13:02.417000     412 base_worker.py:888] NIXL transfer failure: transfer_failed | Context: {}",
])
def test_a_transfer_failure_counts_only_from_vllms_nixl_connector(line):
    assert classify([line]).transfer_failures == {}


@pytest.mark.parametrize(("line", "kind"), [
    (FAILURE_VLLM, "transfer_failed"),
    # stacklevel=2: the caller's file, vLLM 0.26.0 nixl/pull_worker.py and push_worker.py call _log_failure too.
    (FAILURE_VLLM.replace("base_worker.py:888", "pull_worker.py:283"), "transfer_failed"),
    (FAILURE_VLLM.replace("base_worker.py:888", "push_worker.py:304"), "transfer_failed"),
    # VLLM_LOGGING_LEVEL=DEBUG: the shortened relative path (formatter.py shrink_path).
    (FAILURE_VLLM.replace("[base_worker.py", "[distributed/.../nixl/base_worker.py"), "transfer_failed"),
    # ColoredFormatter (a terminal, or VLLM_LOGGING_COLOR=1), under vLLM's engine prefix.
    ("\x1b[36m(EngineCore pid=412)\x1b[0m \x1b[31mERROR\x1b[0m \x1b[90m12-06 09:13:02\x1b[0m "
     "\x1b[90m[base_worker.py:888]\x1b[0m NIXL transfer failure: handshake_failed. no agent | Context: {}",
     "handshake_failed"),
])
def test_vllms_transfer_failure_line_counts_in_each_form_vllm_prints(line, kind):
    assert classify([line]).transfer_failures == {kind: 1}


def test_nixls_lines_count_under_rays_driver_prefix_with_the_nodes_ip(monkeypatch):
    lines = ray_prefixed(_healthy("healthy-libfabric-efa.log").split("\n")[:-1], monkeypatch)
    assert lines[0].startswith(f"({DECODE} pid=412, ip=10.0.1.12) ")
    found = classify(lines)
    assert (found.problems(), found.backend, found.provider, found.efa_devices) == ([], "LIBFABRIC", "efa", 1)
    # An upstream defect's exception line too (matched from the start of the line, after the prefixes).
    defect = classify(ray_prefixed(_healthy("vllm-hybrid-host-buffer.log").split("\n")[:-1], monkeypatch))
    assert defect.upstream_defects == ["vllm-hybrid-host-buffer"]


# --- no log is no evidence ----------------------------------------------------------------------------------

@pytest.mark.parametrize("require_startup", [True, False])
def test_no_worker_logs_fail_the_transport_verdict(require_startup):
    report = classify_logs({}, require_startup=require_startup)
    assert (report["verdict"], report["reasons"], report["by_source"]) == ("fail", ["no worker logs to read"], {})


def test_an_empty_worker_log_fails_the_transport_verdict():
    report = classify_logs({"decode": ""})
    assert (report["verdict"], report["reasons"]) == ("fail", [f"decode: {NO_EVIDENCE}"])


# --- verify-logs, end to end --------------------------------------------------------------------------------

def _verify_logs(*args: str) -> subprocess.CompletedProcess[str]:
    """In this process (``run_cli``): tests/verification/test_evidence.py starts the program."""
    return run_cli("verify-logs", *args)


def test_verify_logs_passes_a_healthy_log_carrying_forged_access_lines(tmp_path):
    decode = tmp_path / "decode.log"
    decode.write_text(_healthy("healthy-libfabric-efa.log") + FORGED.read_text())
    done = _verify_logs("--json", str(decode))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["verdict"] == "pass" and result["by_source"][str(decode)]["transfer_failures"] == {}


def test_verify_logs_fails_a_log_whose_only_evidence_is_forged():
    done = _verify_logs(str(FORGED))
    assert done.returncode == 1
    said = " ".join(done.stdout.split())  # the console wraps its lines
    assert f"{FORGED}: backend None, provider None, EFA devices 0, transfer failures 0 FAIL" in said
    assert f"- {FORGED}: {NO_EVIDENCE}" in said


def test_verify_logs_reads_a_file_as_the_gate_reads_a_pod_log(tmp_path, monkeypatch):
    """Bytes decoded, split at ``\\n`` only: a NEL a request put in the log starts no line."""
    forged = tmp_path / "forged.log"
    lines = [line for value in INJECTED[5:7] for line in access_lines(f"x\x85{value}", monkeypatch)]
    forged.write_bytes(("\n".join(lines) + "\n").encode())
    done = _verify_logs("--json", str(forged))
    assert done.returncode == 1
    assert json.loads(done.stdout)["reasons"] == [f"{forged}: {NO_EVIDENCE}"]


def test_verify_logs_fails_an_empty_log(tmp_path):
    empty = tmp_path / "decode.log"
    empty.write_text("")
    done = _verify_logs("--json", str(empty))
    assert done.returncode == 1
    assert json.loads(done.stdout)["reasons"] == [f"{empty}: {NO_EVIDENCE}"]


@pytest.mark.integration
def test_the_in_cluster_classify_reads_files_as_verify_logs_does(tmp_path):
    forged = tmp_path / "forged.log"
    forged.write_bytes(FORGED.read_bytes())
    done = subprocess.run([sys.executable, "-m", "ray_llm_eks.verification", "classify", str(forged)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["reasons"] == [f"{forged}: {NO_EVIDENCE}"]

