"""The boundary between `make test` and the suites that start programs (tests/helpers/suites.py):
`make test` runs in-process, and a test of it that starts a program fails, naming itself and the
program."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers.suites import PROGRAM_TIERS, only_program_tiers_start_programs


def test_a_test_of_make_test_that_starts_a_program_fails_naming_itself_and_the_program(request):
    with pytest.raises(RuntimeError) as refused:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert request.node.nodeid in str(refused.value)
    assert f"({sys.executable} -c pass)" in str(refused.value)
    assert "mark the test `integration`" in str(refused.value)
    with pytest.raises(RuntimeError):
        os.system("true")


def test_jsii_s_kernel_is_the_one_program_it_may_start():
    kernel = ["node", "--max-old-space-size=4069", f"{os.sep}tmp{os.sep}x{os.sep}bin{os.sep}jsii-runtime.js"]
    assert only_program_tiers_start_programs("subprocess.Popen", ("node", kernel, None, None)) is None
    with pytest.raises(RuntimeError):
        only_program_tiers_start_programs("subprocess.Popen", ("node", ["node", "cdk.js"], None, None))


def test_every_suite_that_may_start_programs_is_a_marker_make_test_deselects(pytestconfig):
    declared = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert set(PROGRAM_TIERS) <= declared
    addopts = " ".join(pytestconfig.getini("addopts"))
    assert all(f"not {tier}" in addopts for tier in PROGRAM_TIERS)


@pytest.mark.integration
def test_a_test_of_a_program_suite_may_start_one():
    assert subprocess.run([sys.executable, "-c", "pass"], check=True).returncode == 0
