"""The log classifier on the real strings, each quoted from its source.

NIXL v1.3.1 (ai-dynamo/nixl, tag v1.3.1; C++ lines in Abseil's format ``I<mmdd> <time> <tid>
<file>:<line>] <message>``) and vLLM 0.26 (``kv_connector/v1/nixl/base_worker.py``,
``kv_connector/v1/metrics.py``). The traps the issue names each fail: LIBFABRIC instantiated plus
TCP fallback; an agent initialized with no backend; UCX on EFA; a transfer failure.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fake_cluster import run_cli

from ray_llm_eks.verification.evidence import classify, classify_logs

# --- the real lines ---------------------------------------------------------------------------------------
# src/api/python/_api.py:390  logger.info("Backend %s was instantiated", backend)
# Python lines in NIXL's own format (src/api/python/logging.py: "%(asctime)s NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s")
BACKEND_LIBFABRIC = "2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated"
BACKEND_UCX = "2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend UCX was instantiated"
# src/api/python/_api.py:268  logger.info("Initialized NIXL agent: %s", agent_name)
AGENT = "2026-11-30 21:03:46 NIXL INFO    _api.py:268 Initialized NIXL agent: 5c1f0b4e-prefill"
# src/api/python/_api.py:239  "Skipping backend registration %s due to the missing plugin."
SKIPPED = "2026-11-30 21:03:46 NIXL WARNING _api.py:239 Skipping backend registration LIBFABRIC due to the missing plugin."
# src/api/python/_api.py:227
NO_PLUGINS = "2026-11-30 21:03:46 NIXL ERROR   _api.py:227 No plugins available, cannot start transfers!"
# src/utils/libfabric/libfabric_topology.cpp:140  NIXL_INFO << "Discovered " << num_devices << " EFA devices"
EFA_DEVICES = "I1130 21:03:46.090211     412 libfabric_topology.cpp:140] Discovered 1 EFA devices"
# libfabric_topology.cpp:142  "Discovered " << num_devices << " " << provider_name << " devices (TCP fallback)"
TCP_FALLBACK = "I1130 21:03:46.090211     412 libfabric_topology.cpp:142] Discovered 1 tcp devices (TCP fallback)"
SOCKETS_FALLBACK = "I1130 21:03:46.090211     412 libfabric_topology.cpp:142] Discovered 1 sockets devices (TCP fallback)"
# libfabric_topology.cpp:122
TCP_GLOBAL = ("I1130 21:03:46.090100     412 libfabric_topology.cpp:122] TCP devices available globally - "
              "no accelerator-specific mapping required")
# src/utils/libfabric/libfabric_rail_manager.cpp:232  "Created " << n << " rails using provider=" << name
RAILS_EFA = "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=efa"
RAILS_TCP = "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=tcp"
# src/utils/libfabric/libfabric_rail.cpp:457 (expected on G-series: no GPUDirect RDMA)
NO_HMEM = "I1130 21:03:46.096000     412 libfabric_rail.cpp:457] Using provider without FI_HMEM support for rail 0"
# src/core/nixl_agent.cpp:350 (NIXL_WARN)
UCX_ON_EFA = ("W1130 21:03:46.080000     412 nixl_agent.cpp:350] 1 Amazon EFA(s) were detected, but the UCX backend "
              "was configured. For best performance, it's recommended to use the LIBFABRIC backend instead.")
# src/plugins/libfabric/libfabric_backend.cpp:518
LIBFABRIC_FAILED = ("E1130 21:03:46.080000     412 libfabric_backend.cpp:518] Failed to initialize libfabric backend: "
                    "fi_getinfo failed")
# src/utils/libfabric/libfabric_topology.cpp:145
NO_NETWORK_DEVICES = "E1130 21:03:46.090211     412 libfabric_topology.cpp:145] No network devices found"
# src/core/nixl_agent.cpp:652 (NIXL_ERROR_FUNC)
NO_COMMON = "E1130 21:03:47.000000     412 nixl_agent.cpp:652] makeConnection: no common backend to connect with 'decode-0'"
# vLLM 0.26 kv_connector/v1/nixl/base_worker.py: "NIXL transfer failure: <type> | Context: {...}"
TRANSFER_FAILURE = ("(EngineCore pid=412) ERROR 11-30 21:04:02 [base_worker.py:1210] NIXL transfer failure: "
                    "transfer_failed | Context: {'remote_engine_id': 'prefill-0', 'num_blocks': 256}")
# vLLM 0.26 kv_connector/v1/metrics.py (periodic INFO)
TRANSFER_METRICS = ("(EngineCore pid=412) INFO 11-30 21:05:00 [metrics.py:88] KV Transfer metrics: Num successful "
                    "transfers=12, Avg xfer time (ms)=31.2, P90 xfer time (ms)=40.1, Avg post time (ms)=0.4, "
                    "Throughput (MB/s)=4123.5")

HEALTHY = [AGENT, EFA_DEVICES, RAILS_EFA, NO_HMEM, BACKEND_LIBFABRIC, TRANSFER_METRICS]


def test_libfabric_on_efa_passes_and_reports_what_it_saw():
    found = classify(HEALTHY)
    assert found.problems() == []
    assert (found.backend, found.provider, found.efa_devices) == ("LIBFABRIC", "efa", 1)
    assert found.without_fi_hmem is True  # recorded, not a failure: G-series has no GPUDirect RDMA
    assert found.successful_transfers_logged == 12


def test_the_plugins_lines_alone_prove_libfabric_when_the_python_line_is_missing():
    assert classify([EFA_DEVICES, RAILS_EFA]).problems() == []


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        # LIBFABRIC was instantiated, but on TCP: the trap the issue names first.
        ([AGENT, TCP_GLOBAL, TCP_FALLBACK, RAILS_TCP, BACKEND_LIBFABRIC], "libfabric fell back to TCP"),
        ([AGENT, SOCKETS_FALLBACK, BACKEND_LIBFABRIC], "libfabric fell back to TCP"),
        ([AGENT, RAILS_TCP, BACKEND_LIBFABRIC], "NIXL rails use provider tcp, not efa"),
        # "Initialized NIXL agent" prints even when no backend was created.
        ([AGENT], "a NIXL agent was initialized but no backend was instantiated"),
        ([SKIPPED, AGENT], "NIXL skipped backend LIBFABRIC"),
        ([NO_PLUGINS], "NIXL found no plugins"),
        # NIXL's default backend on EFA nodes.
        ([UCX_ON_EFA, AGENT, BACKEND_UCX], "UCX backend on EFA nodes"),
        ([AGENT, BACKEND_UCX], "the NIXL backend is UCX, not LIBFABRIC"),
        ([*HEALTHY, TRANSFER_FAILURE], "1 NIXL transfer failure(s) of type transfer_failed"),
        ([LIBFABRIC_FAILED, AGENT], "the libfabric backend failed to initialize: fi_getinfo failed"),
        ([*HEALTHY, NO_COMMON], "no common NIXL backend with agent 'decode-0'"),
        ([AGENT, BACKEND_LIBFABRIC], "nothing shows the efa provider"),
        ([NO_NETWORK_DEVICES, AGENT], "libfabric found no network device"),
        ([], "no NIXL backend evidence in the log"),
    ],
    ids=["tcp-fallback", "sockets-fallback", "tcp-rails", "agent-without-backend", "missing-plugin", "no-plugins",
         "ucx-on-efa", "ucx-backend", "transfer-failure", "libfabric-init-failed", "no-common-backend",
         "libfabric-without-provider", "no-network-devices", "empty-log"],
)
def test_each_trap_fails_for_its_reason(lines, reason):
    problems = classify(lines).problems()
    assert any(reason in p for p in problems), problems


@pytest.mark.parametrize("kind", ["handshake_setup_failed", "handshake_failed", "transfer_failed",
                                  "transfer_exception", "notification_failed", "transfer_setup_failed"])
def test_every_transfer_failure_type_of_vllm_is_counted(kind):
    line = f"ERROR 11-30 21:04:02 [base_worker.py:1210] NIXL transfer failure: {kind} | Context: {{}}"
    assert classify([*HEALTHY, line, line]).transfer_failures == {kind: 2}


def test_every_worker_must_show_the_path():
    result = classify_logs({"prefill": "\n".join(HEALTHY), "decode": "\n".join([AGENT, TCP_FALLBACK, BACKEND_LIBFABRIC])})
    assert result["verdict"] == "fail"
    assert all(r.startswith("decode: ") for r in result["reasons"])
    assert result["by_source"]["prefill"]["problems"] == []


def _cli(*args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    """In this process (``run_cli``), or with ``process`` as the program started on its own."""
    if not process:
        return run_cli(*args)
    return subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.integration
def test_verify_logs_passes_on_efa_evidence(tmp_path):
    prefill, decode = tmp_path / "prefill.log", tmp_path / "decode.log"
    prefill.write_text("\n".join(HEALTHY) + "\n")
    decode.write_text("\n".join(HEALTHY) + "\n")
    done = _cli("verify-logs", "--json", str(prefill), str(decode), process=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["verdict"] == "pass" and result["reasons"] == []


@pytest.mark.parametrize(
    "lines",
    [[AGENT, TCP_FALLBACK, BACKEND_LIBFABRIC], [AGENT], [UCX_ON_EFA, BACKEND_UCX], [*HEALTHY, TRANSFER_FAILURE]],
    ids=["tcp-fallback", "agent-without-backend", "ucx-on-efa", "transfer-failure"],
)
def test_verify_logs_fails_with_reasons(tmp_path, lines):
    log = tmp_path / "worker.log"
    log.write_text("\n".join(lines) + "\n")
    done = _cli("verify-logs", "--json", str(log))
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["verdict"] == "fail"
    assert isinstance(result["reasons"], list) and all(isinstance(r, str) for r in result["reasons"])
    assert result["reasons"]


def test_verify_logs_reads_a_missing_file_as_a_usage_error(tmp_path):
    done = _cli("verify-logs", str(tmp_path / "absent.log"))
    assert done.returncode == 2
    assert "cannot read" in done.stderr


def test_a_second_backend_beside_libfabric_fails():
    problems = classify([*HEALTHY, BACKEND_UCX, BACKEND_LIBFABRIC]).problems()
    assert any("also instantiated UCX" in p for p in problems), problems
