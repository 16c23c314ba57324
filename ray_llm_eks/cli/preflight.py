"""``ray-llm-eks preflight``: read-only AWS checks of the account and region a deployment targets.
boto3 is imported when the command runs, never at startup."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

from .common import ConfigOption, ExitCode, JsonOption, fail, load, make_console, make_error_console
from .tables import print_table

if TYPE_CHECKING:
    from ..base.deployment import Deployment
    from ..preflight import PreflightReport


def preflight(
    config: ConfigOption = None,
    as_json: JsonOption = False,
    profile: Annotated[str | None, typer.Option("--profile", help="AWS named profile to use.")] = None,
) -> None:
    """Read-only AWS checks: instance types in the AZ, EFA, vCPU quotas, EKS version, CDK bootstrap."""
    deployment = load(config, as_json)
    import boto3  # imported here so `plan` never needs AWS libraries at startup
    from botocore.exceptions import ProfileNotFound

    from ..preflight import AwsUnreachable, NoCredentials, run_preflight

    try:
        session = boto3.Session(profile_name=profile, region_name=deployment.region)
    except ProfileNotFound as error:
        fail(ExitCode.NO_CREDENTIALS, f"{error}", as_json)
    try:
        if as_json:
            report = run_preflight(deployment, session)
        else:
            report = _run_with_progress(deployment, session)
    except NoCredentials as error:
        fail(ExitCode.NO_CREDENTIALS,
             f"{error}. preflight needs read-only AWS credentials for the target account: set AWS_PROFILE "
             "(or --profile), or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws sso login`", as_json)
    except AwsUnreachable as error:
        fail(ExitCode.AWS_UNREACHABLE, f"{error}. Check the network, any HTTPS proxy, and the region name", as_json)
    if as_json:
        typer.echo(json.dumps(report.summary(), indent=2))
    else:
        _print_report(report)
    raise typer.Exit(int(ExitCode.OK if report.passed else ExitCode.CHECK_FAILED))


def _run_with_progress(deployment: Deployment, session: Any) -> PreflightReport:
    from ..preflight import check_titles, run_preflight

    # Transient: the bar disappears once the results table is ready.
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), console=make_error_console(), transient=True) as progress:
        task = progress.add_task("checking credentials", total=len(check_titles(deployment)))
        started: list[str] = []

        def advance(title: str) -> None:
            if started:
                progress.advance(task)
            started.append(title)
            progress.update(task, description=f"checking {title}")

        report = run_preflight(deployment, session, on_check=advance)
        progress.advance(task)
    return report


def _print_report(report: PreflightReport) -> None:
    console = make_console()
    rows = []
    for result in report.results:
        mark = ("[bold red]FAIL[/]" if not result.passed
                else "[bold yellow]WARN[/]" if result.status.value == "warn" else "[bold green]PASS[/]")
        text = escape(result.detail) if result.passed else f"{escape(result.detail)}\n[yellow]fix:[/] {escape(result.fix)}"
        rows.append([escape(result.title), mark, text])
    print_table(console, f"preflight: account {report.account}, {report.region} ({escape(report.caller_arn)})",
                [("check", False), ("result", False), ("detail / fix", False)], rows, show_lines=True)
    failed = sum(not r.passed for r in report.results)
    if failed:
        console.print(f"[bold red]{failed} of {len(report.results)} checks failed[/]")
    else:
        console.print(f"[bold green]all {len(report.results)} checks passed[/]")
