"""The base layer's former name: ``ray_llm_eks.spec`` and its modules, kept for existing imports.

The base layer lives in :mod:`ray_llm_eks.base` (a folder named ``spec/`` is read as a test folder
by tools that follow the RSpec convention). ``from ray_llm_eks.spec import ModelSpec`` and
``from ray_llm_eks.spec.serving import ServingSpec`` keep working: each module is the new one.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

from . import base as _base
from .base import *  # noqa: F403 - the same public names as before
from .base import __all__  # noqa: F401

for _module in pkgutil.iter_modules(_base.__path__):
    sys.modules[f"{__name__}.{_module.name}"] = importlib.import_module(f"{_base.__name__}.{_module.name}")
