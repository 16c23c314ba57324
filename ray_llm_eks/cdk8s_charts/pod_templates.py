"""The Ray head and worker pod templates, as typed ``cdk8s_plus_35.k8s`` objects.

Placement (labels and taints of ``ray_llm_eks.base.placement``, which the node groups put on
their nodes): the head runs on the system node (``role=system``); each worker group runs on its
own GPU node group (``role=prefill|decode``) and tolerates that pool's ``NoSchedule`` taint,
which keeps every other pod off the GPU nodes. Every figure below derives from the pool the
pods run on (:class:`ray_llm_eks.base.ServingSpec`), never from a default of its own.

Worker choices, each with its reason:

- GPUs: ``nvidia.com/gpu`` = every GPU of the node, and ``rayStartParams.num-gpus`` the same
  number (KubeRay docs: keep them equal, or Ray schedules on GPUs the pod does not have).
- Ray custom resource: ``rayStartParams.resources`` advertises one unit of the role's resource
  (``prefill`` or ``decode``) per GPU, which that leg's placement group requires, so Ray places
  each leg's replicas on its own worker group only (``serve_config`` module docstring).
  Format: KubeRay pastes each rayStartParam into the ``/bin/bash -c`` command line as
  ``--<key>=<value>``, so the value is shell-quoted: ``'{"prefill":1}'``, single quotes around
  compact JSON. That is the form KubeRay itself writes when it fills ``resources``
  (``ray-operator/controllers/ray/common/pod.go``: ``fmt.Sprintf("'%s'", json)``), the form
  ``ray start``'s own error message shows, and it also parses in KubeRay's ``getResourcesMap``
  (which trims the outer quotes and unmarshals the JSON). The older docs form
  ``'"{\"Custom1\": 1}"'`` also works in bash but leaves backslashes that KubeRay's parser
  cannot read.
- EFA: ``vpc.amazonaws.com/efa`` = every EFA device of the node (``WorkerPool.efa_per_node``: 32
  on p5.48xlarge, 4 on p4d.24xlarge and g6e.48xlarge, 1 on single-card types). The device plugin
  advertises one per EFA interface and mounts the ``/dev/infiniband/uverbs*`` of the ones a pod
  gets ("Each EFA device is exclusively allocated to one Pod", EKS user guide,
  device-management-efa); NIXL's LIBFABRIC backend opens one rail per device it sees
  (nixl v1.3.1 ``libfabric_rail_manager.cpp`` ``createRails``), so a pod with one device would
  leave the other cards unused.
- ``FI_PROVIDER=efa`` (``wire.EXPECTED_PROVIDER``) makes libfabric use EFA rather than probing
  TCP/sockets providers.
- ``FI_EFA_USE_HUGE_PAGE=0`` instead of requesting ``hugepages-2Mi``: EFA nodes pre-allocate
  2 MiB huge pages and libfabric's EFA provider maps its bounce buffers from them, but a pod
  that does not request huge pages gets a hugetlb cgroup limit of 0, and touching such a page
  kills the process with SIGBUS. Requesting them would tie scheduling to a per-node pool size
  the AMI sets and we do not control (a pod asking for more stays Pending). The KV cache itself
  is registered user memory (CUDA or host), not libfabric's bounce buffers, so the cost of
  regular pages is small. The pool: "5128 2MiB Huge Pages, which you can request as resources"
  (awsdocs/amazon-eks-user-guide ``latest/ug/ml/node-efa.adoc:55``@4d52b4d0); the switch: "By
  default, EFA provider will use huge page" (ofiwg/libfabric ``man/fi_efa.7.md:517``@v2.5.1).
- ``FI_EFA_USE_DEVICE_RDMA`` is never set: G-series has no GPUDirect RDMA (aws-ofi-nccl #547),
  where setting it to 1 aborts the application, and on P-series libfabric uses the device's RDMA
  anyway when it is unset ("If not set, RDMA operations will occur when available",
  ofiwg/libfabric ``man/fi_efa.7.md``; aws-ofi-nccl ``doc/efa-env-var.md``: "Do not set for
  libfabric>=1.18.0").
- The KV path's environment (``ServingSpec.kv_path.env``, the table in ``base.kv_path``):
  ``VLLM_SSM_CONV_STATE_LAYOUT=DS``, which vLLM 0.26.0's NIXL path asserts for every hybrid
  (Mamba/Gated-DeltaNet) model (``kv_connector/v1/nixl/base_worker.py:307``; vLLM PR #41869) and
  other models never read: on every worker, in both topologies, as are the NIXL ports, so switching
  model or topology leaves the pods alone and only the Serve config changes.
- ``/dev/shm``: a memory-backed emptyDir of :data:`SHM_SIZE_GIB`; Ray's object store is pinned
  to :data:`OBJECT_STORE_GIB` inside it (Ray caps its default at 10 GB or /dev/shm, and falls
  back to slow /tmp when /dev/shm is smaller); the rest is for NCCL and vLLM's shared-memory
  queues. Serve LLM passes requests and responses, not weights, through the object store.
- Model cache: a hostPath directory on the node's root volume, mounted at
  ``model_cache.HF_CACHE_MOUNT_PATH`` with ``HF_HOME`` pointing at it (:mod:`.model_cache`).
  Workers only: the head loads no model. A gated model's token: :mod:`.hf_token`.
- Labels: only this project's own keys (``wire.LABEL_PREFIX``) on pod templates, never
  ``app.kubernetes.io/*`` or ``ray.io/*`` (:mod:`.labels`).
- Security: ``privileged`` (the reference deployment; NIXL registers memory with the EFA
  device) or ``ipc-lock`` (experimental, see docs/rayservice.md): not privileged, no privilege
  escalation, capability ``IPC_LOCK`` only, which lets the process pin memory for RDMA
  registration past ``RLIMIT_MEMLOCK``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from cdk8s_plus_35 import k8s

from ..base import scaling
from ..base.placement import ROLE_LABEL
from ..base.serving import SERVE_PORT, SecurityProfile, ServingSpec
from ..base.wire import EFA_RESOURCE, EXPECTED_PROVIDER, GPU_RESOURCE, METRICS_PORT, WORKER_CONTAINER
from . import serve_config
from .containers import env_vars, guaranteed
from .gcs_redis import head_env as gcs_head_env
from .hf_token import HF_TOKEN_DIR, HF_TOKEN_FILE, HF_TOKEN_VOLUME, hf_token_init_container
from .labels import NODE_POOL_ANNOTATION, pod_labels
from .model_cache import HF_CACHE_MOUNT_PATH, HF_CACHE_VOLUME, hf_cache_init_container, hf_cache_volume
from ..pd import bundle as pd_bundle

PD_PROGRAM_VOLUME = "pd-program"


def pd_program_config_map(spec: ServingSpec) -> str:
    """The ConfigMap that carries the conditional P/D program's archive (:mod:`ray_llm_eks.pd.bundle`)."""
    return f"{spec.service_name}-pd-program"


