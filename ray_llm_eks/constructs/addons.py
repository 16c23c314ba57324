"""Helm add-ons: the NVIDIA and EFA device plugins, and the KubeRay operator.

Every chart has an explicit release name and a pinned version, so a `cdk deploy` months later
installs what was reviewed. Each Helm construct of this package (these and ``NodeAutoscaler``)
takes the user's own Helm values and deep-merges them over the library's with
:func:`merge_helm_values`, one rule for all of them.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ..base import infrastructure as infra
from ..base.errors import SpecError, problem
from ..base.infrastructure import KubernetesOwner
from ..base.placement import GPU_PRESENT_LABEL, SYSTEM_LABELS
from ..base.pools import WorkerPool
from .cluster import ClusterLike, eks_cluster_of, open_namespace_objects
from .kubernetes_side import HelmRelease, ObjectSet, kubernetes_owner_of
from .nodegroups import EfaGpuNodeGroup, SystemNodeGroup
from .validation import ConstructValidationError, validated

NVIDIA_REPOSITORY = "https://nvidia.github.io/k8s-device-plugin"
EFA_REPOSITORY = "https://aws.github.io/eks-charts"
KUBERAY_REPOSITORY = "https://ray-project.github.io/kuberay-helm/"
HELM_WAIT_MINUTES = 10
"""How long Helm waits for a chart's pods to be ready (the operator's, the autoscaler's)."""

GpuPoolLike = EfaGpuNodeGroup | WorkerPool

HelmValues = Mapping[str, Any]
"""Helm values as Python data: what a ``values.yaml`` holds, keyed by strings (leaves may be CDK tokens)."""


