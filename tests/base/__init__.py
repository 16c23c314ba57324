"""A package: its modules mirror ``ray_llm_eks/base/`` (``test_kv_path.py`` for ``base/kv_path.py``).
A package, so that its names may repeat those of tests/constructs/ (``base/spend.py`` and
``constructs/spend.py``), which pytest's default import mode allows only inside a package, and so
that another test module imports one of them by one name (``base.test_composition``). tests/constructs/
cannot be one: a package ``constructs`` on the path would hide the CDK's own ``constructs``."""
