"""The serving layer on the cluster: the RayService charts, their identity, and their apply order.

``RayLlmServing`` takes a composed deployment's :class:`~ray_llm_eks.base.Specs` (``specs=``, as
the stack passes ``Deployment.specs()``), or the node pools it serves on (the ``EfaGpuNodeGroup``s
and the ``SystemNodeGroup``, or their spec-layer pools) plus flat props, which it composes through
``ray_llm_eks.base.composition.compose``, the configuration's own composition. Every pod figure
(GPUs, CPU, memory, replicas, NIXL ports, node selector, toleration) and the image's region derive
from those pools and from the stack, so a pod that cannot fit its node cannot be synthesized.

- An IAM role for the Ray pods, trusted by EKS Pod Identity (``pods.eks.amazonaws.com`` with
  ``sts:AssumeRole`` and ``sts:TagSession``, as the EKS Pod Identity docs require). It has no
  permissions: it is where S3 model access goes later (``pod_role.add_to_policy(...)``).
- A ``CfnPodIdentityAssociation`` binding that role to the ServiceAccount of the Ray pods.
- The deployment gate (:mod:`ray_llm_eks.verification`, docs/verification.md): the
  ``serving-verification`` chart, applied after the RayService, whose Job rolls the pods to the
  deployed spec, waits for the service and proves the KV path; and, unless
  ``verification.wait`` is False, an ``AWS::CloudFormation::WaitCondition`` the Job signals, so a
  failed gate fails the deploy and rolls it back. The wait condition and its handle are named
  ``Gate<run>`` / ``GateHandle<run>`` after the hash of the serving spec: CloudFormation cannot
  update a wait condition, so each changed spec creates a new pair, and the gate runs again.
- The deploy's signal, held by the gate alone: the handle's presigned URL (its ``Ref``) is the
  ``SecretString`` of a Secrets Manager secret ``GateSignal<run>`` (new with each handle, its name
  generated, so a deleted one's recovery window never blocks the next), never a manifest's
  value. The gate Job gets the secret's ARN and reads it with ``GateRole``, an EKS Pod Identity
  role trusted only for the gate's service account, namespace and cluster, allowed
  ``secretsmanager:GetSecretValue`` on that one secret. CloudFormation shows no ``SecretString``
  in its events, CloudTrail does not log it, and the kubectl handler, which logs every manifest
  it applies, never sees it. ``GateIdentity`` (the association) is created before the charts:
  the Pod Identity webhook injects credentials only into pods created after it exists.
- The cdk8s charts of :mod:`ray_llm_eks.cdk8s_charts`, in a ``cdk8s.App`` of its own (charts
  must never sit under a CDK construct), each applied with ``cluster.add_cdk8s_chart`` after the
  KubeRay operator (it brings the RayService CRD) and the device plugins (they advertise the GPU
  and EFA resources) it is given, after the Pod Identity association (the Pod Identity webhook
  injects credentials only into pods created after the association exists), and each after the
  chart before it (the namespace exists before what lives in it).

Construct ids (``PodRole``, ``PodIdentity``, and the chart ids) are public API: CloudFormation
logical ids derive from them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import cdk8s
from aws_cdk import (Annotations, ArnFormat, CfnWaitCondition, CfnWaitConditionHandle, SecretValue, Stack, Token, aws_ec2 as ec2,
                     aws_eks_v2 as eks, aws_iam as iam, aws_secretsmanager as secretsmanager)
from constructs import Construct

from ..cdk8s_charts import ServingCharts, build_serving_charts, openai_service_name
from ..cdk8s_charts.verification import GatePlan, VerificationChart, build_verification_chart, gate_name, monitor_name
from ..base.composition import check_client_cidrs, compose
from ..base.errors import SpecError, problem
from ..base.pools import SystemPool, WorkerPool
from ..base.infrastructure import DEFAULT_KUBERAY_VERSION, KUBERAY_NAMESPACE, KubernetesOwner
from ..base.observability import ObservabilitySpec
from ..base.placement import DECODE, PREFILL
from ..base.serving import ImageSpec, Leg, ModelSpec, NixlSpec, ServiceSettings, ServingSpec, Topology
from ..base.specs import Specs
from ..base.verification import VerificationSpec
from ..cdk8s_charts.gcs_redis import GCS_REDIS_CHART_ID, GcsRedisChart, sync_account_name
from .addons import GpuDevicePlugins, KubeRayOperator
from .autoscaler import NodeAutoscaler
from .cluster import ClusterLike, eks_cluster_of
from .gcs_redis import GcsRedisCache
from ..base.wire import metric_namespace
from .identity import pod_identity
from .kubernetes_side import kubernetes_owner_of
from .nag import acknowledge_gate_signal, acknowledge_monitor_role
from .nodegroups import EfaGpuNodeGroup, SystemNodeGroup
from .validation import ConstructValidationError, spec_prop, validated



GpuLegLike = EfaGpuNodeGroup | WorkerPool | Leg
"""A leg as a construct takes it: a node group or its pool (the leg's settings left at their
defaults), or a :class:`Leg` with settings of its own (``Leg(group.pool, tensor_parallel_size=2)``)."""


def _leg(group: GpuLegLike) -> Leg | WorkerPool:
    return group.pool if isinstance(group, EfaGpuNodeGroup) else group


def _system_pool(group: SystemNodeGroup | SystemPool | None) -> SystemPool | None:
    if group is None:
        return SystemPool()
    return group.pool if isinstance(group, SystemNodeGroup) else group


class RayLlmServing(Construct):
    """The Ray Serve LLM RayService (disaggregated or colocated) on the pools it is given.

    :param cluster: an ``InferenceCluster`` or any ``aws_eks_v2`` cluster.
    :param specs: the composed deployment (``Deployment.specs()``, or ``base.composition.compose``),
        taken as it is. With it, give none of the flat props below (``model`` to ``observability``:
        refused, naming them); ``prefill``, ``decode`` and ``system`` may then name the node groups
        built from its pools (``EfaGpuNodeGroup(..., pool=specs.prefill)``), which the RayService
        is applied after. Its client CIDRs are checked against this cluster's VPC.
    :param prefill: the prefill leg: its ``EfaGpuNodeGroup`` (or that group's ``pool``), or a
        :class:`~ray_llm_eks.base.serving.Leg` of that pool with settings of its own
        (``tensor_parallel_size``, ``target_ongoing_requests``, ``request_router``). The prefill worker group gets one
        pod per node with all its GPUs, and ``desired_size x GPUs / tensor parallel`` replicas.
    :param decode: the decode leg, likewise.
    :param system: the ``SystemNodeGroup`` (or its ``pool``) the Ray head runs on and is sized
        from. Default: a pool with the ``SystemNodeGroup`` defaults (one ``m7i.xlarge``).
    :param kuberay: the ``KubeRayOperator`` to apply after (it brings the RayService CRD).
    :param device_plugins: the ``GpuDevicePlugins`` to apply after; refused when they do not
        cover ``prefill`` and ``decode`` (their EFA plugin would never run on those nodes).
    :param node_autoscaler: the ``NodeAutoscaler`` (Cluster Autoscaler) that adds nodes to
        autoscaled node groups; required when either node group may grow (without it, the pods
        Ray asks for would stay Pending). Default: none (fixed node groups).
    :param model: the model and engine settings. Default: ``ModelSpec()``, Qwen/Qwen3.5-9B in
        bfloat16, ``max_model_len`` 4096, ``gpu_memory_utilization`` 0.9, eager, tensor parallel 1.
        Its ``architecture`` must be resolved (a model in the table needs none): ``"auto"`` is refused
        here, since reading config.json is I/O; resolve it first with
        ``ray_llm_eks.model_source.architecture_for(source, revision)``, as the configuration loader does.
    :param image: the Ray LLM image. Default: the AWS DLC ``ray:serve-llm-cuda-v1.0`` in the
        stack's own region (the stack needs an explicit ``env`` region, or give ``repository``).
    :param nixl: NIXL settings. Default: the KV-path table's backends and buffer (``base.kv_path``; LIBFABRIC, what uses EFA).
    :param topology: ``disaggregated`` (default) or ``colocated``; only the Serve config differs.
        Every flat prop left None takes the default of its field in ``ServingSpec``.
    :param service: the Kubernetes side (:class:`~ray_llm_eks.base.serving.ServiceSettings`):
        namespace (default ``inference``), service name (``ray-llm``), security profile, endpoint,
        client namespaces and CIDRs, egress, Ray auth, GCS fault tolerance, admission exemptions.
    :param ray_version: default ``2.58.0``, the image's Ray; checked against the DLC tag.
    :param strict: refuse an image without a digest or a model without a commit revision (default true).
    :param kuberay_version: the operator's version when ``kuberay`` is not given (default
        ``1.5.1``, which token authentication needs); with ``kuberay`` it follows that operator.
    :param operator_namespace: where a KubeRay operator installed outside this library runs
        (default ``kuberay``); with ``kuberay`` it follows that operator.
    :param verification: the deployment gate's settings. Default: ``VerificationSpec()``, a
        60-minute bound, 4 probes, CloudFormation waits for the verdict.
    :param observability: the settings an ``InferenceObservability(serving=this)`` reads. When
        enabled, the admission policy also leaves the CloudWatch agent's namespace alone (its agent
        and Fluent Bit need host access). Default: none (no observability on this serving).
    :param depends_on: anything else the charts must be applied after.
    :param kubernetes_owner: ``cdk`` (default): the charts are applied by the stack and, with
        ``verification.wait``, CloudFormation waits for the gate. ``gitops``: the stack creates the
        AWS side only (the Pod Identity roles and associations, the GCS cache); the charts are
        ``gitops_parts``, for ``ray_llm_eks.gitops.render_manifests`` to write, and there is no wait
        condition: the gate Job is an Argo CD ``PostSync`` hook and its exit status is the verdict
        (docs/verification.md, "In GitOps mode"). ``kuberay``, ``device_plugins`` and
        ``node_autoscaler`` given to a ``cdk`` serving must be ``cdk`` too (the charts need them applied first).

    ``model``, ``image``, ``nixl``, ``service``, ``verification`` and ``observability`` also take a
    dict of their fields (``model={"max_model_len": 8192}``): built here, a refusal then names this
    construct's path and the field (``.../Serving: model.max_model_len: ...``); a spec object built
    before the call refuses at once, naming its type (``ModelSpec: max_model_len: ...``).

    Public attributes: ``spec`` (the ``ServingSpec``), ``specs`` (what ``plan`` reads), ``cluster``,
    ``observability``, ``cdk8s_app``, ``charts`` (apply order:
    ``serving-namespace``, ``serving-network-policy``, ``serving-admission-policy``, ``serving-rayservice``), ``manifests`` (by chart id), ``pod_role``,
    ``pod_identity``, ``namespace``, ``service_account_name``, ``ray_service_name``,
    ``openai_service_name`` (``http://<openai>.<namespace>.svc:8000`` from ``client_namespaces``),
    ``verification`` (the settings), ``gate`` (the :class:`GatePlan`: settings and run id),
    ``metric_namespace`` (this deployment's own CloudWatch namespace, ``RayLlmEks/<stack>/<namespace>/<service>``),
    ``gate_job_name``, ``gate_wait_condition``, ``gate_handle``, ``gate_signal`` (the secret holding the
    handle's URL), ``gate_role`` and ``gate_identity`` (None when not waiting), ``kubernetes_owner``,
    ``gitops_parts`` (the charts a GitOps tool applies; ``manifests`` is empty with ``gitops``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterLike,
        specs: Specs | None = None,
        prefill: GpuLegLike | None = None,
        decode: GpuLegLike | None = None,
        system: SystemNodeGroup | SystemPool | None = None,
        kuberay: KubeRayOperator | None = None,
        device_plugins: GpuDevicePlugins | None = None,
        model: ModelSpec | None = None,
        image: ImageSpec | None = None,
        nixl: NixlSpec | None = None,
        topology: Topology | str | None = None,
        service: ServiceSettings | None = None,
        ray_version: str | None = None,
        strict: bool | None = None,
        kuberay_version: str | None = None,
        operator_namespace: str | None = None,
        node_autoscaler: NodeAutoscaler | None = None,
        verification: VerificationSpec | None = None,
        observability: ObservabilitySpec | None = None,
        depends_on: Sequence[Construct] = (),
        kubernetes_owner: KubernetesOwner | str = KubernetesOwner.cdk,
    ) -> None:
        super().__init__(scope, construct_id)
        self.kubernetes_owner = kubernetes_owner_of(self, kubernetes_owner)
        self._check_owners(kuberay=kuberay, device_plugins=device_plugins, node_autoscaler=node_autoscaler)
        self.cluster = cluster
        flat = {"model": model, "image": image, "nixl": nixl, "topology": topology, "service": service,
                "ray_version": ray_version, "strict": strict, "kuberay_version": kuberay_version,
                "operator_namespace": operator_namespace, "verification": verification, "observability": observability}
        # Composed (and so checked) first: a refused combination fails before any resource exists.
        if specs is None:
            composed = self._compose(cluster, prefill, decode, system, kuberay, **flat)
            self.observability: ObservabilitySpec | None = spec_prop(
                self, "observability", ObservabilitySpec, observability, lambda: None)
        else:
            composed = self._given(specs, cluster, prefill, decode, system, kuberay, flat)
            self.observability = composed.observability if composed.observability.enabled else None
        self.spec: ServingSpec = composed.serving
        for warning in self.spec.warnings():  # a gated model without a token (base decides)
            Annotations.of(self).add_warning_v2(f"ray-llm-eks:{warning.field}", str(warning))
        self._check_nodes(prefill, decode, device_plugins, node_autoscaler)
        self.verification = composed.verification
        if self.kubernetes_owner is KubernetesOwner.gitops:
            # No stack applies the gate, so no CloudFormation wait: the GitOps tool waits for the Job.
            self.verification = replace(self.verification, wait=False)
        self.specs: Specs = (composed if self.verification is composed.verification
                             else replace(composed, verification=self.verification))
        """What ``ray_llm_eks.planning.make_plan`` prices and sizes (with the network's ``Footprint``)."""

        self.cdk8s_app = cdk8s.App()
        self.serving_charts: ServingCharts = build_serving_charts(self.cdk8s_app, self.spec)
        self.gate = GatePlan.of(self.spec, self.verification, self.serving_charts)
        self._gate_signal()
        self.metric_namespace = metric_namespace(Stack.of(self).stack_name, self.spec.namespace, self.spec.service_name)
        self.verification_chart: VerificationChart = build_verification_chart(
            self.cdk8s_app, self.spec, self.verification, self.gate, self.serving_charts,
            signal_secret=self.gate_signal.secret_arn if self.gate_signal is not None else None,
            metric_namespace=self.metric_namespace,
            post_sync_hook=self.kubernetes_owner is KubernetesOwner.gitops,
        )
        self.gate_job_name = self.verification_chart.job_name
        self.charts: list[cdk8s.Chart] = [*self.serving_charts.charts, self.verification_chart]

        self.namespace = self.spec.namespace
        self.service_account_name = self.serving_charts.namespace.service_account.name
        self.ray_service_name = self.spec.service_name
        self.openai_service_name = openai_service_name(self.spec.service_name)

        target = eks_cluster_of(cluster)
        self._identities(target)
        self._gcs_cache(target)
        if kuberay is not None and kuberay.watch_namespaces is not None and self.namespace not in kuberay.watch_namespaces:
            raise ConstructValidationError(self, [problem(
                "kuberay", list(kuberay.watch_namespaces),
                f"the operator watches only those namespaces, so it would never act on the RayService in "
                f"{self.namespace}", f"KubeRayOperator(watch_namespaces=[..., '{self.namespace}'])")])
        previous = self._apply(target, [prefill, decode, system], kuberay, device_plugins, depends_on)

        self.gate_wait_condition: CfnWaitCondition | None = None
        if self.gate_handle is not None:
            self.gate_wait_condition = CfnWaitCondition(
                self, f"Gate{self.gate.run_id}", handle=self.gate_handle.ref, count=1,
                timeout=str(self.verification.timeout_seconds),
            )
            # The clock starts when the Job exists: after the RayService and the gate's chart are applied.
            self.gate_wait_condition.node.add_dependency(previous)

    def _check_owners(self, **given: KubeRayOperator | GpuDevicePlugins | NodeAutoscaler | None) -> None:
        """A ``cdk`` serving applies its charts after these constructs' charts: they must be ``cdk`` too."""
        if self.kubernetes_owner is not KubernetesOwner.cdk:
            return
        for prop, construct in given.items():
            if construct is not None and construct.kubernetes_owner is not KubernetesOwner.cdk:
                raise ConstructValidationError(self, [problem(
                    prop, construct.node.path, f"its charts are left to GitOps (kubernetes_owner "
                    f"{construct.kubernetes_owner.value}), so the stack would apply the RayService without them",
                    "the same kubernetes_owner on every construct of the stack")])

    def _compose(self, cluster: ClusterLike, prefill: GpuLegLike | None, decode: GpuLegLike | None,
                 system: SystemNodeGroup | SystemPool | None, kuberay: KubeRayOperator | None, *,
                 kuberay_version: str | None, operator_namespace: str | None, **props: Any) -> Specs:
        """The flat props composed (``base.composition.compose``), refusals named by this construct's path."""
        missing = [role for role, leg in ((PREFILL, prefill), (DECODE, decode)) if leg is None]
        if missing:
            raise ConstructValidationError(self, [problem(
                role, None, f"no {role} leg given", f"its EfaGpuNodeGroup, WorkerPool or Leg; or specs=Specs(...)")
                for role in missing])
        assert prefill is not None and decode is not None
        if kuberay is not None and kuberay_version is not None and kuberay_version != kuberay.version:
            raise ConstructValidationError(self, [problem(
                "kuberay_version", kuberay_version, f"the operator given is KubeRay {kuberay.version}",
                f"{kuberay.version}, or leave it out (it follows the operator)")])
        if kuberay is not None and operator_namespace is not None and operator_namespace != kuberay.NAMESPACE:
            raise ConstructValidationError(self, [problem(
                "operator_namespace", operator_namespace, f"the operator given runs in {kuberay.NAMESPACE}",
                f"{kuberay.NAMESPACE}, or leave it out (it follows the operator)")])
        parts = {name: spec_prop(self, name, spec_type, props.pop(name), spec_type) for name, spec_type in (
            ("model", ModelSpec), ("image", ImageSpec), ("nixl", NixlSpec), ("service", ServiceSettings),
            ("verification", VerificationSpec))}
        observability = spec_prop(self, "observability", ObservabilitySpec, props.pop("observability"), lambda: None)
        return validated(
            self, compose, region=Stack.of(self).region, prefill=_leg(prefill), decode=_leg(decode),
            system=_system_pool(system), **parts, observability=observability,
            kuberay_version=kuberay.version if kuberay is not None else (kuberay_version or DEFAULT_KUBERAY_VERSION),
            operator_namespace=kuberay.NAMESPACE if kuberay is not None else (operator_namespace or KUBERAY_NAMESPACE),
            vpc_cidrs=known_vpc_cidrs(cluster), **{name: value for name, value in props.items() if value is not None})

    def _given(self, specs: Specs, cluster: ClusterLike, prefill: GpuLegLike | None, decode: GpuLegLike | None,
               system: SystemNodeGroup | SystemPool | None, kuberay: KubeRayOperator | None,
               flat: dict[str, Any]) -> Specs:
        """``specs`` as composed, checked against what this construct is given: the node groups the
        pools run on, the operator, and the VPC of the cluster (which the composition may not have known)."""
        given = sorted(name for name, value in flat.items() if value is not None)
        if given:
            raise ConstructValidationError(self, [problem(
                "specs", given, "given with flat props the Specs already holds",
                f"specs=Specs(...) alone, or the flat props ({', '.join(flat)}) without it")])
        if not isinstance(specs, Specs):
            raise ConstructValidationError(self, [problem(
                "specs", specs, "not a Specs", "a Specs (Deployment.specs()), or the flat props without it")])
        found: list[SpecError] = []
        for role, group, group_type, pool in ((PREFILL, prefill, EfaGpuNodeGroup, specs.prefill),
                                              (DECODE, decode, EfaGpuNodeGroup, specs.decode),
                                              ("system", system, SystemNodeGroup, specs.system)):
            if group is not None and (not isinstance(group, group_type) or group.pool != pool):
                found.append(problem(role, getattr(group, "node", None) and group.node.path, (
                    f"with specs=, the {group_type.__name__} the specs' {role} pool runs on, built from it"),
                    f"{group_type.__name__}(..., pool=specs.{role}), or leave it out"))
        serving = specs.serving
        if kuberay is not None and (kuberay.version, kuberay.NAMESPACE) != (serving.kuberay_version,
                                                                           serving.operator_namespace):
            found.append(problem("kuberay", kuberay.node.path, (
                f"the operator given is KubeRay {kuberay.version} in {kuberay.NAMESPACE}, the specs' KubeRay "
                f"{serving.kuberay_version} in {serving.operator_namespace}"),
                "the operator the specs were composed for (versions.kuberay)"))
        if found:
            raise ConstructValidationError(self, found)
        validated(self, check_client_cidrs, serving.service, known_vpc_cidrs(cluster))
        return specs

    def _check_nodes(self, prefill: GpuLegLike | None, decode: GpuLegLike | None,
                     device_plugins: GpuDevicePlugins | None, node_autoscaler: NodeAutoscaler | None) -> None:
        """The spec against the constructs that run its pods: nodes added, devices advertised, one fabric."""
        if self.spec.autoscaling and node_autoscaler is None:
            grows = [f"{p.role} {p.min_size} to {p.max_size}" for p in self.spec.pools if p.autoscaled]
            raise ConstructValidationError(self, [problem(
                "node_autoscaler", None,
                f"the node groups may grow ({', '.join(grows)} nodes), and Ray will ask for worker pods to fill "
                "them, but nothing would add the nodes: the pods would stay Pending",
                "a NodeAutoscaler on the same cluster (ray_llm_eks.constructs.autoscaler), or fixed node groups "
                "(min_size == max_size)")])
        if device_plugins is not None:
            uncovered = sorted({p.instance_type for p in self.spec.pools} - set(device_plugins.instance_types))
            if uncovered:
                raise ConstructValidationError(self, [problem(
                    "device_plugins", list(device_plugins.instance_types),
                    f"the EFA device plugin does not cover {', '.join(uncovered)}, so those nodes would never "
                    "advertise vpc.amazonaws.com/efa and the workers would stay Pending",
                    "GpuDevicePlugins built from the same node groups (gpu_node_groups=[prefill, decode])")])
        if (self.spec.topology is Topology.disaggregated and isinstance(prefill, EfaGpuNodeGroup)
                and isinstance(decode, EfaGpuNodeGroup) and prefill.fabric is not decode.fabric):
            raise ConstructValidationError(self, [problem(
                "decode", decode.node.path,
                f"its node group is on the EFA fabric {decode.fabric.node.path}, prefill's on "
                f"{prefill.fabric.node.path}: EFA traffic is admitted only within one fabric's security group "
                "(and placement group), so the KV cache could not cross between them",
                "both node groups built with the same EfaFabric (fabric=...)")])

    def _gate_signal(self) -> None:
        """The wait condition's handle and the secret holding its URL, named after the run."""
        self.gate_handle: CfnWaitConditionHandle | None = None
        self.gate_signal: secretsmanager.Secret | None = None
        if self.verification.wait:
            self.gate_handle = CfnWaitConditionHandle(self, f"GateHandle{self.gate.run_id}")
            self.gate_signal = secretsmanager.Secret(
                self, f"GateSignal{self.gate.run_id}",
                description=f"The deploy gate's signal URL ({self.spec.namespace}/{self.spec.service_name}, run "
                            f"{self.gate.run_id}); read only by the gate's Pod Identity role",
                secret_string_value=SecretValue.resource_attribute(self.gate_handle.ref))
            acknowledge_gate_signal(self.gate_signal)

    def _identities(self, target: eks.ICluster) -> None:
        """The Pod Identity roles: the Ray pods', the gate's (when waiting) and the monitor's (continuous verification)."""
        self.pod_role, self.pod_identity = pod_identity(
            self, "PodRole", "PodIdentity", cluster=target, namespace=self.namespace,
            service_account=self.service_account_name,
            description=f"Ray Serve LLM pods ({self.namespace}/{self.service_account_name}) via EKS Pod Identity")
        secret = self.spec.model.hf_token_secret
        if secret is not None:
            # Only this secret. A name matches the secret's full ARN, whose last 7 characters
            # Secrets Manager appends ("-" and 6 random ones; Secrets Manager user guide,
            # "auth-and-access_examples"). A customer-managed KMS key also needs kms:Decrypt for
            # this role in its key policy; the default aws/secretsmanager key does not.
            resource = secret if secret.startswith("arn:") else Stack.of(self).format_arn(
                service="secretsmanager", resource="secret", resource_name=f"{secret}-??????",
                arn_format=ArnFormat.COLON_RESOURCE_NAME)
            self.pod_role.add_to_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"],
                                                            resources=[resource]))
        self.gate_role: iam.Role | None = None
        self.gate_identity: eks.CfnPodIdentityAssociation | None = None
        if self.gate_signal is not None:
            account = gate_name(self.spec.service_name)
            self.gate_role, self.gate_identity = pod_identity(
                self, "GateRole", "GateIdentity", cluster=target, namespace=self.namespace, service_account=account,
                description=f"Deployment gate ({self.namespace}/{account}): reads its signal URL")
            # GetSecretValue only (grant_read would add DescribeSecret), on this one secret's full ARN.
            self.gate_role.add_to_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"],
                                                             resources=[self.gate_signal.secret_arn]))
            # The association (and so the gate's chart after it) waits for the role's policy too,
            # not only the role: a changed run's secret is readable before its Job exists.
            self.gate_identity.node.add_dependency(self.gate_role.node.find_child("DefaultPolicy"))
        self.monitor_role: iam.Role | None = None
        self.monitor_identity: eks.CfnPodIdentityAssociation | None = None
        if self.verification.every_minutes is not None:
            account = monitor_name(self.spec.service_name)
            self.monitor_role, self.monitor_identity = pod_identity(
                self, "MonitorRole", "MonitorIdentity", cluster=target, namespace=self.namespace,
                service_account=account,
                description=f"Continuous verification ({self.namespace}/{account}): publishes TransportVerified")
            # PutMetricData takes no resource (IAM: "Resource types: none"); the cloudwatch:namespace
            # condition (CloudWatch user guide, "iam-cw-condition-keys-namespace") keeps the role to
            # this deployment's own namespace, which no other deployment's monitor role may write.
            self.monitor_role.add_to_policy(iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"], resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": self.metric_namespace}}))
            acknowledge_monitor_role(self.monitor_role)

    def _gcs_cache(self, target: eks.ICluster) -> None:
        """With GCS fault tolerance: the Valkey cache and its chart, applied before the RayService."""
        self.gcs_cache: GcsRedisCache | None = None
        self.gcs_chart: GcsRedisChart | None = None
        if self.spec.service.gcs_fault_tolerance.enabled:
            self.gcs_cache = GcsRedisCache(
                self, "GcsCache", cluster=target, settings=self.spec.service.gcs_fault_tolerance, namespace=self.namespace,
                copy_service_account=sync_account_name(self.spec.service_name),
                description=f"{self.namespace}/{self.spec.service_name}")
            self.gcs_chart = GcsRedisChart(
                self.cdk8s_app, GCS_REDIS_CHART_ID, spec=self.spec, endpoint=self.gcs_cache.endpoint,
                vpc_cidr=target.vpc.vpc_cidr_block, secret_id=self.gcs_cache.password.secret_arn,
                run_id=self.gate.run_id)
            # Before the RayService: the head's password Secret and its egress come from this chart.
            rayservice_at = self.charts.index(self.serving_charts.rayservice)
            self.charts.insert(rayservice_at, self.gcs_chart)

    def _apply(self, target: eks.ICluster, pools: list[Any], kuberay: KubeRayOperator | None,
               device_plugins: GpuDevicePlugins | None, depends_on: Sequence[Construct]) -> eks.KubernetesManifest | None:
        """Each chart applied (with ``cdk``) after what it needs and the chart before it; returns the last."""
        # An operator confined to this namespace installs its Role into it: the namespace goes first.
        namespace_first = kuberay is not None and bool(kuberay.watch_namespaces)
        after: list[Construct] = [self.pod_identity]
        if self.gate_identity is not None:
            after.append(self.gate_identity)
        if self.monitor_identity is not None:
            after.append(self.monitor_identity)
        if self.gcs_cache is not None:
            # The copy Job's pod gets Pod Identity credentials only if the association exists
            # when the pod is created (the webhook injects them at admission).
            after.append(self.gcs_cache.copy_identity)
        if kuberay is not None and kuberay.chart is not None:
            after.append(kuberay.chart)
        if device_plugins is not None:
            after.extend(device_plugins.charts)
        after.extend(depends_on)
        # The RayService (and so the gate after it) is applied once the node groups it runs on are
        # done: a node-group update that replaces nodes finishes before the gate starts, instead of
        # draining them minutes after it passed (their identity is in the pods' hash, so it reruns).
        given = [*pools, *(device_plugins.node_groups if device_plugins is not None else ())]
        node_groups = list(dict.fromkeys(group.nodegroup for group in given
                                         if isinstance(group, (EfaGpuNodeGroup, SystemNodeGroup))))
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        previous: eks.KubernetesManifest | None = None
        applied = self.charts if self.kubernetes_owner is KubernetesOwner.cdk else []
        for chart in applied:
            chart_id = chart.node.id
            manifest = target.add_cdk8s_chart(chart_id, chart)
            dependencies = list(node_groups) if chart is self.serving_charts.rayservice else []
            for dependency in after:
                if namespace_first and chart is self.serving_charts.namespace and kuberay is not None \
                        and dependency is kuberay.chart:
                    kuberay.chart.node.add_dependency(manifest)
                    continue
                dependencies.append(dependency)
            if previous is not None:
                dependencies.append(previous)
            if dependencies:
                # One call through jsii, not one per dependency: constructs' addDependency takes them all.
                manifest.node.add_dependency(*dependencies)
            self.manifests[chart_id] = manifest
            previous = manifest
        return previous

    @property
    def gitops_parts(self) -> list[cdk8s.Chart]:
        """What a GitOps tool applies in this construct's place: the charts, in apply order."""
        return list(self.charts)