def merge_helm_values(library: HelmValues, user: HelmValues | None, field: str = "values",
                      reserved: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The values a chart is installed with: ``library``'s, deep-merged with ``user``'s; the user's win.

    - A key both sides map to a mapping: the two mappings merge, key by key, by these same rules.
    - Any other value the user gives (a list, a string, a number, a bool, a token) replaces the
      library's value whole. Lists are not concatenated: to add a toleration, give the whole list
      (the construct's ``*values`` attribute holds the library's).
    - ``None`` removes the key, the library's value with it, so the chart's own default applies.
      (The result holds no ``None``: jsii would pass it to the CDK as ``undefined``, which drops
      the key from the values anyway, so a ``null`` could never reach Helm to clear a chart
      default; give ``{}`` or ``[]`` for that.)
    - A key only one side has is kept; the library's keys come first, in their order, then the
      user's new keys in theirs (so without user values the result equals ``library``).

    Neither argument is changed: every mapping in the result is a new ``dict``; leaves are shared.
    Refuses (``SpecError`` on ``field``, dotted down to the bad key) a ``user`` that is not a
    mapping or has a key that is not a string (Helm values are a YAML map with string keys), and
    a dotted key of ``reserved`` (key -> the prop that sets it, and why): a value another part of
    the construct reads, which a Helm value would silently contradict.
    """
    if user is not None:
        _check_keys(user, field)
        for path, owner in (reserved or {}).items():
            found, value = _lookup(user, path)
            if found:
                raise problem(f"{field}.{path}", value, f"set by {owner}", f"{field} without {path!r}")
    return _merged(library, user or {})


def _lookup(values: HelmValues, path: str) -> tuple[bool, Any]:
    value: Any = values
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value


def _check_keys(values: Any, field: str) -> None:
    if not isinstance(values, Mapping):
        raise problem(field, values, "Helm values must be a mapping", "a dict of Helm values, such as "
                      "{'resources': {'requests': {'cpu': '200m'}}}")
    for key, value in values.items():
        if not isinstance(key, str):
            raise problem(field, key, "a Helm values key must be a string", "string keys, as in values.yaml")
        if isinstance(value, Mapping):
            _check_keys(value, f"{field}.{key}")


def _merged(library: HelmValues, user: HelmValues) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in library.items():
        if key in user and isinstance(value, Mapping) and isinstance(user[key], Mapping):
            result[key] = _merged(value, user[key])
        else:
            result[key] = _copied(user[key] if key in user else value)
    for key, value in user.items():
        if key not in library:
            result[key] = _copied(value)
    return {key: value for key, value in result.items() if value is not None}


def _copied(value: Any) -> Any:
    return _merged(value, {}) if isinstance(value, Mapping) else value


def _pool(group: GpuPoolLike) -> WorkerPool:
    return group.pool if isinstance(group, EfaGpuNodeGroup) else group


class GpuDevicePlugins(Construct):
    """The NVIDIA and EFA device plugins, on the GPU nodes only.

    The ``AL2023_x86_64_NVIDIA`` AMI ships the driver and the EFA kernel module but no device
    plugin, so without these pods cannot request ``nvidia.com/gpu`` or ``vpc.amazonaws.com/efa``.
    Everything node-specific derives from ``gpu_node_groups`` (the ``EfaGpuNodeGroup``s, or
    their ``pool``s), so the plugins reach exactly those nodes.

    Default settings:
    - ``nvidia-device-plugin`` chart 0.20.1, image ``v0.20.1`` (release ``nvidia-device-plugin``, namespace kube-system),
      scheduled on nodes labelled ``nvidia.com/gpu.present=true``.
    - ``aws-efa-k8s-device-plugin`` chart v0.5.20, which runs the device-plugin image v0.5.13
      (``infra.DEFAULT_EFA_DEVICE_PLUGIN_VERSION``; release ``aws-efa-k8s-device-plugin``,
      namespace kube-system). It has no tolerations by default, so it gets the GPU taints'.
      Its node affinity lists the instance types it believes support EFA; the node groups'
      instance types replace that list, so a type newer than the chart's list still gets the plugin.
    - Both tolerate every taint key of the node groups (``operator: Exists``).

    ``nvidia_values``, ``efa_values``: your Helm values for each chart, deep-merged over the
    library's (:func:`merge_helm_values`: mappings merge, anything else replaces, yours win).
    Default: none. The library sets, for both charts:

    - ``nodeSelector``: ``nvidia.com/gpu.present: "true"``, the label every ``EfaGpuNodeGroup``
      carries, so the DaemonSets run on the GPU nodes only (merged: a key of yours is added).
    - ``tolerations``: one ``operator: Exists`` per taint key of the node groups, with its effect,
      because the GPU taint keeps every pod without it off those nodes. A list, so yours replaces
      it whole. It replaces the NVIDIA chart's default (``CriticalAddonsOnly`` and
      ``nvidia.com/gpu``, chart 0.20.1 ``values.yaml``); the EFA chart's default is empty
      (eks-charts ``stable/aws-efa-k8s-device-plugin`` README: ``tolerations: []``).

    and for the EFA chart, ``supportedInstanceLabels``: ``keys`` ``node.kubernetes.io/instance-type``
    (the well-known label the kubelet sets) and ``values`` the node groups' instance types. The
    chart's node affinity requires a node whose label is in that list; its own list is the EFA
    instance types known at its release, which a newer type would miss.

    ``nvidia_image_digest``, ``efa_image_digest``: each plugin's image by digest (``sha256:...``),
    set as its chart's ``image.tag`` ``<tag>@<digest>``, since neither chart takes a digest of its
    own (``infra.NVIDIA_DEVICE_PLUGIN_IMAGE``, ``infra.EFA_DEVICE_PLUGIN_IMAGE``): both run
    privileged on every GPU node. ``strict`` (default True, as ``RayLlmServing``'s) refuses either
    left out, naming the command that resolves it; ``strict=False`` deploys the charts' tags.
    With a digest, ``image.tag`` is refused in that chart's values.

    ``kubernetes_owner``: ``cdk`` (default) installs both charts; ``gitops`` installs nothing and
    leaves them to a GitOps tool (``gitops_parts``, docs/gitops.md).

    Public attributes: ``nvidia``, ``efa`` (the ``HelmChart`` constructs; None with ``gitops``),
    ``charts``, ``releases`` (both as :class:`HelmRelease`), ``gitops_parts``, ``pools``,
    ``node_groups`` (the ``EfaGpuNodeGroup``s among ``gpu_node_groups``), ``instance_types`` (what the EFA plugin covers), ``nvidia_values``, ``efa_values`` (what each
    chart is installed with, after the merge).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterLike,
        gpu_node_groups: Sequence[GpuPoolLike],
        nvidia_chart_version: str = infra.DEFAULT_NVIDIA_DEVICE_PLUGIN_VERSION,
        efa_chart_version: str = infra.DEFAULT_EFA_DEVICE_PLUGIN_VERSION,
        nvidia_values: HelmValues | None = None,
        efa_values: HelmValues | None = None,
        nvidia_image_digest: str | None = None,
        efa_image_digest: str | None = None,
        strict: bool = True,
        kubernetes_owner: KubernetesOwner | str = KubernetesOwner.cdk,
    ) -> None:
        super().__init__(scope, construct_id)
        self.kubernetes_owner = kubernetes_owner_of(self, kubernetes_owner)
        validated(self, infra.nvidia_device_plugin_version, nvidia_chart_version, "nvidia_chart_version")
        validated(self, infra.semver, efa_chart_version, "efa_chart_version", v_prefix=True)
        pins = dict(nvidia_version=nvidia_chart_version, nvidia_digest=nvidia_image_digest,
                    efa_version=efa_chart_version, efa_digest=efa_image_digest,
                    nvidia_field="nvidia_image_digest", efa_field="efa_image_digest")
        image_tags = validated(self, infra.device_plugin_image_tags, **pins)
        if not gpu_node_groups:
            raise ConstructValidationError(self, [problem(
                "gpu_node_groups", [], "empty", "the EfaGpuNodeGroups (or their pools) whose nodes need the device plugins")])
        self.pools: tuple[WorkerPool, ...] = tuple(_pool(group) for group in gpu_node_groups)
        self.node_groups: tuple[EfaGpuNodeGroup, ...] = tuple(
            group for group in gpu_node_groups if isinstance(group, EfaGpuNodeGroup))
        self.instance_types: tuple[str, ...] = tuple(sorted({pool.instance_type for pool in self.pools}))
        taint_keys = sorted({pool.taint.key for pool in self.pools})
        effects = {pool.taint.key: pool.taint.effect for pool in self.pools}
        gpu_nodes = {GPU_PRESENT_LABEL: "true"}
        tolerations = [{"key": key, "operator": "Exists", "effect": effects[key]} for key in taint_keys]
        # Neither chart has a digest value: the digest rides on the tag, which the runtime then
        # pulls by (infra.NVIDIA_DEVICE_PLUGIN_IMAGE, infra.EFA_DEVICE_PLUGIN_IMAGE).
        pinned = {which: ({"image": {"tag": tag}}, {"image.tag": f"{which}_image_digest, the image pinned by digest"})
                  for which, tag in image_tags.items()}
        nvidia_library, nvidia_reserved = pinned.get("nvidia", ({}, {}))
        efa_library, efa_reserved = pinned.get("efa", ({}, {}))
        self.nvidia_values = validated(self, merge_helm_values, {"nodeSelector": gpu_nodes, "tolerations": tolerations,
                                                                 **nvidia_library},
                                       nvidia_values, "nvidia_values", nvidia_reserved)
        self.efa_values = validated(self, merge_helm_values, {
            "nodeSelector": gpu_nodes,
            "tolerations": tolerations,
            "supportedInstanceLabels": {
                "keys": ["node.kubernetes.io/instance-type"],
                "values": list(self.instance_types),
            },
            **efa_library,
        }, efa_values, "efa_values", efa_reserved)
        if strict:
            unpinned = infra.device_plugin_pin_problems(**pins, efa_version_field="efa_chart_version")
            if unpinned:
                raise ConstructValidationError(self, [SpecError(p.field, f"strict mode refuses it: {p.message} (or "
                                                                "strict=False: deploy unpinned)") for p in unpinned])
        self.releases: tuple[HelmRelease, HelmRelease] = (
            HelmRelease(release="nvidia-device-plugin", chart="nvidia-device-plugin", repository=NVIDIA_REPOSITORY,
                        version=nvidia_chart_version, namespace="kube-system", values=self.nvidia_values),
            HelmRelease(release="aws-efa-k8s-device-plugin", chart="aws-efa-k8s-device-plugin",
                        repository=EFA_REPOSITORY, version=efa_chart_version, namespace="kube-system",
                        values=self.efa_values),
        )
        self.nvidia: eks.HelmChart | None = None
        self.efa: eks.HelmChart | None = None
        if self.kubernetes_owner is KubernetesOwner.cdk:
            helm_cluster = eks_cluster_of(cluster)
            self.nvidia = self.releases[0].install(self, "NvidiaDevicePlugin", helm_cluster)
            self.efa = self.releases[1].install(self, "EfaDevicePlugin", helm_cluster)

    @property
    def charts(self) -> list[eks.HelmChart]:
        """The ``HelmChart`` constructs (none with ``kubernetes_owner`` gitops)."""
        return [chart for chart in (self.nvidia, self.efa) if chart is not None]

    @property
    def gitops_parts(self) -> list[HelmRelease | ObjectSet]:
        """What a GitOps tool applies in this construct's place (``ray_llm_eks.gitops``)."""
        return list(self.releases)


