"""``ray-llm-eks compare``: bench runs ranked by accepted responses per dollar, and the decision
(trial, wait or reject)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .bench import with_flags
from .common import ExitCode, JsonOption, fail, make_console


def compare(
    runs: Annotated[list[Path], typer.Argument(
        metavar="RUN_DIR",
        help="Two or more bench run directories (a disaggregated and a colocated deployment, a managed endpoint "
             "priced per token); the first is the reference of the output agreement.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="Report directory: report.md, verdict.json, two PNG plots.")],
    min_gain: Annotated[float, typer.Option("--min-gain", min=0.0, max=0.99,
                                            help="Smallest gain in accepted responses per dollar acted on.")] = 0.05,
    min_attainment: Annotated[float, typer.Option("--min-attainment", min=0.01, max=1.0,
                                                  help="Share of a level's requests that must be accepted for the "
                                                       "level to count (DistServe's goodput goal).")] = 0.9,
    as_json: JsonOption = False,
) -> None:
    """Rank bench runs by accepted responses per dollar, with the break-even against a per-token endpoint,
    and decide: trial, wait or reject (docs/benchmark.md, "The decision").

    Exit codes: 0 trial or reject (a measured decision); 1 wait (an unresolved condition: the report
    lists each with its figures); 2 a run directory or option that cannot be read.
    """
    from ..bench.compare import REPORT_FILE, WAIT, class_line, compare as compare_runs, sensitivity_line
    from ..bench.runner import BenchError

    if len(runs) < 2:
        fail(ExitCode.CONFIG_ERROR, f"RUNS: at least two run directories (got {len(runs)})", as_json)
    try:
        decision = compare_runs(runs, out, min_gain=min_gain, min_attainment=min_attainment)
    except BenchError as error:
        fail(ExitCode.CONFIG_ERROR, with_flags(error), as_json)
    except ImportError as error:
        fail(ExitCode.CONFIG_ERROR, f"the plots need matplotlib: pip install 'ray-llm-eks[bench]' ({error})", as_json)
    if as_json:
        typer.echo(json.dumps(decision, indent=2))
    else:
        ranking = ", ".join(f"{row['run']} {row['responses_per_dollar']:,.0f}" if row["responses_per_dollar"]
                            else f"{row['run']} none" for row in decision["ranking"])
        reasons = "\n".join(f"- {reason['rule']}: {reason['text']}" for reason in decision["reasons"])
        # With per-class figures (a bench with a prefill threshold): each run's classes, and the mix
        # the decision is on (the whole workload, as without classes).
        classes = "" if not decision["mix"] else (
            "by prefill path, at each run's best level:\n"
            + "".join(f"- {class_line(row)}\n" for row in decision["prefill_paths"]) + decision["mix"]["text"] + "\n")
        make_console().print(f"[bold]{escape(decision['decision'])}[/]\n{escape(reasons)}\n"
                             f"accepted responses per dollar: {escape(ranking)}\n"
                             f"{escape(classes)}{escape(sensitivity_line(decision))}\n"
                             f"report: {escape(str(out / REPORT_FILE))}")
    raise typer.Exit(int(ExitCode.CHECK_FAILED if decision["decision"] == WAIT else ExitCode.OK))
