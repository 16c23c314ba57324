"""Moved to :mod:`ray_llm_eks.base.pricing` (the base layer: the spend check of every entry point
reads the price table); this name still imports, as the same module."""

import sys

from .base import pricing as _moved

sys.modules[__name__] = _moved
