"""checkov and trivy over every option's build (tests/test_checkov.py, tests/test_trivy.py).

Each build is a synthesis the tests already make where one exists (the ``synth`` cache of
tests/helpers/synthesis.py is keyed by configuration and cdk-nag flag, so the same key reuses
it), written out once per session as what a reviewer would scan: the CloudFormation template,
the rendered manifests, and the RayService's head and worker pod templates as Pods (neither
scanner reads the RayService CRD). The scanners run as programs from environments of their own
(``.venv-checkov``, ``.venv-trivy``, made by ``make test``): their pins conflict with this project's.

The figures each scanner reports per build are quoted in docs/threat-model.md, "Scanners", between
the markers below; tests/test_scanner_figures.py asserts them, and with
``RAY_LLM_EKS_UPDATE_SCANNER_FIGURES=1`` (``make scanner-figures``) rewrites that table instead.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
TRIVY = ROOT / ".venv-trivy" / "bin" / "trivy"
DOC = ROOT / "docs" / "threat-model.md"
FIGURES_BEGIN = "<!-- scanner-figures: begin (make scanner-figures) -->"
FIGURES_END = "<!-- scanner-figures: end -->"

GCS = {"serving": {"gcs_fault_tolerance": {"enabled": True}}}
AUTOSCALED = {"prefill": {"min_size": 1, "desired_size": 1, "max_size": 3},
              "decode": {"min_size": 1, "desired_size": 2, "max_size": 4}}
HF_TOKEN = {"model": {"hf_token_secret": "hf/token"}}
SPEND = {"spend": {"monthly_budget_usd": 3000, "max_hourly_usd": 10}}

BUILDS: dict[str, tuple[dict[str, Any] | None, bool]] = {
    # name: (configuration overrides, cdk-nag on), or None: the existing-VPC example app. The
    # nag flags match the tests that synthesize the same configuration, so the synth is shared.
    "default": ({}, True),
    "ipc-lock": ({"serving": {"security_profile": "ipc-lock"}}, False),
    "gcs-fault-tolerance": (GCS, True),
    "autoscaling": (AUTOSCALED, True),
    "hf-token": (HF_TOKEN, False),
    # A client network outside the VPC (10.0.0.0/16): a peered VPC or an on-premises range.
    "internal-nlb": ({"serving": {"endpoint": "internal-nlb", "client_cidrs": ["10.50.0.0/16"]}}, False),
    "existing-vpc": (None, False),
    "kuberay-1.4.0-no-token": ({"serving": {"ray_auth": "disabled"}, "versions": {"kuberay": "1.4.0"}}, True),
    "spend": (SPEND, True),
}
"""Every option that changes what is deployed, one build each (issue 24: scan every option's build)."""


def rayservice_pods(manifest: Path) -> list[dict]:
    (service,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d and d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    groups = [("head", cluster["headGroupSpec"]["template"])]
    groups += [(g["groupName"], g["template"]) for g in cluster["workerGroupSpecs"]]
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{service['metadata']['name']}-{name}", "namespace": service["metadata"]["namespace"],
                          "labels": (template.get("metadata") or {}).get("labels", {})},
             "spec": template["spec"]} for name, template in groups]


def write_build(directory: Path, template: Path, charts) -> list[Path]:
    """The files a scanner reads for one build, under ``directory``."""
    from ray_llm_eks.manifests import write_manifests

    directory.mkdir(parents=True)
    manifests = write_manifests(charts, directory)
    pods = directory / "rayservice-pods.yaml"
    pods.write_text(yaml.safe_dump_all(rayservice_pods(next(m for m in manifests if m.name == "serving-rayservice.yaml"))))
    copied = directory / "template.json"
    copied.write_text(template.read_text())
    return [copied, *manifests, pods]


# --- checkov -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    build: str
    check: str
    resource: str
    """checkov: its resource id; trivy: ``<file>: <resource or message>``."""


