"""Checks and defaults of the AWS side that the configuration and the constructs share.

Each check raises :class:`~ray_llm_eks.base.errors.SpecError` naming the field, the bad value
and what is accepted. The configuration adapter calls them (so ``make synth`` and
``ray-llm-eks plan`` refuse the same files), and so does each construct for its own props (so a
construct used directly refuses the same values).
"""

from __future__ import annotations

import ipaddress
import json
import re
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .errors import Collector, SpecError, a_list, problem, whole_number
from .upstream_defects import NVIDIA_DEVICE_PLUGIN_MOFED, broken_nvidia_device_plugin

# --- defaults, each stated once ------------------------------------------------------------------

DEFAULT_REGION = "us-west-2"
DEFAULT_CONTROL_PLANE_AZS = ("us-west-2a", "us-west-2b")
DEFAULT_DATA_PLANE_AZ = "us-west-2a"
DEFAULT_STACK_NAME = "RayLlmEks"
DEFAULT_VPC_CIDR = "10.0.0.0/16"
DEFAULT_NAT_GATEWAYS = 1
DEFAULT_FLOW_LOG_RETENTION_DAYS = 30
DEFAULT_CONTROL_PLANE_LOG_RETENTION_DAYS = 90
"""The audit log is what an incident review reads; 90 days covers a quarter (EKS sets none)."""
DEFAULT_KUBERNETES_VERSION = "1.35"
KUBERNETES_VERSIONS = ("1.35",)
"""Versions with a kubectl layer in the install (``aws-cdk.lambda-layer-kubectl-v35``)."""
ENDPOINT_ACCESS_MODES = ("private", "public-and-private")
"""``public`` (no private side) is not offered: ``aws_eks_v2`` cannot restrict a public-only
endpoint to CIDRs (``EndpointAccess.PUBLIC.only_from`` raises), so it would always be open to
the internet, and the kubectl handler could not reach it from the VPC."""
DEFAULT_ENDPOINT_ACCESS = "private"
"""The Kubernetes API is reachable only from the VPC (the kubectl handler runs there); open a
public side for named CIDRs with ``public-and-private`` (docs/deploying.md, "Reach the cluster")."""
DEFAULT_PUBLIC_ACCESS_CIDRS: tuple[str, ...] = ()
DEFAULT_BOOTSTRAP_CLUSTER_CREATOR_ADMIN = False
"""Whether the identity that creates the cluster (the CloudFormation execution role) silently
becomes cluster admin. No: the kubectl handler gets admin through its own access entry
(aws-cdk-lib ``aws_eks_v2``: ``grantClusterAdmin("ClusterAdminRoleAccess", kubectl role)``), and
people get it through ``admin_role_arn``. Changing this later replaces the cluster."""
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
DEFAULT_CONTROL_PLANE_LOGS = ("api", "audit", "authenticator")

KUBERAY_NAMESPACE = "kuberay"


class KubernetesOwner(str, Enum):
    """Who applies the Kubernetes side (the cdk8s charts, the Helm charts, the namespace policies)."""

    cdk = "cdk"
    """The stack applies every Kubernetes object through its kubectl handler, and CloudFormation
    waits for the deployment gate (a wait condition)."""
    gitops = "gitops"
    """The stack builds the AWS side only; ``ray-llm-eks render`` writes the Kubernetes side for
    Argo CD or Flux to apply, and the gate reports through its Job's status (docs/gitops.md). The
    stack still applies the NetworkPolicies its own EKS managed add-ons need to start under the
    VPC CNI's strict mode (kube-system's, and amazon-cloudwatch's with observability)."""
