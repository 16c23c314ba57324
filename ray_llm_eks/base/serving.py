"""What the RayService serves and how: model, image, topology, engine settings, and the pools it runs on.

:class:`ServingSpec` is the one object both halves read for serving: the Kubernetes side renders
its pods and Serve config from it, the AWS side (``constructs.serving.RayLlmServing``) builds it
from the node groups it is given, and ``ray-llm-eks plan`` prices and sizes it. It validates
itself when built, so every entry point refuses the same combinations with the same message.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal, Mapping, get_args

from .models import GATED_HUB_ORGANISATIONS, ModelArchitecture, is_gated, is_hybrid_gated_deltanet, known_architecture
from . import engine_args, scaling, sizing
from .errors import Collector, DoesNotFit, SpecError, SpecErrors, not_a_credential, problem
from .kv_path import IMAGE_STACKS, NO_PATH_INSTEAD, UPSTREAM_CODE, ImageStack, KvPath, attention_kind
from .kv_path import resolve as resolve_kv_path
from .infrastructure import (
    DEFAULT_KUBERAY_VERSION,
    KUBERAY_NAMESPACE,
    NVIDIA_DEVICE_PLUGIN_SERVICE_ACCOUNT,
    ipv4_network,
    instance_type_offered,
    region as check_region,
    semver,
)
from .memory import DTYPE_BYTES, MemoryBudget, memory_budget
from .placement import DECODE, PREFILL, WORKER_ROLES
from .pools import SystemPool, WorkerPool
from .routing import RequestRouter, request_router_of
from .units import GIB
from .wire import LABEL_PREFIX


class Topology(str, Enum):
    disaggregated = "disaggregated"
    colocated = "colocated"


class SecurityProfile(str, Enum):
    privileged = "privileged"
    """What the reference does: NIXL registers CUDA memory with the EFA device."""
    ipc_lock = "ipc-lock"
    """Experimental: not privileged, capability IPC_LOCK only. Unverified on real nodes."""


class RayAuth(str, Enum):
    """Ray's own authentication of its control plane (GCS, dashboard, Jobs API, Ray Client)."""

    disabled = "disabled"
    token = "token"


RAY_AUTH_MIN_KUBERAY = (1, 5, 1)
"""First KubeRay with ``rayClusterConfig.authOptions`` (ray-project/kuberay v1.5.1,
``ray-operator/apis/ray/v1/raycluster_types.go``; not in v1.5.0 or v1.4.0's CRD)."""
RAY_AUTH_MIN_RAY = (2, 52, 0)
"""Ray token authentication arrived in 2.52; KubeRay refuses ``authOptions`` with an older
``rayVersion`` (v1.5.1 ``utils/validation.go``)."""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.lstrip("v").split("."))


class EndpointType(str, Enum):
    cluster_ip = "ClusterIP"
    internal_nlb = "internal-nlb"


# --- facts and defaults, each stated once ----------------------------------------------------------

DLC_ACCOUNT = "763104351884"
"""The AWS account that publishes the AWS Deep Learning Containers, including the Ray LLM image."""
DLC_REPOSITORY_NAME = "ray"
DEFAULT_IMAGE_TAG = "serve-llm-cuda-v1.0"
DLC_TAG_RAY_VERSIONS = {tag: stack.ray for tag, stack in IMAGE_STACKS.items()}
"""The Ray inside each AWS Ray LLM DLC tag (``kv_path.IMAGE_STACKS``, where the vLLM and NIXL are too)."""
DEFAULT_RAY_VERSION = DLC_TAG_RAY_VERSIONS[DEFAULT_IMAGE_TAG]

DEFAULT_NAMESPACE = "inference"
DEFAULT_SERVICE_NAME = "ray-llm"
RAY_SERVICE_NAME_MAX = 47
"""KubeRay derives longer names from a RayService's name and refuses more than 47 characters."""

SERVE_PORT = 8000
"""Ray Serve's HTTP proxy; the image does not declare it, so the pods do."""

NIXL_SIDE_CHANNEL_PORT_BASE = {PREFILL: 20000, DECODE: 22000}
"""Ray's defaults for the two legs (``experimental_configs.NIXL_SIDE_CHANNEL_PORT_BASE``;
PDServingArgs defaults decode to 22000), written out so pods and Serve agree."""

