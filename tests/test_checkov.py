"""checkov 3.3.30 on the default synthesis: the template, every manifest, and the Ray pods.

checkov cannot read the RayService CRD, so its head and worker pod templates are pulled out as
Pods and scanned with the rest. checkov's pins (packaging, boto3, networkx) conflict with this
project's, so it lives in its own environment (``.venv-checkov``, made by ``make test``) and runs
as a program. Every failure must be in ``tests/checkov_allowlist.yaml`` with its reason, and
every allowlist entry must still match a failure.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from ray_llm_eks.manifests import write_manifests

ROOT = Path(__file__).resolve().parents[1]
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
ALLOWLIST = yaml.safe_load((ROOT / "tests" / "checkov_allowlist.yaml").read_text())


def rayservice_pods(manifest: Path) -> list[dict]:
    (service,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d and d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    groups = [("head", cluster["headGroupSpec"]["template"])]
    groups += [(g["groupName"], g["template"]) for g in cluster["workerGroupSpecs"]]
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{service['metadata']['name']}-{name}", "namespace": service["metadata"]["namespace"],
                          "labels": (template.get("metadata") or {}).get("labels", {})},
             "spec": template["spec"]} for name, template in groups]


@pytest.fixture(scope="session")
def scan(default, tmp_path_factory) -> list[dict]:
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: `make test` creates it (see the Makefile)")
    directory = tmp_path_factory.mktemp("checkov")
    manifests = write_manifests(default.stack.serving.charts, directory)
    pods = directory / "rayservice-pods.yaml"
    pods.write_text(yaml.safe_dump_all(rayservice_pods(next(m for m in manifests if m.name == "serving-rayservice.yaml"))))
    template = default.outdir / f"{default.stack.artifact_id}.template.json"
    files = [template, *manifests, pods]
    result = subprocess.run([str(CHECKOV), *(a for f in files for a in ("-f", str(f))),
                             "--framework", "cloudformation", "kubernetes", "-o", "json", "--skip-download"],
                            capture_output=True, text=True, timeout=300)
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, list) else [reports]


def failures(scan: list[dict]) -> list[tuple[str, str]]:
    return [(f["check_id"], f["resource"]) for report in scan for f in report["results"]["failed_checks"]]


def allowed(check: str, resource: str) -> dict | None:
    return next((e for e in ALLOWLIST if e["check"] == check and fnmatch.fnmatchcase(resource, e["resource"])), None)


def test_both_frameworks_and_the_ray_pods_were_scanned(scan):
    assert {r["check_type"] for r in scan} == {"cloudformation", "kubernetes"}
    resources = {f["resource"] for r in scan for f in r["results"]["passed_checks"] + r["results"]["failed_checks"]}
    for pod in ("head", "prefill", "decode"):
        assert f"Pod.inference.ray-llm-{pod}" in resources
    assert any(r.startswith("DaemonSet.inference.") for r in resources)
    assert any(r.startswith("AWS::EKS::Cluster.") for r in resources)


def test_every_failure_is_allowlisted_with_a_reason(scan):
    unexplained = [f for f in failures(scan) if allowed(*f) is None]
    assert unexplained == [], "\n".join(f"{check} {resource}" for check, resource in unexplained)
    assert all(isinstance(entry["reason"], str) and entry["reason"].strip() for entry in ALLOWLIST)


def test_every_allowlist_entry_is_still_needed(scan):
    found = failures(scan)
    stale = [e for e in ALLOWLIST if not any(c == e["check"] and fnmatch.fnmatchcase(r, e["resource"]) for c, r in found)]
    assert stale == []


def test_the_hardening_checks_pass(scan):
    """What this project fixed must stay fixed: no token in the Ray pods, network policies in the
    namespace, the head without capabilities, probes on the EFA counter readers."""
    passed = {(f["check_id"], f["resource"]) for r in scan for f in r["results"]["passed_checks"]}
    assert ("CKV_K8S_38", "Pod.inference.ray-llm-head") in passed  # no service account token
    assert ("CKV_K8S_37", "Pod.inference.ray-llm-head") in passed  # no capabilities
    assert ("CKV_K8S_31", "Pod.inference.ray-llm-head") in passed  # seccomp RuntimeDefault
    assert ("CKV_K8S_8", "DaemonSet.inference.ray-llm-efa-counters") in passed  # liveness probe
