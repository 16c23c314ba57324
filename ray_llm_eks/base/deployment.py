"""The declared deployment: one model of everything one ``cdk deploy`` creates.

:class:`Deployment` is what the YAML configuration loads into (``ray_llm_eks.config``, through
pydantic's ``TypeAdapter`` over these frozen dataclasses) and what the stack, ``plan``,
``preflight`` and ``verify`` read. Its parts are the spec layer's own objects (the pools, the
legs, the model, the image, the service settings, the gate, observability), so each field has
one definition, one default and one docstring, and docs/configuration.md is generated from them
(``make docs``). Each part checks its own fields when built; :meth:`Deployment.__post_init__`
checks the rules of the AWS side that cross parts (the AZs of the region, the VPC's room for
them) and composes the :class:`~.specs.Specs` the constructs take, once, through
:func:`~.composition.compose`, which holds the rules that cross the serving parts (the legs on the
model, client CIDRs against the VPC, scale-to-zero against continuous verification, spend).

Every problem is a :class:`~ray_llm_eks.base.errors.SpecError` whose field is the dotted path a
user writes in the YAML file (``prefill.tensor_parallel_size``, ``serving.client_cidrs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from . import infrastructure as infra
from .composition import compose
from .cost import Footprint
from .errors import Collector, SpecError, SpecErrors
from .observability import ObservabilitySpec
from .placement import DECODE, PREFILL, WORKER_ROLES
from .pools import SystemPool, WorkerPool
from .serving import (
    DEFAULT_RAY_VERSION,
    DisaggregationSpec,
    ImageSpec,
    Leg,
    ModelSpec,
    NixlSpec,
    ServiceSettings,
    Topology,
)
from .specs import Specs
from .spend import SpendSpec
from .verification import VerificationSpec

_FORBID = {"extra": "forbid"}


@dataclass(frozen=True)
class Network:
    """The new VPC: a public /24 and a private /19 in each control-plane AZ."""

    __pydantic_config__ = _FORBID

    vpc_cidr: str = infra.DEFAULT_VPC_CIDR
    """CIDR of the new VPC, /16 or /17 (a public /24 and a private /19 per AZ must fit)."""
    nat_gateways: int = infra.DEFAULT_NAT_GATEWAYS
    """One NAT gateway, in the data-plane AZ, unless you want NAT redundancy for the control-plane AZ (at most one per AZ)."""
    flow_log_retention_days: int = infra.DEFAULT_FLOW_LOG_RETENTION_DAYS
    """Days CloudWatch Logs keeps VPC flow logs; one of the periods CloudWatch Logs accepts."""

    def __post_init__(self) -> None:
        found = Collector()
        found.check(infra.retention_days, self.flow_log_retention_days, "flow_log_retention_days")
        found.raise_if_any(self)


@dataclass(frozen=True)
class AddonVersions:
    """Versions of the EKS managed add-ons the cluster runs. Unset, EKS installs its default
    version for the cluster's Kubernetes version when the add-on is created, and keeps it until
    someone updates the add-on: the same stack deployed on another day may get another version.
    ``infrastructure.addon_version_command`` (docs/threat-model.md, Supply chain) prints each default."""

    __pydantic_config__ = _FORBID

    vpc_cni: str | None = None
    """vpc-cni, as `aws eks describe-addon-versions` names it (v1.18.5 or later: the GPU nodes' EFA-only interfaces)."""
    kube_proxy: str | None = None
    """kube-proxy; its minor must match the cluster's Kubernetes minor."""
    eks_pod_identity_agent: str | None = None
    """eks-pod-identity-agent."""
    coredns: str | None = None
    """coredns."""

    def __post_init__(self) -> None:
        found = Collector()
        found.check(infra.vpc_cni_version, self.vpc_cni, "vpc_cni")
        for name in ("kube_proxy", "eks_pod_identity_agent", "coredns"):
            found.check(infra.addon_version, getattr(self, name), name)
        found.raise_if_any(self)

    def by_addon(self) -> dict[str, str]:
        """The versions given, by EKS add-on name."""
        return {name: version for name in infra.CORE_ADDONS
                if (version := getattr(self, name.replace("-", "_"))) is not None}


@dataclass(frozen=True)
class ClusterSettings:
    """The EKS cluster: its API endpoint, who administers it, and its control-plane logs."""

    __pydantic_config__ = _FORBID

    name: str | None = None
    """EKS cluster name (letters, digits, '-', '_', at most 100); defaults to the name CloudFormation generates."""
    kubernetes_version: str = infra.DEFAULT_KUBERNETES_VERSION
    """Must match the kubectl layer the library ships (aws-cdk.lambda-layer-kubectl-v35)."""
    endpoint_access: str = infra.DEFAULT_ENDPOINT_ACCESS
    """EKS API endpoint: private (reachable from the VPC only), or public-and-private (the public side open to public_access_cidrs)."""
    public_access_cidrs: tuple[str, ...] = infra.DEFAULT_PUBLIC_ACCESS_CIDRS
    """With public-and-private: the CIDR blocks allowed to reach the public side (never 0.0.0.0/0)."""
    bootstrap_cluster_creator_admin_permissions: bool = infra.DEFAULT_BOOTSTRAP_CLUSTER_CREATOR_ADMIN
    """Whether the CloudFormation execution role becomes cluster admin; admins come from admin_role_arn. Changing it replaces the cluster."""
    admin_role_arn: str | None = None
    """An IAM role granted cluster admin through an EKS access entry."""
    control_plane_logs: tuple[str, ...] = infra.DEFAULT_CONTROL_PLANE_LOGS
    """Control-plane log types sent to CloudWatch Logs (api, audit, authenticator, controllerManager, scheduler)."""
    control_plane_log_retention_days: int = infra.DEFAULT_CONTROL_PLANE_LOG_RETENTION_DAYS
    """How long CloudWatch Logs keeps the control-plane logs (EKS's own group never expires)."""
    addon_versions: AddonVersions = field(default_factory=AddonVersions)
    """Pin the EKS managed add-ons (vpc_cni, kube_proxy, eks_pod_identity_agent, coredns); unset, EKS picks its default for the Kubernetes version on the day the add-on is created."""

    def __post_init__(self) -> None:
        found = Collector()
        found.check(infra.cluster_name, self.name, "name")
        found.check(infra.kubernetes_version, self.kubernetes_version, "kubernetes_version")
        found.check(infra.endpoint_access, self.endpoint_access, "endpoint_access")
        found.check(infra.public_access_cidrs, self.public_access_cidrs, self.endpoint_access, "public_access_cidrs")
        found.check(infra.admin_role_arn, self.admin_role_arn, "admin_role_arn")
        found.check(infra.control_plane_logs, self.control_plane_logs, "control_plane_logs")
        found.check(infra.retention_days, self.control_plane_log_retention_days, "control_plane_log_retention_days")
        found.raise_if_any(self)


@dataclass(frozen=True)
class Versions:
    """Pinned versions of Ray and the Helm charts."""

    __pydantic_config__ = _FORBID

    ray: str = DEFAULT_RAY_VERSION
    """Must equal the Ray inside the image (serve-llm-cuda-v1.0 ships Ray 2.58.0) unless ``image.repository`` names a custom image."""
    kuberay: str = infra.DEFAULT_KUBERAY_VERSION
    """KubeRay operator chart version, semver. 1.5.1 (the default) runs Ray with token authentication; 1.4.0 (the AWS sample's) needs ``serving.ray_auth: disabled`` and leaves Ray's job and dashboard API open to whatever reaches 8265 (docs/threat-model.md, T1)."""
    nvidia_device_plugin: str = infra.DEFAULT_NVIDIA_DEVICE_PLUGIN_VERSION
    """0.19.0-0.19.2 default to MOFED mode, which breaks EFA; 0.20.x is the supported line."""
    efa_device_plugin: str = infra.DEFAULT_EFA_DEVICE_PLUGIN_VERSION
    """Chart version of aws-efa-k8s-device-plugin in https://aws.github.io/eks-charts (chart v0.5.20 runs the device-plugin image v0.5.13)."""
    kuberay_image_digest: str | None = None
    """Digest of the KubeRay operator image (quay.io/kuberay/operator:v<kuberay>); the chart then pulls it by digest, not by tag."""
    nvidia_device_plugin_image_digest: str | None = None
    """Digest of the NVIDIA device plugin image (nvcr.io/nvidia/k8s-device-plugin:v<nvidia_device_plugin>, privileged on every GPU node); the chart then pulls it by digest. Required with ``strict`` (the refusal and ``plan`` print the command that resolves it)."""
    efa_device_plugin_image_digest: str | None = None
    """Digest of the EFA device plugin image the efa_device_plugin chart deploys (chart v0.5.20: 602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.13, privileged on every GPU node); the chart then pulls it by digest. Required with ``strict``."""

    def __post_init__(self) -> None:
        found = Collector()
        found.check(infra.semver, self.kuberay, "kuberay")
        found.check(infra.nvidia_device_plugin_version, self.nvidia_device_plugin, "nvidia_device_plugin")
        if found.check(infra.semver, self.efa_device_plugin, "efa_device_plugin", v_prefix=True) is not None:
            found.check(infra.device_plugin_image_tags, **self._device_plugin_pins())
        found.check(infra.image_digest, self.kuberay_image_digest, "kuberay_image_digest")
        found.raise_if_any(self)

    def _device_plugin_pins(self) -> dict[str, Any]:
        return dict(nvidia_version=self.nvidia_device_plugin, nvidia_digest=self.nvidia_device_plugin_image_digest,
                    efa_version=self.efa_device_plugin, efa_digest=self.efa_device_plugin_image_digest,
                    nvidia_field="nvidia_device_plugin_image_digest", efa_field="efa_device_plugin_image_digest")

    def pin_problems(self) -> list[SpecError]:
        """The device plugin images left to their tags (``infra.device_plugin_pin_problems``)."""
        return infra.device_plugin_pin_problems(**self._device_plugin_pins(), efa_version_field="efa_device_plugin")

    def pin_commands(self) -> dict[str, str]:
        return infra.device_plugin_digest_commands(**self._device_plugin_pins())


DERIVED_FIELDS = {"verification.every_minutes": "observability.verify_every_minutes"}
"""Fields of a part that a deployment derives from another field, and so refuses when given:
continuous verification runs only with observability on, at the period observability names."""


def _default_leg(role: str) -> Any:
    return field(default_factory=lambda: Leg(WorkerPool(role)))


# Where a ServingSpec's own fields live in the deployment, where the names differ: the service
# settings are the configuration's ``serving`` section, the versions its ``versions`` section.
_SERVING_SPEC_PATHS = {"service": "serving", "ray_version": "versions.ray", "kuberay_version": "versions.kuberay"}


def _deployment_path(spec_field: str) -> str:
    head, dot, rest = spec_field.partition(".")
    return _SERVING_SPEC_PATHS.get(head, head) + dot + rest


@dataclass(frozen=True)
class Deployment:
    """A whole deployment. ``Deployment()`` is the reference deployment, after the AWS sample
    (lopezfelipe/sample-aws-deep-learning-containers ``inference/ray-serve/ray-serve-multi-node/``):
    ``Qwen/Qwen3.5-9B`` with prefill/decode disaggregation on two GPU nodes (here ``g6.8xlarge``, with
    EFA) plus one ``m7i.xlarge`` system node, Ray 2.58.0, image ``ray:serve-llm-cuda-v1.0``; here in
    us-west-2, KubeRay 1.5.1 with Ray token authentication. Raises :class:`SpecErrors` naming each
    dotted field."""

    __pydantic_config__ = _FORBID

    region: str = infra.DEFAULT_REGION
    """AWS region of the stack (the DLC image is pulled from this region's ECR)."""
    control_plane_azs: tuple[str, ...] = infra.DEFAULT_CONTROL_PLANE_AZS
    """EKS needs subnets in at least two AZs of the region for its control plane."""
    data_plane_az: str = infra.DEFAULT_DATA_PLANE_AZ
    """Every node lives here, one of control_plane_azs: EFA traffic cannot cross AZs."""
    stack_name: str = infra.DEFAULT_STACK_NAME
    """CloudFormation stack name (and construct ID of the stack): letters, digits and '-', starting with a letter."""
    topology: Topology = Topology.disaggregated
    """disaggregated (prefill/decode with NIXL over EFA) or colocated (the baseline); changes only the Serve config."""
    strict: bool = True
    """Refuse the serving image and the NVIDIA and EFA device plugin images without a digest (``image.digest``, ``versions.nvidia_device_plugin_image_digest``, ``versions.efa_device_plugin_image_digest``) and a model without a commit revision (``plan`` prints the command that resolves each). ``false`` turns the refusal into one synthesis warning: an unpinned deploy is then a choice written in the configuration. The default of any configuration file; not of the reference deployment used when no file is given (``ray_llm_eks/data/reference.yaml`` says ``false``)."""
    kubernetes_owner: infra.KubernetesOwner = infra.KubernetesOwner.cdk
    """Who applies the Kubernetes objects: cdk (the stack, and CloudFormation waits for the gate) or gitops (the stack builds the AWS side only; ``ray-llm-eks render`` writes the objects for Argo CD or Flux: docs/gitops.md)."""
    network: Network = field(default_factory=Network)
    """VPC settings."""
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    """EKS cluster settings."""
    system: SystemPool = field(default_factory=SystemPool)
    """The CPU node group for system pods, the KubeRay operator and the Ray head."""
    prefill: Leg = _default_leg(PREFILL)
    """The prefill leg: its EFA GPU node group (one Ray worker pod per node, with all its GPUs) and its serving settings."""
    decode: Leg = _default_leg(DECODE)
    """The decode leg, likewise."""
    model: ModelSpec = field(default_factory=ModelSpec)
    """The served model and the vLLM engine settings both legs share."""
    image: ImageSpec = field(default_factory=ImageSpec)
    """The Ray LLM container image: by default the AWS Deep Learning Container ``763104351884.dkr.ecr.<region>.amazonaws.com/ray:serve-llm-cuda-v1.0`` in the stack's region; with a digest the manifests use ``repository@sha256:...`` (reproducible)."""
    versions: Versions = field(default_factory=Versions)
    """Pinned versions of Ray and the Helm charts."""
    nixl: NixlSpec = field(default_factory=NixlSpec)
    """NIXL KV-transfer settings."""
    disaggregation: DisaggregationSpec = field(default_factory=DisaggregationSpec)
    """When a request takes the prefill leg: ``min_prompt_tokens`` sends shorter prompts to a decode replica, which prefills them itself with no KV transfer (ray_llm_eks/pd/conditional.py)."""
    serving: ServiceSettings = field(default_factory=ServiceSettings)
    """Kubernetes-side serving settings."""
    verification: VerificationSpec = field(default_factory=VerificationSpec)
    """The deployment gate: how long a deploy waits for proof that the endpoint and the KV path work (docs/verification.md)."""
    observability: ObservabilitySpec = field(default_factory=ObservabilitySpec)
    """Container Insights, the transport's log metrics, alarms on one SNS topic, and a dashboard (docs/observability.md); on by default, and ``plan`` adds its cost."""
    spend: SpendSpec | None = None
    """Optional spend limits: a monthly AWS Budgets budget on the stack's cost-allocation tag with alerts to the observability topic, and a hard hourly cap at the node groups' max sizes (docs/deploying.md, "Spend limits and the cost allocation tag": the tag must be activated by hand). Set, the stack tags everything it creates but the placement group, and its nodes through their launch templates (the nodes roll once: docs/replacement.md). Unset: no budget, no cap, no tag."""
    _specs: Specs | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "control_plane_azs", tuple(self.control_plane_azs))
        found = Collector()
        if found.check(infra.region, self.region) is not None:
            found.check(infra.availability_zones, self.region, self.control_plane_azs, self.data_plane_az)
        found.check(infra.stack_name, self.stack_name)
        vpc_cidr = found.check(infra.vpc_cidr, self.network.vpc_cidr, len(self.control_plane_azs))
        found.check(infra.nat_gateways, self.network.nat_gateways, max(1, len(self.control_plane_azs)))
        for role in WORKER_ROLES:
            leg = getattr(self, role)
            if isinstance(leg, Leg) and leg.role != role:
                found.add(SpecError(f"{role}.role", f"the {role} leg's pool has role {leg.role!r}"))
        if self.verification.every_minutes is not None:
            found.add(SpecError("verification.every_minutes",
                                f"set by {DERIVED_FIELDS['verification.every_minutes']} (continuous verification runs "
                                "only with observability on); leave it out here"))
        verification = None
        try:
            verification = VerificationSpec(**{**_fields(self.verification), "every_minutes": self._every_minutes()})
        except SpecErrors as errors:  # every other field was checked when self.verification was built
            found.errors.extend(type(e)("observability.verify_every_minutes", e.message) for e in errors)
        specs = None
        if verification is not None and vpc_cidr is not None and not found.errors:
            # The library makes the VPC: every subnet of it is the cluster's (public and private).
            try:
                specs = compose(
                    region=self.region, prefill=self.prefill, decode=self.decode, system=self.system, model=self.model,
                    image=self.image, nixl=self.nixl, topology=self.topology, service=self.serving,
                    disaggregation=self.disaggregation,
                    ray_version=self.versions.ray, kuberay_version=self.versions.kuberay, strict=self.strict,
                    verification=verification, observability=self.observability, spend=self.spend,
                    footprint=self.footprint(), vpc_cidrs=[self.network.vpc_cidr])
            except SpecErrors as errors:
                found.errors.extend(type(e)(_deployment_path(e.field), e.message) for e in errors)
        for warning in self.versions.pin_problems() if self.strict and isinstance(self.versions, Versions) else ():
            found.add(SpecError(warning.field, f"strict mode refuses it: {warning.message} (or strict false: "
                                               "deploy unpinned, with a warning)"), prefix="versions")
        found.raise_if_any(self)
        assert specs is not None
        object.__setattr__(self, "_specs", specs)

    def _every_minutes(self) -> int | None:
        return self.observability.verify_every_minutes if self.observability.enabled else None

    def specs(self) -> Specs:
        """The constructs' inputs, composed (and so checked) once, when the deployment was built
        (:func:`~.composition.compose`)."""
        assert self._specs is not None
        return self._specs

    def footprint(self) -> Footprint:
        """Where the nodes run and the NAT gateways paid for, as ``plan`` and the spend cap price them."""
        return Footprint(self.region, self.data_plane_az, self.network.nat_gateways)

    def leg(self, role: str) -> Leg:
        return {PREFILL: self.prefill, DECODE: self.decode}[role]

    def warnings(self) -> list[SpecError]:
        """What deploys but will likely fail later, by configuration field (``ServingSpec.warnings``)."""
        return [type(p)(_deployment_path(p.field), p.message) for p in self.specs().serving.warnings()]

    def reproducibility_problems(self) -> list[SpecError]:
        """What makes this deployment irreproducible, by configuration field (an error; a warning with ``strict: false``)."""
        return [*(type(p)(_deployment_path(p.field), p.message) for p in self.specs().serving.reproducibility_problems()),
                *(p.within("versions") for p in self.versions.pin_problems())]

    def pin_commands(self) -> dict[str, str]:
        """The command that resolves each pin this deployment lacks, by configuration field (``plan`` prints them)."""
        return {**{_deployment_path(f): c for f, c in self.specs().serving.pin_commands().items()},
                **{f"versions.{f}": c for f, c in self.versions.pin_commands().items()}}


def _fields(instance: Any) -> dict[str, Any]:
    return {f.name: getattr(instance, f.name) for f in fields(instance) if f.init}
