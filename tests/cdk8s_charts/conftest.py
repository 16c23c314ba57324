"""Fixtures for the cdk8s chart tests: every scenario is built and synthesized once per session.

The scenarios, their rendering and the checkers are in :mod:`helpers.charts`.
"""

from __future__ import annotations

import pytest

from helpers.charts import CRD_FILE, SCENARIOS, Rendered, render, strict_validator

_rendered: dict[str, Rendered] = {}


@pytest.fixture(scope="session")
def scenario():
    """``scenario(name) -> Rendered``, each of :data:`SCENARIOS` built once per session."""

    def _get(name: str) -> Rendered:
        if name not in _rendered:
            _rendered[name] = render(SCENARIOS[name])
        return _rendered[name]

    return _get


@pytest.fixture(scope="session")
def disaggregated(scenario) -> Rendered:
    return scenario("disaggregated")


@pytest.fixture(scope="session")
def colocated(scenario) -> Rendered:
    return scenario("colocated")


@pytest.fixture(scope="session")
def strict_rayservice_validator():
    return strict_validator(CRD_FILE)
