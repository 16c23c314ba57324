"""The files of this package, as the gate's ConfigMap carries them into the cluster: one zip
archive that Python imports the package from (``PYTHONPATH=<mount>/rayllmeks_gate.zip``, zipimport),
so the manifest stays small.

Compressed, the program is about a quarter of its source (the test prints both): the gate's
manifest then fits a Lambda asynchronous event with room to spare twice over (a CloudFormation
update sends the old and the new manifest; the limit was 256 KB until 2025, aws-cdk issue
#19165), and kubectl's ``last-applied-configuration`` annotation (256 KiB) holds it easily.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
IN_CLUSTER_PACKAGE = "rayllmeks_gate"
"""The package name the files are mounted as in the pod (``python -m rayllmeks_gate``)."""
ARCHIVE = f"{IN_CLUSTER_PACKAGE}.zip"
"""The ConfigMap key (``binaryData``) and the file name of the archive in the pod."""
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
"""Every entry's timestamp: the archive's bytes depend on the files only (one synth, one hash)."""


SHARED = (PACKAGE_DIR.parent / "bench" / "histogram.py", PACKAGE_DIR.parent / "base" / "wire.py")
"""Modules of other packages the gate uses (standard library only, no relative imports; :mod:`.shared`
imports them): the histogram quantile the bench's report uses too, so the two compute percentiles
alike, and the wire contract the charts render the gate's settings and names by."""


def files() -> dict[str, str]:
    """Every module of the package and the shared ones, by file name."""
    return {path.name: path.read_text() for path in sorted([*PACKAGE_DIR.glob("*.py"), *SHARED])}


def archive() -> bytes:
    """:func:`files` as a zip of ``rayllmeks_gate/<file>``, deflated, byte for byte the same for
    the same files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, text in sorted(files().items()):
            entry = zipfile.ZipInfo(f"{IN_CLUSTER_PACKAGE}/{name}", date_time=_FIXED_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            bundle.writestr(entry, text.encode(), compresslevel=9)
    return buffer.getvalue()


def unpack(data: bytes) -> dict[str, str]:
    """The files of an archive made by :func:`archive`, by file name (the twin and the tests read
    the rendered ConfigMap with it)."""
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        return {Path(name).name: bundle.read(name).decode() for name in bundle.namelist()}
