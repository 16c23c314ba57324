"""The twin profile and the twin's Kubernetes API stand-in, offline (part of `make test`).

The twin itself runs in `make test-twin`; here the one transformation from the rendered
deployment to the twin is checked value by value: it changes exactly what its ``CHANGES`` list
says, and nothing else, and what it produces still passes Ray's own schemas.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

from ray_llm_eks.base import wire
from ray_llm_eks.twin import kube_api, render, twin_profile
from ray_llm_eks.twin.run import DEFAULT_CONFIG

ADDRESSES = {"head": "10.77.0.1", "prefill": "10.77.0.2", "decode": "10.77.0.3"}
PATHS = twin_profile.Paths(model="/twin/model", library_path="/twin/lib:/venv/lib/mpich", hf_home="/twin/hf",
                             preload="/twin/lib/libnixl_progress_idle.so")


@pytest.fixture(scope="module")
def rendered():
    return {topology: render.render(DEFAULT_CONFIG, topology) for topology in render.TOPOLOGIES}


@pytest.fixture(scope="module")
def twins(rendered):
    return {topology: twin_profile.twin_deployment(charts[render.RAYSERVICE_CHART], charts[render.VERIFICATION_CHART],
                                                   ADDRESSES, PATHS) for topology, charts in rendered.items()}


def rendered_serve(rendered, topology):
    service = next(o for o in rendered[topology][render.RAYSERVICE_CHART] if o["kind"] == "RayService")
    return yaml.safe_load(service["spec"]["serveConfigV2"]), service


def differences(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            found += differences(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}.{key}")
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def test_the_serve_config_changes_only_what_the_profile_lists(rendered, twins):
    original, _ = rendered_serve(rendered, "disaggregated")
    changed = differences(original, twins["disaggregated"].serve_config)
    expected = []
    for leg in ("decode_config", "prefill_config"):
        base = f".applications[0].args.{leg}"
        # kv_buffer_device is not among them: the twin's g6 render already has the host buffer
        # (the default without GPUDirect RDMA), which the profile sets anyway (next test).
        expected += [f"{base}.accelerator_type", f"{base}.model_loading_config.model_source", f"{base}.placement_group_config.bundles[0].CPU",
                     f"{base}.placement_group_config.bundles[0].GPU"]
    assert sorted(changed) == sorted(expected)
    for leg in ("prefill_config", "decode_config"):
        config = twins["disaggregated"].serve_config["applications"][0]["args"][leg]
        role = leg.split("_")[0]
        assert config["placement_group_config"]["bundles"] == [{"CPU": 1, role: 1}]
        assert config["model_loading_config"]["model_source"] == PATHS.model
        assert config["engine_kwargs"]["kv_transfer_config"]["kv_buffer_device"] == "cpu"
        assert config["engine_kwargs"]["kv_transfer_config"]["kv_connector_extra_config"] == {"backends": ["LIBFABRIC"]}


def test_the_profile_sets_the_host_buffer_even_where_the_render_says_cuda(rendered):
    """A P-series render (GPUDirect RDMA) says cuda; vLLM on the CPU platform accepts only cpu."""
    original, _ = rendered_serve(rendered, "disaggregated")
    for leg in ("prefill_config", "decode_config"):
        original["applications"][0]["args"][leg]["engine_kwargs"]["kv_transfer_config"]["kv_buffer_device"] = "cuda"
    twin = twin_profile.serve_for_cpu(original, PATHS.model)
    for leg in ("prefill_config", "decode_config"):
        assert twin["applications"][0]["args"][leg]["engine_kwargs"]["kv_transfer_config"]["kv_buffer_device"] == "cpu"


def test_the_colocated_twin_has_no_kv_connector_and_cpu_bundles(rendered, twins):
    original, _ = rendered_serve(rendered, "colocated")
    (llm,) = twins["colocated"].serve_config["applications"][0]["args"]["llm_configs"]
    assert "kv_transfer_config" not in llm["engine_kwargs"]
    assert llm["placement_group_config"]["bundles"] == [{"CPU": 1}]
    assert sorted(differences(original, twins["colocated"].serve_config)) == sorted(
        f".applications[0].args.llm_configs[0].{p}" for p in (
            "accelerator_type", "model_loading_config.model_source", "placement_group_config.bundles[0].CPU",
            "placement_group_config.bundles[0].GPU"))


@pytest.mark.parametrize("topology", render.TOPOLOGIES)
def test_the_twins_serve_config_passes_rays_own_schemas(twins, topology):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.schema import ServeDeploySchema

    config = twins[topology].serve_config
    ServeDeploySchema.model_validate(config)
    args = config["applications"][0]["args"]
    for llm in args.get("llm_configs") or [args["prefill_config"], args["decode_config"]]:
        LLMConfig.model_validate(llm)


def test_the_ray_nodes_start_as_kuberay_would_with_the_cpu_changes(rendered, twins):
    _, service = rendered_serve(rendered, "disaggregated")
    groups = {g["groupName"]: g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    twin = twins["disaggregated"]
    head = twin.nodes["head"].ray_start(ADDRESSES["head"])
    assert "--head" in head and "--num-cpus=0" in head and "--num-gpus=0" in head
    for role in ("prefill", "decode"):
        node = twin.nodes[role]
        args = node.ray_start(ADDRESSES["head"])
        assert f"--address={ADDRESSES['head']}:6379" in args and f"--node-ip-address={ADDRESSES[role]}" in args
        assert f'--resources={{"{role}":1}}' in args  # the role resource as rendered, unquoted for no shell
        assert "--num-gpus=0" in args and f"--num-cpus={twin_profile.NODE_CPUS}" in args
        rendered_env = {e["name"]: e["value"] for e in groups[role]["template"]["spec"]["containers"][0]["env"]
                        if "value" in e}
        changed = {k for k in set(rendered_env) | set(node.env) if rendered_env.get(k) != node.env.get(k)}
        assert changed == {"FI_PROVIDER", "HF_HOME", "HF_HUB_CACHE", "LD_LIBRARY_PATH", "LD_PRELOAD", "VLLM_CPU_KVCACHE_SPACE",
                           "VLLM_CPU_OMP_THREADS_BIND", "RAY_metrics_report_interval_ms"}
        assert node.env["RAY_metrics_report_interval_ms"] == str(twin_profile.METRICS_REPORT_INTERVAL_MS) == "2000"
        assert node.env["FI_PROVIDER"] == "tcp" and node.env["NIXL_LOG_LEVEL"] == "INFO"
    assert twin.nodes["prefill"].env["VLLM_CPU_OMP_THREADS_BIND"] != twin.nodes["decode"].env["VLLM_CPU_OMP_THREADS_BIND"]


def test_the_gate_settings_follow_the_profile(rendered, twins):
    original = twin_profile.gate_settings_of(rendered["disaggregated"][render.VERIFICATION_CHART])
    settings = twins["disaggregated"].gate_settings
    assert settings["expected_provider"] == "tcp" and original["expected_provider"] == "efa"
    assert settings["openai_url"] == f"http://{ADDRESSES['head']}:8000"
    # The stand-in's RayService carries the config it submits, as the gate compares them.
    assert json.loads(twins["disaggregated"].rayservice["spec"]["serveConfigV2"]) == twins["disaggregated"].serve_config
    assert settings["serve_args"] == twins["disaggregated"].serve_config["applications"][0]["args"]
    assert settings["worker_env"]["FI_PROVIDER"] == "tcp"
    assert settings["worker_env"] == {k: twins["disaggregated"].nodes["decode"].env[k] for k in original["worker_env"]}
    unchanged = {k for k in original if k not in {"openai_url", "serve_args", "worker_env",
                                                   "expected_provider", "as_deploy_job", "deadline_seconds",
                                                   "poll_seconds", "metrics_settle_seconds"}}
    assert {k: settings[k] for k in unchanged} == {k: original[k] for k in unchanged}
    # The stand-in answers from this machine: the gate reads it every 2 s (the rendered settings leave
    # poll_seconds at the wire contract's default, 10 s); the Serve settle it must wait out stays.
    rendered = wire.GateSettings.from_json(original)
    twin = wire.GateSettings.from_json(settings)
    assert (rendered.poll_seconds, twin.poll_seconds) == (10.0, twin_profile.GATE_POLL_SECONDS) == (10.0, 2.0)
    assert twin.serve_settle_seconds == rendered.serve_settle_seconds
    # The probes' metrics are waited for in the twin's export periods (2 s), as rendered in Ray's (10 s).
    assert (rendered.metrics_settle_seconds, twin.metrics_settle_seconds) == (15.0, 5.0)
    assert twin.metrics_settle_seconds / (twin_profile.METRICS_REPORT_INTERVAL_MS / 1000) \
        > rendered.metrics_settle_seconds / 10.0
    # The planner's figures for the tiny model (2 x 2 layers x 4 KV heads x 64 x 2 bytes), not Qwen's.
    assert settings["kv_bytes_per_token"] == 2048 and settings["kv_bytes_per_sequence"] == 0


def test_every_change_is_listed_once_with_a_reason():
    changes = twin_profile.CHANGES + twin_profile.TRAP_CHANGES
    whats = [what for what, _ in changes]
    assert len(whats) == len(set(whats)) and all(why for _, why in changes)


def test_a_trap_that_cannot_start_fails_at_its_first_failed_start_and_changes_nothing_else(twins):
    """The traps whose engines cannot start (``FI_PROVIDER=efa`` without a device, no libfabric):
    Ray Serve would retry each leg's replica min(20, 3 x 1) times, about 40 s each on the twin,
    before the application is DEPLOY_FAILED; the first failure already logged the root cause."""
    from ray.serve._private.config import DeploymentConfig
    from ray.serve._private.constants import MAX_PER_REPLICA_RETRY_COUNT
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.schema import ServeDeploySchema

    healthy = twins["disaggregated"].serve_config
    trap = twin_profile.failing_at_first_start(healthy)
    assert sorted(differences(healthy, trap)) == [
        f".applications[0].args.{leg}.deployment_config.max_constructor_retry_count"
        for leg in ("decode_config", "prefill_config")]
    assert "max_constructor_retry_count" not in healthy["applications"][0]["args"]["prefill_config"]["deployment_config"]
    ServeDeploySchema.model_validate(trap)
    for leg in ("prefill_config", "decode_config"):
        llm = trap["applications"][0]["args"][leg]
        LLMConfig.model_validate(llm)  # validates deployment_config against Serve's DeploymentConfig
        assert DeploymentConfig(**llm["deployment_config"]).max_constructor_retry_count == 1
        assert llm["deployment_config"]["num_replicas"] == 1
    # What the traps ran with before: Serve's default of 20, capped at 3 per replica.
    assert (DeploymentConfig().max_constructor_retry_count, MAX_PER_REPLICA_RETRY_COUNT) == (20, 3)


# --- the Kubernetes API stand-in ---------------------------------------------------------------

@pytest.fixture()
def api(rendered):
    config_maps = [o for charts in rendered.values() for o in charts[render.VERIFICATION_CHART]
                   if o["kind"] == "ConfigMap" and not o["metadata"]["name"].endswith("-gate-program")]
    _, service = rendered_serve(rendered, "disaggregated")
    lines = [(100.0, "before the deploy"), (200.0, "Backend LIBFABRIC was instantiated")]
    logs = {"pod-a": lambda since: "".join(f"{t} {text}\n" for t, text in lines if since is None or t >= since)}
    stand_in = kube_api.KubeApi(namespace="inference", rayservice=service, config_maps=config_maps, logs=logs)
    url = stand_in.serve("127.0.0.1")
    yield stand_in, url
    stand_in.close()


def call(url, path, token, method="GET", body=None):
    request = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


def test_config_maps_are_listed_by_label_selector_as_the_api_server_does(api):
    stand_in, url = api
    selector = urllib.parse.quote("ray-llm-eks/component=gate-settings,ray-llm-eks/instance=ray-llm")
    items = json.loads(call(url, f"/api/v1/namespaces/inference/configmaps?labelSelector={selector}",
                            stand_in.token))["items"]
    # One settings ConfigMap per topology was rendered, and the state ConfigMap is not among them.
    assert len(items) == 2
    assert {json.loads(i["data"]["gate.json"])["topology"] for i in items} == {"disaggregated", "colocated"}
    other = urllib.parse.quote("ray-llm-eks/component==continuous-verification")
    (state,) = json.loads(call(url, f"/api/v1/namespaces/inference/configmaps?labelSelector={other}",
                               stand_in.token))["items"]
    assert state["metadata"]["name"].endswith("-cv-state")
    none = urllib.parse.quote("ray-llm-eks/instance=another")
    assert json.loads(call(url, f"/api/v1/namespaces/inference/configmaps?labelSelector={none}",
                           stand_in.token))["items"] == []


def test_a_set_based_selector_is_refused_not_ignored():
    with pytest.raises(ValueError):
        kube_api.parse_selector("tier in (a,b)")
    with pytest.raises(ValueError):
        kube_api.parse_selector("a!=b")


def test_pod_logs_honour_since_time_and_calls_need_the_token(api):
    stand_in, url = api
    since = "1970-01-01T00:02:30Z"  # 150 s
    assert call(url, f"/api/v1/namespaces/inference/pods/pod-a/log?sinceTime={since}", stand_in.token) == \
        b"200.0 Backend LIBFABRIC was instantiated\n"
    with pytest.raises(urllib.error.HTTPError) as refused:
        call(url, "/api/v1/namespaces/inference/pods/pod-a/log", "wrong")
    assert refused.value.code == 401


def test_config_map_updates_need_the_current_resource_version(api):
    stand_in, url = api
    name = next(n for n in stand_in.config_maps if n.endswith("-cv-state"))
    path = f"/api/v1/namespaces/inference/configmaps/{name}"
    current = json.loads(call(url, path, stand_in.token))
    updated = json.loads(call(url, path, stand_in.token, "PUT", {**current, "data": {"k": "v"}}))
    assert int(updated["metadata"]["resourceVersion"]) == int(current["metadata"]["resourceVersion"]) + 1
    with pytest.raises(urllib.error.HTTPError) as conflict:
        call(url, path, stand_in.token, "PUT", {**current, "data": {"k": "stale"}})
    assert conflict.value.code == 409


def test_the_twin_s_cleanup_is_not_cut_short_by_a_second_stop_signal():
    """A second Ctrl-C during ``close`` once left the Ray nodes running and the namespaces behind."""
    import os
    import signal

    from ray_llm_eks.twin.run import _stop_signals_held

    received = []
    previous = signal.signal(signal.SIGTERM, lambda number, frame: received.append(number))
    try:
        with _stop_signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            held = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler is back once cleanup is done
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert held == (signal.SIG_IGN, signal.SIG_IGN)
    assert received == [signal.SIGTERM]


def test_the_gate_finds_the_twins_pods_as_those_of_its_ray_cluster(api, rendered, tmp_path):
    """The gate counts only pods the RayCluster controls (by uid): the stand-in serves the RayCluster
    and owns its pods as KubeRay does, so the gate on the twin sees them."""
    from ray_llm_eks.verification.kube import Kube, KubeAccess

    stand_in, url = api
    (_, service) = rendered_serve(rendered, "disaggregated")
    template = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    stand_in.add_pod("head", template=template, group="headgroup", node="n", ip="127.0.0.1", env={}, created=1.0)
    token = tmp_path / "token"
    token.write_text(stand_in.token)
    kube = Kube(KubeAccess.with_token_file(url, str(token)))
    found = kube.ray_cluster("inference", stand_in.cluster)
    assert found["spec"] == service["spec"]["rayClusterConfig"]
    assert [p["metadata"]["name"] for p in kube.ray_cluster_pods("inference", stand_in.cluster)] == ["head"]


def test_the_twin_runs_the_gate_program_the_chart_rendered(rendered, twins):
    """The twin unpacks the program ConfigMap's archive (what the Job imports from) into its folder."""
    import types

    from ray_llm_eks.twin.run import TwinRun
    from ray_llm_eks.verification import bundle

    stand_in = types.SimpleNamespace(rendered=rendered)
    assert TwinRun._gate_program_files(stand_in, twins["disaggregated"]) == bundle.shipped_files()


