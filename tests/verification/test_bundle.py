"""The gate program as its ConfigMap carries it: the bundle's files alone, in a directory of their own,
run with ``python -S`` (no site-packages: nothing of the project, nothing installed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ray_llm_eks.verification import bundle


def _run(root, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-S", *args], cwd=root, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.mark.integration
def test_the_extracted_bundle_runs_with_no_site_packages(tmp_path):
    package = tmp_path / bundle.IN_CLUSTER_PACKAGE
    package.mkdir()
    for name, text in bundle.shipped_files().items():
        (package / name).write_text(text)
    for args in (["--help"], ["run", "--help"], ["efa-counters", "--help"], ["classify", "--help"]):
        result = _run(tmp_path, "-m", bundle.IN_CLUSTER_PACKAGE, *args)
        assert result.returncode == 0, result.stderr
    helped = _run(tmp_path, "-m", bundle.IN_CLUSTER_PACKAGE, "--help").stdout
    assert "run" in helped and "the gate's ent" in helped  # __main__ keeps its docstring
    # The shared modules resolve beside the gate's own, not from the repository.
    found = _run(tmp_path, "-c", f"from {bundle.IN_CLUSTER_PACKAGE}.shared import histogram, wire; "
                                 "print(wire.__name__, histogram.__name__)")
    assert found.stdout.split() == [f"{bundle.IN_CLUSTER_PACKAGE}.wire", f"{bundle.IN_CLUSTER_PACKAGE}.histogram"]


def test_the_bundle_carries_the_wire_contract_and_every_module_of_the_gate():
    files = bundle.files()
    assert {"wire.py", "histogram.py", "shared.py", "gate.py", "rollout.py", "checks.py", "report.py",
            "state.py", "objects.py", "__main__.py"} <= set(files)
    assert files["wire.py"] == (bundle.PACKAGE_DIR.parent / "base" / "wire.py").read_text()


def test_what_only_the_workstation_runs_is_left_out_and_imported_by_nothing_shipped():
    import ast

    files = bundle.files()
    assert not set(bundle.WORKSTATION_ONLY) & set(files)
    left_out = {name.removesuffix(".py") for name in bundle.WORKSTATION_ONLY}
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level:
                imported = {node.module} if node.module else {alias.name for alias in node.names}
                assert not imported & left_out, (name, imported)


@pytest.mark.integration
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
    assert bundle.unpack(bundle.archive()) == bundle.shipped_files()


def test_the_archive_is_the_same_bytes_whatever_the_clock_says(monkeypatch):
    """Two builds a second apart look alike even with the time in the archive: these are years
    apart. A wall-clock stamp (``ZipFile.writestr`` given a name stamps ``time.localtime(time.time())``)
    would change the ConfigMap, so the run id and the manifest, at every synth."""
    import io
    import time
    import zipfile

    built = {}
    for stamp in (1_700_000_000.0, 2_000_000_000.0):
        monkeypatch.setattr(time, "time", lambda stamp=stamp: stamp)
        assert time.localtime(time.time())[:6] != bundle._FIXED_TIME
        built[stamp] = bundle.archive()
    assert built[1_700_000_000.0] == built[2_000_000_000.0]
    with zipfile.ZipFile(io.BytesIO(built[2_000_000_000.0])) as archive:
        assert {entry.date_time for entry in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}


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
    assert archive < source / 4
    # An update event well under even the old 256 KB limit: 70 % of it at most (the upstream-defects
    # table the gate names causes by took the manifest from 80 KB to 85 KB, 2026-12-06).
    assert 2 * len(event_part.encode()) < 180_000
    assert len(json.dumps(config_map).encode()) < 262_144 * 0.3  # under a third of the annotation budget


def _statements(text: str) -> list[tuple[str, int]]:
    import ast

    return sorted((type(node).__name__, node.lineno) for node in ast.walk(ast.parse(text))
                  if isinstance(node, ast.stmt) and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)))


def test_the_shipped_files_lose_their_docstrings_and_comments_but_no_line():
    """A traceback from the cluster names the lines of the package's source: every statement keeps its
    line, only docstrings and comments are blanked (they were about a third of the bytes)."""
    import ast
    import io
    import tokenize

    shipped = bundle.shipped_files()
    for name, text in bundle.files().items():
        assert shipped[name].count("\n") == text.count("\n"), name
        assert _statements(shipped[name]) == _statements(text), name
        compile(shipped[name], name, "exec")
        tokens = list(tokenize.generate_tokens(io.StringIO(shipped[name]).readline))
        assert not [t for t in tokens if t.type == tokenize.COMMENT], name
        for node in ast.walk(ast.parse(shipped[name])):
            for index, statement in enumerate(getattr(node, "body", None) if isinstance(getattr(node, "body", None), list) else ()):
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and \
                        isinstance(statement.value.value, str) and not (name == "__main__.py" and node is not None
                                                                        and isinstance(node, ast.Module) and index == 0):
                    assert statement.value.value.strip() == "", (name, statement.lineno)
    total = sum(len(t.encode()) for t in bundle.files().values())
    assert sum(len(t.encode()) for t in shipped.values()) < total * 0.8


def test_shipping_keeps_strings_that_are_values_and_lines_with_code_before_a_comment():
    source = ('"""Module."""\nfrom __future__ import annotations\n\nX = "# not a comment"  # a comment\n'
              '\n\ndef f():\n    """Two\n    lines."""\n    return X  # why\n\n\nclass C:\n    y = 1\n    """About y: ≤ 2."""\n')
    shipped = bundle.shipped(source)
    assert shipped.splitlines() == ['""', "from __future__ import annotations", "", 'X = "# not a comment"',
                                    "", "", "def f():", "    (", '"")', "    return X", "", "", "class C:", "    y = 1",
                                    '    ""']
    namespace: dict = {}
    exec(compile(shipped, "m", "exec"), namespace)
    assert namespace["f"]() == "# not a comment" and namespace["C"].y == 1
