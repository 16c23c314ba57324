"""The typed configuration of one deployment: an adapter from a YAML file to the spec layer.

One pydantic model, :class:`DeploymentConfig`, that only the stack (``ray_llm_eks.stack``) and
the CLI read. Its defaults are the spec layer's (:mod:`ray_llm_eks.spec`), which the constructs'
props use too, so each default is stated once: the reference deployment of the AWS sample
(BRIEF section 1), ``Qwen/Qwen3.5-9B`` with prefill/decode disaggregation on two ``g6.8xlarge``
nodes plus one ``m7i.xlarge`` system node, in us-west-2, KubeRay 1.4.0, Ray 2.58.0, image
``ray:serve-llm-cuda-v1.0``.

Pydantic checks the shape (types, unknown keys); every semantic check is the spec layer's, run
once when the model is built (:meth:`DeploymentConfig.specs`), so ``make synth``,
``ray-llm-eks plan`` and a construct used directly refuse the same values with the same
sentence. A mistake surfaces as :class:`ConfigError` whose lines name the dotted field, the bad
value and what is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from .models import ModelArchitecture
from .spec import infrastructure as infra
from .spec.errors import Collector, DoesNotFit, SpecError, SpecErrors
from .spec.placement import DECODE, PREFILL, WORKER_ROLES
from .spec.pools import DEFAULT_GPU_INSTANCE_TYPE, DEFAULT_SYSTEM_INSTANCE_TYPE, RootVolume, SystemPool, WorkerPool
from .spec.serving import (
    DEFAULT_IMAGE_TAG,
    DEFAULT_NAMESPACE,
    DEFAULT_RAY_VERSION,
    DEFAULT_SERVICE_NAME,
    EndpointType,
    GcsFaultTolerance,
    ImageSpec,
    ModelSpec,
    NixlSpec,
    RayAuth,
    SecurityProfile,
    ServingSpec,
    Topology,
)
from .spec.observability import AGENT_NAMESPACE, ObservabilitySpec
from .spec.verification import VerificationSpec

__all__ = [
    "ConfigError", "DeploymentConfig", "EndpointType", "SecurityProfile", "Specs", "Topology",
    "load_config", "parse_config",
]

class ConfigError(ValueError):
    """A configuration mistake, explained for a person (never a jsii traceback).

    ``errors`` holds the spec-layer problems, with fields as dotted config paths, when the
    mistake is semantic; ``does_not_fit`` is True when the only problems are the model not fitting
    in GPU memory (``plan`` exits 1 for those, 2 for everything else).
    """

    def __init__(self, message: str, errors: tuple[SpecError, ...] = ()) -> None:
        super().__init__(message)
        self.errors = errors

    @property
    def does_not_fit(self) -> bool:
        return bool(self.errors) and all(isinstance(e, DoesNotFit) for e in self.errors)


class _Problems(ValueError):
    """Spec-layer problems raised inside pydantic, with dotted config fields."""

    def __init__(self, errors: SpecErrors) -> None:
        super().__init__(str(errors))
        self.errors = errors.errors


class _Shape(BaseModel):
    # Types and unknown keys only: the spec layer checks values (see the module docstring).
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=True)


class RootVolumeConfig(_Shape):
    """gp3 root volume of a GPU node, sized in its launch template.

    gp3's baseline is 125 MiB/s and 3000 IOPS; at 125 MiB/s the 18 GiB Qwen3.5-9B checkpoint
    takes ~147 s to read, at 1000 MiB/s (gp3's maximum) ~18 s.
    """

    size_gib: int = RootVolume.size_gib
    """Root volume size, 20-16384; holds the image (~20 GB) and the Hugging Face cache (an 18 GiB checkpoint for Qwen3.5-9B)."""
    throughput_mibps: int = RootVolume.throughput_mibps
    """gp3 throughput in MiB/s, 125-1000 (as EC2 provisions it); 1000 loads 18 GiB in ~18 s instead of ~147 s at the 125 MiB/s baseline."""
    iops: int = RootVolume.iops
    """gp3 IOPS, 3000-16000 (gp3 allows 0.25 MiB/s per IOPS, so 1000 MiB/s needs at least 4000; at most 500 per GiB)."""


class SystemNodeGroupConfig(_Shape):
    """The CPU node for system pods, the KubeRay operator and the Ray head."""

    instance_type: str = DEFAULT_SYSTEM_INSTANCE_TYPE
    """CPU instance type for system pods, the KubeRay operator and the Ray head (must have no GPU, and leave the head 500m CPU and 2 GiB)."""
    count: int = SystemPool.count
    """Number of system nodes, 1-10."""
    root_volume_size_gib: int = SystemPool.root_volume_size_gib
    """Encrypted gp3 root volume of each system node, 20-16384 GiB."""


class GpuNodeGroupConfig(_Shape):
    """One EFA GPU node group (prefill or decode). One Ray worker pod runs on each node, with all its GPUs."""

    instance_type: str = DEFAULT_GPU_INSTANCE_TYPE
    """GPU instance type with EFA (one L4 24 GB, 32 vCPU, 25 Gbps on g6.8xlarge); refused if the library does not know it has a GPU and EFA."""
    min_size: int = WorkerPool.min_size
    """Minimum nodes of this role, 0-100; below max_size the leg autoscales between them (docs/scaling.md); 0 only where a new node serves before Ray Serve LLM's 600 s timeout."""
    desired_size: int = WorkerPool.desired_size
    """Nodes at deploy time (at least 1: each holds one Ray worker pod); the model replicas of the role are desired_size x GPUs per node / tensor_parallel_size."""
    max_size: int = WorkerPool.max_size
    """Maximum nodes of this role, 1-100; above min_size, Cluster Autoscaler adds nodes up to it."""
    root_volume: RootVolumeConfig = RootVolumeConfig()
    """gp3 root volume, sized in the launch template."""
    placement_group: bool = WorkerPool.placement_group
    """A cluster placement group keeps the nodes close; turn it off when using capacity
    reservations (eksctl #7949, terraform-aws-eks #3730 report insufficient capacity)."""
    tensor_parallel_size: int | None = None
    """Override ``model.tensor_parallel_size`` for this leg only (a divisor of the node's GPUs)."""
    target_ongoing_requests: float | None = None
    """With min_size below max_size (autoscaled): Ray Serve adds a replica when the leg's ongoing requests per replica exceed this; default: the sequences the leg's KV pool holds at max_model_len (docs/scaling.md)."""


class ModelArchitectureConfig(_Shape):
    """Architecture facts from a model's config.json, for the GPU memory check (field meanings
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


class ModelConfig(_Shape):
    """The served model and the vLLM engine settings shared by both legs."""

    served_name: str = ModelSpec.served_name
    """The OpenAI ``model`` id clients send (Ray's ``model_id``)."""
    source: str = ModelSpec.source
    """Hugging Face repository id (or a path the image can read); must be in the package's architecture table or come with ``architecture``."""
    revision: str | None = ModelSpec.revision
    """A 40-hex commit id pins the weights; anything else gives a warning (an error with ``strict``)."""
    dtype: Literal["bfloat16", "float16", "auto"] = ModelSpec.dtype  # type: ignore[assignment]
    """vLLM weight and activation dtype (the reference uses bfloat16)."""
    max_model_len: int = ModelSpec.max_model_len
    """Longest prompt plus output, in tokens; one such sequence must fit in the KV pool of every leg (the memory check of ``plan``, enforced by synth)."""
    gpu_memory_utilization: float = ModelSpec.gpu_memory_utilization
    """Fraction of GPU memory vLLM may use (weights + KV cache), in (0, 1]."""
    enforce_eager: bool = ModelSpec.enforce_eager
    """Skip CUDA graph capture: faster start, less memory, as the reference does."""
    tensor_parallel_size: int = ModelSpec.tensor_parallel_size
    """GPUs per model replica, for both legs (a divisor of one node's GPUs)."""
    architecture: ModelArchitectureConfig | None = None
    """Architecture facts for the memory check when ``source`` is not in the package's model table."""
    hf_token_secret: str | None = ModelSpec.hf_token_secret
    """Secrets Manager secret (ARN or name) holding a Hugging Face token for gated models; read by the workers' own role at start, never inlined."""


class ImageConfig(_Shape):
    """The Ray LLM container image.

    Default: the AWS Deep Learning Container published in account 763104351884,
    ``763104351884.dkr.ecr.<region>.amazonaws.com/ray:serve-llm-cuda-v1.0``, in the stack's region.
    With a digest the manifests use ``repository@sha256:...`` (reproducible).
    """

    repository: str | None = ImageSpec.repository
    """A custom image repository; default: the DLC repository in the deployment's region. With a custom image, ``versions.ray`` is trusted as given."""
    tag: str | None = DEFAULT_IMAGE_TAG
    """Image tag (Ray 2.58, vLLM 0.26, CUDA 13.0, EFA stack). Tags are mutable: prefer a digest."""
    digest: str | None = ImageSpec.digest
    """``sha256:`` + 64 hex; when set the manifests use ``repository@digest`` (reproducible)."""
    user_id: int = ImageSpec.user_id
    """The uid the image runs Ray as (Ray images: 1000); it owns the node's model cache (mode 0750)."""
    group_id: int = ImageSpec.group_id
    """The image user's gid (Ray images: 100)."""


class NetworkConfig(_Shape):
    vpc_cidr: str = infra.DEFAULT_VPC_CIDR
    """CIDR of the new VPC, /16 or /17 (a public /24 and a private /19 per AZ must fit)."""
    nat_gateways: int = infra.DEFAULT_NAT_GATEWAYS
    """One NAT gateway, in the data-plane AZ, unless you want NAT redundancy for the control-plane AZ (at most one per AZ)."""
    flow_log_retention_days: int = infra.DEFAULT_FLOW_LOG_RETENTION_DAYS
    """Days CloudWatch Logs keeps VPC flow logs; one of the periods CloudWatch Logs accepts."""


class ClusterConfig(_Shape):
    name: str | None = None
    """EKS cluster name (letters, digits, '-', '_', at most 100); defaults to the name CloudFormation generates."""
    kubernetes_version: str = infra.DEFAULT_KUBERNETES_VERSION
    """Must match the kubectl layer the library ships (aws-cdk.lambda-layer-kubectl-v35)."""
    endpoint_access: str = infra.DEFAULT_ENDPOINT_ACCESS
    """EKS API endpoint: private (reachable from the VPC only), or public-and-private (the public side open to public_access_cidrs)."""
    public_access_cidrs: list[str] = list(infra.DEFAULT_PUBLIC_ACCESS_CIDRS)
    """With public-and-private: the CIDR blocks allowed to reach the public side (never 0.0.0.0/0)."""
    bootstrap_cluster_creator_admin_permissions: bool = infra.DEFAULT_BOOTSTRAP_CLUSTER_CREATOR_ADMIN
    """Whether the CloudFormation execution role becomes cluster admin; admins come from admin_role_arn. Changing it replaces the cluster."""
    admin_role_arn: str | None = None
    """An IAM role granted cluster admin through an EKS access entry."""
    control_plane_logs: list[str] = list(infra.DEFAULT_CONTROL_PLANE_LOGS)
    """Control-plane log types sent to CloudWatch Logs (api, audit, authenticator, controllerManager, scheduler)."""
    control_plane_log_retention_days: int = infra.DEFAULT_CONTROL_PLANE_LOG_RETENTION_DAYS
    """How long CloudWatch Logs keeps the control-plane logs (EKS's own group never expires)."""


class VersionsConfig(_Shape):
    ray: str = DEFAULT_RAY_VERSION
    """Must equal the Ray inside the image (serve-llm-cuda-v1.0 ships Ray 2.58.0) unless ``image.repository`` names a custom image."""
    kuberay: str = infra.DEFAULT_KUBERAY_VERSION
    """KubeRay operator chart version, semver (the RayService CRD schema the charts are tested against is 1.4.0)."""
    nvidia_device_plugin: str = infra.DEFAULT_NVIDIA_DEVICE_PLUGIN_VERSION
    """0.19.0-0.19.2 default to MOFED mode, which breaks EFA; 0.20.x is the supported line."""
    efa_device_plugin: str = infra.DEFAULT_EFA_DEVICE_PLUGIN_VERSION
    """Chart version of aws-efa-k8s-device-plugin in https://aws.github.io/eks-charts."""


class NixlConfig(_Shape):
    backends: list[Literal["LIBFABRIC", "UCX"]] = list(NixlSpec.backends)  # type: ignore[arg-type]
    """LIBFABRIC is what uses EFA; NIXL's default UCX silently runs at TCP speed on EFA nodes."""
    kv_buffer_device: Literal["cuda", "cpu"] | None = NixlSpec.kv_buffer_device
    """None keeps vLLM's default; ``cpu`` is the documented fallback without GPUDirect RDMA."""


class GcsFaultToleranceConfig(_Shape):
    """Ray's GCS state in ElastiCache for Valkey: losing the head no longer restarts the models."""

    enabled: bool = GcsFaultTolerance.enabled
    """Create the cache (TLS, AUTH from a generated Secrets Manager secret) and point KubeRay's gcsFaultToleranceOptions at it."""
    cache_node_type: str = GcsFaultTolerance.cache_node_type
    """ElastiCache node type (priced by ``plan``)."""
    cache_nodes: int = GcsFaultTolerance.cache_nodes
    """1 (primary only) or 2-6 (primary and replicas in other AZs, automatic failover)."""


class ServingConfig(_Shape):
    service_name: str = DEFAULT_SERVICE_NAME
    """RayService name, a DNS label of at most 47 characters (KubeRay derives longer names from it)."""
    namespace: str = DEFAULT_NAMESPACE
    """Kubernetes namespace of the RayService, its Service and ServiceAccount."""
    security_profile: SecurityProfile = ServingSpec.security_profile
    """Worker pod privilege: privileged (the reference; NIXL registers CUDA memory with EFA) or ipc-lock (experimental)."""
    endpoint: EndpointType = ServingSpec.endpoint
    """How the OpenAI API on port 8000 is exposed: ClusterIP (port-forward) or internal-nlb."""
    client_namespaces: list[str] = list(ServingSpec.client_namespaces)
    """Namespaces whose pods may call the OpenAI API; every other pod in the cluster is denied (NetworkPolicy)."""
    client_cidrs: list[str] = list(ServingSpec.client_cidrs)
    """Networks that may call the OpenAI API; required with internal-nlb (its source ranges)."""
    egress_cidrs: list[str] = list(ServingSpec.egress_cidrs)
    """Where the pods may open HTTPS (model download, AWS and Kubernetes APIs); narrow to the VPC once the model is cached."""
    ray_auth: RayAuth = ServingSpec.ray_auth
    """Ray's token authentication (GCS, dashboard, Jobs API, Ray Client): disabled, or token (needs versions.kuberay 1.5.1+)."""
    gcs_fault_tolerance: GcsFaultToleranceConfig = GcsFaultToleranceConfig()
    """Ray's GCS in a managed Redis (off by default; ``plan`` shows its cost)."""
    admission_exempt_namespaces: list[str] = list(ServingSpec.admission_exempt_namespaces)
    """Namespaces the admission policy leaves alone: node agents with host access or catch-all tolerations."""


class ObservabilityConfig(_Shape):
    """Container Insights, the transport's log metrics, alarms on one SNS topic, and a dashboard (docs/observability.md)."""

    enabled: bool = ObservabilitySpec.enabled
    """The CloudWatch Observability add-on, the alarms and the dashboard; ``plan`` adds their cost."""
    alarm_email: str | None = ObservabilitySpec.alarm_email
    """An address subscribed to the alarm topic (SNS asks it to confirm first)."""
    ttft_p99_slo_ms: int = ObservabilitySpec.ttft_p99_slo_ms
    """Time to first token, p99, that the deployment should meet."""
    verify_every_minutes: int = ObservabilitySpec.verify_every_minutes
    """How often the deployment gate's checks run again and publish TransportVerified: 5, 10, 15, 20, 30 or 60."""


class VerificationConfig(_Shape):
    """The deployment gate that runs after every change to the serving spec (docs/verification.md)."""

    wait: bool = VerificationSpec.wait
    """CloudFormation waits for the gate: a failed gate fails the deploy and rolls it back."""
    timeout_minutes: int = VerificationSpec.timeout_minutes
    """The longest a deploy waits for the service and the gate (10 to 720)."""
    probes: int = VerificationSpec.probes
    """Streamed chat completions sent through the OpenAI Service."""
    probe_prompt_fraction: float = VerificationSpec.probe_prompt_fraction
    """Prompt length of each probe, as a fraction of model.max_model_len."""
    probe_max_tokens: int = VerificationSpec.probe_max_tokens
    """Answer length of each probe."""
    min_kv_fraction: float = VerificationSpec.min_kv_fraction
    """The EFA counters must move at least this fraction of the KV bytes predicted for the probes."""


# Where a ServingSpec field lives in the configuration, when its name there differs.
_SERVING_FIELDS = {
    "namespace": "serving.namespace",
    "service_name": "serving.service_name",
    "security_profile": "serving.security_profile",
    "endpoint": "serving.endpoint",
    "client_namespaces": "serving.client_namespaces",
    "client_cidrs": "serving.client_cidrs",
    "egress_cidrs": "serving.egress_cidrs",
    "admission_exempt_namespaces": "serving.admission_exempt_namespaces",
    "kuberay_version": "versions.kuberay",
    "ray_auth": "serving.ray_auth",
    "ray_version": "versions.ray",
    "prefill_tensor_parallel_size": "prefill.tensor_parallel_size",
    "decode_tensor_parallel_size": "decode.tensor_parallel_size",
    "prefill_target_ongoing_requests": "prefill.target_ongoing_requests",
    "decode_target_ongoing_requests": "decode.target_ongoing_requests",
}


def _config_field(spec_field: str) -> str:
    head, _, rest = spec_field.partition(".")
    mapped = _SERVING_FIELDS.get(head)
    return (mapped + ("." + rest if rest else "")) if mapped else spec_field


@dataclass(frozen=True)
class Specs:
    """Everything the stack builds, as the spec layer sees it (:meth:`DeploymentConfig.specs`)."""

    serving: ServingSpec
    """Holds the pools too: the system, prefill and decode below are its own."""
    verification: VerificationSpec = VerificationSpec()
    observability: ObservabilitySpec = ObservabilitySpec()

    @property
    def system(self) -> SystemPool:
        return self.serving.system

    @property
    def prefill(self) -> WorkerPool:
        return self.serving.prefill

    @property
    def decode(self) -> WorkerPool:
        return self.serving.decode

    def pool(self, role: str) -> WorkerPool:
        return self.serving.pool(role)


class DeploymentConfig(_Shape):
    """A whole deployment. ``DeploymentConfig()`` is the reference deployment."""

    region: str = infra.DEFAULT_REGION
    """AWS region of the stack (the DLC image is pulled from this region's ECR)."""
    control_plane_azs: list[str] = list(infra.DEFAULT_CONTROL_PLANE_AZS)
    """EKS needs subnets in at least two AZs of the region for its control plane."""
    data_plane_az: str = infra.DEFAULT_DATA_PLANE_AZ
    """Every node lives here, one of control_plane_azs: EFA traffic cannot cross AZs."""
    stack_name: str = infra.DEFAULT_STACK_NAME
    """CloudFormation stack name (and construct ID of the stack): letters, digits and '-', starting with a letter."""
    topology: Topology = ServingSpec.topology
    """disaggregated (prefill/decode with NIXL over EFA) or colocated (the baseline); changes only the Serve config."""
    strict: bool = ServingSpec.strict
    """Turn the irreproducibility warnings (image without digest, model without a commit revision) into errors."""
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
    verification: VerificationConfig = VerificationConfig()
    """The deployment gate: how long a deploy waits for proof that the endpoint and the KV path work."""
    observability: ObservabilityConfig = ObservabilityConfig()
    """Metrics, logs, alarms and a dashboard; on by default."""

    _specs: Specs | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _semantics(self) -> DeploymentConfig:
        # Raises _Problems; parse_config turns them into a ConfigError naming each dotted field.
        self._specs = self._build_specs()
        return self

    def specs(self) -> Specs:
        """The spec layer's objects, built (and so checked) once when the configuration was validated."""
        assert self._specs is not None
        return self._specs

    def _build_specs(self) -> Specs:
        found = Collector()
        if found.check(infra.region, self.region) is not None:
            found.check(infra.availability_zones, self.region, self.control_plane_azs, self.data_plane_az)
        found.check(infra.stack_name, self.stack_name)
        found.check(infra.vpc_cidr, self.network.vpc_cidr, len(self.control_plane_azs))
        found.check(infra.nat_gateways, self.network.nat_gateways, max(1, len(self.control_plane_azs)))
        found.check(infra.retention_days, self.network.flow_log_retention_days)
        found.check(infra.cluster_name, self.cluster.name)
        found.check(infra.kubernetes_version, self.cluster.kubernetes_version)
        found.check(infra.endpoint_access, self.cluster.endpoint_access)
        found.check(infra.public_access_cidrs, self.cluster.public_access_cidrs, self.cluster.endpoint_access)
        found.check(infra.admin_role_arn, self.cluster.admin_role_arn)
        found.check(infra.control_plane_logs, self.cluster.control_plane_logs)
        found.check(infra.retention_days, self.cluster.control_plane_log_retention_days,
                    "cluster.control_plane_log_retention_days")
        found.check(infra.semver, self.versions.kuberay, "versions.kuberay")
        found.check(infra.nvidia_device_plugin_version, self.versions.nvidia_device_plugin)
        found.check(infra.semver, self.versions.efa_device_plugin, "versions.efa_device_plugin", v_prefix=True)

        system = found.check(SystemPool, **self.system.model_dump(), prefix="system")
        pools = {role: self._worker_pool(found, role) for role in WORKER_ROLES}
        model = found.check(self._model_spec, prefix="model")
        image = found.check(ImageSpec, **self.image.model_dump(), prefix="image")
        nixl = found.check(NixlSpec, backends=tuple(self.nixl.backends), kv_buffer_device=self.nixl.kv_buffer_device,
                           prefix="nixl")
        every = self.observability.verify_every_minutes if self.observability.enabled else None
        verification = None
        try:
            verification = VerificationSpec(**self.verification.model_dump(), every_minutes=every)
        except SpecErrors as errors:
            # every_minutes comes from observability.verify_every_minutes; the rest from verification.
            found.errors.extend(type(e)("observability.verify_every_minutes" if e.field == "every_minutes"
                                        else f"verification.{e.field}", e.message) for e in errors)
        gcs = found.check(GcsFaultTolerance, **self.serving.gcs_fault_tolerance.model_dump(),
                          prefix="serving.gcs_fault_tolerance")
        observability = found.check(ObservabilitySpec, **self.observability.model_dump(), prefix="observability")
        exempt = tuple(self.serving.admission_exempt_namespaces)
        if self.observability.enabled and AGENT_NAMESPACE not in exempt:
            # The add-on's agent and Fluent Bit run with host access and tolerate every taint.
            exempt += (AGENT_NAMESPACE,)
        serving = None
        if None not in (system, model, image, nixl, gcs, *pools.values()):
            try:
                serving = ServingSpec(
                    region=self.region, prefill=pools[PREFILL], decode=pools[DECODE], system=system, model=model,
                    image=image, nixl=nixl, topology=self.topology, security_profile=self.serving.security_profile,
                    endpoint=self.serving.endpoint, namespace=self.serving.namespace,
                    service_name=self.serving.service_name, ray_version=self.versions.ray,
                    prefill_tensor_parallel_size=self.prefill.tensor_parallel_size,
                    decode_tensor_parallel_size=self.decode.tensor_parallel_size, strict=self.strict,
                    client_namespaces=tuple(self.serving.client_namespaces),
                    client_cidrs=tuple(self.serving.client_cidrs), egress_cidrs=tuple(self.serving.egress_cidrs),
                    admission_exempt_namespaces=exempt,
                    kuberay_version=self.versions.kuberay, ray_auth=self.serving.ray_auth,
                    gcs_fault_tolerance=gcs,
                    prefill_target_ongoing_requests=self.prefill.target_ongoing_requests,
                    decode_target_ongoing_requests=self.decode.target_ongoing_requests,
                )
            except SpecErrors as errors:
                found.errors.extend(type(e)(_config_field(e.field), e.message) for e in errors)
            if serving is not None and verification is not None:
                found.errors.extend(type(e)(_config_field(e.field), e.message)
                                    for e in serving.scale_to_zero_conflicts(verification.every_minutes))
        try:
            found.raise_if_any()
        except SpecErrors as errors:
            raise _Problems(errors) from None
        assert serving is not None and verification is not None and observability is not None
        return Specs(serving=serving, verification=verification, observability=observability)

    def _worker_pool(self, found: Collector, role: str) -> WorkerPool | None:
        group = self.gpu(role)
        volume = found.check(RootVolume, **group.root_volume.model_dump(), prefix=f"{role}.root_volume")
        if volume is None:
            return None
        return found.check(
            WorkerPool, role=role, instance_type=group.instance_type, min_size=group.min_size,
            desired_size=group.desired_size, max_size=group.max_size, root_volume=volume,
            placement_group=group.placement_group, prefix=role,
        )

    def _model_spec(self) -> ModelSpec:
        model = self.model
        architecture = None
        if model.architecture is not None:
            architecture = ModelArchitecture(name=model.source, source="model.architecture in the configuration",
                                             **model.architecture.model_dump())
        return ModelSpec(
            source=model.source, served_name=model.served_name, revision=model.revision, dtype=model.dtype,
            max_model_len=model.max_model_len, gpu_memory_utilization=model.gpu_memory_utilization,
            enforce_eager=model.enforce_eager, tensor_parallel_size=model.tensor_parallel_size,
            architecture=architecture, hf_token_secret=model.hf_token_secret,
        )

    # Conveniences for the stack, plan and preflight: each reads the specs, nothing is derived twice.

    def gpu(self, role: str) -> GpuNodeGroupConfig:
        """The configuration of the ``prefill`` or ``decode`` node group."""
        return {PREFILL: self.prefill, DECODE: self.decode}[role]

    def reproducibility_problems(self) -> list[SpecError]:
        return [SpecError(_config_field(p.field), p.message) for p in self.specs().serving.reproducibility_problems()]


def _location(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _explain(error: ValidationError, source: str) -> ConfigError:
    lines = [f"invalid configuration in {source}:"]
    spec_errors: list[SpecError] = []
    for item in error.errors():
        field = _location(item["loc"])
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, _Problems):
            prefix = "" if field == "(top level)" else field + "."
            for problem in cause.errors:
                spec_errors.append(type(problem)(prefix + problem.field, problem.message))
                lines.append(f"  {prefix}{problem.field}: {problem.message}")
            continue
        if item["type"] == "extra_forbidden":
            lines.append(f"  {field}: unknown key (got {item['input']!r}); check the spelling against docs/configuration.md")
            continue
        message = item["msg"].removeprefix("Value error, ")
        got = item.get("input")
        hidden = isinstance(got, (dict, BaseModel)) or got is None or repr(got) in message
        shown = "" if hidden else f" (got {got!r})"
        lines.append(f"  {field}: {message}{shown}")
    return ConfigError("\n".join(lines), tuple(spec_errors))


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
