"""What every command shares: the exit codes, the options several commands take, the consoles and
the one way a command fails (one line on stderr, or a JSON object with ``--json``).

Imports nothing of the CDK: ``--help`` and the commands that need no synth load this module, so
what a command needs beyond it is imported inside the command."""

from __future__ import annotations

import json
import re
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from ..base.deployment import Deployment


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1
    CONFIG_ERROR = 2
    NO_CREDENTIALS = 3
    AWS_UNREACHABLE = 4


ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Deployment YAML (the same file `cdk synth -c config=...` takes); "
                                        "default: the reference deployment."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of tables.")]


def _provider(value: str | None) -> str | None:
    """A libfabric provider name as NIXL logs it (``provider=efa``, ``tcp``, ``verbs;ofi_rxm``)."""
    if value is not None and not re.fullmatch(r"[\w;+-]+", value):
        raise typer.BadParameter(f"not a libfabric provider name (got {value!r}); accepted: e.g. efa, tcp")
    return value


KubeconfigOption = Annotated[Path | None, typer.Option("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")]
ContextOption = Annotated[str | None, typer.Option("--context", help="kubeconfig context; default: current")]
NamespaceOption = Annotated[str | None, typer.Option("--namespace", help="default: serving.namespace of --config")]
ServiceOption = Annotated[str | None, typer.Option("--service", help="RayService; default: serving.service_name")]
ExpectProviderOption = Annotated[
    str | None,
    typer.Option("--expect-provider", metavar="PROVIDER", callback=_provider,
                 help="The libfabric provider the worker logs must prove NIXL's LIBFABRIC backend ran on: efa (the "
                      "default; verify: the deployed gate's setting), or e.g. tcp where no EFA device exists and "
                      "libfabric's tcp provider is the intended path (a machine without EFA, the twin)."),
]

PaceOption = Annotated[str | None, typer.Option(
    "--pace", hidden=True,
    help="JSON object of poll and wait times (poll_seconds, metrics_settle_seconds, post_probe_reserve_seconds, "
         "serve_settle_seconds) for a "
         "cluster that answers at once (the loopback tests); nothing that is checked")]


def parse_pace(pace: str | None, as_json: bool) -> dict[str, float] | None:
    if pace is None:
        return None
    try:
        value = json.loads(pace)
        if not isinstance(value, dict) or not all(isinstance(v, (int, float)) for v in value.values()):
            raise ValueError("not an object of numbers")
    except ValueError as error:
        fail(ExitCode.CONFIG_ERROR, f"--pace: {error}", as_json)
    return value


def make_console() -> Console:
    return Console(highlight=False)


def make_error_console() -> Console:
    return Console(stderr=True, highlight=False)


def fail(code: ExitCode, message: str, as_json: bool) -> NoReturn:
    if as_json:
        typer.echo(json.dumps({"error": message, "exit_code": int(code)}, indent=2))
    # Escaped: a message quoting a list ("[us-east-1a, us-east-1b]") is text, not rich markup.
    make_error_console().print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    raise typer.Exit(int(code))


def load(path: Path | None, as_json: bool) -> Deployment:
    """The deployment of ``--config`` (the reference one without it), or exit as ``make synth`` refuses it."""
    from ..config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as error:
        # One validation for synth and plan: the message is the one `make synth` prints.
        fail(ExitCode.CHECK_FAILED if error.does_not_fit else ExitCode.CONFIG_ERROR, str(error), as_json)


class nothing:
    """A context that does nothing (``--json``: no spinner on stderr)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: Any) -> None:
        return None
