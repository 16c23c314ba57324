"""`make synth` keeps the last good cdk.out until a new synthesis succeeds (a bad configuration
must not delete the output a reviewer was reading). The order of the recipe is checked on make's
own plan (`make -n`); a bad configuration is run for real, as typed, in a copy of the entry points."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent


def test_synth_writes_beside_cdk_out_and_replaces_it_only_after_success():
    planned = subprocess.run(["make", "-n", "-W", "bootstrap", "synth", "CONFIG=my.yaml"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    synth = next(i for i, line in enumerate(planned) if " synth " in line and "cdk" in line)
    assert "--output cdk.out.next" in planned[synth] and "-c config=my.yaml" in planned[synth]
    removals = [i for i, line in enumerate(planned) if line.split("&&")[0].split() == ["rm", "-rf", "cdk.out"]]
    assert removals and all(i > synth for i in removals), planned
    assert any("mv cdk.out.next cdk.out" in line for line in planned[synth + 1:]), planned


def test_a_bad_configuration_keeps_the_last_good_output_as_typed(tmp_path):
    # `make synth CONFIG=bad.yaml` for real, in a copy of the project's entry points (the package,
    # the environments and node_modules linked), so the working tree's cdk.out is not touched.
    for name in ("Makefile", "cdk.json", "app.py", "pyproject.toml", "package.json", "package-lock.json"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    for name in ("ray_llm_eks", ".venv", "node_modules"):
        (tmp_path / name).symlink_to(ROOT / name)
    last_good = tmp_path / "cdk.out" / "RayLlmEks.template.json"
    last_good.parent.mkdir()
    last_good.write_text("{}")
    (tmp_path / "bad.yaml").write_text("strict: false\nregion: us-west-3\n")
    done = subprocess.run(["make", "-o", "bootstrap", "synth", "CONFIG=bad.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "region" in output and "us-west-3" in output, output
    assert "Traceback" not in output, output
    assert last_good.read_text() == "{}"
