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

ROOT = Path(__file__).resolve().parents[2]
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


def _counting(monkeypatch, *classes):
    """How many of each class are built from now on (each build runs its ``__post_init__``, its checks)."""
    import collections

    counts: collections.Counter = collections.Counter()
    for cls in classes:
        def counted(self, _original=cls.__post_init__, _name=cls.__name__):
            counts[_name] += 1
            return _original(self)
        monkeypatch.setattr(cls, "__post_init__", counted)
    return counts


def test_each_part_is_built_once_per_synth_on_the_yaml_path(monkeypatch, tmp_path):
    """The configuration composes the deployment once (``base.composition.compose``); the stack hands
    the parts on as they are. Before issue 39 each was built twice: the stack unpacked each pool into
    flat props that the node group rebuilt, and RayLlmServing rebuilt the legs and the ServingSpec."""
    from ray_llm_eks.base import Leg, ServingSpec, SystemPool
    from ray_llm_eks.config import load_config
    from ray_llm_eks.stack import build_app

    path = tmp_path / "deployment.yaml"
    path.write_text("strict: false\nprefill: {tensor_parallel_size: 1}\n")
    counts = _counting(monkeypatch, WorkerPool, Leg, SystemPool, ServingSpec)
    config = load_config(path)
    app, stack = build_app(config, context=FAST_SYNTH_CONTEXT, nag=False)
    app.synth()
    assert dict(counts) == {"WorkerPool": 2, "Leg": 2, "SystemPool": 1, "ServingSpec": 1}  # a pool and leg per role


def test_the_stack_hands_the_composed_parts_on_as_they_are():
    """What the configuration composed is what the constructs build from, object for object (the stack
    once dropped the client and egress settings, which left the NetworkPolicies at their defaults)."""
    from ray_llm_eks.stack import build_app

    config = unpinned_config({
        "serving": {"namespace": "llm", "service_name": "qwen", "client_namespaces": ["apps"],
                    "client_cidrs": ["10.50.0.0/16"], "egress_cidrs": ["10.0.0.0/8"], "endpoint": "internal-nlb",
                    "security_profile": "ipc-lock", "admission_exempt_agents": ["kube-system/aws-node", "agents/agent"],
                    "other_serving_namespaces": ["llm-2"]},
        "topology": "colocated",
        "nixl": {"kv_buffer_device": "cpu"},
        "prefill": {"tensor_parallel_size": 1},
    })
    _, stack = build_app(config, context=FAST_SYNTH_CONTEXT, nag=False)
    specs = config.specs()
    assert stack.serving.specs is specs and stack.serving.spec is specs.serving
    assert stack.system_nodes.pool is specs.system
    assert stack.prefill_nodes.pool is specs.prefill and stack.decode_nodes.pool is specs.decode
    assert stack.serving.spec.leg("prefill") is config.prefill


def test_a_part_given_whole_and_as_flat_props_is_refused_naming_the_props(scratch):
    from ray_llm_eks.base import SystemPool

    stack, network, cluster = scratch
    with pytest.raises(ConstructValidationError) as caught:
        EfaGpuNodeGroup(stack, "BothGpu", cluster=cluster, subnet=network.data_plane_subnet,
                        pool=WorkerPool("decode"), role="decode", max_size=2)
    assert str(caught.value) == (
        "Same/BothGpu: pool: given with flat props the WorkerPool already holds (got ['max_size', 'role']); "
        "accepted: pool=WorkerPool(...) alone, or the flat props (role, instance_type, min_size, desired_size, "
        "max_size, root_volume_size_gib, root_volume_throughput_mibps, root_volume_iops, placement_group, capacity) "
        "without it")
    with pytest.raises(ConstructValidationError, match=r"Same/BothSystem: pool: given with flat props the SystemPool "
                                                       r"already holds \(got \['count'\]\)"):
        SystemNodeGroup(stack, "BothSystem", cluster=cluster, subnet=network.data_plane_subnet, pool=SystemPool(),
                        count=2)
    with pytest.raises(ConstructValidationError, match=r"Same/NotAPool: pool: not a WorkerPool"):
        EfaGpuNodeGroup(stack, "NotAPool", cluster=cluster, subnet=network.data_plane_subnet, pool=SystemPool())
    specs = unpinned_config({}).specs()
    with pytest.raises(ConstructValidationError, match=r"Same/BothServing: specs: given with flat props the Specs "
                                                       r"already holds \(got \['model', 'strict'\]\)"):
        RayLlmServing(stack, "BothServing", cluster=cluster, specs=specs, model=ModelSpec(), strict=False)
    with pytest.raises(ConstructValidationError, match=r"Same/NoLegs: prefill: no prefill leg given .*\n"
                                                       r"Same/NoLegs: decode: no decode leg given"):
        RayLlmServing(stack, "NoLegs", cluster=cluster, strict=False)


