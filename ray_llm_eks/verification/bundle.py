"""The files of this package, as the gate's ConfigMap carries them into the cluster."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
IN_CLUSTER_PACKAGE = "rayllmeks_gate"
"""The package name the files are mounted as in the pod (``python -m rayllmeks_gate``)."""


def files() -> dict[str, str]:
    """Every module of the package, by file name (ConfigMap keys cannot hold '/', and need none)."""
    return {path.name: path.read_text() for path in sorted(PACKAGE_DIR.glob("*.py"))}
