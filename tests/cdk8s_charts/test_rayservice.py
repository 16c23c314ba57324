"""Targeted facts of the RayService, one test per fact (issue 4; their upstream sources: docs/rayservice.md)."""

from __future__ import annotations

import pytest

from ray_llm_eks.cdk8s_charts import (ADMISSION_POLICY_CHART_ID, NAMESPACE_CHART_ID, NETWORK_POLICY_CHART_ID,
                                     RAYSERVICE_CHART_ID)
from ray_llm_eks.base import GPU_TAINT_KEY

from helpers.charts import DIGEST, PINNED_REVISION, SCENARIOS, render
from helpers.pins import unpinned as Deployment  # strict false (tests/helpers/pins.py)
from ray_llm_eks.base.serving import ImageSpec

ROLES = ("prefill", "decode")


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def ports_of(container: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container["ports"]}


# --- Charts and apply order ----------------------------------------------------------------


def test_charts_in_apply_order_namespace_then_policies_then_pods(disaggregated):
    assert [c.node.id for c in disaggregated.charts.charts] == [NAMESPACE_CHART_ID, NETWORK_POLICY_CHART_ID,
                                                                ADMISSION_POLICY_CHART_ID, RAYSERVICE_CHART_ID]
    # The Ray pods' account, then what the teardown guard needs (deleted after its pod).
    assert [o["kind"] for o in disaggregated.objects[NAMESPACE_CHART_ID]] == [
        "Namespace", "ServiceAccount", "ServiceAccount", "Role", "RoleBinding", "ConfigMap"]
    assert {o["kind"] for o in disaggregated.objects[NETWORK_POLICY_CHART_ID]} == {"NetworkPolicy"}
    assert sorted(o["kind"] for o in disaggregated.objects[RAYSERVICE_CHART_ID]) == ["Pod", "RayService", "Service"]


def _ray_account(rendered) -> dict:
    """The Ray pods' ServiceAccount (the namespace's chart also holds the teardown guard's)."""
    (account,) = [o for o in rendered.objects[NAMESPACE_CHART_ID]
                  if o["kind"] == "ServiceAccount" and not o["metadata"]["name"].endswith("-teardown-guard")]
    return account


def test_namespace_and_service_account_names_follow_config(disaggregated, scenario):
    namespace = disaggregated.one("Namespace")
    account = _ray_account(disaggregated)
    assert namespace["metadata"]["name"] == "inference"
    assert account["metadata"] == {"name": "ray-llm", "namespace": "inference"}
    hardened = scenario("hardened")
    assert hardened.one("Namespace")["metadata"]["name"] == "llm"
    assert hardened.ray_service["metadata"]["namespace"] == "llm"
    assert hardened.ray_service["metadata"]["name"] == "qwen"


def test_head_and_workers_run_as_the_service_account(disaggregated):
    account = _ray_account(disaggregated)["metadata"]["name"]
    assert disaggregated.head_group["template"]["spec"]["serviceAccountName"] == account
    for role in ROLES:
        assert disaggregated.worker_group(role)["template"]["spec"]["serviceAccountName"] == account


# --- RayService top level -----------------------------------------------------------------


def test_rayservice_top_level_settings(disaggregated):
    spec = disaggregated.ray_service["spec"]
    assert disaggregated.ray_service["apiVersion"] == "ray.io/v1"
    assert spec["upgradeStrategy"] == {"type": "None"}
    assert spec["excludeHeadPodFromServeSvc"] is True
    assert disaggregated.cluster["rayVersion"] == "2.58.0"
    assert isinstance(spec["serveConfigV2"], str)
    # Documented as unused in v1: never emitted.
    assert "serviceUnhealthySecondThreshold" not in spec
    assert "deploymentUnhealthySecondThreshold" not in spec


def test_image_is_the_dlc_tag_by_default_and_the_digest_when_pinned(disaggregated, scenario):
    images = {c["image"] for c in [disaggregated.head_container, *map(disaggregated.worker_container, ROLES)]}
    assert images == {"763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"}
    hardened = scenario("hardened")
    assert hardened.head_container["image"] == f"763104351884.dkr.ecr.us-west-2.amazonaws.com/ray@{DIGEST}"
    assert hardened.worker_container("decode")["image"].endswith(f"@{DIGEST}")


# --- Serve config: disaggregated -------------------------------------------------------------


