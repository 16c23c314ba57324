"""A consumer's own CDK app composing the public constructs: pods derive from the node groups,
and a construct used directly refuses what the configuration refuses, with the same sentence."""

from __future__ import annotations

import re
from pathlib import Path

import aws_cdk as cdk
import cdk8s
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2

from helpers.composition import cluster_stack
from helpers.pins import unpinned_config
from ray_llm_eks.config import ConfigError, parse_config
from ray_llm_eks.constructs import (
    ConstructValidationError,
    EfaFabric,
    EfaGpuNodeGroup,
    GpuDevicePlugins,
    InferenceCluster,
    InferenceVpc,
    KubeRayOperator,
    RayLlmServing,
    SystemNodeGroup,
)
from ray_llm_eks.base import ModelSpec, WorkerPool, sizing
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.base.serving import ServiceSettings
from ray_llm_eks.stack import default_context
from ray_llm_eks.testing import FAST_SYNTH_CONTEXT

ROOT = Path(__file__).resolve().parents[1]
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"

# (prefill type, decode type, tensor parallel, prefill nodes, decode nodes, model)
COMBINATIONS = [
    ("g6.8xlarge", "g6.8xlarge", 1, 1, 1, "Qwen/Qwen3.5-9B"),
    ("g6e.12xlarge", "g6.12xlarge", 2, 1, 2, "Qwen/Qwen3.5-9B"),
    ("g5.12xlarge", "g5.12xlarge", 4, 2, 1, LLAMA),
    ("g6e.8xlarge", "g6.16xlarge", 1, 3, 2, LLAMA),
    ("g6.12xlarge", "g6e.12xlarge", 1, 1, 1, LLAMA),
]


# eu-central-1: a region other than the default that offers every instance type of the library's
# table (ray_llm_eks/data/generated/ec2_offerings.json); eu-west-1 offers no g6 or g6e.
def consumer_stack(name: str, prefill: str | ec2.InstanceType, decode: str, tp: int, prefill_nodes: int,
                   decode_nodes: int, source: str, region: str = "eu-central-1") -> tuple[cdk.Stack, RayLlmServing]:
    app = cdk.App(context={**default_context(), **FAST_SYNTH_CONTEXT})
    stack = cdk.Stack(app, name, env=cdk.Environment(region=region))
    network = InferenceVpc(stack, "Network", data_plane_az=f"{region}a", availability_zones=[f"{region}a", f"{region}b"])
    cluster = InferenceCluster(stack, "Cluster", vpc=network.vpc)
    system = SystemNodeGroup(stack, "System", cluster=cluster, subnet=network.data_plane_subnet)
    fabric = EfaFabric(stack, "Fabric", vpc=network.vpc)
    groups = {
        role: EfaGpuNodeGroup(stack, role.title(), cluster=cluster, subnet=network.data_plane_subnet, fabric=fabric,
                              role=role, instance_type=instance_type, min_size=nodes, desired_size=nodes,
                              max_size=nodes)
        for role, instance_type, nodes in (("prefill", prefill, prefill_nodes), ("decode", decode, decode_nodes))
    }
    plugins = GpuDevicePlugins(stack, "Plugins", cluster=cluster, gpu_node_groups=list(groups.values()), strict=False)
    kuberay = KubeRayOperator(stack, "KubeRay", cluster=cluster, system_nodes=system)
    served = "qwen" if source.startswith("Qwen") else "llama"
    serving = RayLlmServing(stack, "Serving", strict=False, cluster=cluster, prefill=groups["prefill"], decode=groups["decode"],
                            system=system, kuberay=kuberay, device_plugins=plugins,
                            model=ModelSpec(source=source, served_name=served, tensor_parallel_size=tp))
    return stack, serving


def rendered(serving: RayLlmServing) -> tuple[dict, dict]:
    objects = [o for chart in serving.charts for o in cdk8s.Testing.synth(chart)]
    (ray_service,) = [o for o in objects if o["kind"] == "RayService"]
    serve = yaml.safe_load(ray_service["spec"]["serveConfigV2"])["applications"][0]["args"]
    return ray_service, serve


