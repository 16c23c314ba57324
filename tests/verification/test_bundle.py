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


def test_the_archive_is_imported_from_as_the_pods_import_it(tmp_path):
    """``PYTHONPATH=<mount>/rayllmeks_gate.zip`` and ``python -S``: zipimport, nothing extracted."""
    (tmp_path / bundle.ARCHIVE).write_bytes(bundle.archive())
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path / bundle.ARCHIVE)}
    scratch = tmp_path / "elsewhere"
    scratch.mkdir()
    found = subprocess.run([sys.executable, "-S", "-c", f"import {bundle.IN_CLUSTER_PACKAGE}.shared as s; "
                            "print(s.__file__, s.wire.__name__)"], cwd=scratch, capture_output=True, text=True,
                           timeout=60, env=env)
    assert found.returncode == 0, found.stderr
    where, wire_name = found.stdout.split()
    assert where.startswith(str(tmp_path / bundle.ARCHIVE)) and wire_name == f"{bundle.IN_CLUSTER_PACKAGE}.wire"
    for args in (["--help"], ["run", "--help"], ["efa-counters", "--help"], ["classify", "--help"]):
        result = subprocess.run([sys.executable, "-S", "-m", bundle.IN_CLUSTER_PACKAGE, *args], cwd=scratch,
                                capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0, result.stderr


def test_the_archive_is_the_same_bytes_for_the_same_files_and_holds_them_all():
    assert bundle.archive() == bundle.archive()
    assert bundle.unpack(bundle.archive()) == bundle.files()


def test_the_gate_manifest_fits_the_old_lambda_event_limit_and_the_last_applied_annotation(default):
    """A CloudFormation update sends the kubectl handler the old and the new manifest in one event
    (256 KB was Lambda's asynchronous payload limit, aws-cdk #19165); kubectl apply keeps the whole
    object in ``last-applied-configuration`` (262,144 bytes for all annotations). Printed: the
    figures behind docs/verification.md's."""
    import base64
    import json

    from ray_llm_eks.cdk8s_charts import VERIFICATION_CHART_ID

    from ray_llm_eks.testing import normalized_template

    logical_id = default.logical_id(default.stack.serving.manifests[VERIFICATION_CHART_ID])
    event_part = json.dumps(default.template_json["Resources"][logical_id]["Properties"])  # as CloudFormation sends it
    objects = normalized_template(default.template_json, program_files=True)["Resources"][logical_id]["Properties"]["Manifest"]
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-program")]
    source = sum(len(t.encode()) for t in bundle.files().values())
    archive = len(base64.b64decode(config_map["binaryData"][bundle.ARCHIVE]))
    print(f"gate program: {source} bytes of source, {archive} bytes zipped; manifest {len(event_part)} bytes")
    assert archive < source / 2
    assert 2 * len(event_part.encode()) < 256_000  # an update event fits even the old limit
    assert len(json.dumps(config_map).encode()) < 262_144 / 2  # half the annotation budget at most