def start_checkov(builds: dict[str, list[Path]]) -> subprocess.Popen[str]:
    """One checkov run over every build's files, started (:func:`checkov_reports` waits for it)."""
    files = [f for paths in builds.values() for f in paths]
    return subprocess.Popen([str(CHECKOV), *(a for f in files for a in ("-f", str(f))),
                             "--framework", "cloudformation", "kubernetes", "-o", "json", "--skip-download"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def checkov_reports(run: subprocess.Popen[str], builds: dict[str, list[Path]]) -> dict[str, list[dict]]:
    """The started checkov run's reports, by build."""
    stdout, _ = run.communicate(timeout=600)
    reports = json.loads(stdout)
    reports = reports if isinstance(reports, list) else [reports]
    owner = {str(f): build for build, paths in builds.items() for f in paths}
    by_build: dict[str, list[dict]] = {build: [] for build in builds}
    for report in reports:
        for outcome in ("passed_checks", "failed_checks"):
            for check in report["results"][outcome]:
                by_build[owner[_checkov_file(check, owner)]].append({**check, "outcome": outcome,
                                                                       "check_type": report["check_type"]})
    return by_build


def _checkov_file(check: dict, owner: dict[str, str]) -> str:
    path = check.get("file_abs_path") or check["file_path"]
    if path in owner:
        return path
    (match,) = [f for f in owner if f.endswith(check["file_path"])]
    return match


# --- trivy ---------------------------------------------------------------------------------------

def start_trivy(root: Path, cache: Path) -> subprocess.Popen[str]:
    """``trivy config`` over every build's directory under ``root``, offline (its built-in checks),
    started (:func:`trivy_report` waits for it)."""
    return subprocess.Popen([str(TRIVY), "config", "--format", "json", "--quiet", "--skip-check-update",
                             "--cache-dir", str(cache), str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def trivy_report(run: subprocess.Popen[str]) -> dict:
    stdout, stderr = run.communicate(timeout=600)
    if run.returncode != 0:
        raise RuntimeError(f"trivy failed ({run.returncode}): {stderr[-2000:]}")
    return json.loads(stdout)


def _template_resource(template_text: str, lines: str) -> str:
    """The logical ID of the resource at trivy's ``start-end`` line range in a template."""
    start = int(lines.split("-")[0])
    resources = json.loads(template_text)["Resources"]
    found = ""
    for number, line in enumerate(template_text.splitlines(), 1):
        key = line.strip().split('"')[1] if line.startswith('  "') and line.rstrip().endswith("{") else None
        if key in resources and number <= start:
            found = key
    return found


def trivy_findings(report: dict, root: Path) -> tuple[list[Finding], dict[str, dict[str, int]]]:
    """Failures as findings, and passed/failed per build (trivy's MisconfSummary)."""
    findings, figures = [], {}
    texts: dict[str, str] = {}
    for result in report.get("Results") or []:
        build, _, target = result["Target"].partition("/")
        summary = result.get("MisconfSummary") or {}
        tally = figures.setdefault(build, {"passed": 0, "failed": 0})
        tally["passed"] += summary.get("Successes", 0)
        tally["failed"] += summary.get("Failures", 0)
        for miss in result.get("Misconfigurations") or []:
            if miss.get("Status") != "FAIL":
                continue
            cause = (miss.get("CauseMetadata") or {}).get("Resource") or ""
            if result["Type"] == "cloudformation":
                path, _, lines = cause.rpartition(":")
                if path.endswith(target) and lines.replace("-", "").isdigit():  # a line range, not an id
                    text = texts.setdefault(result["Target"], (root / result["Target"]).read_text())
                    cause = _template_resource(text, lines)
                identity = cause
            else:
                identity = miss["Message"]
            findings.append(Finding(build, miss["ID"], f"{target}: {identity}"))
    return findings, figures


# --- allowlists ----------------------------------------------------------------------------------

def allowed(entries: list[dict], finding: Finding) -> dict | None:
    return next((e for e in entries if e["check"] == finding.check
                 and fnmatch.fnmatchcase(finding.resource, e["resource"])
                 and fnmatch.fnmatchcase(finding.build, e.get("builds", "*"))), None)


def unexplained(entries: list[dict], findings: list[Finding]) -> list[Finding]:
    return sorted({f for f in findings if allowed(entries, f) is None}, key=lambda f: (f.build, f.check, f.resource))


def stale(entries: list[dict], findings: list[Finding]) -> list[dict]:
    return [e for e in entries if not any(allowed([e], f) for f in findings)]


def describe(findings: list[Finding]) -> str:
    return "\n".join(f"{f.build}: {f.check} {f.resource}" for f in findings)




# --- fixtures (registered in tests/conftest.py) ----------------------------------------------------

@pytest.fixture(scope="session")
def scans(scan_inputs, tmp_path_factory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """checkov and trivy, started side by side as soon as the builds are written: whichever test asks
    first waits for its own scanner only, while the other one runs on."""
    for program in (CHECKOV, TRIVY):
        if not program.exists():
            pytest.fail(f"{program} is missing: `make test` creates it (see the Makefile)")
    root, files = scan_inputs
    started = {"checkov": start_checkov(files), "trivy": start_trivy(root, tmp_path_factory.mktemp("trivy-cache"))}
    yield started
    for run in started.values():  # a session that failed before asking for a scan
        if run.poll() is None:
            run.kill()
            run.communicate()


@pytest.fixture(scope="session")
def checkov_scan(scans, scan_inputs) -> dict[str, list[dict]]:
    """Every check checkov ran, by build, each with its ``outcome`` (passed_checks / failed_checks)."""
    return checkov_reports(scans["checkov"], scan_inputs[1])


@pytest.fixture(scope="session")
def trivy_scan(scans, scan_inputs) -> tuple[list[Finding], dict[str, dict[str, int]]]:
    """trivy's failures as findings, and its passed/failed figures by build."""
    return trivy_findings(trivy_report(scans["trivy"]), scan_inputs[0])


def checkov_failures(scan: dict[str, list[dict]]) -> list[Finding]:
    return [Finding(build, c["check_id"], c["resource"]) for build, checks in scan.items()
            for c in checks if c["outcome"] == "failed_checks"]


def checkov_figures(scan: dict[str, list[dict]]) -> dict[str, dict[str, int]]:
    return {build: {"passed": sum(c["outcome"] == "passed_checks" for c in checks),
                    "failed": sum(c["outcome"] == "failed_checks" for c in checks)} for build, checks in scan.items()}


def figures_table(checkov: dict[str, dict[str, int]], trivy: dict[str, dict[str, int]]) -> str:
    """The Markdown table docs/threat-model.md quotes between FIGURES_BEGIN and FIGURES_END."""
    rows = ["| build | checkov passed | checkov failed | trivy passed | trivy failed |",
            "| --- | ---: | ---: | ---: | ---: |"]
    rows += [f"| {build} | {checkov[build]['passed']} | {checkov[build]['failed']} | "
             f"{trivy[build]['passed']} | {trivy[build]['failed']} |" for build in BUILDS]
    return "\n".join(rows)


def quoted_table(text: str) -> str:
    """The table between the markers in the document's text."""
    start, end = text.index(FIGURES_BEGIN) + len(FIGURES_BEGIN), text.index(FIGURES_END)
    return text[start:end].strip()
