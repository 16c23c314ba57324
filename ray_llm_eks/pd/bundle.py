"""The archive that carries :mod:`.conditional` to the Ray nodes, and the URI the Serve config names it by.

The Ray pods mount it from a ConfigMap (``binaryData``) at :data:`MOUNT_DIR`, and the Serve
application's ``runtime_env.py_modules`` names it as ``file://`` (:func:`uri`). Ray 2.58 takes
``file`` as a remote protocol (``ray/_private/runtime_env/protocol.py:41-47``, so the Serve schema's
"only remote URIs" rule accepts it: ``ray/serve/schema.py:828-850``): each node's runtime-env agent
copies the zip from that path (``download_remote_uri``, ``protocol.py:258-263``), unpacks it with its
single top-level directory removed (``packaging.py:941-950``) and puts the result on the workers'
``PYTHONPATH`` (``py_modules.py:225-242``). Nothing is fetched from outside the cluster. Serve
builds the application (the ``import_path``) and runs every deployment of it with the application's
runtime_env, so the builder and the decode replicas import the same files.

Ray caches an unpacked package by its URI, so the file name carries the archive's digest
(:func:`archive_name`): another program is another URI, never a stale copy. Pinned and versioned
the way the gate's program is (``ray_llm_eks.verification.bundle``: the same stripping, fixed
timestamps, deflate; byte for byte the same for the same files).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..verification.bundle import deterministic_zip, shipped

PACKAGE_DIR = Path(__file__).resolve().parent
IN_CLUSTER_PACKAGE = "rayllmeks_pd"
"""The package the Ray nodes import (``rayllmeks_pd.conditional:build_pd_openai_app``)."""
TOP_LEVEL = "py_modules"
"""The archive's one top-level directory, which Ray removes when it unpacks: what remains is
``rayllmeks_pd/``, in the directory Ray puts on ``PYTHONPATH``."""
MOUNT_DIR = "/opt/rayllmeks-pd"
"""Where the Ray pods mount the archive (read-only)."""
IMPORT_PATH = f"{IN_CLUSTER_PACKAGE}.conditional:build_pd_openai_app"
SHARED = (PACKAGE_DIR.parent / "base" / "wire.py",)
"""The wire contract (standard library only), for the metric's name and the threshold's key."""


def files() -> dict[str, str]:
    """The modules the Ray nodes import, by file name, as the archive carries them."""
    paths = [PACKAGE_DIR / "__init__.py", PACKAGE_DIR / "conditional.py", *SHARED]
    return {path.name: shipped(path.read_text()) for path in paths}


def archive() -> bytes:
    """``py_modules/rayllmeks_pd/<file>``, made as the gate's archive is (:func:`deterministic_zip`)."""
    return deterministic_zip({f"{TOP_LEVEL}/{IN_CLUSTER_PACKAGE}/{name}": text for name, text in files().items()})


def archive_name(data: bytes | None = None) -> str:
    """The archive's file name (and ConfigMap key): the package and the first 16 hex of its SHA-256."""
    digest = hashlib.sha256(archive() if data is None else data).hexdigest()[:16]
    return f"{IN_CLUSTER_PACKAGE}-{digest}.zip"


def uri(data: bytes | None = None) -> str:
    """The ``runtime_env.py_modules`` entry: the mounted archive as a ``file://`` URI."""
    return f"file://{MOUNT_DIR}/{archive_name(data)}"
