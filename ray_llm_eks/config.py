"""The typed configuration of one deployment.

One pydantic model, :class:`DeploymentConfig`, whose defaults are the reference deployment
of the AWS sample (BRIEF section 1): ``Qwen/Qwen3.5-9B`` served with prefill/decode
disaggregation on two ``g6.8xlarge`` nodes (one L4 each) plus one ``m7i.xlarge`` system node,
in us-west-2, KubeRay 1.4.0, Ray 2.58.0, image ``ray:serve-llm-cuda-v1.0``.

Every check runs before any construct is built. A mistake surfaces as :class:`ConfigError`
whose message names the field, the bad value and what is accepted; unknown keys are refused
so a typo never passes silently.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import instance_types
from .models import is_hybrid_gated_deltanet

# The AWS account that publishes the AWS Deep Learning Containers, including the Ray LLM image.
DLC_ACCOUNT = "763104351884"
# The retention periods CloudWatch Logs accepts (PutRetentionPolicy API).
CLOUDWATCH_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192,
                             2557, 2922, 3288, 3653)
RAY_SERVICE_NAME_MAX = 47  # KubeRay derives longer names from it and refuses more than 47.
# NVIDIA device plugin chart versions whose MOFED default breaks EFA (BRIEF section 2, "Add-ons").
BROKEN_NVIDIA_DEVICE_PLUGIN_VERSIONS = frozenset({"0.19.0", "0.19.1", "0.19.2"})

_AZ = re.compile(r"^([a-z]{2}(-[a-z]+)+-\d+)[a-z]$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")


class ConfigError(ValueError):
    """A configuration mistake, explained for a person (never a jsii traceback)."""


class _FieldProblem(ValueError):
    """A cross-field check's failure, reported against the field the user should change."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=True)


class Topology(str, Enum):
    disaggregated = "disaggregated"
    colocated = "colocated"


class EndpointType(str, Enum):
    cluster_ip = "ClusterIP"
    internal_nlb = "internal-nlb"


class SecurityProfile(str, Enum):
    privileged = "privileged"
    """What the reference does: NIXL registers CUDA memory with the EFA device."""
    ipc_lock = "ipc-lock"
    """Experimental: not privileged, capability IPC_LOCK only. Unverified on real nodes."""


class EndpointAccess(str, Enum):
    public_and_private = "public-and-private"
    private = "private"
    public = "public"


class RootVolumeConfig(_Strict):
    """gp3 root volume of a GPU node, sized in its launch template.

    gp3's baseline is 125 MiB/s and 3000 IOPS; at 125 MiB/s the 18 GiB Qwen3.5-9B checkpoint
    takes ~147 s to read, at 1000 MiB/s (gp3's maximum) ~18 s.
    """

    size_gib: int = Field(200, ge=20, le=16384)
    """Root volume size; holds the image (~20 GB) and the Hugging Face cache (an 18 GiB checkpoint for Qwen3.5-9B)."""
    throughput_mibps: int = Field(1000, ge=125, le=1000)
    """gp3 throughput in MiB/s (as EC2 provisions it); 1000 (the maximum) loads 18 GiB in ~18 s instead of ~147 s at the 125 MiB/s baseline."""
    iops: int = Field(16000, ge=3000, le=16000)
    """gp3 IOPS; 16000 is the maximum (gp3 allows 0.25 MiB/s per IOPS, so 1000 MiB/s needs at least 4000)."""

    @model_validator(mode="after")
    def _gp3_ratios(self) -> RootVolumeConfig:
        # gp3 rules: at most 500 IOPS per GiB, and at most 0.25 MiB/s per provisioned IOPS.
        if self.iops > 500 * self.size_gib:
            raise ValueError(
                f"iops {self.iops} exceeds gp3's 500 IOPS per GiB for size_gib {self.size_gib}; "
                f"accepted: at most {500 * self.size_gib}"
            )
        if self.throughput_mibps > self.iops // 4:
            raise ValueError(
                f"throughput_mibps {self.throughput_mibps} exceeds gp3's 0.25 MiB/s per IOPS for "
                f"iops {self.iops}; accepted: at most {self.iops // 4}"
            )
        return self


class SystemNodeGroupConfig(_Strict):
    """The CPU node for system pods, the KubeRay operator and the Ray head."""

    instance_type: str = "m7i.xlarge"
    """CPU instance type for system pods, the KubeRay operator and the Ray head (must have no GPU)."""
    count: int = Field(1, ge=1, le=10)
    """Number of system nodes."""
    root_volume_size_gib: int = Field(50, ge=20, le=16384)
    """Encrypted gp3 root volume of each system node."""

    @field_validator("instance_type")
    @classmethod
    def _cpu_only(cls, value: str) -> str:
        instance_types.require_cpu_only(value)
        return value


