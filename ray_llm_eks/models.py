"""Moved to :mod:`ray_llm_eks.base.models` (the base layer); this name still imports, as the same module."""

import sys

from .base import models as _moved

sys.modules[__name__] = _moved