def test_disaggregated_app_is_build_pd_openai_app_with_prefill_and_decode_only(disaggregated):
    application = disaggregated.application
    assert application["import_path"] == "ray.serve.llm:build_pd_openai_app"
    assert set(application["args"]) == {"prefill_config", "decode_config"}
    assert not any(key.startswith("proxy_") for key in application["args"])


@pytest.mark.parametrize("role", ROLES)
def test_both_legs_share_model_and_engine_settings(disaggregated, role):
    leg = disaggregated.application["args"][f"{role}_config"]
    assert leg["model_loading_config"] == {"model_id": "qwen3.5-9b", "model_source": "Qwen/Qwen3.5-9B"}
    engine = leg["engine_kwargs"]
    assert engine["dtype"] == "bfloat16"
    assert engine["max_model_len"] == 4096
    assert engine["gpu_memory_utilization"] == 0.9
    assert engine["enforce_eager"] is True
    assert engine["tensor_parallel_size"] == 1
    assert leg["accelerator_type"] == "L4"
    # No revision configured: nothing pins it (the config's reproducibility warning covers that).
    assert "revision" not in engine


@pytest.mark.parametrize(("role", "kv_role"), [("prefill", "kv_producer"), ("decode", "kv_consumer")])
def test_both_legs_use_nixl_over_libfabric_in_their_own_kv_role(disaggregated, role, kv_role):
    """vLLM 0.26 deprecates ``kv_both`` for the NixlConnector (serve_config.KV_ROLE)."""
    kv = disaggregated.application["args"][f"{role}_config"]["engine_kwargs"]["kv_transfer_config"]
    assert kv == {
        "kv_connector": "NixlConnector",
        "kv_role": kv_role,
        # Qwen3.5 is hybrid: the host buffer fails for it, so GPU memory even on g6.8xlarge (base/kv_path.py).
        "kv_buffer_device": "cuda",
        "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
    }


def test_no_kv_role_is_kv_both_in_any_scenario(scenario):
    for name in SCENARIOS:
        serve_config = scenario(name).ray_service["spec"]["serveConfigV2"]
        assert "kv_both" not in serve_config, name


def test_colocated_has_no_kv_connector(colocated):
    (model,) = colocated.application["args"]["llm_configs"]
    assert "kv_transfer_config" not in model["engine_kwargs"]


def test_kv_buffer_device_follows_the_kv_path_table_and_no_gpudirect_variable_is_set(scenario):
    """Every scenario runs on G-series (no GPUDirect RDMA): the hybrid Qwen3.5 on GPU memory (its host
    buffer fails), the dense Llama on the host buffer (base/kv_path.py). libfabric uses the device's
    RDMA when available with FI_EFA_USE_DEVICE_RDMA unset, and setting it to 1 aborts on a device
    without RDMA (ofiwg/libfabric ``man/fi_efa.7.md``)."""
    for name, device in (("hardened", "cuda"), ("disaggregated", "cuda"), ("multi_gpu", "cpu")):
        rendered = scenario(name)
        for role in ROLES:
            kv = rendered.application["args"][f"{role}_config"]["engine_kwargs"]["kv_transfer_config"]
            assert kv["kv_buffer_device"] == device, (name, role)
            names = {e["name"] for e in rendered.worker_container(role).get("env") or ()}
            assert not any(n.startswith("FI_EFA_USE_DEVICE_RDMA") for n in names), (name, role)


def test_a_pinned_revision_reaches_the_model_and_the_tokenizer(scenario):
    for role in ROLES:
        engine = scenario("hardened").application["args"][f"{role}_config"]["engine_kwargs"]
        assert engine["revision"] == PINNED_REVISION
        assert engine["tokenizer_revision"] == PINNED_REVISION


def test_the_users_engine_arguments_are_deep_merged_into_each_leg(scenario, disaggregated):
    """``model.engine_kwargs`` on both legs, ``prefill.engine_kwargs`` over them on prefill (a nested
    mapping merged key by key, the leg's value winning); what the library renders is unchanged."""
    args = scenario("hardened").application["args"]
    prefill, decode = args["prefill_config"]["engine_kwargs"], args["decode_config"]["engine_kwargs"]
    assert prefill["override_generation_config"] == {"temperature": 0.0, "top_p": 0.95}
    assert decode["override_generation_config"] == {"temperature": 0.6, "top_p": 0.95}
    assert prefill["max_num_seqs"] == decode["max_num_seqs"] == 64
    assert prefill["enable_prefix_caching"] is True and "enable_prefix_caching" not in decode
    added = {"max_num_seqs", "override_generation_config", "enable_prefix_caching"}
    plain = disaggregated.application["args"]["prefill_config"]["engine_kwargs"]
    assert not added & set(plain)  # the default adds nothing
    rendered = {key: value for key, value in prefill.items() if key not in added}
    assert rendered["kv_transfer_config"]["kv_role"] == "kv_producer"
    assert set(rendered) == set(plain) | {"revision", "tokenizer_revision"}


