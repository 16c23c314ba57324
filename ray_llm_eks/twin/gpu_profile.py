"""The GPU profile: the rendered deployment on one NVIDIA GPU, both legs sharing it.

The CPU twin (:mod:`.twin_profile`) runs vLLM's CPU build, which never takes vLLM's CUDA paths
(the host KV buffer, GPU-memory registration with NIXL, the Gated-DeltaNet kernels). This profile
runs the image's own serving stack (vLLM 0.26.0 CUDA, NIXL 1.3.1 cu13, Ray 2.58.0) on one GPU, with
the rendered ``kv_transfer_config`` and worker environment, and changes only what one GPU and no
EFA device force. Every change is listed in :data:`GPU_CHANGES` with its reason; ``twin --gpu``
prints them and docs/twin.md records each run.

The Ray nodes share the host (:mod:`.host_network`): 127.0.0.2 is the head, 127.0.0.3 prefill,
127.0.0.4 decode. Standard library and PyYAML only.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping

from . import twin_profile
from .twin_profile import Paths, RayNode, TwinDeployment

ENGINE_MEMORY_SHARE = 0.3
"""``gpu_memory_utilization`` of each engine: two engines (prefill and decode, or two colocated
replicas) on one GPU, each with under half of it, as vLLM checks the share against the memory
free when it starts."""
OBJECT_STORE_BYTES = 2 * 1024**3
METRICS_PORTS = {"head": 8090, "prefill": 8091, "decode": 8092}
"""Each node's own metrics port on the shared host; the gate reads 8080 on each node's address through a relay."""
AGENT_PORTS = {"head": 52365, "prefill": 52366, "decode": 52367}
PROVIDER = "tcp"
UCX_TLS = "tcp,cuda_copy"
"""UCX's transports when GPU memory must cross a TCP link: a run on an H100 (vLLM 0.26.0, NIXL
1.3.1) moved a hybrid model's KV cache P to D with these."""

GPU_CHANGES: tuple[tuple[str, str], ...] = (
    ("serve: model_loading_config.model_source", "a tiny random-weight model of the configured architecture's kind, "
     "built on the machine (dense: LlamaForCausalLM; hybrid: Qwen3_5ForConditionalGeneration)"),
    ("serve: accelerator_type removed", "the lent GPU is not the configured type; Ray would wait for an L4 forever"),
    ("serve: engine_kwargs.gpu_memory_utilization", f"{ENGINE_MEMORY_SHARE} per engine: both engines share one GPU"),
    ("serve: engine_kwargs.language_model_only true (tiny hybrid)", "the tiny checkpoint has no image processor; "
     "rendered already where the configuration serves text only"),
    ("serve: engine_kwargs.gdn_prefill_backend triton (hybrid), env VLLM_USE_FLASHINFER_SAMPLER 0",
     "FlashInfer is not installed (the image's 1.4 GB wheel is left out to fit the machine's transfer); on the "
     "L4 (SM89) vLLM 0.26.0 picks Triton/FLA for Gated-DeltaNet itself"),
    ("serve: http_options.location HeadOnly", "one HTTP proxy: every node's would bind the same host port"),
    ("serve: kv_transfer_config.kv_connector_extra_config.backends LIBFABRIC -> UCX, env UCX_TLS tcp,cuda_copy "
     "(only where the rendered kv_buffer_device is cuda)",
     "libfabric's tcp provider, the only one without EFA, cannot register GPU memory: NIXL 1.3.1 fails "
     "'Memory type 1 is not supported by libfabric backend' (libfabric_backend.cpp:696); --keep-libfabric "
     "runs it as rendered to show that failure"),
    ("ray start: object-store-memory 2 GiB", "three nodes on one host"),
    ("ray start: metrics-export-port, dashboard-agent-listen-port per node",
     "the nodes share one host; a relay serves each node's metrics on its address:8080 for the gate"),
    ("env: FI_PROVIDER efa -> tcp", "no EFA device: libfabric's tcp provider over loopback"),
    ("env: LD_LIBRARY_PATH", "libfabric 2.x (the mpich wheel's) and the CUDA 13 runtime for NIXL's LIBFABRIC plugin"),
    ("env: HF_HOME, HF_HUB_CACHE", "the run's own folder instead of the node's host path"),
    ("gate: openai_url, serve_args, worker_env, expected_provider tcp", "what runs here"),
    ("gate: EFA counters read lo", "no per-node link: lo carries every node's traffic, so its bytes prove nothing "
     "about the KV path; NIXL's own metrics and log lines do"),
    ("gate: as_deploy_job false, deadline_seconds", "no Job, no wait condition; bounded for a local run"),
)


