"""Spend limits on AWS: the cost-allocation tag, a monthly AWS Budgets budget on it, and the hourly cap.

``InferenceSpend`` reads a :class:`~ray_llm_eks.base.spend.SpendSpec`:

- it refuses a deployment whose hourly cost at every GPU node group's ``max_size`` exceeds
  ``max_hourly_usd`` (``base.composition.check_max_hourly``, the check the configuration and ``plan``
  run, with the same sentence);
- it tags every resource of its stack ``<cost_allocation_tag_key>=<value>`` (the stack name unless
  set), and writes the tag into every launch template's instance and volume tag specifications:
  an EKS managed node group's own tags do not reach its EC2 instances, whose hours are most of the
  bill. The placement group is left out: its ``Tags`` are create-only (cfn-lint's schema,
  ``ray_llm_eks/data/generated/create_only_properties.json``), so tagging it would replace it;
- with ``monthly_budget_usd``, an ``AWS::Budgets::Budget`` of type COST, monthly, filtered on the
  tag, whose alerts (``SpendSpec.alerts``) go to the observability topic. The topic's policy lets
  ``budgets.amazonaws.com`` publish, from this account's budgets only (AWS Cost Management user
  guide, "Creating an Amazon SNS topic for budget notifications": ``SNS:Publish`` with
  ``aws:SourceAccount`` and ``aws:SourceArn`` ``arn:aws:budgets::<account>:*``). A KMS-encrypted
  topic also needs the key to let the service use it (same page: ``kms:GenerateDataKey*`` and
  ``kms:Decrypt``); the library's topic is not encrypted, a topic given with a ``master_key`` gets
  that statement on its key.

The budget only sees the tag's costs once the tag is activated as a cost allocation tag in the
Billing console (docs/deploying.md, "Spend limits and the cost allocation tag"); until then it
reports nothing.
"""

from __future__ import annotations

from typing import Any, Mapping

import jsii
from aws_cdk import Annotations, IAspect, Aspects, Stack, Tags, Token, aws_budgets as budgets, aws_ec2 as ec2, aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct, IConstruct

from ..base import infrastructure as infra
from ..base.cost import Footprint
from ..base.errors import SpecError, problem
from ..base.composition import check_max_hourly
from ..base.spend import SpendSpec, needs_topic_problem
from .observability import InferenceObservability
from .serving import RayLlmServing
from .validation import ConstructValidationError, spec_prop

BUDGETS_PRINCIPAL = "budgets.amazonaws.com"
UNTAGGED_RESOURCE_TYPES = ("AWS::EC2::PlacementGroup",)
"""Resource types whose ``Tags`` are create-only: a tag added later would replace them."""
TAGGED_LAUNCHED_RESOURCES = ("instance", "volume", "network-interface")
"""What a launch template tags at launch: the nodes, their root volumes and their network
interfaces (EFA ones included)."""


@jsii.implements(IAspect)
class _LaunchTemplateTags:
    """Adds the tag to each launch template's ``TagSpecifications`` for what it launches."""

    def __init__(self, key: str, value: str) -> None:
        self.key, self.value = key, value

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, ec2.CfnLaunchTemplate):
            return
        # A launch template of the user's own in the same stack keeps its tags: ours is added beside them.
        data = node.launch_template_data
        existing = None if data is None or Token.is_unresolved(data) else data.tag_specifications
        if existing is not None and (Token.is_unresolved(existing) or not all(
                isinstance(s, ec2.CfnLaunchTemplate.TagSpecificationProperty) and not Token.is_unresolved(s.tags or [])
                for s in existing)):
            Annotations.of(node).add_warning_v2(
                "ray-llm-eks:spend-launch-template-tags",
                f"the cost-allocation tag {self.key} is not added to this launch template's TagSpecifications: "
                "they are not known at synth (a token); add the tag to what it launches, or the budget misses it")
            return
        tags: dict[str, list[dict[str, str]]] = {kind: [] for kind in TAGGED_LAUNCHED_RESOURCES}
        for spec in existing or []:
            tags.setdefault(spec.resource_type, []).extend(
                {"Key": _field(tag, "key"), "Value": _field(tag, "value")} for tag in spec.tags or [])
        for kind in TAGGED_LAUNCHED_RESOURCES:
            tags[kind] = [tag for tag in tags[kind] if tag["Key"] != self.key] + [{"Key": self.key, "Value": self.value}]
        node.add_property_override("LaunchTemplateData.TagSpecifications",
                                   [{"ResourceType": kind, "Tags": kind_tags} for kind, kind_tags in tags.items()])


def _field(tag: Any, name: str) -> str:
    """A tag given as ``CfnTag`` or as a dict (both are accepted by the L1 construct)."""
    return tag[name] if isinstance(tag, Mapping) else getattr(tag, name)


