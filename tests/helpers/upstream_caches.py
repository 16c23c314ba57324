"""Read-only upstream data parsed once per test process, not once per call.

Two libraries the suite calls hundreds of times re-read and re-parse the same files on every call.
Both are still the code that runs; only the parsing of their own data files is memoized:

- botocore: every new ``Session`` (boto3's default session, moto's, one per preflight check's
  session) makes a new ``Loader`` (``botocore/session.py``: ``create_loader(data_path)``), so each
  client of a new session decompresses and parses its service model again, the EC2 one alone
  megabytes of JSON. One loader per data path is what a single session already does for all its
  clients (``Loader`` caches what it loaded: ``instance_cache`` in ``botocore/loaders.py``), and
  nothing in botocore writes to a loaded model. Measured on the preflight, instance-type, CLI,
  capacity and gate files: 51 -> 42 s of CPU.
- kubernetes-validate: ``validate()`` reads and ``json.load``s the kind's schema and the whole
  ``_definitions.json`` on every call (``kubernetes_validate/utils.py``: ``schema_contents``),
  and the dict it returns is only read (``referencing.Resource.from_contents``). Measured on the
  chart files that validate: 38 -> 36 s of CPU.

:func:`install` runs in every pytest process (tests/conftest.py, ``pytest_configure``).
"""

from __future__ import annotations

import functools


def install() -> None:
    import botocore.loaders
    import botocore.session
    import kubernetes_validate.utils

    if not hasattr(botocore.loaders.create_loader, "cache_info"):
        shared = functools.cache(botocore.loaders.create_loader)
        botocore.loaders.create_loader = shared
        botocore.session.create_loader = shared  # botocore/session.py imports the name
    if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
        kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)
