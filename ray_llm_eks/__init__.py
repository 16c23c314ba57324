"""ray-llm-eks: disaggregated Ray Serve LLM inference on Amazon EKS, as AWS CDK constructs."""

from .config import ConfigError, DeploymentConfig, load_config, parse_config

__all__ = ["ConfigError", "DeploymentConfig", "load_config", "parse_config"]
__version__ = "0.1.0"