class InferenceSpend(Construct):
    """The spend limits of the deployment ``serving`` runs (docs/configuration.md, ``spend``).

    :param spend: a ``SpendSpec``, or a dict of its fields.
    :param serving: the ``RayLlmServing`` whose node groups are priced (at their max sizes).
    :param observability: the ``InferenceObservability`` whose topic gets the budget's alerts;
        required with ``monthly_budget_usd`` (refused without: a budget warning nobody is no limit).
    :param footprint: where the nodes run and the NAT gateways paid for, as ``plan`` takes it.
        Default: the serving's region and the library VPC's one NAT gateway.

    Public attributes: ``settings`` (the ``SpendSpec``), ``tag`` (key, value), ``max_hourly_usd_at_max``
    (the checked cost, or None without a cap), ``budget`` (the ``CfnBudget``, or None).
    """

    def __init__(self, scope: Construct, construct_id: str, *, spend: SpendSpec | Mapping[str, Any],
                 serving: RayLlmServing, observability: InferenceObservability | None = None,
                 footprint: Footprint | None = None) -> None:
        super().__init__(scope, construct_id)
        if not isinstance(serving, RayLlmServing):
            raise ConstructValidationError(self, [problem(
                "serving", serving, "not a RayLlmServing", "the RayLlmServing construct whose node groups are priced")])
        settings = spec_prop(self, "spend", SpendSpec, spend, lambda: None)
        if settings is None:
            raise ConstructValidationError(self, [problem("spend", None, "no spend limits given",
                                                          "SpendSpec(...) or a dict of its fields")])
        self.settings: SpendSpec = settings
        if observability is not None and not isinstance(observability, InferenceObservability):
            raise ConstructValidationError(self, [problem(
                "observability", observability, "not an InferenceObservability",
                "the InferenceObservability whose topic gets the alerts, or None")])
        if needs_topic_problem(settings, observability is not None) is not None:
            # The configuration's rule, in this construct's props.
            raise ConstructValidationError(self, [problem(
                "observability", None, "the budget's alerts (spend.monthly_budget_usd) go to the observability SNS "
                "topic, and none was given", "observability=InferenceObservability(...), or no monthly_budget_usd")])
        stack = Stack.of(self)
        # The data-plane AZ does not enter the cost (base.cost prices the region and the NAT gateways).
        footprint = footprint or Footprint(serving.spec.region, "", infra.DEFAULT_NAT_GATEWAYS)
        try:
            self.max_hourly_usd_at_max = check_max_hourly(settings, serving.specs, footprint)
        except SpecError as error:
            raise ConstructValidationError(self, [error.within("spend")]) from None

        key, value = settings.cost_allocation_tag_key, settings.tag_value(stack.stack_name)
        self.tag = (key, value)
        Tags.of(stack).add(key, value, exclude_resource_types=list(UNTAGGED_RESOURCE_TYPES))
        Aspects.of(stack).add(_LaunchTemplateTags(key, value))

        self.budget: budgets.CfnBudget | None = None
        if settings.monthly_budget_usd is None:
            return
        assert observability is not None
        topic = observability.topic
        self._allow_budgets(topic, stack)
        self.budget = budgets.CfnBudget(
            self, "Budget",
            budget=budgets.CfnBudget.BudgetDataProperty(
                budget_type="COST", time_unit="MONTHLY",
                budget_limit=budgets.CfnBudget.SpendProperty(amount=settings.monthly_budget_usd, unit="USD"),
                cost_filters={"TagKeyValue": [settings.tag_filter(stack.stack_name)]},
            ),
            notifications_with_subscribers=[
                budgets.CfnBudget.NotificationWithSubscribersProperty(
                    notification=budgets.CfnBudget.NotificationProperty(
                        notification_type=kind, comparison_operator="GREATER_THAN", threshold=percent,
                        threshold_type="PERCENTAGE"),
                    subscribers=[budgets.CfnBudget.SubscriberProperty(subscription_type="SNS",
                                                                      address=topic.topic_arn)])
                for kind, percent in settings.alerts()],
        )
        # The service checks it may publish when the budget is created: the policy first.
        policy = topic.node.try_find_child("Policy")
        if policy is not None:
            self.budget.node.add_dependency(policy)

    @staticmethod
    def _allow_budgets(topic: sns.ITopic, stack: Stack) -> None:
        conditions = {"StringEquals": {"aws:SourceAccount": stack.account},
                      "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:budgets::{stack.account}:*"}}
        topic.add_to_resource_policy(iam.PolicyStatement(
            sid="AWSBudgetsSNSPublishingPermissions", principals=[iam.ServicePrincipal(BUDGETS_PRINCIPAL)],
            actions=["SNS:Publish"], resources=[topic.topic_arn], conditions=conditions))
        key = getattr(topic, "master_key", None)
        if key is not None:
            key.add_to_resource_policy(iam.PolicyStatement(
                principals=[iam.ServicePrincipal(BUDGETS_PRINCIPAL)], actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                resources=["*"], conditions=conditions))
