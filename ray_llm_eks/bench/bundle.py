"""The files of this package, as the in-cluster bench Job's ConfigMap carries them."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SHARED = tuple(PACKAGE_DIR.parent / path for path in (
    "verification/efa.py", "verification/reads.py", "verification/metrics.py", "verification/shared.py",
    "base/histogram.py", "base/wire.py", "base/upstream_defects.py"))
"""The gate's modules the bench reads utilization with (:mod:`.utilization`: the EFA counter reading
and its byte rule, the bounded reads, the Prometheus parser), what they import in turn (``shared``
names ``histogram``, ``wire`` and ``upstream_defects``), and the histogram quantile the bench's
report uses (:mod:`.runner`). Each is standard library only, with relative imports of these alone,
so it imports beside the bench's own modules in the pod."""
IN_CLUSTER_PACKAGE = "rayllmeks_bench"
"""The package name the files are mounted as in the pod (``python -m rayllmeks_bench``)."""


def files() -> dict[str, str]:
    """Every module of the package, and the shared ones, by file name (ConfigMap keys cannot hold '/')."""
    return {path.name: path.read_text() for path in sorted([*PACKAGE_DIR.glob("*.py"), *SHARED])}
