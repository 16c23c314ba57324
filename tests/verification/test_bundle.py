"""The gate program as its ConfigMap carries it: the bundle's files alone, in a directory of their own,
run with ``python -S`` (no site-packages: nothing of the project, nothing installed)."""

from __future__ import annotations

import subprocess
import sys

from ray_llm_eks.verification import bundle


def _run(root, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-S", *args], cwd=root, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})


def test_the_extracted_bundle_runs_with_no_site_packages(tmp_path):
    package = tmp_path / bundle.IN_CLUSTER_PACKAGE
    package.mkdir()
    for name, text in bundle.files().items():
        (package / name).write_text(text)
    for args in (["--help"], ["run", "--help"], ["efa-counters", "--help"], ["classify", "--help"]):
        result = _run(tmp_path, "-m", bundle.IN_CLUSTER_PACKAGE, *args)
        assert result.returncode == 0, result.stderr
    assert "run" in _run(tmp_path, "-m", bundle.IN_CLUSTER_PACKAGE, "--help").stdout
    # The shared modules resolve beside the gate's own, not from the repository.
    found = _run(tmp_path, "-c", f"from {bundle.IN_CLUSTER_PACKAGE}.shared import histogram, wire; "
                                 "print(wire.__name__, histogram.__name__)")
    assert found.stdout.split() == [f"{bundle.IN_CLUSTER_PACKAGE}.wire", f"{bundle.IN_CLUSTER_PACKAGE}.histogram"]


def test_the_bundle_carries_the_wire_contract_and_every_module_of_the_gate():
    files = bundle.files()
    assert {"wire.py", "histogram.py", "shared.py", "gate.py", "rollout.py", "checks.py", "report.py",
            "state.py", "objects.py", "__main__.py"} <= set(files)
    assert files["wire.py"] == (bundle.PACKAGE_DIR.parent / "base" / "wire.py").read_text()
