"""``ray-llm-eks verify-logs`` (and ``verify``'s help): the expected libfabric provider, exit codes."""

from __future__ import annotations

import json

import pytest

from ray_llm_eks.cli import app

EFA_LOG = [
    "I1130 21:03:46.090211     412 libfabric_topology.cpp:140] Discovered 1 EFA devices",
    "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=efa",
    "2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated",
]
TCP_LOG = [
    "I1130 21:03:46.090100     412 libfabric_topology.cpp:122] TCP devices available globally - "
    "no accelerator-specific mapping required",
    "I1130 21:03:46.090211     412 libfabric_topology.cpp:142] Discovered 1 tcp devices (TCP fallback)",
    "I1130 21:03:46.095000     412 libfabric_rail_manager.cpp:232] Created 1 rails using provider=tcp",
    "2026-11-30 21:03:46 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated",
]


def _log(tmp_path, lines: list[str], name: str = "decode.log") -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_verify_logs_expects_efa_by_default(runner, tmp_path):
    assert runner.invoke(app, ["verify-logs", _log(tmp_path, EFA_LOG)]).exit_code == 0
    result = runner.invoke(app, ["verify-logs", "--json", _log(tmp_path, TCP_LOG)])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["expected"] == {"backend": "LIBFABRIC", "provider": "efa"}


def test_verify_logs_expect_provider_tcp_fails_logs_on_efa(runner, tmp_path):
    result = runner.invoke(app, ["verify-logs", "--json", "--expect-provider", "tcp", _log(tmp_path, EFA_LOG)])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["expected"]["provider"] == "tcp"
    assert any("NIXL rails use provider efa, not tcp" in r for r in data["reasons"])


def test_verify_logs_expect_provider_tcp_passes_libfabric_on_tcp(runner, tmp_path):
    result = runner.invoke(app, ["verify-logs", "--expect-provider", "tcp", _log(tmp_path, TCP_LOG)])
    assert result.exit_code == 0, result.output
    assert "PASS: LIBFABRIC on the tcp provider" in result.output


def test_verify_logs_refuses_a_provider_that_is_no_name_and_an_unreadable_file(runner, tmp_path):
    result = runner.invoke(app, ["verify-logs", "--expect-provider", "efa tcp", _log(tmp_path, EFA_LOG)])
    assert result.exit_code == 2 and "not a libfabric provider name" in result.output
    assert runner.invoke(app, ["verify-logs", str(tmp_path / "absent.log")]).exit_code == 2


@pytest.mark.parametrize("command", ["verify", "verify-logs"])
def test_expect_provider_and_the_exit_codes_are_in_the_help(runner, command):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--expect-provider" in result.output and "Exit codes" in result.output
