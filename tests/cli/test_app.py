"""The app (``cli/__init__.py``): its commands, ``--version``, help that names every option whole at
80 columns, and startup that loads no CDK library (so starts no Node) where no synth is needed."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import typer

import ray_llm_eks
from ray_llm_eks import cli
from ray_llm_eks.cli import app

from .test_verify_logs import EFA_LOG

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUNS = ROOT / "tests" / "data" / "bench" / "runs"
CDK_LIBRARIES = ("aws_cdk", "jsii", "cdk8s", "cdk8s_plus_35", "constructs", "cdk_nag")
"""jsii's runtime and the libraries built on it: importing any of them starts Node."""
COMMANDS = typer.main.get_command(app)


def _without_the_venv_on_path() -> dict[str, str]:
    """PATH as a shell has it without the virtualenv activated: the Node found there (if any) is the
    one jsii would start and warn about. PYTHONPATH: this checkout's package, as the test process has it."""
    python_path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": python_path}


def test_main_exists_and_shows_both_commands(runner):
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "plan" in result.output and "preflight" in result.output
    assert callable(cli.main)


def test_version_is_the_installed_distributions_and_the_packages_own(runner, monkeypatch):
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"ray-llm-eks {importlib.metadata.version('ray-llm-eks')}\n"

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    # A checkout on PYTHONPATH that was never installed: the package's constant, the same version.
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"ray-llm-eks {ray_llm_eks.__version__}\n" == f"ray-llm-eks {declared}\n"


@pytest.mark.parametrize("name", [None, *COMMANDS.commands])
def test_help_at_80_columns_names_every_option_whole(runner, name):
    command = COMMANDS if name is None else COMMANDS.commands[name]
    result = runner.invoke(app, [*([name] if name else []), "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    too_wide = [line for line in result.output.splitlines() if len(line) > 80]
    assert not too_wide, too_wide
    words = set(result.output.replace(",", " ").split())
    declared = [flag for param in command.params if param.param_type_name == "option" and not param.hidden
                for flag in (*param.opts, *param.secondary_opts)]
    assert declared
    missing = [flag for flag in [*declared, "--help"] if flag not in words]
    assert not missing, (missing, result.output)
    if name is None:
        assert set(COMMANDS.commands) <= words


@pytest.mark.integration
def test_verify_logs_help_as_typed_starts_no_node():
    """The console script as a user runs it without the virtualenv on PATH (the Node 20 on
    /usr/bin/node printed jsii's 11-line end-of-life banner before any command ran)."""
    done = subprocess.run([sys.executable, "-X", "importtime", str(BIN / "ray-llm-eks"), "verify-logs", "--help"],
                          capture_output=True, text=True, env=_without_the_venv_on_path(), timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: ray-llm-eks verify-logs")
    imported = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "ray_llm_eks.cli.verify_logs" in imported
    assert not [module for module in imported if module.split(".")[0] in CDK_LIBRARIES]
    printed = done.stdout + "".join(line for line in done.stderr.splitlines() if not line.startswith("import time:"))
    assert "Node" not in printed and "end-of-life" not in printed


RUN_WITHOUT_THE_CDK = """
import json, sys
from ray_llm_eks.cli import app
runs = []
for argv in json.loads(sys.argv[1]):
    try:
        app(args=argv, prog_name="ray-llm-eks")
    except SystemExit as exit:
        code = exit.code
    loaded = sorted(name for name in sys.modules if name.split(".")[0] in json.loads(sys.argv[2]))
    runs.append({"argv": argv, "exit_code": code, "loaded": loaded})
with open(sys.argv[3], "w") as out:
    json.dump(runs, out)
"""


@pytest.mark.integration
def test_the_commands_that_need_no_synth_load_no_cdk_library(tmp_path, write_config, no_aws_credentials):
    """Each command's --help, and each command that needs no synth run to its end or to a refusal
    past its configuration, in one interpreter: none loads jsii or a library built on it. (verify
    and drill render the gate's settings with cdk8s when they run, render synthesizes the stack,
    and bench --emit-job renders a Job with cdk8s: only their --help and option refusals are here.)"""
    log = tmp_path / "decode.log"
    log.write_text("\n".join(EFA_LOG) + "\n")
    unpriced = write_config("region: ap-east-2\ncontrol_plane_azs: [ap-east-2a, ap-east-2b]\n"
                            "data_plane_az: ap-east-2a\n")
    runs = [
        ([name, "--help"], 0) for name in COMMANDS.commands
    ] + [
        (["plan", "--json"], 0),
        (["preflight", "--json"], 3),  # no credentials: after loading the configuration and boto3
        (["verify-logs", "--json", str(log)], 0),
        (["bench", "--config", unpriced, "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "run")], 2),
        (["compare", str(RUNS / "disaggregated"), str(RUNS / "colocated"), "--out", str(tmp_path / "report"),
          "--json"], None),
        (["drill", "kill-everything"], 2),
        (["render", "--out", str(tmp_path / "gitops"), "--chart", "kuberay-operator"], 2),
        (["twin", "--topology", "sideways"], 2),
    ]
    report = tmp_path / "runs.json"
    done = subprocess.run([sys.executable, "-c", RUN_WITHOUT_THE_CDK, json.dumps([argv for argv, _ in runs]),
                           json.dumps(CDK_LIBRARIES), str(report)],
                          capture_output=True, text=True, env=_without_the_venv_on_path(), timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    results = json.loads(report.read_text())
    assert [r["argv"] for r in results] == [argv for argv, _ in runs]
    for (argv, expected), result in zip(runs, results):
        if expected is not None:
            assert result["exit_code"] == expected, (argv, result, done.stdout, done.stderr)
        assert result["loaded"] == [], (argv, result)
    # compare decides trial or reject (0) or wait (1) on these runs: tests/bench/test_compare.py says which.
    assert results[-4]["exit_code"] in (0, 1), done.stderr
    assert "Node" not in done.stdout + done.stderr
