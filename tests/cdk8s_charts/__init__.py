"""A package: its modules mirror ``ray_llm_eks/cdk8s_charts/`` (``test_rayservice.py`` for
``cdk8s_charts/rayservice.py``), names that tests/constructs/ also uses (``test_gcs_redis.py``), which
pytest's default import mode allows only inside a package. Its helpers are imported by the package's
name (``from cdk8s_charts.netpol import ...``)."""