def _pd_program(spec: ServingSpec) -> tuple[list[k8s.Volume], list[k8s.VolumeMount]]:
    """The archive's read-only mount on a Ray pod, only with ``disaggregation.min_prompt_tokens``:
    Serve builds the application wherever it runs the build task and places the decode replicas on
    the workers, and each node's runtime-env agent copies the ``file://`` URI from its own disk, so
    every Ray pod mounts it."""
    if not spec.disaggregation.min_prompt_tokens:
        return [], []
    name = pd_bundle.archive_name()
    return ([k8s.Volume(name=PD_PROGRAM_VOLUME, config_map=k8s.ConfigMapVolumeSource(
                name=pd_program_config_map(spec), items=[k8s.KeyToPath(key=name, path=name)]))],
            [k8s.VolumeMount(name=PD_PROGRAM_VOLUME, mount_path=pd_bundle.MOUNT_DIR, read_only=True)])

SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
"""Cluster Autoscaler's pod annotation; ``"false"`` keeps it from removing the pod's node (its FAQ)."""
SHM_SIZE_GIB = 8
OBJECT_STORE_GIB = 4
GIB = 1024**3

HEAD_CONTAINER = "ray-head"


@dataclass(frozen=True)
class NamedPort:
    name: str
    port: int


HEAD_PORTS = (
    NamedPort("gcs", 6379),
    NamedPort("dashboard", 8265),
    NamedPort("serve", SERVE_PORT),
    NamedPort("metrics", METRICS_PORT),
)
"""The image does not declare ports; KubeRay's Services and probes look them up by these names."""

