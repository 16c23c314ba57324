"""Each way the KV path can silently go wrong, run for real on the twin: the gate fails and says why.

Every trap is a change a deploy could make (the UCX backend, ``FI_PROVIDER=efa`` on a node
without the device, an image whose LIBFABRIC plugin cannot load libfabric, a node whose network
never came up, a worker lost mid-run) applied to the healthy twin, and every one must fail the
gate with its root cause in the first reason a person reads.

The traps that need the healthy deployment (a planted counter reader, a worker lost) run first, on
the deployment the module before left running (not sent again: ``TwinRun.use``); the traps that
deploy a config of their own follow, each over the last, and the healthy deployment is restored
once, after the module.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from helpers.twin import capture
from ray_llm_eks.twin import netns, twin_profile
from ray_llm_eks.verification import rollout

pytestmark = [pytest.mark.twin, pytest.mark.faults]


@pytest.fixture(scope="module")
def healthy(twin):
    """The healthy deployment, running (the module before left it so); restored after the traps.

    A failed trap's replicas go on printing until they stop, even after Serve reports DEPLOY_FAILED
    (seen: the prefill engine's ``createBackend`` error 6 s after it), and the gate reads the worker
    lines from the deployment's time less ``LOG_SINCE_MARGIN_SECONDS`` (clock skew): a restore sent
    while they print, or within that margin after, leaves a trap's error in the next gates' window
    (the drills' gates then failed for 12 minutes). So the restore removes the trap's application,
    which waits until its replicas have stopped, and is sent once the margin has passed."""
    twin.use("disaggregated")
    yield twin
    twin.twin.remove_applications()
    time.sleep(rollout.LOG_SINCE_MARGIN_SECONDS)
    twin.use("disaggregated")


def legs(config):
    args = config["applications"][0]["args"]
    return [args["prefill_config"], args["decode_config"]]


def with_env(twin, env: dict[str, str]):
    config = copy.deepcopy(twin.deployments["disaggregated"].serve_config)
    for leg in legs(config):
        leg.setdefault("runtime_env", {}).setdefault("env_vars", {}).update(env)
    return config


def trap(twin, config, name: str, **gate_overrides):
    """Deploy ``config`` (the Serve app may fail to start: that is part of some traps), run the gate,
    keep the worker logs as fixtures, and return the gate's result."""
    twin.use("disaggregated", config, require_running=False)
    # The trap is what was deployed: the gate compares Ray's running config with it.
    settings = twin.settings("disaggregated", **{"deadline_seconds": 300.0,
                                                 "serve_args": config["applications"][0]["args"], **gate_overrides})
    result = twin.gate(settings)
    for role in ("prefill", "decode"):
        capture(f"logs/trap-{name}-{role}.log", twin.twin.node_logs[role].text(twin.deployed_at))
    print(f"\n{name}: {result.reasons}")
    return result


def test_a_planted_counter_reader(healthy):
    """Pods with the readers' labels beside the DaemonSet's (the twin's API stand-in lists them with
    the real readers): one made by hand is ignored and named, one claiming the DaemonSet's uid on a
    node that has its reader fails that node. Neither is read, so neither needs to answer."""
    api, settings = healthy.api, healthy.settings("disaggregated", deadline_seconds=300.0)
    selector = healthy.deployments["disaggregated"].gate_settings["efa_counter_selector"]
    decode = healthy.twin.node_name("decode")
    address = healthy.deployments["disaggregated"].nodes["decode"].address
    try:
        api.add_counter_pod("efa-counters-by-hand", selector, decode, address, controller_uid=None)
        ignored = healthy.gate(settings)
        print(f"\nreader by hand: {ignored.verdict} {ignored.reasons} {ignored.report.get('warnings')}")
        assert ignored.verdict == "pass", ignored.reasons
        assert any("efa-counters-by-hand on " + decode in w for w in ignored.report["warnings"])
        api.add_counter_pod("ray-llm-efa-counters-forged", selector, decode, address)
        doubled = healthy.gate(settings)
        print(f"\nforged reader: {doubled.reasons}")
        assert doubled.verdict == "fail"
        assert doubled.reasons[0].startswith(f"node {decode} has 2 EFA counter readers controlled by DaemonSet"), \
            doubled.reasons
        assert "ray-llm-efa-counters-forged" in doubled.reasons[0]
    finally:
        api.remove_pod("efa-counters-by-hand")
        api.remove_pod("ray-llm-efa-counters-forged")


def test_a_worker_lost_during_the_probes(healthy):
    """The prefill engine is killed once the gate starts probing: a failed probe or vLLM's
    failed-transfer counter must fail the gate."""
    settings = healthy.settings("disaggregated", probes=6, deadline_seconds=300.0)
    api = healthy.api
    selector = "ray-llm-eks/component=efa-counters"
    started = time.time()

    def kill_when_probing() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(t >= started and selector in urllib.parse.unquote(path) for t, _, path in list(api.requests)):
                time.sleep(3.0)  # the counters and metrics reads, then the first probes
                killed = netns.kill_namespace_processes(healthy.network.namespace("prefill"), match="EngineCore")
                print(f"\nkilled {killed} prefill engine process(es)")
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_when_probing, daemon=True)
    killer.start()
    result = healthy.gate(settings)
    killer.join(5)
    for role in ("prefill", "decode"):
        capture(f"logs/trap-worker-lost-{role}.log", healthy.twin.node_logs[role].text(started))
    print(f"\nworker lost: {result.reasons}")
    assert result.verdict == "fail"
    assert any("probe" in r and "failed" in r for r in result.reasons) or \
        any("failed NIXL transfer" in r for r in result.reasons), result.reasons


def test_ucx_backend(healthy):
    config = copy.deepcopy(healthy.deployments["disaggregated"].serve_config)
    for leg in legs(config):
        leg["engine_kwargs"]["kv_transfer_config"]["kv_connector_extra_config"]["backends"] = ["UCX"]
    result = trap(healthy, config, "ucx")
    assert result.verdict == "fail"
    assert "UCX" in result.reasons[0], result.reasons
    # Between namespaces of one host UCX picks shared memory: the links carry less than the gate's share.
    kv = result.report.get("kv") or {}
    if kv.get("efa_fraction_of_predicted") is not None:
        assert kv["efa_fraction_of_predicted"] < kv["min_fraction"], kv


def test_efa_provider_without_a_device(healthy):
    # The engines cannot start: the app fails at the first failed start, not after Serve's retries.
    config = twin_profile.failing_at_first_start(with_env(healthy, {"FI_PROVIDER": "efa"}))
    result = trap(healthy, config, "efa-without-device")
    assert result.verdict == "fail"
    assert "fi_getinfo" in result.reasons[0] or "no EFA device" in result.reasons[0], result.reasons


def test_libfabric_plugin_cannot_load_libfabric(healthy):
    without = ":".join(p for p in healthy.environment.library_path.split(":") if "mpich" not in p)
    config = twin_profile.failing_at_first_start(with_env(healthy, {"LD_LIBRARY_PATH": without}))
    result = trap(healthy, config, "no-libfabric")
    assert result.verdict == "fail"
    assert "libfabric.so.1" in result.reasons[0], result.reasons


def test_a_node_with_loopback_only(healthy):
    """NIXL's LIBFABRIC backend on a host with no link: what a worker whose network never came up
    prints, classified by ``verify-logs`` (the host cannot join Ray, so the gate never sees it)."""
    node = healthy.deployments["disaggregated"].nodes["decode"]
    script = ("from nixl._api import nixl_agent, nixl_agent_config\n"
              "nixl_agent('lonely', nixl_agent_config(backends=['LIBFABRIC']))\n")
    env = {k: v for k, v in node.env.items() if k in ("FI_PROVIDER", "LD_LIBRARY_PATH", "NIXL_LOG_LEVEL")}
    result = subprocess.run(healthy.network.exec_prefix("lonely") + [
        "env", "-i", *(f"{k}={v}" for k, v in env.items()), str(healthy.environment.venv / "bin" / "python"), "-c",
        script], capture_output=True, text=True, timeout=120)
    log = result.stdout + result.stderr
    capture("logs/trap-loopback-only.log", log)
    path = healthy.workdir / "lonely.log"
    path.write_text(log)
    verdict = subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", "verify-logs", "--expect-provider", "tcp",
                              str(path)], capture_output=True, text=True, timeout=60)
    print(f"\nloopback only: {verdict.stdout[-1500:]}")
    assert verdict.returncode == 1, verdict.stdout + verdict.stderr
    assert "rail" in verdict.stdout.lower() or "network device" in verdict.stdout.lower(), verdict.stdout
