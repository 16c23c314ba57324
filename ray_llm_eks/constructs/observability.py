"""Container Insights, the transport's log metrics, alarms on one topic, and a dashboard.

``InferenceObservability`` installs the Amazon CloudWatch Observability EKS add-on on its own EKS
Pod Identity role. With its defaults (enhanced observability, accelerated compute metrics,
container logs) the add-on's agent publishes Container Insights metrics in the
``ContainerInsights`` namespace, among them, for this deployment:

- GPU: ``node_gpu_utilization``, ``node_gpu_memory_utilization`` (DCGM, on the GPU instance
  types the add-on knows; agent ``translator/translate/otel/exporter/awsemf/kubernetes.go``);
- EFA: ``node_efa_rx_bytes``, ``node_efa_tx_bytes`` and the RDMA counters (agent v1.300037.0 and
  later, chart 1.5.4; read from ``/sys/class/infiniband`` every 20 s, as deltas);
- ``pod_number_of_container_restarts`` and ``node_status_condition_ready``;

and its Fluent Bit ships every container's lines to ``/aws/containerinsights/<cluster>/application``,
where two metric filters count the NIXL and vLLM lines the deployment gate fails on
(``base/observability.py``).

KubeRay's pods are owned by a RayCluster, so Container Insights names each by its full pod name
(``PodName`` is the owner's name only for ReplicaSets, DaemonSets, Jobs and the like): an alarm
on one pod's metric would be orphaned by the next rollout. The restart alarm therefore uses a
CloudWatch Metrics Insights query over the namespace, which follows whatever pods exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Fn, aws_cloudwatch as cloudwatch, aws_cloudwatch_actions as actions
from aws_cdk import aws_eks_v2 as eks, aws_iam as iam, aws_logs as logs, aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from ..base import infrastructure as infra
from ..base.errors import problem
from ..base.placement import WORKER_ROLES
from ..base.serving import Topology
from ..base.observability import (
    ObservabilitySpec,
    ADDON_NAME,
    AGENT_NAMESPACE,
    AGENT_SERVICE_ACCOUNT,
    EFA_IDLE_REQUESTS_PER_REPLICA,
    SERVING_METRIC,
    TRANSFER_FAILURE_LINES,
    TRANSPORT_VERIFIED,
    TRANSPORT_FALLBACK_LINES,
    log_filter_pattern,
)
from .cluster import ClusterLike, eks_cluster_of, open_namespace
from .identity import associate_addon, pod_identity_role
from .nag import acknowledge_log_retention, acknowledge_observability
from .serving import RayLlmServing
from .validation import ConstructValidationError, validated

AGENT_POLICIES = ("CloudWatchAgentServerPolicy",)
"""What the add-on's documentation asks of the agent's role (CloudWatch user guide, "Install the
CloudWatch agent with the Amazon CloudWatch Observability EKS add-on"); no X-Ray: Application
Signals is off (below)."""
ADDON_CONFIGURATION = {
    # Application Signals is on by default, and with it "monitorAllServices": the operator marks
    # every Deployment a Service selects for auto-instrumentation, the KubeRay operator's included
    # (chart amazon-cloudwatch-observability, templates/_helpers.tpl, values.yaml
    # manager.applicationSignals.autoMonitor). Nothing here needs traces; off, the chart sets
    # monitorAllServices false. Container Insights and container logs are unaffected.
    "applicationSignals": {"enabled": False},
}
LOG_GROUPS = ("application", "dataplane", "host", "performance")
"""The add-on's log groups under /aws/containerinsights/<cluster>/ (Fluent Bit creates the first
three, the agent the last, all without a retention)."""
PERIOD = Duration.minutes(5)
DEFAULT_ADDON_VERSION = "v6.2.0-eksbuild.1"
"""Pinned like every chart here, and the first build that takes ``applicationSignals.enabled``
(helm-charts commit ffea3d4, chart 6.2.0; the CloudWatch user guide names ``v6.2.0-eksbuild.1``).
Check that your cluster's Kubernetes version offers it: ``aws eks describe-addon-versions
--addon-name amazon-cloudwatch-observability --kubernetes-version 1.35``."""


def _statistic(figure: str) -> str:
    """How a period with more than one run (a manual one beside the CronJob's) combines: the worst
    latency, the least EFA, the mean rate, the sum of counts."""
    if figure.endswith("_ms"):
        return "Maximum"
    return {"min_node_efa_bytes": "Minimum", "generation_tokens_per_second": "Average"}.get(figure, "Sum")


class InferenceObservability(Construct):
    """Metrics, log metrics, alarms and a dashboard for the deployment ``serving`` runs.

    Everything it watches derives from ``serving``: the namespace and service name, the settings
    ``RayLlmServing(observability=...)`` was given (the alarm address, the TTFT SLO), how often
    continuous verification publishes ``TransportVerified`` (``serving.verification``), the nodes
    that should be Ready (the system nodes plus each leg's ``min_size``: autoscaled groups may
    shrink to it), whether KV caches cross the network (the topology), the EFA floor (the KV cache
    of a one-token request) and how many requests a window must serve before the EFA alarm judges
    it (20 per model replica of the larger leg at its ``max_size``).

    :param serving: the ``RayLlmServing`` to watch, built with ``observability`` enabled (so its
        admission policy leaves the agent's namespace alone).
    :param cluster: an ``InferenceCluster`` or any ``aws_eks_v2`` cluster (EKS Pod Identity agent
        installed). Default: the one ``serving`` runs on.
    :param log_retention_days: of the add-on's log groups. Default 30.
    :param addon_version: the add-on build. Default ``v6.2.0-eksbuild.1``, the first whose
        configuration takes ``applicationSignals.enabled`` (chart 6.2.0); None: EKS's default.
    :param after: constructs the add-on waits for (the node groups: its pods need a node).

    Public attributes: ``settings`` (the ``ObservabilitySpec``), ``addon``, ``agent_role``,
    ``application_logs``, ``log_retentions``, ``topic``, ``metric_filters`` and ``alarms`` (by
    name), ``dashboard``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, serving: RayLlmServing,
                 cluster: ClusterLike | None = None,
                 log_retention_days: int = infra.DEFAULT_FLOW_LOG_RETENTION_DAYS,
                 addon_version: str | None = DEFAULT_ADDON_VERSION,
                 after: Sequence[Construct] = ()) -> None:
        super().__init__(scope, construct_id)
        if not isinstance(serving, RayLlmServing):
            raise ConstructValidationError(self, [problem(
                "serving", serving, "not a RayLlmServing", "the RayLlmServing construct this watches")])
        if serving.observability is None or not serving.observability.enabled:
            raise ConstructValidationError(self, [problem(
                "serving", serving.node.path, "built without observability, so its admission policy would refuse "
                "the CloudWatch agent's pods (they need host access)",
                "RayLlmServing(..., observability=ObservabilitySpec()) for the serving this watches")])
        self.settings: ObservabilitySpec = serving.observability
        spec = serving.spec
        namespace, service_name = spec.namespace, spec.service_name
        # This deployment's own metric namespace: only its monitor role may put metrics there.
        own_namespace = serving.metric_namespace
        alarm_email, ttft_p99_slo_ms = self.settings.alarm_email, self.settings.ttft_p99_slo_ms
        verification_every_minutes = serving.verification.every_minutes
        expected_nodes = spec.system.count + sum(spec.pool(role).min_size for role in WORKER_ROLES)
        disaggregated = spec.topology is Topology.disaggregated
        efa_floor_bytes = spec.kv_transfer_bytes(1)
        efa_idle_min_requests = EFA_IDLE_REQUESTS_PER_REPLICA * max(spec.replica_range(role)[1] for role in WORKER_ROLES)
        cluster = cluster if cluster is not None else serving.cluster
        validated(self, infra.retention_days, log_retention_days, "log_retention_days")
        target = eks_cluster_of(cluster)
        cluster_name = target.cluster_name

        self.agent_role = pod_identity_role(
            self, "AgentRole", cluster_arn=target.cluster_arn, namespace=AGENT_NAMESPACE,
            service_account=AGENT_SERVICE_ACCOUNT,
            description=f"CloudWatch agent and Fluent Bit ({AGENT_NAMESPACE}/{AGENT_SERVICE_ACCOUNT}) via EKS Pod Identity")
        for policy in AGENT_POLICIES:
            self.agent_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(policy))

        # The add-on's log groups get a retention before it runs (its Fluent Bit and agent would
        # create them with none). LogRetention, not a LogGroup resource: it creates a group or
        # adopts the one there, so turning observability off and on, or a fixed cluster name,
        # never meets "already exists"; the groups outlive the stack, as log data should.
        self.log_retentions: dict[str, logs.LogRetention] = {}
        for group in LOG_GROUPS:
            retention = logs.LogRetention(
                self, f"{group.capitalize()}LogRetention",
                log_group_name=Fn.join("", ["/aws/containerinsights/", cluster_name, f"/{group}"]),
                retention=logs.RetentionDays.ONE_MONTH)
            # The days as given (the enum would need a table kept in step with CloudWatch's list).
            retention.node.default_child.add_property_override("RetentionInDays", log_retention_days)
            self.log_retentions[group] = retention
        acknowledge_log_retention(self.log_retentions["application"])
        self.application_logs = logs.LogGroup.from_log_group_name(
            self, "ApplicationLogs", Fn.join("", ["/aws/containerinsights/", cluster_name, "/application"]))

        self.addon = eks.Addon(self, "Addon", cluster=target, addon_name=ADDON_NAME, addon_version=addon_version,
                               configuration_values=ADDON_CONFIGURATION)
        associate_addon(self.addon, self.agent_role, AGENT_SERVICE_ACCOUNT)
        # The namespace and a policy admitting all before the agent's pods: under the VPC CNI's
        # strict mode a pod no policy selects reaches nothing (cluster.ADDON_CONFIGURATION).
        self.namespace_policy = open_namespace(self, "NamespacePolicy", cluster=target, namespace=AGENT_NAMESPACE,
                                               create_namespace=True)
        self.addon.node.add_dependency(self.namespace_policy)
        for retention in self.log_retentions.values():
            self.addon.node.add_dependency(retention)
        for construct in after:
            self.addon.node.add_dependency(construct)

        self.topic = sns.Topic(self, "Alarms", display_name=f"ray-llm-eks {namespace}/{service_name}", enforce_ssl=True)
        if alarm_email is not None:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))

        self.metric_filters: dict[str, logs.MetricFilter] = {}
        for metric_name, lines in (("TransportFallbackLines", TRANSPORT_FALLBACK_LINES),
                                   ("TransferFailureLines", TRANSFER_FAILURE_LINES)):
            self.metric_filters[metric_name] = logs.MetricFilter(
                self, metric_name, log_group=self.application_logs, metric_namespace=own_namespace,
                metric_name=metric_name, metric_value="1",
                filter_pattern=logs.FilterPattern.literal(log_filter_pattern(namespace, lines)),
                dimensions={"Namespace": "$.kubernetes.namespace_name"})
            # PutMetricFilter needs the group to exist.
            self.metric_filters[metric_name].node.add_dependency(self.log_retentions["application"])

        def lines_metric(name: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(namespace=own_namespace, metric_name=name, dimensions_map={"Namespace": namespace},
                                     statistic="Sum", period=PERIOD)

        restarts = cloudwatch.MathExpression(
            expression=Fn.join("", [
                "SELECT SUM(pod_number_of_container_restarts) FROM SCHEMA(ContainerInsights, ClusterName, Namespace, "
                "PodName) WHERE ClusterName = '", cluster_name, f"' AND Namespace = '{namespace}'"]),
            label="Ray pod restarts", period=PERIOD)
        # node_status_condition_ready is 1 for a Ready node (cluster_failed_node_count counts
        # pressure conditions, not Ready: opentelemetry-collector-contrib k8sclient/node.go). Each
        # node's own agent reports it, so a node that is down reports nothing: the alarm counts
        # Ready nodes per minute (SUM over the nodes, one datapoint each) against the node groups'
        # sizes, rather than taking a minimum over the nodes that still report.
        nodes_ready = cloudwatch.MathExpression(
            expression=Fn.join("", [
                "SELECT SUM(node_status_condition_ready) FROM SCHEMA(ContainerInsights, ClusterName, InstanceId, NodeName) "
                "WHERE ClusterName = '", cluster_name, "'"]),
            label="Ready nodes", period=Duration.minutes(1))
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        # One action object for every alarm: SnsAction.bind only hands back the topic's ARN (aws-cdk
        # packages/aws-cdk-lib/aws-cloudwatch-actions/lib/sns.ts:15-17; the same in aws-cdk-lib 2.275.0's
        # aws-cloudwatch-actions/lib/sns.js), so one jsii object serves them all.
        on_topic = actions.SnsAction(self.topic)

        def alarm(name: str, metric: cloudwatch.IMetric, description: str, *, threshold: float = 1,
                  below: bool = False, above: bool = False, evaluation_periods: int = 1, datapoints_to_alarm: int | None = None,
                  missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING) -> None:
            """One alarm on the topic, ALARM and OK alike; at or above ``threshold``, below it, or above it."""
            created = cloudwatch.Alarm(
                self, name, metric=metric, threshold=threshold, evaluation_periods=evaluation_periods,
                datapoints_to_alarm=datapoints_to_alarm,
                comparison_operator=(cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD if below
                                     else cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD if above
                                     else cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD),
                treat_missing_data=missing,
                alarm_description=f"{description} ({namespace}/{service_name}; docs/observability.md, {name})")
            created.add_alarm_action(on_topic)
            created.add_ok_action(on_topic)
            self.alarms[name] = created

        alarm("TransportFallback", lines_metric("TransportFallbackLines"),
              "A worker logged a NIXL transport fallback or failure: the KV cache may no longer cross EFA")
        alarm("TransferFailures", lines_metric("TransferFailureLines"), "vLLM logged failed NIXL KV transfers")
        alarm("PodRestarts", restarts, "A container of a pod in the serving namespace restarted")
        alarm("NodeNotReady", nodes_ready, f"Fewer than {expected_nodes} Ready nodes", threshold=expected_nodes,
              below=True, evaluation_periods=5, datapoints_to_alarm=3)
        verified: cloudwatch.Metric | None = None
        serving: dict[str, cloudwatch.Metric] = {}
        if verification_every_minutes is not None:
            every = Duration.minutes(verification_every_minutes)

            def published(name: str, statistic: str) -> cloudwatch.Metric:
                # Continuous verification's own metrics: one datapoint per run, stable dimensions
                # (no pod or node in them), so no rollout or node replacement orphans an alarm.
                return cloudwatch.Metric(namespace=own_namespace, metric_name=name, statistic=statistic,
                                         dimensions_map={"Namespace": namespace, "RayService": service_name},
                                         period=every)

            # One run per period; two failed or silent periods out of three (a run failed twice, or
            # the CronJob stopped or cannot publish). One bad run alone is not enough: a deploy's
            # rollout, which continuous verification sits out, can leave one period without a run.
            verified = published(TRANSPORT_VERIFIED, "Minimum")
            alarm("TransportNotVerified", verified,
                  "Continuous verification failed, or did not report: the endpoint did not answer or the KV cache "
                  "did not cross EFA", below=True, evaluation_periods=3, datapoints_to_alarm=2,
                  missing=cloudwatch.TreatMissingData.BREACHING)
            serving = {key: published(metric, _statistic(key)) for key, metric in SERVING_METRIC.items()}
            # On the p99's certain lower bound, not the interpolated p99: vLLM's buckets are wide
            # (1 s to 2.5 s is one), and inside a bucket the interpolation depends on how many
            # requests fell there, not on their latency. The p99 is at least the lower edge of the
            # bucket holding it (disaggregated: of either leg's, since a client's first token
            # comes after both), so this fires only when the SLO is certainly missed: at an SLO on
            # a bucket bound exactly, otherwise from the next bound up (2.5 s for 2 s).
            # Two windows of three: one slow window (a burst, a cold replica) is not an incident.
            # A window with no request publishes no TTFT, which is not breaching.
            alarm("TtftP99AboveSlo", serving["ttft_p99_floor_ms"],
                  f"Time to first token p99 certainly at or above {ttft_p99_slo_ms} ms (the lower edge of its "
                  "histogram bucket) in the windows between continuous verification runs", threshold=ttft_p99_slo_ms,
                  evaluation_periods=3, datapoints_to_alarm=2)
            # Restarts keep a pod's name (PodRestarts); a rescheduled pod comes back under another.
            alarm("RayPodsReplaced", serving["worker_pods_replaced"],
                  "A Ray worker pod was replaced by another in the same RayCluster (its node drained, lost or "
                  "replaced, or, with the Ray autoscaler, its container crashed): its replicas reloaded the model")
            if disaggregated:
                alarm("NixlFailedTransfers", serving["nixl_failed_transfers"],
                      "vLLM counted failed NIXL KV transfers since the previous continuous verification run")
                # Metric math on the two series continuous verification publishes: a node that
                # moved less than one request's KV cache in a window that served enough requests
                # to reach every replica. The minimum over nodes is computed per run from the
                # nodes there, so a replaced node needs no change here.
                idle = cloudwatch.MathExpression(
                    expression=f"IF(requests >= {efa_idle_min_requests}, IF(efa < {efa_floor_bytes}, 1, 0), 0)",
                    using_metrics={"requests": serving["requests"], "efa": serving["min_node_efa_bytes"]},
                    label="GPU node with no EFA traffic while serving", period=every)
                alarm("EfaIdleWhileServing", idle,
                      f"A GPU node moved under {efa_floor_bytes} bytes over EFA in a window that served at least "
                      f"{efa_idle_min_requests} requests: its KV cache may cross another path")

        def per_node(metric_name: str, statistic: str = "AVG") -> cloudwatch.MathExpression:
            return cloudwatch.MathExpression(
                expression=Fn.join("", [
                    f"SELECT {statistic}({metric_name}) FROM SCHEMA(ContainerInsights, ClusterName, InstanceId, NodeName) "
                    "WHERE ClusterName = '", cluster_name, "' GROUP BY NodeName"]),
                label=metric_name, period=Duration.minutes(1))

        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", widgets=[
            [cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24, height=3)],
            [cloudwatch.GraphWidget(title="GPU utilization per node (%)", left=[per_node("node_gpu_utilization")],
                                    width=12),
             cloudwatch.GraphWidget(title="GPU memory utilization per node (%)",
                                    left=[per_node("node_gpu_memory_utilization")], width=12)],
            [cloudwatch.GraphWidget(title="EFA bytes received per node", left=[per_node("node_efa_rx_bytes", "SUM")],
                                    width=12),
             cloudwatch.GraphWidget(title="EFA bytes sent per node", left=[per_node("node_efa_tx_bytes", "SUM")],
                                    width=12)],
            [cloudwatch.GraphWidget(title="Transport log lines (fallback, failed transfers)",
                                    left=[lines_metric("TransportFallbackLines"), lines_metric("TransferFailureLines")],
                                    width=8),
             cloudwatch.GraphWidget(title="Ray pod restarts", left=[restarts], width=8),
             cloudwatch.GraphWidget(title=f"Ready nodes (of {expected_nodes})", left=[nodes_ready], width=8)],
            *(self._serving_widgets(serving, ttft_p99_slo_ms, disaggregated) if serving else []),
            *([[cloudwatch.GraphWidget(title="TransportVerified (continuous verification: 1 pass, 0 fail)",
                                       left=[verified], width=24, left_y_axis=cloudwatch.YAxisProps(min=0, max=1))]]
              if verified is not None else []),
        ])
        acknowledge_observability(self)

    @staticmethod
    def _serving_widgets(serving: dict[str, cloudwatch.Metric], ttft_p99_slo_ms: int,
                         disaggregated: bool) -> list[list[cloudwatch.IWidget]]:
        """What the deployment served, per window between continuous verification runs."""
        slo = cloudwatch.HorizontalAnnotation(value=ttft_p99_slo_ms, label="TTFT p99 SLO")
        rows: list[list[cloudwatch.IWidget]] = [
            [cloudwatch.GraphWidget(title="Requests served (per window)", left=[serving["requests"]], width=8),
             cloudwatch.GraphWidget(title="Generated tokens per second", left=[serving["generation_tokens_per_second"]],
                                    width=8),
             cloudwatch.GraphWidget(title="Time to first token p50 / p99, and the p99's bucket floor (ms)",
                                    left=[serving["ttft_p50_ms"], serving["ttft_p99_ms"], serving["ttft_p99_floor_ms"]],
                                    left_annotations=[slo], width=8)],
            [cloudwatch.GraphWidget(title="Inter-token latency p50 / p99 (ms)",
                                    left=[serving["itl_p50_ms"], serving["itl_p99_ms"]], width=8)],
            [cloudwatch.GraphWidget(title="Ray worker pods replaced (per window)",
                                    left=[serving["worker_pods_replaced"]], width=8)],
        ]
        if disaggregated:
            rows[1] += [
                cloudwatch.GraphWidget(title="KV transfer: bytes (NIXL) and mean time (ms)",
                                       left=[serving["kv_transfer_bytes"]], right=[serving["kv_transfer_mean_ms"]],
                                       width=8),
                cloudwatch.GraphWidget(title="Failed NIXL transfers; least EFA bytes of a GPU node",
                                       left=[serving["nixl_failed_transfers"]], right=[serving["min_node_efa_bytes"]],
                                       width=8)]
        return rows