WORKER_PORTS = (
    NamedPort("serve", SERVE_PORT),
    NamedPort("metrics", METRICS_PORT),
)


def _ports(ports: tuple[NamedPort, ...] | list[NamedPort]) -> list[k8s.ContainerPort]:
    return [k8s.ContainerPort(name=p.name, container_port=p.port, protocol="TCP") for p in ports]


def worker_env(spec: ServingSpec) -> dict[str, str]:
    """The same in both topologies and for every model (module docstring); the KV path's variables
    come from the KV-path table."""
    return {
        "FI_PROVIDER": EXPECTED_PROVIDER,
        "FI_EFA_USE_HUGE_PAGE": "0",
        "HF_HOME": HF_CACHE_MOUNT_PATH,
        # Explicit as well: an HF_HUB_CACHE baked into the image would win over the $HF_HOME/hub
        # default and send downloads back into the container's writable layer.
        "HF_HUB_CACHE": f"{HF_CACHE_MOUNT_PATH}/hub",
        **spec.kv_path.env,
        # The lines that prove the KV path are INFO in NIXL's C++ logger, which defaults to WARN
        # (nixl v1.3.1 src/utils/common/nixl_log.cpp). Harmless in the colocated topology (no
        # NIXL agent), where keeping it leaves the pods unchanged when only the topology changes.
        "NIXL_LOG_LEVEL": "INFO",
        # Worker processes (Serve replicas and their vLLM engine subprocesses) write to the
        # container's stdout/stderr instead of files under /tmp/ray, so `kubectl logs` and the
        # deployment gate see the NIXL and vLLM lines (Ray 2.58: core_worker_process.cc skips
        # its redirection when RAY_LOG_TO_STDERR is true; node.py's should_redirect_logs).
        "RAY_LOG_TO_STDERR": "1",
        # vLLM 0.26 refuses every KV connector when the CUDA caching allocator uses expandable
        # segments (vllm/config/vllm.py), and NIXL cannot register such memory. Set explicitly
        # under both names PyTorch reads (PYTORCH_ALLOC_CONF since 2.9), so an image default of
        # expandable_segments:True can never be inherited.
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
        "PYTORCH_ALLOC_CONF": "expandable_segments:False",
    }


def worker_security_context(profile: SecurityProfile) -> k8s.SecurityContext:
    if profile is SecurityProfile.privileged:
        return k8s.SecurityContext(privileged=True)
    return k8s.SecurityContext(
        privileged=False,
        allow_privilege_escalation=False,
        capabilities=k8s.Capabilities(add=["IPC_LOCK"]),
    )


def head_ray_start_params() -> dict[str, str]:
    # num-cpus 0 as well as num-gpus 0: no Serve replica (ingress or model) lands on the small
    # system node; the GCS, dashboard and Serve controller need no logical CPUs.
    return {"num-gpus": "0", "num-cpus": "0", "dashboard-host": "0.0.0.0"}


def ray_resources_param(resources: Mapping[str, int]) -> str:
    """``rayStartParams.resources``: compact JSON in single quotes, for KubeRay's bash command line."""
    text = json.dumps(dict(resources), separators=(",", ":"), sort_keys=True)
    if "'" in text:
        raise ValueError(f"Ray resource names must not contain a single quote: {text}")
    return f"'{text}'"