class GpuNodeGroupConfig(_Strict):
    """One EFA GPU node group (prefill or decode). One Ray worker pod runs on each node."""

    instance_type: str = "g6.8xlarge"
    """GPU instance type with EFA (one L4 24 GB, 32 vCPU, 25 Gbps on g6.8xlarge); refused if the library knows it has no GPU or no EFA."""
    min_size: int = Field(1, ge=0, le=100)
    """Minimum nodes (and Ray worker pods) of this role."""
    desired_size: int = Field(1, ge=0, le=100)
    """Nodes at deploy time; one Ray worker pod per node."""
    max_size: int = Field(1, ge=1, le=100)
    """Maximum nodes of this role."""
    root_volume: RootVolumeConfig = RootVolumeConfig()
    """gp3 root volume, sized in the launch template."""
    placement_group: bool = True
    """A cluster placement group keeps the nodes close; turn it off when using capacity
    reservations (eksctl #7949, terraform-aws-eks #3730 report insufficient capacity)."""
    tensor_parallel_size: int | None = Field(None, ge=1)
    """Override ``model.tensor_parallel_size`` for this leg only."""

    @field_validator("instance_type")
    @classmethod
    def _gpu_with_efa(cls, value: str) -> str:
        instance_types.require_efa_gpu(value)
        return value

    @model_validator(mode="after")
    def _sizes_ordered(self) -> GpuNodeGroupConfig:
        instance_types.require_ordered_sizes(self.min_size, self.desired_size, self.max_size)
        return self

    @property
    def instance(self) -> instance_types.InstanceType:
        return instance_types.INSTANCE_TYPES[self.instance_type]


class ModelArchitectureConfig(_Strict):
    """Architecture facts from a model's config.json, for ``ray-llm-eks plan`` (field meanings
    as in :class:`ray_llm_eks.models.ModelArchitecture`). Needed only for models the package's
    table does not list; dense models leave the ``linear_*`` fields at 0."""

    parameter_count: int = Field(gt=0)
    """Total parameters (weights bytes = parameters x dtype bytes)."""
    num_hidden_layers: int = Field(gt=0)
    """Decoder layers (config.json ``num_hidden_layers``)."""
    full_attention_layers: int = Field(ge=0)
    """Layers with full attention: only these hold a per-token KV cache."""
    num_attention_heads: int = Field(gt=0)
    """Query heads of a full-attention layer."""
    num_key_value_heads: int = Field(gt=0)
    """KV heads of a full-attention layer (GQA)."""
    head_dim: int = Field(gt=0)
    """Dimension of one attention head."""
    linear_attention_layers: int = Field(0, ge=0)
    """Linear-attention (Gated-DeltaNet) layers; 0 for dense models."""
    linear_num_key_heads: int = Field(0, ge=0)
    """Key heads of a linear-attention layer."""
    linear_num_value_heads: int = Field(0, ge=0)
    """Value heads of a linear-attention layer."""
    linear_key_head_dim: int = Field(0, ge=0)
    """Key head dimension of a linear-attention layer."""
    linear_value_head_dim: int = Field(0, ge=0)
    """Value head dimension of a linear-attention layer."""
    linear_conv_kernel_dim: int = Field(0, ge=0)
    """Short-convolution kernel size of a linear-attention layer."""
    linear_state_dtype_bytes: int = Field(4, ge=1, le=8)
    """Bytes per element of the per-sequence linear-attention state (float32 in Qwen3.5)."""

    @model_validator(mode="after")
    def _layers_add_up(self) -> ModelArchitectureConfig:
        if self.full_attention_layers + self.linear_attention_layers != self.num_hidden_layers:
            raise ValueError(
                f"full_attention_layers ({self.full_attention_layers}) + linear_attention_layers "
                f"({self.linear_attention_layers}) must equal num_hidden_layers ({self.num_hidden_layers})"
            )
        return self