KUBERAY_RELEASE = "kuberay-operator"
KUBERAY_OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "kuberay-operator"}
"""The operator pod's labels (kuberay-operator chart, ``templates/deployment.yaml``: the chart
name; the same at 1.4.0 and 1.5.1); the serving namespace's NetworkPolicy admits it to the Ray
dashboard with these."""
KUBERAY_OPERATOR_SERVICE_ACCOUNT = "kuberay-operator"
"""The operator's service account (kuberay-operator chart, ``serviceAccount.name``): it creates the
Ray pods, and the admission policy grants their privileges only to pods it creates."""
DAEMONSET_CONTROLLER_USER = "system:serviceaccount:kube-system:daemon-set-controller"
REPLICASET_CONTROLLER_USER = "system:serviceaccount:kube-system:replicaset-controller"
"""Who creates a DaemonSet's (a Deployment's) pods: the controller's own account, as the controller
manager runs with per-controller credentials (``--use-service-account-credentials``, kubeadm's
default). The shared identity ``system:kube-controller-manager`` is not accepted: with it every
controller (Job, ReplicaSet, DaemonSet) would be one requester, so a Job naming the EFA counter
readers' account would get their grants. A control plane that used it would have the counter
readers refused at admission, and the gate fails for want of them: loud, not open."""
AGENT_CONTROLLER_USERS = (DAEMONSET_CONTROLLER_USER, REPLICASET_CONTROLLER_USER)
"""Who may create an exempt node agent's pods (``serving.admission_exempt_agents``)."""
NVIDIA_DEVICE_PLUGIN_RELEASE = "nvidia-device-plugin"
NVIDIA_DEVICE_PLUGIN_SERVICE_ACCOUNT = f"{NVIDIA_DEVICE_PLUGIN_RELEASE}-service-account"
"""nvidia-device-plugin chart (NVIDIA/k8s-device-plugin v0.20.0, the newest tag in the mirror,
``deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml``):
``serviceAccountName: <fullname>-service-account``, and ``_helpers.tpl`` makes the fullname the
release name when it holds the chart's name. The release is ``constructs.addons``'."""
DEFAULT_KUBERAY_VERSION = "1.5.1"
"""The first KubeRay that runs Ray with token authentication (``rayClusterConfig.authOptions``,
ray-project/kuberay ``ray-operator/apis/ray/v1/raycluster_types.go@v1.5.1``), which the serving
side turns on by default. Its chart keeps the values this library sets (``nodeSelector``,
``singleNamespaceInstall``, ``watchNamespace``: ``helm-chart/kuberay-operator/values.yaml@v1.5.1``),
the pod label and the service account name; its ClusterRole adds ``secrets`` create/get/list/watch
(the operator makes and reads each cluster's token Secret: ``templates/_helpers.tpl@v1.5.1``).
1.4.0 stays selectable with ``ray_auth: disabled``. Both CRDs are in ``tests/data``."""
DEFAULT_NVIDIA_DEVICE_PLUGIN_VERSION = "0.20.1"
DEFAULT_EFA_DEVICE_PLUGIN_VERSION = "v0.5.20"
"""The aws-efa-k8s-device-plugin CHART version. The chart and its image are versioned apart: chart
v0.5.20 deploys the device-plugin image v0.5.13 (aws/eks-charts@de5fdc1
``stable/aws-efa-k8s-device-plugin/Chart.yaml`` ``appVersion: "v0.5.13"``, ``values.yaml``
``image.tag: "v0.5.13"``); image v0.5.20 ships from chart v0.5.29 on. NVIDIA's chart deploys the
image of its own version (``nvcr.io/nvidia/k8s-device-plugin:v<appVersion>``, NVIDIA/k8s-device-plugin
``deployments/helm/nvidia-device-plugin/templates/_helpers.tpl:84``@v0.20.0, ``Chart.yaml``
``appVersion`` equal to ``version``)."""

CLOUDWATCH_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827,
                             2192, 2557, 2922, 3288, 3653)
"""The retention periods CloudWatch Logs accepts (PutRetentionPolicy API)."""

# The new VPC's layout (constructs.network.InferenceVpc): per AZ one public /24 and one private /19.
PUBLIC_SUBNET_PREFIX = 24
PRIVATE_SUBNET_PREFIX = 19
LARGEST_VPC_PREFIX = 16  # AWS: a VPC CIDR is /16 .. /28

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_AZ = re.compile(r"^([a-z]{2}(-[a-z]+)+-\d+)[a-z]$")
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")


REGIONS_FILE = Path(__file__).resolve().parent.parent / "data" / "generated" / "regions.json"
"""The regions aws-cdk-lib's region facts know (``make generate``, tools/generate_regions.py)."""


@lru_cache(maxsize=1)
def known_regions() -> frozenset[str]:
    return frozenset(json.loads(REGIONS_FILE.read_text())["regions"])


