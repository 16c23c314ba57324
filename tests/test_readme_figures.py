"""The figures the README's documents state are the suite's and the package's: each is read from the
document and compared with what it counts, so neither is written twice. Since issue 39 the README is
a quick start; the figures it held moved with their sections: the suite's to CONTRIBUTING.md, the
deployment's to docs/deploying.md.

Timings are not asserted here (no wall-clock assertion in the unit tests): each one the README or
the documents its detail moved to states names the command that measured it, which a test checks.
"""

from __future__ import annotations

import re
from pathlib import Path

from ray_llm_eks.bench.agreement import PROMPTS

ROOT = Path(__file__).resolve().parents[1]
WORDS = {word: number for number, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


CONTRIBUTING = "CONTRIBUTING.md"
DEPLOYING = "docs/deploying.md"
TIMED_DOCUMENTS = ("README.md", CONTRIBUTING, "docs/architecture.md", DEPLOYING, "docs/constructs.md")
"""The README and the documents its detail moved to (issue 39): every duration they state names its command."""


def document(name: str) -> str:
    return " ".join((ROOT / name).read_text().split())  # one line: figures wrap anywhere


def stated(pattern: str, name: str) -> int:
    """The number (digits or a word up to twelve) in document ``name``'s one sentence matching
    ``pattern``, whose ``(?P<n>...)`` group is the figure."""
    matches = re.findall(pattern.replace("(?P<n>)", r"(?P<n>\d+|[a-z]+)"), document(name), re.I)
    assert len(matches) == 1, f"{name} states {pattern!r} {len(matches)} times"
    (figure,) = matches
    return int(figure) if figure.isdigit() else WORDS[figure.lower()]


def test_the_battery_of_bad_configurations_is_the_size_the_readme_says():
    from test_one_validation import BAD_CONFIGS, CONSTRUCT_CASES

    assert stated(r"One battery of (?P<n>) bad configurations", CONTRIBUTING) == len(BAD_CONFIGS)
    assert stated(r"\((?P<n>) of them also through the equivalent construct call", CONTRIBUTING) == len(CONSTRUCT_CASES)


def test_the_consumer_apps_are_as_many_as_the_readme_says():
    from base.test_composition import COMBINATIONS

    assert stated(r"consumer apps on (?P<n>) instance-type and tensor-parallel combinations", CONTRIBUTING) == \
        len(COMBINATIONS)


def test_the_agreement_prompts_are_as_many_as_the_readme_says():
    assert stated(r"greedy completions of (?P<n>) fixed prompts", DEPLOYING) == len(PROMPTS)


def test_the_stack_has_the_alarms_the_readme_counts(default):
    assert stated(r"sends (?P<n>) alarms to one SNS topic", DEPLOYING) == len(default.resources("AWS::CloudWatch::Alarm"))


TIMED = re.compile(r"\b(?:\d+ min(?: \d+ s)?\b|\d+ s\b|(?:under|about|at most) (?:a|an|one|two|three|four|five|"
                   r"ten|\d+) (?:seconds?|minutes?|hours?)\b)")
"""A duration a document states: ``2 min 46 s``, ``under a minute``, ``about ten minutes``."""
MEASURED = re.compile(r"measured with `(?P<command>[^`]+)`|an estimate")


def timings(name: str) -> list[tuple[str, str]]:
    """(duration, its sentence) for every duration document ``name`` states."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", (ROOT / name).read_text())]
    sentences = [s for p in paragraphs for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(\[])", p)]
    return [(match.group(0), sentence) for sentence in sentences for match in TIMED.finditer(sentence)]


def test_each_timing_in_the_readme_and_its_documents_names_the_command_that_measured_it():
    """Or says it is an estimate. Timings are not asserted (they depend on the machine); what
    measured them is written next to them, so a reader can run it again."""
    found = [timing for name in TIMED_DOCUMENTS for timing in timings(name)]
    assert len(found) >= 3, found
    for duration, sentence in found:
        assert MEASURED.search(sentence), f"{duration!r} names no command: {sentence}"
    commands = {m["command"] for _, sentence in found for m in MEASURED.finditer(sentence) if m["command"]}
    assert {"time make bootstrap", "/usr/bin/time make test", "/usr/bin/time -v"} <= commands, commands


PLAN_PRICE_ROW = re.compile(r"\| `(?P<command>ray-llm-eks plan --config (?P<config>examples/benchmark/\w+\.yaml))` "
                            r"\| (?P<cloudwatch>1 dashboard, \d+ alarms, \d+ custom metrics) \| \$(?P<hourly>\d+\.\d{4}) \|")


def test_the_benchmark_doc_quotes_plan_s_prices_of_both_topologies():
    """docs/benchmark.md's table of the two example deployments' hourly costs: each row's command,
    run as a user types it, prints that CloudWatch line and that total (``--json`` for the figures)."""
    import json

    from typer.testing import CliRunner

    from ray_llm_eks import cli

    doc = (ROOT / "docs" / "benchmark.md").read_text()
    rows = [m.groupdict() for m in PLAN_PRICE_ROW.finditer(doc)]
    assert [Path(r["config"]).stem for r in rows] == ["disaggregated", "colocated"]
    for row in rows:
        result = CliRunner().invoke(cli.app, [*row["command"].split()[1:], "--json"])
        assert result.exit_code == 0, result.output
        plan = json.loads(result.stdout)
        assert f"{plan['hourly_cost_usd']:.4f}" == row["hourly"], row
        (cloudwatch,) = [line["item"] for line in plan["cost_lines"] if line["item"].startswith("CloudWatch")]
        assert cloudwatch == f"CloudWatch: {row['cloudwatch']}"
        assert f"(price table as of {plan['price_table_as_of']};" in " ".join(doc.split())
    prices = [float(r["hourly"]) for r in rows]
    assert f"${prices[0] - prices[1]:.4f} an hour" in " ".join(doc.split())