class ModelConfig(_Strict):
    """The served model and the vLLM engine settings shared by both legs."""

    served_name: str = "qwen3.5-9b"
    """The OpenAI ``model`` id clients send (Ray's ``model_id``)."""
    source: str = "Qwen/Qwen3.5-9B"
    """Hugging Face repository id (or a path the image can read)."""
    revision: str | None = None
    """A commit hash pins the weights; unpinned gives a warning (an error with ``strict``)."""
    dtype: Literal["bfloat16", "float16", "auto"] = "bfloat16"
    """vLLM weight and activation dtype (the reference uses bfloat16)."""
    max_model_len: int = Field(4096, gt=0)
    """Longest prompt plus output, in tokens; bounds the KV cache per sequence."""
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    """Fraction of GPU memory vLLM may use (weights + KV cache), in (0, 1]."""
    enforce_eager: bool = True
    """Skip CUDA graph capture: faster start, less memory, as the reference does."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs per model replica, for both legs (at most the GPUs of one node)."""
    architecture: ModelArchitectureConfig | None = None
    """Architecture facts for ``plan`` when ``source`` is not in the package's model table."""

    @field_validator("served_name")
    @classmethod
    def _served_name(cls, value: str) -> str:
        if not value or any(c.isspace() for c in value):
            raise ValueError(f"served_name {value!r} must be non-empty with no whitespace")
        return value

    @property
    def is_hybrid(self) -> bool:
        return is_hybrid_gated_deltanet(self.source)


class ImageConfig(_Strict):
    """The Ray LLM container image.

    Default: the AWS Deep Learning Container published in account 763104351884,
    ``763104351884.dkr.ecr.<region>.amazonaws.com/ray:serve-llm-cuda-v1.0``.
    With a digest the manifests use ``repository@sha256:...`` (reproducible).
    """

    repository: str | None = None
    """Defaults to the DLC repository in the deployment's region."""
    tag: str | None = "serve-llm-cuda-v1.0"
    """Image tag (Ray 2.58, vLLM 0.26, CUDA 13.0, EFA stack). Tags are mutable: prefer a digest."""
    digest: str | None = None
    """``sha256:`` + 64 hex; when set the manifests use ``repository@digest`` (reproducible)."""

    @field_validator("digest")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        if value is not None and not _DIGEST.match(value):
            raise ValueError(f"digest {value!r} is not 'sha256:' followed by 64 lowercase hex characters")
        return value

    @model_validator(mode="after")
    def _tag_or_digest(self) -> ImageConfig:
        if not self.tag and not self.digest:
            raise ValueError("image needs a tag or a digest; got neither (accepted: tag, digest, or both)")
        return self


