"""The README is a quick start a newcomer can follow (issue 39): at most 15,000 bytes, the quick start
first, its configuration a file of the repository that `plan` accepts, and every command it shows one
that exists (a Makefile target, a `ray-llm-eks` command with its options, a file it names)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import typer.main
from typer.testing import CliRunner

from ray_llm_eks.cdk8s_charts import endpoint_command
from ray_llm_eks.cli import app  # a module or a package: its typer app either way
from ray_llm_eks.config import load_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
MAX_BYTES = 15_000


def sections(markdown: str) -> list[tuple[str, str]]:
    """(title, body) of each H2 section, in order (a ``## `` line inside a fenced block is not one)."""
    found: list[tuple[str, list[str]]] = []
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            found.append((line[3:].strip(), []))
        elif found:
            found[-1][1].append(line)
    return [(title, "\n".join(body)) for title, body in found]


def fenced(markdown: str, *languages: str) -> list[str]:
    """The bodies of the fenced blocks in one of ``languages``, indented blocks (in a list) dedented."""
    blocks = []
    for indent, language, body in re.findall(r"^( *)```(\w*)\n(.*?)^\1```", markdown, re.S | re.M):
        if language in languages:
            blocks.append("\n".join(line[len(indent):] for line in body.splitlines()) + "\n")
    return blocks


def command_lines(markdown: str) -> list[str]:
    """Each command of the fenced bash/sh blocks, continuation lines joined, comments dropped."""
    lines = []
    for block in fenced(markdown, "bash", "sh"):
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command, comments=True)
            if words:
                lines.append(words)
    return lines


def makefile_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return {target for names in re.findall(r"^([a-z][\w.-]*(?: +[a-z][\w.-]*)*) *:(?!=)", makefile, re.M)
            for target in names.split()}


def cli_options() -> dict[str, set[str]]:
    """Each command of the ``ray-llm-eks`` app and the option names it takes (``--help`` included)."""
    group = typer.main.get_command(app)
    return {name: {option for param in command.params for option in (*param.opts, *param.secondary_opts)}
           | {"--help"} for name, command in group.commands.items()}


def app_options() -> set[str]:
    """The options of the ``ray-llm-eks`` app itself, before any command (``--version``, ``--help``)."""
    group = typer.main.get_command(app)
    return {option for param in group.params for option in (*param.opts, *param.secondary_opts)} | {"--help"}


def project_arguments(words: list[str]) -> tuple[str, list[str]] | None:
    """("make" or "ray-llm-eks", the arguments) of a command of this project's, else None."""
    if words[0] == "sudo":
        words = words[1:]
    program = words[0].removeprefix(".venv/bin/")
    if program == "make":
        return "make", words[1:]
    if program in ("python", "python3") and words[1:3] == ["-m", "ray_llm_eks.cli"]:
        return "ray-llm-eks", words[3:]
    if program == "ray-llm-eks":
        return "ray-llm-eks", words[1:]
    return None


def checked_command(words: list[str], targets: set[str], commands: dict[str, set[str]]) -> str | None:
    """What is wrong with one command line, or None; lines of other programs are not this test's."""
    if (ours := project_arguments(words)) is None:
        return None
    program, arguments = ours
    if program == "make":
        unknown = [word for word in arguments if "=" not in word and not word.startswith("-")
                   and word not in targets]
        return f"no Makefile target {unknown}" if unknown else None
    name = arguments[0] if arguments else None
    if name in app_options():  # the app's own options: ray-llm-eks --version, --help
        return None
    if name not in commands:
        return f"no ray-llm-eks command {name!r}"
    unknown = [word.split("=", 1)[0] for word in arguments[1:]
               if word.startswith("-") and word.split("=", 1)[0] not in commands[name]]
    return f"ray-llm-eks {name} takes no {unknown}" if unknown else None


def test_the_readme_is_at_most_15_kb():
    assert len(README.read_bytes()) <= MAX_BYTES


