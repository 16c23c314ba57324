"""Deployments for tests that are not about pinning: ``strict`` false unless a test says otherwise.

The library refuses an image without a digest or a model without a commit by default, and a test
cannot know a real digest or commit (no registry, no Hub), nor should it carry an invented one
into every rendered manifest. So the tests that build the reference deployment to test something
else build it unpinned, here, in one place; tests/test_reproducibility.py tests strict itself
against the library's own default (``Deployment()`` unchanged) and the shipped reference file.
"""

from __future__ import annotations

from typing import Any

from ray_llm_eks.base.deployment import Deployment
from ray_llm_eks.config import parse_config

UNPINNED: dict[str, Any] = {"strict": False}
"""The configuration key every test override starts from (``synth`` in tests/conftest.py)."""


def unpinned(**fields: Any) -> Deployment:
    """``Deployment(**fields)`` with ``strict=False`` unless ``fields`` names it."""
    return Deployment(**{**UNPINNED, **fields})


def unpinned_config(data: dict[str, Any] | None = None, source: str = "test overrides") -> Deployment:
    """``parse_config(data)`` with ``strict: false`` unless ``data`` names it."""
    return parse_config({**UNPINNED, **(data or {})}, source)
