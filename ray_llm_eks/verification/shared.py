"""The modules the gate shares with the rest of the project, wherever they are.

In the cluster the gate's ConfigMap carries them beside the gate's own modules (``bundle.SHARED``);
in the repository they live in their own packages. Each is standard library only and imports
nothing relatively, so it works in both places; this is the one module that knows both.
"""

from __future__ import annotations

try:  # the in-cluster bundle: beside this module
    from . import histogram, upstream_defects, wire  # type: ignore[attr-defined]
except ImportError:  # the repository (exercised in the cluster's layout by the bundle tests)
    from ..base import histogram, upstream_defects, wire  # type: ignore[no-redef]

__all__ = ["histogram", "upstream_defects", "wire"]