def test_the_readme_opens_with_the_quick_start():
    readme = README.read_text()
    (first, body), *_ = sections(readme)
    assert first == "Quick start"
    (configuration,) = fenced(body, "yaml")
    assert configuration == QUICKSTART.read_text()  # the file, as it is
    commands = [" ".join(words) for words in command_lines(body)]
    (copy,) = [c for c in commands if c.startswith("cp examples/quickstart.yaml ")]
    mine = copy.split()[-1]
    assert f"ray-llm-eks plan --config {mine}" in commands
    assert f"make synth CONFIG={mine}" in commands
    assert f"node_modules/.bin/cdk deploy -c config={mine}" in commands
    # The call: what the stack's EndpointCommand output says for this configuration, with its model.
    serving = load_config(QUICKSTART).specs().serving
    url = re.search(r"http://\S+/v1", endpoint_command(serving)).group(0)
    (call,) = [c for c in commands if " curl " in f" {c} "]
    assert f" {url}/chat/completions " in f" {call} "
    assert json.loads(call.split(" -d ", 1)[1])["model"] == serving.model.served_name
    # The namespace the call runs in is the one the configuration names and the client policy opens.
    policy = (ROOT / "examples" / "client-policy.yaml").read_text()
    (namespace,) = serving.service.client_namespaces
    assert f"kubectl -n {namespace} run " in call
    assert f"namespace: {namespace}}}" in policy and "kubectl apply -f examples/client-policy.yaml" in commands


def test_the_quick_start_configuration_plans():
    """``ray-llm-eks plan --config`` as the quick start runs it, on the file the README shows."""
    result = CliRunner().invoke(app, ["plan", "--config", str(QUICKSTART), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["fits"] is True
    assert (plan["model"], plan["topology"], plan["region"]) == ("Qwen/Qwen3.5-9B", "disaggregated", "us-west-2")
    assert [(n["role"], n["instance_type"], n["count"]) for n in plan["nodes"]] == [
        ("system", "m7i.xlarge", 1), ("prefill", "g6.8xlarge", 1), ("decode", "g6.8xlarge", 1)]
    # Unpinned on purpose (no digest can be known offline): plan gives the command for each pin.
    assert set(plan["pin_commands"]) >= {"image.digest", "model.revision"}


def test_the_matcher_finds_each_kind_of_mistake():
    targets, commands = {"synth", "test"}, {"plan": {"--config", "--json", "--help"}}
    assert checked_command(["make", "synth", "CONFIG=a.yaml"], targets, commands) is None
    assert checked_command(["sudo", "make", "twin"], targets, commands) == "no Makefile target ['twin']"
    assert checked_command([".venv/bin/ray-llm-eks", "plan", "--config=a"], targets, commands) is None
    assert checked_command(["ray-llm-eks", "plan", "--jsn"], targets, commands) == "ray-llm-eks plan takes no ['--jsn']"
    assert checked_command(["python", "-m", "ray_llm_eks.cli", "plna"], targets, commands) == \
        "no ray-llm-eks command 'plna'"
    assert checked_command(["kubectl", "apply", "-f", "x"], targets, commands) is None
    assert checked_command(["ray-llm-eks", "--version"], targets, commands) is None
    assert checked_command(["ray-llm-eks", "--versoin"], targets, commands) == "no ray-llm-eks command '--versoin'"


def test_every_command_the_readme_shows_exists():
    targets, commands = makefile_targets(), cli_options()
    assert {"bootstrap", "synth", "test", "twin", "docs"} <= targets
    assert {"plan", "preflight", "verify", "verify-logs", "bench", "compare", "render"} <= set(commands)
    shown = command_lines(README.read_text())
    ours = [words for words in shown if project_arguments(words)]
    assert len(ours) >= 8, ours  # the quick start's and the checks' commands are all read
    problems = {" ".join(words): problem for words in shown
                if (problem := checked_command(words, targets, commands))}
    assert not problems


def test_every_file_the_readme_names_exists():
    """The files its commands and links name (``examples/...``, ``docs/...``): a reader can open each."""
    readme = README.read_text()
    named = set(re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme))
    named |= {word for words in command_lines(readme) for word in words if word.startswith(("examples/", "docs/"))}
    assert {"examples/quickstart.yaml", "examples/client-policy.yaml", "docs/constructs.md"} <= named
    assert not sorted(name for name in named if not (ROOT / name).exists())