def region(value: str, field: str = "region") -> str:
    if not isinstance(value, str) or not _REGION.match(value):
        raise problem(field, value, "not an AWS region name", "a name such as us-west-2")
    if value not in known_regions():
        nearby = sorted(r for r in known_regions() if r.rsplit("-", 1)[0] == value.rsplit("-", 1)[0])
        raise problem(field, value, "not an AWS region (aws-cdk-lib's region facts, "
                                    "ray_llm_eks/data/generated/regions.json)",
                      f"one of {', '.join(nearby)}" if nearby else "a region such as us-west-2")
    return value


def region_availability_zones(region_name: str) -> tuple[str, ...] | None:
    """The AZ names of the region (``ray_llm_eks/data/generated/ec2_offerings.json``), or None for a
    region the table does not know; Local Zones and Wavelength Zones are not among them."""
    from .instance_types import offerings

    azs = offerings()["availability_zones"].get(region_name) if isinstance(region_name, str) else None
    return tuple(azs) if azs else None


def az_region(az: str) -> str | None:
    """The region an AZ name belongs to (``us-east-1`` of ``us-east-1a``), or None for no AZ name."""
    match = _AZ.match(az) if isinstance(az, str) else None
    return match.group(1) if match else None


def _azs_accepted(region_name: str) -> str:
    known = region_availability_zones(region_name)
    if known is None:
        return f"an AZ name of {region_name} such as {region_name}a"
    return f"one of {', '.join(known)}"


def availability_zone(value: str, region_name: str, field: str = "data_plane_az") -> str:
    """An AZ of the region: its name starts with the region's, and the region's AZ table (moto's
    snapshot of EC2 DescribeAvailabilityZones, with the letters older accounts see) lists it.
    A region the table does not know gets the name check only. In the oldest regions AWS maps
    letters to zones per account, so a listed letter may still be missing from one account:
    ``ray-llm-eks preflight`` asks EC2 for the account's own."""
    if not _in_region(value, region_name):
        raise problem(field, value, f"not an availability zone of region {region_name}", _azs_accepted(region_name))
    known = region_availability_zones(region_name)
    if known is not None and value not in known:
        raise problem(field, value, f"region {region_name} has no availability zone {value} (EC2's zones as "
                                    "ray_llm_eks/data/generated/ec2_offerings.json records them)",
                      _azs_accepted(region_name))
    return value


def availability_zones(region_name: str | None, control_plane_azs: Sequence[str], data_plane_az: str, *,
                       azs_field: str = "control_plane_azs", az_field: str = "data_plane_az") -> None:
    """Two or more distinct control-plane AZs of the region, and the data-plane AZ one of them.

    Each problem names its own field: a wrong control-plane list is ``azs_field``, a wrong
    data-plane AZ is ``az_field`` (the constructs call them ``availability_zones`` and
    ``data_plane_az``). ``region_name`` None (an environment-agnostic stack): the region the
    data-plane AZ names.
    """
    found = Collector()
    if region_name is None:
        region_name = az_region(data_plane_az)
        if region_name is None:
            raise problem(az_field, data_plane_az, "not an availability zone name", "a name such as us-west-2a")
    if (error := a_list(azs_field, control_plane_azs, f"{region_name}a, {region_name}b")) is not None:
        raise error
    azs = list(control_plane_azs)
    if len(azs) < 2:
        found.add(problem(azs_field, azs, "EKS needs subnets in at least two availability zones",
                          f"two or more AZ names such as [{region_name}a, {region_name}b]"))
    elif len(set(azs)) != len(azs):
        found.add(problem(azs_field, azs, "availability zones must be distinct",
                          f"distinct names such as [{region_name}a, {region_name}b]"))
    foreign = [az for az in azs if not _in_region(az, region_name)]
    if foreign:
        found.add(problem(azs_field, azs, f"{', '.join(map(str, foreign))} not in region {region_name}",
                          f"AZ names of {region_name}: {_azs_accepted(region_name)}"))
    known = region_availability_zones(region_name)
    missing = [az for az in azs if az not in foreign and known is not None and az not in known]
    if missing:
        found.add(problem(azs_field, azs, f"region {region_name} has no availability zone {', '.join(missing)}",
                          _azs_accepted(region_name)))
    if found.check(availability_zone, data_plane_az, region_name, az_field) is not None \
            and not foreign and not missing and data_plane_az not in azs:
        found.add(problem(az_field, data_plane_az, f"not one of {azs_field}", ", ".join(azs)))
    found.raise_if_any()


