"""A package: its modules mirror ``ray_llm_eks/cli/`` (``test_plan.py`` for ``cli/plan.py``), names
that ``tests/test_preflight.py`` or ``tests/bench/test_compare.py`` also use, which pytest's default
import mode allows only inside a package."""
