"""observability (on by default): the add-on and its role, the log metrics, every alarm, the dashboard."""

from __future__ import annotations

import json

import pytest

from ray_llm_eks.base.observability import (
    LOG_METRICS,
    alarm_names,
    TRANSFER_FAILURE_LINES,
    TRANSPORT_FALLBACK_LINES,
    log_filter_pattern,
)


OWN = "RayLlmEks/RayLlmEks/inference/ray-llm"
"""The default deployment's own metric namespace (stack RayLlmEks, serving inference/ray-llm)."""


def props(resource: dict) -> dict:
    return resource["Properties"]


ANOTHER_STACK = {"stack_name": "RayLlmEksStaging",
                 "prefill": {"min_size": 2, "desired_size": 2, "max_size": 2}, "system": {"count": 2}}
"""Another stack with more nodes: one build for the namespace test and the node-count test (the
stack's name reaches no node count, and the node counts reach no namespace)."""


def joined(value) -> str:
    """A CloudFormation string as text, references shown as ${Ref}/${GetAtt}."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        return "".join(joined(part) for part in value["Fn::Join"][1])
    if "Ref" in value:
        return "${" + value["Ref"] + "}"
    if "Fn::GetAtt" in value:
        return "${" + ".".join(value["Fn::GetAtt"]) + "}"
    raise AssertionError(value)


@pytest.fixture(scope="module")
def emailed(synth):
    return synth({"observability": {"alarm_email": "oncall@example.com"}}, nag=True)


def test_the_addon_runs_on_its_own_pod_identity_role(default):
    (addon,) = [a for a in default.resources("AWS::EKS::Addon").values()
                if props(a)["AddonName"] == "amazon-cloudwatch-observability"]
    (association,) = props(addon)["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "cloudwatch-agent"
    role = default.template_json["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]
    conditions = props(role)["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert conditions["aws:RequestTag/kubernetes-namespace"] == "amazon-cloudwatch"
    assert conditions["aws:RequestTag/kubernetes-service-account"] == "cloudwatch-agent"
    policies = sorted(joined(p).rsplit("/", 1)[1] for p in props(role)["ManagedPolicyArns"])
    assert policies == ["CloudWatchAgentServerPolicy"]
    # Application Signals off: no auto-instrumentation of the KubeRay operator, no traces; a build
    # that takes that setting (chart 6.2.0 and later).
    assert json.loads(props(addon)["ConfigurationValues"]) == {"applicationSignals": {"enabled": False}}
    assert props(addon)["AddonVersion"] == "v6.2.0-eksbuild.1"
    # Its pods need a node, and its log groups (retention set first) must exist before Fluent Bit.
    system = default.logical_id(default.stack.system_nodes.nodegroup)
    assert system in addon["DependsOn"]
    retentions = [k for k in default.resources("Custom::LogRetention") if k.startswith("Observability")]
    assert len(retentions) == 4 and set(retentions) <= set(addon["DependsOn"])


def test_the_addons_log_groups_have_a_retention_and_survive_the_stack(default):
    """LogRetention, not a LogGroup resource: a group that exists (observability off and on again,
    a fixed cluster name) is adopted instead of failing the deploy with "already exists"."""
    groups = {joined(props(r)["LogGroupName"]): props(r)["RetentionInDays"]
              for k, r in default.resources("Custom::LogRetention").items() if k.startswith("Observability")}
    assert groups == {f"/aws/containerinsights/${{ClusterC2E21B66}}/{g}": 30
                      for g in ("application", "dataplane", "host", "performance")}
    assert not [k for k in default.resources("AWS::Logs::LogGroup") if k.startswith("Observability")]


def test_the_admission_policy_leaves_the_agents_accounts_alone(default):
    assert "amazon-cloudwatch/cloudwatch-agent" in default.stack.serving.spec.service.admission_exempt_agents


def test_two_metric_filters_count_the_gates_lines_in_the_serving_namespace(default):
    resources = default.resources("AWS::Logs::MetricFilter")
    filters = {props(f)["MetricTransformations"][0]["MetricName"]: props(f) for f in resources.values()}
    (application,) = [k for k, r in default.resources("Custom::LogRetention").items()
                      if joined(props(r)["LogGroupName"]).endswith("/application")]
    assert all(application in f["DependsOn"] for f in resources.values())  # the group exists first
    assert sorted(filters) == sorted(LOG_METRICS)
    assert filters["TransportFallbackLines"]["FilterPattern"] == log_filter_pattern("inference", TRANSPORT_FALLBACK_LINES)
    assert filters["TransferFailureLines"]["FilterPattern"] == log_filter_pattern("inference", TRANSFER_FAILURE_LINES)
    for metric_filter in filters.values():
        (transformation,) = metric_filter["MetricTransformations"]
        assert transformation["MetricNamespace"] == OWN and transformation["MetricValue"] == "1"
        assert transformation["Dimensions"] == [{"Key": "Namespace", "Value": "$.kubernetes.namespace_name"}]


def _alarms(synthesized) -> dict[str, dict]:
    return {joined(props(a)["AlarmDescription"]).rsplit(", ", 1)[1].rstrip(")"): props(a)
            for a in synthesized.resources("AWS::CloudWatch::Alarm").values()}


def test_every_alarm_its_metric_threshold_and_action(default):
    alarms = _alarms(default)
    assert sorted(alarms) == sorted(alarm_names(disaggregated=True, continuous=True))  # what plan prices
    (topic_id,) = default.resources("AWS::SNS::Topic")
    dimensions = [{"Name": "Namespace", "Value": "inference"}, {"Name": "RayService", "Value": "ray-llm"}]
    ttft = alarms.pop("TtftP99AboveSlo")
    # The window's TTFT p99, by the lower edge of its histogram bucket (certainly at or above it),
    # against observability.ttft_p99_slo_ms (2000 by default), two periods of three.
    assert (ttft["Namespace"], ttft["MetricName"], ttft["Statistic"], ttft["Period"]) == (
        OWN, "TtftP99Floor", "Maximum", 900)
    assert (ttft["Threshold"], ttft["ComparisonOperator"], ttft["TreatMissingData"]) == (
        2000, "GreaterThanOrEqualToThreshold", "notBreaching")
    assert (ttft["EvaluationPeriods"], ttft["DatapointsToAlarm"]) == (3, 2) and ttft["Dimensions"] == dimensions
    assert ttft["AlarmActions"] == [{"Ref": topic_id}]
    replaced = alarms.pop("RayPodsReplaced")
    assert (replaced["MetricName"], replaced["Statistic"], replaced["Period"], replaced["Dimensions"]) == (
        "WorkerPodsReplaced", "Sum", 900, dimensions)
    assert (replaced["Threshold"], replaced["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    failed = alarms.pop("NixlFailedTransfers")
    assert (failed["MetricName"], failed["Statistic"], failed["Period"], failed["Dimensions"]) == (
        "NixlFailedTransfers", "Sum", 900, dimensions)
    assert (failed["Threshold"], failed["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    idle = alarms.pop("EfaIdleWhileServing")
    expression, *metrics = idle["Metrics"]
    # The floor is the KV cache of a one-token request (ServingSpec.kv_transfer_bytes(1)); judged
    # once a window served 20 requests per replica of the larger leg (1 here).
    floor = default.stack.serving.spec.kv_transfer_bytes(1)
    assert expression["Expression"] == f"IF(requests >= 20, IF(efa < {floor}, 1, 0), 0)"
    assert {m["Id"]: (m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Stat"], m["MetricStat"]["Period"],
                      m["MetricStat"]["Metric"]["Dimensions"]) for m in metrics} == {
        "requests": ("Requests", "Sum", 900, dimensions), "efa": ("MinNodeEfaBytes", "Minimum", 900, dimensions)}
    assert (idle["Threshold"], idle["ComparisonOperator"], idle["AlarmActions"]) == (
        1, "GreaterThanOrEqualToThreshold", [{"Ref": topic_id}])
    verified = alarms.pop("TransportNotVerified")
    # One run per 15-minute period; two failed or silent periods of three alarm.
    assert (verified["Namespace"], verified["MetricName"], verified["Statistic"], verified["Period"]) == (
        OWN, "TransportVerified", "Minimum", 900)
    assert (verified["EvaluationPeriods"], verified["DatapointsToAlarm"]) == (3, 2)
    assert verified["Dimensions"] == dimensions
    assert (verified["Threshold"], verified["ComparisonOperator"], verified["TreatMissingData"]) == (
        1, "LessThanThreshold", "breaching")
    assert verified["AlarmActions"] == [{"Ref": topic_id}]
    nodes = alarms.pop("NodeNotReady")
    (ready,) = nodes["Metrics"]
    # Ready nodes counted each minute against the node groups' sizes (1 system + 1 prefill + 1
    # decode): a node that is down reports nothing, so a minimum over the reporting ones would miss it.
    assert joined(ready["Expression"]) == (
        "SELECT SUM(node_status_condition_ready) FROM SCHEMA(ContainerInsights, ClusterName, InstanceId, NodeName) "
        "WHERE ClusterName = '${ClusterC2E21B66}'")
    assert ready["Period"] == 60
    assert (nodes["Threshold"], nodes["ComparisonOperator"]) == (3, "LessThanThreshold")
    assert (nodes["EvaluationPeriods"], nodes["DatapointsToAlarm"]) == (5, 3)
    assert nodes["AlarmActions"] == [{"Ref": topic_id}] and nodes["TreatMissingData"] == "notBreaching"
    for name, alarm in alarms.items():
        assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold", name
        assert alarm["AlarmActions"] == [{"Ref": topic_id}] and alarm["OKActions"] == [{"Ref": topic_id}], name
        assert alarm["TreatMissingData"] == "notBreaching", name
    for name, metric in (("TransportFallback", "TransportFallbackLines"), ("TransferFailures", "TransferFailureLines")):
        assert (alarms[name]["Namespace"], alarms[name]["MetricName"], alarms[name]["Statistic"]) == (OWN, metric, "Sum")
        assert alarms[name]["Dimensions"] == [{"Name": "Namespace", "Value": "inference"}]
    # A Metrics Insights query over the namespace: KubeRay pods have per-pod names, so a fixed
    # dimension would be orphaned by the next rollout.
    (query,) = alarms["PodRestarts"]["Metrics"]
    assert joined(query["Expression"]) == (
        "SELECT SUM(pod_number_of_container_restarts) FROM SCHEMA(ContainerInsights, ClusterName, Namespace, PodName) "
        "WHERE ClusterName = '${ClusterC2E21B66}' AND Namespace = 'inference'")


def test_an_email_subscription_only_when_configured(default, emailed):
    assert default.resources("AWS::SNS::Subscription") == {}
    (subscription,) = emailed.resources("AWS::SNS::Subscription").values()
    assert (props(subscription)["Protocol"], props(subscription)["Endpoint"]) == ("email", "oncall@example.com")
    (topic,) = emailed.resources("AWS::SNS::Topic").values()
    (policy,) = emailed.resources("AWS::SNS::TopicPolicy").values()
    assert "aws:SecureTransport" in json.dumps(props(policy))  # enforce_ssl


def test_the_dashboard_shows_gpus_efa_restarts_and_the_transport(default):
    (dashboard,) = default.resources("AWS::CloudWatch::Dashboard").values()
    body = joined(props(dashboard)["DashboardBody"])
    for needle in ("node_gpu_utilization", "node_gpu_memory_utilization", "node_efa_rx_bytes", "node_efa_tx_bytes",
                   "pod_number_of_container_restarts", "TransportFallbackLines", "TransferFailureLines",
                   "node_status_condition_ready", "GROUP BY NodeName", "TransportVerified",
                   # what continuous verification publishes of each window
                   "WorkerPodsReplaced", "Requests", "GeneratedTokensPerSecond", "TtftP50", "TtftP99", "TtftP99Floor", "ItlP50", "ItlP99",
                   "KvTransferBytes", "KvTransferTimeMean", "NixlFailedTransfers", "MinNodeEfaBytes",
                   '{"value":2000,"label":"TTFT p99 SLO"'):
        assert needle in body, needle
    assert body.count('"type":"alarm"') == 1


def test_colocated_has_no_kv_transfer_alarms_or_widgets(synth):
    colocated = synth({"topology": "colocated"})
    assert sorted(_alarms(colocated)) == sorted(alarm_names(disaggregated=False, continuous=True))
    assert not {"NixlFailedTransfers", "EfaIdleWhileServing"} & set(_alarms(colocated))
    (dashboard,) = colocated.resources("AWS::CloudWatch::Dashboard").values()
    body = joined(props(dashboard)["DashboardBody"])
    assert "TtftP99" in body and "KvTransferBytes" not in body and "MinNodeEfaBytes" not in body


def test_off_leaves_nothing_behind(synth):
    off = synth({"observability": {"enabled": False}})
    for kind in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard", "AWS::SNS::Topic", "AWS::Logs::MetricFilter"):
        assert off.resources(kind) == {}, kind
    assert "amazon-cloudwatch-observability" not in json.dumps(off.template_json)
    assert not [a for a in off.stack.serving.spec.service.admission_exempt_agents
                if a.startswith("amazon-cloudwatch/")]


@pytest.mark.parametrize(("settings", "field", "says"), [
    ({"alarm_email": "not-an-address"}, "alarm_email", "not an e-mail address"),
    ({"ttft_p99_slo_ms": 0}, "ttft_p99_slo_ms", "not a latency in milliseconds"),
    ({"verify_every_minutes": 7}, "verify_every_minutes", "not a period continuous verification can run at"),
])
def test_bad_settings_are_refused_with_the_field(settings, field, says):
    from ray_llm_eks.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=rf"observability\.{field}: {says}"):
        parse_config({"observability": settings}).specs()


def test_plan_adds_what_cloudwatch_charges_every_month(tmp_path):
    from typer.testing import CliRunner

    from ray_llm_eks.cli import app

    on = json.loads(CliRunner().invoke(app, ["plan", "--json"]).stdout)
    (line,) = [c for c in on["cost_lines"] if c["item"].startswith("CloudWatch:")]
    # 9 alarms, one of them metric math on two metrics (charged per metric: 10); 2 log metrics,
    # TransportVerified and 12 window figures.
    assert line["item"] == "CloudWatch: 1 dashboard, 9 alarms, 15 custom metrics"
    assert line["usd_per_hour"] == pytest.approx((3.00 + 10 * 0.10 + 15 * 0.30) / 730, abs=1e-6)
    assert any("Container Insights observations" in e for e in on["cost_excluded"])
    config = tmp_path / "off.yaml"
    config.write_text("strict: false\nobservability:\n  enabled: false\n")
    off = json.loads(CliRunner().invoke(app, ["plan", "--json", "--config", str(config)]).stdout)
    assert not [c for c in off["cost_lines"] if c["item"].startswith("CloudWatch:")]
    assert off["hourly_cost_usd"] == pytest.approx(on["hourly_cost_usd"] - line["usd_per_hour"], abs=1e-4)


def test_continuous_verification_may_only_put_metrics_into_its_namespace(default):
    roles = {k: r for k, r in default.resources("AWS::IAM::Role").items() if k.startswith("ServingMonitorRole")}
    (role,) = roles.values()
    conditions = props(role)["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert conditions["aws:RequestTag/kubernetes-service-account"] == "ray-llm-cv"
    (policy,) = [p for k, p in default.resources("AWS::IAM::Policy").items() if k.startswith("ServingMonitorRole")]
    assert props(policy)["PolicyDocument"]["Statement"] == [{
        "Action": "cloudwatch:PutMetricData", "Condition": {"StringEquals": {"cloudwatch:namespace": OWN}},
        "Effect": "Allow", "Resource": "*"}]
    (association,) = [a for a in default.resources("AWS::EKS::PodIdentityAssociation").values()
                      if props(a)["ServiceAccount"] == "ray-llm-cv"]
    assert props(association)["Namespace"] == "inference"


def test_each_deployment_has_its_own_namespace_no_other_monitor_may_write(default, synth):
    """Another stack (or another namespace or service) in the same account: another namespace, so
    its monitor role's condition does not admit this deployment's TransportVerified."""
    assert default.stack.serving.metric_namespace == OWN
    other = synth(ANOTHER_STACK)
    assert other.stack.serving.metric_namespace == "RayLlmEks/RayLlmEksStaging/inference/ray-llm"
    (policy,) = [p for k, p in other.resources("AWS::IAM::Policy").items() if k.startswith("ServingMonitorRole")]
    [statement] = props(policy)["PolicyDocument"]["Statement"]
    assert statement["Condition"]["StringEquals"]["cloudwatch:namespace"] == other.stack.serving.metric_namespace
    # Every alarm (its metric, or each metric of its expression) reads the deployment's own
    # namespace, never the shared prefix.

    def namespaces(value) -> set[str]:
        if isinstance(value, dict):
            own = {value["Namespace"]} if isinstance(value.get("Namespace"), str) else set()
            return own.union(*(namespaces(v) for v in value.values()))
        if isinstance(value, list):
            return set().union(*(namespaces(v) for v in value))
        return set()

    assert namespaces(list(_alarms(default).values())) == {OWN}
    # The dashboard's widgets too (its body is a joined string).
    (dashboard,) = default.resources("AWS::CloudWatch::Dashboard").values()
    body = joined(props(dashboard)["DashboardBody"])
    assert f'"{OWN}"' in body and '"RayLlmEks",' not in body


def test_off_means_no_cronjob_and_no_monitor_role(synth):
    off = synth({"observability": {"enabled": False}})
    assert off.stack.serving.monitor_role is None
    assert off.stack.serving.verification_chart.cron_job is None


def test_the_published_metric_is_the_one_the_alarm_watches():
    """verification/publish.py, against moto's CloudWatch."""
    import boto3
    from moto import mock_aws

    from ray_llm_eks.verification import publish

    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    with mock_aws():
        client = boto3.client("cloudwatch", region_name="us-west-2")
        publish.publish(OWN, "inference", "ray-llm", True, client=client)
        publish.publish(OWN, "inference", "ray-llm", False, client=client)
        metrics = client.list_metrics(Namespace=OWN)["Metrics"]
        assert {m["MetricName"] for m in metrics} == {"TransportVerified"}
        assert {tuple(sorted((d["Name"], d["Value"]) for d in m["Dimensions"])) for m in metrics} == {
            (("Namespace", "inference"), ("RayService", "ray-llm"))}
        values = client.get_metric_data(MetricDataQueries=[{"Id": "v", "MetricStat": {"Metric": metrics[0], "Period": 60,
                                                                                      "Stat": "Minimum"}}],
                                        StartTime=now - datetime.timedelta(minutes=5),
                                        EndTime=now + datetime.timedelta(minutes=5))
        assert min(values["MetricDataResults"][0]["Values"]) == 0.0


def test_the_node_count_follows_the_node_groups(synth):
    bigger = synth(ANOTHER_STACK)
    (alarm,) = [a for a in bigger.resources("AWS::CloudWatch::Alarm").values()
                if "NodeNotReady" in joined(props(a)["AlarmDescription"])]
    assert props(alarm)["Threshold"] == 5
