"""Fixtures of the bench tests; the servers and helpers are in :mod:`loopback`."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopback import ITL_MS, LEVELS, OUTPUT_TOKENS, REQUESTS, SLO_E2E_MS, SLO_TTFT_MS, TTFT_MS, MockServers, run_cli
from helpers.pins import unpinned
from ray_llm_eks.twin.tiny_model import build_tokenizer


@pytest.fixture(scope="session")
def mock_servers(tmp_path_factory):
    servers = MockServers(tmp_path_factory.mktemp("mock-servers"))
    yield servers
    servers.stop()


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A local tokenizer for AIPerf's prompts (no hub download)."""
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def cli():
    return run_cli


@pytest.fixture(scope="session")
def reference_hourly_usd() -> float:
    from ray_llm_eks.planning import make_plan

    return make_plan(unpinned()).cost.hourly_usd


@pytest.fixture(scope="session")
def sweep(mock_servers, tokenizer_dir, tmp_path_factory, cli):
    """One bench sweep through the real command line, against a mock told TTFT 40 ms, ITL 5 ms."""
    url = mock_servers.start("sweep", "--ttft-ms", str(TTFT_MS), "--ttft-ms-std", "0",
                             "--itl-ms", str(ITL_MS), "--output-tokens", str(OUTPUT_TOKENS))
    out = tmp_path_factory.mktemp("sweep")
    result = cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer_dir), "--isl", "32",
                 "--osl", str(OUTPUT_TOKENS), "--concurrency", ",".join(map(str, LEVELS)), "--requests", str(REQUESTS),
                 "--slo-ttft-ms", str(SLO_TTFT_MS), "--slo-e2e-ms", str(SLO_E2E_MS), "--agreement-prompts", "4",
                 "--out", str(out))
    return out, result
