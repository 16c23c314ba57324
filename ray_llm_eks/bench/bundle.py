"""The files of this package, as the in-cluster bench Job's ConfigMap carries them."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
IN_CLUSTER_PACKAGE = "rayllmeks_bench"
"""The package name the files are mounted as in the pod (``python -m rayllmeks_bench``)."""


def files() -> dict[str, str]:
    """Every module of the package, by file name (ConfigMap keys cannot hold '/')."""
    return {path.name: path.read_text() for path in sorted(PACKAGE_DIR.glob("*.py"))}
