"""The ``ray-llm-eks`` command line: ``plan`` (no AWS calls), ``preflight`` (read-only AWS checks),
``verify`` (the deployment gate against the current kubeconfig), ``drill`` (a fault under light
load, measured), ``verify-logs`` (its log classifier on saved worker logs), ``bench`` (AIPerf
against an endpoint, priced by ``plan``), ``compare`` (bench runs ranked, and the decision: trial,
wait or reject), ``twin`` (the serving app on this machine) and ``render`` (the Kubernetes objects
for a GitOps tool).

One module per command, and this one builds the app and adds each, as KubeRay's kubectl plugin
does (ray-project/kuberay ``kubectl-plugin/pkg/cmd/ray.go``, ``NewRayCommand``: one package per
command, the root adds them); ``common`` holds the options and exits they share. A command module
imports what it needs inside the command: importing this package, and ``--help``, load neither
jsii nor aws_cdk/cdk8s/constructs (so start no Node); only ``render`` (a synth) and
``bench --emit-job`` (a cdk8s chart) do, when they run.

Exit codes (also in ``docs/plan.md`` and ``docs/verification.md``):

====  ==========================================================================================
 0    success: the plan fits / every preflight check passed
 1    the model does not fit in GPU memory (plan; ``make synth`` refuses the same file with the
      same message) / at least one check failed (preflight)
 2    the configuration cannot be used: invalid file or values (the same refusals and messages
      as ``make synth``), or an instance type the price table cannot price in the region (a
      region without any prices is no error: plan prints its other figures, the price unknown)
 1    verify: the gate failed / drill: the deployment did not serve again or the gate did not pass
      / verify-logs: the logs do not prove LIBFABRIC on the expected
      provider (``--expect-provider``, default efa) / bench: the tokenizer does not load, or AIPerf
      failed or wrote nothing readable (AIPerf's reason first) / compare: the decision is ``wait``
 2    verify-logs: a log file cannot be read
 2    bench, compare: bad flags or run directories (the message names the flag and what is accepted)
 2    drill: not a scenario
 3    preflight: no usable AWS credentials / verify, drill: no access to the cluster
 4    preflight only: AWS cannot be reached
====  ==========================================================================================
"""

from __future__ import annotations

from typing import Annotated

import typer

from . import bench, compare, drill, plan, preflight, render, twin, verify, verify_logs

app = typer.Typer(
    name="ray-llm-eks",
    help="Plan, check and verify a disaggregated Ray Serve LLM deployment on Amazon EKS.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's own help layout: an option name longer than its column moves the help text to the
    # next line instead of being cut (typer's rich panels cut it, `--price-per-mil…` at 80
    # columns), and the text wraps at the terminal's width, at most 80 columns.
    rich_markup_mode=None,
)


def package_version() -> str:
    """The installed distribution's version; the package's own constant when run from a checkout
    that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray-llm-eks")
    except PackageNotFoundError:
        from .. import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ray-llm-eks {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    pass


# In the order `--help` lists them, each with the line it shows there (click would cut the
# docstring's first sentence to fit, with "...").
app.command(short_help="Memory, KV transfer, cold start and cost; no AWS calls.")(plan.plan)
app.command(short_help="Read-only AWS checks of the target account and region.")(preflight.preflight)
app.command(short_help="Run the deployment gate now, through the API server.")(verify.verify)
app.command(short_help="Apply one fault under light load; measure what it cost.")(drill.drill)
app.command("verify-logs", short_help="The gate's log classifier on saved worker logs.")(verify_logs.verify_logs)
app.command(short_help="AIPerf against an endpoint; cost per accepted response.")(bench.bench)
app.command(short_help="Rank bench runs per dollar; decide trial, wait or reject.")(compare.compare)
app.command(short_help="The serving app on this machine, then the gate.")(twin.twin)
app.command(short_help="Write the Kubernetes objects for a GitOps tool.")(render.render)

def main() -> None:
    """Console-script entry point (``ray-llm-eks``)."""
    app()