def worker_ray_start_params(spec: ServingSpec, role: str) -> dict[str, str]:
    return {
        "num-gpus": str(spec.pool(role).gpus_per_node),
        "num-cpus": str(spec.worker_resources(role).whole_cpus),
        "object-store-memory": str(OBJECT_STORE_GIB * GIB),
        "resources": ray_resources_param(serve_config.worker_custom_resources(spec, role)),
    }


AUTOSCALER_API_VOLUME = "autoscaler-api-access"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the Ray autoscaler reads its token, CA and namespace (Ray 2.58
``autoscaler/_private/kuberay/node_provider.py``, ``load_k8s_secrets``)."""


def autoscaler_api_volume(name: str = AUTOSCALER_API_VOLUME) -> k8s.Volume:
    """The service account's API credentials as the kubelet would mount them, for the Ray
    autoscaler container only: the pods keep ``automountServiceAccountToken: false``, so the Ray
    head process itself holds no token (KubeRay binds its autoscaler Role, pods get/list/watch and
    rayclusters get/patch, to the head's account). Continuous verification mounts the same, under
    its own ``name``, into its one container."""
    return k8s.Volume(name=name, projected=k8s.ProjectedVolumeSource(sources=[
        k8s.VolumeProjection(service_account_token=k8s.ServiceAccountTokenProjection(
            path="token", expiration_seconds=3607)),
        k8s.VolumeProjection(config_map=k8s.ConfigMapProjection(
            name="kube-root-ca.crt", items=[k8s.KeyToPath(key="ca.crt", path="ca.crt")])),
        k8s.VolumeProjection(downward_api=k8s.DownwardApiProjection(items=[k8s.DownwardApiVolumeFile(
            path="namespace", field_ref=k8s.ObjectFieldSelector(field_path="metadata.namespace"))])),
    ]))


def head_service_account(spec: ServingSpec) -> str:
    """The head pod's account when autoscaled (``<svc>-head``), which KubeRay's autoscaler Role is
    bound to; the workers keep the deployment's own account, which has no Kubernetes rights."""
    return f"{spec.service_name}-head"


def autoscaler_options() -> dict[str, Any]:
    """KubeRay's ``autoscalerOptions`` (v1.4.0 CRD): the Ray autoscaler v2 (KubeRay then sets
    ``restartPolicy: Never`` on the Ray pods, which v2 needs; ``version`` is new in v1.4.0),
    ``Default`` upscaling, idle pods removed after 60 s, its requests counted in the system
    node's budget (``spec.scaling.RAY_AUTOSCALER``), the API credentials mounted into it alone."""
    return {
        "version": "v2",
        "upscalingMode": "Default",
        "idleTimeoutSeconds": scaling.RAY_IDLE_TIMEOUT_SECONDS,
        "resources": scaling.RAY_AUTOSCALER.guaranteed_json(),
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": AUTOSCALER_API_VOLUME, "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}],
    }


def head_template(spec: ServingSpec, service_account: str) -> k8s.PodTemplateSpec:
    return k8s.PodTemplateSpec(
        metadata=k8s.ObjectMeta(labels=pod_labels(spec, "head", serves_http=False),
                                annotations={NODE_POOL_ANNOTATION: spec.system.node_identity}),
        spec=k8s.PodSpec(
            service_account_name=service_account,
            automount_service_account_token=False,  # the account's own setting, stated on the pod too
            security_context=head_pod_security_context(spec),
            volumes=[*([autoscaler_api_volume()] if spec.autoscaling else []), *_pd_program(spec)[0]] or None,
            node_selector=spec.system.labels,
            containers=[
                k8s.Container(
                    name=HEAD_CONTAINER,
                    image=spec.image_uri,
                    env=env_vars(gcs_head_env()) if spec.service.gcs_fault_tolerance.enabled else None,
                    ports=_ports(HEAD_PORTS),
                    resources=guaranteed(spec.head_resources),
                    security_context=head_security_context(),
                    volume_mounts=_pd_program(spec)[1] or None,
                )
            ],
        ),
    )