def _transfer_configs(serve_config: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = []
    for application in serve_config["applications"]:
        for llm in twin_profile._llm_configs(application["args"]):
            transfer = (llm.get("engine_kwargs") or {}).get("kv_transfer_config")
            if transfer is not None:
                found.append(transfer)
    return found


def gpu_memory_registered(serve_config: Mapping[str, Any]) -> bool:
    """Whether the rendered NixlConnector registers GPU memory (``kv_buffer_device: cuda``)."""
    return any(t.get("kv_buffer_device") == "cuda" for t in _transfer_configs(serve_config))


def serve_for_gpu(serve_config: Mapping[str, Any], model_path: str, *, hybrid: bool,
                  keep_libfabric: bool = False) -> tuple[dict[str, Any], bool]:
    """The rendered ``serveConfigV2`` with :data:`GPU_CHANGES` (a new dict), and whether the
    backend became UCX."""
    config = copy.deepcopy(dict(serve_config))
    to_ucx = gpu_memory_registered(config) and not keep_libfabric
    config.setdefault("http_options", {})["location"] = "HeadOnly"
    for application in config["applications"]:
        for llm in twin_profile._llm_configs(application["args"]):
            llm["model_loading_config"]["model_source"] = model_path
            llm.pop("accelerator_type", None)
            engine = llm.setdefault("engine_kwargs", {})
            engine["gpu_memory_utilization"] = ENGINE_MEMORY_SHARE
            if hybrid:
                engine["language_model_only"] = True
                engine["gdn_prefill_backend"] = "triton"
            transfer = engine.get("kv_transfer_config")
            if transfer is not None and to_ucx:
                extra = transfer.setdefault("kv_connector_extra_config", {})
                extra["backends"] = ["UCX"]
    return config, to_ucx


def gpu_deployment(rayservice_objects: list[Mapping[str, Any]], verification_objects: list[Mapping[str, Any]],
                   addresses: Mapping[str, str], paths: Paths, *, hybrid: bool,
                   keep_libfabric: bool = False) -> TwinDeployment:
    """The GPU profile of one rendered deployment (``addresses``: head/prefill/decode on the host)."""
    import yaml

    service = twin_profile._ray_service(rayservice_objects)
    cluster = service["spec"]["rayClusterConfig"]
    serve, to_ucx = serve_for_gpu(yaml.safe_load(service["spec"]["serveConfigV2"]), paths.model, hybrid=hybrid,
                                  keep_libfabric=keep_libfabric)
    settings = twin_profile.gate_settings_of(verification_objects)
    head_template = cluster["headGroupSpec"]["template"]
    nodes = {"head": RayNode("head", "headgroup", addresses["head"], dict(cluster["headGroupSpec"]["rayStartParams"]),
                             {**twin_profile._container_env(head_template), "HF_HOME": paths.hf_home}, head_template,
                             metrics_port=METRICS_PORTS["head"], agent_port=AGENT_PORTS["head"])}
    worker_env: dict[str, str] = {}
    for group in cluster["workerGroupSpecs"]:
        role = group["groupName"]
        params = dict(group["rayStartParams"])
        params["object-store-memory"] = str(OBJECT_STORE_BYTES)
        env = dict(twin_profile._container_env(group["template"], settings.get("worker_container")))
        env.update(FI_PROVIDER=PROVIDER, HF_HOME=paths.hf_home, HF_HUB_CACHE=f"{paths.hf_home}/hub",
                   LD_LIBRARY_PATH=paths.library_path, VLLM_USE_FLASHINFER_SAMPLER="0")
        if to_ucx:
            env["UCX_TLS"] = UCX_TLS
        worker_env = {k: env[k] for k in settings["worker_env"] if k in env}
        nodes[role] = RayNode(role, role, addresses[role], params, env, group["template"],
                              metrics_port=METRICS_PORTS[role], agent_port=AGENT_PORTS[role])
    application = serve["applications"][0]
    settings.update(
        openai_url=f"http://{addresses['head']}:{serve.get('http_options', {}).get('port', 8000)}",
        serve_args=application["args"], worker_env=worker_env, expected_provider=PROVIDER,
        as_deploy_job=False, deadline_seconds=twin_profile.GATE_DEADLINE_SECONDS,
    )
    service = {**service, "spec": {**service["spec"], "serveConfigV2": json.dumps(serve, indent=2)}}
    notes = ["backend UCX (UCX_TLS tcp,cuda_copy): the rendered kv_buffer_device is cuda"] if to_ucx else []
    return TwinDeployment(topology=settings["topology"], nodes=nodes, serve_config=serve, gate_settings=settings,
                          rayservice=service, changes=GPU_CHANGES, notes=notes)