class NetworkConfig(_Strict):
    vpc_cidr: str = "10.0.0.0/16"
    """CIDR of the new VPC."""
    nat_gateways: int = Field(1, ge=1, le=2)
    """One NAT gateway, in the data-plane AZ, unless you want NAT redundancy for the control-plane AZ."""
    flow_log_retention_days: int = 30
    """Days CloudWatch Logs keeps VPC flow logs; one of the periods CloudWatch Logs accepts."""

    @field_validator("flow_log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in CLOUDWATCH_RETENTION_DAYS:
            raise ValueError(
                f"flow_log_retention_days {value} is not a CloudWatch Logs retention period; "
                f"accepted: {', '.join(map(str, CLOUDWATCH_RETENTION_DAYS))}"
            )
        return value


class ClusterConfig(_Strict):
    name: str | None = None
    """EKS cluster name; defaults to the name CloudFormation generates."""
    kubernetes_version: Literal["1.35"] = "1.35"
    """Must match the kubectl layer the library ships (aws-cdk.lambda-layer-kubectl-v35)."""
    endpoint_access: EndpointAccess = EndpointAccess.public_and_private
    """EKS API endpoint: public-and-private, private, or public."""
    public_access_cidrs: list[str] = ["0.0.0.0/0"]
    """CIDRs allowed to reach the public endpoint; narrow this to your networks."""
    admin_role_arn: str | None = None
    """An IAM role granted cluster admin through an EKS access entry."""
    control_plane_logs: list[Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]] = [
        "api",
        "audit",
        "authenticator",
    ]
    """Control-plane log types sent to CloudWatch Logs."""

    @field_validator("admin_role_arn")
    @classmethod
    def _role_arn(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$", value):
            raise ValueError(f"admin_role_arn {value!r} is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)")
        return value


class VersionsConfig(_Strict):
    ray: str = "2.58.0"
    """Must equal the Ray inside the image (serve-llm-cuda-v1.0 ships Ray 2.58)."""
    kuberay: str = "1.4.0"
    """KubeRay operator chart version (the RayService CRD schema the charts are tested against)."""
    nvidia_device_plugin: str = "0.20.1"
    """0.19.0-0.19.2 default to MOFED mode, which breaks EFA; 0.20.x is the supported line."""
    efa_device_plugin: str = "v0.5.20"
    """Chart version of aws-efa-k8s-device-plugin in https://aws.github.io/eks-charts."""

    @field_validator("nvidia_device_plugin")
    @classmethod
    def _not_broken(cls, value: str) -> str:
        if value in BROKEN_NVIDIA_DEVICE_PLUGIN_VERSIONS:
            raise ValueError(
                f"nvidia_device_plugin {value!r} defaults to MOFED mode, which breaks EFA; accepted: 0.20.x"
            )
        return value


class NixlConfig(_Strict):
    backends: list[Literal["LIBFABRIC", "UCX"]] = ["LIBFABRIC"]
    """LIBFABRIC is what uses EFA; NIXL's default UCX silently runs at TCP speed on EFA nodes."""
    kv_buffer_device: Literal["cuda", "cpu"] | None = None
    """None keeps vLLM's default; ``cpu`` is the documented fallback without GPUDirect RDMA."""

    @field_validator("backends")
    @classmethod
    def _not_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("backends must name at least one NIXL backend; accepted: LIBFABRIC, UCX")
        return value


class ServingConfig(_Strict):
    service_name: str = "ray-llm"
    """RayService name (at most 47 characters: KubeRay derives longer names from it)."""
    namespace: str = "inference"
    """Kubernetes namespace of the RayService, its Service and ServiceAccount."""
    security_profile: SecurityProfile = SecurityProfile.privileged
    """Worker pod privilege: privileged (the reference; NIXL registers CUDA memory with EFA) or ipc-lock (experimental)."""
    endpoint: EndpointType = EndpointType.cluster_ip
    """How the OpenAI API on port 8000 is exposed: ClusterIP (port-forward) or internal-nlb."""

    @field_validator("service_name", "namespace")
    @classmethod
    def _dns_label(cls, value: str, info: Any) -> str:
        if not _DNS_LABEL.match(value) or len(value) > 63:
            raise ValueError(f"{info.field_name} {value!r} must be a DNS label (lowercase letters, digits, '-')")
        return value

    @field_validator("service_name")
    @classmethod
    def _short_enough(cls, value: str) -> str:
        if len(value) > RAY_SERVICE_NAME_MAX:
            raise ValueError(
                f"service_name {value!r} has {len(value)} characters; KubeRay accepts at most {RAY_SERVICE_NAME_MAX}"
            )
        return value


class DeploymentConfig(_Strict):
    """A whole deployment. ``DeploymentConfig()`` is the reference deployment."""

    region: str = "us-west-2"
    """AWS region of the stack."""
    control_plane_azs: list[str] = ["us-west-2a", "us-west-2b"]
    """EKS needs subnets in at least two AZs for its control plane."""
    data_plane_az: str = "us-west-2a"
    """Every node lives here: EFA traffic cannot cross AZs."""
    stack_name: str = "RayLlmEks"
    """CloudFormation stack name (and construct ID of the stack)."""
    topology: Topology = Topology.disaggregated
    """disaggregated (prefill/decode with NIXL over EFA) or colocated (the baseline); changes only the RayService."""
    strict: bool = False
    """Turn the tag-only image and unpinned model revision warnings into errors."""
    network: NetworkConfig = NetworkConfig()
    """VPC settings."""
    cluster: ClusterConfig = ClusterConfig()
    """EKS cluster settings."""
    system: SystemNodeGroupConfig = SystemNodeGroupConfig()
    """The CPU system node group."""
    prefill: GpuNodeGroupConfig = GpuNodeGroupConfig()
    """The prefill GPU node group."""
    decode: GpuNodeGroupConfig = GpuNodeGroupConfig()
    """The decode GPU node group."""
    model: ModelConfig = ModelConfig()
    """The served model and engine settings."""
    image: ImageConfig = ImageConfig()
    """The Ray LLM container image."""
    versions: VersionsConfig = VersionsConfig()
    """Pinned versions of Ray and the Helm charts."""
    nixl: NixlConfig = NixlConfig()
    """NIXL KV-transfer settings."""
    serving: ServingConfig = ServingConfig()
    """Kubernetes-side serving settings."""

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not _REGION.match(value):
            raise ValueError(f"region {value!r} is not an AWS region name (for example us-west-2)")
        return value

    @field_validator("control_plane_azs")
    @classmethod
    def _two_azs(cls, value: list[str]) -> list[str]:
        if len(value) < 2:
            raise ValueError(
                f"EKS needs subnets in at least two availability zones; got {len(value)} ({value}); "
                "accepted: two or more AZ names such as [us-west-2a, us-west-2b]"
            )
        if len(set(value)) != len(value):
            raise ValueError(f"availability zones must be distinct; got {value}")
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> DeploymentConfig:
        for az in [*self.control_plane_azs, self.data_plane_az]:
            match = _AZ.match(az)
            if not match or match.group(1) != self.region:
                raise _FieldProblem(
                    "data_plane_az" if az == self.data_plane_az else "control_plane_azs",
                    f"availability zone {az!r} is not in region {self.region!r}; "
                    f"accepted: names like {self.region}a"
                )
        if self.data_plane_az not in self.control_plane_azs:
            raise _FieldProblem(
                "data_plane_az",
                f"data_plane_az {self.data_plane_az!r} is not one of control_plane_azs "
                f"{self.control_plane_azs}; accepted: one of those"
            )
        for role in ("prefill", "decode"):
            group: GpuNodeGroupConfig = getattr(self, role)
            tp = self.tensor_parallel_size(role)
            if tp > group.instance.gpus:
                field = f"{role}.tensor_parallel_size" if group.tensor_parallel_size else "model.tensor_parallel_size"
                raise _FieldProblem(
                    field,
                    f"tensor_parallel_size {tp} for {role} is larger than the {group.instance.gpus} GPU(s) "
                    f"of one {group.instance_type}; accepted: 1..{group.instance.gpus}"
                )
        if self.model.is_hybrid and self.tensor_parallel_size("prefill") != self.tensor_parallel_size("decode"):
            raise _FieldProblem(
                "decode.tensor_parallel_size",
                f"{self.model.source} is a hybrid (Gated-DeltaNet) model: NIXL P/D needs the same "
                f"tensor_parallel_size on both legs; got prefill={self.tensor_parallel_size('prefill')}, "
                f"decode={self.tensor_parallel_size('decode')}"
            )
        return self

    # Derived values: one place for each, so constructs and charts agree.

    def tensor_parallel_size(self, role: str) -> int:
        group: GpuNodeGroupConfig = getattr(self, role)
        return group.tensor_parallel_size or self.model.tensor_parallel_size

    @property
    def image_repository(self) -> str:
        return self.image.repository or f"{DLC_ACCOUNT}.dkr.ecr.{self.region}.amazonaws.com/ray"

    @property
    def image_uri(self) -> str:
        if self.image.digest:
            return f"{self.image_repository}@{self.image.digest}"
        return f"{self.image_repository}:{self.image.tag}"

    def reproducibility_problems(self) -> list[str]:
        """What makes this deployment irreproducible (warned about; errors with ``strict``)."""
        problems = []
        if not self.image.digest:
            problems.append(
                f"image {self.image_uri} is pinned by tag only; tags are mutable: set image.digest"
            )
        if not self.model.revision:
            problems.append(
                f"model {self.model.source} has no revision; the weights can change under you: set model.revision"
            )
        return problems


def _location(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _explain(error: ValidationError, source: str) -> ConfigError:
    lines = [f"invalid configuration in {source}:"]
    for item in error.errors():
        field = _location(item["loc"])
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, _FieldProblem):
            prefix = _location(item["loc"])
            field = cause.field if prefix == "(top level)" else f"{prefix}.{cause.field}"
        if item["type"] == "extra_forbidden":
            lines.append(f"  {field}: unknown key (got {item['input']!r}); check the spelling against the README")
            continue
        message = item["msg"].removeprefix("Value error, ")
        got = item.get("input")
        hidden = isinstance(got, (dict, BaseModel)) or got is None or repr(got) in message
        shown = "" if hidden else f" (got {got!r})"
        lines.append(f"  {field}: {message}{shown}")
    return ConfigError("\n".join(lines))


def parse_config(data: dict[str, Any] | None, source: str = "configuration") -> DeploymentConfig:
    """Validate a mapping (for example loaded from YAML) into a DeploymentConfig."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration in {source}: the top level must be a mapping, got {type(data).__name__}")
    try:
        return DeploymentConfig.model_validate(data)
    except ValidationError as error:
        raise _explain(error, source) from None


def load_config(path: str | Path | None) -> DeploymentConfig:
    """Load and validate a YAML file; ``None`` gives the reference deployment."""
    if path is None:
        return DeploymentConfig()
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {path}: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise ConfigError(f"malformed YAML in {path} at {where}: {error.problem or error}") from None
    return parse_config(data, str(path))
