"""Moved to :mod:`ray_llm_eks.base.instance_types` (the base layer); this name still imports, as the same module."""

import sys

from .base import instance_types as _moved

sys.modules[__name__] = _moved
