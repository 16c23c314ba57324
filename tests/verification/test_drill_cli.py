"""``ray-llm-eks drill``: the fault, the load and the gate from a workstation, through the API server.

The CLI runs in its own process against the loopback fake cluster (tests/verification/fake_cluster.py):
KubeRay replaces a deleted or evicted Ray pod under a new name after a few reads, Serve answers 503
while a role has no Ready pod, a PodDisruptionBudget may refuse evictions (HTTP 429), and a cordoned
node keeps the replacement Pending. The same Drill runs on the real serving stack in
``make test-twin`` (tests/twin/test_twin_under_faults.py); these check what only the CLI does:
the kubeconfig, the API-server proxy and its NetworkPolicy, the Eviction API and the cordon.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import fake_cluster
from fake_cluster import DECODE_NODE, FakeDeployment, kubeconfig_for, run_cli
from helpers.gate import render_deployment

from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)

pytestmark = pytest.mark.integration

PACE = json.dumps(fake_cluster.PACE)
"""Poll and wait times only (``verify.PACE_SETTINGS``); the settings are the local configuration's. The
drill's own reads and retries go at ``poll_seconds`` too (``drill.drill_deployment``)."""


def _drill(fake: FakeDeployment, tmp_path, scenario: str, *extra: str, fail: bool = False, process: bool = False):
    """In this process (``run_cli``), or with ``process`` as the program started on its own."""
    # The settings ConfigMap as the deploy of the default configuration (the CLI's, without --config) applies it.
    rendered = render_deployment(Deployment()).settings_config_map
    fake.apply_config_map(rendered["metadata"]["name"], rendered["metadata"]["labels"], dict(rendered["data"]))
    args = ["drill", scenario, "--json", "--pace", PACE, "--interval", "0.2", "--timeout", "60",
            "--kubeconfig", str(kubeconfig_for(tmp_path, fake.api_url, fail=fail)), *extra]
    done = (subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", *args], capture_output=True, text=True, timeout=180)
            if process else run_cli(*args))
    return done, (json.loads(done.stdout) if done.stdout.strip().startswith("{") else None)


def test_a_deleted_decode_worker_fails_requests_until_its_replacement_serves_and_the_gate_passes(fake, tmp_path):
    old_pod = fake.pod_name(fake.active, "decode")
    done, result = _drill(fake, tmp_path, "delete-decode-worker")
    assert done.returncode == 0, done.stderr or result
    assert result["target"] == old_pod and fake.generation["decode"] == 1
    assert result["failed"] > 0 and result["failed_before_fault"] == 0
    assert "HTTP 503" in " ".join(result["errors"]), result["errors"]
    assert 0 <= result["first_failure_s"] < result["first_success_s"]
    assert result["pod_replaced_s"] is not None and result["gate_pass_s"] >= result["pod_replaced_s"]
    # vLLM's own figures, from the replacement's log since the fault only.
    assert result["reloads"] == [{"pod": fake.pod_name(fake.active, "decode"), "role": "decode",
                                  "weights_load_s": 2.5, "engine_init_s": 4.0, "total_s": 6.5}]
    assert result["model_reload_s"] == 2.5
    # The API server was admitted for the run only.
    assert fake.network_policies == {} and fake.deleted == []


def test_a_deleted_head_is_measured_without_a_replacement_wait(fake, tmp_path):
    done, result = _drill(fake, tmp_path, "delete-head", process=True)
    assert done.returncode == 0, done.stderr or result
    assert result["target"].endswith("-head-x1") and fake.generation == {"head": 1, "prefill": 0, "decode": 0}
    assert result["pod_replaced_s"] is None and result["gate_pass_s"] is not None


def test_a_drain_cordons_evicts_through_the_budget_and_uncordons(fake, tmp_path):
    fake.scenario.evictions_refused = 1
    done, result = _drill(fake, tmp_path, "drain-gpu-node", "--cordon-seconds", "1")
    assert done.returncode == 0, done.stderr or result
    assert result["target"] == DECODE_NODE
    decode_pod = "ray-llm-abcde-decode-worker-d1"
    # kubectl drain's way: the Eviction API, retried while the budget says no; the DaemonSet's pod stays.
    assert fake.evictions == [(decode_pod, 429), (decode_pod, 201)]
    assert result["notes"] == [f"cordoned {DECODE_NODE}", f"evicted inference/{decode_pod}"]
    # One node per leg: the replacement stays Pending until the node is uncordoned.
    assert result["pod_replaced_s"] >= 1 and fake.cordoned == set()
    assert result["first_success_s"] >= 1


def test_no_cluster_access_exits_3(fake, tmp_path):
    done, _ = _drill(fake, tmp_path, "delete-decode-worker", fail=True)
    assert done.returncode == 3, done.stderr
    assert "no access to the cluster" in done.stderr or "no access to the cluster" in done.stdout
    assert fake.generation == {"head": 0, "prefill": 0, "decode": 0}
