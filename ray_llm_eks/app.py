"""Entry point behind app.py: load the config, synthesize, render the cdk8s charts as YAML."""

from __future__ import annotations

import sys

import aws_cdk as cdk

from .config import ConfigError, load_config
from .manifests import write_manifests
from .stack import build_app


def main(config_path: str | None = None) -> int:
    """Synthesize; exit code 2 and one readable message on stderr for any configuration mistake."""
    if config_path is None:
        # `-c config=...` reaches the app as context; read it before building anything.
        config_path = cdk.App().node.try_get_context("config")
    try:
        config = load_config(config_path)
        app, stack = build_app(config)
    except ConfigError as error:
        print(f"ray-llm-eks: {error}", file=sys.stderr)
        return 2
    assembly = app.synth()
    write_manifests(stack.charts, assembly.directory)
    return 0