def _in_region(az: str, region_name: str) -> bool:
    return az_region(az) == region_name


def instance_type_offered(region_name: str, instance_type: str, field: str, *, gpu: bool) -> str:
    """An instance type EC2 offers in the region, where the library's offerings table knows the
    region (``instance_types.offered_in``); an unknown region, or a type not in the library's
    instance table (refused by its own check), passes. ``gpu``: what the field takes (an EFA GPU
    type for a worker pool, a CPU-only type for the system pool), for the types it lists."""
    from . import instance_types as types

    offered = types.offered_in(region_name) if isinstance(region_name, str) else None
    if offered is None or not isinstance(instance_type, str) or instance_type not in types.INSTANCE_TYPES \
            or instance_type in offered:
        return instance_type
    fitting = sorted(offered & set(types.efa_gpu_names() if gpu else types.cpu_only_names()))
    raise problem(field, instance_type, f"not offered in {region_name} (EC2's offerings as "
                                        "ray_llm_eks/data/generated/ec2_offerings.json records them)",
                  f"a type {region_name} offers: {', '.join(fitting)}" if fitting
                  else f"another region: {region_name} offers none of the library's "
                       f"{'EFA GPU' if gpu else 'CPU-only'} types")


def stack_name(value: str, field: str = "stack_name") -> str:
    if not isinstance(value, str) or not _STACK_NAME.match(value):
        raise problem(field, value, "not a CloudFormation stack name",
                      "1-128 characters, letters, digits and '-', starting with a letter")
    return value


def cluster_name(value: str | None, field: str = "cluster.name") -> str | None:
    if value is not None and (not isinstance(value, str) or not _CLUSTER_NAME.match(value)):
        raise problem(field, value, "not an EKS cluster name",
                      "1-100 characters, letters, digits, '-' and '_', starting with a letter or digit")
    return value


def ipv4_network(field: str, value: str, example: str) -> ipaddress.IPv4Network:
    if not isinstance(value, str):
        # ipaddress takes an int as an address (10 is 0.0.0.10/32): only text is a CIDR block here.
        raise problem(field, value, "not an IPv4 CIDR block (network address / prefix length)",
                      f"a block such as {example}")
    if "/" not in value:
        # ipaddress reads a bare address as a /32; AWS and Kubernetes want the prefix written.
        raise problem(field, value, "not an IPv4 CIDR block: no /prefix length",
                      f"a block such as {example}, or {value}/32 for one address")
    try:
        return ipaddress.IPv4Network(value, strict=True)
    except (ipaddress.AddressValueError, ipaddress.NetmaskValueError, ValueError, TypeError):
        pass
    try:
        loose = ipaddress.IPv4Network(value, strict=False)
    except (ipaddress.AddressValueError, ipaddress.NetmaskValueError, ValueError, TypeError):
        raise problem(field, value, "not an IPv4 CIDR block (network address / prefix length)",
                      f"a block such as {example}") from None
    # AWS and Kubernetes refuse host bits after the prefix: say so, with the block that was meant.
    raise problem(field, value, f"has host bits set after the /{loose.prefixlen} prefix",
                  f"the network address, {loose}") from None


