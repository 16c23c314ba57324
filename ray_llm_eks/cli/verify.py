"""``ray-llm-eks verify``: the deployment gate now, through the API server, with the local
configuration's gate settings."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from .common import (ConfigOption, ContextOption, ExitCode, ExpectProviderOption, JsonOption, KubeconfigOption,
                     NamespaceOption, PaceOption, ServiceOption, fail, load, make_console, make_error_console,
                     nothing, parse_pace)
from .tables import print_rows


def verify(
    config: ConfigOption = None,
    as_json: JsonOption = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    service: ServiceOption = None,
    timeout: Annotated[int, typer.Option("--timeout", min=10, help="seconds to wait for the service")] = 300,
    probes: Annotated[int | None, typer.Option("--probes", min=1, max=32, help="default: the deployed gate's")] = None,
    expect_provider: ExpectProviderOption = None,
    pace: PaceOption = None,
) -> None:
    """Run the deployment gate now, through the API server, with the local configuration's gate settings.

    Read-only but for one object: unlike the gate Job after a deploy, it never deletes a stale
    RayCluster. Probes go through the API server's proxy, so their latencies include it (the
    Job's do not), and for the run a NetworkPolicy admits the API server's addresses to the
    probed ports (deleted at the end; ``verification/api_proxy.py``). A composed app calls the
    same function, :func:`ray_llm_eks.verify.verify_deployment`.

    The settings are the ones the deploy of --config renders; the cluster's copy must match them
    (a missing or different copy is refused, naming what differs), so a ConfigMap planted in the
    cluster cannot relax a check or open the API-proxy policy to other ports.

    Exit codes: 0 pass, 1 fail (or the cluster's settings missing or different), 2 bad --config,
    3 no cluster access.
    """
    from ..verification.kube import ApiError, NoClusterAccess
    from ..verify import verify_deployment

    deployment = load(config, as_json)
    log = (lambda message: None) if as_json else (lambda message: make_error_console().print(f"[dim]{escape(message)}[/]"))
    try:
        with make_error_console().status("verifying (waiting for the service, then probing)", spinner="dots") \
                if not as_json else nothing():
            report = verify_deployment(deployment, kubeconfig=kubeconfig, context=context, namespace=namespace,
                                       service=service, timeout_s=timeout, probes=probes,
                                       expected_provider=expect_provider, pace=parse_pace(pace, as_json), log=log)
    except NoClusterAccess as error:
        fail(ExitCode.NO_CREDENTIALS, f"no access to the cluster: {error}", as_json)
    except (LookupError, ApiError) as error:
        fail(ExitCode.CHECK_FAILED, str(error), as_json)
    except ValueError as error:  # settings this version cannot read (a newer deploy), or not JSON
        fail(ExitCode.CHECK_FAILED, f"cannot use the gate settings found in the cluster: {error}", as_json)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_gate_report(report.to_json())
    raise typer.Exit(int(ExitCode.OK if report.verdict == "pass" else ExitCode.CHECK_FAILED))


def _print_gate_report(report: dict[str, Any]) -> None:
    console = make_console()
    verdict = "[bold green]PASS[/]" if report["verdict"] == "pass" else "[bold red]FAIL[/]"
    console.print(f"gate {verdict}: {report['namespace']}/{report['ray_service']} ({report['topology']}), "
                  f"{report['duration_s']} s")
    probes = report.get("probes") or {}
    kv = report.get("kv") or {}
    transport = report.get("transport") or {}
    rows = [
        ("probes ok", f"{probes.get('ok')}/{probes.get('count')}" if probes else "-"),
        ("TTFT p50 / e2e p50", f"{probes.get('ttft_ms_p50')} ms / {probes.get('e2e_ms_p50')} ms" if probes else "-"),
        ("NIXL backend / provider", f"{transport.get('backend')} / {transport.get('provider')}" if transport else "-"),
        ("KV bytes predicted", str(kv.get("predicted_bytes", "-"))),
        ("EFA bytes moved", f"{kv.get('efa_moved_bytes', '-')} ({kv.get('efa_fraction_of_predicted', '-')} of predicted)"),
        ("NIXL bytes / mean transfer", f"{(kv.get('nixl') or {}).get('bytes_transferred', '-')} / "
                                       f"{(kv.get('nixl') or {}).get('mean_xfer_time_ms', '-')} ms"),
    ]
    print_rows(console, rows)
    for reason in report["reasons"]:
        console.print(f"[red]-[/] {escape(reason)}")
    for warning in report["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
