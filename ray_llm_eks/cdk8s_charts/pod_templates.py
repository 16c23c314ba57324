"""The Ray head and worker pod templates, as typed ``cdk8s_plus_35.k8s`` objects.

Placement (labels and taints of ``ray_llm_eks.spec.placement``, which the node groups put on
their nodes): the head runs on the system node (``role=system``); each worker group runs on its
own GPU node group (``role=prefill|decode``) and tolerates that pool's ``NoSchedule`` taint,
which keeps every other pod off the GPU nodes. Every figure below derives from the pool the
pods run on (:class:`ray_llm_eks.spec.ServingSpec`), never from a default of its own.

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
- EFA: ``vpc.amazonaws.com/efa: 1`` (the EFA device plugin mounts ``/dev/infiniband/uverbs*``).
- ``FI_PROVIDER=efa`` makes libfabric use EFA rather than probing TCP/sockets providers.
- ``FI_EFA_USE_HUGE_PAGE=0`` instead of requesting ``hugepages-2Mi``: EFA nodes pre-allocate
  2 MiB huge pages and libfabric's EFA provider maps its bounce buffers from them, but a pod
  that does not request huge pages gets a hugetlb cgroup limit of 0, and touching such a page
  kills the process with SIGBUS. Requesting them would tie scheduling to a per-node pool size
  the AMI sets and we do not control (a pod asking for more stays Pending). The KV cache itself
  is registered user memory (CUDA or host), not libfabric's bounce buffers, so the cost of
  regular pages is small (BRIEF section 2: "request hugepages-2Mi or set FI_EFA_USE_HUGE_PAGE=0").
- ``FI_EFA_USE_DEVICE_RDMA`` is never set: G-series GPUs have no GPUDirect RDMA
  (aws-ofi-nccl #547), and the instance table's ``gpudirect_rdma`` is False for all of them.
- ``VLLM_SSM_CONV_STATE_LAYOUT=DS`` on every worker: vLLM 0.26's NIXL path asserts it for every
  hybrid (Mamba/Gated-DeltaNet-style) model, whatever its name
  (``kv_connector/v1/nixl/base_worker.py``; vLLM PR #41869), and non-hybrid models ignore it.
  Set in both topologies, as are the NIXL ports, so switching topology leaves the pods alone
  and only the Serve config changes.
- ``/dev/shm``: a memory-backed emptyDir of :data:`SHM_SIZE_GIB`; Ray's object store is pinned
  to :data:`OBJECT_STORE_GIB` inside it (Ray caps its default at 10 GB or /dev/shm, and falls
  back to slow /tmp when /dev/shm is smaller); the rest is for NCCL and vLLM's shared-memory
  queues. Serve LLM passes requests and responses, not weights, through the object store.
- Model cache: a hostPath directory on the node's root volume, mounted at
  :data:`HF_CACHE_MOUNT_PATH` with ``HF_HOME`` pointing at it (see :data:`HF_CACHE_HOST_PATH`).
  Workers only: the head loads no model.
- Labels: only this project's own keys (:data:`POD_LABEL_PREFIX`) on pod templates, never
  ``app.kubernetes.io/*`` or ``ray.io/*`` (see :data:`KUBERAY_OWNED_LABEL_PREFIXES`).
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

from ..spec import observability, scaling, sizing
from ..spec.placement import ROLE_LABEL
from ..spec.serving import SERVE_PORT, SecurityProfile, ServingSpec
from . import serve_config

GPU_RESOURCE = "nvidia.com/gpu"
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
"""Cluster Autoscaler's pod annotation; ``"false"`` keeps it from removing the pod's node (its FAQ)."""
EFA_RESOURCE = "vpc.amazonaws.com/efa"
SHM_SIZE_GIB = 8
OBJECT_STORE_GIB = 4
GIB = 1024**3

HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = observability.WORKER_CONTAINER  # one name for the pods and the log filters

# Labels on every Ray pod of this deployment, so Services can select them without depending on
# the generated RayCluster name (which KubeRay suffixes with a hash).
POD_LABEL_PREFIX = "ray-llm-eks/"
INSTANCE_LABEL = f"{POD_LABEL_PREFIX}instance"
RAY_ROLE_LABEL = f"{POD_LABEL_PREFIX}ray-role"
SERVES_HTTP_LABEL = f"{POD_LABEL_PREFIX}serves-http"

KUBERAY_OWNED_LABEL_PREFIXES = ("app.kubernetes.io/", "ray.io/")
"""Label keys KubeRay sets on the pods it creates; pod templates must not set any of them.

