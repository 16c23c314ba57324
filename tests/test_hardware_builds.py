"""The hardware variants beyond the reference (issues 26 and 37): 1P1D on the multi-card EFA types,
p5.48xlarge at TP 8 (32 network cards), p4d.24xlarge (4) and g6e.48xlarge (4); an L40S
g6e.12xlarge at TP 4 (one network card, four GPUs); and a dense 70B (Llama-3.3-70B-Instruct) at
TP 8 on p5.48xlarge. Each is synthesized once per session with cdk-nag and the project's own
rules, then linted by cfn-lint like the reference build (tests/test_upstream_checkers_aws.py)."""

from __future__ import annotations

import json

import cdk8s
import pytest

from helpers.synthesis import launch_template_of, nodegroups_by_role
from ray_llm_eks.base import sizing
from ray_llm_eks.base.instance_types import INSTANCE_TYPES
from ray_llm_eks.base.wire import EFA_RESOURCE, GPU_RESOURCE, WORKER_CONTAINER
from test_upstream_checkers_aws import ACCEPTED_CFN_LINT_WARNINGS, AWS_CDK_LIB_W3005, cfn_lint

LLAMA_70B = {"source": "meta-llama/Llama-3.3-70B-Instruct", "served_name": "llama"}

HARDWARE_BUILDS = {
    # name: (instance type, tensor_parallel_size, decode overrides, model overrides); us-west-2
    # offers all of them (moto's snapshot). The p4d build's decode group autoscales (1 to 2
    # nodes), so Cluster Autoscaler's scale-from-zero tags are checked on a multi-card type too.
    "p5-tp8": ("p5.48xlarge", 8, {}, {}),
    "p4d": ("p4d.24xlarge", 4, {"min_size": 1, "desired_size": 1, "max_size": 2}, {}),
    "g6e-48xlarge": ("g6e.48xlarge", 1, {}, {}),
    "g6e-12xlarge-tp4": ("g6e.12xlarge", 4, {}, {}),
    "p5-llama-70b-tp8": ("p5.48xlarge", 8, {}, LLAMA_70B),
}

# The EFA devices and network cards AWS documents for each type (EC2 DescribeInstanceTypes
# EfaInfo.MaximumEfaInterfaces and MaximumNetworkCards; p5: "32 network cards", EC2 User Guide
# efa-acc-inst-types.html; "G6e instances support up to four network cards"; g6e.12xlarge: one
# card), stated here independently of the instance table the code reads.
DOCUMENTED_EFA = {"p5.48xlarge": 32, "p4d.24xlarge": 4, "g6e.48xlarge": 4, "g6e.12xlarge": 1}
DOCUMENTED_GPUS = {"p5.48xlarge": 8, "p4d.24xlarge": 8, "g6e.48xlarge": 8, "g6e.12xlarge": 4}
EFA_HUGE_PAGES_MIB = 5128 * 2
"""EC2 instances "with the EFA driver installed pre-allocate 5128 2MiB Huge Pages" (EKS user guide,
awsdocs/amazon-eks-user-guide latest/ug/ml/node-efa.adoc:55@4d52b4d0)."""


@pytest.fixture(params=sorted(HARDWARE_BUILDS))
def build(request, synth):
    instance_type, tp, decode, model = HARDWARE_BUILDS[request.param]
    return instance_type, synth({"prefill": {"instance_type": instance_type},
                                 "decode": {"instance_type": instance_type, **decode},
                                 "model": {"tensor_parallel_size": tp, **model}}, nag=True)


def test_cfn_lint_finds_no_error_and_only_the_explained_warnings(build):
    _, built = build
    findings = cfn_lint(built.outdir / f"{built.stack.artifact_id}.template.json")
    assert [f for f in findings if f[0].startswith("E")] == []
    assert [f for f in findings if f[0] not in ACCEPTED_CFN_LINT_WARNINGS] == []
    assert [f for f in findings if f[0] == "W3005" and not AWS_CDK_LIB_W3005.match(f[1])] == []


