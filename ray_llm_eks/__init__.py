"""ray-llm-eks: disaggregated Ray Serve LLM inference on Amazon EKS, as AWS CDK constructs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base.deployment import Deployment
    from .config import ConfigError, load_config, parse_config
    from .gitops import render_manifests

__all__ = ["ConfigError", "Deployment", "load_config", "parse_config", "render_manifests"]


def __getattr__(name: str) -> object:
    # Imported on first use (PEP 562): render_manifests brings aws_cdk, and the configuration
    # loader pydantic and the whole base layer, none of which `ray-llm-eks --help` (which imports
    # this package first) or the in-cluster programs need.
    if name == "render_manifests":
        from .gitops import render_manifests

        return render_manifests
    if name == "Deployment":
        from .base.deployment import Deployment

        return Deployment
    if name in ("ConfigError", "load_config", "parse_config"):
        from . import config

        return getattr(config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
__version__ = "0.1.0"