KubeRay merges its own pod labels (``ray.io/cluster``, ``ray.io/node-type``, ``ray.io/group``,
``ray.io/identifier``, ``ray.io/is-ray-node``, ``app.kubernetes.io/name: kuberay``,
``app.kubernetes.io/created-by: kuberay-operator``) under the template's, so a template label
with the same key wins. But the selector of the RayService's ``<name>-head-svc``
(``BuildHeadServiceForRayService``) is built from KubeRay's defaults, so a head pod labelled
``app.kubernetes.io/name: ray-llm-eks`` matches no selector and that Service has no endpoints
(kuberay issues #2147, #2648). The whole ``app.kubernetes.io/`` and ``ray.io/`` namespaces are
kept off, not just today's keys. Top-level object metadata (the RayService, the Services) may
carry ``app.kubernetes.io/*``: KubeRay does not copy those onto pods.
"""

# Top-level object metadata only (see KUBERAY_OWNED_LABEL_PREFIXES).
APP_NAME_LABEL = "app.kubernetes.io/name"
APP_INSTANCE_LABEL = "app.kubernetes.io/instance"
NAME = "ray-llm-eks"

HF_CACHE_HOST_PATH = "/var/lib/ray-llm-eks/hf-cache"
"""Node directory (hostPath, ``DirectoryOrCreate``) that holds the Hugging Face cache of workers.

Without it, vLLM downloads the checkpoint (18 GiB for Qwen3.5-9B) into the container's writable
layer on every pod start, through the NAT gateway, and loses it when the pod restarts; the GPU
node's root volume (sized and provisioned at 1000 MiB/s for the checkpoint, see
``config.RootVolumeConfig``) was then never read. Under ``/var/lib`` it lives on that root
volume on the EKS AL2023 AMI. The first pod on a node downloads; later pods on the same node
(restarts, RayService re-creation) load from disk. It is node-local and shared by the worker
pods of that node; the GPU nodes are dedicated (taint), so only this deployment's workers
mount it. The hub cache stores one snapshot per commit, so a pinned revision is not mixed up
with another.
"""

HF_CACHE_MOUNT_PATH = "/var/cache/huggingface"
"""Where :data:`HF_CACHE_HOST_PATH` appears in the worker container; ``HF_HOME`` points here.

``HF_HOME`` is the root of every ``huggingface_hub`` cache, which vLLM (and Ray Serve LLM, which
hands Hugging Face ids to vLLM) downloads through: the hub cache defaults to ``$HF_HOME/hub``
(``HF_HUB_CACHE``), the Xet chunk cache to ``$HF_HOME/xet``.
"""

HF_CACHE_VOLUME = "hf-cache"
HF_CACHE_INIT_CONTAINER = "hf-cache-permissions"


@dataclass(frozen=True)
class NamedPort:
    name: str
    port: int


HEAD_PORTS = (
    NamedPort("gcs", 6379),
    NamedPort("dashboard", 8265),
    NamedPort("serve", SERVE_PORT),
    NamedPort("metrics", 8080),
)
"""The image does not declare ports; KubeRay's Services and probes look them up by these names."""

WORKER_PORTS = (
    NamedPort("serve", SERVE_PORT),
    NamedPort("metrics", 8080),
)


def pod_labels(spec: ServingSpec, ray_role: str, *, serves_http: bool) -> dict[str, str]:
    """Pod-template labels: this project's keys only (:data:`KUBERAY_OWNED_LABEL_PREFIXES`)."""
    return {
        INSTANCE_LABEL: spec.service_name,
        RAY_ROLE_LABEL: ray_role,
        SERVES_HTTP_LABEL: "true" if serves_http else "false",
    }


def _ports(ports: tuple[NamedPort, ...] | list[NamedPort]) -> list[k8s.ContainerPort]:
    return [k8s.ContainerPort(name=p.name, container_port=p.port, protocol="TCP") for p in ports]


def guaranteed(resources: sizing.PodResources, extra: Mapping[str, int] | None = None) -> k8s.ResourceRequirements:
    """Requests equal to limits: the Guaranteed QoS class (see ``sizing``)."""
    amounts = {
        "cpu": k8s.Quantity.from_string(resources.cpu_quantity),
        "memory": k8s.Quantity.from_string(resources.memory_quantity),
    }
    amounts.update({name: k8s.Quantity.from_number(count) for name, count in (extra or {}).items()})
    return k8s.ResourceRequirements(requests=dict(amounts), limits=dict(amounts))


NOBODY = 65534


def efa_counters_name(service_name: str) -> str:
    """The deployment gate's EFA counter reader DaemonSet, and its service account."""
    return f"{service_name}-efa-counters"


def locked_down() -> k8s.SecurityContext:
    """For the project's own helper containers: no capability, nothing writable, no way up."""
    return k8s.SecurityContext(
        allow_privilege_escalation=False, privileged=False, read_only_root_filesystem=True,
        capabilities=k8s.Capabilities(drop=["ALL"]), seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
    )


def non_root() -> k8s.PodSecurityContext:
    """nobody: the helpers (gate, EFA counter reader, bench) read, compute and send, nothing more."""
    return k8s.PodSecurityContext(run_as_non_root=True, run_as_user=NOBODY, run_as_group=NOBODY,
                                  seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"))


def _env(values: Mapping[str, str]) -> list[k8s.EnvVar]:
    return [k8s.EnvVar(name=name, value=value) for name, value in values.items()]


def worker_env() -> dict[str, str]:
    """The same in both topologies and for every model (see the module docstring)."""
    return {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_HUGE_PAGE": "0",
        "HF_HOME": HF_CACHE_MOUNT_PATH,
        # Explicit as well: an HF_HUB_CACHE baked into the image would win over the $HF_HOME/hub
        # default and send downloads back into the container's writable layer.
        "HF_HUB_CACHE": f"{HF_CACHE_MOUNT_PATH}/hub",
        "VLLM_SSM_CONV_STATE_LAYOUT": "DS",
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


def hf_cache_volume() -> k8s.Volume:
    return k8s.Volume(
        name=HF_CACHE_VOLUME,
        host_path=k8s.HostPathVolumeSource(path=HF_CACHE_HOST_PATH, type="DirectoryOrCreate"),
    )


HF_CACHE_MODE = "0750"


def hf_cache_init_container(spec: ServingSpec) -> k8s.Container:
    """Gives the node's model cache to the image's user, and only to it.

    The kubelet creates a ``DirectoryOrCreate`` hostPath as root, mode 0755, which a non-root
    image user could not write. This container runs as root with every capability dropped but
    CHOWN and FOWNER, and makes the directory ``<user_id>:<group_id>`` mode 0750: the Ray process writes the
    weights, its group reads them, nobody else on the node does (the admission policy keeps other
    pods from mounting host paths at all). An image that runs as root writes there anyway. Same
    image as the Ray container, so nothing else is pulled. Requests equal limits, so the pod
    stays in the Guaranteed QoS class (which counts init containers too); an init container's
    request is below the Ray container's, so it changes nothing in scheduling.
    """
    amounts = {"cpu": k8s.Quantity.from_string("100m"), "memory": k8s.Quantity.from_string("64Mi")}
    owner = f"{spec.image.user_id}:{spec.image.group_id}"
    # FOWNER beside CHOWN: the directory outlives the pod, so from the second pod on a node it
    # already belongs to the image user, and root may change its mode only with CAP_FOWNER
    # (chmod(2)). With both, the command is the same on every run.
    return k8s.Container(
        name=HF_CACHE_INIT_CONTAINER,
        image=spec.image_uri,
        command=["sh", "-c", f'chown {owner} "$0" && chmod {HF_CACHE_MODE} "$0"', HF_CACHE_MOUNT_PATH],
        resources=k8s.ResourceRequirements(requests=dict(amounts), limits=dict(amounts)),
        security_context=k8s.SecurityContext(
            run_as_user=0,
            run_as_non_root=False,
            privileged=False,
            allow_privilege_escalation=False,
            read_only_root_filesystem=True,
            capabilities=k8s.Capabilities(drop=["ALL"], add=["CHOWN", "FOWNER"]),
        ),
        volume_mounts=[k8s.VolumeMount(name=HF_CACHE_VOLUME, mount_path=HF_CACHE_MOUNT_PATH)],
    )


HF_TOKEN_VOLUME = "hf-token"
HF_TOKEN_INIT_CONTAINER = "hf-token"
HF_TOKEN_DIR = "/var/run/secrets/huggingface"
HF_TOKEN_FILE = f"{HF_TOKEN_DIR}/token"
HF_TOKEN_SCRIPT = """\
import os, sys
try:
    import boto3
except ImportError:
    sys.exit("hf-token: the serving image has no boto3, so the Hugging Face token cannot be read from "
             "Secrets Manager; use an image with boto3 (botocore 1.32 or later, for EKS Pod Identity)")
secret_id = os.environ["HF_TOKEN_SECRET"]
client = boto3.client("secretsmanager", region_name=os.environ["AWS_REGION"])
token = (client.get_secret_value(SecretId=secret_id).get("SecretString") or "").strip()
if not token:
    sys.exit(f"hf-token: secret {secret_id} has no SecretString")
path = os.environ["HF_TOKEN_PATH"]
partial = path + ".partial"
if os.path.exists(partial):
    os.unlink(partial)
fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
os.write(fd, token.encode())
os.close(fd)
os.replace(partial, path)  # a rerun of this container (same pod) replaces its own read-only file
print(f"hf-token: wrote the token from {secret_id}")
"""


def hf_token_region(spec: ServingSpec) -> str:
    """The secret's own region when an ARN names it, else the deployment's."""
    secret = spec.model.hf_token_secret or ""
    return secret.split(":")[3] if secret.startswith("arn:") else spec.region


def hf_token_init_container(spec: ServingSpec) -> k8s.Container:
    """Reads the Hugging Face token from Secrets Manager into a memory-backed volume of this pod.

    The token never enters the template, the manifests or the pod spec: this container fetches
    it at start with the pod's own role (EKS Pod Identity; the role may read this one secret) and
    writes it, mode 0400 and owned by the image's user (no ``runAsUser``: the Ray container runs
    as the same user), where ``HF_TOKEN_PATH`` points huggingface_hub (v0.23+ reads that variable).
    It uses the serving image's Python and boto3 (in the rayproject base image; botocore gained
    Pod Identity credentials in 1.32), so nothing else is pulled.
    """
    amounts = {"cpu": k8s.Quantity.from_string("250m"), "memory": k8s.Quantity.from_string("256Mi")}
    return k8s.Container(
        name=HF_TOKEN_INIT_CONTAINER,
        image=spec.image_uri,
        command=["python3", "-c", HF_TOKEN_SCRIPT],
        env=_env({"HF_TOKEN_SECRET": spec.model.hf_token_secret or "", "AWS_REGION": hf_token_region(spec),
                  "HF_TOKEN_PATH": HF_TOKEN_FILE}),
        resources=k8s.ResourceRequirements(requests=dict(amounts), limits=dict(amounts)),
        security_context=k8s.SecurityContext(
            privileged=False, allow_privilege_escalation=False, read_only_root_filesystem=True,
            capabilities=k8s.Capabilities(drop=["ALL"]), seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault")),
        volume_mounts=[k8s.VolumeMount(name=HF_TOKEN_VOLUME, mount_path=HF_TOKEN_DIR)],
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


def autoscaler_api_volume() -> k8s.Volume:
    """The service account's API credentials as the kubelet would mount them, for the Ray
    autoscaler container only: the pods keep ``automountServiceAccountToken: false``, so the Ray
    head process itself holds no token (KubeRay binds its autoscaler Role, pods get/list/watch and
    rayclusters get/patch, to the head's account)."""
    return k8s.Volume(name=AUTOSCALER_API_VOLUME, projected=k8s.ProjectedVolumeSource(sources=[
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
        metadata=k8s.ObjectMeta(labels=pod_labels(spec, "head", serves_http=False)),
        spec=k8s.PodSpec(
            service_account_name=service_account,
            automount_service_account_token=False,  # the account's own setting, stated on the pod too
            volumes=[autoscaler_api_volume()] if spec.autoscaling else None,
            node_selector=spec.system.labels,
            containers=[
                k8s.Container(
                    name=HEAD_CONTAINER,
                    image=spec.image_uri,
                    env=_env(_gcs_head_env()) if spec.service.gcs_fault_tolerance.enabled else None,
                    ports=_ports(HEAD_PORTS),
                    resources=guaranteed(spec.head_resources),
                    security_context=head_security_context(),
                )
            ],
        ),
    )


def _gcs_head_env() -> dict[str, str]:
    from .gcs_redis import head_env  # gcs_redis builds on this module

    return head_env()


def head_security_context() -> k8s.SecurityContext:
    """The head runs GCS, the dashboard and the Serve controller: no GPU, no EFA, no device, so
    no capability and no syscall outside the runtime's default profile.

    Not set, for want of a test on the deployed image (docs/threat-model.md): ``runAsNonRoot``
    (the serving image's user is not known to this library; a root-user image would then refuse
    to start) and a read-only root filesystem (Ray writes its session directory under /tmp and
    its logs next to it)."""
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
            annotations={SAFE_TO_EVICT_ANNOTATION: "false"} if spec.autoscaling else None),
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
                    env=_env({**worker_env(), **({"HF_TOKEN_PATH": HF_TOKEN_FILE} if with_token else {})}),
                    ports=_ports([*WORKER_PORTS, *nixl_ports]),
                    resources=guaranteed(
                        spec.worker_resources(role),
                        {GPU_RESOURCE: pool.gpus_per_node, EFA_RESOURCE: 1},
                    ),
                    security_context=worker_security_context(spec.service.security_profile),
                    volume_mounts=[
                        k8s.VolumeMount(name="dshm", mount_path="/dev/shm"),
                        k8s.VolumeMount(name=HF_CACHE_VOLUME, mount_path=HF_CACHE_MOUNT_PATH),
                        *([k8s.VolumeMount(name=HF_TOKEN_VOLUME, mount_path=HF_TOKEN_DIR, read_only=True)]
                          if with_token else []),
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
            ],
        ),
    )