class KubeRayOperator(Construct):
    """The KubeRay operator (chart ``kuberay-operator``), on the system node.

    Default settings: version 1.5.1 (``infra.DEFAULT_KUBERAY_VERSION``), release ``kuberay-operator``, namespace ``kuberay``,
    node selector ``role=system`` (or ``system_nodes``' labels, after which it is then ordered);
    Helm waits (up to 10 minutes) for the operator to be ready, so a RayService applied after
    this chart finds both the CRDs and a running controller.

    ``watch_namespaces``: the namespaces the operator acts in, with namespaced RBAC only
    (``singleNamespaceInstall``); default: every namespace, with a ClusterRole (the chart's
    default). ``RayLlmEksStack`` passes the serving namespace.

    ``values``: your Helm values, deep-merged over the library's (:func:`merge_helm_values`:
    mappings merge, anything else replaces, yours win). Default: none. The library sets
    ``nodeSelector`` (``node_selector``, else ``system_nodes``' labels, else ``role=system``: the
    operator belongs on the system node, off the GPU nodes), and with ``watch_namespaces``
    ``singleNamespaceInstall: true`` and ``watchNamespace`` (chart 1.4.0 and 1.5.1 ``values.yaml``;
    ``templates/deployment.yaml`` passes ``--watch-namespace``, ``multiple_namespaces_role.yaml``
    makes the namespaced Roles). Those two are refused in ``values``: ``RayLlmServing`` reads
    ``watch_namespaces`` to check that its namespace is watched, so set them through that prop.

    ``image_digest``: the operator image by digest (``sha256:...``), set as the chart's
    ``image.tag`` ``v<version>@<digest>`` since the chart takes no digest of its own
    (``infra.KUBERAY_OPERATOR_IMAGE``); ``infra.kuberay_image_digest_command`` prints the command
    that resolves it. Default: none, the chart's tag.

    ``kubernetes_owner``: ``cdk`` (default) installs the chart and the namespace; ``gitops``
    installs nothing and leaves both to a GitOps tool (``gitops_parts``, docs/gitops.md).

    Public attributes: ``chart`` (the ``HelmChart``; anything that creates Ray custom resources
    must depend on it; None with ``gitops``), ``watch_namespaces``, ``values`` (what the chart is
    installed with), ``release`` (the chart as a :class:`HelmRelease`), ``namespace_objects``
    (the namespace and its open policy), ``gitops_parts``.
    """

    NAMESPACE = infra.KUBERAY_NAMESPACE
    RELEASE = infra.KUBERAY_RELEASE

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterLike,
        version: str = infra.DEFAULT_KUBERAY_VERSION,
        system_nodes: SystemNodeGroup | None = None,
        node_selector: dict[str, str] | None = None,
        watch_namespaces: Sequence[str] | None = None,
        values: HelmValues | None = None,
        image_digest: str | None = None,
        kubernetes_owner: KubernetesOwner | str = KubernetesOwner.cdk,
    ) -> None:
        super().__init__(scope, construct_id)
        self.kubernetes_owner = kubernetes_owner_of(self, kubernetes_owner)
        validated(self, infra.semver, version, "version")
        validated(self, infra.image_digest, image_digest, "image_digest")
        self.version = version
        if watch_namespaces is not None:
            validated(self, infra.namespaces, watch_namespaces, "watch_namespaces")
        self.watch_namespaces = tuple(watch_namespaces) if watch_namespaces is not None else None
        library: dict[str, object] = {
            "nodeSelector": dict(node_selector or (system_nodes.labels if system_nodes else SYSTEM_LABELS))}
        if image_digest is not None:
            # The chart has no digest value (templates/deployment.yaml at v1.4.0 and v1.5.1 writes
            # repository:tag), so the digest rides on the tag: the runtime pulls by the digest.
            library["image"] = {"tag": f"v{version}@{image_digest}"}
        if self.watch_namespaces:
            # Namespaced Roles in the watched namespaces instead of a ClusterRole, and
            # --watch-namespace (chart 1.4.0 and 1.5.1, templates/deployment.yaml and
            # multiple_namespaces_role.yaml): the operator cannot touch pods elsewhere. The
            # namespaces must exist before the chart installs (RayLlmServing orders that).
            library.update(singleNamespaceInstall=True, watchNamespace=list(self.watch_namespaces))
        owner = "watch_namespaces, which RayLlmServing reads to check that its namespace is watched"
        self.values = validated(self, merge_helm_values, library, values, "values",
                                {"singleNamespaceInstall": owner, "watchNamespace": owner})
        self.release = HelmRelease(release=self.RELEASE, chart="kuberay-operator", repository=KUBERAY_REPOSITORY,
                                   version=version, namespace=self.NAMESPACE, values=self.values,
                                   create_namespace=True, wait=True, timeout_minutes=HELM_WAIT_MINUTES)
        # The namespace and a policy admitting all before the operator's pod: under the VPC CNI's
        # strict mode a pod no policy selects cannot reach the API server (cluster.ADDON_CONFIGURATION).
        self.namespace_objects = ObjectSet("kuberay-namespace",
                                           tuple(open_namespace_objects(self.NAMESPACE, create_namespace=True)))
        self.chart: eks.HelmChart | None = None
        self.namespace_policy: eks.KubernetesManifest | None = None
        if self.kubernetes_owner is KubernetesOwner.cdk:
            self.chart = self.release.install(self, "Chart", eks_cluster_of(cluster))
            if system_nodes is not None:
                # Helm's wait needs a node that can run the operator's pod.
                self.chart.node.add_dependency(system_nodes.nodegroup)
            self.namespace_policy = self.namespace_objects.apply(self, "NamespacePolicy", eks_cluster_of(cluster))
            self.chart.node.add_dependency(self.namespace_policy)

    @property
    def gitops_parts(self) -> list[HelmRelease | ObjectSet]:
        """What a GitOps tool applies in this construct's place: the namespace first (``ray_llm_eks.gitops``)."""
        return [self.namespace_objects, self.release]
