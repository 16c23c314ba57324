"""Fixtures for the gate: the reference deployment's rendered charts and gate settings, once per session
(built by :mod:`helpers.gate`)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Iterator

import pytest

from fake_cluster import FakeDeployment, Scenario
from helpers.gate import Deployed, render_deployment
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.serving import ImageSpec, Topology
from ray_llm_eks.verification import bundle


@pytest.fixture(scope="session")
def disaggregated() -> Deployed:
    return render_deployment(Deployment())


@pytest.fixture(scope="session")
def another_spec() -> Deployed:
    """The reference deployment with another image: a change that needs a new RayCluster."""
    return render_deployment(Deployment(image=ImageSpec(digest="sha256:" + "ab" * 32)))


@pytest.fixture(scope="session")
def colocated() -> Deployed:
    return render_deployment(Deployment(topology=Topology.colocated))


@pytest.fixture(scope="session")
def in_cluster_copy(tmp_path_factory: pytest.TempPathFactory, disaggregated: Deployed) -> Path:
    """The program as the gate's pods get it: the rendered ConfigMap's archive, alone in a folder
    (``run_gate`` and :func:`fake_cluster.program_env` put it on ``PYTHONPATH``, as the chart does)."""
    root = tmp_path_factory.mktemp("program")
    (root / bundle.ARCHIVE).write_bytes(base64.b64decode(disaggregated.program_archive))
    return root


@pytest.fixture
def fake(tmp_path: Path, request: pytest.FixtureRequest, disaggregated: Deployed) -> Iterator[FakeDeployment]:
    deployed = getattr(request, "param", None) or disaggregated
    scenario = Scenario()
    deployment = FakeDeployment(tmp_path, deployed.rayservice, deployed.settings, scenario)
    yield deployment
    deployment.close()