def test_nixl_side_channel_bases_are_explicit_per_leg(disaggregated):
    args = disaggregated.application["args"]
    assert args["prefill_config"]["experimental_configs"] == {"NIXL_SIDE_CHANNEL_PORT_BASE": 20000}
    assert args["decode_config"]["experimental_configs"] == {"NIXL_SIDE_CHANNEL_PORT_BASE": 22000}


def test_one_replica_per_tensor_parallel_group_of_gpus(disaggregated, scenario):
    args = disaggregated.application["args"]
    assert args["prefill_config"]["deployment_config"] == {"num_replicas": 1}
    assert args["decode_config"]["deployment_config"] == {"num_replicas": 1}
    # 2 nodes x 4 GPUs / TP 2 = 4 replicas per leg.
    multi = scenario("multi_gpu").application["args"]
    assert multi["prefill_config"]["deployment_config"] == {"num_replicas": 4}
    assert multi["decode_config"]["deployment_config"] == {"num_replicas": 4}
    assert multi["decode_config"]["engine_kwargs"]["tensor_parallel_size"] == 2


# --- Serve config: colocated ---------------------------------------------------------------------


def test_colocated_app_is_build_openai_app_without_kv_connector(colocated, disaggregated):
    application = colocated.application
    assert application["import_path"] == "ray.serve.llm:build_openai_app"
    (model,) = application["args"]["llm_configs"]
    assert "kv_transfer_config" not in model["engine_kwargs"]
    assert "experimental_configs" not in model
    # Same model and engine settings as the disaggregated legs, minus the KV connector.
    leg = dict(disaggregated.application["args"]["decode_config"]["engine_kwargs"])
    leg.pop("kv_transfer_config")
    assert model["engine_kwargs"] == leg
    assert model["model_loading_config"] == disaggregated.application["args"]["decode_config"]["model_loading_config"]
    assert model["accelerator_type"] == "L4"


def test_colocated_uses_one_replica_per_gpu_group_across_both_node_groups(colocated, scenario):
    (model,) = colocated.application["args"]["llm_configs"]
    assert model["deployment_config"] == {"num_replicas": 2}
    (multi,) = scenario("multi_gpu_colocated").application["args"]["llm_configs"]
    assert multi["deployment_config"] == {"num_replicas": 8}


def test_switching_topology_changes_only_the_serve_config(disaggregated, colocated):
    assert disaggregated.objects[NAMESPACE_CHART_ID] == colocated.objects[NAMESPACE_CHART_ID]
    assert disaggregated.one("Service") == colocated.one("Service")
    assert disaggregated.head_group == colocated.head_group
    for role in ROLES:
        # Worker groups, templates and containers, NIXL ports included, are the same objects.
        assert disaggregated.worker_group(role) == colocated.worker_group(role)
    ours, theirs = dict(disaggregated.ray_service["spec"]), dict(colocated.ray_service["spec"])
    assert ours.pop("serveConfigV2") != theirs.pop("serveConfigV2")
    assert ours == theirs


# --- Head ------------------------------------------------------------------------------------