def test_the_twin_runs_ray_with_the_token_kuberay_1_5_1_would_set(twins, tmp_path):
    """The default renders authOptions.mode token: every Ray node gets RAY_AUTH_MODE and the token,
    and the twin's own dashboard calls send it as KubeRay's client does (twin/cluster.py)."""
    from ray_llm_eks.twin.cluster import Twin

    twin = Twin(twins["disaggregated"], network=None, workdir=tmp_path, ray_bin=tmp_path, gate_program=tmp_path)
    assert twin.token_auth
    assert twin.auth_env() == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": twin.ray_auth_token}
    assert twin.auth_headers() == {"x-ray-authorization": f"Bearer {twin.ray_auth_token}"}
    assert len(twin.ray_auth_token) >= 40  # 32 random bytes, URL-safe base64
    assert Twin(twins["disaggregated"], None, tmp_path, tmp_path, tmp_path).ray_auth_token != twin.ray_auth_token


def twin_with_a_fake_ray(rendered, tmp_path, exit_code: int):
    """A Twin of the rendered disaggregated deployment whose ``ray`` only echoes its arguments."""
    from ray_llm_eks.twin.cluster import Twin
    from ray_llm_eks.twin.host_network import HostNetwork

    network = HostNetwork(("head", "prefill", "decode"))
    charts = rendered["disaggregated"]
    deployment = twin_profile.twin_deployment(charts[render.RAYSERVICE_CHART], charts[render.VERIFICATION_CHART],
                                              network.addresses, PATHS)
    ray_bin = tmp_path / "bin"
    ray_bin.mkdir()
    (ray_bin / "ray").write_text(f"#!/bin/sh\necho \"ray $*\"\nexit {exit_code}\n")
    (ray_bin / "ray").chmod(0o755)
    return Twin(deployment, network, tmp_path, ray_bin, tmp_path, log=lambda line: None)