def test_a_serving_given_specs_refuses_node_groups_and_an_operator_they_were_not_composed_for(scratch):
    stack, network, cluster = scratch
    specs = unpinned_config({}).specs()
    wider = EfaGpuNodeGroup(stack, "Wider", cluster=cluster, subnet=network.data_plane_subnet, role="decode", max_size=2)
    with pytest.raises(ConstructValidationError) as caught:
        RayLlmServing(stack, "OtherPool", cluster=cluster, specs=specs, decode=wider, prefill=WorkerPool("prefill"),
                      kuberay=KubeRayOperator(stack, "OldOperator", cluster=cluster, version="1.4.0"))
    lines = str(caught.value).splitlines()
    assert lines[0] == ("Same/OtherPool: prefill: with specs=, the EfaGpuNodeGroup the specs' prefill pool runs on, "
                        "built from it (got None); accepted: EfaGpuNodeGroup(..., pool=specs.prefill), or leave it out")
    assert lines[1].startswith("Same/OtherPool: decode: with specs=, the EfaGpuNodeGroup the specs' decode pool runs on")
    assert lines[2].startswith("Same/OtherPool: kuberay: the operator given is KubeRay 1.4.0 in kuberay, the specs' "
                               "KubeRay 1.5.1 in kuberay (got 'Same/OldOperator')")
    # The specs' node groups, built from the specs' pools, are taken.
    groups = {role: EfaGpuNodeGroup(stack, f"Given{role}", cluster=cluster, subnet=network.data_plane_subnet,
                                    pool=specs.pool(role), fabric=EfaFabric(stack, f"GivenFabric{role}", vpc=network.vpc)
                                    if role == "prefill" else None)
              for role in ("prefill", "decode")}
    with pytest.raises(ConstructValidationError, match="Same/TwoFabricsGiven: decode: its node group is on the EFA "
                                                       "fabric Same/Givendecode/Fabric"):
        RayLlmServing(stack, "TwoFabricsGiven", cluster=cluster, specs=specs, **groups)
    # And the cluster's own VPC is checked against the client CIDRs, which the composition may not have known.
    overlapping = unpinned_config({"network": {"vpc_cidr": "10.9.0.0/16"}, "serving": {"client_cidrs": ["10.0.0.0/20"]}})
    with pytest.raises(ConstructValidationError, match=r"Same/OtherVpc: service\.client_cidrs: .*overlaps the "
                                                       r"cluster's VPC 10\.0\.0\.0/16"):
        RayLlmServing(stack, "OtherVpc", cluster=cluster, specs=overlapping.specs())


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


# --- the composition itself (base layer, no CDK): each cross-part rule, held in compose() alone ---

def _compose(**props):
    from ray_llm_eks.base.composition import compose

    return compose(region="us-west-2", prefill=WorkerPool("prefill"), decode=WorkerPool("decode"), strict=False,
                   **props)


def test_compose_exempts_the_cloudwatch_agent_only_with_observability_on():
    from ray_llm_eks.base.observability import AGENT_EXEMPTIONS, ObservabilitySpec

    watched = _compose(observability=ObservabilitySpec())
    assert set(AGENT_EXEMPTIONS) <= set(watched.serving.service.admission_exempt_agents)
    assert watched.observability == ObservabilitySpec()
    bare = _compose()
    assert not set(AGENT_EXEMPTIONS) & set(bare.serving.service.admission_exempt_agents)
    assert bare.observability.enabled is False and bare.spend is None


def test_compose_refuses_client_cidrs_over_the_vpc_it_is_given():
    service = ServiceSettings(client_cidrs=("10.0.16.0/20",))
    assert _compose(service=service).serving.service.client_cidrs == ("10.0.16.0/20",)  # no VPC known
    with pytest.raises(SpecErrors) as caught:
        _compose(service=service, vpc_cidrs=["10.0.0.0/16"])
    assert [e.field for e in caught.value] == ["service.client_cidrs"]
    assert "overlaps the cluster's VPC 10.0.0.0/16" in str(caught.value)


def test_compose_refuses_a_leg_at_zero_under_continuous_verification_and_a_budget_without_a_topic():
    from ray_llm_eks.base import Leg
    from ray_llm_eks.base.cost import Footprint
    from ray_llm_eks.base.spend import SpendSpec
    from ray_llm_eks.base.verification import VerificationSpec

    from ray_llm_eks.base.composition import compose

    # Colocated: the other group keeps serving while one is empty (tests/cdk8s_charts/test_rayservice_scaling.py).
    legs = {"prefill": Leg(WorkerPool("prefill", min_size=0, max_size=2)), "decode": WorkerPool("decode"),
            "topology": "colocated"}

    with pytest.raises(SpecErrors) as caught:
        compose(region="us-west-2", strict=False, **legs, verification=VerificationSpec(every_minutes=15))
    assert [e.field for e in caught.value] == ["prefill.min_size"]
    assert "continuous verification probes the endpoint every 15 minutes" in str(caught.value)
    assert compose(region="us-west-2", strict=False, **legs).prefill.min_size == 0  # without it, accepted
    footprint = Footprint("us-west-2", "us-west-2a", 1)
    with pytest.raises(SpecErrors) as caught:
        _compose(spend=SpendSpec(monthly_budget_usd=100), footprint=footprint)
    assert [e.field for e in caught.value] == ["spend.monthly_budget_usd"]
    with pytest.raises(TypeError, match="footprint"):
        _compose(spend=SpendSpec(max_hourly_usd=100))
