"""`make synth` keeps the last good cdk.out until a new synthesis succeeds (a bad configuration
must not delete the output a reviewer was reading). Checked on make's own plan of the recipe
(`make -n`), since a real synthesis here would write into the working tree; it was run by hand
with a good and then a bad configuration (the template's mtime unchanged after the failure)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_synth_writes_beside_cdk_out_and_replaces_it_only_after_success():
    planned = subprocess.run(["make", "-n", "-W", "bootstrap", "synth", "CONFIG=my.yaml"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    synth = next(i for i, line in enumerate(planned) if " synth " in line and "cdk" in line)
    assert "--output cdk.out.next" in planned[synth] and "-c config=my.yaml" in planned[synth]
    removals = [i for i, line in enumerate(planned) if line.split("&&")[0].split() == ["rm", "-rf", "cdk.out"]]
    assert removals and all(i > synth for i in removals), planned
    assert any("mv cdk.out.next cdk.out" in line for line in planned[synth + 1:]), planned