@pytest.mark.integration
def test_a_head_whose_ray_start_exits_fails_its_start_at_once_under_the_kubelet(rendered, tmp_path):
    """A replacement head whose ``ray start --block`` exits (its ports still taken) is reported as
    such, so the kubelet stand-in retries it, instead of waiting out the dashboard's whole timeout:
    under the stand-in a Ray node's process is restartable, which the generic wait never counts as
    dead (twin/run.py ``_pod_deleted``)."""
    from ray_llm_eks.twin.cluster import TwinError

    twin = twin_with_a_fake_ray(rendered, tmp_path, exit_code=3)
    twin.restarts_exited = True  # what TwinRun.kubelet() sets while drills run
    with pytest.raises(TwinError, match="the Ray head's `ray start` exited with code 3 before its dashboard answered"):
        twin.start_node("head", timeout=60.0)
    assert twin.processes[-1].restartable
    assert twin.node_logs["head"].drained(timeout=60.0)  # the exited script's output, all of it read
    assert "ray start --block" in twin.node_logs["head"].text()


@pytest.mark.integration
def test_each_pod_of_a_node_starts_ray_in_a_temp_dir_of_its_own(rendered, tmp_path):
    """A replacement pod starts on a fresh filesystem, so its ``ray start`` finds no
    ``ray_current_cluster`` of the pod before (which made a new head refuse to start while the other
    nodes' raylets still named the old GCS: cluster.Twin.ray_temp_dir); a container restarted in its
    pod keeps the pod's directory."""
    def temp_dirs(log) -> list[str]:
        assert log.drained(timeout=60.0)
        return [line.split("--temp-dir=")[1].split()[0] for line in log.text().splitlines() if "--temp-dir=" in line]

    twin = twin_with_a_fake_ray(rendered, tmp_path, exit_code=0)
    twin.start_node("decode")
    first_pod = twin.node_logs["decode"]
    first = twin.ray_temp_dir("decode")
    twin.start_node("decode", log=first_pod)  # the container restarted in the same pod
    twin.start_node("decode")  # a replacement pod
    second = twin.ray_temp_dir("decode")
    assert second != first and second.parent == first.parent == twin.ray_temp_dir("prefill").parent
    assert temp_dirs(first_pod) == [str(first), str(first)]
    assert temp_dirs(twin.node_logs["decode"]) == [str(second)]
