"""ray-llm-eks: disaggregated Ray Serve LLM inference on Amazon EKS, as AWS CDK constructs."""

from .base.deployment import Deployment
from .config import ConfigError, load_config, parse_config

__all__ = ["ConfigError", "Deployment", "load_config", "parse_config", "render_manifests"]


def __getattr__(name: str) -> object:
    # Imported on first use: it brings aws_cdk, which `import ray_llm_eks` alone does not load.
    if name == "render_manifests":
        from .gitops import render_manifests

        return render_manifests
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
__version__ = "0.1.0"
