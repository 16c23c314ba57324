"""The files of this package, as the gate's ConfigMap carries them into the cluster."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
IN_CLUSTER_PACKAGE = "rayllmeks_gate"
"""The package name the files are mounted as in the pod (``python -m rayllmeks_gate``)."""


SHARED = (PACKAGE_DIR.parent / "bench" / "histogram.py", PACKAGE_DIR.parent / "base" / "wire.py")
"""Modules of other packages the gate uses (standard library only, no relative imports; :mod:`.shared`
imports them): the histogram quantile the bench's report uses too, so the two compute percentiles
alike, and the wire contract the charts render the gate's settings and names by."""


def files() -> dict[str, str]:
    """Every module of the package and the shared ones, by file name (ConfigMap keys cannot hold
    '/', and need none)."""
    return {path.name: path.read_text() for path in sorted([*PACKAGE_DIR.glob("*.py"), *SHARED])}