def test_cdk_nag_and_the_project_rules_pass(build):
    _, built = build
    report = json.loads((built.outdir / "validation-report.json").read_text())
    (plugin,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert (plugin["conclusion"], plugin["violations"]) == ("success", [])
    assert all(p["conclusion"] == "success" for p in report["pluginReports"])
    (run,) = built.validation_runs  # the project's plugin ran, over this stack, and passed
    assert (run["success"], run["violations"]) == (True, [])
    assert run["templates"] and len(run["clusters"]) == 1


def test_every_pod_is_admitted_by_the_builds_own_admission_policy(build):
    from helpers.admission import created_pods, denials, policy_of

    _, built = build
    objects = [o for logical_id in built.resources("Custom::AWSCDK-EKS-KubernetesResource")
               for o in built.manifest_objects(logical_id)]
    policy = policy_of(objects)
    pods = created_pods(objects)
    assert any(what.endswith(" prefill") for what, *_ in pods) and any(what.endswith(" decode") for what, *_ in pods)
    for what, pod, namespace, user in pods:
        assert denials(policy, namespace, pod, user=user) == [], what


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_launch_template_puts_one_efa_device_on_every_network_card(build, role):
    instance_type, built = build
    efa = DOCUMENTED_EFA[instance_type]
    interfaces = launch_template_of(built, nodegroups_by_role(built)[role])["NetworkInterfaces"]
    layout = [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces]
    if efa == 1:
        # One network card: one EFA with ENA at card 0 device 0 (eksctl efaEnabled,
        # pkg/cfn/builder/network_interfaces.go@v0.230.0), no EFA-only interface.
        assert layout == [(0, 0, "efa")]
    else:
        # The EC2 guide's multi-card rules: the primary ENA at card 0 device 0; EFA-only at card 0
        # device 1; EFA-only at device 0 of every further card.
        assert layout[0] == (0, 0, "interface")
        assert layout[1] == (0, 1, "efa-only")
        assert layout[2:] == [(card, 0, "efa-only") for card in range(1, efa)]
    assert sum(kind in ("efa", "efa-only") for _, _, kind in layout) == efa
    assert sorted({card for card, _, _ in layout}) == list(range(INSTANCE_TYPES[instance_type].network_cards))
    # Every interface: both security groups, no subnet (EKS places the node), no IP on EFA-only ones.
    assert len({json.dumps(i["Groups"]) for i in interfaces}) == 1 and len(interfaces[0]["Groups"]) == 2
    assert not any("SubnetId" in i or "PrivateIpAddress" in i or "Ipv6AddressCount" in i for i in interfaces)


def test_an_autoscaled_group_tells_cluster_autoscaler_every_efa_device(build):
    instance_type, built = build
    decode = nodegroups_by_role(built)["decode"]
    tag = "k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa"
    if decode["ScalingConfig"]["MinSize"] == decode["ScalingConfig"]["MaxSize"]:
        assert tag not in (decode.get("Tags") or {})
    else:  # the p4d build: a node from zero offers what the pod requests, all 4 devices
        assert decode["Tags"][tag] == str(DOCUMENTED_EFA[instance_type]) == "4"


def test_each_worker_pod_requests_every_efa_device_of_its_node(build):
    instance_type, built = build
    objects = [o for chart in built.stack.serving.charts for o in cdk8s.Testing.synth(chart)]
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    groups = {g["groupName"]: g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    assert sorted(groups) == ["decode", "prefill"]
    for group in groups.values():
        (container,) = [c for c in group["template"]["spec"]["containers"] if c["name"] == WORKER_CONTAINER]
        resources = container["resources"]
        assert resources["limits"][EFA_RESOURCE] == resources["requests"][EFA_RESOURCE] == DOCUMENTED_EFA[instance_type]
        assert resources["limits"][GPU_RESOURCE] == DOCUMENTED_GPUS[instance_type]
    # Ray knows the GPU model, so each leg keeps its accelerator pinning (serve_config.RAY_ACCELERATOR_TYPES).
    gpu = INSTANCE_TYPES[instance_type].gpu_model
    assert service["spec"]["serveConfigV2"].count(f'"accelerator_type": "{gpu}"') == 2


@pytest.mark.parametrize("instance_type", sorted(t for t, efa in DOCUMENTED_EFA.items() if efa > 1))
def test_the_gate_expects_every_efa_device_on_each_node(instance_type):
    from helpers.gate import render_deployment
    from helpers.pins import unpinned_config

    deployed = render_deployment(unpinned_config({"prefill": {"instance_type": instance_type},
                                                  "decode": {"instance_type": instance_type}}))
    roles = deployed.settings["roles"]
    assert {role: spec["efa_per_node"] for role, spec in roles.items()} == {
        "prefill": DOCUMENTED_EFA[instance_type], "decode": DOCUMENTED_EFA[instance_type]}


def test_a_single_card_type_leaves_the_gate_settings_as_they_were():
    from helpers.gate import render_deployment
    from helpers.pins import unpinned_config

    assert all("efa_per_node" not in spec for spec in render_deployment(unpinned_config()).settings["roles"].values())


def _quantity_mib(quantity: str) -> int:
    units = {"Gi": 1024, "Mi": 1}
    return int(quantity[:-2]) * units[quantity[-2:]]


def test_each_worker_pod_fits_its_node_after_the_huge_page_pool(build):
    """The worker's requests against the node's allocatable: capacity less nodeadm's kube-reserved,
    the 100Mi eviction threshold and the EFA huge-page pool the kubelet removes from allocatable
    memory, then the DaemonSets, with sizing.WORKER_MARGIN to spare."""
    instance_type, built = build
    instance = INSTANCE_TYPES[instance_type]
    budget = sizing.node_budget(instance)
    assert budget.huge_pages.memory_mib == EFA_HUGE_PAGES_MIB
    objects = [o for chart in built.stack.serving.charts for o in cdk8s.Testing.synth(chart)]
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    for group in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        requests = {"cpu_millis": 0, "memory_mib": 0}
        for container in pod["containers"]:  # every container of the pod counts against the node
            wanted = container["resources"]["requests"]
            assert wanted == {k: v for k, v in container["resources"]["limits"].items() if k in wanted}
            requests["cpu_millis"] += int(wanted["cpu"]) * 1000 if wanted["cpu"].isdigit() else int(wanted["cpu"][:-1])
            requests["memory_mib"] += _quantity_mib(wanted["memory"])
            assert not any(key.startswith("hugepages-") for key in wanted)  # FI_EFA_USE_HUGE_PAGE=0
        room = budget.allocatable - budget.daemonsets
        assert requests["cpu_millis"] + sizing.WORKER_MARGIN.cpu_millis <= room.cpu_millis, group["groupName"]
        assert requests["memory_mib"] + sizing.WORKER_MARGIN.memory_mib <= room.memory_mib, group["groupName"]
        # ... and the allocatable it is held to is below the kernel's memory by the whole pool
        assert budget.allocatable.memory_mib <= budget.capacity.memory_mib - EFA_HUGE_PAGES_MIB - 100


@pytest.mark.parametrize("build", ["p5-llama-70b-tp8"], indirect=True)
def test_the_70b_variant_serves_llama_at_tp8_on_h100(build):
    instance_type, built = build
    objects = [o for chart in built.stack.serving.charts for o in cdk8s.Testing.synth(chart)]
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    serve = service["spec"]["serveConfigV2"]
    assert instance_type == "p5.48xlarge"
    assert "meta-llama/Llama-3.3-70B-Instruct" in serve
    assert serve.count('"tensor_parallel_size": 8') == 2
    assert serve.count('"accelerator_type": "H100"') == 2
