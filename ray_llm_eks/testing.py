"""Helpers for testing stacks built with ray-llm-eks, in this project and in users' apps."""

from __future__ import annotations

from typing import Any

# Skips copying the kubectl and awscli layer assets (~57 MB) into cdk.out on every synth;
# templates are unchanged apart from asset paths.
FAST_SYNTH_CONTEXT: dict[str, Any] = {"aws:cdk:disable-asset-staging": True}
