"""The teardown guard: what holds ``cdk destroy`` back until KubeRay has finished with the RayClusters.

:mod:`.guard` runs in the cluster (standard library only, one file, mounted from a ConfigMap);
the RayService chart renders it (``cdk8s_charts.serving.TeardownGuard``). Why it exists and
where it sits in the delete order: docs/rayservice.md, "Delete order".
"""

from __future__ import annotations

from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "guard.py"
"""The guard's source, as the ConfigMap carries it (key :data:`PROGRAM_FILE`)."""
PROGRAM_FILE = "teardown_guard.py"