def head_pod_security_context(spec: ServingSpec) -> k8s.PodSecurityContext:
    """The head (and KubeRay's autoscaler container beside it) runs as the image's user
    (``image.user_id``:``image.group_id``, 1000:100 by default, the user the workers' model cache
    already belongs to), never as root: it holds the cluster's control plane (GCS, the dashboard
    and Jobs API), so whoever breaks into it is not also root in its container. The admission
    policy requires exactly this user of the head (``serving-admission-policy``)."""
    return k8s.PodSecurityContext(run_as_non_root=True, run_as_user=spec.image.user_id,
                                  run_as_group=spec.image.group_id,
                                  seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"))


def head_security_context() -> k8s.SecurityContext:
    """The head runs GCS, the dashboard and the Serve controller: no GPU, no EFA, no device, so
    no capability and no syscall outside the runtime's default profile; it runs as the image's
    user (:func:`head_pod_security_context`).

    Not set: a read-only root filesystem (Ray writes its session directory under /tmp and its
    logs next to it)."""
    return k8s.SecurityContext(
        allow_privilege_escalation=False, privileged=False,
        capabilities=k8s.Capabilities(drop=["ALL"]), seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
    )


def worker_template(spec: ServingSpec, role: str, service_account: str) -> k8s.PodTemplateSpec:
    pool = spec.pool(role)
    with_token = spec.model.hf_token_secret is not None
    nixl_ports = [NamedPort(f"nixl-{index}", port) for index, port in enumerate(spec.nixl_side_channel_ports(role))]
    return k8s.PodTemplateSpec(
        metadata=k8s.ObjectMeta(
            labels=pod_labels(spec, role, serves_http=True),
            # Cluster Autoscaler never drains a serving node: the Ray autoscaler removes idle
            # worker pods itself, and Cluster Autoscaler then removes the empty node.
            annotations={NODE_POOL_ANNOTATION: pool.node_identity,
                         **({SAFE_TO_EVICT_ANNOTATION: "false"} if spec.autoscaling else {})}),
        spec=k8s.PodSpec(
            service_account_name=service_account,
            automount_service_account_token=False,  # the account's own setting, stated on the pod too
            node_selector={ROLE_LABEL: pool.labels[ROLE_LABEL]},
            tolerations=[
                k8s.Toleration(key=pool.taint.key, operator="Equal", value=pool.taint.value, effect=pool.taint.effect)
            ],
            init_containers=[hf_cache_init_container(spec),
                             *([hf_token_init_container(spec)] if with_token else [])],
            containers=[
                k8s.Container(
                    name=WORKER_CONTAINER,
                    image=spec.image_uri,
                    env=env_vars({**worker_env(spec), **({"HF_TOKEN_PATH": HF_TOKEN_FILE} if with_token else {})}),
                    ports=_ports([*WORKER_PORTS, *nixl_ports]),
                    resources=guaranteed(
                        spec.worker_resources(role),
                        {GPU_RESOURCE: pool.gpus_per_node, EFA_RESOURCE: pool.efa_per_node},
                    ),
                    security_context=worker_security_context(spec.service.security_profile),
                    volume_mounts=[
                        k8s.VolumeMount(name="dshm", mount_path="/dev/shm"),
                        k8s.VolumeMount(name=HF_CACHE_VOLUME, mount_path=HF_CACHE_MOUNT_PATH),
                        *([k8s.VolumeMount(name=HF_TOKEN_VOLUME, mount_path=HF_TOKEN_DIR, read_only=True)]
                          if with_token else []),
                        *_pd_program(spec)[1],
                    ],
                )
            ],
            volumes=[
                k8s.Volume(
                    name="dshm",
                    empty_dir=k8s.EmptyDirVolumeSource(
                        medium="Memory", size_limit=k8s.Quantity.from_string(f"{SHM_SIZE_GIB}Gi")
                    ),
                ),
                hf_cache_volume(),
                *([k8s.Volume(name=HF_TOKEN_VOLUME, empty_dir=k8s.EmptyDirVolumeSource(
                    medium="Memory", size_limit=k8s.Quantity.from_string("1Mi")))] if with_token else []),
                *_pd_program(spec)[0],
            ],
        ),
    )
