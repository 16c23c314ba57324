"""``ray-llm-eks drill``: one fault applied to the deployment under light load, and what it cost."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from .common import (ConfigOption, ContextOption, ExitCode, ExpectProviderOption, JsonOption, KubeconfigOption,
                     NamespaceOption, PaceOption, ServiceOption, fail, load, make_console, make_error_console,
                     parse_pace)
from .tables import print_rows


def drill(
    scenario: Annotated[str, typer.Argument(
        metavar="SCENARIO", help="delete-decode-worker, delete-prefill-worker, delete-head or drain-gpu-node")],
    config: ConfigOption = None,
    as_json: JsonOption = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    service: ServiceOption = None,
    interval: Annotated[float, typer.Option("--interval", min=0.1, max=60, help="seconds between the starts of "
                                                                                "the load's requests")] = 1.0,
    timeout: Annotated[int, typer.Option("--timeout", min=60, help="seconds the deployment may take to serve "
                                                                   "again and pass the gate")] = 900,
    cordon_seconds: Annotated[int, typer.Option("--cordon-seconds", min=0, help="drain-gpu-node: uncordon after "
                                                                                "this long")] = 300,
    expect_provider: ExpectProviderOption = None,
    pace: PaceOption = None,
) -> None:
    """Apply one fault to the deployment under light load and measure what it cost.

    One chat completion at a time goes to the endpoint; then the fault: a worker pod or the head pod
    deleted, or the decode worker's node drained (cordon and evictions). Reported: the requests that
    failed, the time to the first success after the outage, the time until the read-only gate
    passes again, and vLLM's weight-load and engine-start figures from the workers that restarted.
    It changes the cluster: it needs a cluster operator's RBAC (docs/verification.md, "Drills").

    Exit codes: 0 the deployment served again and the gate passed, 1 it did not (or the drill could
    not start), 2 bad --config or scenario, 3 no cluster access.
    """
    from ..drill import SCENARIOS, DrillError, drill_deployment
    from ..verification.kube import ApiError, NoClusterAccess

    if scenario not in SCENARIOS:
        fail(ExitCode.CONFIG_ERROR, f"scenario: {scenario!r} is not a drill; accepted: {', '.join(SCENARIOS)}",
             as_json)
    deployment = load(config, as_json)
    log = (lambda message: None) if as_json else (lambda message: make_error_console().print(f"[dim]{escape(message)}[/]"))
    try:
        result = drill_deployment(deployment, scenario, kubeconfig=kubeconfig, context=context, namespace=namespace,
                                  service=service, interval_s=interval, timeout_s=timeout,
                                  cordon_seconds=cordon_seconds, expected_provider=expect_provider,
                                  pace=parse_pace(pace, as_json), log=log)
    except NoClusterAccess as error:
        fail(ExitCode.NO_CREDENTIALS, f"no access to the cluster: {error}", as_json)
    except (LookupError, ApiError, DrillError) as error:
        fail(ExitCode.CHECK_FAILED, str(error), as_json)
    except ValueError as error:
        fail(ExitCode.CHECK_FAILED, f"cannot use the gate settings found in the cluster: {error}", as_json)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        _print_drill(result.to_json())
    raise typer.Exit(int(ExitCode.OK if result.passed else ExitCode.CHECK_FAILED))


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:,.1f} s"


def _print_drill(result: dict[str, Any]) -> None:
    console = make_console()
    passed = result["first_success_s"] is not None and result["gate_pass_s"] is not None
    console.print(f"drill {result['scenario']} on {result['target']}: "
                  + ("[bold green]recovered[/]" if passed else "[bold red]not recovered[/]"))
    reload = result["model_reload_s"]
    rows = [
        ("requests failed", f"{result['failed']} of {result['requests']} (after the fault)"),
        ("first failure after the fault", _seconds(result["first_failure_s"]) if result["first_failure_s"] is not None
         else "none"),
        ("first success after the outage", _seconds(result["first_success_s"])),
        ("replacement pod Ready", _seconds(result["pod_replaced_s"]) if result["pod_replaced_s"] is not None else "-"),
        ("gate passes again", f"{_seconds(result['gate_pass_s'])} ({result['gate_runs']} runs)"),
        ("model reload (vLLM weight load)", _seconds(reload) if reload is not None else "no reload logged"),
    ]
    for reload_row in result["reloads"]:
        rows.append((f"  {reload_row['pod']} ({reload_row['role']})",
                     f"weights {_seconds(reload_row['weights_load_s'])}, engine {_seconds(reload_row['engine_init_s'])}"))
    print_rows(console, rows)
    for error in result["errors"]:
        console.print(f"[red]-[/] {escape(error)}")
    for reason in result["gate_reasons"]:
        console.print(f"[red]gate:[/] {escape(reason)}")
    for note in result["notes"]:
        console.print(f"[dim]{escape(note)}[/]")
