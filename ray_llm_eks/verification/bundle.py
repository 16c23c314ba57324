"""The files of this package, as the gate's ConfigMap carries them into the cluster: one zip
archive that Python imports the package from (``PYTHONPATH=<mount>/rayllmeks_gate.zip``, zipimport),
so the manifest stays small.

Shipped without docstrings and comments (:func:`shipped`, every line kept) and compressed, the
program is about a quarter of its source (198 KB to 45 KB, measured 2026-12-03 after issue 24's
bounded reads and signal client): the gate's manifest then fits a Lambda asynchronous event (a
CloudFormation update sends the old and the new manifest, about 156 KB; the limit was 256 KB until 2025, aws-cdk issue
#19165), and kubectl's ``last-applied-configuration`` annotation (256 KiB) holds it easily.
"""

from __future__ import annotations

import ast
import io
import tokenize
import zipfile
from pathlib import Path
from typing import Mapping

PACKAGE_DIR = Path(__file__).resolve().parent
IN_CLUSTER_PACKAGE = "rayllmeks_gate"
"""The package name the files are mounted as in the pod (``python -m rayllmeks_gate``)."""
ARCHIVE = f"{IN_CLUSTER_PACKAGE}.zip"
"""The ConfigMap key (``binaryData``) and the file name of the archive in the pod."""
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
"""Every entry's timestamp: the archive's bytes depend on the files only (one synth, one hash)."""


SHARED = (PACKAGE_DIR.parent / "base" / "histogram.py", PACKAGE_DIR.parent / "base" / "wire.py",
          PACKAGE_DIR.parent / "base" / "upstream_defects.py")
"""Modules of other packages the gate uses (standard library only, no relative imports; :mod:`.shared`
imports them): the histogram quantile the bench's report uses too (both import it from the base layer), so the two compute percentiles
alike, the wire contract the charts render the gate's settings and names by, and the upstream
defects table, whose log lines the gate names as root causes with what synth would have said."""


WORKSTATION_ONLY = ("api_proxy.py", "bundle.py")
"""Modules the pod never imports: ``ray-llm-eks verify``'s temporary admission of the API server,
and this packer. Left out of the archive to keep the manifest small (the end-to-end gate tests run
the program from the archive, so a module it needs cannot be missed)."""


def files() -> dict[str, str]:
    """Every module of the package the pod runs, and the shared ones, by file name."""
    return {path.name: path.read_text() for path in sorted([*PACKAGE_DIR.glob("*.py"), *SHARED])
            if path.name not in WORKSTATION_ONLY}


KEEPS_MODULE_DOCSTRING = ("__main__.py",)
"""Modules whose docstring the program reads at run time (``__main__``'s is its ``--help``)."""


def shipped(text: str, *, keep_module_docstring: bool = False) -> str:
    """``text`` as it travels in the archive: every docstring (a string standing alone as a
    statement) and every comment blanked, each line where it was, so a traceback from the cluster
    points at the same line numbers as the package's source. Nothing that runs changes."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, byte_column: int) -> int:  # ast counts UTF-8 bytes, str slices characters
        return starts[line - 1] + len(lines[line - 1].encode()[:byte_column].decode())

    spans: list[tuple[int, int, str]] = []  # (start, end, replacement) in characters of ``text``
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        for index, statement in enumerate(body if isinstance(body, list) else ()):
            if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)):
                continue
            if isinstance(node, ast.Module) and index == 0 and keep_module_docstring:
                continue
            value = statement.value
            end_line = value.end_lineno or value.lineno
            # Parentheses let the emptied statement keep every line it had.
            empty = '""' if end_line == value.lineno else "(" + "\n" * (end_line - value.lineno) + '"")'
            spans.append((offset(value.lineno, value.col_offset), offset(end_line, value.end_col_offset or 0), empty))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            begin = starts[token.start[0] - 1] + token.start[1]
            while begin > starts[token.start[0] - 1] and text[begin - 1] in " \t":
                begin -= 1
            spans.append((begin, starts[token.end[0] - 1] + token.end[1], ""))
    for begin, finish, replacement in sorted(spans, reverse=True):
        text = text[:begin] + replacement + text[finish:]
    return text


def shipped_files(sources: Mapping[str, str] | None = None) -> dict[str, str]:
    """``sources`` (by default :func:`files`) as the archive carries them (:func:`shipped`)."""
    return {name: shipped(text, keep_module_docstring=name in KEEPS_MODULE_DOCSTRING)
            for name, text in (files() if sources is None else sources).items()}


def deterministic_zip(entries: Mapping[str, str]) -> bytes:
    """``entries`` (path in the archive -> text), deflated at level 9 with a fixed time and mode,
    in path order: byte for byte the same for the same entries. The gate's archive and the
    conditional P/D archive (:mod:`ray_llm_eks.pd.bundle`) are both made so."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for path, text in sorted(entries.items()):
            entry = zipfile.ZipInfo(path, date_time=_FIXED_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            bundle.writestr(entry, text.encode(), compresslevel=9)
    return buffer.getvalue()


def archive(sources: Mapping[str, str] | None = None) -> bytes:
    """:func:`shipped_files` of ``sources`` (by default :func:`files`) as a zip of
    ``rayllmeks_gate/<file>`` (:func:`deterministic_zip`)."""
    return deterministic_zip({f"{IN_CLUSTER_PACKAGE}/{name}": text for name, text in shipped_files(sources).items()})


def unpack(data: bytes) -> dict[str, str]:
    """The files of an archive made by :func:`archive`, by file name (the twin and the tests read
    the rendered ConfigMap with it)."""
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        return {Path(name).name: bundle.read(name).decode() for name in bundle.namelist()}