def vpc_layout_prefix(az_count: int) -> int:
    """The longest VPC prefix that still holds the new VPC's subnets for ``az_count`` AZs.

    The subnets are laid out in order, public /24s first, each aligned to its own size, as
    aws-cdk-lib's ``Vpc`` does (``NetworkBuilder.addSubnets``).
    """
    cursor = 0
    for prefix in [PUBLIC_SUBNET_PREFIX] * az_count + [PRIVATE_SUBNET_PREFIX] * az_count:
        size = 2 ** (32 - prefix)
        cursor = -(-cursor // size) * size + size
    return 32 - (cursor - 1).bit_length()


def vpc_cidr(value: str, az_count: int = len(DEFAULT_CONTROL_PLANE_AZS), field: str = "network.vpc_cidr") -> str:
    network = ipv4_network(field, value, DEFAULT_VPC_CIDR)
    smallest = vpc_layout_prefix(az_count)
    accepted = f"a prefix length from /{LARGEST_VPC_PREFIX} to /{smallest}, such as {DEFAULT_VPC_CIDR}"
    if network.prefixlen < LARGEST_VPC_PREFIX:
        raise problem(field, value, f"a /{network.prefixlen} is larger than the largest VPC block AWS allows "
                                    f"(/{LARGEST_VPC_PREFIX})", accepted)
    if network.prefixlen > smallest:
        raise problem(
            field, value,
            f"a /{network.prefixlen} cannot hold a public /{PUBLIC_SUBNET_PREFIX} and a private "
            f"/{PRIVATE_SUBNET_PREFIX} subnet in each of {az_count} AZs", accepted)
    return value


def client_cidrs_outside(client_cidrs: Sequence[str], cluster_cidrs: Sequence[str], where: str,
                         field: str = "serving.client_cidrs") -> tuple[str, ...]:
    """``client_cidrs`` when none overlaps the cluster's own networks (``cluster_cidrs``, named
    ``where`` in the message). Under the VPC CNI every pod takes an address from the cluster's
    subnets, and a NetworkPolicy ``ipBlock`` matches pod addresses: a client CIDR over them would
    admit every pod of the cluster to the OpenAI port, and, with an internal NLB, every node's
    NodePort to anything there. Pods of the cluster are named by namespace instead."""
    networks = [ipv4_network("cluster CIDR", c, DEFAULT_VPC_CIDR) for c in cluster_cidrs]
    for value in client_cidrs:
        client = ipv4_network(field, value, "10.50.0.0/16")
        overlapping = [str(n) for n in networks if client.overlaps(n)]
        if overlapping:
            raise problem(field, value, f"overlaps {where} {', '.join(overlapping)}, the cluster's own subnets: "
                          "every pod there (the VPC CNI gives pods VPC addresses) could call the API",
                          "the networks of callers outside the cluster, such as a peered VPC or a VPN range "
                          "(10.50.0.0/16); name the cluster's own client pods by serving.client_namespaces")
    return tuple(client_cidrs)


def nat_gateways(value: int, az_count: int, field: str = "network.nat_gateways") -> int:
    if (error := whole_number(field, value, f"1 to {az_count}")) is not None:
        raise error
    if not 1 <= value <= az_count:
        raise problem(field, value, "NAT gateways are one in the data-plane AZ, or one per AZ",
                      f"1 to {az_count}")
    return value


def public_access_cidrs(values: Sequence[str], endpoint_access: str,
                        field: str = "cluster.public_access_cidrs") -> tuple[str, ...]:
    if (error := a_list(field, values, "203.0.113.0/24")) is not None:
        raise error
    for value in values:
        if ipv4_network(field, value, "203.0.113.0/24").prefixlen == 0:
            raise problem(field, value, "opens the Kubernetes API to the whole internet",
                          "the CIDR blocks of your networks, such as 203.0.113.0/24")
    if endpoint_access == "public-and-private" and not values:
        raise problem(field, list(values), "endpoint_access public-and-private needs the CIDRs allowed to reach "
                      "the public side", "one or more CIDR blocks such as 203.0.113.0/24")
    if endpoint_access == "private" and values:
        raise problem(field, list(values), "a private endpoint has no public side to open",
                      "no CIDRs, or endpoint_access public-and-private")
    return tuple(values)


_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def namespaces(values: Sequence[str], field: str = "watch_namespaces") -> tuple[str, ...]:
    if (error := a_list(field, values, "inference")) is not None:
        raise error
    if not values:
        raise problem(field, list(values), "an operator that watches no namespace serves nothing",
                      "one or more namespace names, or None for every namespace")
    for value in values:
        if not isinstance(value, str) or not _NAMESPACE.match(value):
            raise problem(field, value, "not a namespace name", "lowercase letters, digits and '-', at most 63")
    return tuple(values)


def endpoint_access(value: str, field: str = "cluster.endpoint_access") -> str:
    if value not in ENDPOINT_ACCESS_MODES:
        raise problem(field, value, "not an EKS endpoint access mode", ", ".join(ENDPOINT_ACCESS_MODES))
    return value


def kubernetes_version(value: str, field: str = "cluster.kubernetes_version") -> str:
    if not isinstance(value, str):
        # 1.35 as a number is a float (and 1.30 would read as 1.3): a version is text.
        raise problem(field, value, "not a version string", f"one of {', '.join(KUBERNETES_VERSIONS)}, quoted: "
                      f"'{KUBERNETES_VERSIONS[0]}'")
    if value not in KUBERNETES_VERSIONS:
        raise problem(field, value, "no kubectl layer for this Kubernetes version in the install",
                      ", ".join(KUBERNETES_VERSIONS))
    return value


def control_plane_logs(values: Sequence[str], field: str = "cluster.control_plane_logs") -> tuple[str, ...]:
    if (error := a_list(field, values, ", ".join(DEFAULT_CONTROL_PLANE_LOGS))) is not None:
        raise error
    unknown = [v for v in values if v not in CONTROL_PLANE_LOG_TYPES]
    if unknown:
        raise problem(field, unknown, "not EKS control-plane log types", ", ".join(CONTROL_PLANE_LOG_TYPES))
    return tuple(values)


def admin_role_arn(value: str | None, field: str = "cluster.admin_role_arn") -> str | None:
    if value is not None and not _ROLE_ARN.match(value):
        raise problem(field, value, "not an IAM role ARN", "arn:aws:iam::<12-digit account>:role/<name>")
    return value


def retention_days(value: int, field: str = "network.flow_log_retention_days") -> int:
    if value not in CLOUDWATCH_RETENTION_DAYS:
        raise problem(field, value, "not a CloudWatch Logs retention period",
                      ", ".join(map(str, CLOUDWATCH_RETENTION_DAYS)))
    return value


def semver(value: str, field: str, *, v_prefix: bool = False) -> str:
    """A released version, as Helm charts and Ray number them (``1.4.0``; ``v0.5.20`` where the chart uses a v)."""
    text = value[1:] if v_prefix and isinstance(value, str) and value.startswith("v") else value
    if not isinstance(text, str) or not _SEMVER.match(text):
        example = "v0.5.20" if v_prefix else "1.4.0"
        raise problem(field, value, "not a semantic version (a tag like 'latest' is not reproducible)",
                      f"MAJOR.MINOR.PATCH such as {example}")
    return value


def nvidia_device_plugin_version(value: str, field: str = "versions.nvidia_device_plugin") -> str:
    semver(value, field)
    if broken_nvidia_device_plugin(value):
        defect = NVIDIA_DEVICE_PLUGIN_MOFED
        raise problem(field, value, defect.why, f"{defect.instead} {defect.cited}")
    return value


# --- pins of what the cluster runs besides the serving image ---------------------------------------

CORE_ADDONS = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent", "coredns")
"""The EKS managed add-ons InferenceCluster installs (constructs/cluster.py)."""
_ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
_IMAGE_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")

KUBERAY_OPERATOR_IMAGE = "quay.io/kuberay/operator"
"""The operator image the kuberay-operator chart deploys (helm-chart/kuberay-operator/values.yaml
``image.repository`` at v1.4.0 and v1.5.1). Its deployment template writes
``{{ image.repository }}:{{ image.tag }}`` and has no digest value, so a digest goes in as the tag
``v<version>@sha256:...``, which the container runtime pulls by digest."""


def addon_version(value: str | None, field: str) -> str | None:
    """An EKS add-on version as ``DescribeAddonVersions`` names it (``v1.20.4-eksbuild.1``), or None."""
    if value is not None and not (isinstance(value, str) and _ADDON_VERSION.match(value)):
        raise problem(field, value, "not an EKS add-on version",
                      "vMAJOR.MINOR.PATCH-eksbuild.N, as `aws eks describe-addon-versions` prints it")
    return value


VPC_CNI_MINIMUM = (1, 18, 5)
"""The oldest vpc-cni the GPU nodes work with: their launch templates attach EFA-only interfaces
("You must have VPC CNI version 1.18.5 or later for EFA-only interfaces", EKS user guide, node-efa;
it also covers NetworkPolicy, v1.14.0-eksbuild.3 or later)."""


def vpc_cni_version(value: str | None, field: str) -> str | None:
    """A vpc-cni add-on version (:func:`addon_version`) no older than :data:`VPC_CNI_MINIMUM`, or None."""
    addon_version(value, field)
    if value is not None:
        found = tuple(int(part) for part in value[1:].split("-", 1)[0].split("."))
        if found < VPC_CNI_MINIMUM:
            minimum = ".".join(map(str, VPC_CNI_MINIMUM))
            raise problem(field, value, f"older than v{minimum}, the first vpc-cni that handles the GPU nodes' "
                          "EFA-only interfaces", f"v{minimum}-eksbuild.1 or later")
    return value


def addon_version_command(addon: str, kubernetes_version: str) -> str:
    """The command that prints the add-on version EKS installs by default on this Kubernetes version."""
    return (f"aws eks describe-addon-versions --kubernetes-version {kubernetes_version} --addon-name {addon} "
            "--query 'addons[0].addonVersions[?compatibilities[?defaultVersion]].addonVersion' --output text")


def image_digest(value: str | None, field: str) -> str | None:
    if value is not None and not (isinstance(value, str) and _IMAGE_DIGEST.match(value)):
        raise problem(field, value, "not an image digest", "'sha256:' followed by 64 lowercase hex")
    return value


def kuberay_image_digest_command(version: str) -> str:
    """The command that prints the digest of the operator image the chart of ``version`` deploys."""
    return (f"docker buildx imagetools inspect {KUBERAY_OPERATOR_IMAGE}:v{version} "
            "--format '{{json .Manifest.Digest}}'")


# --- the device plugins' images: privileged, on every GPU node -------------------------------------

NVIDIA_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
"""The image the nvidia-device-plugin chart deploys (``values.yaml`` ``image.repository``,
NVIDIA/k8s-device-plugin ``deployments/helm/nvidia-device-plugin``@v0.20.0). Its
``templates/_helpers.tpl:83-86`` (``nvidia-device-plugin.fullimage``) writes
``{{ image.repository }}:{{ image.tag | default (printf "v%s" .Chart.AppVersion) }}`` for every
container of its DaemonSets, and ``Chart.yaml`` has ``appVersion`` equal to ``version``: the tag is
``v<chart version>``, and there is no digest value, so a digest rides on the tag."""
EFA_DEVICE_PLUGIN_IMAGE = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin"
"""The image the aws-efa-k8s-device-plugin chart deploys (aws/eks-charts
``stable/aws-efa-k8s-device-plugin/values.yaml`` ``image.repository``, the same from chart v0.5.20
to v0.5.30). ``templates/daemonset.yaml`` writes ``{{ image.repository }}:{{ image.tag | default
.Chart.AppVersion }}`` and has no digest value either."""
EFA_DEVICE_PLUGIN_IMAGE_TAGS = {
    # aws/eks-charts stable/aws-efa-k8s-device-plugin, Chart.yaml (version: appVersion) and
    # values.yaml image.tag (equal) at the commit of each chart version.
    "v0.5.20": "v0.5.13",  # de5fdc1
    "v0.5.21": "v0.5.15",  # d5fd92a
    "v0.5.22": "v0.5.16",  # d2a84c0
    "v0.5.23": "v0.5.16",  # e53d317
    "v0.5.24": "v0.5.16",  # 6d03676
    "v0.5.25": "v0.5.17",  # 61fd70d
    "v0.5.26": "v0.5.18",  # 1d5f1cb
    "v0.5.27": "v0.5.18",  # cf8a385
    "v0.5.28": "v0.5.19",  # 23f1a55
    "v0.5.29": "v0.5.20",  # 2a58b2d
    "v0.5.30": "v0.5.20",  # bfe91c4
}
"""The EFA chart versions its image by another number than its own: the image tag each chart
version deploys, so a digest can be written beside the right tag. A chart version not here takes
no digest (the tag beside it would be a guess)."""


def nvidia_device_plugin_image_tag(chart_version: str) -> str:
    return f"v{chart_version}"


def efa_device_plugin_image_tag(chart_version: str) -> str | None:
    return EFA_DEVICE_PLUGIN_IMAGE_TAGS.get(chart_version)


def device_plugin_image_tags(nvidia_version: str, nvidia_digest: str | None, efa_version: str,
                             efa_digest: str | None, *, nvidia_field: str, efa_field: str) -> dict[str, str]:
    """The ``image.tag`` value of each chart given a digest (``nvidia``, ``efa``): ``<tag>@sha256:...``,
    which the runtime pulls by the digest. Refuses a malformed digest, and an EFA digest for a chart
    version whose image tag :data:`EFA_DEVICE_PLUGIN_IMAGE_TAGS` does not record."""
    found = Collector()
    found.check(image_digest, nvidia_digest, nvidia_field)
    found.check(image_digest, efa_digest, efa_field)
    if efa_digest is not None and efa_device_plugin_image_tag(efa_version) is None:
        found.add(problem(efa_field, efa_digest, f"the image tag chart {efa_version} deploys is not recorded, so "
                          "the digest has no tag to ride on", "a chart version of "
                          f"{', '.join(EFA_DEVICE_PLUGIN_IMAGE_TAGS)}, or no digest"))
    found.raise_if_any()
    tags = {}
    if nvidia_digest is not None:
        tags["nvidia"] = f"{nvidia_device_plugin_image_tag(nvidia_version)}@{nvidia_digest}"
    if efa_digest is not None:
        tags["efa"] = f"{efa_device_plugin_image_tag(efa_version)}@{efa_digest}"
    return tags


def device_plugin_digest_commands(nvidia_version: str, nvidia_digest: str | None, efa_version: str,
                                  efa_digest: str | None, *, nvidia_field: str, efa_field: str) -> dict[str, str]:
    """The command that prints each missing digest, by field: NGC's registry by ``docker buildx
    imagetools``, the EFA image's ECR (EKS's account 602401143452, us-west-2) by ``aws ecr
    describe-images`` with the caller's credentials. None for an EFA chart whose image tag is not
    recorded (:data:`EFA_DEVICE_PLUGIN_IMAGE_TAGS`)."""
    commands = {}
    if nvidia_digest is None:
        commands[nvidia_field] = (f"docker buildx imagetools inspect {NVIDIA_DEVICE_PLUGIN_IMAGE}:"
                                  f"{nvidia_device_plugin_image_tag(nvidia_version)} --format '{{{{json .Manifest.Digest}}}}'")
    tag = efa_device_plugin_image_tag(efa_version)
    if efa_digest is None and tag is not None:
        account, _, rest = EFA_DEVICE_PLUGIN_IMAGE.partition(".dkr.ecr.")
        region, _, repository = rest.partition(".amazonaws.com/")
        commands[efa_field] = (f"aws ecr describe-images --registry-id {account} --repository-name {repository} "
                               f"--image-ids imageTag={tag} --region {region} "
                               "--query 'imageDetails[0].imageDigest' --output text")
    return commands


def device_plugin_pin_problems(nvidia_version: str, nvidia_digest: str | None, efa_version: str,
                               efa_digest: str | None, *, nvidia_field: str, efa_field: str,
                               efa_version_field: str) -> list[SpecError]:
    """The device plugins' images left to their tags, by field, each with the command that resolves
    it: a warning with ``strict`` off, refused with it on (the configuration and ``GpuDevicePlugins``)."""
    commands = device_plugin_digest_commands(nvidia_version, nvidia_digest, efa_version, efa_digest,
                                             nvidia_field=nvidia_field, efa_field=efa_field)
    unpinned = "(privileged, on every GPU node) is pinned by tag only; tags are mutable"
    digest = "'sha256:' followed by 64 lowercase hex"
    found = []
    if nvidia_digest is None:
        image = f"{NVIDIA_DEVICE_PLUGIN_IMAGE}:{nvidia_device_plugin_image_tag(nvidia_version)}"
        found.append(problem(nvidia_field, None, f"device plugin image {image} {unpinned}",
                             f"{digest}; resolve it with: {commands[nvidia_field]}"))
    if efa_digest is None:
        tag = efa_device_plugin_image_tag(efa_version)
        if tag is None:
            found.append(problem(efa_field, None, f"the device plugin image of EFA chart {efa_version} {unpinned}, "
                                 "and the image tag that chart deploys is not recorded",
                                 f"{efa_version_field} one of {', '.join(EFA_DEVICE_PLUGIN_IMAGE_TAGS)}, then "
                                 f"{digest}"))
        else:
            found.append(problem(efa_field, None, f"device plugin image {EFA_DEVICE_PLUGIN_IMAGE}:{tag} {unpinned}",
                                 f"{digest}; resolve it with: {commands[efa_field]}"))
    return found
