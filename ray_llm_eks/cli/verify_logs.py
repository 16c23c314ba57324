"""``ray-llm-eks verify-logs``: the gate's log classifier on saved worker logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .common import ExitCode, ExpectProviderOption, JsonOption, fail, make_console


def verify_logs(
    files: Annotated[list[Path], typer.Argument(
        metavar="LOG", help="saved worker logs (kubectl logs ... > file), one per worker")],
    as_json: JsonOption = False,
    expect_provider: ExpectProviderOption = None,
) -> None:
    """Classify saved worker logs with the gate's classifier: did NIXL run LIBFABRIC on the expected
    provider (efa unless --expect-provider says otherwise), with no fallback and no transfer failure?

    Exit codes: 0 every log proves it, 1 at least one does not, 2 a file cannot be read.
    """
    from ..verification.evidence import EXPECTED_PROVIDER, classify_logs

    provider = expect_provider or EXPECTED_PROVIDER

    logs = {}
    for path in files:
        try:
            # As the gate reads a pod's log (kube.pod_log): bytes decoded, no newline translation.
            logs[str(path)] = path.read_bytes().decode(errors="replace")
        except OSError as error:
            fail(ExitCode.CONFIG_ERROR, f"cannot read {path}: {error.strerror}", as_json)
    result = classify_logs(logs, provider=provider)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        console = make_console()
        for name, found in result["by_source"].items():
            console.print(f"{escape(name)}: backend {found['backend']}, provider {found['provider']}, "
                          f"EFA devices {found['efa_devices']}, transfer failures {sum(found['transfer_failures'].values())}")
        if result["verdict"] == "pass":
            console.print(f"[bold green]PASS[/]: LIBFABRIC on the {escape(provider)} provider, no fallback, "
                          "no transfer failure")
        else:
            console.print("[bold red]FAIL[/]")
            for reason in result["reasons"]:
                console.print(f"[red]-[/] {escape(reason)}")
    raise typer.Exit(int(ExitCode.OK if result["verdict"] == "pass" else ExitCode.CHECK_FAILED))
