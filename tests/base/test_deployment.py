"""One declared model: the YAML loads into it, the constructs take its parts and agree on its
defaults, and a deployment composed from constructs gets the same rules and can be planned."""

from __future__ import annotations

import dataclasses
import inspect

import aws_cdk as cdk
import cdk8s
import pytest

from helpers.composition import cluster_stack, compose
from helpers.pins import unpinned, unpinned_config
from ray_llm_eks.config import ConfigError, parse_config
from ray_llm_eks.constructs import (
    GpuDevicePlugins,
    InferenceCluster,
    InferenceObservability,
    InferenceVpc,
    KubeRayOperator,
    RayLlmServing,
    SystemNodeGroup,
)
from ray_llm_eks.constructs.nodegroups import EfaGpuNodeGroup
from ray_llm_eks.constructs.validation import ConstructValidationError
from ray_llm_eks.planning import Footprint, PlanError, make_plan
from ray_llm_eks.base.deployment import ClusterSettings, Deployment, Network, Versions
from ray_llm_eks.base.specs import Specs
from ray_llm_eks.base.observability import AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT, ObservabilitySpec
from ray_llm_eks.base.pools import RootVolume, SystemPool, WorkerPool
from ray_llm_eks.base.serving import Leg, ServiceSettings, ServingSpec
from ray_llm_eks.stack import default_context
from ray_llm_eks.testing import FAST_SYNTH_CONTEXT


def _defaults(construct: type) -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(construct.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _field_default(cls: type, name: str) -> object:
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    return field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]


# (construct, prop) -> (model part, field): every construct prop that restates a field of the model.
PROPS_OF_THE_MODEL = {
    (InferenceCluster, "kubernetes_version"): (ClusterSettings, "kubernetes_version"),
    (InferenceCluster, "cluster_name"): (ClusterSettings, "name"),
    (InferenceCluster, "endpoint_access"): (ClusterSettings, "endpoint_access"),
    (InferenceCluster, "public_access_cidrs"): (ClusterSettings, "public_access_cidrs"),
    (InferenceCluster, "control_plane_logs"): (ClusterSettings, "control_plane_logs"),
    (InferenceCluster, "admin_role_arn"): (ClusterSettings, "admin_role_arn"),
    (InferenceCluster, "bootstrap_cluster_creator_admin_permissions"):
        (ClusterSettings, "bootstrap_cluster_creator_admin_permissions"),
    (InferenceCluster, "control_plane_log_retention_days"): (ClusterSettings, "control_plane_log_retention_days"),
    (GpuDevicePlugins, "nvidia_chart_version"): (Versions, "nvidia_device_plugin"),
    (GpuDevicePlugins, "efa_chart_version"): (Versions, "efa_device_plugin"),
    (GpuDevicePlugins, "nvidia_image_digest"): (Versions, "nvidia_device_plugin_image_digest"),
    (GpuDevicePlugins, "efa_image_digest"): (Versions, "efa_device_plugin_image_digest"),
    (GpuDevicePlugins, "strict"): (ServingSpec, "strict"),
    (KubeRayOperator, "version"): (Versions, "kuberay"),
}


@pytest.mark.parametrize(("construct", "prop"), list(PROPS_OF_THE_MODEL), ids=lambda v: getattr(v, "__name__", v))
def test_a_construct_prop_and_the_model_agree_on_the_default(construct, prop):
    part, name = PROPS_OF_THE_MODEL[(construct, prop)]
    assert _defaults(construct)[prop] == _field_default(part, name)


# Props of a part the construct also takes whole (``pool=``, ``specs=``): None, "the part's own
# default", so giving both can be told from giving one, and the default is stated once, in the part.
PROPS_LEFT_TO_THE_PART = {
    SystemNodeGroup: ("instance_type", "count", "root_volume_size_gib"),
    EfaGpuNodeGroup: ("role", "instance_type", "min_size", "desired_size", "max_size", "root_volume_size_gib",
                      "root_volume_throughput_mibps", "root_volume_iops", "placement_group", "capacity"),
    RayLlmServing: ("prefill", "decode", "system", "model", "image", "nixl", "topology", "service", "ray_version",
                    "strict", "kuberay_version", "operator_namespace", "verification", "observability"),
}


@pytest.mark.parametrize("construct", list(PROPS_LEFT_TO_THE_PART), ids=lambda c: c.__name__)
def test_a_flat_prop_of_a_part_given_whole_defaults_to_the_parts_own_default(construct, composed):
    assert {prop: _defaults(construct)[prop] for prop in PROPS_LEFT_TO_THE_PART[construct]} == dict.fromkeys(
        PROPS_LEFT_TO_THE_PART[construct])
    # Built with none of them (helpers/composition.py), the parts are the model's defaults.
    _, _, _, serving, _ = composed
    assert serving.spec.system == SystemPool()
    assert (serving.spec.pool("prefill"), serving.spec.pool("decode")) == (WorkerPool("prefill"), WorkerPool("decode"))
    assert serving.spec.pool("prefill").root_volume == RootVolume()
    assert (serving.spec.topology, serving.spec.ray_version) == (_field_default(ServingSpec, "topology"),
                                                                 _field_default(Versions, "ray"))


def test_a_serving_given_no_strict_is_strict():
    stack, _, cluster = cluster_stack("Strict")
    assert _field_default(ServingSpec, "strict") is True
    with pytest.raises(ConstructValidationError, match="Strict/Serving: image.digest: strict mode refuses it"):
        RayLlmServing(stack, "Serving", cluster=cluster, prefill=WorkerPool("prefill"), decode=WorkerPool("decode"))


