"""The boundary between `make test` and the suites that start programs: `make test` runs in-process,
and a test of it that starts a program fails, naming itself and the program (tests/conftest.py
installs :func:`only_program_tiers_start_programs` as an audit hook and keeps :data:`running`)."""

from __future__ import annotations

import os

import pytest

PROGRAM_TIERS = ("integration", "aiperf", "twin", "slow_vllm")
"""The markers of the suites whose tests may start programs (pyproject.toml's markers): `make test`
deselects all of them (pyproject.toml's addopts)."""

running: list[pytest.Item] = []
"""The test whose protocol (its fixtures' setup and teardown included) is under way, last."""


def only_program_tiers_start_programs(event: str, args: tuple) -> None:
    """Fails a test of `make test` that starts a program: mark it ``integration`` (`make
    test-integration`, which CI runs) or test the code in-process. jsii's own Node process, the
    kernel every CDK and cdk8s test talks to, is the one exception. Python raises an audit hook's
    exception from the call that audited it (https://docs.python.org/3.11/library/sys.html#sys.addaudithook),
    here ``subprocess.Popen`` before it forks."""
    if event not in ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec") or not running:
        return
    item = running[-1]
    if any(item.get_closest_marker(tier) for tier in PROGRAM_TIERS):
        return
    command = args[1] if event == "subprocess.Popen" else args[0]
    words = [command] if isinstance(command, (str, bytes, os.PathLike)) else list(command)
    # jsii's kernel: `node --max-old-space-size=4069 <temp>/bin/jsii-runtime.js`
    # (jsii/_kernel/providers/process.py:259-272@1.142.0)
    if event == "subprocess.Popen" and str(words[-1]).endswith(f"{os.sep}jsii-runtime.js"):
        return
    raise RuntimeError(f"{item.nodeid} starts a program ({' '.join(map(str, words))[:120]}): `make test` runs "
                       "in-process; mark the test `integration` (`make test-integration`) or call the code itself")