NixlBackend = Literal["LIBFABRIC", "UCX"]
KvBufferDevice = Literal["cuda", "cpu"]
Dtype = Literal["bfloat16", "float16", "auto"]
NIXL_BACKENDS: tuple[str, ...] = get_args(NixlBackend)
KV_BUFFER_DEVICES: tuple[str, ...] = get_args(KvBufferDevice)

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_ECR_REPOSITORY = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([a-z0-9._/-]+)$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/\S*)?$")  # bucket names: 3-63 of a-z 0-9 . -
_LOCAL_PATH = re.compile(r"^(/|\.{1,2}(/|\\|$)|~|file:|[A-Za-z]:[\\/]|\\)")
_SECRET_ARN = re.compile(r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+$")
_SECRET_NAME = re.compile(r"^[A-Za-z0-9/_+=.@-]{1,512}$")
_CACHE_NODE_TYPE = re.compile(r"^cache\.[a-z0-9]+\.[a-z0-9]+$")
_SEMVER_TEXT = re.compile(r"^\d+\.\d+\.\d+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DEFAULT_EGRESS_CIDRS = ("0.0.0.0/0",)
DEFAULT_ADMISSION_EXEMPT_AGENTS = tuple(f"kube-system/{account}" for account in (
    "aws-node", "kube-proxy", "eks-pod-identity-agent", NVIDIA_DEVICE_PLUGIN_SERVICE_ACCOUNT, "default"))
"""The EKS node agents (host network, host paths, privileged, every taint tolerated) by account:
aws-node and kube-proxy (the add-ons' own accounts); the Pod Identity agent, whose chart names no
account in some versions (aws/eks-pod-identity-agent ``charts/.../daemonset.yaml``) and its own in
others; the NVIDIA device plugin (its chart's ``<release>-service-account``); and ``default``, which
the EFA device plugin runs as (aws/eks-charts ``stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml``
names no account) and the Pod Identity agent may. Each is exempt only when its controller creates
the pod (``infrastructure.AGENT_CONTROLLER_USERS``)."""
DEFAULT_EXEC_ADMINS = ("group:system:masters",)
"""Who may ``exec``, ``attach`` or ``port-forward`` into the serving namespace's pods by default:
the group that bypasses authorization (``SystemPrivilegedGroup``, kubernetes
``staging/src/k8s.io/apiserver/pkg/authentication/user/user.go``), whose members could delete the
policy anyway. EKS refuses ``system:`` groups in access entries, so on an access-entry cluster
nobody until you name your admins."""
_EXEC_ADMIN = re.compile(r"^(user|group):([^\s'\"\\*]+)(\*?)$")
_AGENT = re.compile(r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)/([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)$")
DEFAULT_IMAGE_USER_ID, DEFAULT_IMAGE_GROUP_ID = 1000, 100
DEFAULT_CACHE_NODE_TYPE = "cache.t4g.small"
SERVING_INSTANCE_NAMESPACE_LABEL = f"{LABEL_PREFIX}serving-instance"
"""On the serving namespace, valued with the service name (which deployment owns it). No
admission decision reads it: anyone who may create a namespace could set it."""



def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _enum(found: Collector, cls: type[Enum], value: Any, name: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        # The configuration says the same for the same value (config.py, pydantic's enum errors).
        found.add(problem(name, value, "not one of the accepted values", ", ".join(m.value for m in cls)))
        return None


MODEL_SOURCES_ACCEPTED = ("a Hugging Face id organisation/name such as Qwen/Qwen3.5-9B, or an s3:// URI of the weights "
                          "such as s3://bucket/prefix/ (copy local weights there first: aws s3 sync DIR s3://bucket/prefix/)")


def model_source_problem(source: object) -> str | None:
    """Why the pods cannot fetch ``source`` (a ``model.source``), or None when they can: the
    workers download a Hugging Face id from the Hub, and an ``s3://`` URI with their own role
    (the revision and the S3 read are theirs). A path names the disk of the machine that renders
    the configuration, which no node has: rendered into the pods, vLLM fails at start, on every node."""
    if not isinstance(source, str) or not source.strip():
        return "empty model source"
    if _HUB_ID.match(source) or _S3_URI.match(source):
        return None
    if _LOCAL_PATH.match(source):
        return "a local path: the pods cannot read the files of the machine that renders the configuration"
    if "://" in source:
        return "a URI the pods do not fetch"
    return "not a Hugging Face id (organisation/name) or an s3:// URI"


@dataclass(frozen=True)
class ModelSpec:
    """The served model and the vLLM engine settings both legs share."""

    __pydantic_config__ = {"extra": "forbid"}

    source: str = "Qwen/Qwen3.5-9B"
    """Hugging Face repository id (``organisation/name``) or an ``s3://`` URI of the weights (a local path is refused: the pods cannot read the machine that renders the configuration); must be in the package's architecture table (``ray_llm_eks.base.models``) or come with ``architecture`` (written out, or ``auto``)."""
    served_name: str = "qwen3.5-9b"
    """The OpenAI ``model`` id clients send (Ray's ``model_id``)."""
    revision: str | None = None
    """A 40-hex commit id pins the weights (and the tokenizer); anything else gives a warning (an error with ``strict``)."""
    dtype: Dtype = "bfloat16"
    """vLLM weight and activation dtype (the reference uses bfloat16)."""
    max_model_len: int = 4096
    """Longest prompt plus output, in tokens; one such sequence must fit in the KV pool of every leg (the memory check of ``plan``, enforced by synth)."""
    gpu_memory_utilization: float = 0.9
    """Fraction of GPU memory vLLM may use (weights + KV cache), in (0, 1]."""
    enforce_eager: bool = True
    """Skip CUDA graph capture: faster start, less memory, as the reference does."""
    tensor_parallel_size: int = 1
    """GPUs per model replica, for both legs (a divisor of one node's GPUs)."""
    architecture: ModelArchitecture | None = None
    """Architecture facts from the model's config.json, for the GPU memory check; needed when ``source`` is not in the package's table (``ray_llm_eks.base.models``). Dense models leave the ``linear_*``, ``sliding_*``, MLA and MoE fields at 0. ``auto``: read config.json when the configuration is loaded (``make synth``, ``plan``) from the table, an ``s3://`` URI or the Hugging Face Hub (``HF_TOKEN``; ``HF_HUB_OFFLINE`` honoured), and refuse the file, saying what to do, when none is reachable; code building a construct resolves it first with ``ray_llm_eks.model_source.architecture_for(source, revision)``."""
    serve_images: bool = False
    """Serve image inputs with a vision-language model (the architecture has a vision tower: Qwen3.5). False (the default) renders vLLM's ``language_model_only`` on both legs: the tower is not loaded and vLLM's startup profile runs no maximal image, which leaves the KV pool their memory (for Qwen3.5-9B on an L4: 0.85 GiB of weights and a 0.92 GiB activation peak). True loads and profiles the tower; the memory check counts both."""
    hf_token_secret: str | None = None
    """An AWS Secrets Manager secret (ARN, or name in the stack's region and account) whose
    string is a Hugging Face token, for gated models. The workers read it at start with their own
    Pod Identity role; only its name is in the template and the manifests."""
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """vLLM engine arguments the library does not model, for both legs, deep-merged over the ones it renders (a nested mapping merges key by key). Each name is checked against the engine arguments of the image's vLLM (``ray_llm_eks/data/generated/vllm_engine_args.json``); the ones the library renders or depends on (``max_model_len``, ``tensor_parallel_size``, ``kv_transfer_config``, ...) are refused with the setting to use instead (``ray_llm_eks.base.engine_args.OWNED``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine_kwargs", engine_args.frozen(self.engine_kwargs))
        found = Collector()
        secret_accepted = ("arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters>, or a name "
                           "of letters, digits and /_+=.@- (at most 512)")
        # A token pasted here is a valid secret name by shape: refused (redacted) before it is
        # rendered into the worker env, the Pod Identity role's policy and the GitOps output.
        credential = not_a_credential("hf_token_secret", self.hf_token_secret, secret_accepted)
        found.add(credential)
        if credential is None and self.hf_token_secret is not None and not (
                isinstance(self.hf_token_secret, str)
                and (_SECRET_ARN.match(self.hf_token_secret) or _SECRET_NAME.match(self.hf_token_secret))):
            found.add(problem("hf_token_secret", self.hf_token_secret, "not a Secrets Manager secret ARN or name",
                              secret_accepted))
        source_problem = model_source_problem(self.source)
        if source_problem is not None:
            found.add(problem("source", self.source, source_problem, MODEL_SOURCES_ACCEPTED))
        if not isinstance(self.served_name, str) or not self.served_name or any(c.isspace() for c in self.served_name):
            found.add(problem("served_name", self.served_name, "not a model id clients can send",
                              "a non-empty name with no whitespace, such as qwen3.5-9b"))
        if self.revision is not None and (not isinstance(self.revision, str) or not self.revision.strip()):
            found.add(problem("revision", self.revision, "empty revision", "a 40-hex commit id, or none"))
        if self.dtype not in DTYPE_BYTES:
            found.add(problem("dtype", self.dtype, "not a dtype the planner knows", ", ".join(DTYPE_BYTES)))
        if not _is_int(self.max_model_len) or self.max_model_len < 1:
            found.add(problem("max_model_len", self.max_model_len, "not a token count", "a whole number >= 1"))
        gmu = self.gpu_memory_utilization
        if isinstance(gmu, bool) or not isinstance(gmu, (int, float)) or not 0 < gmu <= 1:
            found.add(problem("gpu_memory_utilization", gmu, "not a fraction of GPU memory", "a number in (0, 1]"))
        if not isinstance(self.serve_images, bool):
            found.add(problem("serve_images", self.serve_images, "not a boolean", "true or false"))
        if not isinstance(self.enforce_eager, bool):
            found.add(problem("enforce_eager", self.enforce_eager, "not a boolean", "true or false"))
        if not _is_int(self.tensor_parallel_size) or self.tensor_parallel_size < 1:
            found.add(problem("tensor_parallel_size", self.tensor_parallel_size, "not a GPU count", "a whole number >= 1"))
        if self.architecture == "auto":
            # Reading config.json is I/O, which this layer does not do: the configuration loader
            # (ray_llm_eks.config.parse_config) resolves "auto" before building this model.
            found.add(problem("architecture", self.architecture, "'auto' is resolved when a configuration file is "
                              "loaded; the declared model takes only a resolved architecture",
                              "ray_llm_eks.model_source.architecture_for(source, revision), or a ModelArchitecture, "
                              "or none for a model in the table"))
        elif self.architecture is not None and not isinstance(self.architecture, ModelArchitecture):
            found.add(problem("architecture", self.architecture, "not a ModelArchitecture",
                              "a ray_llm_eks.base.models.ModelArchitecture, or none for a model in the table"))
        elif self.architecture is not None and not self.architecture.name and isinstance(self.source, str):
            object.__setattr__(self, "architecture", replace(self.architecture, name=self.source))
        found.raise_if_any(self)

    @property
    def known_architecture(self) -> ModelArchitecture | None:
        if isinstance(self.architecture, ModelArchitecture):
            return self.architecture
        return known_architecture(self.source)

    @property
    def pinned(self) -> bool:
        return bool(self.revision and _COMMIT.match(self.revision))

    def revision_command(self) -> str | None:
        """The command that prints the commit ``revision`` (default ``main``) names today on the
        Hugging Face Hub (``HfApi.model_info(...).sha``; a gated model needs ``HF_TOKEN`` set);
        None for a source that is not a Hub id (an ``s3://`` URI)."""
        if not isinstance(self.source, str) or not _HUB_ID.match(self.source):
            return None
        revision = self.revision or "main"
        return (f"python3 -c \"from huggingface_hub import HfApi; "
                f"print(HfApi().model_info('{self.source}', revision='{revision}').sha)\"")


@dataclass(frozen=True)
class ImageSpec:
    """The Ray LLM container image. Default: the AWS DLC in the deployment's region,
    ``763104351884.dkr.ecr.<region>.amazonaws.com/ray:serve-llm-cuda-v1.0``."""

    __pydantic_config__ = {"extra": "forbid"}

    repository: str | None = None
    """A custom image repository; None: the DLC repository in the deployment's own region. With a custom image, ``versions.ray`` is trusted as given."""
    tag: str | None = DEFAULT_IMAGE_TAG
    """Image tag (Ray 2.58, vLLM 0.26, CUDA 13.0, EFA stack). Tags are mutable: prefer a digest."""
    digest: str | None = None
    """``sha256:`` + 64 hex; when set the manifests use ``repository@digest`` (reproducible)."""
    user_id: int = DEFAULT_IMAGE_USER_ID
    """The user the image runs Ray as; it owns the node's model cache, which no one else may write.
    Ray images create ``ray`` with uid 1000 (ray-project/ray ``docker/base-deps/Dockerfile``,
    ``RAY_UID=1000``); an image running as root writes there anyway."""
    group_id: int = DEFAULT_IMAGE_GROUP_ID
    """The image user's group (Ray images: 100, ``users``); may read the cache."""

    def __post_init__(self) -> None:
        found = Collector()
        for name in ("user_id", "group_id"):
            value = getattr(self, name)
            if not _is_int(value) or not 0 <= value <= 2**31 - 1:
                found.add(problem(name, value, "not a Linux user or group id", "a whole number from 0 to 2147483647"))
        if self.digest is not None and not (isinstance(self.digest, str) and _DIGEST.match(self.digest)):
            found.add(problem("digest", self.digest, "not an image digest", "'sha256:' followed by 64 lowercase hex"))
        if not self.tag and not self.digest:
            found.add(problem("tag", self.tag, "the image needs a tag or a digest", "a tag, a digest, or both"))
        if self.repository is not None and (not isinstance(self.repository, str) or not self.repository.strip()
                                            or any(c.isspace() for c in self.repository)):
            found.add(problem("repository", self.repository, "not an image repository",
                              "a repository such as 123456789012.dkr.ecr.us-east-1.amazonaws.com/ray"))
        found.raise_if_any(self)

    @property
    def is_custom(self) -> bool:
        return self.repository is not None

    def repository_in(self, region_name: str) -> str:
        return self.repository or f"{DLC_ACCOUNT}.dkr.ecr.{region_name}.amazonaws.com/{DLC_REPOSITORY_NAME}"

    def digest_command(self, region_name: str) -> str:
        """The command that prints the digest the tag names today. For an ECR repository (the DLC's
        is account 763104351884, repository ``ray``, in the stack's region) ``aws ecr
        describe-images`` with the caller's credentials; any other registry: ``docker buildx
        imagetools inspect``."""
        repository = self.repository_in(region_name)
        ecr = _ECR_REPOSITORY.match(repository)
        if ecr is not None and self.tag:
            account, region, name = ecr.groups()
            return (f"aws ecr describe-images --registry-id {account} --repository-name {name} "
                    f"--image-ids imageTag={self.tag} --region {region} "
                    "--query 'imageDetails[0].imageDigest' --output text")
        return f"docker buildx imagetools inspect {repository}:{self.tag} --format '{{{{json .Manifest.Digest}}}}'"

    def uri(self, region_name: str) -> str:
        repository = self.repository_in(region_name)
        return f"{repository}@{self.digest}" if self.digest else f"{repository}:{self.tag}"


@dataclass(frozen=True)
class NixlSpec:
    """How the KV cache moves between the legs (vLLM's NixlConnector)."""

    __pydantic_config__ = {"extra": "forbid"}

    backends: tuple[NixlBackend, ...] | None = None
    """NIXL backends. None: the KV-path table's, LIBFABRIC (what uses EFA; NIXL's default, UCX, silently runs at TCP speed on EFA nodes). docs/kv-path.md."""
    kv_buffer_device: KvBufferDevice | None = None
    """Where vLLM's NixlConnector registers the KV cache for NIXL: cpu (a host buffer the blocks are copied through) or cuda (the GPU memory itself). None: the KV-path table's choice (docs/kv-path.md): cuda when every worker node has GPUDirect RDMA (P-series) or the model is hybrid (vLLM 0.26.0's host buffer fails for hybrid models, so cpu is refused for them), else cpu. A choice an upstream defect breaks is refused."""

    def __post_init__(self) -> None:
        found = Collector()
        if self.backends is not None:
            object.__setattr__(self, "backends", tuple(self.backends))
        if self.backends is not None and (not self.backends or any(b not in NIXL_BACKENDS for b in self.backends)):
            found.add(problem("backends", list(self.backends or ()), "not a list of NIXL backends",
                              f"one or more of {', '.join(NIXL_BACKENDS)}"))
        if self.kv_buffer_device is not None and self.kv_buffer_device not in KV_BUFFER_DEVICES:
            found.add(problem("kv_buffer_device", self.kv_buffer_device, "not a KV buffer device",
                              f"{', '.join(KV_BUFFER_DEVICES)}, or none"))
        found.raise_if_any(self)


@dataclass(frozen=True)
class GcsFaultTolerance:
    """Ray's GCS state in a managed Redis (ElastiCache for Valkey), so a lost head pod or system
    node restarts the head without restarting the model replicas.

    Without it the GCS lives in the head pod's memory: when the head goes, KubeRay restarts every
    worker, and both legs reload the model. With it, workers keep serving for up to 600 s
    (KubeRay sets ``RAY_gcs_rpc_server_reconnect_timeout_s=600`` on them) while the head comes
    back and reads its tables from Redis (KubeRay ``gcsFaultToleranceOptions``; Ray docs,
    "GCS fault tolerance in KubeRay").
    """

    __pydantic_config__ = {"extra": "forbid"}

    enabled: bool = False
    """Create the cache (TLS, AUTH from a generated Secrets Manager secret) and point KubeRay's gcsFaultToleranceOptions at it."""
    cache_node_type: str = DEFAULT_CACHE_NODE_TYPE
    """ElastiCache node type; GCS tables for one deployment are megabytes, so the smallest Graviton
    type is plenty."""
    cache_nodes: int = 2
    """1 (a primary only: losing it loses the tables, as losing the head does today) or 2 to 6 (a
    primary and replicas in other AZs, automatic failover: the default)."""

    def __post_init__(self) -> None:
        found = Collector()
        if not isinstance(self.enabled, bool):
            found.add(problem("enabled", self.enabled, "not a boolean", "true or false"))
        if not isinstance(self.cache_node_type, str) or not _CACHE_NODE_TYPE.match(self.cache_node_type):
            found.add(problem("cache_node_type", self.cache_node_type, "not an ElastiCache node type",
                              "cache.<family>.<size>, such as cache.t4g.small or cache.m7g.large"))
        if not _is_int(self.cache_nodes) or not 1 <= self.cache_nodes <= 6:
            found.add(problem("cache_nodes", self.cache_nodes, "not a node count for one Valkey shard",
                              "1 (no replica) to 6 (a primary and five replicas)"))
        found.raise_if_any(self)


@dataclass(frozen=True)
class DisaggregationSpec:
    """When a request takes the prefill leg. Only the disaggregated topology has one.

    A prompt shorter than ``min_prompt_tokens`` is prefilled on the decode replica that generates its
    answer, with no KV transfer; a longer one is prefilled on the prefill leg and its KV cache read
    over NIXL, as without this setting. Short prompts gain little from disaggregation and still pay
    the transfer: ai-dynamo/dynamo ``docs/kubernetes/disagg-communication-guide.md`` measured P/D on AWS
    p5 over EFA at about 0 % throughput gain at 1,000 input tokens, against +22 % at 8,000. SageMaker
    HyperPod's inference operator (``pdSpec.routingThreshold``) routes the same way. How the Serve
    side does it and what is counted: :mod:`ray_llm_eks.pd.conditional` and
    docs/conditional-disaggregation.md; a threshold for the deployment: ``ray-llm-eks plan``
    (docs/plan.md, "The threshold")."""

    __pydantic_config__ = {"extra": "forbid"}

    min_prompt_tokens: int = 0
    """Prompts with fewer tokens than this (counted as the decode replica's engine renders the request: the chat template, then the tokenizer) are prefilled on the decode replica, with no KV transfer; 0 (the default) sends every request through the prefill leg. At most ``model.max_model_len`` less the gate probe's answer (``verification.probe_max_tokens``) and 64 tokens of preamble and chat template, so that the gate can still send a probe through the prefill leg (4016 for the reference); disaggregated topology only."""

    def __post_init__(self) -> None:
        found = Collector()
        value = self.min_prompt_tokens
        if not _is_int(value) or value < 0:
            found.add(problem("min_prompt_tokens", value, "not a prompt length in tokens",
                              "a whole number >= 0 (0: every request through the prefill leg)"))
        found.raise_if_any(self)


@dataclass(frozen=True)
class Leg:
    """One role of the deployment: the node pool it runs on and how the model is served there.

    Error fields are the leg's own, the pool's included (``desired_size``, ``tensor_parallel_size``);
    a :class:`ServingSpec` reports them under the role (``prefill.tensor_parallel_size``).
    """

    __pydantic_config__ = {"extra": "forbid"}

    pool: WorkerPool
    """The EFA GPU node group of the role (``EfaGpuNodeGroup.pool``)."""
    tensor_parallel_size: int | None = None
    """GPUs per model replica on this leg only (a divisor of one node's GPUs); None: ``model.tensor_parallel_size``."""
    target_ongoing_requests: float | None = None
    """With ``min_size`` below ``max_size`` (autoscaled): Ray Serve adds a replica when the leg's ongoing
    requests per replica exceed this. None: the sequences the leg's KV pool holds at ``max_model_len``
    (docs/scaling.md)."""
    request_router: RequestRouter = field(default_factory=RequestRouter)
    """How Ray Serve picks the leg's replica for each request: Ray's default, or prefix-cache-affinity, which helps on the prefill leg when prompts share long prefixes (docs/scaling.md, "Prefix-aware routing")."""
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """vLLM engine arguments for this leg only, deep-merged over ``model.engine_kwargs`` (this leg's values win); checked as those are. With topology colocated, only prefill's apply (one deployment), and a different decode value is refused."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine_kwargs", engine_args.frozen(self.engine_kwargs))
        found = Collector()
        if not isinstance(self.pool, WorkerPool):
            found.add(problem("pool", self.pool, "not a worker pool", "a WorkerPool (or an EfaGpuNodeGroup's pool)"))
        tp = self.tensor_parallel_size
        if tp is not None and (not _is_int(tp) or tp < 1):
            found.add(problem("tensor_parallel_size", tp, "not a GPU count", "a whole number >= 1, or none"))
        target = self.target_ongoing_requests
        if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                                   or not 0 < target <= 100_000):
            found.add(problem("target_ongoing_requests", target, "not a request count per replica",
                              "a number above 0 (Ray Serve's default is 2), at most 100000"))
        if isinstance(self.request_router, dict):  # the mapping form, as a configuration file writes it
            router = found.check(request_router_of, self.request_router, prefix="request_router")
            if router is not None:
                object.__setattr__(self, "request_router", router)
        elif not isinstance(self.request_router, RequestRouter):
            found.add(problem("request_router", self.request_router, "not a RequestRouter",
                              "RequestRouter(policy='prefix-cache-affinity', ...), or leave it out"))
        found.raise_if_any(self)

    @property
    def role(self) -> str:
        return self.pool.role


@dataclass(frozen=True)
class ServiceSettings:
    """The Kubernetes side of the service: its names, privilege, exposure, network access, Ray's
    authentication, the GCS's home, and what the admission policy leaves alone."""

    __pydantic_config__ = {"extra": "forbid"}

    service_name: str = DEFAULT_SERVICE_NAME
    """RayService name, a DNS label of at most 47 characters (KubeRay derives longer names from it)."""
    namespace: str = DEFAULT_NAMESPACE
    """Kubernetes namespace of the RayService, its Service and ServiceAccount."""
    security_profile: SecurityProfile = SecurityProfile.privileged
    """Worker pod privilege: privileged (the reference; NIXL registers CUDA memory with EFA) or ipc-lock (experimental, unverified on real nodes)."""
    endpoint: EndpointType = EndpointType.cluster_ip
    """How the OpenAI API on port 8000 is exposed: ClusterIP (called from pods in client_namespaces) or internal-nlb (from client_cidrs). Never a port-forward, which needs pods/portforward in the serving namespace (docs/threat-model.md)."""
    client_namespaces: tuple[str, ...] = ()
    """Namespaces whose pods may call the OpenAI API (port 8000). Nothing else in the cluster may: the serving namespace denies all other traffic (``serving-network-policy``)."""
    client_cidrs: tuple[str, ...] = ()
    """Networks outside the cluster that may call the OpenAI API; with ``endpoint: internal-nlb`` also the NLB's source ranges (required there: without them the NLB's NodePort opens to 0.0.0.0/0). One that overlaps the cluster's VPC is refused (every pod has an address there): name client pods by client_namespaces."""
    egress_cidrs: tuple[str, ...] = DEFAULT_EGRESS_CIDRS
    """Where the pods may open HTTPS (443): the model download (Hugging Face and its CDN through the NAT gateway), the Kubernetes API for the gate, CloudFormation's signal URL. Narrow it to the VPC CIDR once the model is in the node cache and the AWS APIs have VPC endpoints."""
    ray_auth: RayAuth = RayAuth.token
    """Ray's token authentication (GCS, dashboard, Jobs API, Ray Client): token (the default; KubeRay 1.5.1+ makes a random token per RayCluster; Ray 2.52+), or disabled (what KubeRay 1.4.0 needs: then anything that reaches the head's 8265 may submit a job). Not on the OpenAI port (8000) or the metrics port, which the NetworkPolicies govern."""
    gcs_fault_tolerance: GcsFaultTolerance = field(default_factory=GcsFaultTolerance)
    """Ray's GCS state in ElastiCache for Valkey, so losing the head does not restart the models (off by default; ``plan`` shows its cost)."""
    admission_exempt_agents: tuple[str, ...] = DEFAULT_ADMISSION_EXEMPT_AGENTS
    """Node agents the admission policy (``serving-admission-policy``) leaves alone, as ``namespace/service-account``: their pods may use host access and tolerate every taint, but only when the DaemonSet or ReplicaSet controller creates them (a Deployment or DaemonSet of that account). Default: aws-node, kube-proxy, the Pod Identity agent and the device plugins in kube-system; with observability on, the CloudWatch add-on's accounts are added. Never an account in the serving namespace."""
    other_serving_namespaces: tuple[str, ...] = ()
    """The serving namespaces of other ray-llm-eks deployments on the same cluster: this deployment's admission policy leaves them to their own (by name; a label could be forged). Every other namespace gets this policy's "nobody" row."""
    exec_admins: tuple[str, ...] = DEFAULT_EXEC_ADMINS
    """Who may ``kubectl exec``, ``attach`` or ``port-forward`` into pods of the serving namespace (a ValidatingAdmissionPolicy on CONNECT): ``user:<name>`` (a trailing ``*`` matches a prefix, for EKS's ``arn:aws:sts::<account>:assumed-role/<role>/<session>`` names) or ``group:<name>``. An exec into a worker is root on a GPU node; into the gate, its AWS role. Anyone may still exec into the benchmark Job's pod (``kubectl cp`` of the results). Default: ``group:system:masters`` only."""
    admission_exempt_namespaces: tuple[str, ...] = ()
    """Replaced by ``admission_exempt_agents``: a whole exempt namespace let any pod there run privileged on every node. Refused when set."""

    def __post_init__(self) -> None:
        found = Collector()
        for name, cls in (("security_profile", SecurityProfile), ("endpoint", EndpointType), ("ray_auth", RayAuth)):
            value = _enum(found, cls, getattr(self, name), name)
            if value is not None:
                object.__setattr__(self, name, value)
        for name in ("namespace", "service_name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _DNS_LABEL.match(value):
                found.add(problem(name, value, "not a DNS label", "lowercase letters, digits and '-', at most 63"))
        if isinstance(self.service_name, str) and len(self.service_name) > RAY_SERVICE_NAME_MAX:
            found.add(problem("service_name", self.service_name,
                              f"{len(self.service_name)} characters; KubeRay derives longer names from it",
                              f"at most {RAY_SERVICE_NAME_MAX} characters"))
        if not isinstance(self.gcs_fault_tolerance, GcsFaultTolerance):
            found.add(problem("gcs_fault_tolerance", self.gcs_fault_tolerance, "not a GcsFaultTolerance",
                              "GcsFaultTolerance(enabled=True), or leave it out"))
        self._check_access(found)
        found.raise_if_any(self)

    def _check_access(self, found: Collector) -> None:
        for name in ("client_namespaces", "client_cidrs", "egress_cidrs", "admission_exempt_agents",
                     "other_serving_namespaces", "admission_exempt_namespaces", "exec_admins"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                object.__setattr__(self, name, tuple(value))
            else:
                found.add(problem(name, value, "not a list", "a list (possibly empty)"))
                return
        for namespace in self.client_namespaces:
            if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
                found.add(problem("client_namespaces", namespace, "not a namespace name",
                                  "lowercase letters, digits and '-', at most 63"))
        if self.admission_exempt_namespaces:
            found.add(problem("admission_exempt_namespaces", list(self.admission_exempt_namespaces),
                              "replaced by serving.admission_exempt_agents: a whole exempt namespace let any pod "
                              "there run privileged, on the host's network, on every node",
                              "serving.admission_exempt_agents entries 'namespace/service-account' for each node "
                              "agent, such as monitoring/node-exporter"))
        for agent in self.admission_exempt_agents:
            match = _AGENT.match(agent) if isinstance(agent, str) else None
            if match is None:
                found.add(problem("admission_exempt_agents", agent, "not 'namespace/service-account'",
                                  "a namespace name, '/', a service account name, such as kube-system/aws-node"))
            elif match.group(1) == self.namespace:
                found.add(problem("admission_exempt_agents", agent,
                                  "an account in the serving namespace: its pods could run privileged on the GPU nodes",
                                  "accounts of node agents in their own namespaces, such as kube-system/aws-node"))
        for admin in self.exec_admins:
            match = _EXEC_ADMIN.match(admin) if isinstance(admin, str) else None
            if match is None or (match.group(1) == "group" and match.group(3)):
                found.add(problem("exec_admins", admin, "not 'user:<name>' or 'group:<name>'",
                                  "user:<name> (a trailing * matches a prefix) or group:<name>, without quotes, "
                                  "backslashes or spaces, such as group:system:masters"))
        for namespace in self.other_serving_namespaces:
            if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
                found.add(problem("other_serving_namespaces", namespace, "not a namespace name",
                                  "lowercase letters, digits and '-', at most 63"))
            elif namespace == self.namespace:
                found.add(problem("other_serving_namespaces", namespace, "this deployment's own serving namespace",
                                  "the serving namespaces of other deployments on the cluster"))
        client_networks = [found.check(ipv4_network, "client_cidrs", c, "10.0.0.0/16") for c in self.client_cidrs]
        for cidr in self.egress_cidrs:
            found.check(ipv4_network, "egress_cidrs", cidr, "10.0.0.0/16")
        if self.endpoint is EndpointType.internal_nlb:
            if not self.client_cidrs:
                found.add(problem("client_cidrs", [], "an internal NLB without source ranges opens its NodePort on "
                                  "every node to 0.0.0.0/0 (the AWS cloud provider's default)",
                                  "the CIDR blocks of the networks that call the API, such as 10.0.0.0/16"))
            elif any(n is not None and n.prefixlen == 0 for n in client_networks):
                found.add(problem("client_cidrs", list(self.client_cidrs), "0.0.0.0/0 is every source",
                                  "the CIDR blocks of the networks that call the API"))

    def exempting(self, *agents: str) -> ServiceSettings:
        """These settings with ``agents`` (``namespace/service-account``) also left alone by the
        admission policy (each once, in order)."""
        added = tuple(a for a in dict.fromkeys(agents) if a not in self.admission_exempt_agents)
        return replace(self, admission_exempt_agents=(*self.admission_exempt_agents, *added)) if added else self


@dataclass(frozen=True)
class ServingSpec:
    """One Ray Serve LLM deployment on its legs. Raises :class:`SpecErrors` when built wrong.

    Error fields are the names a caller sets: ``prefill.desired_size`` (the prefill leg's pool),
    ``prefill.tensor_parallel_size``, ``model.max_model_len``, ``image.digest``,
    ``service.namespace``, ``ray_version``.
    """

    region: str
    prefill: Leg
    decode: Leg
    system: SystemPool = field(default_factory=SystemPool)
    model: ModelSpec = field(default_factory=ModelSpec)
    image: ImageSpec = field(default_factory=ImageSpec)
    nixl: NixlSpec = field(default_factory=NixlSpec)
    topology: Topology = Topology.disaggregated
    service: ServiceSettings = field(default_factory=ServiceSettings)
    disaggregation: DisaggregationSpec = field(default_factory=DisaggregationSpec)
    """When a request takes the prefill leg (:class:`DisaggregationSpec`)."""
    ray_version: str = DEFAULT_RAY_VERSION
    """Must equal the Ray inside the image (KubeRay's ``rayVersion``)."""
    kuberay_version: str = DEFAULT_KUBERAY_VERSION
    """The KubeRay operator that runs the RayService (what ``ray_auth: token`` needs)."""
    operator_namespace: str = KUBERAY_NAMESPACE
    """Where the KubeRay operator runs: the NetworkPolicy admits its pods (``app.kubernetes.io/name:
    kuberay-operator``, whatever the release name) to the head's dashboard from this namespace only."""
    strict: bool = True
    """Refuse an image pinned by tag only or a model without a commit revision (the default: an
    unpinned deploy is a choice written down as ``strict=False``, not an accident)."""

    def __post_init__(self) -> None:
        found = Collector()
        value = _enum(found, Topology, self.topology, "topology")
        if value is not None:
            object.__setattr__(self, "topology", value)
        for role in WORKER_ROLES:
            leg = getattr(self, role)
            if isinstance(leg, WorkerPool):  # a bare pool: the leg with no settings of its own
                leg = Leg(leg)
                object.__setattr__(self, role, leg)
            if not isinstance(leg, Leg) or leg.role != role:
                found.add(problem(role, getattr(leg, "role", leg), f"not a {role} leg",
                                  f"a Leg (or WorkerPool, or EfaGpuNodeGroup) with role {role}"))
        if not isinstance(self.service, ServiceSettings):
            found.add(problem("service", self.service, "not ServiceSettings", "ServiceSettings(...), or leave it out"))
        if found.errors:
            found.raise_if_any(self)
        if not isinstance(self.operator_namespace, str) or not _DNS_LABEL.match(self.operator_namespace):
            found.add(problem("operator_namespace", self.operator_namespace, "not a DNS label",
                              "lowercase letters, digits and '-', at most 63"))
        self._check_image(found)
        self._check_offerings(found)
        self._check_ray_auth(found)
        self._check_request_routers(found)
        self._check_disaggregation(found)
        self._check_engine_kwargs(found)
        tensor_parallel_ok = self._check_tensor_parallel(found)
        for role in WORKER_ROLES:
            if self.pool(role).desired_size < 1:
                found.add(problem(f"{role}.desired_size", 0, f"the {role} leg would have no GPU to run on",
                                  "at least 1 (the deployment gate proves the path on it)"))
        found.check(sizing.head_resources, self.system.instance, self.autoscaling_budget)
        self._check_kv_path(found)
        if tensor_parallel_ok:
            self._check_memory(found)
            if not found.errors:
                self._check_scaling(found)
        for warning in self.reproducibility_problems() if self.strict else ():
            found.add(SpecError(warning.field, f"strict mode refuses it: {warning.message} (or strict false: "
                                               "deploy unpinned, with a warning)"))
        found.raise_if_any(self)

    # --- checks ------------------------------------------------------------------------------------

    def _check_ray_auth(self, found: Collector) -> None:
        if found.check(semver, self.kuberay_version, "kuberay_version") is None \
                or self.service.ray_auth is not RayAuth.token:
            return
        if _version(self.kuberay_version) < RAY_AUTH_MIN_KUBERAY:
            minimum = ".".join(map(str, RAY_AUTH_MIN_KUBERAY))
            found.add(problem("service.ray_auth", self.service.ray_auth.value,
                              f"KubeRay {self.kuberay_version} (versions.kuberay, or kuberay_version) has no "
                              "authOptions: the API server would drop the field and Ray would run unauthenticated",
                              f"ray_auth: disabled to keep KubeRay {self.kuberay_version} (Ray's job API then has no "
                              f"authentication), or versions.kuberay {minimum} or later"))
        if isinstance(self.ray_version, str) and _SEMVER_TEXT.match(self.ray_version) and \
                _version(self.ray_version) < RAY_AUTH_MIN_RAY:
            found.add(problem("service.ray_auth", self.service.ray_auth.value,
                              f"Ray {self.ray_version} has no token authentication",
                              f"disabled, or Ray {'.'.join(map(str, RAY_AUTH_MIN_RAY))} or later"))

    def _check_kv_path(self, found: Collector) -> None:
        """Refuse a KV path an upstream defect breaks (``upstream_defects``, ``kv_path``): a value the
        user set names that field; the table's own choice means no path is known for the deployment."""
        path = self.kv_path
        for defect in path.refusals:
            if defect.setting in path.overridden:
                found.add(problem(defect.setting, defect.value(path.facts), defect.why,
                                  f"{defect.instead} {defect.cited}"))
            else:
                found.add(problem("topology", self.topology.value,
                                  f"no KV path is known for a {path.row.attention.value} model on "
                                  f"{'/'.join(sorted({p.instance_type for p in self.pools}))} with {self._stack_words}: "
                                  f"{defect.why}", f"{NO_PATH_INSTEAD} {defect.cited}"))

    @property
    def _stack_words(self) -> str:
        stack = self.image_stack
        return (f"vLLM {stack.vllm} and NIXL {stack.nixl} (image {self.image.tag})" if stack
                else "an image whose vLLM and NIXL are not known")

    def _check_request_routers(self, found: Collector) -> None:
        # Colocated serves one deployment, routed by the prefill leg's router (the leg whose
        # prompts a prefix cache saves): a different decode router would be silently dropped.
        if self.topology is Topology.colocated and self.decode.request_router not in (
                RequestRouter(), self.prefill.request_router):
            found.add(problem("decode.request_router", self.decode.request_router.policy.value,
                              "topology colocated serves one deployment, routed by prefill.request_router",
                              "the same request_router on both legs, or set it on prefill only"))

    def _check_disaggregation(self, found: Collector) -> None:
        if not isinstance(self.disaggregation, DisaggregationSpec):
            found.add(problem("disaggregation", self.disaggregation, "not a DisaggregationSpec",
                              "DisaggregationSpec(min_prompt_tokens=...), or leave it out"))
            return
        threshold = self.disaggregation.min_prompt_tokens
        if threshold and self.topology is not Topology.disaggregated:
            found.add(problem("disaggregation.min_prompt_tokens", threshold,
                              f"topology {self.topology.value} has no prefill leg to skip",
                              "0 (or leave it out), or topology disaggregated"))
        elif _is_int(self.model.max_model_len) and threshold > self.model.max_model_len:
            # A prompt of max_model_len tokens leaves no room for output; vLLM refuses longer ones
            # (the prompt plus max_tokens must fit), so above it the prefill leg would never be used.
            found.add(problem("disaggregation.min_prompt_tokens", threshold,
                              f"above model.max_model_len ({self.model.max_model_len}): no request could reach "
                              "the prefill leg", f"0 to {self.model.max_model_len}"))

    def _engine_kwargs_fields(self) -> list[tuple[str, Any]]:
        return [("model.engine_kwargs", self.model.engine_kwargs),
                *((f"{role}.engine_kwargs", self.leg(role).engine_kwargs) for role in WORKER_ROLES)]

    def _check_engine_kwargs(self, found: Collector) -> None:
        stack = self.image_stack
        for name, kwargs in self._engine_kwargs_fields():
            for error in engine_args.problems(kwargs, name, vllm=stack.vllm if stack else None, ray=self.ray_version):
                found.add(error)
        # Colocated serves one deployment with prefill's engine arguments: a different decode value
        # would be silently dropped, as a decode router would (_check_request_routers).
        if self.topology is Topology.colocated and self.decode.engine_kwargs not in ({}, self.prefill.engine_kwargs):
            found.add(problem("decode.engine_kwargs", sorted(self.decode.engine_kwargs),
                              "topology colocated serves one deployment, with prefill.engine_kwargs",
                              "the same engine_kwargs on both legs, or set them on prefill or in model.engine_kwargs"))

    def engine_kwargs(self, role: str) -> dict[str, Any]:
        """The user's engine arguments for the ``role`` leg: ``model.engine_kwargs`` with the leg's own
        deep-merged over them (the serve config merges the result over what it renders)."""
        return engine_args.thaw(engine_args.deep_merge(self.model.engine_kwargs, self.leg(role).engine_kwargs))

    def _check_offerings(self, found: Collector) -> None:
        # Where the stack's region is known at synth time and the library's offerings table knows
        # it: every node group's type must be one EC2 offers there, or the deploy fails at the
        # node group (CREATE_FAILED) after the VPC and the cluster took their 15 minutes.
        if not _is_resolved_region(self.region):
            return
        found.check(instance_type_offered, self.region, self.system.instance_type, "system.instance_type", gpu=False)
        for role in WORKER_ROLES:
            found.check(instance_type_offered, self.region, self.pool(role).instance_type, f"{role}.instance_type",
                        gpu=True)

    def _check_image(self, found: Collector) -> None:
        if not _is_resolved_region(self.region):
            if not self.image.is_custom:
                found.add(problem("image.repository", None, f"the region is not known at synth time ({self.region}), "
                                  "so the DLC's regional repository cannot be named",
                                  "a stack with an explicit env region, or image.repository"))
        else:
            found.check(check_region, self.region, "region")
        if found.check(semver, self.ray_version, "ray_version") is None or self.image.is_custom:
            return  # with a custom image, its Ray version is the user's word
        expected = DLC_TAG_RAY_VERSIONS.get(self.image.tag) if self.image.tag else None
        if self.image.tag and expected is None:
            found.add(problem("image.tag", self.image.tag, "not an AWS Ray LLM DLC tag whose Ray version is known",
                              f"{', '.join(DLC_TAG_RAY_VERSIONS)}; or set image.repository for a custom image"))
        elif expected is not None and self.ray_version != expected:
            found.add(problem("ray_version", self.ray_version, f"image tag {self.image.tag} ships Ray {expected}, "
                              "and KubeRay's rayVersion must equal the image's Ray", expected))

    def _check_tensor_parallel(self, found: Collector) -> bool:
        ok = True
        for role in WORKER_ROLES:
            override = self.leg(role).tensor_parallel_size
            name = f"{role}.tensor_parallel_size" if override is not None else "model.tensor_parallel_size"
            tp = self.tensor_parallel_size(role)
            gpus = self.pool(role).gpus_per_node
            instance = self.pool(role).instance_type
            if not _is_int(tp) or tp < 1:
                found.add(problem(name, tp, "not a GPU count", "a whole number >= 1"))
                ok = False
            elif tp > gpus or gpus % tp:
                divisors = ", ".join(str(d) for d in range(1, gpus + 1) if gpus % d == 0)
                what = (f"larger than the {gpus} GPU(s) of one {instance}" if tp > gpus
                        else f"does not divide the {gpus} GPUs of one {instance}; {gpus % tp} per node would sit idle")
                found.add(problem(name, tp, f"{role}: tensor_parallel_size {what}", divisors))
                ok = False
        if not ok:
            return False
        tp = {role: self.tensor_parallel_size(role) for role in WORKER_ROLES}
        name = ("decode.tensor_parallel_size" if self.decode.tensor_parallel_size is not None
                else "prefill.tensor_parallel_size")
        if self.topology is Topology.colocated:
            if tp[PREFILL] != tp[DECODE]:
                found.add(problem(name, tp, "topology colocated serves one model config, so both pools need the "
                                  "same tensor_parallel_size", "equal sizes"))
            gpu_models = {role: self.pool(role).instance.gpu_model for role in WORKER_ROLES}
            if gpu_models[PREFILL] != gpu_models[DECODE]:
                found.add(problem("decode.instance_type", self.decode.pool.instance_type,
                                  f"topology colocated serves one model config on one GPU model, but prefill has "
                                  f"{gpu_models[PREFILL]} and decode {gpu_models[DECODE]}",
                                  f"a type with {gpu_models[PREFILL]} GPUs, like the prefill pool's"))
        elif self.is_hybrid and tp[PREFILL] != tp[DECODE]:
            found.add(problem(name, tp, f"{self.model.source} is a hybrid (Gated-DeltaNet) model: NIXL P/D needs "
                              "the same tensor_parallel_size on both legs (vLLM PR #41869)", "equal sizes"))
        return True

    def _check_memory(self, found: Collector) -> None:
        if self.model.known_architecture is None:
            found.add(problem("model.architecture", None, f"model.source {self.model.source!r} is not in the "
                              "package's architecture table, so whether it fits in GPU memory cannot be checked",
                              "model.architecture: auto (reads the model's config.json where it is reachable), or "
                              "model.architecture from the model's config.json (parameter_count, num_hidden_layers, "
                              "full_attention_layers, num_attention_heads, num_key_value_heads, head_dim, and the "
                              "linear_* fields for hybrid models)"))
            return
        model = self.model.known_architecture
        if model.max_position_embeddings and self.model.max_model_len > model.max_position_embeddings:
            # vLLM 0.26.0 derives its own limit from config.json's max_position_embeddings and
            # refuses a larger max_model_len unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set
            # (vllm 0.26.0 vllm/config/model.py:2152-2290, _get_and_verify_max_len).
            found.add(problem("model.max_model_len", self.model.max_model_len,
                              f"beyond {self.model.source}'s max_position_embeddings ({model.max_position_embeddings}), "
                              "the longest sequence its position encoding is defined for; vLLM refuses it",
                              f"at most {model.max_position_embeddings}"))
        if self.model.serve_images and not model.is_multimodal:
            found.add(problem("model.serve_images", True, f"{self.model.source} has no vision tower in its architecture "
                              "(vision_parameter_count 0)", "false, or a vision-language model"))
        checkpoint = model.checkpoint_bytes(DTYPE_BYTES[self.model.dtype])
        for role in WORKER_ROLES:
            volume = self.pool(role).root_volume
            needed = (checkpoint + scaling.IMAGE_BYTES) / GIB
            if needed > volume.size_gib:
                found.add(problem(f"{role}.root_volume.size_gib", volume.size_gib,
                                  f"the node's model cache (the whole checkpoint, {checkpoint / GIB:.1f} GiB) and the "
                                  f"serving image (about {scaling.IMAGE_BYTES / GIB:.1f} GiB) live on the root volume: "
                                  f"{needed:.1f} GiB do not fit", f"at least {math.ceil(needed * 1.1)}"))
        for budget in self.memory_budgets():
            if budget.fits:
                continue
            name = f"{budget.role}.instance_type" if budget.weights_do_not_fit else "model.max_model_len"
            value = budget.instance_type if budget.weights_do_not_fit else self.model.max_model_len
            found.add(problem(name, value, budget.problem or "", "; ".join(budget.fixes), kind=DoesNotFit))

    def _check_scaling(self, found: Collector) -> None:
        for role in WORKER_ROLES:
            pool = self.pool(role)
            if not self.autoscaled(role) or pool.min_size > 0:
                continue
            if all(self.pool(other).min_size == 0 for other in WORKER_ROLES):
                found.add(problem(f"{role}.min_size", 0, (
                    "both node groups could reach zero: Ray Serve's HTTP proxies run on the worker pods (the head "
                    "is kept out of the Service), so the OpenAI Service would have no endpoint and clients' "
                    "connections would be refused, not queued"), "1 or more on at least one leg"))
                continue
            if self.topology is Topology.colocated:
                continue  # one model over both groups: the other group's replicas keep serving
            start = self.node_start(role)
            limit = scaling.SCALE_TO_ZERO_MARGIN * scaling.SERVE_LLM_REQUEST_TIMEOUT_SECONDS
            if start.seconds > limit:
                found.add(problem(f"{role}.min_size", 0, (
                    f"a request arriving while the {role} leg has no replica waits in Ray Serve for a new "
                    f"{pool.instance_type} node to serve, about {start.seconds:.0f} s by the planner's estimate "
                    f"(docs/scaling.md), and Ray Serve LLM answers HTTP 408 after "
                    f"{scaling.SERVE_LLM_REQUEST_TIMEOUT_SECONDS} s"),
                    f"1 or more; 0 only when a new node serves within {limit:.0f} s"))

    def scale_to_zero_conflicts(self, verify_every_minutes: int | None) -> list[SpecError]:
        """A leg that may scale to zero and continuous verification do not mix: every run probes the
        endpoint, which wakes the leg (a new node each period, never idle long enough to save) and
        fails the run while the node starts. Config and construct alike call this."""
        if verify_every_minutes is None:
            return []
        return [problem(f"{role}.min_size", 0, (
            f"continuous verification probes the endpoint every {verify_every_minutes} minutes, which would wake "
            f"the {role} leg from zero each time and fail while its node starts"),
            "1 or more; or observability.enabled false (constructs: VerificationSpec(every_minutes=None))")
            for role in WORKER_ROLES if self.autoscaled(role) and self.pool(role).min_size == 0]

    def warnings(self) -> list[SpecError]:
        """What deploys but will likely fail later, said at synth time, never refused: a gated model
        (``models.is_gated``) without ``model.hf_token_secret``. ``make synth`` and the constructs
        add it as a CDK warning annotation, ``plan`` prints it and lists it under ``warnings``."""
        found = self._kv_path_warnings()
        if self.image_stack is None:
            unchecked = engine_args.unchecked_warning([n for n, kwargs in self._engine_kwargs_fields() if kwargs],
                                                      self.image_uri)
            found.extend([unchecked] if unchecked is not None else [])
        if is_gated(self.model.source) and self.model.hf_token_secret is None:
            organisation = next(o for o in GATED_HUB_ORGANISATIONS if self.model.source.lower().startswith(o))
            found.append(problem(
                "model.hf_token_secret", None,
                f"model {self.model.source} is gated on the Hugging Face Hub (every repository under {organisation} "
                "is): without a token the workers' download is refused (401) once the nodes are up",
                "the name or ARN of a Secrets Manager secret holding a Hugging Face token of an account "
                "that accepted the model's terms"))
        return found

    def _kv_path_warnings(self) -> list[SpecError]:
        """The KV path's risks (``upstream_defects`` rows that warn) and a path known from upstream
        code only (never run), for a disaggregated deployment."""
        if self.topology is not Topology.disaggregated:
            return []
        path = self.kv_path
        found = [problem(defect.setting, defect.value(path.facts), f"risk: {defect.why}",
                         f"{defect.instead} {defect.cited}") for defect in path.risks]
        if path.known == UPSTREAM_CODE and not path.risks:
            found.append(problem("nixl.kv_buffer_device", path.kv_buffer_device,
                                 f"the KV path for a {path.row.attention.value} model here is known from upstream code "
                                 f"only, never run: {path.row.basis}",
                                 "run `make twin-gpu` and the deployment gate before relying on it (docs/kv-path.md)"))
        return found

    def reproducibility_problems(self) -> list[SpecError]:
        """What makes this deployment irreproducible (a warning with ``strict=False``; an error by
        default). Each message ends with the command that resolves the pin (:meth:`pin_commands`)."""
        commands = self.pin_commands()
        problems = []
        if not self.image.digest:
            problems.append(problem("image.digest", None, f"image {self.image_uri} is pinned by tag only; tags are "
                                    "mutable", f"'sha256:' followed by 64 lowercase hex; resolve it with: "
                                    f"{commands['image.digest']}"))
        resolve = f"; resolve it with: {commands['model.revision']}" if "model.revision" in commands else ""
        if not self.model.revision:
            problems.append(problem("model.revision", None, f"model {self.model.source} has no revision; the weights "
                                    "can change under you", f"a 40-hex commit id{resolve}"))
        elif not self.model.pinned:
            problems.append(problem("model.revision", self.model.revision, "a branch or tag, not a commit; it can move",
                                    f"a 40-hex commit id{resolve}"))
        return problems

    def pin_commands(self) -> dict[str, str]:
        """The command that resolves each pin this deployment lacks, by field (``plan`` prints them;
        the strict refusal names them). Nothing here calls AWS or Hugging Face: the digest and the
        commit are facts of the registry and the Hub on the day they are looked up."""
        commands = {}
        if not self.image.digest:
            commands["image.digest"] = self.image.digest_command(self.region)
        if not self.model.pinned and (command := self.model.revision_command()) is not None:
            commands["model.revision"] = command
        return commands

    # --- derived values: one place for each, so pods, Serve config and plan agree -----------------

    def leg(self, role: str) -> Leg:
        return {PREFILL: self.prefill, DECODE: self.decode}[role]

    def pool(self, role: str) -> WorkerPool:
        return self.leg(role).pool

    @property
    def pools(self) -> tuple[WorkerPool, WorkerPool]:
        return (self.prefill.pool, self.decode.pool)

    @property
    def namespace(self) -> str:
        """The serving namespace (``service.namespace``), which nearly every object names."""
        return self.service.namespace

    @property
    def service_name(self) -> str:
        """The RayService's name (``service.service_name``)."""
        return self.service.service_name

    # --- scaling: a leg is autoscaled when its node group may grow or shrink --------------------

    def autoscaled(self, role: str) -> bool:
        return self.pool(role).autoscaled

    @property
    def autoscaling(self) -> bool:
        """Any leg autoscaled: the Ray autoscaler sidecar, KubeRay in-tree autoscaling and Cluster
        Autoscaler are deployed."""
        return any(self.autoscaled(role) for role in WORKER_ROLES)

    @property
    def autoscaling_budget(self) -> sizing.PodResources | None:
        return scaling.AUTOSCALING_SYSTEM_BUDGET if self.autoscaling else None

    def replicas_per_node(self, role: str) -> int:
        return self.pool(role).gpus_per_node // self.tensor_parallel_size(role)

    def replica_range(self, role: str) -> tuple[int, int]:
        """The leg's model replicas at its node group's ``min_size`` and ``max_size``."""
        pool, per_node = self.pool(role), self.replicas_per_node(role)
        return pool.min_size * per_node, pool.max_size * per_node

    def target_ongoing_requests(self, role: str) -> float:
        """Ray Serve's scaling target for the leg: as configured, or the sequences its KV pool holds
        at ``max_model_len`` (at least 1). Past that, vLLM queues requests inside the replica, which
        is when another replica helps. Ray Serve LLM's own default is 1e9, which never scales up
        (Ray 2.58 ``llm/_internal/serve/core/server/builder.py``), so a target is always written."""
        configured = self.leg(role).target_ongoing_requests
        if configured is not None:
            return float(configured)
        budget = next(b for b in self.memory_budgets() if b.role == role)
        return float(max(1, budget.max_concurrent_sequences))

    def node_start(self, role: str) -> scaling.NodeStart:
        """How long a new node of the leg takes to serve (docs/scaling.md, "Bursts")."""
        return scaling.node_start(self.architecture.checkpoint_bytes(DTYPE_BYTES[self.model.dtype]),
                                  self.pool(role).root_volume.throughput_mibps)

    @property
    def image_stack(self) -> ImageStack | None:
        """The Ray, vLLM and NIXL the image carries (``kv_path.IMAGE_STACKS``); None for a custom
        repository or a tag the table does not know."""
        return None if self.image.is_custom else IMAGE_STACKS.get(self.image.tag or "")

    @property
    def kv_path(self) -> KvPath:
        """The KV path both legs render (``kv_path``): the table's row for the model's attention kind
        and GPUDirect RDMA on both legs, with ``nixl``'s overrides, and the upstream defects it meets."""
        return resolve_kv_path(
            attention_kind(hybrid=self.is_hybrid, mla=bool(self.model.known_architecture and
                                                            self.model.known_architecture.is_mla)),
            all(pool.instance.gpudirect_rdma for pool in self.pools), self.image_stack,
            disaggregated=self.topology is Topology.disaggregated,
            kv_buffer_device=self.nixl.kv_buffer_device, backends=self.nixl.backends)

    @property
    def kv_buffer_device(self) -> str:
        """vLLM's ``kv_transfer_config.kv_buffer_device`` on both legs (:attr:`kv_path`)."""
        return self.kv_path.kv_buffer_device

    def tensor_parallel_size(self, role: str) -> int:
        override = self.leg(role).tensor_parallel_size
        return override if override is not None else self.model.tensor_parallel_size

    def replicas(self, role: str) -> int:
        """One model replica per tensor-parallel group of GPUs: ``desired_size * (gpus // tp)``.

        Each node runs one Ray worker pod with all its GPUs; a replica's placement group is
        ``STRICT_PACK`` (one pod), so it spans ``tensor_parallel_size`` GPUs of one node.
        """
        pool = self.pool(role)
        return pool.desired_size * self.replicas_per_node(role)

    def nixl_side_channel_ports(self, role: str) -> list[int]:
        """The TCP ports the role's NIXL listeners bind, on any of its pods; the same in both topologies.

        Ray sets ``VLLM_NIXL_SIDE_CHANNEL_PORT`` = base + replica rank x (tensor x pipeline
        parallel size) (Ray 2.58 ``kv_transfer/base.py``, ``_compute_port_offset``), and vLLM 0.26
        opens one listener per engine on that port plus its data-parallel index (0 here): one port
        per replica, not one per tensor-parallel worker. Which rank lands on which pod is Ray's
        choice, so every pod of the role declares every port of the role, up to the leg's most
        replicas (an autoscaled leg's ranks reach ``max_size`` x replicas per node).
        """
        base = NIXL_SIDE_CHANNEL_PORT_BASE[role]
        tp = self.tensor_parallel_size(role)
        return [base + rank * tp for rank in range(max(self.replicas(role), self.replica_range(role)[1]))]

    @property
    def image_uri(self) -> str:
        return self.image.uri(self.region)

    @property
    def architecture(self) -> ModelArchitecture:
        known = self.model.known_architecture
        if known is None:  # refused when built; here for type checkers
            raise SpecErrors([SpecError("model.architecture", "unknown model architecture")])
        return known

    @property
    def is_hybrid(self) -> bool:
        known = self.model.known_architecture
        return (known is not None and known.is_hybrid) or is_hybrid_gated_deltanet(self.model.source)

    def memory_budgets(self) -> tuple[MemoryBudget, ...]:
        return tuple(
            memory_budget(role, self.pool(role).instance, self.tensor_parallel_size(role), self.architecture,
                          max_model_len=self.model.max_model_len,
                          gpu_memory_utilization=self.model.gpu_memory_utilization, dtype=self.model.dtype,
                          serve_images=self.model.serve_images)
            for role in WORKER_ROLES
        )

    @property
    def language_model_only(self) -> bool:
        """vLLM's ``language_model_only`` for both legs: a vision-language model served as text."""
        return self.architecture.is_multimodal and not self.model.serve_images

    @property
    def kv_bytes_per_prompt_token(self) -> int:
        """K and V of every full-attention layer for one token, whatever the tensor parallel size
        (each GPU sends its share; replicated KV heads only add to it, so this is a lower bound)."""
        return self.architecture.kv_cache_bytes_per_token(DTYPE_BYTES[self.model.dtype])

    @property
    def kv_bytes_per_sequence(self) -> int:
        """For hybrid models, the linear-attention state of a sequence, which vLLM moves with the
        blocks (vLLM PR #41869); 0 for full-attention models."""
        return self.architecture.linear_state_bytes_per_sequence(DTYPE_BYTES[self.model.dtype])

    @property
    def kv_block_tokens(self) -> int:
        """Tokens per KV block on the legs (equal TP on both legs for a hybrid model, refused otherwise)."""
        return self.architecture.kv_block_tokens(DTYPE_BYTES[self.model.dtype], self.tensor_parallel_size(PREFILL))

    @property
    def kv_tokens_withheld(self) -> int:
        """Prompt tokens prefill keeps back (1 for a hybrid model: decode recomputes the last one)."""
        return 2 - self.architecture.kv_tokens_sent(2)

    def kv_transfer_bytes(self, prompt_tokens: int) -> int:
        """The KV cache one request's prompt moves from prefill to decode, in whole blocks: the
        planner's figure and the gate's (:meth:`ModelArchitecture.kv_transfer_bytes`)."""
        return self.architecture.kv_transfer_bytes(DTYPE_BYTES[self.model.dtype], prompt_tokens,
                                                   self.tensor_parallel_size(PREFILL))

    def worker_resources(self, role: str) -> sizing.PodResources:
        return sizing.worker_resources(self.pool(role).instance)

    @property
    def head_resources(self) -> sizing.PodResources:
        return sizing.head_resources(self.system.instance, self.autoscaling_budget)


def _is_resolved_region(value: str) -> bool:
    # An environment-agnostic CDK stack's region is a token such as "${Token[AWS.Region.9]}".
    return isinstance(value, str) and "${Token[" not in value