def known_vpc_cidrs(cluster: ClusterLike) -> list[str]:
    """The CIDR blocks of the cluster's VPC that are known at synth time: the literal of a VPC made
    in this app (``ec2.Vpc``'s ``CfnVPC.cidr_block`` and each ``CfnVPCCidrBlock``, so secondary
    blocks too), or the primary block of an imported one (``Vpc.from_lookup``, or
    ``from_vpc_attributes`` given ``vpc_cidr_block``). An imported VPC's secondary blocks are not
    known and not checked; nor is anything about a cluster imported without its ``vpc``."""
    try:
        vpc = eks_cluster_of(cluster).vpc
    except Exception:  # noqa: BLE001 - an imported cluster given no vpc raises on access (jsii)
        return []
    if vpc is None:
        return []
    found: list[str] = []
    for child in vpc.node.find_all():
        value = child.cidr_block if isinstance(child, (ec2.CfnVPC, ec2.CfnVPCCidrBlock)) else None
        if isinstance(value, str) and not Token.is_unresolved(value):
            found.append(value)
    if not found:
        try:
            primary = vpc.vpc_cidr_block
        except Exception:  # noqa: BLE001 - an imported VPC given no CIDR raises on access (jsii)
            return []
        if isinstance(primary, str) and not Token.is_unresolved(primary):
            found.append(primary)
    return found
