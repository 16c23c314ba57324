"""One validation: `make synth`'s code path, `ray-llm-eks plan` and the constructs refuse the same
configurations with the same sentences (field, bad value, what is accepted), never a traceback."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from helpers.pins import UNPINNED
from ray_llm_eks import app as synth_app
from ray_llm_eks import cli

runner = CliRunner()
HEX40 = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "sha256:" + "d" * 64

# (configuration, the dotted field the message must name, a fragment of the sentence)
BAD_CONFIGS: list[tuple[dict, str, str]] = [
    # region and zones
    ({"region": "us-east-1"}, "control_plane_azs", "not in region us-east-1"),
    ({"region": "us-east-1"}, "data_plane_az", "not an availability zone of region us-east-1"),
    ({"region": "Oregon"}, "region", "not an AWS region name"),
    ({"control_plane_azs": ["us-west-2a"]}, "control_plane_azs", "at least two availability zones"),
    ({"control_plane_azs": ["us-west-2a", "us-west-2a"]}, "control_plane_azs", "must be distinct"),
    ({"data_plane_az": "us-west-2c"}, "data_plane_az", "not one of control_plane_azs"),
    # names
    ({"stack_name": "ray llm"}, "stack_name", "not a CloudFormation stack name"),
    ({"stack_name": "1stack"}, "stack_name", "not a CloudFormation stack name"),
    ({"cluster": {"name": "my cluster!"}}, "cluster.name", "not an EKS cluster name"),
    ({"cluster": {"name": "x" * 101}}, "cluster.name", "not an EKS cluster name"),
    ({"serving": {"service_name": "r" * 48}}, "serving.service_name", "at most 47 characters"),
    ({"serving": {"service_name": "Ray_LLM"}}, "serving.service_name", "not a DNS label"),
    ({"serving": {"namespace": "infer ence"}}, "serving.namespace", "not a DNS label"),
    # the deployment gate
    ({"verification": {"timeout_minutes": 721}}, "verification.timeout_minutes", "12-hour maximum"),
    ({"verification": {"timeout_minutes": 5}}, "verification.timeout_minutes", "room for a cold start"),
    ({"verification": {"probes": 0}}, "verification.probes", "not a probe count"),
    ({"verification": {"probe_prompt_fraction": 1.5}}, "verification.probe_prompt_fraction", "fraction of max_model_len"),
    ({"verification": {"min_kv_fraction": 0}}, "verification.min_kv_fraction", "predicted KV bytes"),
    ({"region": "us-west-3"}, "region", "not an AWS region (aws-cdk-lib's region facts"),
    # network
    ({"network": {"vpc_cidr": "10.0.0.0/33"}}, "network.vpc_cidr", "not an IPv4 CIDR block"),
    ({"network": {"vpc_cidr": "10.0.0.0/24"}}, "network.vpc_cidr", "a /24 cannot hold"),
    ({"network": {"vpc_cidr": "10.0.0.1/16"}}, "network.vpc_cidr",
     "has host bits set after the /16 prefix (got '10.0.0.1/16'); accepted: the network address, 10.0.0.0/16"),
    ({"network": {"vpc_cidr": "10.0.0.0/8"}}, "network.vpc_cidr", "a /8 is larger than the largest VPC block AWS allows (/16)"),
    ({"network": {"nat_gateways": 3}}, "network.nat_gateways", "one per AZ"),
    ({"network": {"flow_log_retention_days": 31}}, "network.flow_log_retention_days", "retention period"),
    ({"cluster": {"endpoint_access": "public-and-private", "public_access_cidrs": ["office-vpn"]}},
     "cluster.public_access_cidrs", "not an IPv4 CIDR"),
    ({"cluster": {"endpoint_access": "public-and-private"}}, "cluster.public_access_cidrs",
     "needs the CIDRs allowed to reach the public side"),
    ({"cluster": {"endpoint_access": "public-and-private", "public_access_cidrs": ["0.0.0.0/0"]}},
     "cluster.public_access_cidrs", "opens the Kubernetes API to the whole internet"),
    ({"cluster": {"public_access_cidrs": ["203.0.113.0/24"]}}, "cluster.public_access_cidrs",
     "a private endpoint has no public side"),
    ({"cluster": {"endpoint_access": "public"}}, "cluster.endpoint_access", "not an EKS endpoint access mode"),
    ({"serving": {"endpoint": "internal-nlb"}}, "serving.client_cidrs", "opens its NodePort on every node"),
    ({"serving": {"client_cidrs": ["10.0.0.0/16"]}}, "serving.client_cidrs", "overlaps the cluster's VPC 10.0.0.0/16"),
    ({"serving": {"client_cidrs": ["10.0.64.0/24"]}}, "serving.client_cidrs", "the cluster's own subnets"),
    ({"serving": {"client_cidrs": ["10.0.0.0/8"]}}, "serving.client_cidrs", "overlaps the cluster's VPC"),
    ({"network": {"vpc_cidr": "172.16.0.0/16"}, "serving": {"client_cidrs": ["172.16.128.0/20"]}},
     "serving.client_cidrs", "overlaps the cluster's VPC 172.16.0.0/16"),
    ({"serving": {"client_namespaces": ["Apps!"]}}, "serving.client_namespaces", "not a namespace name"),
    ({"serving": {"egress_cidrs": ["internet"]}}, "serving.egress_cidrs", "not an IPv4 CIDR"),
    ({"serving": {"admission_exempt_namespaces": ["agents"]}}, "serving.admission_exempt_namespaces",
     "replaced by serving.admission_exempt_agents"),
    ({"cluster": {"control_plane_log_retention_days": 42}}, "cluster.control_plane_log_retention_days",
     "not a CloudWatch Logs retention period"),
    ({"cluster": {"endpoint_access": "internet"}}, "cluster.endpoint_access", "not an EKS endpoint access mode"),
    ({"cluster": {"kubernetes_version": "1.30"}}, "cluster.kubernetes_version", "no kubectl layer"),
    ({"cluster": {"control_plane_logs": ["everything"]}}, "cluster.control_plane_logs", "not EKS control-plane log"),
    ({"cluster": {"admin_role_arn": "admin"}}, "cluster.admin_role_arn", "not an IAM role ARN"),
    # versions and image
    ({"versions": {"kuberay": "latest"}}, "versions.kuberay", "not a semantic version"),
    ({"versions": {"kuberay": "1.4.0"}}, "serving.ray_auth", "ray_auth: disabled to keep KubeRay 1.4.0"),
    ({"versions": {"nvidia_device_plugin": "0.19.2"}}, "versions.nvidia_device_plugin", "MOFED"),
    ({"versions": {"efa_device_plugin": "main"}}, "versions.efa_device_plugin", "not a semantic version"),
    ({"versions": {"ray": "2.59.0"}}, "versions.ray", "ships Ray 2.58.0"),
    ({"versions": {"ray": "two"}}, "versions.ray", "not a semantic version"),
    ({"image": {"tag": "serve-llm-cuda-v9"}}, "image.tag", "not an AWS Ray LLM DLC tag"),
    ({"image": {"digest": "sha256:abc"}}, "image.digest", "not an image digest"),
    ({"image": {"tag": None}}, "image.tag", "needs a tag or a digest"),
    # strict mode
    ({"strict": True}, "image.digest", "strict mode refuses it"),
    ({"strict": True, "image": {"digest": DIGEST}, "model": {"revision": "main"}}, "model.revision",
     "a branch or tag, not a commit"),
    # node groups
    ({"prefill": {"instance_type": "m7i.xlarge"}}, "prefill.instance_type", "has no GPU"),
    ({"decode": {"instance_type": "g6.4xlarge"}}, "decode.instance_type", "does not support EFA"),
    ({"decode": {"instance_type": "p6-b200.48xlarge"}}, "decode.instance_type", "not in the library's instance table"),
    ({"system": {"instance_type": "g6.8xlarge"}}, "system.instance_type", "has a GPU"),
    ({"prefill": {"min_size": 0, "desired_size": 0}}, "prefill.desired_size", "no GPU to run on"),
    ({"decode": {"desired_size": 3, "max_size": 2}}, "decode.desired_size", "min_size <= desired_size <= max_size"),
    ({"prefill": {"min_size": 3, "desired_size": 2, "max_size": 2}}, "prefill.min_size",
     "min_size is above max_size (2) (got 3); accepted: 0 to 2, or raise max_size to at least 3"),
    ({"decode": {"max_size": 101}}, "decode.max_size", "node count out of range"),
    ({"system": {"count": 0}}, "system.count", "out of range"),
    ({"prefill": {"root_volume": {"throughput_mibps": 2000}}}, "prefill.root_volume.throughput_mibps", "range"),
    ({"prefill": {"root_volume": {"iops": 3000}}}, "prefill.root_volume.throughput_mibps", "0.25 MiB/s per IOPS"),
    ({"decode": {"root_volume": {"size_gib": 10}}}, "decode.root_volume.size_gib", "outside gp3's range"),
    # tensor parallelism and topology
    ({"model": {"tensor_parallel_size": 3}, "prefill": {"instance_type": "g6.12xlarge"},
      "decode": {"instance_type": "g6.12xlarge"}}, "model.tensor_parallel_size", "does not divide the 4 GPUs"),
    ({"model": {"tensor_parallel_size": 2}}, "model.tensor_parallel_size", "larger than the 1 GPU(s)"),
    ({"decode": {"instance_type": "g6.12xlarge", "tensor_parallel_size": 2}}, "decode.tensor_parallel_size",
     "hybrid"),
    ({"topology": "colocated", "decode": {"instance_type": "g6e.8xlarge"}}, "decode.instance_type",
     "one GPU model"),
    ({"topology": "colocated", "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
      "prefill": {"instance_type": "g6.12xlarge", "tensor_parallel_size": 2},
      "decode": {"instance_type": "g6.12xlarge", "tensor_parallel_size": 4}}, "decode.tensor_parallel_size",
     "same tensor_parallel_size"),
    # the model
    ({"model": {"max_model_len": 262144}}, "model.max_model_len", "less than one request"),
    ({"model": {"max_model_len": 0}}, "model.max_model_len", "not a token count"),
    ({"model": {"gpu_memory_utilization": 1.5}}, "model.gpu_memory_utilization", "(0, 1]"),
    ({"model": {"served_name": "qwen 9b"}}, "model.served_name", "no whitespace"),
    ({"model": {"source": "mistralai/Mistral-Large-Instruct-2411"}}, "model.architecture", "not in the package's"),
    ({"model": {"source": "x/dense-70b", "architecture": {
        "parameter_count": 70_553_706_496, "num_hidden_layers": 80, "full_attention_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}}},
     "decode.instance_type", "do not fit"),
    ({"model": {"gpu_memory_utilization": 0.5}}, "prefill.instance_type", "do not fit"),
    # shape errors pydantic reports
    ({"prefil": {}}, "prefil", "unknown key"),
    ({"topology": "pipelined"}, "topology", "disaggregated"),
    ({"nixl": {"backends": ["TCP"]}}, "nixl.backends.0", "LIBFABRIC"),
]


# Issue 25's battery: inputs AWS or Kubernetes would refuse later, each with its construct equivalent.
# (configuration, field, fragment, the construct call or None, the construct's field, its fragment)
# A construct call takes ``stack_in(region)`` -> (stack, network, cluster) and a unique construct id.
USE1 = {"region": "us-east-1", "control_plane_azs": ["us-east-1a", "us-east-1b"], "data_plane_az": "us-east-1a"}


def _in(region: str, first: str = "a", second: str = "b") -> dict:
    return {"region": region, "control_plane_azs": [f"{region}{first}", f"{region}{second}"],
            "data_plane_az": f"{region}{first}"}


def _vpc(region: str = "us-west-2", **props):
    def build(stack_in, cid):
        from ray_llm_eks.constructs import InferenceVpc

        props.setdefault("data_plane_az", f"{region}a")
        props.setdefault("availability_zones", [f"{region}a", f"{region}b"])
        InferenceVpc(stack_in(region)[0], cid, **props)
    return build


def _cluster(**props):
    def build(stack_in, cid):
        from ray_llm_eks.constructs import InferenceCluster

        stack, network, _ = stack_in("us-west-2")
        InferenceCluster(stack, cid, vpc=network.vpc, **props)
    return build


def _gpu_nodes(region: str = "us-west-2", role: str = "prefill", **props):
    def build(stack_in, cid):
        from ray_llm_eks.constructs import EfaGpuNodeGroup

        stack, network, cluster = stack_in(region)
        EfaGpuNodeGroup(stack, cid, cluster=cluster, subnet=network.data_plane_subnet, role=role, **props)
    return build


def _system_nodes(region: str = "us-west-2", **props):
    def build(stack_in, cid):
        from ray_llm_eks.constructs import SystemNodeGroup

        stack, network, cluster = stack_in(region)
        SystemNodeGroup(stack, cid, cluster=cluster, subnet=network.data_plane_subnet, **props)
    return build


def _serving(prefill=None, decode=None, **props):
    def build(stack_in, cid):
        from ray_llm_eks.base import WorkerPool
        from ray_llm_eks.constructs import RayLlmServing

        stack, _, cluster = stack_in("us-west-2")
        RayLlmServing(stack, cid, cluster=cluster, strict=False, prefill=prefill or WorkerPool("prefill"),
                      decode=decode or WorkerPool("decode"), **props)
    return build


def _tp8_leg():
    from ray_llm_eks.base import WorkerPool
    from ray_llm_eks.base.serving import Leg

    return Leg(WorkerPool("prefill", instance_type="g6.12xlarge"), tensor_parallel_size=8)


def _pool(role: str, instance_type: str):
    from ray_llm_eks.base import WorkerPool

    return WorkerPool(role, instance_type=instance_type)


NOT_OFFERED = "not offered in"
NEW_BAD_INPUTS: list[tuple[dict, str, str, object, str, str]] = [
    # AZs: checked against the region's zones (ray_llm_eks/data/generated/ec2_offerings.json)
    ({**USE1, "data_plane_az": "us-east-1q"}, "data_plane_az", "region us-east-1 has no availability zone us-east-1q",
     _vpc("us-east-1", data_plane_az="us-east-1q"), "data_plane_az", "region us-east-1 has no availability zone"),
    ({"control_plane_azs": ["us-west-2a", "us-west-2e"]}, "control_plane_azs",
     "region us-west-2 has no availability zone us-west-2e",
     _vpc(availability_zones=["us-west-2a", "us-west-2e"]), "availability_zones", "has no availability zone us-west-2e"),
    ({"data_plane_az": "eu-west-1a"}, "data_plane_az", "not an availability zone of region us-west-2",
     _vpc(data_plane_az="eu-west-1a"), "data_plane_az", "not an availability zone of region us-west-2"),
    ({"control_plane_azs": ["us-west-2a", "us-east-1b"]}, "control_plane_azs", "us-east-1b not in region us-west-2",
     _vpc(availability_zones=["us-west-2a", "us-east-1b"]), "availability_zones", "us-east-1b not in region us-west-2"),
    ({"control_plane_azs": ["us-west-2a", "us-west-2-lax-1a"]}, "control_plane_azs",
     "us-west-2-lax-1a not in region us-west-2",  # a Local Zone is no AZ letter
     _vpc(availability_zones=["us-west-2a", "us-west-2-lax-1a"]), "availability_zones", "us-west-2-lax-1a not in region"),
    ({**_in("ap-northeast-1"), "control_plane_azs": ["ap-northeast-1a", "ap-northeast-1e"]}, "control_plane_azs",
     "region ap-northeast-1 has no availability zone ap-northeast-1e",
     _vpc("ap-northeast-1", availability_zones=["ap-northeast-1a", "ap-northeast-1e"]), "availability_zones",
     "has no availability zone ap-northeast-1e"),
    ({"control_plane_azs": "us-west-2a"}, "control_plane_azs", "not a list",
     _vpc(availability_zones="us-west-2a"), "availability_zones", "not a list"),
    ({"data_plane_az": 5}, "data_plane_az", "not text",
     _vpc(data_plane_az=5), "data_plane_az", "not an availability zone of region us-west-2"),
    # instance offerings per region (the same table)
    (_in("eu-west-1"), "prefill.instance_type", f"{NOT_OFFERED} eu-west-1",
     _gpu_nodes("eu-west-1"), "instance_type", f"{NOT_OFFERED} eu-west-1"),
    ({**_in("eu-west-1"), "prefill": {"instance_type": "g5.8xlarge"}, "decode": {"instance_type": "g6.12xlarge"}},
     "decode.instance_type", "accepted: a type eu-west-1 offers: g5.12xlarge, g5.8xlarge",
     _gpu_nodes("eu-west-1", "decode", instance_type="g6.12xlarge"), "instance_type", "a type eu-west-1 offers"),
    ({**_in("sa-east-1"), "prefill": {"instance_type": "g6e.8xlarge"}, "decode": {"instance_type": "g6e.8xlarge"}},
     "prefill.instance_type", f"{NOT_OFFERED} sa-east-1",
     _gpu_nodes("sa-east-1", instance_type="g6e.8xlarge"), "instance_type", f"{NOT_OFFERED} sa-east-1"),
    ({**_in("me-south-1"), "prefill": {"instance_type": "g5.8xlarge"}, "decode": {"instance_type": "g5.8xlarge"}},
     "system.instance_type", "me-south-1 offers none of the library's CPU-only types",
     _system_nodes("me-south-1"), "instance_type", "offers none of the library's CPU-only types"),
    (_in("eu-south-1"), "decode.instance_type", "eu-south-1 offers none of the library's EFA GPU types",
     _gpu_nodes("eu-south-1", "decode"), "instance_type", "offers none of the library's EFA GPU types"),
    (_in("af-south-1"), "prefill.instance_type", f"{NOT_OFFERED} af-south-1",
     _gpu_nodes("af-south-1"), "instance_type", f"{NOT_OFFERED} af-south-1"),
    # wrong-type scalars in several sections
    ({"prefill": {"min_size": "one"}}, "prefill.min_size", "not a whole number",
     _gpu_nodes(min_size="one"), "min_size", "not a whole number"),
    ({"system": {"count": "two"}}, "system.count", "not a whole number (got 'two'); accepted: a whole number, such as 1",
     _system_nodes(count="two"), "count", "not a whole number"),
    ({"network": {"nat_gateways": "one"}}, "network.nat_gateways", "not a whole number",
     _vpc(nat_gateways="one"), "nat_gateways", "not a whole number"),
    ({"network": {"vpc_cidr": 10}}, "network.vpc_cidr", "not text",
     _vpc(cidr=10), "cidr", "not an IPv4 CIDR block"),
    ({"cluster": {"kubernetes_version": 1.35}}, "cluster.kubernetes_version", "not text",
     _cluster(kubernetes_version=1.35), "kubernetes_version", "not a version string"),
    ({"model": {"max_model_len": "4096 tokens"}}, "model.max_model_len", "not a whole number",
     _serving(model={"max_model_len": "4096 tokens"}), "model.max_model_len", "not a token count"),
    ({"model": {"gpu_memory_utilization": "high"}}, "model.gpu_memory_utilization", "not a number",
     _serving(model={"gpu_memory_utilization": "high"}), "model.gpu_memory_utilization", "not a fraction"),
    ({"cluster": {"control_plane_logs": "api"}}, "cluster.control_plane_logs", "not a list",
     _cluster(control_plane_logs="api"), "control_plane_logs", "not a list"),
    ({"verification": {"timeout_minutes": "1h"}}, "verification.timeout_minutes", "not a whole number",
     _serving(verification={"timeout_minutes": "1h"}), "verification.timeout_minutes", "not a deploy timeout"),
    ({"serving": {"client_cidrs": "10.50.0.0/16"}}, "serving.client_cidrs", "not a list",
     _serving(service={"client_cidrs": "10.50.0.0/16"}), "service.client_cidrs", "not a list"),
    ({"system": {"count": 0.5}}, "system.count", "not a whole number",
     _system_nodes(count=0.5), "count", "not a whole number"),
    ({"decode": {"desired_size": 1.5}}, "decode.desired_size", "not a whole number",
     _gpu_nodes(role="decode", desired_size=1.5), "desired_size", "not a whole number"),
    # negative or zero sizes
    ({"decode": {"min_size": -1}}, "decode.min_size", "node count out of range",
     _gpu_nodes(role="decode", min_size=-1), "min_size", "node count out of range"),
    ({"prefill": {"root_volume": {"size_gib": 0}}}, "prefill.root_volume.size_gib", "outside gp3's range",
     _gpu_nodes(root_volume_size_gib=0), "root_volume_size_gib", "outside gp3's range"),
    ({"system": {"root_volume_size_gib": 0}}, "system.root_volume_size_gib", "outside gp3's range",
     _system_nodes(root_volume_size_gib=0), "root_volume_size_gib", "outside gp3's range"),
    ({"model": {"tensor_parallel_size": 0}}, "model.tensor_parallel_size", "not a GPU count",
     _serving(model={"tensor_parallel_size": 0}), "model.tensor_parallel_size", "not a GPU count"),
    ({"verification": {"probes": -3}}, "verification.probes", "not a probe count",
     _serving(verification={"probes": -3}), "verification.probes", "not a probe count"),
    ({"network": {"nat_gateways": 0}}, "network.nat_gateways", "one in the data-plane AZ",
     _vpc(nat_gateways=0), "nat_gateways", "one in the data-plane AZ"),
    # tensor parallelism against the GPUs of a node
    ({"prefill": {"instance_type": "g6.12xlarge", "tensor_parallel_size": 8}, "decode": {"instance_type": "g6.12xlarge"}},
     "prefill.tensor_parallel_size", "larger than the 4 GPU(s) of one g6.12xlarge",
     lambda stack_in, cid: _serving(prefill=_tp8_leg(), decode=_pool("decode", "g6.12xlarge"))(stack_in, cid),
     "prefill.tensor_parallel_size", "larger than the 4 GPU(s)"),
    ({"model": {"tensor_parallel_size": 4}, "prefill": {"instance_type": "g6.12xlarge"}}, "model.tensor_parallel_size",
     "larger than the 1 GPU(s) of one g6.8xlarge",
     lambda stack_in, cid: _serving(prefill=_pool("prefill", "g6.12xlarge"), model={"tensor_parallel_size": 4})(
         stack_in, cid), "model.tensor_parallel_size", "larger than the 1 GPU(s)"),
    # unknown keys at several depths
    ({"prefill": {"root_volume": {"sizegib": 100}}}, "prefill.root_volume.sizegib",
     "accepted: the keys of this section: size_gib, throughput_mibps, iops", None, "", ""),
    ({"observability": {"alarm": "ops@example.com"}}, "observability.alarm", "alarm_email",
     _serving(observability={"alarm": "ops@example.com"}), "observability", "unknown field(s) of ObservabilitySpec"),
    ({"cluster": {"addon_versions": {"vpccni": "v1.19.0-eksbuild.1"}}}, "cluster.addon_versions.vpccni", "vpc_cni",
     _cluster(addon_versions={"vpccni": "v1.19.0-eksbuild.1"}), "addon_versions", "not an add-on"),
    ({"image": {"tags": "serve-llm-cuda-v1.0"}}, "image.tags", "unknown key",
     _serving(image={"tags": "serve-llm-cuda-v1.0"}), "image", "unknown field(s) of ImageSpec"),
    # CIDRs
    ({"network": {"vpc_cidr": "10.0.0.0"}}, "network.vpc_cidr", "no /prefix length",
     _vpc(cidr="10.0.0.0"), "cidr", "no /prefix length"),
    ({"serving": {"client_cidrs": ["10.300.0.0/16"]}}, "serving.client_cidrs", "not an IPv4 CIDR block",
     _serving(service={"client_cidrs": ["10.300.0.0/16"]}), "service.client_cidrs", "not an IPv4 CIDR block"),
    ({"cluster": {"endpoint_access": "public-and-private", "public_access_cidrs": ["203.0.113.7/24"]}},
     "cluster.public_access_cidrs", "has host bits set after the /24 prefix",
     _cluster(endpoint_access="public-and-private", public_access_cidrs=["203.0.113.7/24"]), "public_access_cidrs",
     "has host bits set"),
    ({"serving": {"egress_cidrs": ["0.0.0.0/33"]}}, "serving.egress_cidrs", "not an IPv4 CIDR block",
     _serving(service={"egress_cidrs": ["0.0.0.0/33"]}), "service.egress_cidrs", "not an IPv4 CIDR block"),
    # enumerations, in the library's words (never pydantic's "Input should be")
    ({"model": {"dtype": "fp8"}}, "model.dtype", "accepted: bfloat16, float16, auto",
     _serving(model={"dtype": "fp8"}), "model.dtype", "bfloat16, float16, auto"),
    ({"serving": {"endpoint": "public-nlb"}}, "serving.endpoint", "accepted: ClusterIP, internal-nlb",
     _serving(service={"endpoint": "public-nlb"}), "service.endpoint", "ClusterIP, internal-nlb"),
    ({"serving": {"ray_auth": "password"}}, "serving.ray_auth", "accepted: disabled, token",
     _serving(service={"ray_auth": "password"}), "service.ray_auth", "disabled, token"),
    ({"topology": "colocate"}, "topology", "accepted: disaggregated, colocated",
     _serving(topology="colocate"), "topology", "disaggregated, colocated"),
]
BAD_CONFIGS.extend((config, field, fragment) for config, field, fragment, *_ in NEW_BAD_INPUTS)
NEW_FROM = len(BAD_CONFIGS) - len(NEW_BAD_INPUTS)


def _lines(output: str) -> list[str]:
    return sorted(line.strip() for line in output.splitlines() if line.startswith("  ") and ": " in line)


@pytest.fixture(scope="module")
def entry_point_refusals(tmp_path_factory):
    """Each bad configuration once through each entry point: (synth exit, synth lines, plan exit, plan lines)."""
    import contextlib
    import io

    results = {}
    for index, (config, _, _) in enumerate(BAD_CONFIGS):
        path = tmp_path_factory.mktemp("bad") / f"bad-{index}.yaml"
        path.write_text(yaml.safe_dump({**UNPINNED, **config}))  # only the refusal under test (helpers/pins.py)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            synth_exit = synth_app.main(str(path))
        plan = runner.invoke(cli.app, ["plan", "--config", str(path)])
        results[index] = (synth_exit, stderr.getvalue(), plan.exit_code, plan.output, plan.exception)
    return results


def test_the_battery_is_large_enough():
    assert len(BAD_CONFIGS) >= 40
    assert len({json.dumps(c, sort_keys=True) for c, _, _ in BAD_CONFIGS}) >= 40


@pytest.mark.parametrize("index", range(len(BAD_CONFIGS)), ids=[f for _, f, _ in BAD_CONFIGS])
def test_synth_and_plan_refuse_it_with_the_same_sentences(entry_point_refusals, index):
    _, field, fragment = BAD_CONFIGS[index]
    synth_exit, synth_err, plan_exit, plan_out, plan_exception = entry_point_refusals[index]
    assert synth_exit == 2, synth_err
    assert plan_exit in (1, 2), plan_out
    assert not isinstance(plan_exception, Exception) or isinstance(plan_exception, SystemExit), plan_exception
    assert "Traceback" not in synth_err + plan_out and "jsii" not in (synth_err + plan_out).lower()
    synth_lines, plan_lines = _lines(synth_err), _lines(plan_out)
    assert synth_lines == plan_lines
    named = [line for line in synth_lines if line.startswith(f"{field}: ")]
    assert named and any(fragment in line for line in named), synth_err
    # Every line names the value it refuses (or the unknown key).
    for line in named:
        assert "(got " in line or "Input should be" in line, line


def test_the_new_battery_is_at_least_thirty_distinct_inputs():
    assert len(NEW_BAD_INPUTS) >= 30
    assert len({json.dumps(c, sort_keys=True) for c, *_ in NEW_BAD_INPUTS}) == len(NEW_BAD_INPUTS)
    old = {json.dumps(c, sort_keys=True) for c, _, _ in BAD_CONFIGS[:NEW_FROM]}
    assert not old & {json.dumps(c, sort_keys=True) for c, *_ in NEW_BAD_INPUTS}


@pytest.mark.parametrize("index", range(len(NEW_BAD_INPUTS)), ids=[f for _, f, *_ in NEW_BAD_INPUTS])
def test_new_inputs_name_the_value_and_what_is_accepted_in_synth_and_plan(entry_point_refusals, index):
    _, field, _, *_ = NEW_BAD_INPUTS[index]
    _, synth_err, _, plan_out, _ = entry_point_refusals[NEW_FROM + index]
    for output in (synth_err, plan_out):
        named = [line for line in _lines(output) if line.startswith(f"{field}: ")]
        assert named, output
        assert all("(got " in line and "; accepted: " in line for line in named), named


@pytest.fixture(scope="module")
def stack_in():
    """One stack with the library's VPC and cluster per region, built when first asked for."""
    from helpers.composition import cluster_stack

    stacks: dict[str, tuple] = {}

    def get(region: str):
        if region not in stacks:
            stacks[region] = cluster_stack(f"Battery-{region}", region)
        return stacks[region]
    return get