def test_head_runs_on_the_system_node_without_gpus(disaggregated):
    head = disaggregated.head_group
    assert head["template"]["spec"]["nodeSelector"] == {"role": "system"}
    assert "tolerations" not in head["template"]["spec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert head["rayStartParams"]["num-cpus"] == "0"
    limits = disaggregated.head_container["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits


def test_head_declares_serve_dashboard_gcs_and_metrics_ports(disaggregated):
    assert ports_of(disaggregated.head_container) == {"serve": 8000, "dashboard": 8265, "gcs": 6379, "metrics": 8080}


def test_head_fits_the_system_node(disaggregated):
    resources = disaggregated.head_container["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "2", "memory": "8Gi"}


# --- Workers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_worker_group_is_pinned_to_its_node_group_and_tolerates_its_taint(disaggregated, role):
    spec = disaggregated.worker_group(role)["template"]["spec"]
    assert spec["nodeSelector"] == {"role": role}
    assert spec["tolerations"] == [
        {"key": GPU_TAINT_KEY, "operator": "Equal", "value": role, "effect": "NoSchedule"}
    ]


@pytest.mark.parametrize("role", ROLES)
def test_worker_gets_the_node_gpus_one_efa_device_and_matching_num_gpus(disaggregated, role):
    group = disaggregated.worker_group(role)
    resources = disaggregated.worker_container(role)["resources"]
    for side in ("requests", "limits"):
        assert resources[side]["nvidia.com/gpu"] == 1
        assert resources[side]["vpc.amazonaws.com/efa"] == 1
    assert group["rayStartParams"]["num-gpus"] == "1"
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 1)


def test_multi_gpu_workers_take_all_four_gpus_and_follow_node_group_sizes(scenario):
    multi = scenario("multi_gpu")
    prefill = multi.worker_group("prefill")
    assert prefill["rayStartParams"]["num-gpus"] == "4"
    assert multi.worker_container("prefill")["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert (prefill["replicas"], prefill["minReplicas"], prefill["maxReplicas"]) == (2, 2, 2)
    decode = multi.worker_group("decode")
    assert (decode["replicas"], decode["minReplicas"], decode["maxReplicas"]) == (2, 2, 2)


@pytest.mark.parametrize("role", ROLES)
def test_worker_cpu_and_memory_fit_a_g6_8xlarge_after_reservations(disaggregated, role):
    resources = disaggregated.worker_container(role)["resources"]
    # 32 vCPU / 128 GiB, minus kube-reserved, eviction threshold, the EFA huge-page pool
    # (5128 x 2 MiB), DaemonSets and the worker margin (docs/plan.md, "Node budget").
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == "30"
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "108Gi"
    assert disaggregated.worker_group(role)["rayStartParams"]["num-cpus"] == "30"


@pytest.mark.parametrize("role", ROLES)
def test_worker_shm_is_memory_backed_and_holds_the_object_store(disaggregated, role):
    spec = disaggregated.worker_group(role)["template"]["spec"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in spec["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in disaggregated.worker_container(role)["volumeMounts"]
    object_store = int(disaggregated.worker_group(role)["rayStartParams"]["object-store-memory"])
    assert object_store == 4 * 1024**3 < 8 * 1024**3


@pytest.mark.parametrize("role", ROLES)
def test_worker_environment_for_efa_and_hybrid_models(disaggregated, role):
    env = env_of(disaggregated.worker_container(role))
    assert env == {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_HUGE_PAGE": "0",
        "HF_HOME": "/var/cache/huggingface",
        "HF_HUB_CACHE": "/var/cache/huggingface/hub",
        "VLLM_SSM_CONV_STATE_LAYOUT": "DS",
        # The transport evidence: NIXL's INFO lines (its C++ logger defaults to WARN: nixl
        # src/utils/common/nixl_log.cpp:36@v1.3.1), on the container's output.
        "NIXL_LOG_LEVEL": "INFO",
        "RAY_LOG_TO_STDERR": "1",
        # vLLM 0.26 refuses every KV connector with expandable segments; never inherited from the image.
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
        "PYTORCH_ALLOC_CONF": "expandable_segments:False",
    }
    # Hugepages are handled by FI_EFA_USE_HUGE_PAGE=0, so none are requested.
    assert not any(k.startswith("hugepages-") for k in disaggregated.worker_container(role)["resources"]["limits"])


HF_CACHE_VOLUME = {
    "name": "hf-cache",
    "hostPath": {"path": "/var/lib/ray-llm-eks/hf-cache", "type": "DirectoryOrCreate"},
}
HF_CACHE_MOUNT = {"name": "hf-cache", "mountPath": "/var/cache/huggingface"}


@pytest.mark.parametrize("name", ["disaggregated", "colocated", "hardened", "multi_gpu"])
@pytest.mark.parametrize("role", ROLES)
def test_workers_keep_the_hugging_face_cache_on_the_node_root_volume(scenario, name, role):
    """The checkpoint survives pod restarts: a hostPath under /var/lib (the root volume), HF_HOME on it."""
    rendered = scenario(name)
    spec = rendered.worker_group(role)["template"]["spec"]
    container = rendered.worker_container(role)
    assert [v for v in spec["volumes"] if v["name"] == "hf-cache"] == [HF_CACHE_VOLUME]
    assert [m for m in container["volumeMounts"] if m["name"] == "hf-cache"] == [HF_CACHE_MOUNT]
    assert env_of(container)["HF_HOME"] == HF_CACHE_MOUNT["mountPath"]
    assert env_of(container)["HF_HUB_CACHE"].startswith(HF_CACHE_MOUNT["mountPath"] + "/")
    # The kubelet creates the directory root-owned 0755: one init container gives it to the Ray
    # user (Ray images: 1000:100), mode 0750, never world-writable.
    (init,) = spec["initContainers"]
    assert init["image"] == container["image"]
    assert init["command"] == ["sh", "-c", 'chown 1000:100 "$0" && chmod 0750 "$0"', "/var/cache/huggingface"]
    assert init["volumeMounts"] == [HF_CACHE_MOUNT]
    # Requests equal limits on every container, init ones included: the pod stays Guaranteed.
    assert init["resources"]["requests"] == init["resources"]["limits"] == {"cpu": "100m", "memory": "64Mi"}
    assert init["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["CHOWN", "FOWNER"], "drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": False,
        "runAsUser": 0,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_the_hf_cache_paths_are_named_constants_in_one_place():
    from ray_llm_eks.cdk8s_charts import model_cache

    assert model_cache.HF_CACHE_HOST_PATH == HF_CACHE_VOLUME["hostPath"]["path"]
    assert model_cache.HF_CACHE_MOUNT_PATH == HF_CACHE_MOUNT["mountPath"]
    assert model_cache.HF_CACHE_HOST_PATH.startswith("/var/lib/")  # the root volume on AL2023


def test_the_head_loads_no_model_and_mounts_no_cache(disaggregated):
    spec = disaggregated.head_group["template"]["spec"]
    assert "volumes" not in spec and "initContainers" not in spec
    assert "HF_HOME" not in env_of(disaggregated.head_container)


def test_every_worker_gets_the_ssm_layout_whatever_the_model_and_topology(scenario):
    # vLLM 0.26's NIXL path asserts DS for every hybrid model, whatever its name; others never read
    # it, and the KV-path table sets it for every model so a model change keeps the pods (base/kv_path.py).
    for name in SCENARIOS:
        for role in ROLES:
            assert env_of(scenario(name).worker_container(role))["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"


def test_gpudirect_rdma_is_never_requested(scenario):
    for name in ("disaggregated", "colocated", "hardened", "multi_gpu"):
        for role in ROLES:
            assert "FI_EFA_USE_DEVICE_RDMA" not in env_of(scenario(name).worker_container(role))


def test_workers_declare_serve_metrics_and_nixl_side_channel_ports(disaggregated, scenario):
    assert ports_of(disaggregated.worker_container("prefill")) == {"serve": 8000, "metrics": 8080, "nixl-0": 20000}
    assert ports_of(disaggregated.worker_container("decode")) == {"serve": 8000, "metrics": 8080, "nixl-0": 22000}
    # 4 replicas x TP 2: one listener per replica (engine) at base + rank x TP, not one per TP worker.
    multi = ports_of(scenario("multi_gpu").worker_container("decode"))
    assert sorted(p for n, p in multi.items() if n.startswith("nixl")) == [22000, 22002, 22004, 22006]


def test_switching_topology_leaves_every_pod_template_alone(scenario):
    for disaggregated_name, colocated_name in (("disaggregated", "colocated"), ("multi_gpu", "multi_gpu_colocated")):
        disaggregated, colocated = scenario(disaggregated_name), scenario(colocated_name)
        assert disaggregated.cluster == {**colocated.cluster}
        assert disaggregated.serve_config != colocated.serve_config


def test_privileged_is_the_default_security_profile(disaggregated):
    for role in ROLES:
        assert disaggregated.worker_container(role)["securityContext"] == {"privileged": True}
    assert disaggregated.head_container["securityContext"]["allowPrivilegeEscalation"] is False


def test_ipc_lock_profile_drops_privileged_and_adds_only_ipc_lock(scenario):
    for role in ROLES:
        assert scenario("hardened").worker_container(role)["securityContext"] == {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["IPC_LOCK"]},
        }


# --- OpenAI endpoint Service -------------------------------------------------------------------


def test_openai_service_is_cluster_ip_on_8000_selecting_the_serving_workers(disaggregated):
    service = disaggregated.one("Service")
    assert service["metadata"]["name"] == "ray-llm-openai"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP", "targetPort": 8000}]
    selector = service["spec"]["selector"]
    assert selector == {"ray-llm-eks/instance": "ray-llm", "ray-llm-eks/serves-http": "true"}
    # The selector matches both worker groups and not the head (which is out of the serve path).
    for role in ROLES:
        labels = disaggregated.worker_group(role)["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
    assert not selector.items() <= disaggregated.head_group["template"]["metadata"]["labels"].items()


def test_internal_nlb_option_sets_the_aws_annotations(scenario):
    service = scenario("hardened").one("Service")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == {
        "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
        "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
    }


# --- Labels KubeRay owns -------------------------------------------------------------------------

KUBERAY_OWNED = ("app.kubernetes.io/", "ray.io/")


def _pod_templates(rendered) -> list[dict]:
    return [rendered.head_group["template"], *(g["template"] for g in rendered.cluster["workerGroupSpecs"])]


@pytest.mark.parametrize("name", ["disaggregated", "colocated", "hardened", "multi_gpu", "multi_gpu_colocated"])
def test_no_pod_template_sets_a_label_kuberay_owns(scenario, name):
    """KubeRay lets template labels override its own, but builds <name>-head-svc's selector from its
    defaults (app.kubernetes.io/name: kuberay, ...): an override leaves that Service without endpoints
    (kuberay #2147, #2648)."""
    for template in _pod_templates(scenario(name)):
        labels = template["metadata"]["labels"]
        assert labels, "pod templates carry this project's own labels"
        assert [key for key in labels if key.startswith(KUBERAY_OWNED)] == []
        assert all(key.startswith("ray-llm-eks/") for key in labels)


def test_the_openai_selector_uses_only_project_labels_and_top_level_metadata_keeps_app_labels(disaggregated):
    from ray_llm_eks.cdk8s_charts import labels

    assert labels.KUBERAY_OWNED_LABEL_PREFIXES == KUBERAY_OWNED
    selector = disaggregated.one("Service")["spec"]["selector"]
    assert not [key for key in selector if key.startswith(KUBERAY_OWNED)]
    # The RayService object itself may keep the recommended labels: KubeRay does not copy them to pods.
    assert disaggregated.ray_service["metadata"]["labels"] == {
        "app.kubernetes.io/name": "ray-llm-eks",
        "app.kubernetes.io/instance": "ray-llm",
    }


@pytest.mark.parametrize("name", ["disaggregated", "colocated", "hardened", "multi_gpu"])
@pytest.mark.parametrize("role", ROLES)
def test_no_worker_can_run_with_expandable_segments(scenario, name, role):
    """An explicit value in the pod spec wins over an ENV of the image, under both names PyTorch reads."""
    env = env_of(scenario(name).worker_container(role))
    for variable in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        assert "expandable_segments:True" not in env[variable]
        assert env[variable] == "expandable_segments:False"
    assert env["NIXL_LOG_LEVEL"] == "INFO"


def _init_command(deployment: Deployment) -> list[str]:
    (init,) = render(deployment).worker_group("prefill")["template"]["spec"]["initContainers"]
    return list(init["command"])


@pytest.mark.integration
def test_the_model_cache_init_command_works_as_root_with_its_two_capabilities_on_every_run(tmp_path):
    """As the init container runs it: root, every capability dropped but CHOWN and FOWNER
    (setpriv drops them here), and again for the next pod on the node, when the directory
    already belongs to the image user. Without FOWNER that second run fails."""
    import os
    import shutil
    import stat
    import subprocess

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and util-linux setpriv to drop every capability but CHOWN and FOWNER")
    command = _init_command(Deployment())
    cache = tmp_path / "hf-cache"
    cache.mkdir(mode=0o755)
    as_init = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all,+chown,+fowner"]
    for _ in range(2):  # the first pod on the node, then the next
        subprocess.run([*as_init, *command[:-1], str(cache)], check=True)
        info = cache.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (1000, 100, 0o750)
    only_chown = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all,+chown"]
    refused = subprocess.run([*only_chown, *command[:-1], str(cache)], capture_output=True, text=True)
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr


@pytest.mark.integration
def test_the_model_cache_owner_follows_the_image_user(tmp_path):
    """The init command, run on a scratch directory with ids from the configuration (this
    process's own, so it runs without root)."""
    import os
    import stat
    import subprocess

    command = _init_command(Deployment(image=ImageSpec(user_id=os.getuid(), group_id=os.getgid())))
    cache = tmp_path / "hf-cache"
    cache.mkdir(mode=0o777)
    subprocess.run([*command[:-1], str(cache)], check=True)
    info = cache.stat()
    assert (info.st_uid, info.st_gid) == (os.getuid(), os.getgid())
    assert stat.S_IMODE(info.st_mode) == 0o750
