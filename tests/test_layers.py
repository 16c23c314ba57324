"""The package's import layering, read from the source: the spec layer sits below both halves."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ray_llm_eks"
AWS_LIBRARIES = ("aws_cdk", "constructs", "cdk_nag")
K8S_LIBRARIES = ("cdk8s", "cdk8s_plus_35")


def imports_of(path: Path, package: Path = PACKAGE) -> set[str]:
    """Absolute names of everything ``path`` imports (relative imports resolved in the package)."""
    module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


@functools.cache  # each parametrized test reads one file's entry: the folder is parsed once per process
def folder_imports(folder: str) -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE)): imports_of(p) for p in sorted((PACKAGE / folder).glob("*.py"))}


def _uses(names: set[str], roots: tuple[str, ...]) -> set[str]:
    return {n for n in names if n.split(".")[0] in roots or any(n.startswith(r + ".") for r in roots)}


@pytest.mark.parametrize("path", sorted(folder_imports("base")))
def test_the_spec_layer_imports_neither_half_nor_the_configuration(path):
    names = folder_imports("base")[path]
    assert not _uses(names, AWS_LIBRARIES + K8S_LIBRARIES), path
    assert not _uses(names, ("ray_llm_eks.constructs", "ray_llm_eks.cdk8s_charts", "ray_llm_eks.config",
                             "ray_llm_eks.stack", "pydantic")), path
    # Nor the in-cluster programs: the names they share with the charts are the base layer's (wire.py).
    assert not _uses(names, ("ray_llm_eks.verification", "ray_llm_eks.bench")), path


@pytest.mark.parametrize("path", sorted(folder_imports("cdk8s_charts")))
def test_the_charts_import_no_aws_construct_and_no_configuration(path):
    names = folder_imports("cdk8s_charts")[path]
    assert not _uses(names, ("aws_cdk", "cdk_nag")), path
    assert not _uses(names, ("ray_llm_eks.constructs", "ray_llm_eks.config", "ray_llm_eks.stack")), path


@pytest.mark.parametrize("path", sorted(folder_imports("constructs")))
def test_the_constructs_read_the_spec_not_the_configuration(path):
    names = folder_imports("constructs")[path]
    assert not _uses(names, ("ray_llm_eks.config", "ray_llm_eks.stack")), path
    # The one place the AWS half applies the Kubernetes half: RayLlmServing adds the charts to
    # the cluster. The edge goes one way only (the charts never import a construct).
    if path != "constructs/serving.py":
        assert not _uses(names, ("ray_llm_eks.cdk8s_charts",) + K8S_LIBRARIES), path


@pytest.mark.integration
def test_importing_the_charts_does_not_load_aws_cdk():
    import subprocess
    import sys

    code = "import sys, ray_llm_eks.cdk8s_charts; print(any(m.startswith('aws_cdk') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False"


def test_ray_llm_serving_is_exported_from_the_constructs_package():
    from ray_llm_eks.constructs import RayLlmServing  # no circular ImportError

    assert RayLlmServing.__module__ == "ray_llm_eks.constructs.serving"


def test_the_import_reader_resolves_relative_imports():
    names = imports_of(PACKAGE / "cdk8s_charts" / "pod_templates.py")
    assert {"ray_llm_eks.base.scaling", "ray_llm_eks.base.serving.ServingSpec", "cdk8s_plus_35.k8s"} <= names


@pytest.mark.parametrize("path", sorted(folder_imports("verification")) + sorted(folder_imports("bench"))
                         + sorted(folder_imports("teardown")))
def test_the_in_cluster_programs_import_only_the_standard_library_and_themselves(path):
    """The gate, the bench and the teardown guard run in the cluster from a ConfigMap, with the
    serving image's Python: nothing else exists there (the bench Job installs AIPerf, which it runs
    as a program). The guard is one file (``teardown/guard.py``) and imports nothing of its own.

    Relative imports only, so each package works under the name it is mounted as
    (``rayllmeks_gate``, ``rayllmeks_bench``). The exceptions, each imported inside the one function
    that needs it: ``compare`` draws with matplotlib, which the in-cluster run never calls; and
    ``publish`` puts TransportVerified with boto3, which the serving image carries (Ray's base
    image) and only continuous verification (``--publish``) calls.
    """
    lazy = {"bench/compare.py": ("matplotlib",), "verification/publish.py": ("boto3", "botocore")}
    import sys

    source = PACKAGE / path
    tree = ast.parse(source.read_text())
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if path in lazy and id(node) not in top_level and (
                isinstance(node, ast.Import) and all(a.name.split(".")[0] in lazy[path] for a in node.names)
                or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in lazy[path]):
            continue
        if isinstance(node, ast.ImportFrom) and node.level:
            continue
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) else [])
        for module in modules:
            root = (module or "").split(".")[0]
            assert root == "__future__" or root in sys.stdlib_module_names, f"{path} imports {module}"


def test_the_wire_contract_is_one_self_contained_file():
    """``base/wire.py`` travels in the gate's ConfigMap beside the gate's modules (``bundle.SHARED``)
    and is imported there as ``rayllmeks_gate.wire``: the standard library only, nothing relative."""
    import sys

    from ray_llm_eks.verification import bundle

    source = PACKAGE / "base" / "wire.py"
    assert source in bundle.SHARED
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert not node.level, f"wire.py imports relatively: from {'.' * node.level}{node.module or ''}"
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for module in modules:
            root = module.split(".")[0]
            assert root == "__future__" or root in sys.stdlib_module_names, f"wire.py imports {module}"


def circles(folder: str, package: Path = PACKAGE) -> list[str]:
    """Each import circle among the modules of ``folder`` (``a -> b -> a``), by every import the
    source writes: inside a function, or under ``if TYPE_CHECKING:``, counts too."""
    modules = {f"ray_llm_eks.{folder}.{p.stem}": p for p in sorted((package / folder).glob("*.py"))
               if p.name != "__init__.py"}
    graph = {module: imports_of(path, package) & set(modules) for module, path in modules.items()}
    found: list[str] = []

    def visit(module: str, trail: tuple[str, ...]) -> None:
        for target in sorted(graph[module]):
            if target in trail:
                found.append(" -> ".join((*trail[trail.index(target):], target)))
            else:
                visit(target, (*trail, target))

    for module in sorted(modules):
        visit(module, (module,))
    return sorted(set(found))


@pytest.mark.parametrize("folder", ["base", "cdk8s_charts", "constructs", "verification", "bench"])
def test_no_module_of_a_tier_imports_itself_in_a_circle(folder):
    """No module imports one that imports it back, even lazily inside a function or for typing only.
    pod_templates and gcs_redis once did in the charts; in the base layer cost and spend reached
    deployment for ``Specs``, which imported them back (issue 39: ``Specs`` now lives in
    ``base/specs.py``, and the hourly cap, which prices ``Specs``, in ``base/composition.py``)."""
    assert circles(folder) == []


def test_the_circle_finder_finds_a_circle(tmp_path):
    folder = tmp_path / "ray_llm_eks" / "loop"
    folder.mkdir(parents=True)
    (folder / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (folder / "b.py").write_text("def f():\n    from . import c\n")
    (folder / "c.py").write_text("from .a import A\n")
    assert circles("loop", tmp_path / "ray_llm_eks") == ["ray_llm_eks.loop.a -> ray_llm_eks.loop.b -> ray_llm_eks.loop.c -> ray_llm_eks.loop.a",
                               "ray_llm_eks.loop.b -> ray_llm_eks.loop.c -> ray_llm_eks.loop.a -> ray_llm_eks.loop.b",
                               "ray_llm_eks.loop.c -> ray_llm_eks.loop.a -> ray_llm_eks.loop.b -> ray_llm_eks.loop.c"]


IN_CLUSTER_SIBLINGS = {"bench": {"verification"}}
"""The in-cluster programs share a tier; the one import across it allowed: the bench reads
utilization with the gate's modules, which its ConfigMap carries beside its own (``bench.bundle.SHARED``).
What the gate and the bench both use (the wire contract, the histogram quantile) sits in the base layer."""


@pytest.mark.parametrize("program", ["verification", "bench", "teardown"])
def test_an_in_cluster_program_imports_no_sibling_program(program):
    siblings = {"verification", "bench", "teardown"} - {program} - IN_CLUSTER_SIBLINGS.get(program, set())
    for path, names in folder_imports(program).items():
        assert not _uses(names, tuple(f"ray_llm_eks.{s}" for s in sorted(siblings))), path


def test_the_twin_sits_on_top_and_nothing_below_imports_it():
    """The local twin (``make twin``) renders through the application tier; no tier below may need it."""
    for folder in ("base", "constructs", "cdk8s_charts", "verification", "bench"):
        for path, names in folder_imports(folder).items():
            assert not _uses(names, ("ray_llm_eks.twin",)), path


@pytest.mark.parametrize("module", ["tiny_model.py", "netns.py", "kube_api.py", "cluster.py", "twin_profile.py"])
def test_the_twins_runtime_parts_need_no_cdk(module):
    """They run the twin; only ``render`` builds the app. ``tiny_model`` runs as a script in the twin's
    own environment, so it imports nothing of the project."""
    names = imports_of(PACKAGE / "twin" / module)
    assert not _uses(names, AWS_LIBRARIES + K8S_LIBRARIES + ("pydantic",)), module
    if module == "tiny_model.py":
        assert not _uses(names, ("ray_llm_eks",)), module


def test_no_folder_of_the_package_has_a_name_test_tools_read_as_tests():
    """RSpec-style tools (and the measurements built on them) skip ``spec/`` and ``test*/`` folders."""
    folders = [p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")]
    assert "base" in folders
    assert not [name for name in folders if name in ("spec", "specs") or name.startswith("test")]


def test_the_base_layer_imports_by_one_path_and_its_classes_have_one_name():
    """The names of an unreleased 0.1.0 are gone (issue 39): the re-export modules at the package
    root, ``spec``, ``models``, ``instance_types`` and ``pricing`` (each was the base layer's
    module under a second name), and the aliases ``DeploymentConfig`` and ``GateConfig``.

    Read from the source, not by importing: an editable install of another checkout (its setuptools
    finder maps ``ray_llm_eks`` to that tree) would still resolve an old path there."""
    import ray_llm_eks
    from ray_llm_eks import config, verification
    from ray_llm_eks.base import deployment, wire

    old = ("spec", "models", "instance_types", "pricing")
    for name in old:
        assert not (PACKAGE / f"{name}.py").exists() and not (PACKAGE / name).exists(), name
    root = PACKAGE.parent
    old_paths = {f"ray_llm_eks.{name}" for name in old}
    for folder in ("ray_llm_eks", "tests", "tools", "examples"):
        for path in sorted((root / folder).rglob("*.py")):
            stale = sorted(n for n in imports_of(path) if ".".join(n.split(".")[:2]) in old_paths)
            assert not stale, f"{path.relative_to(root)} imports {stale}"
    assert ray_llm_eks.Deployment is config.Deployment is deployment.Deployment
    assert verification.GateSettings is wire.GateSettings
    assert not hasattr(config, "DeploymentConfig") and not hasattr(ray_llm_eks, "DeploymentConfig")
    assert not hasattr(verification, "GateConfig")


# The tiers, bottom up. The charts sit above the in-cluster programs because they carry the
# programs' files (the gate's ConfigMap); the AWS constructs above the charts because
# RayLlmServing applies them. The package root holds the application (configuration, stack, CLI,
# plan, preflight).
TIERS = {"base": 0, "verification": 1, "bench": 1, "teardown": 1, "pd": 1, "cdk8s_charts": 2, "constructs": 3, "twin": 4}


def _tier_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "ray_llm_eks" or len(parts) < 2:
        return None
    return TIERS.get(parts[1], 4)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")))
def test_no_module_imports_a_higher_tier(path):
    source = PACKAGE / path
    own = _tier_of(".".join(("ray_llm_eks", *Path(path).with_suffix("").parts)))
    assert own is not None
    higher = sorted(n for n in imports_of(source) if (_tier_of(n) or 0) > own
                    and not n.startswith("ray_llm_eks.__init__"))
    assert not higher, f"{path} (tier {own}) imports {higher}"