def test_the_vpc_construct_takes_the_network_defaults_when_given_none():
    # InferenceVpc's props default to None ("the library's default"): the model states the values.
    app = cdk.App(context={**default_context(), **FAST_SYNTH_CONTEXT})
    stack = cdk.Stack(app, "Defaults", env=cdk.Environment(region="us-west-2"))
    network = InferenceVpc(stack, "Network", data_plane_az="us-west-2a", availability_zones=["us-west-2a", "us-west-2b"])
    assert network.vpc.node.default_child.cidr_block == Network().vpc_cidr
    assert len(network.vpc.public_subnets) == 2
    nat = [c for c in stack.node.find_all() if isinstance(c, cdk.aws_ec2.CfnNatGateway)]
    assert len(nat) == Network().nat_gateways


def test_the_yaml_loads_into_the_model_itself():
    deployment = unpinned_config({"prefill": {"desired_size": 2, "max_size": 2, "tensor_parallel_size": 1},
                               "serving": {"namespace": "llm"}})
    assert type(deployment) is Deployment
    assert deployment.prefill == Leg(WorkerPool("prefill", desired_size=2, max_size=2), tensor_parallel_size=1)
    assert deployment.serving == ServiceSettings(namespace="llm")
    assert parse_config({"strict": False}) == Deployment(strict=False)


@pytest.mark.parametrize(("data", "line"), [
    ({"prefill": {"role": "decode"}}, "prefill.role: unknown key"),
    ({"decode": {"pool": {}}}, "decode.pool: unknown key"),
    ({"prefill": {"tensor_parallel": 2}}, "prefill.tensor_parallel: unknown key"),
    ({"prefill": {"root_volume": {"size": 10}}}, "prefill.root_volume.size: unknown key"),
    ({"verification": {"every_minutes": 10}}, "verification.every_minutes: set by observability.verify_every_minutes"),
    ({"observability": {"verify_every_minutes": 7}},
     "observability.verify_every_minutes: not a period continuous verification can run at"),
    ({"prefill": {"target_ongoing_requests": 0}}, "prefill.target_ongoing_requests: not a request count per replica"),
    ({"model": {"architecture": {"parameter_count": 0, "num_hidden_layers": 2, "full_attention_layers": 2,
                                 "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 64}}},
     "model.architecture.parameter_count: not a positive count"),
])
def test_a_mistake_names_the_field_as_the_file_writes_it(data, line):
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "test.yaml")
    assert line in str(caught.value)


@pytest.fixture(scope="module")
def composed():
    """The reference deployment, composed from the constructs as a user's own app would."""
    built = compose()
    return built.stack, built.network, built.cluster, built.serving, built.observability


def test_a_composed_serving_gets_the_rules_the_configuration_gets(composed):
    _, _, _, serving, watched = composed
    assert serving.spec == unpinned().specs().serving  # the agent's namespace exempted by the construct itself
    assert f"{AGENT_NAMESPACE}/{AGENT_SERVICE_ACCOUNT}" in serving.spec.service.admission_exempt_agents
    policy = [o for chart in serving.charts for o in cdk8s.Testing.synth(chart)
              if o["kind"] == "ValidatingAdmissionPolicy"]
    assert policy and f"request.namespace == '{AGENT_NAMESPACE}' && variables.account == '{AGENT_SERVICE_ACCOUNT}'" \
        in str(policy)
    assert watched.settings == ObservabilitySpec()
    assert set(watched.alarms) == set(_stack_of_the_configuration().observability.alarms)


def _stack_of_the_configuration():
    from ray_llm_eks.stack import build_app

    _, stack = build_app(unpinned(), context=FAST_SYNTH_CONTEXT, nag=False)
    return stack


def test_observability_refuses_a_serving_built_without_it():
    stack, network, cluster = cluster_stack("Composed")
    bare = RayLlmServing(stack, "Bare", strict=False, cluster=cluster, prefill=WorkerPool("prefill"), decode=WorkerPool("decode"),
                         service=ServiceSettings(namespace="bare"))
    assert not [a for a in bare.spec.service.admission_exempt_agents if a.startswith(f"{AGENT_NAMESPACE}/")]
    with pytest.raises(ConstructValidationError, match="Composed/BareWatch: serving: built without observability"):
        InferenceObservability(stack, "BareWatch", serving=bare)


def test_a_composed_deployment_is_planned_like_its_configuration(composed):
    _, network, _, serving, _ = composed
    footprint = Footprint("us-west-2", network.data_plane_az, nat_gateways=1)
    assert isinstance(serving.specs, Specs)
    # But the pins: a composed serving's are its own (image, model); its device plugins' images are
    # GpuDevicePlugins' props, which that construct refuses or pins itself.
    configured = make_plan(unpinned())
    assert make_plan(serving.specs, footprint=footprint) == dataclasses.replace(
        configured, pin_commands={f: c for f, c in configured.pin_commands.items() if not f.startswith("versions.")})
    with pytest.raises(PlanError, match="footprint"):
        make_plan(serving.specs)


def test_the_dtypes_the_model_accepts_are_the_ones_the_planner_sizes():
    from typing import get_args

    from ray_llm_eks.base.memory import DTYPE_BYTES
    from ray_llm_eks.base.serving import Dtype

    assert set(get_args(Dtype)) == set(DTYPE_BYTES)
