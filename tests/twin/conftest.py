"""The twin, once per session: `make test-twin` (root; docs/twin.md). Never part of `make test`.

The session's process moves into the twin's ``client`` namespace while the twin runs, so every
request a test sends (and the gate and bench it starts) crosses the twin's links as a client pod's
would. With ``RAY_LLM_EKS_TWIN_CAPTURE=DIR`` the tests also write what the real stack printed
and exported (worker logs, ``/metrics``) there: the fixtures of the fast tests are made so. What the
tests send and keep is in :mod:`helpers.twin`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

from ray_llm_eks.twin.run import Environment, TwinRun, terminate_gracefully  # noqa: E402


@pytest.fixture(scope="session")
def twin(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the twin makes network namespaces: run `make test-twin` as root")
    Environment.default().check()
    terminate_gracefully()  # a SIGTERM (CI's timeout, a user) still removes the namespaces and processes
    workdir = tmp_path_factory.mktemp("twin")
    with TwinRun(workdir, log=lambda line: print(f"[twin] {line}", flush=True)) as run:
        yield run