CONSTRUCT_CASES = [i for i, entry in enumerate(NEW_BAD_INPUTS) if entry[3] is not None]


@pytest.mark.parametrize("index", CONSTRUCT_CASES, ids=[NEW_BAD_INPUTS[i][1] for i in CONSTRUCT_CASES])
def test_the_equivalent_construct_call_refuses_it_naming_its_path_and_field(stack_in, index):
    from ray_llm_eks.constructs import ConstructValidationError

    _, _, _, build, field, fragment = NEW_BAD_INPUTS[index]
    cid = f"Misuse{index}"
    with pytest.raises(ConstructValidationError) as caught:
        build(stack_in, cid)
    lines = str(caught.value).splitlines()
    named = [line for line in lines if f"/{cid}: {field}: " in line]
    assert named and any(fragment in line for line in named), lines
    assert all(line.startswith("Battery-") and "(got " in line and "; accepted: " in line for line in named), named
    assert "jsii" not in str(caught.value).lower() and "Traceback" not in str(caught.value)


def test_a_spec_object_built_outside_a_construct_names_its_type_and_the_dict_form_the_construct_path(stack_in):
    from ray_llm_eks.base.errors import SpecErrors
    from ray_llm_eks.base.serving import ModelSpec
    from ray_llm_eks.constructs import ConstructValidationError

    with pytest.raises(SpecErrors) as caught:
        ModelSpec(max_model_len="4096")
    assert str(caught.value) == "ModelSpec: max_model_len: not a token count (got '4096'); accepted: a whole number >= 1"
    with pytest.raises(ConstructValidationError) as caught:
        _serving(model={"max_model_len": "4096"})(stack_in, "DictModel")
    assert str(caught.value) == ("Battery-us-west-2/DictModel: model.max_model_len: not a token count (got '4096'); "
                                 "accepted: a whole number >= 1")
    with pytest.raises(ConstructValidationError, match=r"/StrModel: model: not a ModelSpec \(got 'Qwen/Qwen3.5-9B'\); "
                                                       r"accepted: ModelSpec\(\.\.\.\) or a dict of its fields"):
        _serving(model="Qwen/Qwen3.5-9B")(stack_in, "StrModel")


def test_plan_exits_1_only_when_the_model_does_not_fit(entry_point_refusals):
    for index, (_, field, fragment) in enumerate(BAD_CONFIGS):
        _, _, plan_exit, _, _ = entry_point_refusals[index]
        assert plan_exit == (1 if fragment in ("do not fit", "less than one request") else 2), BAD_CONFIGS[index]


def test_the_default_configuration_is_accepted_by_both(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("strict: false\nmodel: {max_model_len: 8192}\n")
    assert runner.invoke(cli.app, ["plan", "--config", str(path), "--json"]).exit_code == 0
