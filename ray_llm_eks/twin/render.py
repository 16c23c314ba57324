"""Render the twin's deployment as ``make synth`` does, for each topology.

``build_app`` is the app ``cdk synth`` runs; the charts it builds are the manifests a deploy
applies. The twin reads only those rendered objects (:mod:`.twin_profile` changes what a CPU-only
machine needs), so a twin run exercises the exact Serve config and gate settings of the
configuration, not a copy of them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

TOPOLOGIES = ("disaggregated", "colocated")
RAYSERVICE_CHART = "serving-rayservice"
VERIFICATION_CHART = "serving-verification"


def render(config_path: str | Path, topology: str, outdir: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Chart id -> its Kubernetes objects, for ``config_path`` with ``topology`` set.

    With ``outdir``, the manifests are also written to ``<outdir>/manifests/`` as ``make synth`` writes them.
    """
    # Imported here: they bring aws_cdk and cdk8s (and Node through jsii), which the GPU profile's
    # machine lacks; it runs from renders made elsewhere (ray_llm_eks.twin.gpu).
    from ..config import parse_config
    from ..manifests import chart_objects, write_manifests
    from ..stack import build_app
    from ..testing import FAST_SYNTH_CONTEXT

    data = yaml.safe_load(Path(config_path).read_text()) or {}
    config = parse_config({**data, "topology": topology}, str(config_path))
    with tempfile.TemporaryDirectory(prefix="rle-twin-synth-") as scratch:
        _, stack = build_app(config, outdir=scratch, context=FAST_SYNTH_CONTEXT, nag=False)
        charts = stack.charts
        if outdir is not None:
            write_manifests(charts, outdir)
        return {chart.node.id: chart_objects(chart) for chart in charts}