@pytest.mark.parametrize(("prefill", "decode", "tp", "prefill_nodes", "decode_nodes", "source"), COMBINATIONS)
def test_pods_fit_their_nodes_and_replicas_follow_gpus_over_tensor_parallel(prefill, decode, tp, prefill_nodes,
                                                                            decode_nodes, source):
    stack, serving = consumer_stack("Consumer", prefill, decode, tp, prefill_nodes, decode_nodes, source)
    ray_service, serve = rendered(serving)
    groups = {g["groupName"]: g for g in ray_service["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    for role, nodes in (("prefill", prefill_nodes), ("decode", decode_nodes)):
        instance = serving.spec.pool(role).instance
        group = groups[role]
        (container,) = group["template"]["spec"]["containers"]
        limits = container["resources"]["limits"]
        allocatable = sizing.estimated_allocatable(instance)
        assert limits["nvidia.com/gpu"] == instance.gpus
        assert limits["vpc.amazonaws.com/efa"] == 1
        assert int(limits["cpu"]) * 1000 <= allocatable.cpu_millis
        assert int(limits["memory"].removesuffix("Gi")) * 1024 <= allocatable.memory_mib
        assert group["rayStartParams"]["num-gpus"] == str(instance.gpus)
        assert group["replicas"] == nodes
        leg = serve[f"{role}_config"]
        assert leg["deployment_config"]["num_replicas"] == instance.gpus // tp * nodes
        assert leg["engine_kwargs"]["tensor_parallel_size"] == tp
        assert container["image"].startswith("763104351884.dkr.ecr.eu-central-1.amazonaws.com/ray")
    head = ray_service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"role": "system"}


def test_instance_type_may_be_an_ec2_instance_type():
    _, serving = consumer_stack("Typed", ec2.InstanceType("g6e.8xlarge"), "g6e.8xlarge", 1, 1, 1, LLAMA)
    assert serving.spec.pool("prefill").instance_type == "g6e.8xlarge"


def test_a_pool_without_gpu_for_its_tensor_parallel_size_is_refused_with_the_construct_path():
    with pytest.raises(ConstructValidationError) as caught:
        consumer_stack("TooWide", "g6.8xlarge", "g6.8xlarge", 4, 1, 1, LLAMA)
    assert str(caught.value).startswith("TooWide/Serving: model.tensor_parallel_size: ")


def test_device_plugins_that_miss_a_pool_are_refused():
    stack, network, cluster = cluster_stack("Mismatch")
    plugins = GpuDevicePlugins(stack, "Plugins", cluster=cluster, gpu_node_groups=[WorkerPool("prefill")], strict=False)
    with pytest.raises(ConstructValidationError, match="device_plugins: the EFA device plugin does not cover g6e.8xlarge"):
        RayLlmServing(stack, "Serving", strict=False, cluster=cluster, prefill=WorkerPool("prefill"),
                      decode=WorkerPool("decode", instance_type="g6e.8xlarge"), device_plugins=plugins)


def test_prefill_and_decode_on_two_efa_fabrics_are_refused():
    stack, network, cluster = cluster_stack("TwoFabrics")
    groups = {role: EfaGpuNodeGroup(stack, role.title(), cluster=cluster, subnet=network.data_plane_subnet, role=role,
                                    fabric=EfaFabric(stack, f"{role.title()}Fabric", vpc=network.vpc))
              for role in ("prefill", "decode")}
    with pytest.raises(ConstructValidationError) as caught:
        RayLlmServing(stack, "Serving", strict=False, cluster=cluster, prefill=groups["prefill"],
                      decode=groups["decode"])
    message = str(caught.value)
    assert message.startswith("TwoFabrics/Serving: decode: its node group is on the EFA fabric "
                              "TwoFabrics/DecodeFabric, prefill's on TwoFabrics/PrefillFabric"), message
    assert "accepted: both node groups built with the same EfaFabric" in message


@pytest.mark.parametrize("client", ["10.0.0.0/16", "10.0.96.0/20"])
def test_client_cidrs_over_the_clusters_own_vpc_are_refused(client):
    """The same check as serving.client_cidrs against network.vpc_cidr, on the VPC the app made."""
    from ray_llm_eks.base import ServiceSettings

    stack, network, cluster = cluster_stack(f"Overlap{client.split('.')[2]}")
    with pytest.raises(ConstructValidationError, match=r"service\.client_cidrs: .*overlaps the cluster's VPC 10\.0\.0\.0/16"):
        RayLlmServing(stack, "Serving", strict=False, cluster=cluster, prefill=WorkerPool("prefill"), decode=WorkerPool("decode"),
                      service=ServiceSettings(client_cidrs=(client,)))


def test_the_vpc_cidrs_known_at_synth_time():
    from aws_cdk import aws_eks_v2 as eks

    from ray_llm_eks.constructs.serving import known_vpc_cidrs

    stack, network, cluster = cluster_stack("Known")
    assert known_vpc_cidrs(cluster) == ["10.0.0.0/16"]
    imported = ec2.Vpc.from_vpc_attributes(stack, "Imported", vpc_id="vpc-1234", availability_zones=["us-west-2a"],
                                           vpc_cidr_block="10.9.0.0/16")
    assert known_vpc_cidrs(eks.Cluster.from_cluster_attributes(stack, "C1", cluster_name="c", vpc=imported)) == [
        "10.9.0.0/16"]
    unknown = ec2.Vpc.from_vpc_attributes(stack, "NoCidr", vpc_id="vpc-5678", availability_zones=["us-west-2a"])
    assert known_vpc_cidrs(eks.Cluster.from_cluster_attributes(stack, "C2", cluster_name="c", vpc=unknown)) == []
    assert known_vpc_cidrs(eks.Cluster.from_cluster_attributes(stack, "C3", cluster_name="c")) == []


def test_an_environment_agnostic_stack_needs_an_image_repository():
    stack, network, cluster = cluster_stack("Agnostic", agnostic=True)
    with pytest.raises(ConstructValidationError, match="image.repository: the region is not known at synth time"):
        RayLlmServing(stack, "Serving", strict=False, cluster=cluster, prefill=WorkerPool("prefill"), decode=WorkerPool("decode"))


def _config_sentence(overrides: dict, field: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(overrides)
    (line,) = [line.strip() for line in str(caught.value).splitlines() if line.strip().startswith(f"{field}: ")][:1]
    return line.removeprefix(f"{field}: ")


def _construct_sentence(build, field: str) -> str:
    # A part refuses its own fields when built (SpecErrors); a construct, the rules across parts.
    with pytest.raises((ConstructValidationError, SpecErrors)) as caught:
        build()
    if isinstance(caught.value, SpecErrors):
        (line,) = [str(e) for e in caught.value if e.field == field][:1]
        return line.removeprefix(f"{field}: ")
    lines = [line.split(": ", 1)[1] for line in str(caught.value).splitlines()]
    (line,) = [line for line in lines if line.startswith(f"{field}: ")][:1]
    return line.removeprefix(f"{field}: ")


@pytest.fixture(scope="module")
def scratch():
    stack, network, cluster = cluster_stack("Same")
    return stack, network, cluster


def test_a_construct_used_directly_says_what_the_configuration_says(scratch):
    stack, network, cluster = scratch
    counter = iter(range(100))

    def node_group(**props):
        return lambda: EfaGpuNodeGroup(stack, f"G{next(counter)}", cluster=cluster, subnet=network.data_plane_subnet,
                                       role="decode", **props)

    def serving(**props):
        return lambda: RayLlmServing(stack, f"S{next(counter)}", cluster=cluster, prefill=WorkerPool("prefill"),
                                     decode=WorkerPool("decode"), **{"strict": False, **props})

    pairs = [
        ({"decode": {"instance_type": "g6.4xlarge"}}, "decode.instance_type", node_group(instance_type="g6.4xlarge"),
         "instance_type"),
        ({"decode": {"desired_size": 3, "max_size": 2}}, "decode.desired_size", node_group(desired_size=3, max_size=2),
         "desired_size"),
        ({"model": {"max_model_len": 262144}}, "model.max_model_len", serving(model=ModelSpec(max_model_len=262144)),
         "model.max_model_len"),
        ({"versions": {"ray": "2.59.0"}}, "versions.ray", serving(ray_version="2.59.0"), "ray_version"),
        ({"serving": {"service_name": "r" * 48}}, "serving.service_name",
         lambda: ServiceSettings(service_name="r" * 48), "service_name"),
        ({"strict": True, "image": {"digest": "sha256:" + "e" * 64}}, "model.revision", serving(strict=True),
         "model.revision"),
        ({"versions": {"kuberay": "1.4.0"}}, "serving.ray_auth",
         lambda: RayLlmServing(stack, f"S{next(counter)}", strict=False, cluster=cluster, prefill=WorkerPool("prefill"),
                               decode=WorkerPool("decode"),
                               kuberay=KubeRayOperator(stack, f"K{next(counter)}", cluster=cluster, version="1.4.0")),
         "service.ray_auth"),
        ({"serving": {"client_cidrs": ["10.0.0.0/16"]}}, "serving.client_cidrs",
         serving(service=ServiceSettings(client_cidrs=("10.0.0.0/16",))), "service.client_cidrs"),
        ({"cluster": {"control_plane_log_retention_days": 42}}, "cluster.control_plane_log_retention_days",
         lambda: InferenceCluster(stack, f"C{next(counter)}", vpc=network.vpc, control_plane_log_retention_days=42),
         "control_plane_log_retention_days"),
        ({"cluster": {"name": "my cluster!"}}, "cluster.name",
         lambda: InferenceCluster(stack, f"C{next(counter)}", vpc=network.vpc, cluster_name="my cluster!"),
         "cluster_name"),
        ({"network": {"vpc_cidr": "10.0.0.0/24"}}, "network.vpc_cidr",
         lambda: InferenceVpc(stack, f"V{next(counter)}", data_plane_az="us-west-2a",
                              availability_zones=["us-west-2a", "us-west-2b"], cidr="10.0.0.0/24"), "cidr"),
    ]
    for overrides, config_field, build, prop in pairs:
        assert _construct_sentence(build, prop) == _config_sentence(overrides, config_field), config_field


PRINTED = re.compile(r"^\s*print\(.*\)\s*#\s*(?P<shown>.+?)\s*$", re.M)
"""A ``print(...)`` line with what it prints in its trailing comment (``print(a, b)  # 2 4``)."""


@pytest.mark.parametrize("document", ["README.md", "docs/constructs.md"])
def test_readme_python_snippets_run_as_written(document, tmp_path, monkeypatch, capsys):
    """The README's snippet (the whole stack) and docs/constructs.md's (the constructs composed one by
    one), each executed as written."""
    text = (ROOT / document).read_text()
    snippets = re.findall(r"```python\n(.*?)```", text, re.S)
    assert snippets, f"{document} shows how to use the constructs"
    assert any(PRINTED.search(snippet) for snippet in snippets), f"{document} shows what the snippet prints"
    monkeypatch.chdir(tmp_path)
    for snippet in snippets:
        namespace: dict = {"__name__": "readme_snippet"}
        capsys.readouterr()
        exec(compile(snippet, document, "exec"), namespace)  # noqa: S102 - the document's own code
        # What the README says each print shows is what it prints, line for line.
        shown = [match["shown"] for match in PRINTED.finditer(snippet)]
        assert capsys.readouterr().out.splitlines() == shown


def test_the_stack_hands_every_serving_setting_to_the_construct():
    """The stack's RayLlmServing gets the spec the configuration checked, field for field (it once
    dropped the client and egress settings, which left the NetworkPolicies at their defaults)."""
    from ray_llm_eks.stack import build_app

    config = unpinned_config({
        "serving": {"namespace": "llm", "service_name": "qwen", "client_namespaces": ["apps"],
                    "client_cidrs": ["10.50.0.0/16"], "egress_cidrs": ["10.0.0.0/8"], "endpoint": "internal-nlb",
                    "security_profile": "ipc-lock", "admission_exempt_agents": ["kube-system/aws-node", "agents/agent"],
                    "other_serving_namespaces": ["llm-2"]},
        "topology": "colocated",
        "nixl": {"kv_buffer_device": "cpu"},
    })
    _, stack = build_app(config, context=FAST_SYNTH_CONTEXT, nag=False)
    assert stack.serving.spec == config.specs().serving


def test_the_operator_settings_follow_the_operator_given(scratch):
    stack, _, cluster = scratch
    operator = KubeRayOperator(stack, "OperatorForSettings", cluster=cluster, version="1.5.1")
    serving = RayLlmServing(stack, "FollowsOperator", strict=False, cluster=cluster, prefill=WorkerPool("prefill"),
                            decode=WorkerPool("decode"), kuberay=operator,
                            service=ServiceSettings(ray_auth="token", namespace="follows"))
    assert (serving.spec.kuberay_version, serving.spec.operator_namespace) == ("1.5.1", "kuberay")
    for props, field in (({"kuberay_version": "1.4.0"}, "kuberay_version"),
                         ({"operator_namespace": "ray-system"}, "operator_namespace")):
        with pytest.raises(ConstructValidationError, match=rf"{field}: .*the operator given"):
            RayLlmServing(stack, f"Mismatch{field}", strict=False, cluster=cluster, prefill=WorkerPool("prefill"),
                          decode=WorkerPool("decode"), kuberay=operator, service=ServiceSettings(namespace="follows"),
                          **props)
