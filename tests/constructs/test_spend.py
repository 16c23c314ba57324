"""spend: the cost-allocation tag, the AWS Budgets budget on it wired to the observability topic, the
hourly cap refused alike by `make synth`, `plan` and the constructs, and plan's idle cost and
duplicate model memory (docs/configuration.md ``spend``, docs/plan.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from helpers.pins import UNPINNED, unpinned_config
from helpers.scanners import SPEND
from ray_llm_eks import app as synth_app
from ray_llm_eks import cli
from ray_llm_eks.base.cost import Footprint
from ray_llm_eks.base.pricing import load_price_table
from ray_llm_eks.base.spend import COST_ALLOCATION_TAG_KEY, SpendSpec
from ray_llm_eks.base.units import GIB
from ray_llm_eks.config import ConfigError
from ray_llm_eks.planning import PlanError, make_plan

runner = CliRunner()
AUTOSCALED = {"prefill": {"min_size": 1, "desired_size": 1, "max_size": 3},
              "decode": {"min_size": 1, "desired_size": 2, "max_size": 4}}
G6_8XL_US_WEST_2 = load_price_table().region("us-west-2").instance("g6.8xlarge").usd_per_hour


def _refusal(config: dict) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        unpinned_config(config)
    return caught.value


def _line(text: str, field: str) -> str:
    (line,) = [line.strip() for line in text.splitlines() if line.strip().startswith(f"{field}: ")]
    return line


# --- the declared model -------------------------------------------------------------------------

def test_no_spend_section_means_no_limits_and_defaults_are_stated_once():
    assert unpinned_config({}).spend is None
    spend = unpinned_config({"spend": {}}).spend
    assert spend == SpendSpec()
    assert spend.actual_alert_percent == (80.0, 100.0) and spend.forecasted_alert_percent == (100.0,)
    assert spend.cost_allocation_tag_key == COST_ALLOCATION_TAG_KEY == "ray-llm-eks/stack"
    assert spend.tag_filter("MyStack") == "user:ray-llm-eks/stack$MyStack"
    assert SpendSpec(cost_allocation_tag_value="team-a").tag_filter("MyStack") == "user:ray-llm-eks/stack$team-a"
    assert spend.alerts() == (("ACTUAL", 80.0), ("ACTUAL", 100.0), ("FORECASTED", 100.0))


@pytest.mark.parametrize("spend, field, fragment", [
    ({"monthly_budget": 10}, "spend.monthly_budget", "unknown key (got 10); accepted: the keys of this section: "
                                                     "monthly_budget_usd, actual_alert_percent"),
    ({"monthly_budget_usd": 0}, "spend.monthly_budget_usd", "not an amount in US dollars (got 0.0)"),
    ({"max_hourly_usd": -1}, "spend.max_hourly_usd", "not an amount in US dollars (got -1.0); accepted: a number above 0"),
    ({"actual_alert_percent": [80, 1500]}, "spend.actual_alert_percent",
     "not a percentage of the budget (got 1500.0); accepted: a number above 0 and at most 1000"),
    ({"actual_alert_percent": [80, 80]}, "spend.actual_alert_percent", "a threshold given twice"),
    ({"monthly_budget_usd": 10, "actual_alert_percent": [], "forecasted_alert_percent": []},
     "spend.actual_alert_percent", "a budget with no alert warns nobody (got [])"),
    ({"actual_alert_percent": list(range(10, 100, 10)), "forecasted_alert_percent": [100, 120]},
     "spend.forecasted_alert_percent", "11 alerts in all; AWS Budgets takes at most 10 per budget"),
    ({"cost_allocation_tag_key": "aws:cost"}, "spend.cost_allocation_tag_key", "not a tag key you may set (got 'aws:cost')"),
    ({"cost_allocation_tag_value": "a$b"}, "spend.cost_allocation_tag_value", "not a tag value (got 'a$b')"),
])
def test_a_bad_spend_field_is_named_with_its_value_and_what_is_accepted(spend, field, fragment):
    assert fragment in _line(str(_refusal({"spend": spend})), field)


def test_a_budget_without_the_observability_topic_is_refused():
    error = _refusal({"observability": {"enabled": False}, "spend": {"monthly_budget_usd": 100}})
    assert _line(str(error), "spend.monthly_budget_usd") == (
        "spend.monthly_budget_usd: the budget's alerts go to the observability SNS topic, and observability is "
        "disabled (got 100.0); accepted: observability.enabled true (its alarm_email subscribes to the topic), or no "
        "monthly_budget_usd")
    # The cap alone needs no topic.
    assert unpinned_config({"observability": {"enabled": False}, "spend": {"max_hourly_usd": 100}}).spend.max_hourly_usd == 100


# --- max_hourly_usd: one check, three entry points ---------------------------------------------

def _max_cost(config: dict) -> float:
    return make_plan(unpinned_config(config)).cost_range["max"]


def test_the_cap_is_the_cost_at_max_sizes_not_desired():
    plan = make_plan(unpinned_config(AUTOSCALED))
    desired, high = plan.cost.hourly_usd, plan.cost_range["max"]
    # Five more GPU nodes at max than at desired (prefill 3 vs 1, decode 4 vs 2), plus their volumes.
    assert high - desired > 4 * G6_8XL_US_WEST_2
    between = round((desired + high) / 2, 2)
    error = _refusal({**AUTOSCALED, "spend": {"max_hourly_usd": between}})
    line = _line(str(error), "spend.max_hourly_usd")
    assert f"the deployment costs ${high:.4f} per hour with every GPU node group at its max_size " \
           "(prefill 3 x g6.8xlarge, decode 4 x g6.8xlarge;" in line
    assert f"(got {between}); accepted: a cap of at least" in line
    # At the cost itself, and above it, the cap holds.
    assert unpinned_config({**AUTOSCALED, "spend": {"max_hourly_usd": high}}).spend.max_hourly_usd == high


def test_make_synth_plan_and_the_construct_refuse_the_same_cap_with_the_same_sentence(tmp_path):
    from helpers.composition import compose
    from ray_llm_eks.constructs import ConstructValidationError, InferenceSpend

    cap = 3.0
    config = {**UNPINNED, "spend": {"max_hourly_usd": cap}}
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump(config))
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        synth_exit = synth_app.main(str(path))
    plan = runner.invoke(cli.app, ["plan", "--config", str(path)])
    as_json = runner.invoke(cli.app, ["plan", "--config", str(path), "--json"])
    assert (synth_exit, plan.exit_code, as_json.exit_code) == (2, 2, 2)
    synth_line = _line(stderr.getvalue(), "spend.max_hourly_usd")
    high = _max_cost({})
    assert synth_line == (
        f"spend.max_hourly_usd: the deployment costs ${high:.4f} per hour with every GPU node group at its max_size "
        f"(prefill 1 x g6.8xlarge, decode 1 x g6.8xlarge; plan's hourly_cost_usd_max, prices as of "
        f"{load_price_table().as_of}), above the cap (got 3.0); accepted: a cap of at least {math.ceil(high * 100) / 100:.2f}, or lower "
        "prefill.max_size / decode.max_size, or cheaper instance types")
    assert _line(plan.output, "spend.max_hourly_usd") == synth_line
    # --json prints the error as JSON on stdout (the runner mixes in the stderr line after it).
    assert synth_line in json.JSONDecoder().raw_decode(as_json.output)[0]["error"]

    # The constructs, composed by hand: the same sentence after the construct path.
    composed = compose()
    with pytest.raises(ConstructValidationError) as caught:
        InferenceSpend(composed.stack, "Spend", spend=SpendSpec(max_hourly_usd=cap), serving=composed.serving,
                       observability=composed.observability)
    assert str(caught.value) == f"Composed/Spend: {synth_line}"
    # The dict form of the prop, likewise.
    with pytest.raises(ConstructValidationError) as caught:
        InferenceSpend(composed.stack, "SpendDict", spend={"max_hourly_usd": cap}, serving=composed.serving)
    assert str(caught.value) == f"Composed/SpendDict: {synth_line}"
    # And plan of those constructs (their specs with the network's footprint).
    specs = dataclasses.replace(composed.serving.specs, spend=SpendSpec(max_hourly_usd=cap))
    with pytest.raises(PlanError) as planned:
        make_plan(specs, footprint=Footprint("us-west-2", "us-west-2a", 1))
    assert str(planned.value) == synth_line
    # A cap the composition fits under is accepted by the construct, which reports what it checked.
    spend = InferenceSpend(composed.stack, "Fits", spend=SpendSpec(max_hourly_usd=10), serving=composed.serving)
    assert spend.max_hourly_usd_at_max == pytest.approx(high) and spend.budget is None


def test_without_prices_the_cap_cannot_be_checked_and_is_refused():
    # ap-east-2: zones in ec2_offerings.json and no offerings record, so no prices, not even estimates.
    region = {"region": "ap-east-2", "control_plane_azs": ["ap-east-2a", "ap-east-2b"], "data_plane_az": "ap-east-2a"}
    assert make_plan(unpinned_config(region)).cost.unknown_reason  # plan alone prints an unknown price
    line = _line(str(_refusal({**region, "spend": {"max_hourly_usd": 1000}})), "spend.max_hourly_usd")
    assert line.startswith("spend.max_hourly_usd: cannot be checked: the price table (as of ")
    assert "has no prices for region 'ap-east-2'" in line
    assert line.endswith("(got 1000.0); accepted: a region and instance types the price table prices "
                         "(ray_llm_eks/data/prices.yaml), or no max_hourly_usd")
    # The budget needs no price: the same region takes it.
    assert unpinned_config({**region, "spend": {"monthly_budget_usd": 1000}}).spend.monthly_budget_usd == 1000


# --- plan: idle cost, duplicate model memory, the spend section --------------------------------

def test_plan_json_idle_cost_is_the_gpu_node_lines_at_min_and_desired_sizes():
    summary = make_plan(unpinned_config(AUTOSCALED)).summary()
    idle = summary["idle"]
    assert idle["gpus_min"] == 2 and idle["gpus_desired"] == 3  # one GPU per g6.8xlarge
    assert idle["by_role"]["prefill"] == {
        "instance_type": "g6.8xlarge", "nodes_min": 1, "nodes_desired": 1,
        "usd_per_hour_min": pytest.approx(G6_8XL_US_WEST_2), "usd_per_hour_desired": pytest.approx(G6_8XL_US_WEST_2)}
    assert idle["by_role"]["decode"]["usd_per_hour_desired"] == pytest.approx(2 * G6_8XL_US_WEST_2)
    assert idle["usd_per_hour_min"] == pytest.approx(2 * G6_8XL_US_WEST_2)
    assert idle["usd_per_hour_desired"] == pytest.approx(3 * G6_8XL_US_WEST_2)
    # Idle GPUs are part of the whole: the rest (control plane, system node, NAT, volumes) is in the totals.
    assert idle["usd_per_hour_min"] < summary["hourly_cost_usd_min"]
    assert idle["usd_per_hour_desired"] < summary["hourly_cost_usd"]


def test_plan_json_duplicate_model_memory_disaggregated_against_colocated():
    plan = make_plan(unpinned_config(AUTOSCALED))
    # What vLLM loads: no MTP head, and no vision tower (the reference serves text, language_model_only).
    weights = plan.model.weight_bytes(plan.dtype_bytes, vision=False) / GIB
    assert weights == pytest.approx(16.6778, abs=1e-4)
    memory = plan.summary()["duplicate_model_memory"]
    assert memory["weights_gib_per_replica"] == pytest.approx(weights, abs=1e-4)
    assert memory["replicas"] == {"prefill": 1, "decode": 2} and memory["copies"] == 3
    assert memory["total_gib"] == pytest.approx(3 * weights, abs=1e-3)
    assert memory["per_request_path_gib"] == pytest.approx(2 * weights, abs=1e-3)
    assert memory["colocated_per_request_path_gib"] == pytest.approx(weights, abs=1e-4)
    assert memory["duplicate_gib"] == pytest.approx(weights, abs=1e-4)
    gpu_gib = 3 * plan.budgets[0].gpu_memory_gib  # three L4s at desired sizes
    assert memory["share_of_worker_gpu_memory"] == pytest.approx(3 * weights / gpu_gib, abs=1e-4)

    colocated = make_plan(unpinned_config({**AUTOSCALED, "topology": "colocated"})).summary()["duplicate_model_memory"]
    assert colocated["topology"] == "colocated" and colocated["duplicate_gib"] == 0
    assert colocated["per_request_path_gib"] == colocated["colocated_per_request_path_gib"]
    assert colocated["total_gib"] == memory["total_gib"]  # the same nodes hold the same copies


def test_plan_json_spend_section(tmp_path):
    path = tmp_path / "spend.yaml"
    path.write_text(yaml.safe_dump({**UNPINNED, **AUTOSCALED, "stack_name": "Team-A",
                                    "spend": {"monthly_budget_usd": 3000, "max_hourly_usd": 20}}))
    result = runner.invoke(cli.app, ["plan", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    spend = summary["spend"]
    assert spend["max_hourly_usd"] == 20 and spend["hourly_cost_usd_max"] == summary["hourly_cost_usd_max"]
    assert spend["max_hourly_headroom_usd"] == pytest.approx(20 - summary["hourly_cost_usd_max"], abs=1e-6)
    assert spend["monthly_budget_usd"] == 3000 and spend["monthly_cost_usd"] == summary["monthly_cost_usd"]
    assert spend["monthly_cost_usd_max"] == summary["monthly_cost_usd_max"]
    assert spend["alerts"] == [{"type": "ACTUAL", "percent": 80.0}, {"type": "ACTUAL", "percent": 100.0},
                               {"type": "FORECASTED", "percent": 100.0}]
    assert spend["cost_allocation_tag"] == {"key": "ray-llm-eks/stack", "value": "Team-A"}
    assert spend["budget_filter"] == "user:ray-llm-eks/stack$Team-A"
    assert {"idle", "duplicate_model_memory"} <= set(summary)

    text = runner.invoke(cli.app, ["plan", "--config", str(path)], env={"COLUMNS": "200"})
    assert text.exit_code == 0
    flat = " ".join(text.output.split())
    assert (f"Idle cost (GPU nodes paid while serving nothing): ${2 * G6_8XL_US_WEST_2:.2f} per hour at min sizes "
            f"(2 GPUs), ${3 * G6_8XL_US_WEST_2:.2f} per hour at desired sizes (3 GPUs) with zero traffic") in flat
    assert "3 copies (prefill 1, decode 2)" in flat and "GiB duplicated" in flat
    assert f"Spend cap: max_hourly_usd $20.00, ${summary['hourly_cost_usd_max']:.2f} per hour at max sizes" in flat
    assert "Budget: $3,000.00 per month on user:ray-llm-eks/stack$Team-A (alerts: actual 80%, actual 100%, " \
           "forecasted 100%)" in flat
    # The month at desired sizes costs more than the budget: said.
    assert summary["monthly_cost_usd"] > 3000 and "its 100% alert will fire every month" in flat


def test_no_spend_section_in_plan_is_null():
    summary = make_plan(unpinned_config({})).summary()
    assert summary["spend"] is None and summary["idle"]["gpus_desired"] == 2


# --- the synthesized budget -------------------------------------------------------------------

@pytest.fixture(scope="module")
def spent(synth):
    return synth(SPEND, nag=True)  # cdk-nag AwsSolutions and the project's rules pass (findings fail synthesis)


def test_the_budget_filters_on_the_tag_and_alerts_the_observability_topic(spent):
    (budget,) = spent.resources("AWS::Budgets::Budget").values()
    topic = {"Ref": spent.logical_id(spent.stack.observability.topic)}
    props = budget["Properties"]
    assert props["Budget"] == {"BudgetType": "COST", "TimeUnit": "MONTHLY",
                               "BudgetLimit": {"Amount": 3000, "Unit": "USD"},
                               "CostFilters": {"TagKeyValue": ["user:ray-llm-eks/stack$RayLlmEks"]}}
    notifications = props["NotificationsWithSubscribers"]
    assert [(n["Notification"]["NotificationType"], n["Notification"]["Threshold"]) for n in notifications] == [
        ("ACTUAL", 80), ("ACTUAL", 100), ("FORECASTED", 100)]
    for entry in notifications:
        assert entry["Notification"]["ComparisonOperator"] == "GREATER_THAN"
        assert entry["Notification"]["ThresholdType"] == "PERCENTAGE"
        assert entry["Subscribers"] == [{"SubscriptionType": "SNS", "Address": topic}]
    # Created after the topic policy that lets it publish.
    (policy_id,) = spent.resources("AWS::SNS::TopicPolicy")
    assert policy_id in budget["DependsOn"]


def test_the_topic_policy_lets_this_account_s_budgets_publish(spent):
    (policy,) = spent.resources("AWS::SNS::TopicPolicy").values()
    topic = {"Ref": spent.logical_id(spent.stack.observability.topic)}
    assert policy["Properties"]["Topics"] == [topic]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["AWSBudgetsSNSPublishingPermissions"] == {
        "Sid": "AWSBudgetsSNSPublishingPermissions", "Effect": "Allow",
        "Principal": {"Service": "budgets.amazonaws.com"}, "Action": "SNS:Publish", "Resource": topic,
        "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                      # The stack's region is known, so CDK writes its partition (aws) literally.
                      "ArnLike": {"aws:SourceArn": {"Fn::Join": ["", [
                          "arn:aws:budgets::", {"Ref": "AWS::AccountId"}, ":*"]]}}}}
    # The topic's own TLS-only statement stays.
    assert statements["AllowPublishThroughSSLOnly"]["Effect"] == "Deny"
    # Not KMS-encrypted: no key to open to the service.
    (topic_resource,) = spent.resources("AWS::SNS::Topic").values()
    assert "KmsMasterKeyId" not in topic_resource["Properties"]


def _tags(resource: dict) -> dict:
    tags = resource["Properties"].get("Tags") or resource["Properties"].get("ResourceTags") or []
    return tags if isinstance(tags, dict) else {t["Key"]: t["Value"] for t in tags}


def test_the_tag_is_on_every_tagged_resource_and_reaches_the_nodes_through_their_launch_templates(spent):
    resources = spent.template_json["Resources"]
    for logical_id in ("AWS::EC2::VPC", "AWS::EKS::Cluster", "AWS::EC2::NatGateway", "AWS::EKS::Nodegroup",
                       "AWS::SNS::Topic", "AWS::Budgets::Budget"):
        for name, resource in spent.resources(logical_id).items():
            assert _tags(resource).get("ray-llm-eks/stack") == "RayLlmEks", name
    # The placement group's Tags are create-only: adding the tag later would replace it.
    (group,) = spent.resources("AWS::EC2::PlacementGroup").values()
    assert "ray-llm-eks/stack" not in _tags(group)
    templates = spent.resources("AWS::EC2::LaunchTemplate")
    assert len(templates) == 3  # system, prefill, decode
    for name, template in templates.items():
        specs = template["Properties"]["LaunchTemplateData"]["TagSpecifications"]
        assert {s["ResourceType"] for s in specs} == {"instance", "volume", "network-interface"}, name
        assert all(s["Tags"] == [{"Key": "ray-llm-eks/stack", "Value": "RayLlmEks"}] for s in specs), name
    assert len(resources) > 50


def test_without_spend_nothing_is_tagged_and_no_budget(default):
    assert default.resources("AWS::Budgets::Budget") == {}
    assert "ray-llm-eks/stack" not in json.dumps(default.template_json)


def test_the_spend_template_passes_cfn_lint_and_cdk_nag(spent):
    from test_upstream_checkers_aws import ACCEPTED_CFN_LINT_WARNINGS, AWS_CDK_LIB_W3005, cfn_lint

    findings = cfn_lint(spent.outdir / f"{spent.stack.artifact_id}.template.json")
    assert [f for f in findings if f[0].startswith("E")] == []
    assert [f for f in findings if f[0] not in ACCEPTED_CFN_LINT_WARNINGS] == []
    assert [f for f in findings if f[0] == "W3005" and not AWS_CDK_LIB_W3005.match(f[1])] == []
    report = json.loads((spent.outdir / "validation-report.json").read_text())
    assert all(p["conclusion"] == "success" for p in report["pluginReports"])
    assert spent.validation_runs and all(run["success"] for run in spent.validation_runs)


def test_the_construct_used_directly_wires_the_budget_to_the_topic_it_is_given_and_refuses_none():
    from aws_cdk.assertions import Match, Template

    from helpers.composition import compose
    from ray_llm_eks.constructs import ConstructValidationError, InferenceSpend

    composed = compose()
    with pytest.raises(ConstructValidationError) as caught:
        InferenceSpend(composed.stack, "NoTopic", spend={"monthly_budget_usd": 500}, serving=composed.serving)
    assert str(caught.value) == (
        "Composed/NoTopic: observability: the budget's alerts (spend.monthly_budget_usd) go to the observability SNS "
        "topic, and none was given (got None); accepted: observability=InferenceObservability(...), or no "
        "monthly_budget_usd")
    spend = InferenceSpend(composed.stack, "Spend", spend=SpendSpec(monthly_budget_usd=500, forecasted_alert_percent=(),
                                                                    cost_allocation_tag_value="team-a"),
                           serving=composed.serving, observability=composed.observability)
    assert spend.tag == ("ray-llm-eks/stack", "team-a") and spend.max_hourly_usd_at_max is None
    template = Template.from_stack(composed.stack)
    topic = {"Ref": composed.stack.get_logical_id(composed.observability.topic.node.default_child)}
    template.has_resource_properties("AWS::Budgets::Budget", {
        "Budget": Match.object_like({"BudgetLimit": {"Amount": 500, "Unit": "USD"},
                                     "CostFilters": {"TagKeyValue": ["user:ray-llm-eks/stack$team-a"]}}),
        "NotificationsWithSubscribers": [
            {"Notification": Match.object_like({"NotificationType": "ACTUAL", "Threshold": 80}),
             "Subscribers": [{"SubscriptionType": "SNS", "Address": topic}]},
            {"Notification": Match.object_like({"NotificationType": "ACTUAL", "Threshold": 100}),
             "Subscribers": [{"SubscriptionType": "SNS", "Address": topic}]}],
    })
    template.has_resource_properties("AWS::SNS::TopicPolicy", {"PolicyDocument": {"Statement": Match.array_with([
        Match.object_like({"Sid": "AWSBudgetsSNSPublishingPermissions", "Principal": {"Service": "budgets.amazonaws.com"},
                           "Action": "SNS:Publish"})])}})


def test_a_users_own_launch_template_keeps_its_tags_beside_the_cost_allocation_tag():
    """The tag aspect covers the whole stack: a launch template of the user's own keeps its
    TagSpecifications, with the tag added to each launched resource type."""
    from aws_cdk import App, Aspects, CfnTag, Stack, aws_ec2 as ec2
    from aws_cdk.assertions import Template
    from ray_llm_eks.constructs.spend import TAGGED_LAUNCHED_RESOURCES, _LaunchTemplateTags

    stack = Stack(App(), "Own")
    ec2.CfnLaunchTemplate(stack, "Mine", launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
        tag_specifications=[ec2.CfnLaunchTemplate.TagSpecificationProperty(
            resource_type="instance", tags=[CfnTag(key="team", value="ml")])]))
    Aspects.of(stack).add(_LaunchTemplateTags(COST_ALLOCATION_TAG_KEY, "Own"))
    [template] = Template.from_stack(stack).find_resources("AWS::EC2::LaunchTemplate").values()
    specs = {s["ResourceType"]: s["Tags"] for s in template["Properties"]["LaunchTemplateData"]["TagSpecifications"]}
    ours = {"Key": COST_ALLOCATION_TAG_KEY, "Value": "Own"}
    assert specs["instance"] == [{"Key": "team", "Value": "ml"}, ours]
    assert all(specs[kind] == [ours] for kind in TAGGED_LAUNCHED_RESOURCES if kind != "instance")
